//! SCMP_ACT_NOTIFY through the runc command line, kaji-runtime against runc: the filter's
//! listener fd goes to the seccomp agent at `listenerPath` with the container's process state,
//! and the agent's answer is what the container's syscall returns. Root only, needs
//! busybox-static and runc.

mod common;

use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::process::Stdio;

use common::{Cli, Fixture};
use libseccomp::{ScmpNotifReq, ScmpNotifResp, ScmpNotifRespFlags};
use oci_spec::runtime::{LinuxSeccompAction, LinuxSyscallBuilder};
use serde_json::Value;

/// One agent session: the message and fd from the runtime, then (`answer`) one notification
/// answered with ENOSPC. Returns the message and the syscall it was asked about.
fn agent(listener: &UnixListener, answer: bool) -> anyhow::Result<(Value, String)> {
    let ready = |fd: std::os::fd::BorrowedFd<'_>| -> anyhow::Result<bool> {
        let mut poll = [nix::poll::PollFd::new(fd, nix::poll::PollFlags::POLLIN)];
        Ok(nix::poll::poll(&mut poll, nix::poll::PollTimeout::from(10_000u16))? == 1)
    };
    anyhow::ensure!(ready(std::os::fd::AsFd::as_fd(listener))?, "the runtime never connected");
    let (conn, _) = listener.accept()?;
    let mut buf = vec![0u8; 64 * 1024];
    let (n, fd) = kaji_runtime::sys::recv_with_fd(std::os::fd::AsFd::as_fd(&conn), &mut buf)?;
    let message: Value = serde_json::from_slice(&buf[..n])?;
    let fd: OwnedFd = fd.ok_or_else(|| anyhow::anyhow!("no fd with the message"))?;
    if !answer {
        return Ok((message, String::new()));
    }
    anyhow::ensure!(ready(std::os::fd::AsFd::as_fd(&fd))?, "no notification");
    let req = ScmpNotifReq::receive(fd.as_raw_fd())?;
    let name = req.data.syscall.get_name()?;
    ScmpNotifResp::new_error(req.id, -libc::ENOSPC, ScmpNotifRespFlags::empty()).respond(fd.as_raw_fd())?;
    Ok((message, name))
}

/// Runs `runtime` (a runtime command) while [`agent`] serves one session on `listener`.
fn with_agent<T>(
    listener: &UnixListener,
    answer: bool,
    runtime: impl FnOnce() -> anyhow::Result<T>,
) -> anyhow::Result<((Value, String), T)> {
    std::thread::scope(|s| {
        let session = s.spawn(|| agent(listener, answer));
        let out = runtime();
        let session = session.join().map_err(|_| anyhow::anyhow!("agent panicked"))?;
        Ok((session?, out?))
    })
}

#[test]
fn a_notify_rule_hands_the_listener_to_the_agent_and_the_agent_answers() -> anyhow::Result<()> {
    let (mut fx, socket, listener) = setup()?;
    let mut seen = Vec::new();
    for cli in Cli::both() {
        let id = cli.id("notify");
        let script = "mkdir /tmp/made; echo mkdir=$?; ls -d /tmp/made 2>&1; exit 0";
        let bundle = notifying_bundle(&mut fx, &id, script, &socket)?;
        let ((message, syscall), out) = with_agent(&listener, true, || {
            Ok(cli.cmd(&fx, &["run", "--bundle", &bundle.display().to_string(), &id]).output()?)
        })?;
        assert!(out.status.success(), "{cli:?}: {}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(message["fds"], serde_json::json!(["seccompFd"]), "{cli:?}: {message}");
        assert_eq!(message["metadata"], format!("meta-{id}"), "{cli:?}: {message}");
        assert_eq!(message["state"]["id"], id.as_str(), "{cli:?}: {message}");
        assert!(message["pid"].as_i64().is_some_and(|p| p > 1), "{cli:?}: {message}");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        assert_eq!(stdout, "mkdir=1\nls: /tmp/made: No such file or directory\n", "{cli:?}");
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(stderr.contains("No space left on device"), "{cli:?}: the agent's answer: {stderr}");
        seen.push((syscall, message["state"]["status"].clone(), message["ociVersion"].is_string(), stdout, stderr));
    }
    assert_eq!(seen[0], seen[1], "kaji vs runc");
    fx.assert_clean();
    Ok(())
}

/// A fixture (the tests need root, busybox and runc) and an agent's socket in it.
fn setup() -> anyhow::Result<(Fixture, PathBuf, UnixListener)> {
    common::require_cli();
    let fx = Fixture::new()?;
    let socket = fx.dir.join("agent.sock");
    let listener = UnixListener::bind(&socket)?;
    Ok((fx, socket, listener))
}

/// The bundle of `id`: the fixture's spec running `script`, with mkdir notified to the agent
/// at `socket`.
fn notifying_bundle(fx: &mut Fixture, id: &str, script: &str, socket: &Path) -> anyhow::Result<PathBuf> {
    let mut spec = fx.spec(id, script)?;
    common::edit_linux(&mut spec, |linux| {
        let mut profile = linux.seccomp().clone().expect("the default profile");
        let mut rules = profile.syscalls().clone().unwrap_or_default();
        rules.push(
            LinuxSyscallBuilder::default()
                .names(vec!["mkdir".to_string(), "mkdirat".to_string()])
                .action(LinuxSeccompAction::ScmpActNotify)
                .build()
                .expect("valid rule"),
        );
        profile.set_syscalls(Some(rules));
        profile.set_listener_path(Some(socket.to_path_buf()));
        profile.set_listener_metadata(Some(format!("meta-{id}")));
        linux.set_seccomp(Some(profile));
    })?;
    fx.created.push(id.to_string());
    fx.bundle(id, &spec)
}

/// `exec` into a container whose profile notifies: its process's listener goes to the agent
/// too, with the exec'd process's pid and the container's running state.
#[test]
fn an_execd_process_hands_its_listener_to_the_agent_too() -> anyhow::Result<()> {
    let (mut fx, socket, listener) = setup()?;
    let mut seen = Vec::new();
    for cli in Cli::both() {
        let id = cli.id("notify-exec");
        let bundle = notifying_bundle(&mut fx, &id, "sleep 60", &socket)?;
        let bundle = bundle.display().to_string();
        with_agent(&listener, false, || {
            let st = cli
                .cmd(&fx, &["create", "--bundle", &bundle, &id])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()?;
            anyhow::ensure!(st.success(), "{cli:?} create");
            Ok(())
        })?;
        cli.out(&fx, &["start", &id])?;
        let ((message, syscall), out) = with_agent(&listener, true, || {
            Ok(cli.cmd(&fx, &["exec", &id, "sh", "-c", "mkdir /made 2>&1; echo mkdir=$?"]).output()?)
        })?;
        assert!(out.status.success(), "{cli:?}: {}", String::from_utf8_lossy(&out.stderr));
        let init_pid: i64 =
            serde_json::from_str::<Value>(&cli.out(&fx, &["state", &id])?)?["pid"].as_i64().unwrap_or(0);
        assert_eq!(message["state"]["pid"], init_pid, "{cli:?}: {message}");
        assert_ne!(message["pid"], init_pid, "{cli:?}: the exec'd process's own pid: {message}");
        cli.out(&fx, &["delete", "--force", &id])?;
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        seen.push((syscall, message["state"]["status"].clone(), message["fds"].clone(), stdout));
    }
    assert!(seen[0].3.contains("No space left on device"), "{:?}", seen[0]);
    assert_eq!(seen[0], seen[1], "kaji vs runc");
    fx.assert_clean();
    Ok(())
}
