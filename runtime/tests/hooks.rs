//! Root-only tests of OCI hooks: each point runs once, where and in the namespace the spec says,
//! with the container state on stdin; failures and timeouts as the spec says; runc runs the same
//! hooks for the same spec; the `kaji-runtime` binary runs them too.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{Fixture, HELPER};
use kaji_runtime::{ContainerRuntime, CreateOptions, Runc};
use oci_spec::runtime::{Hook, HookBuilder, Hooks, HooksBuilder, MountBuilder, Spec};
use serde_json::Value;

const POINTS: [&str; 6] = ["prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop"];

/// Root is needed; a missing tool is a failure, not a skip.
fn require(runc: bool) -> bool {
    if !nix::unistd::geteuid().is_root() {
        eprintln!("skipping: needs root");
        return false;
    }
    assert!(Path::new("/bin/busybox").exists(), "needs /bin/busybox (apt-get install busybox-static)");
    assert!(!runc || common::runc_binary().is_some(), "needs runc (apt-get install runc)");
    true
}

/// A directory visible at the same path on the host and in the container (bind-mounted), with
/// `hook.sh`: it appends `<point> <state> mnt=<mount ns>` to `calls`, then fails or hangs when
/// asked to.
struct HookDir(PathBuf);

impl HookDir {
    fn new(fx: &Fixture, name: &str) -> anyhow::Result<Self> {
        let dir = fx.dir.join(name);
        std::fs::create_dir_all(&dir)?;
        let script = format!(
            "#!/bin/busybox sh\n\
             state=$(/bin/busybox cat)\n\
             echo \"$1 $state mnt=$(/bin/busybox readlink /proc/self/ns/mnt)\" >> {dir}/calls\n\
             case \"$2\" in\n\
             fail) echo failing on purpose >&2; exit 7;;\n\
             hang) /bin/busybox sleep 60 & echo $! > {dir}/sleep.pid; wait;;\n\
             esac\n",
            dir = dir.display()
        );
        let path = dir.join("hook.sh");
        std::fs::write(&path, script)?;
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755))?;
        Ok(HookDir(dir))
    }

    fn hook(&self, point: &str, how: Option<&str>, timeout: i64) -> Hook {
        let mut args = vec!["hook.sh".to_string(), point.to_string()];
        args.extend(how.map(str::to_string));
        HookBuilder::default()
            .path(self.0.join("hook.sh"))
            .args(args)
            .env(vec!["PATH=/bin".to_string()])
            .timeout(timeout)
            .build()
            .expect("valid hook")
    }

    /// Every point with a plain hook, except `special` which gets `(how, timeout)`.
    fn hooks(&self, special: Option<(&str, &str, i64)>) -> Hooks {
        let h = |p: &str| {
            let (how, timeout) = match special {
                Some((s, how, t)) if s == p => (Some(how), t),
                _ => (None, 10),
            };
            vec![self.hook(p, how, timeout)]
        };
        #[allow(deprecated)]
        let b = HooksBuilder::default().prestart(h("prestart"));
        b.create_runtime(h("createRuntime"))
            .create_container(h("createContainer"))
            .start_container(h("startContainer"))
            .poststart(h("poststart"))
            .poststop(h("poststop"))
            .build()
            .expect("valid hooks")
    }

    /// A spec running `script` with these hooks and the hook dir bind-mounted.
    fn spec(&self, fx: &Fixture, id: &str, script: &str, hooks: Hooks) -> anyhow::Result<Spec> {
        let mut spec = fx.spec(id, script)?;
        let mut mounts = spec.mounts().clone().unwrap_or_default();
        mounts.push(
            MountBuilder::default()
                .destination(&self.0)
                .typ("bind")
                .source(&self.0)
                .options(vec!["rbind".to_string(), "rw".to_string()])
                .build()?,
        );
        spec.set_mounts(Some(mounts));
        spec.set_hooks(Some(hooks));
        let mut ann = std::collections::HashMap::new();
        ann.insert("kaji.io/test".to_string(), id.to_string());
        spec.set_annotations(Some(ann));
        Ok(spec)
    }

    /// Each line so far: (point, state JSON, mount namespace); the container's own `process`
    /// line has no state.
    fn calls(&self) -> Vec<(String, Value, String)> {
        let text = std::fs::read_to_string(self.0.join("calls")).unwrap_or_default();
        text.lines()
            .map(|l| match l.split_once(' ').and_then(|(p, rest)| Some((p, rest.rsplit_once(" mnt=")?))) {
                Some((point, (state, mnt))) => {
                    let state = serde_json::from_str(state).unwrap_or_else(|e| panic!("bad state {state:?}: {e}"));
                    (point.to_string(), state, mnt.to_string())
                }
                None => (l.to_string(), Value::Null, String::new()),
            })
            .collect()
    }

    fn points(&self) -> Vec<String> {
        self.calls().into_iter().map(|(p, _, _)| p).collect()
    }
}

/// Pids whose command line mentions `text` (our shims carry the state root in theirs).
fn processes_mentioning(text: &str) -> Vec<i32> {
    common::pids()
        .into_iter()
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            String::from_utf8_lossy(&cmdline).contains(text)
        })
        .collect()
}

fn host_mnt() -> String {
    std::fs::read_link("/proc/self/ns/mnt").map(|p| p.display().to_string()).unwrap_or_default()
}

/// A call reduced to what must match between backends: point, status, whose pid, which mount ns.
fn normalize(call: &(String, Value, String), init_pid: i64, id: &str, bundle: &Path) -> String {
    let (point, st, mnt) = call;
    assert_eq!(st["id"], id, "{point}: {st}");
    assert_eq!(st["bundle"], bundle.display().to_string(), "{point}: {st}");
    assert_eq!(st["annotations"]["kaji.io/test"], id, "{point}: {st}");
    let pid = match st["pid"].as_i64().unwrap_or(0) {
        0 => "none",
        1 => "container-pid-1",
        p if p == init_pid => "init-host-pid",
        _ => "other",
    };
    let ns = if *mnt == host_mnt() { "host-ns" } else { "container-ns" };
    // runc 1.1 reports "created" to poststart hooks; the spec's state after the user process
    // started is "running", which is what we report.
    let status = if point == "poststart" { "-" } else { st["status"].as_str().unwrap_or("?") };
    format!("{point} {status} {pid} {ns}")
}

#[test]
fn each_hook_runs_once_at_its_point_with_the_state_on_stdin() -> anyhow::Result<()> {
    if !require(false) {
        return Ok(());
    }
    let mut fx = Fixture::new()?;
    let hd = HookDir::new(&fx, "hooks")?;
    let script = format!("echo process >> {}/calls", hd.0.display());
    let spec = hd.spec(&fx, "hooks", &script, hd.hooks(None))?;
    let bundle = fx.bundle("hooks", &spec)?;
    fx.created.push("hooks".into());
    let rt = fx.native();

    let st = rt.create("hooks", &bundle, &CreateOptions::default())?;
    assert_eq!(hd.points(), ["prestart", "createRuntime", "createContainer"]);
    rt.start("hooks")?;
    let points = hd.points();
    assert_eq!(points[..4], ["prestart", "createRuntime", "createContainer", "startContainer"], "{points:?}");
    assert!(points.contains(&"poststart".to_string()), "poststart ran before start returned: {points:?}");
    assert_eq!(rt.wait("hooks", Some(Duration::from_secs(30)))?.code, 0);
    let points = hd.points();
    assert!(!points.contains(&"poststop".to_string()));
    let at = |p: &str| points.iter().position(|x| x == p);
    assert!(at("process") > at("startContainer"), "the process ran before startContainer: {points:?}");
    rt.delete("hooks", false)?;

    let calls = hd.calls();
    let mut seen: Vec<&str> = calls.iter().map(|(p, _, _)| p.as_str()).filter(|p| *p != "process").collect();
    seen.sort();
    let mut want = POINTS.to_vec();
    want.sort();
    assert_eq!(seen, want, "each hook exactly once");
    let got: Vec<String> =
        calls.iter().filter(|c| c.0 != "process").map(|c| normalize(c, st.pid as i64, "hooks", &bundle)).collect();
    assert_eq!(
        got,
        [
            "prestart creating init-host-pid host-ns",
            "createRuntime creating init-host-pid host-ns",
            "createContainer creating container-pid-1 container-ns",
            "startContainer created container-pid-1 container-ns",
            "poststart - init-host-pid host-ns",
            "poststop stopped none host-ns",
        ]
    );
    let poststart = calls.iter().find(|c| c.0 == "poststart").map(|c| c.1["status"].clone());
    assert_eq!(poststart, Some(Value::from("running")));
    fx.assert_clean();
    Ok(())
}

#[test]
fn a_failing_create_runtime_hook_fails_create_and_leaves_nothing_behind() -> anyhow::Result<()> {
    if !require(false) {
        return Ok(());
    }
    let mut fx = Fixture::new()?;
    let hd = HookDir::new(&fx, "hooks")?;
    let spec = hd.spec(&fx, "bad", "sleep 60", hd.hooks(Some(("createRuntime", "fail", 10))))?;
    let bundle = fx.bundle("bad", &spec)?;
    fx.created.push("bad".into());
    let rt = fx.native();
    let err = rt.create("bad", &bundle, &CreateOptions::default()).expect_err("create must fail").to_string();
    let hook = hd.0.join("hook.sh").display().to_string();
    assert!(err.contains(&format!("createRuntime hook {hook} failed with exit status 7")), "{err}");
    assert!(err.contains("failing on purpose"), "{err}");
    // The lifecycle continued at delete: poststop ran, nothing after createRuntime did.
    assert_eq!(hd.points(), ["prestart", "createRuntime", "poststop"]);
    let init_pid = hd.calls()[0].1["pid"].as_i64().unwrap_or(0) as i32;
    assert!(init_pid > 1);
    assert!(common::exited(init_pid), "container init {init_pid} still running");
    assert!(rt.list()?.is_empty());
    // The runtime's fork server names the root too; it ends with its runtime.
    drop(rt);
    let root = fx.state_root.display().to_string();
    let left: Vec<i32> = processes_mentioning(&root).into_iter().filter(|p| !common::exited(*p)).collect();
    assert!(left.is_empty(), "shim or hook processes left: {left:?}");
    assert!(!fx.state_root.join("bad").exists());
    fx.assert_clean();
    Ok(())
}

#[test]
fn a_failing_start_container_hook_fails_start_and_stops_the_container() -> anyhow::Result<()> {
    if !require(false) {
        return Ok(());
    }
    let mut fx = Fixture::new()?;
    let hd = HookDir::new(&fx, "hooks")?;
    let script = format!("echo process >> {}/calls", hd.0.display());
    let spec = hd.spec(&fx, "badstart", &script, hd.hooks(Some(("startContainer", "fail", 10))))?;
    let bundle = fx.bundle("badstart", &spec)?;
    fx.created.push("badstart".into());
    let rt = fx.native();
    rt.create("badstart", &bundle, &CreateOptions::default())?;
    let err = rt.start("badstart").expect_err("start must fail").to_string();
    assert!(err.contains("startContainer hook") && err.contains("exit status 7"), "{err}");
    assert_ne!(rt.wait("badstart", Some(Duration::from_secs(10)))?.code, 0);
    rt.delete("badstart", false)?;
    assert_eq!(hd.points(), ["prestart", "createRuntime", "createContainer", "startContainer", "poststop"]);
    fx.assert_clean();
    Ok(())
}

#[test]
fn failing_poststart_and_poststop_hooks_only_warn() -> anyhow::Result<()> {
    if !require(false) {
        return Ok(());
    }
    let mut fx = Fixture::new()?;
    let hd = HookDir::new(&fx, "hooks")?;
    let mut hooks = hd.hooks(Some(("poststart", "fail", 10)));
    hooks.set_poststop(Some(vec![hd.hook("poststop", Some("fail"), 10), hd.hook("poststop", None, 10)]));
    let spec = hd.spec(&fx, "warn", "exit 0", hooks)?;
    let (exit, _) = fx.run(&fx.native(), "warn", &spec)?;
    assert_eq!(exit.code, 0);
    // Both poststop hooks ran although the first failed.
    assert_eq!(hd.points().iter().filter(|p| *p == "poststop").count(), 2);
    assert!(hd.points().contains(&"poststart".to_string()));
    fx.assert_clean();
    Ok(())
}

#[test]
fn a_hook_past_its_timeout_is_killed_and_fails_create() -> anyhow::Result<()> {
    if !require(false) {
        return Ok(());
    }
    let mut fx = Fixture::new()?;
    let hd = HookDir::new(&fx, "hooks")?;
    let spec = hd.spec(&fx, "slow", "sleep 60", hd.hooks(Some(("createRuntime", "hang", 1))))?;
    let bundle = fx.bundle("slow", &spec)?;
    fx.created.push("slow".into());
    let t = Instant::now();
    let err = fx.native().create("slow", &bundle, &CreateOptions::default()).expect_err("must time out").to_string();
    assert!(t.elapsed() < Duration::from_secs(20), "took {:?}", t.elapsed());
    assert!(err.contains("createRuntime hook") && err.contains("timed out after 1s"), "{err}");
    let sleeper: i32 = std::fs::read_to_string(hd.0.join("sleep.pid"))?.trim().parse()?;
    assert!(common::exited(sleeper), "the hook's child {sleeper} survived the timeout");
    fx.assert_clean();
    Ok(())
}

#[test]
fn runc_runs_the_same_hooks_for_the_same_spec() -> anyhow::Result<()> {
    if !require(true) {
        return Ok(());
    }
    let mut fx = Fixture::new()?;
    let runc: Runc = fx.runc().ok_or_else(|| anyhow::anyhow!("runc missing"))?;
    let native = fx.native();
    let mut results = Vec::new();
    for (rt, id) in [(&native as &dyn ContainerRuntime, "hk-native"), (&runc as &dyn ContainerRuntime, "hk-runc")] {
        let hd = HookDir::new(&fx, &format!("hooks-{id}"))?;
        let spec = hd.spec(&fx, id, "exit 0", hd.hooks(None))?;
        let bundle = fx.bundle(id, &spec)?;
        fx.created.push(id.to_string());
        let st = rt.create(id, &bundle, &CreateOptions::default())?;
        rt.start(id)?;
        rt.wait(id, Some(Duration::from_secs(30)))?;
        rt.delete(id, false)?;
        let mut calls: Vec<String> = hd.calls().iter().map(|c| normalize(c, st.pid as i64, id, &bundle)).collect();
        // runc's `start` returns (and runs poststart) without waiting for the init's
        // startContainer hooks, so their order races there; the native order is checked above.
        calls.sort();
        results.push(calls);
    }
    assert_eq!(results[0].len(), 6, "{:#?}", results[0]);
    assert_eq!(results[0], results[1], "native vs runc");
    fx.assert_clean();
    Ok(())
}

#[test]
fn the_cli_runs_every_hook_around_run() -> anyhow::Result<()> {
    if !require(false) {
        return Ok(());
    }
    let mut fx = Fixture::new()?;
    let hd = HookDir::new(&fx, "hooks")?;
    let spec = hd.spec(&fx, "cli", "exit 5", hd.hooks(None))?;
    let bundle = fx.bundle("cli", &spec)?;
    fx.created.push("cli".into());
    let status = Command::new(HELPER)
        .arg("--root")
        .arg(&fx.state_root)
        .args(["run", "cli", "--bundle"])
        .arg(&bundle)
        .status()?;
    assert_eq!(status.code(), Some(5));
    assert_eq!(hd.points(), POINTS);

    // create / start / delete as separate processes, with a failing poststart only warned about.
    let hooks = hd.hooks(Some(("poststart", "fail", 10)));
    let spec = hd.spec(&fx, "cli2", "exit 0", hooks)?;
    let bundle = fx.bundle("cli2", &spec)?;
    fx.created.push("cli2".into());
    let cli = |args: &[&str]| Command::new(HELPER).arg("--root").arg(&fx.state_root).args(args).output();
    let bundle = bundle.display().to_string();
    // As with runc, `create` hands its stdio to the container: not pipes this test waits on.
    let created = Command::new(HELPER)
        .arg("--root")
        .arg(&fx.state_root)
        .args(["create", "cli2", "--bundle", &bundle])
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()?;
    assert!(created.success());
    let start = cli(&["start", "cli2"])?;
    assert!(start.status.success());
    let stderr = String::from_utf8_lossy(&start.stderr);
    assert!(stderr.contains("level=warning") && stderr.contains("poststart"), "{stderr}");
    fx.native().wait("cli2", Some(Duration::from_secs(30)))?;
    assert!(cli(&["delete", "cli2"])?.status.success());
    assert_eq!(hd.points()[6..], POINTS);
    fx.assert_clean();
    Ok(())
}
