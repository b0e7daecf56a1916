//! Root-only tests of the fork server that forks every shim: it is started on first use, replaced
//! when it dies, gone (and reaped) when its runtime is dropped, and the containers it forked
//! outlive it.

mod common;

use std::path::Path;
use std::time::Duration;

use common::{require_root_and_busybox, stdout_of, Fixture};
use kaji_runtime::{ContainerRuntime, CreateOptions, Status};

/// Pids of our own children running `fork-server` for `root`.
fn servers_for(root: &Path) -> Vec<i32> {
    let me = std::process::id().to_string();
    let mut pids: Vec<i32> = common::pids()
        .into_iter()
        .filter(|pid| {
            let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            // The parent pid is the second field after the parenthesised command name.
            let ppid = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().nth(1));
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            ppid == Some(me.as_str())
                && args.contains(&&b"fork-server"[..])
                && args.contains(&root.as_os_str().as_encoded_bytes())
        })
        .collect();
    pids.sort();
    pids
}

#[test]
fn a_killed_fork_server_is_replaced_and_a_dropped_one_exits() -> anyhow::Result<()> {
    require_root_and_busybox();
    let mut fx = Fixture::new()?;
    let rt = fx.native();
    assert!(servers_for(&fx.state_root).is_empty(), "started on first use, not before");

    let (exit, log) = fx.run(&rt, "first", &fx.spec("first", "echo one")?)?;
    assert_eq!((exit.code, stdout_of(&log)), (0, vec!["one".to_string()]));
    let first = servers_for(&fx.state_root);
    assert_eq!(first.len(), 1, "one server serves every create");

    nix::sys::signal::kill(nix::unistd::Pid::from_raw(first[0]), nix::sys::signal::Signal::SIGKILL)?;
    let (exit, log) = fx.run(&rt, "second", &fx.spec("second", "echo two")?)?;
    assert_eq!((exit.code, stdout_of(&log)), (0, vec!["two".to_string()]), "a new server took over");
    let second = servers_for(&fx.state_root);
    assert_eq!(second.len(), 1, "the killed server was reaped: {second:?}");
    assert_ne!(second, first);

    drop(rt);
    assert!(servers_for(&fx.state_root).is_empty(), "dropping the runtime ends and reaps its server");
    assert!(!Path::new(&format!("/proc/{}", second[0])).exists(), "no zombie left");
    fx.assert_clean();
    Ok(())
}

#[test]
fn containers_outlive_the_fork_server_that_forked_their_shims() -> anyhow::Result<()> {
    require_root_and_busybox();
    let mut fx = Fixture::new()?;
    let spec = fx.spec("lives", "trap 'echo bye; exit 3' TERM; echo up; while :; do sleep 0.05; done")?;
    let bundle = fx.bundle("lives", &spec)?;
    let log = fx.log_path("lives");
    fx.created.push("lives".into());
    let rt = fx.native();
    rt.create("lives", &bundle, &CreateOptions { log_path: Some(log.clone()), ..Default::default() })?;
    rt.start("lives")?;
    drop(rt);
    assert!(servers_for(&fx.state_root).is_empty());

    let rt = fx.native();
    assert_eq!(rt.state("lives")?.status, Status::Running, "the shim and its container kept running");
    assert!(common::wait_for_log(&log, "up"));
    rt.kill("lives", nix::sys::signal::Signal::SIGTERM)?;
    let exit = rt.wait("lives", Some(Duration::from_secs(10)))?;
    assert_eq!(exit.code, 3);
    assert_eq!(stdout_of(&common::read_log(&log)), vec!["up", "bye"], "the shim still logged");
    rt.delete("lives", false)?;
    fx.assert_clean();
    Ok(())
}
