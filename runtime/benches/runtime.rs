//! create+start+wait+delete of busybox `/bin/true`, native vs runc in the same run: sequential
//! latency and a 4-way parallel batch of 100. Needs root, /bin/busybox and runc; prints Markdown.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use kaji_runtime::spec::{default_spec, SpecOptions};
use kaji_runtime::{ContainerRuntime, CreateOptions, Native, Runc};

const HELPER: &str = env!("CARGO_BIN_EXE_kaji-runtime");
const SEQUENTIAL: usize = 50;
const BATCH: usize = 100;
const WORKERS: usize = 4;

fn rootfs(dir: &Path) -> anyhow::Result<PathBuf> {
    let root = dir.join("rootfs");
    for d in ["bin", "proc", "sys", "dev", "tmp", "etc"] {
        std::fs::create_dir_all(root.join(d))?;
    }
    std::fs::copy("/bin/busybox", root.join("bin/busybox"))?;
    std::os::unix::fs::symlink("busybox", root.join("bin/true"))?;
    Ok(root)
}

fn bundle(dir: &Path, rootfs: &Path, parent: &str) -> anyhow::Result<PathBuf> {
    let opts = SpecOptions {
        args: vec!["/bin/true".into()],
        rootfs: rootfs.to_path_buf(),
        cgroups_path: Some(PathBuf::from(format!("/{parent}/c"))),
        ..SpecOptions::default()
    };
    let mut spec = default_spec(&opts)?;
    let mut linux = spec.linux().clone().ok_or_else(|| anyhow::anyhow!("no linux"))?;
    // The default spec's device rules, plus memory and pids limits.
    let mut resources = linux.resources().clone().unwrap_or_default();
    resources.set_memory(Some(oci_spec::runtime::LinuxMemoryBuilder::default().limit(64 << 20).build()?));
    resources.set_pids(Some(oci_spec::runtime::LinuxPidsBuilder::default().limit(64).build()?));
    linux.set_resources(Some(resources));
    spec.set_linux(Some(linux));
    let b = dir.join(format!("bundle-{parent}"));
    std::fs::create_dir_all(&b)?;
    std::fs::write(b.join("config.json"), serde_json::to_vec(&spec)?)?;
    Ok(b)
}

/// One full lifecycle, timed per phase (create, start, wait, delete). Each container gets its
/// own cgroup (parent/<id> via a per-id bundle).
fn once(rt: &dyn ContainerRuntime, dir: &Path, rootfs: &Path, parent: &str, id: &str) -> anyhow::Result<[Duration; 4]> {
    let b = bundle(dir, rootfs, &format!("{parent}/{id}"))?;
    let t0 = Instant::now();
    rt.create(id, &b, &CreateOptions::default())?;
    let t1 = Instant::now();
    rt.start(id)?;
    let t2 = Instant::now();
    let exit = rt.wait(id, Some(Duration::from_secs(30)))?;
    let t3 = Instant::now();
    rt.delete(id, false)?;
    let t4 = Instant::now();
    anyhow::ensure!(exit.code == 0, "{id} exited {}", exit.code);
    Ok([t1 - t0, t2 - t1, t3 - t2, t4 - t3])
}

fn pct(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted.get(i).map(|d| d.as_secs_f64() * 1e3).unwrap_or(f64::NAN)
}

struct Result {
    median: f64,
    p90: f64,
    batch: f64,
    /// Median of each phase: create, start, wait, delete.
    phases: [f64; 4],
}

fn measure(rt: &(dyn ContainerRuntime + Sync), dir: &Path, rootfs: &Path, parent: &str) -> anyhow::Result<Result> {
    for i in 0..3 {
        once(rt, dir, rootfs, parent, &format!("warm{i}"))?;
    }
    let mut times = Vec::new();
    let mut phases: [Vec<Duration>; 4] = Default::default();
    for i in 0..SEQUENTIAL {
        let p = once(rt, dir, rootfs, parent, &format!("s{i}"))?;
        times.push(p.iter().sum::<Duration>());
        for (all, d) in phases.iter_mut().zip(p) {
            all.push(d);
        }
    }
    times.sort();
    for p in phases.iter_mut() {
        p.sort();
    }
    let t = Instant::now();
    std::thread::scope(|s| -> anyhow::Result<()> {
        let handles: Vec<_> = (0..WORKERS)
            .map(|w| {
                s.spawn(move || -> anyhow::Result<()> {
                    for i in (w..BATCH).step_by(WORKERS) {
                        once(rt, dir, rootfs, parent, &format!("p{i}"))?;
                    }
                    Ok(())
                })
            })
            .collect();
        for h in handles {
            h.join().map_err(|_| anyhow::anyhow!("worker panicked"))??;
        }
        Ok(())
    })?;
    Ok(Result {
        median: pct(&times, 0.5),
        p90: pct(&times, 0.9),
        batch: t.elapsed().as_secs_f64() * 1e3,
        phases: phases.map(|p| pct(&p, 0.5)),
    })
}

fn cleanup_cgroups(parent: &str) {
    let p = PathBuf::from(format!("/{parent}"));
    for d in kaji_runtime::cgroups::directories(&p).unwrap_or_default() {
        if let Ok(entries) = std::fs::read_dir(&d) {
            for e in entries.flatten().filter(|e| e.path().is_dir()) {
                let _ = std::fs::remove_dir(e.path());
            }
        }
        let _ = std::fs::remove_dir(&d);
    }
}

/// Puts the bench's directory (state roots of both backends, bundles, rootfs) on a tmpfs of its
/// own, in a mount namespace of its own that the fork server, shims and containers inherit and
/// that goes away with them. Runtime state lives under /run (runc's /run/runc), a tmpfs on any
/// systemd host. This VM's /run and /tmp are on a journal-less ext4, whose inode allocator skips
/// every inode freed in the last 30 s (`recently_deleted`): a loop that makes and removes a few
/// state files per container slows down as it runs, which measures the disk, not the runtime.
/// Called while the bench is still single-threaded (unshare of the mount namespace needs it).
fn dir_on_tmpfs(dir: &Path) -> anyhow::Result<()> {
    use nix::mount::{mount, MsFlags};
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNS)?;
    mount(None::<&str>, "/", None::<&str>, MsFlags::MS_REC | MsFlags::MS_PRIVATE, None::<&str>)?;
    mount(Some("tmpfs"), dir, Some("tmpfs"), MsFlags::empty(), Some("mode=0700"))?;
    Ok(())
}

fn main() -> anyhow::Result<()> {
    if !nix::unistd::geteuid().is_root() || !Path::new("/bin/busybox").exists() {
        eprintln!("runtime bench skipped: needs root and /bin/busybox");
        return Ok(());
    }
    // KAJI_RT_BENCH_RUNC=0 measures the native backend alone (quicker, while tuning it).
    let runc_bin = ["/usr/sbin/runc", "/usr/bin/runc"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
        .filter(|_| std::env::var("KAJI_RT_BENCH_RUNC").as_deref() != Ok("0"));
    // For profiling one run by hand (strace, perf): write the bench's bundle and stop.
    if let Some(out) = std::env::var_os("KAJI_RT_BENCH_BUNDLE") {
        let out = PathBuf::from(out);
        let b = bundle(&out, &rootfs(&out)?, "kaji-bench-profile/c")?;
        println!("{}", b.display());
        return Ok(());
    }
    let dir = std::env::temp_dir().join(format!("kaji-rt-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    // KAJI_RT_BENCH_STATE=disk keeps everything on the temp dir's own filesystem.
    let on_tmpfs = std::env::var("KAJI_RT_BENCH_STATE").as_deref() != Ok("disk");
    if on_tmpfs {
        dir_on_tmpfs(&dir)?;
    }
    let root = rootfs(&dir)?;
    let parent = format!("kaji-bench-{}", std::process::id());
    // Another build's helper, to compare two shim/init builds through the same client.
    let helper = std::env::var_os("KAJI_RT_BENCH_HELPER").map_or_else(|| PathBuf::from(HELPER), PathBuf::from);
    let native = Native::new(dir.join("state"), &helper);
    let n = measure(&native, &dir, &root, &format!("{parent}-n"));
    cleanup_cgroups(&format!("{parent}-n"));
    let r = match &runc_bin {
        Some(b) => {
            let runc = Runc::new(dir.join("state"), &helper, b);
            let r = measure(&runc, &dir, &root, &format!("{parent}-r"));
            cleanup_cgroups(&format!("{parent}-r"));
            Some(r)
        }
        None => None,
    };
    let _ = std::fs::remove_dir_all(&dir);
    if on_tmpfs {
        let _ = nix::mount::umount(&dir);
        let _ = std::fs::remove_dir(&dir);
    }
    let n = n?;
    println!("| backend | median (ms) | p90 (ms) | {BATCH} in parallel ×{WORKERS} (ms) |");
    println!("|---|---|---|---|");
    println!("| native | {:.2} | {:.2} | {:.0} |", n.median, n.p90, n.batch);
    let r = r.transpose()?;
    if let Some(r) = &r {
        println!("| runc (same shim) | {:.2} | {:.2} | {:.0} |", r.median, r.p90, r.batch);
        println!("\nratio runc/native: median {:.1}×, batch {:.1}×", r.median / n.median, r.batch / n.batch);
    }
    println!("\n| phase medians (ms) | create | start | wait | delete |\n|---|---|---|---|---|");
    for (name, x) in std::iter::once(("native", &n)).chain(r.as_ref().map(|r| ("runc", r))) {
        let [c, s, w, d] = x.phases;
        println!("| {name} | {c:.2} | {s:.2} | {w:.2} | {d:.2} |");
    }
    Ok(())
}
