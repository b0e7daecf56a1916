//! A container engine on top: podman (Debian's package) drives kaji-runtime through the everyday
//! commands, and the same commands through runc in the same test as the reference. Each case
//! checks what a podman user would see (output, exit code, state) and that kaji's equals runc's.
//! Root only; podman, runc and busybox-static must be installed (scripts/deps.sh test).
//!
//! podman here (machine-facts.md): no systemd, so the cgroupfs manager and file events; its
//! default nofile ulimit is above this machine's hard limit, so one within it is passed; the
//! image is a busybox rootfs `podman import`ed; `--network none`. Its storage, run and tmp dirs
//! are private to the test, as is the cgroup parent, and all are checked empty afterwards.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::Cli;

const IMAGE: &str = "localhost/kaji-busybox:test";

struct Podman {
    dir: PathBuf,
    /// The cgroup parent of every container (and of podman's conmon).
    parent: String,
    ulimits: [String; 2],
}

impl Podman {
    fn new() -> anyhow::Result<Self> {
        common::require_cli();
        assert!(Path::new("/usr/bin/podman").exists(), "needs podman: apt-get install -y podman");
        let tag = format!("{}-{:x}", std::process::id(), nanos());
        let dir = std::env::temp_dir().join(format!("kaji-podman-{tag}"));
        let rootfs = dir.join("rootfs");
        common::busybox_rootfs(&rootfs)?;
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
    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new("podman");
        for (flag, sub) in [("--root", "storage"), ("--runroot", "run"), ("--tmpdir", "tmp")] {
            c.arg(flag).arg(self.dir.join(sub));
        }
        c.args(["--cgroup-manager", "cgroupfs", "--events-backend", "file", "--storage-driver", "vfs"]);
        c.args(args).stdin(Stdio::null());
        c
    }

    /// Runs podman and asks it to succeed; its stdout.
    fn ok(&self, args: &[&str]) -> anyhow::Result<String> {
        let o = self.cmd(args).output()?;
        anyhow::ensure!(o.status.success(), "podman {args:?}: {}", String::from_utf8_lossy(&o.stderr));
        Ok(String::from_utf8_lossy(&o.stdout).trim().to_string())
    }

    /// `podman run --runtime <cli's> <flags> IMAGE sh -c script`, with `stdin` fed if given.
    fn run(&self, cli: Cli, flags: &[&str], script: &str, stdin: Option<&str>) -> anyhow::Result<Output> {
        let runtime = match cli {
            Cli::Kaji => PathBuf::from(common::HELPER),
            Cli::Runc => common::runc_binary().expect("runc is installed"),
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
    fn container_cgroups(&self) -> Vec<PathBuf> {
        kaji_runtime::cgroups::directories(Path::new(&self.parent))
            .unwrap_or_default()
            .into_iter()
            .flat_map(|d| std::fs::read_dir(d).into_iter().flatten().flatten())
            .map(|e| e.path())
            .filter(|p| p.is_dir() && p.file_name().is_some_and(|n| n != "conmon"))
            .collect()
    }

    /// Processes whose command line names our dirs (conmon, a runtime, a container's).
    fn processes(&self) -> Vec<String> {
        let dir = self.dir.display().to_string();
        common::pids()
            .into_iter()
            .filter(|&pid| pid != std::process::id() as i32)
            .filter_map(|pid| std::fs::read(format!("/proc/{pid}/cmdline")).ok().map(|c| (pid, c)))
            .map(|(pid, c)| (pid, String::from_utf8_lossy(&c).replace('\0', " ")))
            .filter(|(_, c)| c.contains(&dir))
            .map(|(pid, c)| format!("{pid}: {c}"))
            .collect()
    }

    fn mounts(&self) -> Vec<String> {
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

fn nanos() -> u32 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map(|d| d.subsec_nanos()).unwrap_or(0)
}

/// What a user sees of one command: exit code and stdout (stderr is the engine's and the
/// runtime's chatter, which differ in wording).
#[derive(Debug, PartialEq)]
struct Seen {
    code: Option<i32>,
    stdout: String,
}

impl From<Output> for Seen {
    fn from(o: Output) -> Self {
        Seen { code: o.status.code(), stdout: String::from_utf8_lossy(&o.stdout).trim().to_string() }
    }
}

/// Every `podman run` case: its name, flags, script, stdin, and what a user must see.
type Case = (&'static str, &'static [&'static str], &'static str, Option<&'static str>, Option<i32>, &'static str);

const CASES: &[Case] = &[
    ("exit code", &["--rm"], "echo out; echo err >&2; exit 7", None, Some(7), "out"),
    ("stdin (-i)", &["--rm", "-i"], "cat", Some("hello\nworld\n"), Some(0), "hello\nworld"),
    ("--user", &["--rm", "--user", "65534:65534"], "id -u; id -g", None, Some(0), "65534\n65534"),
    ("--read-only", &["--rm", "--read-only"], "touch /x 2>/dev/null; echo $?", None, Some(0), "1"),
    ("CAP_CHOWN kept", &["--rm"], "chown 1 /tmp; echo $?", None, Some(0), "0"),
    ("--cap-drop", &["--rm", "--cap-drop", "CHOWN"], "chown 1 /tmp 2>/dev/null; echo $?", None, Some(0), "1"),
    (
        "--memory OOM",
        &["--rm", "--memory", "32m", "--memory-swap", "32m"],
        "exec dd if=/dev/zero of=/dev/null bs=64M count=1",
        None,
        Some(137),
        "",
    ),
    (
        "--pids-limit",
        &["--rm", "--pids-limit", "5"],
        "for i in 1 2 3 4 5 6 7 8; do sleep 5 & done 2>/dev/null; echo forked",
        None,
        Some(2),
        "",
    ),
    ("-t", &["--rm", "-t"], "tty", None, Some(0), "/dev/pts/0"),
];

#[test]
fn podmans_everyday_commands_behave_with_kaji_runtime_as_with_runc() -> anyhow::Result<()> {
    let podman = Podman::new()?;
    let mut seen = Vec::new();
    for cli in Cli::both() {
        let mut mine = Vec::new();
        for &(name, flags, script, stdin, code, stdout) in CASES {
            let o = podman.run(cli, flags, script, stdin)?;
            let err = String::from_utf8_lossy(&o.stderr).into_owned();
            let s = Seen::from(o);
            let want = Seen { code, stdout: stdout.into() };
            assert_eq!(s, want, "{cli:?}: podman run {name}; stderr: {err}");
            mine.push((name, s));
        }
        mine.push(("detached", detached(&podman, cli)?));
        seen.push(mine);
    }
    assert_eq!(seen[0], seen[1], "kaji-runtime under podman behaves as runc");
    assert_eq!(podman.ok(&["ps", "--all", "--quiet"])?, "", "every container removed");
    assert_eq!(podman.container_cgroups(), Vec::<PathBuf>::new(), "container cgroups left behind");
    assert_eq!(podman.processes(), Vec::<String>::new(), "processes left behind");
    assert_eq!(podman.mounts(), Vec::<String>::new(), "mounts left behind");
    Ok(())
}

/// `run -d`, `logs`, `exec`, `pause`/`unpause`, `stop` (SIGTERM reaches the container, which
/// exits with its own code), `inspect`, `rm`: what each printed, one line per command.
fn detached(podman: &Podman, cli: Cli) -> anyhow::Result<Seen> {
    let script = "trap 'echo bye; exit 42' TERM; echo started; while true; do sleep 0.1; done";
    let o = podman.run(cli, &["-d"], script, None)?;
    anyhow::ensure!(o.status.success(), "{cli:?}: run -d: {}", String::from_utf8_lossy(&o.stderr));
    let id = String::from_utf8_lossy(&o.stdout).trim().to_string();
    let state = || podman.ok(&["inspect", "--format", "{{.State.Status}}", &id]);
    let mut lines = vec![state()?];
    for _ in 0..500 {
        if podman.ok(&["logs", &id])? == "started" {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    lines.push(podman.ok(&["logs", &id])?);
    let exec = podman.cmd(&["exec", &id, "sh", "-c", "echo in-exec; exit 4"]).output()?;
    lines.push(format!("exec {:?} {}", exec.status.code(), String::from_utf8_lossy(&exec.stdout).trim()));
    podman.ok(&["pause", &id])?;
    lines.push(state()?);
    podman.ok(&["unpause", &id])?;
    lines.push(state()?);
    podman.ok(&["stop", "--time", "10", &id])?;
    lines.push(podman.ok(&["inspect", "--format", "{{.State.Status}} {{.State.ExitCode}}", &id])?);
    lines.push(podman.ok(&["logs", &id])?);
    podman.ok(&["rm", &id])?;
    let seen = Seen { code: Some(0), stdout: lines.join("\n") };
    let want = "running\nstarted\nexec Some(4) in-exec\npaused\nrunning\nexited 42\nstarted\nbye";
    assert_eq!(seen.stdout, want, "{cli:?}: the detached container's life under podman");
    Ok(seen)
}
