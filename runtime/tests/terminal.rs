//! Root-only tests of `process.terminal`, under both backends (runc sends its terminal over a
//! console socket): the process runs on a terminal that is its controlling one, its output
//! (prompts included, before their newline) reaches the CRI log as stdout, stdin attaches
//! through the terminal, resizes arrive, and close_stdin types end-of-file.

mod common;

use std::io::Write;
use std::time::Duration;

use common::{require_root_and_busybox, Fixture};
use kaji_runtime::container::Error;
use kaji_runtime::{ContainerRuntime, CreateOptions};

/// The log's raw records (stream, tag, text), in order.
fn records(log: &std::path::Path) -> Vec<(String, String, String)> {
    std::fs::read_to_string(log)
        .unwrap_or_default()
        // Not lines(): a terminal's "\r" before a record's newline is part of the text.
        .split_terminator('\n')
        .filter_map(|l| {
            let mut parts = l.splitn(4, ' ');
            let (_, stream, tag, text) = (parts.next()?, parts.next()?, parts.next()?, parts.next().unwrap_or(""));
            Some((stream.to_string(), tag.to_string(), text.to_string()))
        })
        .collect()
}

/// The terminal's output as the log holds it: records joined, partial ones without a newline.
fn screen(log: &std::path::Path) -> String {
    records(log).into_iter().map(|(_, tag, text)| if tag == "F" { text + "\n" } else { text }).collect()
}

fn wait_for(log: &std::path::Path, want: &str) -> String {
    for _ in 0..400 {
        let s = screen(log);
        if s.contains(want) {
            return s;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    screen(log)
}

/// `spec` with `process.terminal` set.
fn on_a_terminal(mut spec: oci_spec::runtime::Spec) -> anyhow::Result<oci_spec::runtime::Spec> {
    let mut process = spec.process().clone().ok_or_else(|| anyhow::anyhow!("no process"))?;
    process.set_terminal(Some(true));
    spec.set_process(Some(process));
    Ok(spec)
}

// The size may reach the terminal after the stdin line does (two fifos), so the script waits
// for it rather than racing it — for output, not for stty's status: busybox's `stty size`
// exits 0 and prints nothing while the terminal has no size yet.
const SCRIPT: &str = "tty; printf 'name? '; read x; \
    for i in $(seq 50); do s=$(stty size 2>/dev/null); [ -n \"$s\" ] && break; sleep 0.1; done; \
    echo size:$s; echo got:$x; read y || echo eof; exit 3";

#[test]
fn native_terminal_carries_output_stdin_resizes_and_end_of_file() -> anyhow::Result<()> {
    require_root_and_busybox();
    let mut fx = Fixture::new()?;
    let rt = fx.native();
    on_terminal(&mut fx, &rt, "tty-native")
}

#[test]
fn runc_terminal_carries_output_stdin_resizes_and_end_of_file() -> anyhow::Result<()> {
    require_root_and_busybox();
    let mut fx = Fixture::new()?;
    let rt = fx.runc().ok_or_else(|| anyhow::anyhow!("these tests need runc"))?;
    on_terminal(&mut fx, &rt, "tty-runc")
}

fn on_terminal(fx: &mut Fixture, rt: &dyn ContainerRuntime, id: &str) -> anyhow::Result<()> {
    let spec = on_a_terminal(fx.spec(id, SCRIPT)?)?;
    let bundle = fx.bundle(id, &spec)?;
    let log = fx.log_path(id);
    fx.created.push(id.to_string());
    rt.create(id, &bundle, &CreateOptions { log_path: Some(log.clone()), stdin: true })?;
    rt.start(id)?;

    // The prompt shows up before any newline follows it.
    let s = wait_for(&log, "name? ");
    assert!(s.starts_with("/dev/pts/0\r\nname? "), "{s:?}");
    assert!(records(&log).iter().all(|(stream, ..)| stream == "stdout"), "a terminal is one stream");

    rt.resize(id, 91, 27)?;
    let mut stdin = rt.open_stdin(id)?;
    stdin.write_all(b"kaji\n")?;
    drop(stdin);
    let s = wait_for(&log, "got:kaji");
    // The terminal echoes what is typed, as terminals do.
    assert!(s.contains("name? kaji\r\nsize:27 91\r\ngot:kaji\r\n"), "{s:?}");

    rt.close_stdin(id)?;
    let exit = rt.wait(id, Some(Duration::from_secs(10)))?;
    assert_eq!(exit.code, 3, "{}", screen(&log));
    assert!(screen(&log).ends_with("eof\r\n"), "{:?}", screen(&log));
    assert!(matches!(rt.resize(id, 80, 24), Err(Error::Resize { .. })), "the shim is gone");
    rt.delete(id, false)?;
    fx.assert_clean();
    Ok(())
}

#[test]
fn a_container_without_a_terminal_cannot_be_resized() -> anyhow::Result<()> {
    require_root_and_busybox();
    let mut fx = Fixture::new()?;
    let rt = fx.native();
    let spec = fx.spec("plain", "sleep 30")?;
    let bundle = fx.bundle("plain", &spec)?;
    fx.created.push("plain".into());
    rt.create("plain", &bundle, &CreateOptions::default())?;
    assert!(matches!(rt.resize("plain", 80, 24), Err(Error::NoTerminal(_))));
    rt.delete("plain", true)?;
    fx.assert_clean();
    Ok(())
}
