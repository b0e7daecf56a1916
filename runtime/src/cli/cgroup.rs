//! The verbs that work on a container's cgroup: `update` (its limits, while it runs), `ps` (its
//! processes) and `events` (its usage and OOM kills, as runc's JSON events).

use std::io::Read as _;
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context};
use clap::Args;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use oci_spec::runtime::{LinuxCpu, LinuxMemory, LinuxPids, LinuxResources};
use serde_json::{json, Value};

use super::{logging, Global};
use crate::state::{self, Dir, Record, Status};
use crate::{cgroups, sys};

#[derive(Args, Debug, Clone, Default)]
pub struct UpdateArgs {
    pub id: String,
    /// A JSON file of the resources to set (OCI `linux.resources`), or `-` for stdin; the other
    /// flags are then ignored.
    #[arg(long, short)]
    pub resources: Option<PathBuf>,
    #[arg(long)]
    pub blkio_weight: Option<u16>,
    /// CFS period (µs).
    #[arg(long)]
    pub cpu_period: Option<u64>,
    /// CFS quota (µs per period).
    #[arg(long)]
    pub cpu_quota: Option<i64>,
    /// CPU shares (relative weight).
    #[arg(long)]
    pub cpu_share: Option<u64>,
    #[arg(long)]
    pub cpu_rt_period: Option<u64>,
    #[arg(long)]
    pub cpu_rt_runtime: Option<i64>,
    #[arg(long)]
    pub cpuset_cpus: Option<String>,
    #[arg(long)]
    pub cpuset_mems: Option<String>,
    /// Memory limit (bytes, or with a unit: 64m, 1g).
    #[arg(long)]
    pub memory: Option<String>,
    #[arg(long)]
    pub memory_reservation: Option<String>,
    /// Memory plus swap; -1 for unlimited swap.
    #[arg(long, allow_hyphen_values = true)]
    pub memory_swap: Option<String>,
    #[arg(long)]
    pub kernel_memory: Option<String>,
    #[arg(long)]
    pub kernel_memory_tcp: Option<String>,
    /// Maximum number of pids (0 or less: no limit).
    #[arg(long, allow_hyphen_values = true)]
    pub pids_limit: Option<i64>,
    /// Accepted for runc compatibility (no Intel RDT here).
    #[arg(long)]
    pub l3_cache_schema: Option<String>,
    /// Accepted for runc compatibility (no Intel RDT here).
    #[arg(long)]
    pub mem_bw_schema: Option<String>,
}

/// The container's record, which must be of a created, running or paused container.
fn live_record(g: &Global, id: &str) -> anyhow::Result<Record> {
    let st = g.backend()?.state(id)?;
    if st.status == Status::Stopped {
        bail!("container {id} is not running");
    }
    let record = state::read_json::<Record>(&Dir::new(&g.root, id)?.record())?;
    record.with_context(|| format!("container {id} does not exist"))
}

fn cgroups_path(record: &Record) -> anyhow::Result<PathBuf> {
    record.cgroups_path.clone().with_context(|| format!("container {} has no cgroup", record.id))
}

/// Pure: a size in bytes, with docker's binary units (`64m`, `1g`, `512KiB`), as runc parses
/// memory flags; `-1` where `allow_unlimited`.
pub fn parse_bytes(s: &str, allow_unlimited: bool) -> anyhow::Result<i64> {
    let t = s.trim();
    if allow_unlimited && t == "-1" {
        return Ok(-1);
    }
    let lower = t.to_ascii_lowercase();
    let digits = lower.trim_end_matches(|c: char| c.is_ascii_alphabetic() || c == ' ');
    let unit = lower[digits.len()..].trim_start();
    let unit = unit.strip_suffix('b').unwrap_or(unit);
    let unit = unit.strip_suffix('i').unwrap_or(unit);
    let shift = match unit {
        "" => 0,
        "k" => 10,
        "m" => 20,
        "g" => 30,
        "t" => 40,
        "p" => 50,
        _ => bail!("invalid size {s:?}"),
    };
    let n: f64 = digits.parse().map_err(|_| anyhow::anyhow!("invalid size {s:?}"))?;
    if n < 0.0 {
        bail!("invalid size {s:?}");
    }
    Ok((n * (1u64 << shift) as f64) as i64)
}

/// Pure: the resources `update`'s flags ask for (what is not given stays as it is).
pub fn resources_from_flags(a: &UpdateArgs) -> anyhow::Result<LinuxResources> {
    let mut r = LinuxResources::default();
    let bytes = |v: &Option<String>, unlimited: bool| v.as_deref().map(|s| parse_bytes(s, unlimited)).transpose();
    let (limit, reservation, swap) =
        (bytes(&a.memory, true)?, bytes(&a.memory_reservation, true)?, bytes(&a.memory_swap, true)?);
    let (kernel, kernel_tcp) = (bytes(&a.kernel_memory, true)?, bytes(&a.kernel_memory_tcp, true)?);
    if limit.is_some() || reservation.is_some() || swap.is_some() || kernel.is_some() || kernel_tcp.is_some() {
        let mut m = LinuxMemory::default();
        m.set_limit(limit);
        m.set_reservation(reservation);
        m.set_swap(swap);
        m.set_kernel(kernel);
        m.set_kernel_tcp(kernel_tcp);
        r.set_memory(Some(m));
    }
    let cpu_given = a.cpu_period.is_some()
        || a.cpu_quota.is_some()
        || a.cpu_share.is_some()
        || a.cpu_rt_period.is_some()
        || a.cpu_rt_runtime.is_some()
        || a.cpuset_cpus.is_some()
        || a.cpuset_mems.is_some();
    if cpu_given {
        let mut c = LinuxCpu::default();
        c.set_period(a.cpu_period);
        c.set_quota(a.cpu_quota);
        c.set_shares(a.cpu_share);
        c.set_realtime_period(a.cpu_rt_period);
        c.set_realtime_runtime(a.cpu_rt_runtime);
        c.set_cpus(a.cpuset_cpus.clone());
        c.set_mems(a.cpuset_mems.clone());
        r.set_cpu(Some(c));
    }
    if let Some(limit) = a.pids_limit {
        let mut p = LinuxPids::default();
        p.set_limit(if limit > 0 { limit } else { -1 });
        r.set_pids(Some(p));
    }
    if let Some(w) = a.blkio_weight {
        let mut b = oci_spec::runtime::LinuxBlockIo::default();
        b.set_weight(Some(w));
        r.set_block_io(Some(b));
    }
    Ok(r)
}

pub fn update(g: &Global, a: &UpdateArgs) -> anyhow::Result<()> {
    let record = live_record(g, &a.id)?;
    let resources: LinuxResources = match a.resources.as_deref() {
        Some(p) if p == Path::new("-") => {
            let mut text = String::new();
            std::io::stdin().read_to_string(&mut text).context("reading resources from stdin")?;
            serde_json::from_str(&text).context("invalid resources")?
        }
        Some(p) => serde_json::from_slice(&std::fs::read(p).with_context(|| format!("reading {}", p.display()))?)
            .with_context(|| format!("invalid resources in {}", p.display()))?,
        None => resources_from_flags(a)?,
    };
    let path = cgroups_path(&record)?;
    cgroups::Cgroup::new(&path)?.apply(&resources)?;
    Ok(())
}

pub fn ps(g: &Global, id: &str, format: &str, ps_args: &[String]) -> anyhow::Result<()> {
    let record = live_record(g, id)?;
    let pids: Vec<i32> = cgroups::pids(&cgroups_path(&record)?)?.iter().map(|p| p.as_raw()).collect();
    if format == "json" {
        logging::print(&format!("{}\n", serde_json::to_string(&pids)?));
        return Ok(());
    }
    let args: Vec<String> = if ps_args.is_empty() { vec!["-ef".into()] } else { ps_args.to_vec() };
    let out = std::process::Command::new("ps").args(&args).output().context("failed to run ps")?;
    if !out.status.success() {
        bail!("ps {}: {}", args.join(" "), String::from_utf8_lossy(&out.stderr).trim());
    }
    logging::print(&filter_ps(&String::from_utf8_lossy(&out.stdout), &pids)?);
    Ok(())
}

/// Pure: the header of ps(1)'s output and its lines whose PID column is one of `pids`.
pub fn filter_ps(output: &str, pids: &[i32]) -> anyhow::Result<String> {
    let mut lines = output.lines();
    let header = lines.next().unwrap_or_default();
    let column = header.split_whitespace().position(|h| h == "PID").context("ps output has no PID column")?;
    let mut out = format!("{header}\n");
    for l in lines {
        if l.split_whitespace().nth(column).and_then(|p| p.parse::<i32>().ok()).is_some_and(|p| pids.contains(&p)) {
            out.push_str(l);
            out.push('\n');
        }
    }
    Ok(out)
}

/// Pure: an interval such as `5s`, `500ms`, `1m`.
pub fn parse_interval(s: &str) -> anyhow::Result<Duration> {
    let (num, unit) = s.split_at(s.find(|c: char| c.is_ascii_alphabetic()).unwrap_or(s.len()));
    let n: f64 = num.parse().map_err(|_| anyhow::anyhow!("invalid interval {s:?}"))?;
    let secs = match unit {
        "ms" => n / 1000.0,
        "s" | "" => n,
        "m" => n * 60.0,
        "h" => n * 3600.0,
        _ => bail!("invalid interval {s:?}"),
    };
    if secs <= 0.0 {
        bail!("duration interval must be greater than 0");
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Pure: libcgroups' stats as runc's `events` data (its `types.Stats` JSON).
pub fn stats_json(s: &libcgroups::stats::Stats) -> Value {
    let entry = |m: &libcgroups::stats::MemoryData| json!({"limit": m.limit, "usage": m.usage, "max": m.max_usage, "failcnt": m.fail_count});
    let blkio = |v: &[libcgroups::stats::BlkioDeviceStat]| -> Value {
        v.iter()
            .map(|e| json!({"major": e.major, "minor": e.minor, "op": e.op_type.clone().unwrap_or_default(), "value": e.value}))
            .collect()
    };
    let hugetlb: serde_json::Map<String, Value> = s
        .hugetlb
        .iter()
        .map(|(k, h)| (k.clone(), json!({"usage": h.usage, "max": h.max_usage, "failcnt": h.fail_count})))
        .collect();
    json!({
        "cpu": {
            "usage": {
                "total": s.cpu.usage.usage_total,
                "percpu": s.cpu.usage.per_core_usage_total,
                "percpu_kernel": s.cpu.usage.per_core_usage_kernel,
                "percpu_user": s.cpu.usage.per_core_usage_user,
                "kernel": s.cpu.usage.usage_kernel,
                "user": s.cpu.usage.usage_user,
            },
            "throttling": {
                "periods": s.cpu.throttling.periods,
                "throttledPeriods": s.cpu.throttling.throttled_periods,
                "throttledTime": s.cpu.throttling.throttled_time,
            },
        },
        "cpuset": {},
        "memory": {
            "cache": s.memory.cache,
            "usage": entry(&s.memory.memory),
            "swap": entry(&s.memory.memswap),
            "kernel": entry(&s.memory.kernel),
            "kernelTCP": entry(&s.memory.kernel_tcp),
            "raw": s.memory.stats,
        },
        "pids": {"current": s.pids.current, "limit": s.pids.limit},
        "blkio": {
            "ioServiceBytesRecursive": blkio(&s.blkio.service_bytes),
            "ioServicedRecursive": blkio(&s.blkio.serviced),
            "ioQueueRecursive": blkio(&s.blkio.queued),
            "ioServiceTimeRecursive": blkio(&s.blkio.service_time),
            "ioWaitTimeRecursive": blkio(&s.blkio.wait_time),
            "ioMergedRecursive": blkio(&s.blkio.merged),
            "ioTimeRecursive": blkio(&s.blkio.time),
            "sectorsRecursive": blkio(&s.blkio.sectors),
        },
        "hugetlb": hugetlb,
        "intel_rdt": {},
        "network_interfaces": null,
    })
}

fn event(kind: &str, id: &str, data: Option<Value>) -> String {
    let mut v = json!({"type": kind, "id": id});
    if let Some(d) = data {
        v["data"] = d;
    }
    format!("{v}\n")
}

pub fn events(g: &Global, id: &str, once: bool, interval: &str) -> anyhow::Result<()> {
    let interval = parse_interval(interval)?;
    let record = live_record(g, id)?;
    let path = cgroups_path(&record)?;
    let stats = || -> anyhow::Result<String> {
        let s = cgroups::Cgroup::new(&path)?.stats()?;
        Ok(event("stats", id, Some(stats_json(&s))))
    };
    if once {
        logging::print(&stats()?);
        return Ok(());
    }
    // The init's exit ends the stream; an OOM kill is reported as it happens.
    let init = sys::pidfd_open(nix::unistd::Pid::from_raw(record.pid)).context("the container is not running")?;
    let oom = cgroups::OomWatch::new(&path).ok();
    let mut next = std::time::Instant::now();
    loop {
        if std::time::Instant::now() >= next {
            logging::print(&stats()?);
            next += interval;
        }
        let left = next.saturating_duration_since(std::time::Instant::now());
        let mut fds = vec![PollFd::new(init.as_fd(), PollFlags::POLLIN)];
        if let Some(w) = &oom {
            fds.push(PollFd::new(w.fd(), PollFlags::POLLIN));
        }
        let ready = match nix::poll::poll(&mut fds, PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX)) {
            Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
            Ok(_) => fds.iter().map(|f| f.revents().is_some_and(|r| !r.is_empty())).collect::<Vec<_>>(),
            Err(e) => bail!("poll: {e}"),
        };
        if ready.get(1).copied().unwrap_or(false) {
            if let Some(w) = &oom {
                if w.fired() {
                    logging::print(&event("oom", id, None));
                }
            }
        }
        if ready[0] {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_parse_with_docker_units() {
        assert_eq!(parse_bytes("1024", false).ok(), Some(1024));
        assert_eq!(parse_bytes("64m", false).ok(), Some(64 << 20));
        assert_eq!(parse_bytes("1G", false).ok(), Some(1 << 30));
        assert_eq!(parse_bytes("512KiB", false).ok(), Some(512 << 10));
        assert_eq!(parse_bytes("1.5k", false).ok(), Some(1536));
        assert_eq!(parse_bytes("-1", true).ok(), Some(-1));
        assert!(parse_bytes("-1", false).is_err());
        assert!(parse_bytes("12x", false).is_err());
    }

    #[test]
    fn update_flags_set_only_what_is_given() -> anyhow::Result<()> {
        let a = UpdateArgs {
            memory: Some("64m".into()),
            memory_swap: Some("-1".into()),
            pids_limit: Some(10),
            cpu_quota: Some(5000),
            ..Default::default()
        };
        let r = resources_from_flags(&a)?;
        let m = r.memory().expect("memory");
        assert_eq!((m.limit(), m.swap(), m.reservation()), (Some(64 << 20), Some(-1), None));
        assert_eq!(r.pids().as_ref().map(|p| p.limit()), Some(10));
        let c = r.cpu().clone().expect("cpu");
        assert_eq!((c.quota(), c.period(), c.shares()), (Some(5000), None, None));
        assert!(r.block_io().is_none());
        assert_eq!(resources_from_flags(&UpdateArgs::default())?, LinuxResources::default());
        Ok(())
    }

    #[test]
    fn ps_output_is_filtered_by_the_pid_column() -> anyhow::Result<()> {
        let out = "UID   PID  PPID  C STIME TTY   TIME CMD\nroot    1     0  0 10:00 ?  00:00:01 init\nroot   42     1  0 10:00 ?  00:00:00 sh\n";
        assert_eq!(
            filter_ps(out, &[42])?,
            "UID   PID  PPID  C STIME TTY   TIME CMD\nroot   42     1  0 10:00 ?  00:00:00 sh\n"
        );
        assert!(filter_ps("USER CMD\n", &[1]).is_err());
        Ok(())
    }

    #[test]
    fn intervals_parse_like_go_durations() {
        assert_eq!(parse_interval("5s").ok(), Some(Duration::from_secs(5)));
        assert_eq!(parse_interval("250ms").ok(), Some(Duration::from_millis(250)));
        assert!(parse_interval("0s").is_err());
        assert!(parse_interval("5y").is_err());
    }

    #[test]
    fn stats_have_runcs_shape() {
        let mut s = libcgroups::stats::Stats::default();
        s.memory.memory.usage = 7;
        s.pids.current = 3;
        let v = stats_json(&s);
        assert_eq!(v["memory"]["usage"]["usage"], 7);
        assert_eq!(v["pids"]["current"], 3);
        assert!(v["cpu"]["usage"]["percpu"].is_array());
        assert_eq!(event("oom", "c1", None), "{\"id\":\"c1\",\"type\":\"oom\"}\n");
    }
}
