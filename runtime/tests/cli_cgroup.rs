//! Root-only tests of the verbs that act on a running container's cgroup — `pause`, `resume`,
//! `ps`, `events`, `update`, `kill --all` — and of `exec`'s flags, kaji-runtime beside runc.

mod common;

use std::process::Stdio;
use std::time::Duration;

use common::{Cli, Fixture};

/// A detached container (`run -d`) running a loop that counts (the count renamed into place,
/// so a read from outside never sees it half written), for both runtimes.
fn start(fx: &mut Fixture, cli: Cli, id: &str) -> anyhow::Result<()> {
    let spec = fx.spec(id, "i=0; while :; do i=$((i+1)); echo $i > /tmp/c; mv /tmp/c /tmp/count; sleep 0.05; done")?;
    let b = fx.bundle(id, &spec)?;
    fx.created.push(id.to_string());
    let st = cli.cmd(fx, &["run", "-d", "--bundle", &b.display().to_string(), id]).stdout(Stdio::null()).status()?;
    anyhow::ensure!(st.success(), "{cli:?} run -d");
    Ok(())
}

/// The loop's counter, read from outside (an exec'd process would be frozen too).
fn count(init: i64) -> anyhow::Result<u64> {
    Ok(std::fs::read_to_string(format!("/proc/{init}/root/tmp/count"))?.trim().parse()?)
}

/// A limit of the container's cgroup: the v1 file of `controller`, or the v2 file.
fn limit(fx: &Fixture, id: &str, controller: &str, v1: &str, v2: &str) -> String {
    let rel = format!("{}/{id}", fx.cgroup_parent);
    let path = match std::path::Path::new("/sys/fs/cgroup").join(controller).is_dir() {
        true => format!("/sys/fs/cgroup/{controller}/{rel}/{v1}"),
        false => format!("/sys/fs/cgroup/{rel}/{v2}"),
    };
    std::fs::read_to_string(path).unwrap_or_default().trim().to_string()
}

#[test]
fn pause_ps_events_update_and_kill_all_act_on_the_running_container() -> anyhow::Result<()> {
    common::require_cli();
    let mut fx = Fixture::new()?;
    let mut seen = Vec::new();
    for cli in [Cli::Kaji, Cli::Runc] {
        let id = format!("cg-{cli:?}").to_lowercase();
        start(&mut fx, cli, &id)?;
        std::thread::sleep(Duration::from_millis(200));
        let init: i64 =
            serde_json::from_str::<serde_json::Value>(&cli.out(&fx, &["state", &id])?)?["pid"].as_i64().unwrap_or(0);

        cli.out(&fx, &["pause", &id])?;
        let paused = cli.status(&fx, &id)?;
        let before = count(init)?;
        std::thread::sleep(Duration::from_millis(300));
        let frozen = count(init)? == before;
        let exec_refused = !cli.cmd(&fx, &["exec", &id, "true"]).status()?.success();
        cli.out(&fx, &["resume", &id])?;
        let resumed = cli.status(&fx, &id)?;

        let pids: Vec<i64> = serde_json::from_str(&cli.out(&fx, &["ps", "--format", "json", &id])?)?;
        let table = cli.out(&fx, &["ps", &id])?;
        let stats: serde_json::Value = serde_json::from_str(&cli.out(&fx, &["events", "--stats", &id])?)?;

        cli.out(&fx, &["update", "--pids-limit", "17", "--memory", "40m", &id])?;
        let limits = (
            limit(&fx, &id, "pids", "pids.max", "pids.max"),
            limit(&fx, &id, "memory", "memory.limit_in_bytes", "memory.max"),
        );

        cli.out(&fx, &["kill", "--all", &id, "KILL"])?;
        let mut stopped = String::new();
        for _ in 0..200 {
            stopped = cli.status(&fx, &id)?;
            if stopped == "stopped" {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        cli.out(&fx, &["delete", &id])?;
        seen.push((
            paused,
            frozen,
            exec_refused,
            resumed,
            pids.contains(&init),
            table.lines().next().is_some_and(|h| h.contains("PID")) && table.lines().count() >= 2,
            stats["type"] == "stats" && stats["data"]["memory"]["usage"]["usage"].as_u64().is_some_and(|u| u > 0),
            stats["data"]["pids"]["current"].as_u64().is_some_and(|n| n >= 1),
            limits,
            stopped,
        ));
    }
    assert_eq!(
        seen[0],
        (
            "paused".into(),
            true,
            true,
            "running".into(),
            true,
            true,
            true,
            true,
            ("17".into(), (40u64 << 20).to_string()),
            "stopped".into()
        )
    );
    assert_eq!(seen[0], seen[1], "kaji vs runc");
    fx.assert_clean();
    Ok(())
}

#[test]
fn exec_flags_change_the_process_as_runcs_do() -> anyhow::Result<()> {
    common::require_cli();
    let mut fx = Fixture::new()?;
    let mut seen = Vec::new();
    for cli in [Cli::Kaji, Cli::Runc] {
        let id = format!("ex-{cli:?}").to_lowercase();
        start(&mut fx, cli, &id)?;
        let probe = "echo A=$A; pwd; id -u; id -g; id -G; grep -E '^(CapEff|NoNewPrivs)' /proc/self/status";
        let flags = cli.out(
            &fx,
            &[
                "exec",
                "-e",
                "A=1",
                "--cwd",
                "/tmp",
                "-u",
                "65534:65534",
                "-g",
                "7",
                "--cap",
                "CAP_SYS_ADMIN",
                &id,
                "sh",
                "-c",
                probe,
            ],
        )?;
        let code = cli.cmd(&fx, &["exec", &id, "sh", "-c", "exit 9"]).status()?.code();
        let pid_file = fx.dir.join(format!("{id}.exec.pid"));
        let detached = cli
            .cmd(&fx, &["exec", "-d", "--pid-file", &pid_file.display().to_string(), &id, "sleep", "30"])
            .stdout(Stdio::null())
            .status()?
            .success();
        let pid: i32 = std::fs::read_to_string(&pid_file)?.trim().parse()?;
        // runc's pid file can name its init process a moment before it has exec'd the command.
        let running = (0..500).any(|_| {
            let exec_d = std::fs::read_to_string(format!("/proc/{pid}/cmdline")).is_ok_and(|c| c.starts_with("sleep"));
            if !exec_d {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            exec_d
        });
        cli.out(&fx, &["delete", "--force", &id])?;
        seen.push((flags, code, detached, running));
    }
    assert!(seen[0].0.starts_with("A=1\n/tmp\n65534\n65534\n"), "{}", seen[0].0);
    assert_eq!((seen[0].1, seen[0].2, seen[0].3), (Some(9), true, true));
    assert_eq!(seen[0], seen[1], "kaji vs runc");
    fx.assert_clean();
    Ok(())
}
