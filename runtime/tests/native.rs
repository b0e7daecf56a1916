//! Root-only integration tests of the native backend on a busybox rootfs.

mod common;

use common::{can_run, stdout_of, Fixture};
use kaji_runtime::ContainerRuntime;

#[test]
fn runs_as_pid_1_with_its_own_hostname() -> anyhow::Result<()> {
    if !can_run() {
        return Ok(());
    }
    let mut fx = Fixture::new()?;
    let spec = fx.spec("basic", "echo pid=$$; hostname; echo err >&2; exit 3")?;
    let (exit, log) = fx.run(&fx.native(), "basic", &spec)?;
    assert_eq!(exit.code, 3);
    assert_eq!(stdout_of(&log), vec!["pid=1", "h-basic"]);
    assert!(log.contains(&("stderr".to_string(), "err".to_string())));
    fx.assert_clean();
    Ok(())
}

#[test]
fn mounts_masks_readonly_paths_caps_and_no_new_privs() -> anyhow::Result<()> {
    if !can_run() {
        return Ok(());
    }
    let mut fx = Fixture::new()?;
    let script = "for f in /proc/kcore /proc/keys /proc/timer_list /proc/sched_debug; do [ -e $f ] && echo masked $(wc -c < $f); done; grep -E '^(CapEff|CapBnd|NoNewPrivs|Seccomp):' /proc/self/status; \
                  grep -E ' /(proc|sys|dev|dev/pts|dev/shm|dev/mqueue|proc/sys) ' /proc/mounts | cut -d' ' -f2,3,4 | cut -d, -f1; \
                  test -c /dev/null && test -c /dev/urandom && echo devices-ok; \
                  echo x > /proc/sysrq-trigger 2>/dev/null || echo sysrq-denied; \
                  touch /rootfs-writable && echo rootfs-rw";
    let spec = fx.spec("mounts", script)?;
    let (exit, log) = fx.run(&fx.native(), "mounts", &spec)?;
    let out = stdout_of(&log);
    assert_eq!(exit.code, 0, "{log:?}");
    // Docker's default capability set, in effective and bounding.
    assert!(out.iter().any(|l| l.starts_with("masked ")), "{out:?}");
    assert!(out.iter().filter(|l| l.starts_with("masked ")).all(|l| l == "masked 0"), "{out:?}");
    for want in [
        "CapEff:\t00000000a80425fb",
        "CapBnd:\t00000000a80425fb",
        "NoNewPrivs:\t1",
        "Seccomp:\t2",
        "/proc proc rw",
        "/dev tmpfs rw",
        "/dev/pts devpts rw",
        "/dev/shm tmpfs rw",
        "/dev/mqueue mqueue rw",
        "/sys sysfs ro",
        "/proc/sys proc ro",
        "devices-ok",
        "sysrq-denied",
        "rootfs-rw",
    ] {
        assert!(out.iter().any(|l| l == want), "missing {want:?} in {out:?}");
    }
    fx.assert_clean();
    Ok(())
}

#[test]
fn seccomp_profile_from_the_spec_denies_syscalls() -> anyhow::Result<()> {
    if !can_run() {
        return Ok(());
    }
    use oci_spec::runtime::{LinuxSeccompAction, LinuxSyscallBuilder};
    let mut fx = Fixture::new()?;
    let mut spec = fx.spec("seccomp", "mkdir /tmp/d && echo made; echo after")?;
    let mut profile = kaji_runtime::seccomp::default_profile();
    let mut rules = profile.syscalls().clone().unwrap_or_default();
    rules.push(
        LinuxSyscallBuilder::default()
            .names(vec!["mkdir".to_string(), "mkdirat".to_string()])
            .action(LinuxSeccompAction::ScmpActErrno)
            .errno_ret(libc::ENOTSUP as u32)
            .build()?,
    );
    profile.set_syscalls(Some(rules));
    common::edit_linux(&mut spec, |linux| {
        linux.set_seccomp(Some(profile));
    })?;
    let (_, log) = fx.run(&fx.native(), "seccomp", &spec)?;
    assert_eq!(stdout_of(&log), vec!["after"], "{log:?}");
    assert!(log.iter().any(|(s, l)| s == "stderr" && l.contains("not supported")), "{log:?}");
    fx.assert_clean();
    Ok(())
}

/// In a new cgroup namespace the container sees its own cgroups as the root, in every
/// hierarchy: the namespace is made once the init is inside them, not where the shim is.
#[test]
fn a_new_cgroup_namespace_is_rooted_at_the_containers_cgroups() -> anyhow::Result<()> {
    if !can_run() {
        return Ok(());
    }
    let mut fx = Fixture::new()?;
    let mut spec = fx.spec("cgns", "cat /proc/self/cgroup")?;
    let cgroup = oci_spec::runtime::LinuxNamespaceBuilder::default()
        .typ(oci_spec::runtime::LinuxNamespaceType::Cgroup)
        .build()?;
    common::edit_linux(&mut spec, |linux| {
        linux.namespaces_mut().get_or_insert_with(Vec::new).push(cgroup);
    })?;
    let (exit, log) = fx.run(&fx.native(), "cgns", &spec)?;
    assert_eq!(exit.code, 0, "{log:?}");
    let lines = stdout_of(&log);
    let memory = lines.iter().find(|l| l.split(':').nth(1).is_some_and(|c| c.split(',').any(|c| c == "memory")));
    let in_own = |l: &String| l.rsplit(':').next() == Some("/");
    match memory {
        // v1/hybrid: the memory hierarchy shows the container's cgroup as "/".
        Some(l) => assert!(in_own(l), "{lines:?}"),
        // pure v2: the unified line does.
        None => assert!(lines.iter().any(|l| l.starts_with("0::") && in_own(l)), "{lines:?}"),
    }
    fx.assert_clean();
    Ok(())
}

/// The default spec denies every device but the runtime's short list: with CAP_MKNOD (in the
/// default set) a container can make a node for a host device, and must still not open it.
/// The device is the hardware RNG (10:183), which any root process may open: without the rule
/// the open succeeds (or fails with ENODEV/ENXIO where there is none), never with EPERM.
#[test]
fn devices_outside_the_default_list_cannot_be_opened() -> anyhow::Result<()> {
    // v1 devices controller here, the eBPF device program on a pure cgroup v2 host.
    if !can_run() {
        return Ok(());
    }
    let mut fx = Fixture::new()?;
    let script = "mknod /dev/rng c 10 183 && echo made; ( : </dev/rng ); head -c 3 /dev/zero | wc -c";
    let spec = fx.spec("devs", script)?;
    let (exit, log) = fx.run(&fx.native(), "devs", &spec)?;
    assert_eq!(exit.code, 0, "{log:?}");
    assert_eq!(stdout_of(&log), vec!["made", "3"], "{log:?}");
    assert!(
        log.iter().any(|(s, l)| s == "stderr" && l.contains("/dev/rng") && l.contains("Operation not permitted")),
        "{log:?}"
    );
    fx.assert_clean();
    Ok(())
}

fn with_resources(
    spec: &mut oci_spec::runtime::Spec,
    resources: oci_spec::runtime::LinuxResources,
) -> anyhow::Result<()> {
    common::edit_linux(spec, |linux| {
        linux.set_resources(Some(resources));
    })
}

#[test]
fn memory_limit_oom_kills_and_reports_137_oom_killed() -> anyhow::Result<()> {
    if !can_run() {
        return Ok(());
    }
    use oci_spec::runtime::{LinuxMemoryBuilder, LinuxResourcesBuilder};
    let mut fx = Fixture::new()?;
    let mut spec = fx.spec("oom", "dd if=/dev/zero of=/dev/null bs=64M count=1; echo survived")?;
    let mem = LinuxMemoryBuilder::default().limit(32 << 20).swap(32 << 20).build()?;
    with_resources(&mut spec, LinuxResourcesBuilder::default().memory(mem).build()?)?;
    let (exit, log) = fx.run(&fx.native(), "oom", &spec)?;
    assert!(exit.oom_killed, "{exit:?} {log:?}");
    assert!(log.iter().any(|(s, l)| s == "stderr" && l == "Killed"), "{exit:?} {log:?}");
    fx.assert_clean();

    // The same allocation without a limit is not OOM-killed: the test detects the limit.
    let spec = fx.spec("no-oom", "dd if=/dev/zero of=/dev/null bs=64M count=1 2>/dev/null; echo survived")?;
    let (exit, log) = fx.run(&fx.native(), "no-oom", &spec)?;
    assert_eq!((exit.code, exit.oom_killed), (0, false));
    assert_eq!(stdout_of(&log), vec!["survived"]);
    Ok(())
}

#[test]
fn oom_of_pid_1_exits_137() -> anyhow::Result<()> {
    if !can_run() {
        return Ok(());
    }
    use oci_spec::runtime::{LinuxMemoryBuilder, LinuxResourcesBuilder};
    let mut fx = Fixture::new()?;
    let mut spec = fx.spec("oom1", "")?;
    let mut process = spec.process().clone().ok_or_else(|| anyhow::anyhow!("no process"))?;
    process.set_args(Some(["/bin/dd", "if=/dev/zero", "of=/dev/null", "bs=64M", "count=1"].map(String::from).to_vec()));
    spec.set_process(Some(process));
    let mem = LinuxMemoryBuilder::default().limit(32 << 20).swap(32 << 20).build()?;
    with_resources(&mut spec, LinuxResourcesBuilder::default().memory(mem).build()?)?;
    let (exit, _) = fx.run(&fx.native(), "oom1", &spec)?;
    assert_eq!((exit.code, exit.signal, exit.oom_killed), (137, Some(9), true));
    fx.assert_clean();
    Ok(())
}

#[test]
fn pids_limit_stops_fork_and_cgroup_shows_cpu_and_memory_limits() -> anyhow::Result<()> {
    if !can_run() {
        return Ok(());
    }
    use kaji_runtime::CreateOptions;
    use oci_spec::runtime::{LinuxCpuBuilder, LinuxMemoryBuilder, LinuxPidsBuilder, LinuxResourcesBuilder};
    let mut fx = Fixture::new()?;
    let mut spec = fx.spec("limits", "for i in 1 2 3 4 5 6 7 8; do sleep 30 & done; echo all-forked")?;
    let resources = LinuxResourcesBuilder::default()
        .pids(LinuxPidsBuilder::default().limit(4).build()?)
        .cpu(LinuxCpuBuilder::default().quota(50_000i64).period(100_000u64).shares(512u64).build()?)
        .memory(LinuxMemoryBuilder::default().limit(64 << 20).build()?)
        .build()?;
    with_resources(&mut spec, resources)?;
    let rt = fx.native();
    let bundle = fx.bundle("limits", &spec)?;
    fx.created.push("limits".into());
    let log = fx.log_path("limits");
    rt.create("limits", &bundle, &CreateOptions { log_path: Some(log.clone()), ..Default::default() })?;
    let cg = |ctrl: &str, file: &str| -> String {
        let v1 = format!("/sys/fs/cgroup/{ctrl}/{}/limits/{file}", fx.cgroup_parent);
        std::fs::read_to_string(v1).unwrap_or_default().trim().to_string()
    };
    if std::path::Path::new("/sys/fs/cgroup/cpu").is_dir() {
        assert_eq!(cg("cpu", "cpu.cfs_quota_us"), "50000");
        assert_eq!(cg("cpu", "cpu.cfs_period_us"), "100000");
        assert_eq!(cg("cpu", "cpu.shares"), "512");
        assert_eq!(cg("memory", "memory.limit_in_bytes"), (64u64 << 20).to_string());
        assert_eq!(cg("pids", "pids.max"), "4");
    } else {
        let v2 = |f: &str| {
            std::fs::read_to_string(format!("/sys/fs/cgroup/{}/limits/{f}", fx.cgroup_parent)).unwrap_or_default()
        };
        assert_eq!(v2("cpu.max").trim(), "50000 100000");
        assert_eq!(v2("pids.max").trim(), "4");
    }
    assert!(rt.usage("limits")?.pids >= 1);
    rt.start("limits")?;
    let exit = rt.wait("limits", Some(std::time::Duration::from_secs(30)))?;
    rt.delete("limits", false)?;
    let lines = common::read_log(&log);
    assert!(!stdout_of(&lines).contains(&"all-forked".to_string()), "{lines:?}");
    assert!(lines.iter().any(|(s, l)| s == "stderr" && l.contains("fork")), "{lines:?} {exit:?}");
    fx.assert_clean();
    Ok(())
}

#[test]
fn signals_reach_the_process_and_sigkill_is_137() -> anyhow::Result<()> {
    if !can_run() {
        return Ok(());
    }
    use kaji_runtime::{CreateOptions, Status};
    use nix::sys::signal::Signal;
    let mut fx = Fixture::new()?;
    let rt = fx.native();
    let spec = fx.spec("sig", "trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.05; done")?;
    let bundle = fx.bundle("sig", &spec)?;
    fx.created.push("sig".into());
    let log = fx.log_path("sig");
    rt.create("sig", &bundle, &CreateOptions { log_path: Some(log.clone()), ..Default::default() })?;
    assert_eq!(rt.state("sig")?.status, Status::Created);
    rt.start("sig")?;
    assert!(common::wait_for_log(&log, "ready"));
    assert_eq!(rt.state("sig")?.status, Status::Running);
    assert!(rt.delete("sig", false).is_err(), "running containers need force");
    rt.kill("sig", Signal::SIGTERM)?;
    let exit = rt.wait("sig", Some(std::time::Duration::from_secs(10)))?;
    assert_eq!((exit.code, exit.oom_killed), (7, false));
    assert_eq!(rt.state("sig")?.status, Status::Stopped);
    rt.delete("sig", false)?;

    let spec = fx.spec("sig9", "echo ready; while :; do sleep 1; done")?;
    let bundle = fx.bundle("sig9", &spec)?;
    fx.created.push("sig9".into());
    let log = fx.log_path("sig9");
    rt.create("sig9", &bundle, &CreateOptions { log_path: Some(log.clone()), ..Default::default() })?;
    rt.start("sig9")?;
    assert!(common::wait_for_log(&log, "ready"));
    rt.kill("sig9", Signal::SIGKILL)?;
    let exit = rt.wait("sig9", Some(std::time::Duration::from_secs(10)))?;
    assert_eq!((exit.code, exit.signal, exit.oom_killed), (137, Some(9), false));
    rt.delete("sig9", false)?;
    fx.assert_clean();
    Ok(())
}

#[test]
fn force_delete_of_a_running_container_leaves_nothing() -> anyhow::Result<()> {
    if !can_run() {
        return Ok(());
    }
    use kaji_runtime::CreateOptions;
    let mut fx = Fixture::new()?;
    let rt = fx.native();
    let spec = fx.spec("force", "sleep 1000 & sleep 1000 & echo ready; wait")?;
    let bundle = fx.bundle("force", &spec)?;
    fx.created.push("force".into());
    let log = fx.log_path("force");
    let st = rt.create("force", &bundle, &CreateOptions { log_path: Some(log.clone()), ..Default::default() })?;
    rt.start("force")?;
    assert!(common::wait_for_log(&log, "ready"));
    let record: serde_json::Value = serde_json::from_slice(&std::fs::read(fx.state_root.join("force/state.json"))?)?;
    let shim_pid = record["shimPid"].as_i64().ok_or_else(|| anyhow::anyhow!("no shimPid"))? as i32;
    rt.delete("force", true)?;
    assert!(common::exited(st.pid), "init still alive");
    assert!(common::exited(shim_pid), "shim still alive");
    assert!(rt.list()?.is_empty());
    fx.assert_clean();
    Ok(())
}

#[test]
fn bad_specs_fail_precisely_and_clean_up() -> anyhow::Result<()> {
    if !can_run() {
        return Ok(());
    }
    use kaji_runtime::CreateOptions;
    let mut fx = Fixture::new()?;
    let rt = fx.native();
    let mut spec = fx.spec("nobin", "")?;
    let mut process = spec.process().clone().ok_or_else(|| anyhow::anyhow!("no process"))?;
    process.set_args(Some(vec!["no-such-binary".to_string()]));
    spec.set_process(Some(process));
    let bundle = fx.bundle("nobin", &spec)?;
    fx.created.push("nobin".into());
    let err = rt.create("nobin", &bundle, &CreateOptions::default()).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("no-such-binary"), "{err}");
    fx.assert_clean();

    let mut spec = fx.spec("badroot", "true")?;
    spec.set_root(Some(oci_spec::runtime::RootBuilder::default().path(fx.dir.join("missing")).build()?));
    let bundle = fx.bundle("badroot", &spec)?;
    let err = rt.create("badroot", &bundle, &CreateOptions::default()).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("missing"), "{err}");

    let mut spec = fx.spec("badmount", "true")?;
    let mut mounts = spec.mounts().clone().unwrap_or_default();
    mounts.push(
        oci_spec::runtime::MountBuilder::default()
            .destination("/data")
            .typ("bind")
            .source(fx.dir.join("no-such-source"))
            .options(vec!["rbind".to_string()])
            .build()?,
    );
    spec.set_mounts(Some(mounts));
    let bundle = fx.bundle("badmount", &spec)?;
    fx.created.push("badmount".into());
    let err =
        rt.create("badmount", &bundle, &CreateOptions::default()).err().map(|e| e.to_string()).unwrap_or_default();
    assert!(err.contains("/data"), "{err}");
    fx.assert_clean();
    Ok(())
}

#[test]
fn a_writer_into_a_closed_pipe_dies_of_sigpipe_as_it_would_anywhere() -> anyhow::Result<()> {
    if !can_run() {
        return Ok(());
    }
    let mut fx = Fixture::new()?;
    // Every Rust program starts with SIGPIPE ignored, and an ignored signal stays ignored across
    // exec: without the reset, `yes` would get EPIPE and exit 1 instead.
    let spec = fx.spec("pipe", "(yes; echo yes-exit=$? >&2) | head -n 1")?;
    let (exit, log) = fx.run(&fx.native(), "pipe", &spec)?;
    assert_eq!(exit.code, 0, "{log:?}");
    assert_eq!(log, vec![("stdout".to_string(), "y".to_string()), ("stderr".to_string(), "yes-exit=141".to_string())]);
    fx.assert_clean();
    Ok(())
}
