//! podman as the engine over a runtime, for the podman test and bench: private storage, run and
//! tmp dirs, cgroupfs manager, file events, vfs, `--network none`, a busybox image imported from
//! Debian's busybox-static, ulimits within this machine's hard limits (machine-facts.md), and one
//! cgroup parent for every container; all of it removed on drop.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use super::Cli;

pub const IMAGE: &str = "localhost/kaji-busybox:test";

pub struct Podman {
    pub dir: PathBuf,
    /// The cgroup parent of every container (and of podman's conmon).
    pub parent: String,
    ulimits: [String; 2],
}

impl Podman {
    pub fn new() -> anyhow::Result<Self> {
        super::require_cli();
        assert!(Path::new("/usr/bin/podman").exists(), "needs podman: apt-get install -y podman");
        let tag = format!("{}-{:x}", std::process::id(), super::rand_u32());
        let dir = std::env::temp_dir().join(format!("kaji-podman-{tag}"));
        let rootfs = dir.join("rootfs");
        super::busybox_rootfs(&rootfs)?;
        let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)?;
        let nofile = hard.min(20000);
        let p = Podman {
            parent: format!("/kaji-podman-{tag}"),
            ulimits: [format!("nofile={nofile}:{nofile}"), "nproc=1000:1000".into()],
            dir,
        };
        let tar = p.dir.join("rootfs.tar");
        let st = Command::new("tar").arg("-C").arg(&rootfs).arg("-cf").arg(&tar).arg(".").status()?;
        anyhow::ensure!(st.success(), "tar of the busybox rootfs failed");
        let tar = tar.display().to_string();
        p.ok(&["import", "--change", "ENV PATH=/bin", &tar, IMAGE])?;
        Ok(p)
    }

    /// `podman <private dirs and managers> <args>`, stdin from /dev/null.
    pub fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("podman");
        for (flag, sub) in [("--root", "storage"), ("--runroot", "run"), ("--tmpdir", "tmp")] {
            c.arg(flag).arg(self.dir.join(sub));
        }
        c.args(["--cgroup-manager", "cgroupfs", "--events-backend", "file", "--storage-driver", "vfs"]);
        c.args(args).stdin(Stdio::null());
        c
    }

    /// Runs podman and asks it to succeed; its stdout.
    pub fn ok(&self, args: &[&str]) -> anyhow::Result<String> {
        let o = self.cmd(args).output()?;
        anyhow::ensure!(o.status.success(), "podman {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
    }

    /// `podman run --runtime <cli's> <flags> IMAGE sh -c script`, with `stdin` fed if given.
    pub fn run(&self, cli: Cli, flags: &[&str], script: &str, stdin: Option<&str>) -> anyhow::Result<Output> {
        let runtime = match cli {
            Cli::Kaji => PathBuf::from(super::HELPER),
            Cli::Runc => super::runc_binary().expect("runc is installed"),
        };
        let runtime = runtime.display().to_string();
        let mut args = vec!["run", "--runtime", &runtime, "--network", "none", "--cgroup-parent", &self.parent];
        for u in &self.ulimits {
            args.extend(["--ulimit", u]);
        }
        args.extend(flags);
        args.extend([IMAGE, "sh", "-c", script]);
        let mut c = self.cmd(&args);
        c.stdout(Stdio::piped()).stderr(Stdio::piped());
        if stdin.is_some() {
            c.stdin(Stdio::piped());
        }
        let mut child = c.spawn()?;
        if let Some(text) = stdin {
            child.stdin.take().expect("piped").write_all(text.as_bytes())?;
        }
        Ok(child.wait_with_output()?)
    }

    /// The container cgroups left under our parent (podman keeps its own `conmon` one).
    pub fn container_cgroups(&self) -> Vec<PathBuf> {
        kaji_runtime::cgroups::directories(Path::new(&self.parent))
            .unwrap_or_default()
            .into_iter()
            .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
            .map(|e| e.path())
            .filter(|p| p.is_dir() && p.file_name().is_some_and(|n| n != "conmon"))
            .collect()
    }

    /// Processes whose command line names our dirs (conmon, a runtime, a container's).
    pub fn processes(&self) -> Vec<String> {
        let dir = self.dir.display().to_string();
        super::pids()
            .into_iter()
            .filter(|&pid| pid != std::process::id() as i32)
            .filter_map(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).ok().map(|c| (pid, c)))
            .map(|(pid, c)| (pid, String::from_utf8_lossy(&c).replace('\0', " ")))
            .filter(|(_, c)| c.contains(&dir))
            .map(|(pid, c)| format!("{pid}: {c}"))
            .collect()
    }

    pub fn mounts(&self) -> Vec<String> {
        let dir = self.dir.display().to_string();
        let info = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        info.lines().filter(|l| l.contains(&dir)).map(str::to_string).collect()
    }
}

impl Drop for Podman {
    fn drop(&mut self) {
        let _ = self.cmd(&["rm", "--all", "--force", "--time", "0"]).output();
        // Depth first: the parent's subtree in every hierarchy (podman leaves the parent).
        fn remove(dir: &Path) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten().filter(|e| e.path().is_dir()) {
                remove(&e.path());
            }
            let _ = std::fs::remove_dir(dir);
        }
        for d in kaji_runtime::cgroups::directories(Path::new(&self.parent)).unwrap_or_default() {
            remove(&d);
        }
        for m in self.mounts().iter().rev() {
            if let Some(point) = m.split(' ').nth(4) {
                let _ = nix::mount::umount2(point, nix::mount::MntFlags::MNT_DETACH);
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
