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

use std::path::PathBuf;
use std::process::Output;

use common::podman::Podman;
use common::Cli;

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
        // runc's init (a Go program, several threads) runs inside the limit before it execs:
        // with 5 it sometimes died there ("container process is already dead"); 10 leaves it room
        // and the shell still hits the limit.
        &["--rm", "--pids-limit", "10"],
        "for i in $(seq 16); do sleep 5 & done 2>/dev/null; echo forked",
        None,
        Some(2),
        "",
    ),
    ("-t", &["--rm", "-t"], "tty", None, Some(0), "/dev/pts/0"),
    (
        "--uidmap",
        &["--rm", "--uidmap", "0:100000:65536", "--gidmap", "0:100000:65536"],
        "id -u; tr -s ' ' < /proc/self/uid_map; touch /tmp/x && echo touched",
        None,
        Some(0),
        "0\n 0 100000 65536\ntouched",
    ),
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
