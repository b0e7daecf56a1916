//! Root-only tests of a container's stdin fifo (`CreateOptions::stdin`): writers come and go
//! without the process seeing end of file until `close_stdin`, and delete leaves nothing.

mod common;

use std::io::Write;
use std::time::Duration;

use common::{require_root_and_busybox, stdout_of, Fixture};
use kaji_runtime::container::Error;
use kaji_runtime::{ContainerRuntime, CreateOptions, Status};

const ECHO: &str = "while read l; do echo got:$l; done; echo eof";

fn wait_for_stdout(log: &std::path::Path, want: &[&str]) -> Vec<String> {
    for _ in 0..200 {
        let got = stdout_of(&common::read_log(log));
        if got == want {
            return got;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    stdout_of(&common::read_log(log))
}

/// Two attach-like sessions, then close: the process reads both lines and only then end of file.
fn sessions_then_close(fx: &mut Fixture, rt: &dyn ContainerRuntime, id: &str) -> anyhow::Result<()> {
    let spec = fx.spec(id, ECHO)?;
    let bundle = fx.bundle(id, &spec)?;
    let log = fx.log_path(id);
    fx.created.push(id.to_string());
    rt.create(id, &bundle, &CreateOptions { log_path: Some(log.clone()), stdin: true })?;
    rt.start(id)?;

    let mut first = rt.open_stdin(id)?;
    first.write_all(b"one\n")?;
    drop(first);
    assert_eq!(wait_for_stdout(&log, &["got:one"]), vec!["got:one"]);
    // The shim's write end keeps stdin open between sessions.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(rt.state(id)?.status, Status::Running, "the process saw end of file without close_stdin");

    let mut second = rt.open_stdin(id)?;
    second.write_all(b"two\n")?;
    rt.close_stdin(id)?;
    assert_eq!(wait_for_stdout(&log, &["got:one", "got:two"]), vec!["got:one", "got:two"]);
    // Still open while the second writer is attached.
    assert_eq!(rt.state(id)?.status, Status::Running);
    drop(second);
    let exit = rt.wait(id, Some(Duration::from_secs(10)))?;
    assert_eq!(exit.code, 0);
    assert_eq!(stdout_of(&common::read_log(&log)), vec!["got:one", "got:two", "eof"]);
    assert!(matches!(rt.open_stdin(id), Err(Error::StdinClosed(_))), "stdin of an exited container opened");
    rt.close_stdin(id)?;
    assert!(fx.state_root.join(id).join("stdin").exists());
    rt.delete(id, false)?;
    assert!(!fx.state_root.join(id).exists(), "state (and the stdin fifo) left behind");
    Ok(())
}

#[test]
fn native_stdin_stays_open_between_writers_until_closed() -> anyhow::Result<()> {
    require_root_and_busybox();
    let mut fx = Fixture::new()?;
    let rt = fx.native();
    sessions_then_close(&mut fx, &rt, "stdin-native")?;
    fx.assert_clean();
    Ok(())
}

#[test]
fn runc_stdin_stays_open_between_writers_until_closed() -> anyhow::Result<()> {
    require_root_and_busybox();
    let mut fx = Fixture::new()?;
    let rt = fx.runc().ok_or_else(|| anyhow::anyhow!("this test needs runc (/usr/sbin/runc or /usr/bin/runc)"))?;
    sessions_then_close(&mut fx, &rt, "stdin-runc")?;
    fx.assert_clean();
    Ok(())
}

#[test]
fn without_stdin_the_process_reads_dev_null_and_attach_is_refused() -> anyhow::Result<()> {
    require_root_and_busybox();
    let mut fx = Fixture::new()?;
    let rt = fx.native();
    let spec = fx.spec("nostdin", ECHO)?;
    let (exit, log) = fx.run(&rt, "nostdin", &spec)?;
    assert_eq!((exit.code, stdout_of(&log)), (0, vec!["eof".to_string()]));

    let spec = fx.spec("nostdin2", "sleep 100")?;
    let bundle = fx.bundle("nostdin2", &spec)?;
    fx.created.push("nostdin2".into());
    rt.create("nostdin2", &bundle, &CreateOptions::default())?;
    assert!(matches!(rt.open_stdin("nostdin2"), Err(Error::NoStdin(_))));
    assert!(matches!(rt.close_stdin("nostdin2"), Err(Error::NoStdin(_))));
    rt.delete("nostdin2", true)?;
    fx.assert_clean();
    Ok(())
}
