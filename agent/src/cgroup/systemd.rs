//! The systemd cgroup driver: on a pure cgroup v2 host whose PID 1 is systemd, the agent asks
//! systemd (D-Bus `StartTransientUnit`) for one delegated scope, `kaji-pods.scope` in
//! `kubepods.slice`, and keeps everything it starts there:
//!
//! ```text
//! /sys/fs/cgroup/kubepods.slice/                  a slice (systemd's)
//!   kaji-pods.scope/        Delegate=yes          systemd manages this cgroup's own attributes,
//!     shims/                                      kaji everything below: the holder, the fork
//!     pod<uid>/<container>                        server and every container's shim; the pods
//!     burstable/pod<uid>/<container>              with their QoS levels and limits, as the
//!     besteffort/pod<uid>/<container>             cgroupfs layout
//! ```
//!
//! This is the "one delegated scope for all containers" arrangement of systemd's
//! CGROUP_DELEGATION.md rather than kubelet's slice per pod plus runc's scope per container,
//! because (1) kaji's runtime places a container in a cgroup path, not a unit (one D-Bus round
//! trip per agent start instead of two per container), (2) a scope per container would be
//! stopped and removed by systemd the moment its processes exit — before the shim reads the
//! container's `memory.events` for OOMKilled — and (3) everything below the scope is kaji's to
//! write under systemd's delegation rules, so pod limits are plain cgroup files as with cgroupfs.
//!
//! The scope lives as long as anything in it: a holder process (`kaji-agent hold`, a child of
//! the agent that exits with it) keeps it from the agent's start until its first shim; shims
//! and containers keep it across agent restarts, so `systemctl restart kaji-agent` finds the
//! pods where they were and joins the existing scope. None of it is in the agent's own unit
//! (`kaji-agent.service`), so its KillMode never reaches a pod.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use libcgroups::common::CgroupManager;

/// The delegated scope, as a cgroup path (below the v2 mount).
pub const SCOPE_CGROUP: &str = "/kubepods.slice/kaji-pods.scope";
/// Its unit, as `slice:prefix:name` (runc's systemd cgroupsPath form, which libcgroups takes).
const SCOPE_UNIT: &str = "kubepods.slice:kaji:pods";
/// Where the holder, the fork server and the shims live inside the scope.
pub const SHIMS: &str = "shims";
/// The environment variable that tells the agent's fork server which cgroup to join.
pub const FORK_SERVER_CGROUP_ENV: &str = "KAJI_FORK_SERVER_CGROUP";

const MOUNT: &str = "/sys/fs/cgroup";

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to {op} {path}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to start the holder process {0}")]
    Holder(#[source] std::io::Error),
    #[error("systemd refused the scope kaji-pods.scope: {0}")]
    Systemd(String),
}

/// The full path of a cgroup below the v2 mount.
pub fn full(cgroup: &str) -> PathBuf {
    Path::new(MOUNT).join(cgroup.trim_start_matches('/'))
}

/// The holder: keeps the scope alive while the agent runs, and exits with it (end of file on its
/// stdin when the agent's write end closes, however the agent ends).
pub struct Holder {
    child: Child,
    /// The cgroup the agent's fork server (and so every shim) joins.
    pub shims: PathBuf,
}

impl Drop for Holder {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

/// Makes sure the scope exists with a holder in it; call it while the agent is single-threaded
/// (it sets [`FORK_SERVER_CGROUP_ENV`] for the fork server the runtime starts later).
pub fn prepare(agent_binary: &Path) -> Result<Holder, Error> {
    let mut child = Command::new(agent_binary)
        .arg("hold")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(Error::Holder)?;
    let pid = child.id();
    let scope = full(SCOPE_CGROUP);
    let shims = scope.join(SHIMS);
    // The scope may vanish between a look and a move (its last process exited): try again.
    let mut last = None;
    for _ in 0..3 {
        match place(pid, &scope, &shims) {
            Ok(()) => {
                // SAFETY of the environment: the caller is single-threaded (see above).
                std::env::set_var(FORK_SERVER_CGROUP_ENV, &shims);
                return Ok(Holder { child, shims });
            }
            Err(e) => last = Some(e),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
    Err(last.unwrap_or_else(|| Error::Systemd("no attempt made".into())))
}

fn place(pid: u32, scope: &Path, shims: &Path) -> Result<(), Error> {
    if !scope.join("cgroup.procs").exists() {
        start_scope(pid)?;
    }
    mkdir(shims)?;
    write(&shims.join("cgroup.procs"), &pid.to_string())?;
    // Only once no process is left in the scope's own cgroup may its children get controllers
    // (cgroup v2's no-internal-process rule); the holder just moved out of it.
    write(&scope.join("cgroup.subtree_control"), "+cpu +memory +pids")?;
    Ok(())
}

/// `StartTransientUnit kaji-pods.scope` (Slice=kubepods.slice, Delegate=yes, the accounting
/// runc asks for, PIDs=[pid]) through libcgroups' systemd client, which waits until systemd has
/// moved `pid` in; then `SetUnitProperties TasksMax=infinity`.
fn start_scope(pid: u32) -> Result<(), Error> {
    let manager = libcgroups::systemd::manager::Manager::new(
        PathBuf::from(MOUNT),
        PathBuf::from(SCOPE_UNIT),
        "kaji pods and shims".into(),
        true,
        Duration::from_secs(10),
    )
    .map_err(|e| Error::Systemd(e.to_string()))?;
    manager.add_task(nix::unistd::Pid::from_raw(pid as i32)).map_err(|e| Error::Systemd(e.to_string()))?;
    // A scope gets systemd's DefaultTasksMax (15% of the PID limit): every pod's processes
    // count against it, so lift it (TasksMax=infinity, what a limit of 0 asks for); pods have
    // their own pids limits below.
    let pids =
        oci_spec::runtime::LinuxPidsBuilder::default().limit(0).build().map_err(|e| Error::Systemd(e.to_string()))?;
    let resources = oci_spec::runtime::LinuxResourcesBuilder::default()
        .pids(pids)
        .build()
        .map_err(|e| Error::Systemd(e.to_string()))?;
    let opts = libcgroups::common::ControllerOpt {
        resources: &resources,
        disable_oom_killer: false,
        oom_score_adj: None,
        freezer_state: None,
    };
    manager.apply(&opts).map_err(|e| Error::Systemd(e.to_string()))
}

fn mkdir(dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Io { op: "create", path: dir.to_path_buf(), source })
}

fn write(file: &Path, value: &str) -> Result<(), Error> {
    std::fs::OpenOptions::new()
        .write(true)
        .open(file)
        .and_then(|mut f| f.write_all(value.as_bytes()))
        .map_err(|source| Error::Io { op: "write", path: file.to_path_buf(), source })
}

/// The fork server's first step (`kaji-agent fork-server`): join the cgroup the agent named, so
/// every shim it forks starts outside the agent's unit. Best effort: a shim left in the agent's
/// unit still survives the agent (its unit has KillMode=process).
pub fn join_fork_server_cgroup() {
    if let Some(dir) = std::env::var_os(FORK_SERVER_CGROUP_ENV) {
        let file = Path::new(&dir).join("cgroup.procs");
        let _ = write(&file, &std::process::id().to_string());
    }
}

/// `kaji-agent hold`: block until stdin closes (the agent ended).
pub fn hold() -> i32 {
    let mut buf = [0u8; 64];
    loop {
        match std::io::Read::read(&mut std::io::stdin(), &mut buf) {
            Ok(0) => return 0,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(_) => return 1,
        }
    }
}
