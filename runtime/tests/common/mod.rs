//! Shared fixtures for the root-only integration tests: a busybox rootfs (Debian's
//! busybox-static), a temp state root, a dedicated cgroup parent, and leak checks on drop.
#![allow(dead_code)]

pub mod podman;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use kaji_runtime::spec::{default_spec, SpecOptions};
use kaji_runtime::{ContainerRuntime, CreateOptions, Exit, Native, Runc};
use oci_spec::runtime::Spec;

/// Changes a spec's `linux` section in place.
pub fn edit_linux(spec: &mut Spec, edit: impl FnOnce(&mut oci_spec::runtime::Linux)) -> anyhow::Result<()> {
    edit(spec.linux_mut().as_mut().ok_or_else(|| anyhow::anyhow!("spec has no linux section"))?);
    Ok(())
}

pub const HELPER: &str = env!("CARGO_BIN_EXE_kaji-runtime");
static COUNTER: AtomicU32 = AtomicU32::new(0);

/// For tests that fail (never skip) when they cannot run here.
pub fn require_root_and_busybox() {
    assert!(nix::unistd::geteuid().is_root(), "these tests need root");
    assert!(Path::new("/bin/busybox").exists(), "these tests need /bin/busybox (busybox-static)");
}

/// Root-only tests skip (with a note) when not root or when busybox-static is missing.
pub fn can_run() -> bool {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipping: needs root");
        return false;
    }
    if !Path::new("/bin/busybox").exists() {
        eprintln!("skipping: needs /bin/busybox (apt-get install busybox-static)");
        return false;
    }
    true
}

/// One of the two command lines the CLI tests drive the same way: kaji-runtime's, and runc's as
/// the reference, each with its own state root under the fixture.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Cli {
    Kaji,
    Runc,
}

impl Cli {
    pub fn both() -> [Cli; 2] {
        [Cli::Kaji, Cli::Runc]
    }

    /// `<binary> --root <its root> <args>`, stdin from /dev/null unless the caller sets one.
    pub fn cmd(self, fx: &Fixture, args: &[&str]) -> std::process::Command {
        let (binary, root) = match self {
            Cli::Kaji => (PathBuf::from(HELPER), fx.state_root.clone()),
            Cli::Runc => (runc_binary().expect("runc is installed"), fx.dir.join("runc-root")),
        };
        let mut c = std::process::Command::new(binary);
        c.arg("--root").arg(root).args(args).stdin(std::process::Stdio::null());
        c
    }

    /// Runs it; its stdout, or its stderr as the error.
    pub fn out(self, fx: &Fixture, args: &[&str]) -> anyhow::Result<String> {
        let o = self.cmd(fx, args).output()?;
        anyhow::ensure!(o.status.success(), "{self:?} {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        Ok(String::from_utf8_lossy(&o.stdout).into_owned())
    }

    /// The container's status as `state` prints it.
    pub fn status(self, fx: &Fixture, id: &str) -> anyhow::Result<String> {
        let v: serde_json::Value = serde_json::from_str(&self.out(fx, &["state", id])?)?;
        Ok(v["status"].as_str().unwrap_or_default().to_string())
    }

    /// A container id of this CLI's own.
    pub fn id(self, name: &str) -> String {
        format!("{name}-{self:?}").to_lowercase()
    }
}

/// For the CLI tests: root, busybox-static and runc (they fail, never skip, without them).
pub fn require_cli() {
    require_root_and_busybox();
    assert!(runc_binary().is_some(), "needs runc: apt-get install -y runc");
}

pub fn runc_binary() -> Option<PathBuf> {
    ["/usr/sbin/runc", "/usr/bin/runc"].iter().map(PathBuf::from).find(|p| p.exists())
}

pub struct Fixture {
    pub dir: PathBuf,
    pub rootfs: PathBuf,
    pub state_root: PathBuf,
    pub cgroup_parent: String,
    pub created: Vec<String>,
}

/// Copies busybox into `rootfs/bin` and links every applet.
pub fn busybox_rootfs(rootfs: &Path) -> anyhow::Result<()> {
    for d in ["bin", "proc", "sys", "dev", "tmp", "etc", "root"] {
        std::fs::create_dir_all(rootfs.join(d))?;
    }
    std::fs::copy("/bin/busybox", rootfs.join("bin/busybox"))?;
    let out = std::process::Command::new("/bin/busybox").arg("--list").output()?;
    for applet in String::from_utf8_lossy(&out.stdout).lines() {
        if applet != "busybox" {
            std::os::unix::fs::symlink("busybox", rootfs.join("bin").join(applet))?;
        }
    }
    std::fs::write(rootfs.join("etc/passwd"), "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534::/:/bin/false\n")?;
    Ok(())
}

impl Fixture {
    pub fn new() -> anyhow::Result<Self> {
        let n = COUNTER.fetch_add(1, Ordering::SeqCst);
        let tag = format!("{}-{n}-{:x}", std::process::id(), rand_u32());
        let dir = std::env::temp_dir().join(format!("kaji-rt-{tag}"));
        let rootfs = dir.join("rootfs");
        busybox_rootfs(&rootfs)?;
        Ok(Fixture {
            state_root: dir.join("state"),
            rootfs,
            dir,
            cgroup_parent: format!("kaji-test-{tag}"),
            created: Vec::new(),
        })
    }

    pub fn native(&self) -> Native {
        Native::new(&self.state_root, HELPER)
    }

    pub fn runc(&self) -> Option<Runc> {
        runc_binary().map(|b| Runc::new(&self.state_root, HELPER, b))
    }

    /// A default (hardened) spec running `sh -c script`, with its cgroup under our parent.
    pub fn spec(&self, id: &str, script: &str) -> anyhow::Result<Spec> {
        let opts = SpecOptions {
            args: vec!["/bin/sh".into(), "-c".into(), script.into()],
            hostname: Some(format!("h-{id}")),
            rootfs: self.rootfs.clone(),
            cgroups_path: Some(PathBuf::from(format!("/{}/{id}", self.cgroup_parent))),
            ..SpecOptions::default()
        };
        Ok(default_spec(&opts)?)
    }

    /// Writes the bundle for `id` and returns its directory.
    pub fn bundle(&self, id: &str, spec: &Spec) -> anyhow::Result<PathBuf> {
        let b = self.dir.join("bundles").join(id);
        std::fs::create_dir_all(&b)?;
        std::fs::write(b.join("config.json"), serde_json::to_vec_pretty(spec)?)?;
        Ok(b)
    }

    pub fn log_path(&self, id: &str) -> PathBuf {
        self.dir.join(format!("{id}.log"))
    }

    /// create + start + wait + delete; returns the exit and the log's lines (stream, text).
    pub fn run(
        &mut self,
        rt: &dyn ContainerRuntime,
        id: &str,
        spec: &Spec,
    ) -> anyhow::Result<(Exit, Vec<(String, String)>)> {
        let bundle = self.bundle(id, spec)?;
        let log = self.log_path(id);
        self.created.push(id.to_string());
        rt.create(id, &bundle, &CreateOptions { log_path: Some(log.clone()), ..Default::default() })?;
        rt.start(id)?;
        let exit = rt.wait(id, Some(std::time::Duration::from_secs(30)))?;
        rt.delete(id, false)?;
        Ok((exit, read_log(&log)))
    }

    /// Cgroup directories that still exist for our parent.
    pub fn leftover_cgroups(&self) -> Vec<PathBuf> {
        let p = PathBuf::from(format!("/{}", self.cgroup_parent));
        let mut left: Vec<PathBuf> = kaji_runtime::cgroups::directories(&p)
            .unwrap_or_default()
            .into_iter()
            .flat_map(|d| std::fs::read_dir(&d).into_iter().flatten().flatten())
            .map(|e| e.path())
            .filter(|p| p.is_dir())
            .collect();
        left.sort();
        left
    }

    pub fn leftover_mounts(&self) -> Vec<String> {
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let dir = self.dir.to_string_lossy().to_string();
        info.lines().filter(|l| l.contains(&dir)).map(str::to_string).collect()
    }

    /// Asserts the runtime left nothing behind: no state, cgroups, mounts.
    pub fn assert_clean(&self) {
        let states: Vec<_> = std::fs::read_dir(&self.state_root)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name())
            .filter(|n| n != ".runc")
            .collect();
        assert!(states.is_empty(), "state left behind: {states:?}");
        assert_eq!(self.leftover_cgroups(), Vec::<PathBuf>::new(), "cgroups left behind");
        assert_eq!(self.leftover_mounts(), Vec::<String>::new(), "mounts left behind");
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        let native = self.native();
        // The CLI tests' runc keeps its state apart from the library's ([`Cli::cmd`]).
        let runc_cli = self.dir.join("runc-root");
        for id in &self.created {
            let _ = native.delete(id, true);
            if let Some(r) = self.runc() {
                let _ = r.delete(id, true);
            }
            if let (Some(runc), true) = (runc_binary(), runc_cli.is_dir()) {
                let _ = std::process::Command::new(runc)
                    .arg("--root")
                    .arg(&runc_cli)
                    .args(["delete", "--force", id])
                    .stdin(std::process::Stdio::null())
                    .stdout(std::process::Stdio::null())
                    .stderr(std::process::Stdio::null())
                    .status();
            }
        }
        let p = PathBuf::from(format!("/{}", self.cgroup_parent));
        for d in kaji_runtime::cgroups::directories(&p).unwrap_or_default() {
            if let Ok(entries) = std::fs::read_dir(&d) {
                for e in entries.flatten().filter(|e| e.path().is_dir()) {
                    let _ = std::fs::remove_dir(e.path());
                }
            }
            let _ = std::fs::remove_dir(&d);
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn rand_u32() -> u32 {
    let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0);
    t ^ (std::process::id() << 16)
}

/// Reads a CRI log into (stream, line) pairs, checking every record parses.
pub fn read_log(path: &Path) -> Vec<(String, String)> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.lines()
        .map(|l| {
            let r = kaji_runtime::logs::parse(l).unwrap_or_else(|| panic!("bad CRI log line {l:?}"));
            (r.stream.to_string(), r.line.to_string())
        })
        .collect()
}

pub fn stdout_of(lines: &[(String, String)]) -> Vec<String> {
    lines.iter().filter(|(s, _)| s == "stdout").map(|(_, l)| l.clone()).collect()
}

/// Waits (up to about 5 s) for `want` as a whole stdout line of the CRI log at `path`.
pub fn wait_for_log(path: &Path, want: &str) -> bool {
    for _ in 0..500 {
        if stdout_of(&read_log(path)).iter().any(|l| l == want) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}

/// Every pid on the machine now.
pub fn pids() -> Vec<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .collect()
}

/// True once `pid` has exited (gone, or a zombie waiting for whoever reaps orphans here).
pub fn exited(pid: i32) -> bool {
    for _ in 0..200 {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            Err(_) => return true,
            Ok(stat) => {
                let state = stat.rsplit_once(')').and_then(|(_, rest)| rest.split_whitespace().next());
                if state == Some("Z") {
                    return true;
                }
            }
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    false
}
