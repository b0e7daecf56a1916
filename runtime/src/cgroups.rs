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

/// How many processes the kernel OOM killer killed in this cgroup (0 if unknown).
pub fn oom_kills(path: &Path) -> u64 {
    let rel = path.strip_prefix("/").unwrap_or(path);
    let file = match libcgroups::common::get_cgroup_setup() {
        Ok(CgroupSetup::Unified) => Path::new(ROOT).join(rel).join("memory.events"),
        Ok(_) => match libcgroups::v1::util::get_subsystem_mount_point(&libcgroups::v1::ControllerType::Memory) {
            Ok(m) => m.join(rel).join("memory.oom_control"),
            Err(_) => return 0,
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
    fn reads_oom_kill_counter_from_v1_and_v2_files() {
        assert_eq!(parse_oom_kill("oom_kill_disable 0\nunder_oom 0\noom_kill 2\n"), 2);
        assert_eq!(parse_oom_kill("low 0\nhigh 0\nmax 3\noom 1\noom_kill 1\noom_group_kill 0\n"), 1);
        assert_eq!(parse_oom_kill("oom_kill_disable 0\n"), 0);
    }
}
