//! Container cgroups through youki's `libcgroups` (v1, hybrid and v2): create under the path the
//! spec names, apply limits, add the init, read stats and OOM kills, remove.

use std::os::fd::{AsFd, OwnedFd};
use std::path::{Path, PathBuf};

use libcgroups::common::{
    create_cgroup_manager, AnyCgroupManager, CgroupConfig, CgroupManager, CgroupSetup, ControllerOpt,
};
use nix::fcntl::OFlag;
use nix::unistd::Pid;
use oci_spec::runtime::LinuxResources;

const ROOT: &str = "/sys/fs/cgroup";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to set up cgroup manager for {path}")]
    Setup {
        path: PathBuf,
        #[source]
        source: Box<libcgroups::common::CreateCgroupSetupError>,
    },
    #[error("failed to {op} cgroup {path}")]
    Manager {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: Box<libcgroups::common::AnyManagerError>,
    },
    #[error("failed to detect the cgroup setup")]
    Detect(#[source] Box<libcgroups::common::GetCgroupSetupError>),
    #[error("failed to move process {pid} into {path}")]
    Join {
        pid: i32,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to remove cgroup {path}")]
    Remove {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error(transparent)]
    Write(Box<libcgroups::common::WrappedIoError>),
    #[error("failed to {op} {path}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("cgroup {0} does not exist in any hierarchy")]
    Missing(PathBuf),
    #[error(transparent)]
    Devices(Box<crate::devices::Error>),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One container's cgroup. `path` is relative to each hierarchy root (as OCI `cgroupsPath`).
pub struct Cgroup {
    path: PathBuf,
    manager: AnyCgroupManager,
}

/// Resource usage read from the cgroup.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Usage {
    pub memory_bytes: u64,
    pub cpu_usage_ns: u64,
    pub pids: u64,
}

impl Cgroup {
    pub fn new(path: &Path) -> Result<Self> {
        let config =
            CgroupConfig { cgroup_path: path.to_path_buf(), systemd_cgroup: false, container_name: String::new() };
        let manager = create_cgroup_manager(config)
            .map_err(|source| Error::Setup { path: path.into(), source: Box::new(source) })?;
        Ok(Cgroup { path: path.to_path_buf(), manager })
    }

    fn wrap(&self, op: &'static str) -> impl FnOnce(libcgroups::common::AnyManagerError) -> Error + '_ {
        move |source| Error::Manager { op, path: self.path.clone(), source: Box::new(source) }
    }

    /// Creates the cgroup (adding the pid creates the directories) and applies the limits. On a
    /// cgroup v2 host the device rules become its eBPF device program (see [`crate::devices`]).
    pub fn add_and_apply(&self, pid: Pid, resources: &LinuxResources) -> Result<()> {
        self.manager.add_task(pid).map_err(self.wrap("add process to"))?;
        self.apply(resources)?;
        if layout()? == Layout::Unified {
            let rules = crate::devices::with_defaults(resources.devices().as_deref().unwrap_or_default());
            crate::devices::attach(&Path::new(ROOT).join(relative(&self.path)), &rules)
                .map_err(|e| Error::Devices(Box::new(e)))?;
        }
        Ok(())
    }

    /// Applies the limits to an existing cgroup (see [`create_v1`]).
    pub fn apply(&self, resources: &LinuxResources) -> Result<()> {
        let opt = ControllerOpt { resources, disable_oom_killer: false, oom_score_adj: None, freezer_state: None };
        self.manager.apply(&opt).map_err(self.wrap("apply limits to"))?;
        if layout()? == Layout::Unified {
            no_swap_v2(&Path::new(ROOT).join(relative(&self.path)), resources)?;
        }
        Ok(())
    }

    /// Kills what is left inside and removes the directories.
    pub fn remove(&self) -> Result<()> {
        self.manager.remove().map_err(self.wrap("remove"))
    }

    /// Everything libcgroups reads about the cgroup (`events --stats`).
    pub fn stats(&self) -> Result<libcgroups::stats::Stats> {
        self.manager.stats().map_err(self.wrap("read stats of"))
    }

    pub fn usage(&self) -> Result<Usage> {
        let stats = self.manager.stats().map_err(self.wrap("read stats of"))?;
        Ok(Usage {
            memory_bytes: stats.memory.memory.usage,
            cpu_usage_ns: stats.cpu.usage.usage_total,
            pids: stats.pids.current,
        })
    }
}

/// Pure: what `memory.swap.max` must say that libcgroups leaves unwritten: a limit with as
/// much memory+swap as memory means no swap at all, `0` (libcgroups computes 0 and skips it,
/// leaving the default `max`: the container could swap freely).
pub fn v2_swap_off(resources: &LinuxResources) -> bool {
    resources.memory().as_ref().is_some_and(|m| match (m.limit(), m.swap()) {
        (Some(limit), Some(swap)) => limit > 0 && swap == limit,
        _ => false,
    })
}

/// Writes `memory.swap.max` = 0 where [`v2_swap_off`] says so, as runc does; a kernel without
/// swap accounting has no such file, and then there is no swap to turn off.
fn no_swap_v2(dir: &Path, resources: &LinuxResources) -> Result<()> {
    if !v2_swap_off(resources) {
        return Ok(());
    }
    let file = dir.join("memory.swap.max");
    match std::fs::write(&file, "0") {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => Err(Error::Io { op: "write", path: file, source: e }),
        _ => Ok(()),
    }
}

/// Done once by the fork server, so every shim it forks inherits the result: libcgroups opens
/// procfs through `pathrs`, whose first use in a process mounts a private procfs instance
/// (fsopen) and caches its fd; after this, shims use that cached handle instead of each mounting
/// their own. The fd is close-on-exec, so no container process keeps it.
pub fn warm_up() {
    let _ = libcgroups::v1::util::list_subsystem_mount_points();
    let _ = layout();
    let _ = v1_mounts();
}

/// This host's cgroup layout. Fixed at boot, so detected once per process ([`warm_up`] does it
/// in the fork server): every create, OOM check and removal asks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Layout {
    Unified,
    Legacy,
    Hybrid,
}

fn layout() -> Result<Layout> {
    static LAYOUT: std::sync::OnceLock<Layout> = std::sync::OnceLock::new();
    if let Some(l) = LAYOUT.get() {
        return Ok(*l);
    }
    let detected = match libcgroups::common::get_cgroup_setup().map_err(|e| Error::Detect(Box::new(e)))? {
        CgroupSetup::Unified => Layout::Unified,
        CgroupSetup::Legacy => Layout::Legacy,
        CgroupSetup::Hybrid => Layout::Hybrid,
    };
    Ok(*LAYOUT.get_or_init(|| detected))
}

/// A cgroups path (OCI `cgroupsPath`) relative to each hierarchy's root.
fn relative(path: &Path) -> &Path {
    path.strip_prefix("/").unwrap_or(path)
}

/// The directory of the cgroup `path` in the v1 hierarchy that has `controller`, if mounted.
fn v1_dir(controller: &str, path: &Path) -> Result<Option<PathBuf>> {
    let mount = v1_mounts()?.iter().find(|m| m.controllers.iter().any(|c| c == controller));
    Ok(mount.map(|m| m.mount_point.join(relative(path))))
}

/// The directories a cgroup path may occupy on this host: one per v1 hierarchy (including the
/// named systemd one, which runc also joins), one on v2.
pub fn directories(path: &Path) -> Result<Vec<PathBuf>> {
    let rel = relative(path);
    match layout()? {
        Layout::Unified => Ok(vec![Path::new(ROOT).join(rel)]),
        Layout::Legacy | Layout::Hybrid => {
            let mut dirs: Vec<PathBuf> = v1_mounts()?.iter().map(|m| m.mount_point.join(rel)).collect();
            dirs.sort();
            Ok(dirs)
        }
    }
}

/// Moves `pid` into the existing cgroup `path` in every hierarchy where it exists (as `runc exec`
/// joins the container's cgroups); creates nothing and applies no limits.
pub fn join(path: &Path, pid: Pid) -> Result<()> {
    let mut joined = false;
    for dir in directories(path)?.into_iter().filter(|d| d.is_dir()) {
        let procs = dir.join("cgroup.procs");
        std::fs::write(&procs, pid.as_raw().to_string()).map_err(|source| Error::Join {
            pid: pid.as_raw(),
            path: procs.clone(),
            source,
        })?;
        joined = true;
    }
    if joined {
        Ok(())
    } else {
        Err(Error::Missing(path.to_path_buf()))
    }
}

/// The controllers libcgroups' v1 manager puts a container in.
const V1_CONTROLLERS: &[&str] = &[
    "cpu",
    "cpuacct",
    "cpuset",
    "devices",
    "hugetlb",
    "memory",
    "pids",
    "perf_event",
    "blkio",
    "net_prio",
    "net_cls",
    "freezer",
];

/// One cgroup v1 hierarchy as mounted here.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct V1Mount {
    pub mount_point: PathBuf,
    /// The cgroup shown at the mount point (`/` unless only a subtree is mounted).
    pub root: PathBuf,
    pub controllers: Vec<String>,
}

/// The cgroup hierarchies a container joins on a v1 or hybrid host, read from mountinfo once
/// per process (they are mounted at boot and stay, while mountinfo grows with every container's
/// mounts and is read on every container's create, OOM check and removal otherwise): each v1
/// hierarchy with a controller we manage, the named ones (`name=systemd`), and on a hybrid host
/// the v2 one — every hierarchy, as runc joins them.
pub fn v1_mounts() -> Result<&'static [V1Mount]> {
    static MOUNTS: std::sync::OnceLock<Vec<V1Mount>> = std::sync::OnceLock::new();
    if let Some(m) = MOUNTS.get() {
        return Ok(m);
    }
    let path = Path::new("/proc/self/mountinfo");
    let mut mounts = parse_v1_mounts(&std::fs::read_to_string(path).map_err(io_err("read", path))?);
    if !mounts.is_empty() && layout()? == Layout::Hybrid {
        let unified = Path::new(ROOT).join("unified");
        if unified.is_dir() {
            mounts.push(V1Mount { mount_point: unified, root: PathBuf::from("/"), controllers: Vec::new() });
        }
    }
    Ok(MOUNTS.get_or_init(|| mounts))
}

/// v1 controllers no container is put in by libcgroups, which still have hierarchies of their
/// own on some hosts (runc's `cgroup` mount shows them).
const V1_OTHER_CONTROLLERS: &[&str] = &["rdma", "misc", "debug"];

/// Pure: the cgroup v1 mounts in a mountinfo text that carry a controller we manage or a name
/// (`name=systemd`).
pub fn parse_v1_mounts(mountinfo: &str) -> Vec<V1Mount> {
    parse_v1(mountinfo, |o| V1_CONTROLLERS.contains(&o) || o.starts_with("name="))
}

/// Pure: every cgroup v1 hierarchy in a mountinfo text, those of controllers we do not manage
/// included (what a container's `cgroup` mount shows on v1).
pub fn parse_v1_hierarchies(mountinfo: &str) -> Vec<V1Mount> {
    parse_v1(mountinfo, |o| V1_CONTROLLERS.contains(&o) || V1_OTHER_CONTROLLERS.contains(&o) || o.starts_with("name="))
}

fn parse_v1(mountinfo: &str, controller: impl Fn(&str) -> bool) -> Vec<V1Mount> {
    let mut mounts: Vec<V1Mount> = mountinfo
        .lines()
        .filter_map(|line| {
            let (left, right) = line.split_once(" - ")?;
            let mut fields = left.split(' ').skip(3);
            let (root, mount_point) = (fields.next()?, fields.next()?);
            let mut fs = right.split(' ');
            if fs.next()? != "cgroup" {
                return None;
            }
            let options = fs.nth(1)?;
            let controllers: Vec<String> = options.split(',').filter(|o| controller(o)).map(str::to_string).collect();
            (!controllers.is_empty()).then(|| V1Mount {
                mount_point: PathBuf::from(mount_point),
                root: PathBuf::from(root),
                controllers,
            })
        })
        .collect();
    // In mountinfo's order (the order runc mounts them in a container), each hierarchy once:
    // its first mount, the host's at boot. A later mount of the same controllers is someone's
    // bind of a subtree (a container's /sys/fs/cgroup made in a namespace it shares with us).
    let mut seen = std::collections::HashSet::new();
    mounts.retain(|m| {
        let mut key = m.controllers.clone();
        key.sort();
        seen.insert(key)
    });
    mounts
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io { op, path: path.to_path_buf(), source }
}

/// Whether this is a pure cgroup v2 host (one unified hierarchy at /sys/fs/cgroup).
pub fn is_unified() -> bool {
    matches!(layout(), Ok(Layout::Unified))
}

/// The cgroups path of a container whose spec names none, as runc chooses it: `<id>` under the
/// runtime's own cgroup (on v1 and hybrid hosts, under the root: a process's v1 cgroups may
/// differ per hierarchy, and kaji's cgroup paths are one path for all of them).
pub fn default_path(id: &str) -> PathBuf {
    let own = match layout() {
        Ok(Layout::Unified) => std::fs::read_to_string("/proc/self/cgroup")
            .ok()
            .and_then(|t| t.lines().find_map(|l| l.strip_prefix("0::").map(str::to_string))),
        _ => None,
    };
    Path::new(own.as_deref().unwrap_or("/")).join(id)
}

/// Whether containers get v1 cgroups here (a cgroup v1 or hybrid host with at least one v1
/// hierarchy): then [`create_v1`] makes them and [`Hierarchies::enter`] moves the
/// init in; on a pure v2 host, libcgroups' manager does both.
pub fn is_v1() -> Result<bool> {
    Ok(layout()? != Layout::Unified && !v1_mounts()?.is_empty())
}

/// Creates the cgroup `path` in every v1 controller hierarchy, leaving every process where it is.
pub fn create_v1(path: &Path) -> Result<()> {
    let rel = relative(path);
    for m in v1_mounts()? {
        create(&m.mount_point, rel, m.controllers.iter().any(|c| c == "cpuset"))?;
    }
    Ok(())
}

/// Applies `resources` to the existing v1 cgroup `path` (see [`create_v1`]): directly when
/// [`apply_v1_direct`] covers them, with libcgroups' manager otherwise.
pub fn apply_v1(path: &Path, resources: &LinuxResources) -> Result<()> {
    match apply_v1_direct(path, resources)? {
        true => Ok(()),
        false => Cgroup::new(path)?.apply(resources),
    }
}

/// The limits kaji's own specs carry — memory limit (and swap), CPU shares, quota and period,
/// pids limit, device rules — written to an existing v1 cgroup as libcgroups' v1 controllers
/// write them (same files, values, order and default device rules), through libcgroups' file
/// helper. `Ok(false)`, with nothing written, when the resources ask for anything else or a
/// controller is not mounted: the caller then applies them with libcgroups' manager.
///
/// Why not the manager every time: building it costs ~0.8 ms per container on this machine,
/// the largest single cost of a create — it resolves each of its 12 controllers' mount and
/// this process's cgroup by reading mountinfo and /proc/self/cgroup through hardened procfs
/// opens, 24 of them — while the hierarchies are already known here ([`v1_mounts`]).
/// `direct_v1_matches_libcgroups` in the tests applies the same resources both ways and
/// compares every file.
fn apply_v1_direct(path: &Path, resources: &LinuxResources) -> Result<bool> {
    if !direct_v1_covers(resources) {
        return Ok(false);
    }
    let (Some(cpu_dir), Some(devices_dir), Some(memory_dir), Some(pids_dir)) =
        (v1_dir("cpu", path)?, v1_dir("devices", path)?, v1_dir("memory", path)?, v1_dir("pids", path)?)
    else {
        return Ok(false);
    };
    let write = |dir: &Path, file: &str, value: String| {
        libcgroups::common::write_cgroup_file_str(dir.join(file), &value).map_err(|e| Error::Write(Box::new(e)))
    };
    if let Some(cpu) = resources.cpu() {
        for (file, value) in [
            ("cpu.shares", cpu.shares().filter(|v| *v != 0).map(|v| v.to_string())),
            ("cpu.cfs_period_us", cpu.period().filter(|v| *v != 0).map(|v| v.to_string())),
            ("cpu.cfs_quota_us", cpu.quota().filter(|v| *v != 0).map(|v| v.to_string())),
        ] {
            if let Some(v) = value {
                write(&cpu_dir, file, v)?;
            }
        }
    }
    // The spec's rules, then the defaults libcgroups' devices controller always adds.
    let defaults = DEFAULT_DEVICE_RULES.iter().map(|r| (true, r.to_string()));
    for (allow, rule) in resources.devices().iter().flatten().map(|d| (d.allow(), d.to_string())).chain(defaults) {
        write(&devices_dir, if allow { "devices.allow" } else { "devices.deny" }, rule)?;
    }
    if let Some(memory) = resources.memory() {
        let limit = memory.limit().unwrap_or(0);
        // The order of limit and memsw matters when both move (the kernel keeps limit <= memsw).
        match memory.swap() {
            Some(swap) => {
                let current: i64 = std::fs::read_to_string(memory_dir.join("memory.limit_in_bytes"))
                    .map_err(io_err("read the memory limit in", &memory_dir))?
                    .trim()
                    .parse()
                    .unwrap_or(i64::MAX);
                if swap == -1 || current < swap {
                    write(&memory_dir, "memory.memsw.limit_in_bytes", swap.to_string())?;
                }
                write(&memory_dir, "memory.limit_in_bytes", limit.to_string())?;
                write(&memory_dir, "memory.memsw.limit_in_bytes", swap.to_string())?;
            }
            None => write(&memory_dir, "memory.limit_in_bytes", limit.to_string())?,
        }
        write(&memory_dir, "memory.oom_control", "0".into())?;
    }
    if let Some(pids) = resources.pids() {
        let max = if pids.limit() > 0 { pids.limit().to_string() } else { "max".into() };
        write(&pids_dir, "pids.max", max)?;
    }
    Ok(true)
}

/// The device rules libcgroups' v1 devices controller adds after a spec's own: read, write and
/// mknod of null, zero, full, tty, urandom, random; mknod of any device; console, pts, ptmx,
/// tun.
pub const DEFAULT_DEVICE_RULES: &[&str] = &[
    "c 1:3 rwm",
    "c 1:5 rwm",
    "c 1:7 rwm",
    "c 5:0 rwm",
    "c 1:9 rwm",
    "c 1:8 rwm",
    "c *:* m",
    "b *:* m",
    "c 5:1 rwm",
    "c 136:* rwm",
    "c 5:2 rwm",
    "c 10:200 rwm",
];

/// Pure: whether [`apply_v1_direct`] writes everything `resources` asks for. Memory: a positive
/// limit, optionally swap; CPU: shares, quota, period; pids; devices. Nothing else.
fn direct_v1_covers(r: &LinuxResources) -> bool {
    let cpu = r.cpu().as_ref().is_none_or(|c| {
        c.burst().is_none()
            && c.realtime_runtime().is_none()
            && c.realtime_period().is_none()
            && c.idle().is_none()
            && c.cpus().is_none()
            && c.mems().is_none()
    });
    let memory = r.memory().as_ref().is_none_or(|m| {
        m.limit().is_some_and(|l| l > 0)
            && m.swap().is_none_or(|s| s == -1 || s > 0)
            && m.reservation().is_none()
            && m.kernel().is_none()
            && m.kernel_tcp().is_none()
            && m.swappiness().is_none()
            && m.disable_oom_killer().is_none()
            && m.use_hierarchy().is_none()
            && m.check_before_update().is_none()
    });
    cpu && memory
        && r.block_io().is_none()
        && r.hugepage_limits().as_ref().is_none_or(|h| h.is_empty())
        && r.network().is_none()
        && r.rdma().as_ref().is_none_or(|h| h.is_empty())
        && r.unified().as_ref().is_none_or(|u| u.is_empty())
}

/// Handles on this host's v1 controller hierarchies, opened by the container init while it still
/// sees them: it enters its cgroups through them after `pivot_root`, when the host's
/// /sys/fs/cgroup is no longer in its view. Close-on-exec, and dropped before the container's
/// process runs.
#[derive(Debug)]
pub struct Hierarchies {
    dirs: Vec<(OwnedFd, PathBuf, &'static str)>,
}

impl Hierarchies {
    pub fn open() -> Result<Self> {
        let dirs = v1_mounts()?
            .iter()
            .map(|m| {
                use std::os::unix::fs::OpenOptionsExt;
                let dir = std::fs::File::options()
                    .read(true)
                    .custom_flags(libc::O_PATH | libc::O_DIRECTORY)
                    .open(&m.mount_point)
                    .map_err(io_err("open the cgroup hierarchy", &m.mount_point))?;
                let file = if m.controllers.is_empty() { "cgroup.procs" } else { "tasks" };
                Ok((OwnedFd::from(dir), m.mount_point.clone(), file))
            })
            .collect::<Result<_>>()?;
        Ok(Hierarchies { dirs })
    }

    /// Moves the calling thread into the existing cgroup `path` in every hierarchy, by writing
    /// `0` to its `tasks` file. A thread moving itself is the one migration the kernel does
    /// without its global threadgroup lock, whose RCU grace period otherwise costs 10 ms or
    /// more per container; the caller must be single-threaded (the init is).
    /// The v2 hierarchy of a hybrid host has no `tasks`: there the init moves its process
    /// (itself) through `cgroup.procs`.
    pub fn enter(&self, path: &Path) -> Result<()> {
        for (dir, mount, file) in &self.dirs {
            let tasks = relative(path).join(file);
            let err =
                |e: nix::Error| Error::Io { op: "move into the cgroup of", path: mount.join(&tasks), source: e.into() };
            let file = crate::sys::openat(dir.as_fd(), &tasks, OFlag::O_WRONLY).map_err(err)?;
            nix::unistd::write(&file, b"0").map_err(err)?;
        }
        Ok(())
    }
}

/// mkdir -p of `rel` under a hierarchy, leaf first (its parents usually exist); in cpuset, the
/// leaf gets its parent's cpus and mems (a v1 cpuset cgroup starts empty and refuses tasks with
/// ENOSPC). An empty parent is filled from its own parent first, up to the first level that has
/// values: another shim may have just created that level and not yet filled it, and copying its
/// empty values down would leave the whole subtree unusable.
fn create(mount: &Path, rel: &Path, cpuset: bool) -> Result<()> {
    let dir = mount.join(rel);
    mkdir_p(mount, &dir)?;
    if cpuset {
        for file in ["cpuset.cpus", "cpuset.mems"] {
            fill_cpuset(mount, &dir, file)?;
        }
    }
    Ok(())
}

fn mkdir_p(mount: &Path, dir: &Path) -> Result<()> {
    let made = |r: std::io::Result<()>| match r {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        other => other,
    };
    match made(std::fs::create_dir(dir)) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && dir != mount => {
            mkdir_p(mount, dir.parent().unwrap_or(mount))?;
            made(std::fs::create_dir(dir)).map_err(io_err("create cgroup", dir))
        }
        other => other.map_err(io_err("create cgroup", dir)),
    }
}

/// `dir`'s value of a cpuset `file`, copied from the nearest ancestor that has one when empty.
fn fill_cpuset(mount: &Path, dir: &Path, file: &str) -> Result<String> {
    let own = std::fs::read_to_string(dir.join(file)).map_err(io_err("read the cpuset of", dir))?;
    if !own.trim().is_empty() || dir == mount {
        return Ok(own.trim().to_string());
    }
    let value = fill_cpuset(mount, dir.parent().unwrap_or(mount), file)?;
    std::fs::write(dir.join(file), &value).map_err(io_err("set the cpuset of", dir))?;
    Ok(value)
}

/// Kills what is left in the container's cgroup and removes it from every hierarchy. On v1 and
/// hybrid hosts this reads mountinfo once (libcgroups' v1 manager reads it, and
/// /proc/self/cgroup, once per controller on every construction); on v2 it is libcgroups'.
pub fn remove(path: &Path) -> Result<()> {
    if layout()? == Layout::Unified {
        return Cgroup::new(path)?.remove();
    }
    let rel = relative(path);
    for m in v1_mounts()? {
        remove_dir(&m.mount_point.join(rel))?;
    }
    Ok(())
}

/// Removes one cgroup directory (not recursive); gone already is fine. While processes are
/// left in it (EBUSY), SIGKILLs them and retries as they exit (about a second at most). A
/// stopped container's cgroup is empty, so the usual case is one rmdir.
pub fn remove_dir(dir: &Path) -> Result<()> {
    let err = |source| Error::Remove { path: dir.to_path_buf(), source };
    let mut delay = std::time::Duration::from_millis(1);
    for _ in 0..10 {
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => {}
            Err(e) => return Err(err(e)),
        }
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
        std::thread::sleep(delay);
        delay = (delay * 2).min(std::time::Duration::from_millis(200));
    }
    match std::fs::remove_dir(dir) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        other => other.map_err(err),
    }
}

/// The file that says whether cgroup `path` is frozen: v2's `cgroup.freeze`, or v1's
/// `freezer.state` (`None` without a freezer hierarchy).
fn freezer_file(path: &Path) -> Option<PathBuf> {
    match layout().ok()? {
        Layout::Unified => Some(Path::new(ROOT).join(relative(path)).join("cgroup.freeze")),
        _ => Some(v1_dir("freezer", path).ok()??.join("freezer.state")),
    }
}

/// Whether the container's cgroup is frozen (or freezing): `pause` made it so.
pub fn frozen(path: &Path) -> bool {
    let text = freezer_file(path).and_then(|f| std::fs::read_to_string(f).ok()).unwrap_or_default();
    matches!(text.trim(), "1" | "FROZEN" | "FREEZING")
}

/// Freezes or thaws every process in cgroup `path` (libcgroups' freezer, which waits for a v1
/// freeze to complete).
pub fn freeze(path: &Path, frozen: bool) -> Result<()> {
    use libcgroups::common::FreezerState;
    let cg = Cgroup::new(path)?;
    let state = if frozen { FreezerState::Frozen } else { FreezerState::Thawed };
    cg.manager.freeze(state).map_err(cg.wrap(if frozen { "freeze" } else { "thaw" }))
}

/// The pids of every process in cgroup `path` (and below it).
pub fn pids(path: &Path) -> Result<Vec<Pid>> {
    let cg = Cgroup::new(path)?;
    cg.manager.get_all_pids().map_err(cg.wrap("list the processes of"))
}

/// Becomes readable when cgroup `path` runs out of memory: an eventfd registered on v1's
/// `memory.oom_control` (the kernel's OOM notification), or an inotify watch on v2's
/// `memory.events`, whose `oom_kill` counter then tells an OOM kill from other changes.
pub struct OomWatch {
    fd: OwnedFd,
    /// v1: the `memory.oom_control` the eventfd is registered on, kept open.
    _control: Option<std::fs::File>,
    /// v2: `memory.events` and the `oom_kill` count last seen.
    events: Option<(PathBuf, std::cell::Cell<u64>)>,
}

impl OomWatch {
    pub fn new(path: &Path) -> Result<Self> {
        use std::os::fd::AsRawFd;
        if layout()? == Layout::Unified {
            use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify};
            let file = Path::new(ROOT).join(relative(path)).join("memory.events");
            let errno = |e: nix::Error| Error::Io { op: "watch", path: file.clone(), source: e.into() };
            let inotify = Inotify::init(InitFlags::IN_CLOEXEC | InitFlags::IN_NONBLOCK).map_err(errno)?;
            inotify.add_watch(&file, AddWatchFlags::IN_MODIFY).map_err(errno)?;
            let seen = std::fs::read_to_string(&file).map(|t| parse_oom_kill(&t)).unwrap_or(0);
            let fd = inotify.as_fd().try_clone_to_owned().map_err(|source| Error::Io {
                op: "watch",
                path: file.clone(),
                source,
            })?;
            return Ok(OomWatch { fd, _control: None, events: Some((file, std::cell::Cell::new(seen))) });
        }
        let dir = v1_dir("memory", path)?.ok_or_else(|| Error::Missing(path.to_path_buf()))?;
        let control_path = dir.join("memory.oom_control");
        let control = std::fs::File::open(&control_path).map_err(io_err("open", &control_path))?;
        let efd = nix::sys::eventfd::EventFd::from_value_and_flags(
            0,
            nix::sys::eventfd::EfdFlags::EFD_CLOEXEC | nix::sys::eventfd::EfdFlags::EFD_NONBLOCK,
        )
        .map_err(|e| Error::Io {
            op: "create an eventfd for",
            path: control_path.clone(),
            source: e.into(),
        })?;
        let fd = OwnedFd::from(efd);
        let register = dir.join("cgroup.event_control");
        std::fs::write(&register, format!("{} {}", fd.as_raw_fd(), control.as_raw_fd()))
            .map_err(io_err("register an OOM notification in", &register))?;
        Ok(OomWatch { fd, _control: Some(control), events: None })
    }

    pub fn fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Takes the wake-up; whether it was an OOM (v2: the `oom_kill` counter went up).
    pub fn fired(&self) -> bool {
        let mut buf = [0u8; 4096];
        let _ = nix::unistd::read(std::os::fd::AsRawFd::as_raw_fd(&self.fd), &mut buf);
        match &self.events {
            None => true,
            Some((file, seen)) => {
                let now = std::fs::read_to_string(file).map(|t| parse_oom_kill(&t)).unwrap_or(0);
                let fired = now > seen.get();
                seen.set(now);
                fired
            }
        }
    }
}

/// How many processes the kernel OOM killer killed in this cgroup (0 if unknown).
pub fn oom_kills(path: &Path) -> u64 {
    let file = match layout() {
        Ok(Layout::Unified) => Path::new(ROOT).join(relative(path)).join("memory.events"),
        Ok(_) => match v1_dir("memory", path) {
            Ok(Some(dir)) => dir.join("memory.oom_control"),
            _ => return 0,
        },
        Err(_) => return 0,
    };
    std::fs::read_to_string(file).map(|text| parse_oom_kill(&text)).unwrap_or(0)
}

/// Pure: the `oom_kill` counter from `memory.oom_control` (v1) or `memory.events` (v2).
pub fn parse_oom_kill(text: &str) -> u64 {
    text.lines().filter_map(|l| l.strip_prefix("oom_kill ")).find_map(|v| v.trim().parse().ok()).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_v1_controller_and_named_mounts_and_skips_v2_ones() {
        let info = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
                    32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n\
                    35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                    40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n\
                    41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n\
                    90 60 0:29 /c1 /tmp/r/rootfs/sys/fs/cgroup/cpu,cpuacct ro,relatime - cgroup cgroup rw,cpu,cpuacct\n";
        let mount = |p: &str, root: &str, c: &[&str]| V1Mount {
            mount_point: PathBuf::from(p),
            root: PathBuf::from(root),
            controllers: c.iter().map(|s| s.to_string()).collect(),
        };
        assert_eq!(
            parse_v1_mounts(info),
            vec![
                mount("/sys/fs/cgroup/cpu,cpuacct", "/", &["cpu", "cpuacct"]),
                mount("/sys/fs/cgroup/memory", "/docker/abc", &["memory"]),
                mount("/sys/fs/cgroup/systemd", "/", &["name=systemd"]),
            ]
        );
    }

    /// A level another shim created but has not filled yet (empty cpus and mems) must not be
    /// copied down empty: the container below it would be refused with ENOSPC.
    #[test]
    fn cpuset_levels_created_by_someone_else_are_filled_before_use() -> anyhow::Result<()> {
        if matches!(libcgroups::common::get_cgroup_setup()?, CgroupSetup::Unified) {
            return Ok(()); // no v1 cpuset hierarchy on a cgroup v2 host; create() is v1 only
        }
        let info = std::fs::read_to_string("/proc/self/mountinfo")?;
        let Some(cpuset) = parse_v1_mounts(&info).into_iter().find(|m| m.controllers.iter().any(|c| c == "cpuset"))
        else {
            anyhow::bail!("no v1 cpuset hierarchy on a v1/hybrid host");
        };
        let mount = cpuset.mount_point;
        let top = PathBuf::from(format!("kaji-test-cpuset-{}", std::process::id()));
        let read = |rel: &str, file: &str| -> std::io::Result<String> {
            Ok(std::fs::read_to_string(mount.join(&top).join(rel).join(file))?.trim().to_string())
        };
        let run = || -> anyhow::Result<(bool, Vec<String>)> {
            std::fs::create_dir(mount.join(&top))?;
            // The racing creator's level, still empty (clone_children is 0 by default).
            std::fs::create_dir(mount.join(&top).join("a"))?;
            let empty_before = read("a", "cpuset.cpus")?.is_empty();
            create(&mount, &top.join("a/b"), true)?;
            let values = ["", "a", "a/b"]
                .iter()
                .map(|l| Ok(read(l, "cpuset.cpus")? + "|" + &read(l, "cpuset.mems")?))
                .collect::<std::io::Result<_>>()?;
            Ok((empty_before, values))
        };
        let result = run();
        for rel in ["a/b", "a", ""] {
            let _ = std::fs::remove_dir(mount.join(&top).join(rel));
        }
        let (empty_before, values) = result?;
        assert!(empty_before, "a new cpuset cgroup starts empty here: {values:?}");
        let root = |file: &str| -> std::io::Result<String> {
            Ok(std::fs::read_to_string(mount.join(file))?.trim().to_string())
        };
        let expected = format!("{}|{}", root("cpuset.cpus")?, root("cpuset.mems")?);
        assert!(values.iter().all(|v| *v == expected), "every level gets the root's {expected}: {values:?}");
        Ok(())
    }

    fn resources(swap: Option<i64>) -> anyhow::Result<LinuxResources> {
        use oci_spec::runtime::*;
        let mut memory = LinuxMemoryBuilder::default().limit(48 << 20);
        if let Some(s) = swap {
            memory = memory.swap(s);
        }
        Ok(LinuxResourcesBuilder::default()
            .memory(memory.build()?)
            .cpu(LinuxCpuBuilder::default().shares(512u64).quota(50_000i64).period(100_000u64).build()?)
            .pids(LinuxPidsBuilder::default().limit(33).build()?)
            .devices(vec![
                LinuxDeviceCgroupBuilder::default().allow(false).access("rwm").build()?,
                LinuxDeviceCgroupBuilder::default()
                    .allow(true)
                    .typ(LinuxDeviceType::B)
                    .major(7)
                    .minor(0)
                    .access("r")
                    .build()?,
            ])
            .build()?)
    }

    #[test]
    fn direct_v1_covers_what_kaji_specs_carry_and_nothing_more() -> anyhow::Result<()> {
        use oci_spec::runtime::*;
        assert!(direct_v1_covers(&resources(None)?));
        assert!(direct_v1_covers(&resources(Some(64 << 20))?));
        assert!(direct_v1_covers(&LinuxResources::default()));
        let with = |f: &dyn Fn(&mut LinuxResources)| -> anyhow::Result<bool> {
            let mut r = resources(None)?;
            f(&mut r);
            Ok(direct_v1_covers(&r))
        };
        assert!(!with(&|r| {
            r.set_block_io(Some(LinuxBlockIo::default()));
        })?);
        assert!(!with(&|r| {
            r.set_cpu(Some(LinuxCpuBuilder::default().cpus("0").build().expect("cpu")));
        })?);
        assert!(!with(&|r| {
            r.set_memory(Some(LinuxMemoryBuilder::default().limit(-1).build().expect("mem")));
        })?);
        assert!(!with(&|r| {
            r.set_memory(Some(LinuxMemoryBuilder::default().limit(1 << 20).reservation(1 << 19).build().expect("mem")));
        })?);
        Ok(())
    }

    /// The same resources applied by libcgroups' v1 manager and by [`apply_v1_direct`] leave the
    /// same values in every file either writes.
    #[test]
    fn direct_v1_matches_libcgroups() -> anyhow::Result<()> {
        if !nix::unistd::geteuid().is_root() || !is_v1()? {
            return Ok(()); // needs root and v1 hierarchies (CI runs as root on a hybrid host)
        }
        let top = PathBuf::from(format!("/kaji-test-direct-{}", std::process::id()));
        let files = [
            ("cpu", "cpu.shares"),
            ("cpu", "cpu.cfs_quota_us"),
            ("cpu", "cpu.cfs_period_us"),
            ("memory", "memory.limit_in_bytes"),
            ("memory", "memory.memsw.limit_in_bytes"),
            ("memory", "memory.oom_control"),
            ("pids", "pids.max"),
            ("devices", "devices.list"),
        ];
        let read = |path: &Path| -> anyhow::Result<Vec<String>> {
            let mut out = Vec::new();
            for (controller, file) in files {
                let dir = v1_dir(controller, path)?.ok_or_else(|| anyhow::anyhow!("no {controller} hierarchy"))?;
                out.push(format!("{file}: {}", std::fs::read_to_string(dir.join(file))?));
            }
            Ok(out)
        };
        let run = || -> anyhow::Result<()> {
            for swap in [None, Some(64 << 20), Some(-1)] {
                let r = resources(swap)?;
                let (by_lib, direct) = (top.join("lib"), top.join("direct"));
                for p in [&by_lib, &direct] {
                    create_v1(p)?;
                }
                Cgroup::new(&by_lib)?.apply(&r)?;
                anyhow::ensure!(apply_v1_direct(&direct, &r)?, "not covered: {r:?}");
                let (got, want) = (read(&direct)?, read(&by_lib)?);
                // Not assert_eq: a panic here would skip the cleanup below.
                anyhow::ensure!(got == want, "swap {swap:?}: direct {got:?}, libcgroups {want:?}");
                for p in [&by_lib, &direct] {
                    remove(p)?;
                }
            }
            Ok(())
        };
        let result = run();
        for p in [top.join("lib"), top.join("direct"), top.clone()] {
            let _ = remove(&p);
        }
        result
    }

    #[test]
    fn swap_is_turned_off_where_memory_and_memory_plus_swap_are_equal() -> anyhow::Result<()> {
        assert!(v2_swap_off(&resources(Some(48 << 20))?));
        assert!(!v2_swap_off(&resources(Some(64 << 20))?), "some swap asked for");
        assert!(!v2_swap_off(&resources(Some(-1))?), "unlimited swap");
        assert!(!v2_swap_off(&resources(None)?), "nothing said about swap");
        Ok(())
    }

    #[test]
    fn reads_oom_kill_counter_from_v1_and_v2_files() {
        assert_eq!(parse_oom_kill("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"), 2);
        assert_eq!(parse_oom_kill("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n"), 1);
        assert_eq!(parse_oom_kill("oom_kill_disable 0\n"), 0);
    }
}
