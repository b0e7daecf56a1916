//! Container cgroups through youki's `libcgroups` (v1, hybrid and v2): create under the path the
//! spec names, apply limits, add the init, read stats and OOM kills, remove.

use std::path::{Path, PathBuf};

use libcgroups::common::{
    create_cgroup_manager, AnyCgroupManager, CgroupConfig, CgroupManager, CgroupSetup, ControllerOpt,
};
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
    #[error("cgroup {0} does not exist in any hierarchy")]
    Missing(PathBuf),
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

    /// Creates the cgroup (adding the pid creates the directories) and applies the limits.
    pub fn add_and_apply(&self, pid: Pid, resources: &LinuxResources) -> Result<()> {
        self.manager.add_task(pid).map_err(self.wrap("add process to"))?;
        let opt = ControllerOpt { resources, disable_oom_killer: false, oom_score_adj: None, freezer_state: None };
        self.manager.apply(&opt).map_err(self.wrap("apply limits to"))
    }

    /// Applies the limits to a cgroup the process already joined (see [`enter_self`]).
    pub fn apply(&self, resources: &LinuxResources) -> Result<()> {
        let opt = ControllerOpt { resources, disable_oom_killer: false, oom_score_adj: None, freezer_state: None };
        self.manager.apply(&opt).map_err(self.wrap("apply limits to"))
    }

    /// Kills what is left inside and removes the directories.
    pub fn remove(&self) -> Result<()> {
        self.manager.remove().map_err(self.wrap("remove"))
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

/// Done once by the fork server, so every shim it forks inherits the result: libcgroups opens
/// procfs through `pathrs`, whose first use in a process mounts a private procfs instance
/// (fsopen) and caches its fd; after this, shims use that cached handle instead of each mounting
/// their own. The fd is close-on-exec, so no container process keeps it.
pub fn warm_up() {
    let _ = libcgroups::v1::util::list_subsystem_mount_points();
    let _ = v1_mounts();
}

/// The directories a cgroup path may occupy on this host: one per v1 hierarchy (including the
/// named systemd one, which runc also joins), one on v2.
pub fn directories(path: &Path) -> Result<Vec<PathBuf>> {
    let rel = path.strip_prefix("/").unwrap_or(path);
    match libcgroups::common::get_cgroup_setup().map_err(|e| Error::Detect(Box::new(e)))? {
        CgroupSetup::Unified => Ok(vec![Path::new(ROOT).join(rel)]),
        setup @ (CgroupSetup::Legacy | CgroupSetup::Hybrid) => {
            let mut dirs: Vec<PathBuf> = libcgroups::v1::util::list_subsystem_mount_points()
                .unwrap_or_default()
                .into_iter()
                .map(|m| m.join(rel))
                .collect();
            if matches!(setup, CgroupSetup::Hybrid) {
                dirs.push(Path::new(ROOT).join("unified").join(rel));
            }
            dirs.sort();
            dirs.dedup();
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

/// This host's cgroup v1 hierarchies, read from mountinfo once per process: they are mounted at
/// boot and stay, while mountinfo grows with every container's mounts and is read on every
/// container's create, OOM check and removal otherwise.
pub fn v1_mounts() -> Result<&'static [V1Mount]> {
    static MOUNTS: std::sync::OnceLock<Vec<V1Mount>> = std::sync::OnceLock::new();
    if let Some(m) = MOUNTS.get() {
        return Ok(m);
    }
    let path = Path::new("/proc/self/mountinfo");
    let mounts = parse_v1_mounts(&std::fs::read_to_string(path).map_err(io_err(path))?);
    Ok(MOUNTS.get_or_init(|| mounts))
}

/// Pure: the cgroup v1 mounts in a mountinfo text that carry at least one controller we manage.
pub fn parse_v1_mounts(mountinfo: &str) -> Vec<V1Mount> {
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
            let controllers: Vec<String> =
                options.split(',').filter(|o| V1_CONTROLLERS.contains(o)).map(str::to_string).collect();
            (!controllers.is_empty()).then(|| V1Mount {
                mount_point: PathBuf::from(mount_point),
                root: PathBuf::from(root),
                controllers,
            })
        })
        .collect();
    mounts.sort_by(|a, b| a.mount_point.cmp(&b.mount_point));
    mounts.dedup_by(|a, b| a.mount_point == b.mount_point);
    mounts
}

/// Pure: this process's cgroup in the v1 hierarchy that has `controller`, from /proc/self/cgroup.
pub fn parse_own_cgroup<'a>(proc_cgroup: &'a str, controller: &str) -> Option<&'a str> {
    proc_cgroup.lines().find_map(|l| {
        let mut parts = l.splitn(3, ':');
        let (_, list, path) = (parts.next()?, parts.next()?, parts.next()?);
        list.split(',').any(|c| c == controller).then_some(path)
    })
}

/// The cgroups a process left by [`enter_self`], to return to with [`Joined::leave`].
#[derive(Debug)]
pub struct Joined {
    /// `tasks` files of the original cgroups, one per hierarchy joined.
    back: Vec<PathBuf>,
}

impl Joined {
    /// Moves the calling thread back to the cgroups it came from.
    pub fn leave(&self) -> Result<()> {
        for tasks in &self.back {
            write_self(tasks)?;
        }
        Ok(())
    }
}

fn write_self(tasks: &Path) -> Result<()> {
    std::fs::write(tasks, "0").map_err(|source| Error::Join { pid: 0, path: tasks.to_path_buf(), source })
}

fn io_err(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Join { pid: 0, path: path.to_path_buf(), source }
}

/// On cgroup v1 and hybrid hosts: creates the container's cgroup in every v1 controller
/// hierarchy and moves the calling thread into it (`0` written to `tasks`), so a child cloned
/// next is born inside and never migrates. A thread moving itself is the one migration the
/// kernel does without its global threadgroup lock, whose RCU grace period otherwise costs
/// 10 ms or more per container. The caller must be single-threaded (the shim is), and goes
/// back with [`Joined::leave`] right after the clone. `None` on pure cgroup v2 hosts.
pub fn enter_self(path: &Path) -> Result<Option<Joined>> {
    if matches!(libcgroups::common::get_cgroup_setup().map_err(|e| Error::Detect(Box::new(e)))?, CgroupSetup::Unified) {
        return Ok(None);
    }
    let rel = path.strip_prefix("/").unwrap_or(path);
    let own = std::fs::read_to_string("/proc/self/cgroup").map_err(io_err(Path::new("/proc/self/cgroup")))?;
    let mut plan = Vec::new();
    for m in v1_mounts()? {
        // Where we are now, as a path under this mount; if that cannot be known (a cgroup
        // outside the mounted subtree), fall back to moving the init in from outside.
        let here = parse_own_cgroup(&own, &m.controllers[0]).map(Path::new);
        let Some(back) = here.and_then(|h| h.strip_prefix(&m.root).ok()).map(|h| m.mount_point.join(h).join("tasks"))
        else {
            return Ok(None);
        };
        if !back.exists() {
            return Ok(None);
        }
        plan.push((m, back));
    }
    let plan: Vec<(PathBuf, PathBuf)> = plan
        .into_iter()
        .map(|(m, back)| {
            create(&m.mount_point, rel, m.controllers.iter().any(|c| c == "cpuset"))?;
            Ok((m.mount_point.join(rel).join("tasks"), back))
        })
        .collect::<Result<_>>()?;
    let mut joined = Joined { back: Vec::new() };
    for (tasks, back) in plan {
        if let Err(e) = write_self(&tasks) {
            let _ = joined.leave();
            return Err(e);
        }
        joined.back.push(back);
    }
    Ok(Some(joined))
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
            made(std::fs::create_dir(dir)).map_err(io_err(dir))
        }
        other => other.map_err(io_err(dir)),
    }
}

/// `dir`'s value of a cpuset `file`, copied from the nearest ancestor that has one when empty.
fn fill_cpuset(mount: &Path, dir: &Path, file: &str) -> Result<String> {
    let own = std::fs::read_to_string(dir.join(file)).map_err(io_err(dir))?;
    if !own.trim().is_empty() || dir == mount {
        return Ok(own.trim().to_string());
    }
    let value = fill_cpuset(mount, dir.parent().unwrap_or(mount), file)?;
    std::fs::write(dir.join(file), &value).map_err(io_err(dir))?;
    Ok(value)
}

/// Kills what is left in the container's cgroup and removes it from every hierarchy. On v1 and
/// hybrid hosts this reads mountinfo once (libcgroups' v1 manager reads it, and
/// /proc/self/cgroup, once per controller on every construction); on v2 it is libcgroups'.
pub fn remove(path: &Path) -> Result<()> {
    if matches!(libcgroups::common::get_cgroup_setup().map_err(|e| Error::Detect(Box::new(e)))?, CgroupSetup::Unified) {
        return Cgroup::new(path)?.remove();
    }
    let rel = path.strip_prefix("/").unwrap_or(path);
    for m in v1_mounts()? {
        let dir = m.mount_point.join(rel);
        if dir.is_dir() {
            remove_dir(&dir)?;
        }
    }
    Ok(())
}

/// SIGKILLs the processes in one cgroup directory and removes it, retrying while the killed
/// processes exit (about a second at most; the usual case succeeds at once). Not recursive.
pub fn remove_dir(dir: &Path) -> Result<()> {
    let err = |source| Error::Remove { path: dir.to_path_buf(), source };
    let mut delay = std::time::Duration::from_millis(1);
    for _ in 0..10 {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        for pid in procs.lines().filter_map(|l| l.trim().parse::<i32>().ok()) {
            let _ = nix::sys::signal::kill(Pid::from_raw(pid), nix::sys::signal::Signal::SIGKILL);
        }
        match std::fs::remove_dir(dir) {
            Ok(()) => return Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
            Err(e) if e.raw_os_error() == Some(libc::EBUSY) => std::thread::sleep(delay),
            Err(e) => return Err(err(e)),
        }
        delay = (delay * 2).min(std::time::Duration::from_millis(200));
    }
    std::fs::remove_dir(dir).map_err(err)
}

/// How many processes the kernel OOM killer killed in this cgroup (0 if unknown).
pub fn oom_kills(path: &Path) -> u64 {
    let rel = path.strip_prefix("/").unwrap_or(path);
    let file = match libcgroups::common::get_cgroup_setup() {
        Ok(CgroupSetup::Unified) => Path::new(ROOT).join(rel).join("memory.events"),
        Ok(_) => {
            match v1_mounts().ok().and_then(|ms| ms.iter().find(|m| m.controllers.iter().any(|c| c == "memory"))) {
                Some(m) => m.mount_point.join(rel).join("memory.oom_control"),
                None => return 0,
            }
        }
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
    fn finds_v1_controller_mounts_and_skips_named_and_v2_ones() {
        let info = "31 23 0:28 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755\n\
                    32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n\
                    35 31 0:32 /docker/abc /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n\
                    40 31 0:37 / /sys/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd\n\
                    41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n";
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
            ]
        );
    }

    #[test]
    fn finds_own_cgroup_per_controller() {
        let own = "9:name=systemd:/\n4:memory:/a/b\n2:cpu,cpuacct:/c\n0::/\n";
        assert_eq!(parse_own_cgroup(own, "memory"), Some("/a/b"));
        assert_eq!(parse_own_cgroup(own, "cpuacct"), Some("/c"));
        assert_eq!(parse_own_cgroup(own, "pids"), None);
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

    #[test]
    fn reads_oom_kill_counter_from_v1_and_v2_files() {
        assert_eq!(parse_oom_kill("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"), 2);
        assert_eq!(parse_oom_kill("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n"), 1);
        assert_eq!(parse_oom_kill("oom_kill_disable 0\n"), 0);
    }
}
