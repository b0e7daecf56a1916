//! Root-only tests of exec into a running container, native and runc: the command sees the
//! container's namespaces and root, runs in its cgroup with its hardening, gets stdin, a
//! terminal when asked, and its exit code comes back; nothing is left behind.

mod common;

use std::io::{Read, Write};
use std::path::Path;

use common::{Cli, Fixture};
use kaji_runtime::{ContainerRuntime, CreateOptions, ExecOptions, WindowSize};
use oci_spec::runtime::{LinuxNamespaceType, Process, Spec};

/// Fails (never skips) when the machine cannot run these tests.
fn require(runc: bool) {
    assert!(nix::unistd::geteuid().is_root(), "exec tests need root");
    assert!(Path::new("/bin/busybox").exists(), "needs /bin/busybox: apt-get install -y busybox-static");
    if runc {
        assert!(common::runc_binary().is_some(), "needs runc: apt-get install -y runc");
    }
}

const INIT: &str = "echo ready; while :; do sleep 1; done";

/// Creates and starts a long-running container and waits until its shell runs.
fn start(fx: &mut Fixture, rt: &dyn ContainerRuntime, id: &str) -> anyhow::Result<Spec> {
    let mut spec = fx.spec(id, INIT)?;
    spec.set_hostname(Some("exec-host".into()));
    let bundle = fx.bundle(id, &spec)?;
    let log = fx.log_path(id);
    fx.created.push(id.to_string());
    rt.create(id, &bundle, &CreateOptions { log_path: Some(log.clone()), ..Default::default() })?;
    rt.start(id)?;
    anyhow::ensure!(common::wait_for_log(&log, "ready"), "container {id} never printed ready");
    Ok(spec)
}

fn process(spec: &Spec, args: &[&str]) -> anyhow::Result<Process> {
    let mut p = spec.process().clone().ok_or_else(|| anyhow::anyhow!("no process"))?;
    p.set_args(Some(args.iter().map(|s| s.to_string()).collect()));
    Ok(p)
}

struct Ran {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Runs `args` in the container with pipes, feeding `input` to its stdin (then EOF).
fn run(rt: &dyn ContainerRuntime, spec: &Spec, id: &str, args: &[&str], input: Option<&[u8]>) -> anyhow::Result<Ran> {
    let opts = ExecOptions { stdin: input.is_some(), stdout: true, stderr: true, ..Default::default() };
    let mut e = rt.exec(id, &process(spec, args)?, &opts)?;
    if let (Some(mut w), Some(data)) = (e.stdin.take(), input) {
        w.write_all(data)?;
    }
    let (mut out, mut err) = (e.stdout.take().expect("stdout pipe"), e.stderr.take().expect("stderr pipe"));
    let errs = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = err.read_to_string(&mut s);
        s
    });
    let mut stdout = String::new();
    out.read_to_string(&mut stdout)?;
    let code = e.wait()?;
    Ok(Ran { code, stdout, stderr: errs.join().unwrap_or_default() })
}

/// What an exec'd command observes, the same way under both backends.
fn observe(rt: &dyn ContainerRuntime, spec: &Spec, id: &str) -> anyhow::Result<Vec<String>> {
    let mut seen = Vec::new();
    let r = run(rt, spec, id, &["hostname"], None)?;
    seen.push(format!("hostname={} code={}", r.stdout.trim(), r.code));
    let r = run(rt, spec, id, &["cat", "/proc/1/cmdline"], None)?;
    seen.push(format!("pid1={}", r.stdout.replace('\0', " ").trim()));
    let r = run(rt, spec, id, &["sh", "-c", "echo out; echo err >&2; exit 7"], None)?;
    seen.push(format!("out={} err={} code={}", r.stdout.trim(), r.stderr.trim(), r.code));
    let r = run(rt, spec, id, &["sh", "-c", "kill -9 $$"], None)?;
    seen.push(format!("killed code={}", r.code));
    let r = run(rt, spec, id, &["cat"], Some(b"hello stdin\n"))?;
    seen.push(format!("stdin={} code={}", r.stdout.trim(), r.code));
    let script = "grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; id -u; pwd; echo $PATH; ulimit -n";
    let r = run(rt, spec, id, &["sh", "-c", script], None)?;
    seen.extend(r.stdout.lines().map(str::to_string));
    // A writer into a closed pipe dies of SIGPIPE (141), as anywhere: not ignored by inheritance.
    let r = run(rt, spec, id, &["sh", "-c", "(yes; echo yes-exit=$? >&2) | head -n 1"], None)?;
    seen.push(format!("pipe={} {}", r.stdout.trim(), r.stderr.trim()));
    Ok(seen)
}

#[test]
fn exec_sees_the_containers_view_and_returns_its_exit_code() -> anyhow::Result<()> {
    require(false);
    let mut fx = Fixture::new()?;
    let rt = fx.native();
    let spec = start(&mut fx, &rt, "ex")?;
    let seen = observe(&rt, &spec, "ex")?;
    assert_eq!(seen[0], "hostname=exec-host code=0");
    assert_eq!(seen[1], format!("pid1=/bin/sh -c {INIT}"), "the container's PID namespace and /proc");
    assert_eq!(seen[2], "out=out err=err code=7");
    assert_eq!(seen[3], "killed code=137");
    assert_eq!(seen[4], "stdin=hello stdin code=0");
    for want in [
        "CapEff:\t00000000a80425fb",
        "CapBnd:\t00000000a80425fb",
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
        "0",
        "/",
        "pipe=y yes-exit=141",
    ] {
        assert!(seen.contains(&want.to_string()), "missing {want:?} in {seen:?}");
    }

    // A missing binary is an error naming it, and leaves no process behind.
    let err = rt.exec("ex", &process(&spec, &["no-such-binary"])?, &ExecOptions::default()).err();
    assert!(err.as_ref().is_some_and(|e| e.to_string().contains("no-such-binary")), "{err:?}");

    // The exec'd process is in the container's cgroup and every one of its namespaces.
    let opts = ExecOptions { stdout: true, ..Default::default() };
    let mut e = rt.exec("ex", &process(&spec, &["sleep", "30"])?, &opts)?;
    let init = rt.state("ex")?.pid;
    let read = |pid: i32, what: &str| std::fs::read_to_string(format!("/proc/{pid}/{what}")).unwrap_or_default();
    let pid = e.pid().as_raw();
    assert_eq!(read(pid, "cgroup"), read(init, "cgroup"));
    assert!(read(pid, "cgroup").contains(&fx.cgroup_parent), "{}", read(pid, "cgroup"));
    for ns in ["mnt", "pid", "net", "ipc", "uts"] {
        let link = |p: i32| std::fs::read_link(format!("/proc/{p}/ns/{ns}")).ok();
        assert_eq!(link(pid), link(init), "{ns} namespace");
        assert_ne!(link(pid), std::fs::read_link(format!("/proc/self/ns/{ns}")).ok(), "{ns} is not the host's");
    }
    e.stdout.take();
    e.kill();
    assert_eq!(e.wait()?, 137);
    assert!(common::exited(pid));
    let scratch: Vec<_> = std::fs::read_dir(fx.state_root.join("ex"))?
        .flatten()
        .map(|f| f.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("exec-"))
        .collect();
    assert!(scratch.is_empty(), "exec files left behind: {scratch:?}");

    rt.delete("ex", true)?;
    let err = rt.exec("ex", &process(&spec, &["true"])?, &ExecOptions::default()).err();
    assert!(err.is_some(), "no exec into a deleted container");
    fx.assert_clean();
    Ok(())
}

/// Runs `sh -c script` on a terminal of `size`, types `input`, returns everything it printed.
fn on_terminal(
    rt: &dyn ContainerRuntime,
    spec: &Spec,
    id: &str,
    script: &str,
    size: WindowSize,
    resize: Option<WindowSize>,
) -> anyhow::Result<(i32, String)> {
    let opts = ExecOptions { stdin: true, stdout: true, tty: true, size: Some(size), ..Default::default() };
    let mut e = rt.exec(id, &process(spec, &["sh", "-c", script])?, &opts)?;
    assert!(e.stderr.is_none(), "a terminal carries every stream");
    // Native: the terminal master is ours. runc: it bridges its terminal to our pipes.
    let (mut term, mut input) = match e.terminal.take() {
        Some(t) => (t.try_clone()?, t),
        None => (e.stdout.take().expect("stdout"), e.stdin.take().expect("stdin")),
    };
    // Read until the first size is printed, so the resize surely comes after it.
    let first = format!("{} {}", size.rows, size.cols);
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains(&first) {
        let n = term.read(&mut buf)?;
        anyhow::ensure!(n > 0, "terminal closed early: {}", String::from_utf8_lossy(&seen));
        seen.extend_from_slice(&buf[..n]);
    }
    if let Some(s) = resize {
        e.resize(s)?;
    }
    let mut reader = term.try_clone()?;
    let out = std::thread::spawn(move || {
        // EIO once the command (the last holder of the terminal) exits.
        let _ = reader.read_to_end(&mut seen);
        String::from_utf8_lossy(&seen).into_owned()
    });
    input.write_all(b"go\n")?;
    let code = e.wait()?;
    drop(input);
    Ok((code, out.join().unwrap_or_default()))
}

// runc relays a resize to the container's terminal on its own SIGWINCH, after our ioctl returns:
// the script waits (up to 5 s) for the size to change instead of racing the relay.
const TTY_SCRIPT: &str = "test -t 0 && echo is-a-tty; s=$(stty size); echo $s; read x; i=0; \
    while [ \"$(stty size)\" = \"$s\" ] && [ $i -lt 100 ]; do sleep 0.05; i=$((i+1)); done; \
    stty size; echo got=$x; exit 3";

#[test]
fn exec_on_a_terminal_reports_its_size_and_follows_resizes() -> anyhow::Result<()> {
    require(false);
    let mut fx = Fixture::new()?;
    let rt = fx.native();
    let spec = start(&mut fx, &rt, "tty")?;
    let (code, out) = on_terminal(
        &rt,
        &spec,
        "tty",
        TTY_SCRIPT,
        WindowSize { cols: 100, rows: 30 },
        Some(WindowSize { cols: 120, rows: 40 }),
    )?;
    assert_eq!(code, 3, "{out}");
    let lines: Vec<&str> = out.lines().map(|l| l.trim_end_matches('\r')).collect();
    for want in ["is-a-tty", "30 100", "40 120", "got=go"] {
        assert!(lines.contains(&want), "missing {want:?} in {out:?}");
    }
    rt.delete("tty", true)?;
    fx.assert_clean();
    Ok(())
}

#[test]
fn native_and_runc_exec_observe_the_same_container() -> anyhow::Result<()> {
    require(true);
    let mut fx = Fixture::new()?;
    let native = fx.native();
    let runc = fx.runc().expect("runc checked above");
    let mut seen = Vec::new();
    for (rt, id) in [(&native as &dyn ContainerRuntime, "xn"), (&runc as &dyn ContainerRuntime, "xr")] {
        let spec = start(&mut fx, rt, id)?;
        let mut s = observe(rt, &spec, id)?;
        let (code, out) = on_terminal(
            rt,
            &spec,
            id,
            TTY_SCRIPT,
            WindowSize { cols: 100, rows: 30 },
            Some(WindowSize { cols: 120, rows: 40 }),
        )?;
        s.push(format!("tty code={code}"));
        s.extend(out.lines().map(|l| l.trim_end_matches('\r').to_string()).filter(|l| l != "go"));
        let err = rt.exec(id, &process(&spec, &["no-such-binary"])?, &ExecOptions::default()).err();
        s.push(format!("missing binary fails={}", err.is_some_and(|e| e.to_string().contains("no-such-binary"))));
        rt.delete(id, true)?;
        seen.push(s);
    }
    assert_eq!(seen[0][3], "killed code=137");
    assert!(seen[0].contains(&"40 120".to_string()), "the resize reached the command: {:?}", seen[0]);
    assert!(seen[0].contains(&"missing binary fails=true".to_string()), "{:?}", seen[0]);
    assert_eq!(seen[0], seen[1], "native vs runc");
    fx.assert_clean();
    Ok(())
}

/// `cmd` run with a root that is not its mount namespace's root, as a node agent run under
/// `chroot /host` has: in a mount namespace of its own (unshare(1)), the host's `/` bound
/// recursively onto `dir` (the same files at the same paths) and chrooted into.
fn chrooted(cmd: &std::process::Command, dir: &Path) -> std::process::Command {
    let mut c = std::process::Command::new("unshare");
    c.args(["--mount", "--propagation", "private", "sh", "-c", r#"mount --rbind / "$0" && exec chroot "$0" "$@""#])
        .arg(dir)
        .arg(cmd.get_program())
        .args(cmd.get_args());
    c
}

/// Joining a container's mount namespace is not enough to be in its root: the namespace's root
/// is the host's `/` when the runtime that created the container was chrooted (its rootfs
/// is then mounted on the chroot's directory), and a container without a mount namespace of its
/// own is only chrooted into its rootfs. In both, the exec'd command must see the container's
/// files and /proc (its PID namespace), never the host's.
#[test]
fn exec_runs_in_the_containers_root_when_that_is_not_its_mount_namespaces() -> anyhow::Result<()> {
    require(false);
    let mut fx = Fixture::new()?;
    std::fs::write(fx.rootfs.join("etc/marker"), "the container's rootfs\n")?;
    let host = fx.dir.join("host");
    std::fs::create_dir_all(&host)?;
    let mut seen = Vec::new();
    for (id, by_chrooted_runtime) in [("chrooted", true), ("nomnt", false)] {
        let mut spec = fx.spec(id, INIT)?;
        if !by_chrooted_runtime {
            common::edit_linux(&mut spec, |l| {
                let own = l.namespaces().iter().flatten().filter(|n| n.typ() != LinuxNamespaceType::Mount).cloned();
                l.set_namespaces(Some(own.collect()));
                l.set_masked_paths(Some(Vec::new()));
                l.set_readonly_paths(Some(Vec::new()));
            })?;
        }
        let bundle = fx.bundle(id, &spec)?.display().to_string();
        fx.created.push(id.to_string());
        let err = std::fs::File::create(fx.dir.join(format!("{id}.err")))?;
        let run = Cli::Kaji.cmd(&fx, &["run", "-d", "--bundle", &bundle, id]);
        let mut run = if by_chrooted_runtime { chrooted(&run, &host) } else { run };
        let st = run.stdout(std::process::Stdio::null()).stderr(err).status()?;
        anyhow::ensure!(st.success(), "{id}: {}", std::fs::read_to_string(fx.dir.join(format!("{id}.err")))?);

        // Through the CLI and the library, both of which run the exec helper.
        let cli = Cli::Kaji.cmd(&fx, &["exec", id, "cat", "/etc/marker"]).output()?;
        let rt = fx.native();
        let lib = run_until(&rt, &spec, id, &["cat", "/etc/marker", "/proc/1/cmdline"], |r| r.stdout.contains('\0'))?;
        rt.delete(id, true)?;
        seen.push((id, String::from_utf8_lossy(&cli.stdout).into_owned(), lib.stdout, lib.stderr));
    }
    for (id, cli, lib, err) in seen {
        assert_eq!(cli, "the container's rootfs\n", "{id}: the exec'd command's root");
        assert_eq!(lib, format!("the container's rootfs\n/bin/sh\0-c\0{INIT}\0"), "{id}: {err}");
    }
    fx.assert_clean();
    Ok(())
}

/// [`run`] until `done` holds for its result (the init may still be exec'ing its command).
fn run_until(
    rt: &dyn ContainerRuntime,
    spec: &Spec,
    id: &str,
    args: &[&str],
    done: impl Fn(&Ran) -> bool,
) -> anyhow::Result<Ran> {
    let mut r = run(rt, spec, id, args, None)?;
    for _ in 0..50 {
        if done(&r) {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        r = run(rt, spec, id, args, None)?;
    }
    Ok(r)
}
