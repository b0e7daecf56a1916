//! The apiserver binary as the official Kubernetes Python client sees it: runs
//! `tests/python/smoke.py` against a real `kaji-apiserver` process.

mod common;

use anyhow::{bail, Context};
use common::ApiServer;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

const SMOKE: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../tests/python/smoke.py");

fn python_client_is_installed() -> bool {
    Command::new("python3")
        .args(["-c", "import kubernetes"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

#[test]
fn the_official_python_client_passes_the_smoke_test() -> anyhow::Result<()> {
    assert!(
        python_client_is_installed(),
        "the official Kubernetes Python client is missing: run `pip install kubernetes` (python3 -c 'import kubernetes' failed)"
    );
    let data = tempfile::tempdir()?;
    let server = ApiServer::start(&data.path().join("data"));

    // Output goes to a file so a chatty failure cannot fill a pipe and stall the script.
    let log_path = data.path().join("smoke.log");
    let log = std::fs::File::create(&log_path)?;
    let mut smoke = Command::new("python3")
        .arg(SMOKE)
        .arg(server.url())
        .env("PYTHONUNBUFFERED", "1")
        .stdin(Stdio::null())
        .stdout(log.try_clone()?)
        .stderr(log)
        .spawn()
        .context("failed to run python3")?;
    // The script bounds its own watch; this bounds everything else it might wait on.
    let deadline = Instant::now() + Duration::from_secs(120);
    let status = loop {
        if let Some(status) = smoke.try_wait()? {
            break status;
        }
        if Instant::now() > deadline {
            let _ = smoke.kill();
            let _ = smoke.wait();
            bail!("smoke.py did not finish within 120s:\n{}", std::fs::read_to_string(&log_path)?);
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let output = std::fs::read_to_string(&log_path)?;
    println!("{output}");
    assert!(status.success(), "smoke.py failed ({status}):\n{output}");
    Ok(())
}
