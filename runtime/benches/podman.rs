//! `podman run --rm IMAGE sh -c true`, timed end to end with `--runtime kaji-runtime` and with
//! `--runtime runc`, alternating run by run so both see the same machine. The engine is set up
//! as in tests/podman.rs (private dirs, cgroupfs, vfs, --network none, an imported busybox).
//! Needs root, /bin/busybox, runc and podman; prints Markdown. `KAJI_PODMAN_BENCH_RUNS=n` (30).

#[path = "../tests/common/mod.rs"]
mod common;

use std::time::{Duration, Instant};

use common::podman::Podman;
use common::Cli;

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).map(|d| d.as_secs_f64() * 1e3).unwrap_or(f64::NAN)
}

fn once(podman: &Podman, cli: Cli) -> anyhow::Result<Duration> {
    let t = Instant::now();
    let o = podman.run(cli, &["--rm"], "true", None)?;
    let took = t.elapsed();
    anyhow::ensure!(o.status.success(), "{cli:?}: {}", String::from_utf8_lossy(&o.stderr));
    Ok(took)
}

fn main() -> anyhow::Result<()> {
    let have = |p: &str| std::path::Path::new(p).exists();
    if !nix::unistd::geteuid().is_root() || !have("/bin/busybox") || !have("/usr/bin/podman") {
        eprintln!("podman bench skipped: needs root, /bin/busybox and podman");
        return Ok(());
    }
    let runs: usize = std::env::var("KAJI_PODMAN_BENCH_RUNS").ok().and_then(|n| n.parse().ok()).unwrap_or(30);
    let podman = Podman::new()?;
    for cli in Cli::both() {
        for _ in 0..2 {
            once(&podman, cli)?;
        }
    }
    let mut times = [Vec::new(), Vec::new()];
    for i in 0..runs {
        // Alternate which goes first, so neither always follows the other's teardown.
        let order = if i % 2 == 0 { [0, 1] } else { [1, 0] };
        for k in order {
            times[k].push(once(&podman, Cli::both()[k])?);
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("`podman run --rm … sh -c true`, {runs} runs each, alternating; load average {}", load.trim());
    println!("\n| runtime | median (ms) | p10 (ms) | p90 (ms) |\n|---|---|---|---|");
    let mut medians = [0.0; 2];
    for (k, t) in times.iter_mut().enumerate() {
        t.sort();
        medians[k] = pct(t, 0.5);
        println!("| {:?} | {:.1} | {:.1} | {:.1} |", Cli::both()[k], medians[k], pct(t, 0.1), pct(t, 0.9));
    }
    println!("\nratio runc/kaji-runtime, median: {:.2}×", medians[1] / medians[0]);
    Ok(())
}
