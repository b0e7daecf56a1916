//! Root-only tests of `kaji-runtime`'s runc command line, each run the same way through runc as
//! the reference: `run` passes the caller's stdio through and leaves nothing running, `create`
//! hands the caller's stdio to the container and leaves its init to the caller's reaper (what
//! conmon relies on), the container's process starts with default signals whatever the runtime
//! inherited, terminals go to `--console-socket`, `--preserve-fds` passes fds.

mod common;

use std::io::Read;
use std::os::fd::{AsFd, OwnedFd};
use std::path::Path;
use std::process::{Command, Stdio};

use common::{Cli, Fixture};
use oci_spec::runtime::Spec;

/// The fixture's hardened spec running `script`, as a bundle for `id`.
fn bundle(fx: &mut Fixture, id: &str, script: &str, edit: impl FnOnce(&mut Spec)) -> anyhow::Result<String> {
    let mut spec = fx.spec(id, script)?;
    edit(&mut spec);
    fx.created.push(id.to_string());
    Ok(fx.bundle(id, &spec)?.display().to_string())
}

/// Pids of `fork-server` processes for `root`.
fn fork_servers(root: &Path) -> Vec<i32> {
    common::pids()
        .into_iter()
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            args.contains(&&b"fork-server"[..]) && args.contains(&root.as_os_str().as_encoded_bytes())
        })
        .collect()
}

#[test]
fn run_passes_stdio_through_exits_with_the_code_and_leaves_nothing_running() -> anyhow::Result<()> {
    common::require_cli();
    let mut fx = Fixture::new()?;
    let mut seen = Vec::new();
    for cli in Cli::both() {
        let id = cli.id("run");
        let b = bundle(&mut fx, &id, "echo out; echo err >&2; read line; echo got $line; exit 3", |_| {})?;
        let mut child = cli
            .cmd(&fx, &["run", "--bundle", &b, &id])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()?;
        std::io::Write::write_all(&mut child.stdin.take().expect("stdin"), b"in\n")?;
        let out = child.wait_with_output()?;
        seen.push((
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        ));
    }
    assert_eq!(seen[0], (Some(3), "out\ngot in\n".to_string(), "err\n".to_string()), "{seen:?}");
    assert_eq!(seen[0], seen[1], "kaji vs runc");
    assert!(fork_servers(&fx.state_root).is_empty(), "no fork server left");
    fx.assert_clean();
    Ok(())
}

/// SigIgn and SigBlk of the container's process (and of an exec'd one) when the runtime was
/// started with SIGHUP ignored and SIGUSR1 blocked (as under `nohup`, or systemd's SIGPIPE).
#[test]
fn the_process_starts_with_default_signals_whatever_the_runtime_inherited() -> anyhow::Result<()> {
    common::require_cli();
    let mut fx = Fixture::new()?;
    // perl (Debian's perl-base) to start the runtime with a signal ignored and one blocked.
    let wrap = |cmd: Command| {
        let mut w = Command::new("perl");
        w.arg("-e").arg(r#"use POSIX; $SIG{HUP} = "IGNORE"; sigprocmask(SIG_BLOCK, POSIX::SigSet->new(SIGUSR1)); exec @ARGV or die"#);
        w.arg(cmd.get_program()).args(cmd.get_args());
        w
    };
    let probe = "grep -E '^Sig(Ign|Blk)' /proc/self/status";
    for cli in Cli::both() {
        let id = cli.id("sig");
        // The trap comes first: the test signals as soon as the probe has printed, and a
        // pid namespace's init without a handler never gets a TERM (the run would hang).
        let b = bundle(&mut fx, &id, &format!("trap 'exit 0' TERM; {probe}; while :; do sleep 0.1; done"), |_| {})?;
        let mut run = wrap(cli.cmd(&fx, &["run", "--bundle", &b, &id])).stdout(Stdio::piped()).spawn()?;
        let mut stdout = run.stdout.take().expect("stdout");
        let mut first = [0u8; 64];
        let n = stdout.read(&mut first)?;
        // Not through `sh -c`: busybox's sh ignores SIGQUIT itself.
        let exec = wrap(cli.cmd(&fx, &["exec", &id, "grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"])).output()?;
        assert!(cli.cmd(&fx, &["kill", &id, "TERM"]).status()?.success());
        let mut rest = String::new();
        stdout.read_to_string(&mut rest)?;
        assert!(run.wait()?.success());
        let init = String::from_utf8_lossy(&first[..n]).into_owned() + &rest;
        for out in [init, String::from_utf8_lossy(&exec.stdout).into_owned()] {
            match cli {
                Cli::Kaji => assert_eq!(out, "SigBlk:\t0000000000000000\nSigIgn:\t0000000000000000\n"),
                // runc clears SIGHUP (the reference for what the issue saw) but passes its
                // blocked mask and signal 32 on; kaji resets everything.
                Cli::Runc => {
                    let ign = out.lines().find_map(|l| l.strip_prefix("SigIgn:\t")).unwrap_or_default();
                    assert_eq!(u64::from_str_radix(ign, 16)? & 1, 0, "runc: {out}");
                }
            }
        }
    }
    fx.assert_clean();
    Ok(())
}

/// What conmon does: `create` with files as stdio, then wait for the container's init as a
/// child subreaper once the runtime has exited; `start`; reap it with its exit code.
#[test]
fn create_hands_its_stdio_over_and_leaves_the_init_to_the_callers_reaper() -> anyhow::Result<()> {
    common::require_cli();
    nix::sys::prctl::set_child_subreaper(true)?;
    let mut fx = Fixture::new()?;
    let mut seen = Vec::new();
    for cli in Cli::both() {
        let id = cli.id("create");
        let b = bundle(&mut fx, &id, "echo started; echo oops >&2; exit 7", |_| {})?;
        let (out_path, pid_file) = (fx.dir.join(format!("{id}.out")), fx.dir.join(format!("{id}.pid")));
        let out = std::fs::File::create(&out_path)?;
        let status = cli
            .cmd(&fx, &["create", "--bundle", &b, "--pid-file", &pid_file.display().to_string(), &id])
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .status()?;
        assert!(status.success(), "{cli:?} create");
        let pid = nix::unistd::Pid::from_raw(std::fs::read_to_string(&pid_file)?.trim().parse()?);
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))?;
        let ppid: u32 = stat.rsplit_once(')').and_then(|(_, r)| r.split_whitespace().nth(1)).unwrap_or("0").parse()?;
        assert_eq!(ppid, std::process::id(), "{cli:?}: the init is ours to reap, no runtime process is left");
        let state = cli.cmd(&fx, &["state", &id]).output()?;
        let st: serde_json::Value = serde_json::from_slice(&state.stdout)?;
        assert_eq!(st["status"], "created");
        assert!(cli.cmd(&fx, &["start", &id]).status()?.success());
        let code = match nix::sys::wait::waitpid(pid, None)? {
            nix::sys::wait::WaitStatus::Exited(_, c) => c,
            other => anyhow::bail!("{cli:?}: {other:?}"),
        };
        let st: serde_json::Value = serde_json::from_slice(&cli.cmd(&fx, &["state", &id]).output()?.stdout)?;
        assert!(cli.cmd(&fx, &["delete", &id]).status()?.success());
        seen.push((code, st["status"].clone(), std::fs::read_to_string(&out_path)?));
    }
    assert_eq!(seen[0].0, 7);
    assert_eq!(seen[0].1, "stopped");
    assert_eq!(seen[0], seen[1], "kaji vs runc");
    fx.assert_clean();
    Ok(())
}

/// Receives the terminal master a runtime sends to `listener`.
fn receive_master(listener: &std::os::unix::net::UnixListener) -> anyhow::Result<OwnedFd> {
    let (conn, _) = listener.accept()?;
    let (_, fd) = kaji_runtime::sys::recv_with_fd(conn.as_fd(), &mut [0u8; 4096])?;
    fd.ok_or_else(|| anyhow::anyhow!("no fd received"))
}

#[test]
fn a_terminal_goes_to_the_console_socket() -> anyhow::Result<()> {
    common::require_cli();
    let mut fx = Fixture::new()?;
    let mut seen = Vec::new();
    for cli in Cli::both() {
        let id = cli.id("tty");
        let b = bundle(&mut fx, &id, "tty; stty size", |s| {
            if let Some(p) = s.process_mut() {
                p.set_terminal(Some(true));
            }
        })?;
        let sock = std::env::temp_dir().join(format!("kaji-test-console-{}-{id}.sock", std::process::id()));
        let listener = std::os::unix::net::UnixListener::bind(&sock)?;
        let status = cli
            .cmd(&fx, &["create", "--bundle", &b, "--console-socket", &sock.display().to_string(), &id])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .status()?;
        let _ = std::fs::remove_file(&sock);
        assert!(status.success(), "{cli:?}");
        let master = std::fs::File::from(receive_master(&listener)?);
        kaji_runtime::sys::set_window_size(master.as_fd(), 91, 27)?;
        assert!(cli.cmd(&fx, &["start", &id]).status()?.success());
        let mut text = String::new();
        let _ = (&master).read_to_string(&mut text);
        for _ in 0..100 {
            if cli.cmd(&fx, &["state", &id]).output()?.stdout.windows(7).any(|w| w == b"stopped") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert!(cli.cmd(&fx, &["delete", "--force", &id]).status()?.success());
        seen.push(text.replace('\r', ""));
    }
    assert_eq!(seen[0], "/dev/pts/0\n27 91\n");
    assert_eq!(seen[0], seen[1], "kaji vs runc");
    fx.assert_clean();
    Ok(())
}

#[test]
fn preserved_fds_reach_the_container_and_no_others_do() -> anyhow::Result<()> {
    common::require_cli();
    let mut fx = Fixture::new()?;
    let mut seen = Vec::new();
    for cli in Cli::both() {
        let id = cli.id("fds");
        let b = bundle(&mut fx, &id, "echo through-fd3 >&3; ls /proc/self/fd | sort -n | tr '\\n' ' '", |_| {})?;
        let (r, w) = nix::unistd::pipe()?;
        let (leak_r, leak_w) = nix::unistd::pipe()?;
        let mut cmd = cli.cmd(&fx, &["run", "--preserve-fds", "1", "--bundle", &b, &id]);
        cmd.stdout(Stdio::piped());
        // fd 3: passed on; fd 4: left open by the caller, and must not reach the container.
        let child = kaji_runtime::sys::spawn(&mut cmd, vec![(w, 3), (leak_w, 4)], false)?;
        drop(cmd);
        let out = child.wait_with_output()?;
        drop(leak_r);
        let mut through = String::new();
        std::fs::File::from(r).read_to_string(&mut through)?;
        seen.push((through, String::from_utf8_lossy(&out.stdout).into_owned()));
    }
    assert_eq!(seen[0].0, "through-fd3\n");
    assert_eq!(seen[0].1, "0 1 2 3 4 ", "fd 4 here is ls's own directory fd");
    assert_eq!(seen[0], seen[1], "kaji vs runc");
    fx.assert_clean();
    Ok(())
}
