//! The agent's view of its containers: kaji-runtime (native or runc backend) plus what the agent
//! records beside each bundle (`meta.json`: which pod and container it belongs to, restart
//! count, image, log path, start time). Everything is on disk, so a restarted agent re-adopts.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use kaji_runtime::{ContainerRuntime, CreateOptions, Exec, ExecOptions, Native, Runc, State};
use nix::sys::signal::Signal;
use oci_spec::runtime::Spec;
use serde::{Deserialize, Serialize};

use crate::{Backend, Config};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Runtime(#[from] kaji_runtime::container::Error),
    #[error("failed to {op} {path}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to encode {0}")]
    Json(#[from] serde_json::Error),
    #[error("runtime task failed")]
    Join,
    #[error("the container's spec has no process")]
    NoProcess,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What the agent keeps about each container it created.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Meta {
    pub id: String,
    pub pod_uid: String,
    pub pod_namespace: String,
    pub pod_name: String,
    pub container_name: String,
    pub init: bool,
    pub restart_count: u32,
    pub image: String,
    pub image_id: String,
    pub log_path: PathBuf,
    pub termination_log: PathBuf,
    pub termination_message_policy: String,
    pub created_at: jiff::Timestamp,
    #[serde(default)]
    pub started_at: Option<jiff::Timestamp>,
    /// The container's `stdin`: the runtime gives it a stdin that attach writes to.
    #[serde(default)]
    pub stdin: bool,
    /// The container's `stdinOnce`: the first attach session to end closes that stdin.
    #[serde(default)]
    pub stdin_once: bool,
}

#[derive(Clone)]
pub struct Runtime {
    rt: Arc<dyn ContainerRuntime + Send + Sync>,
    containers_dir: PathBuf,
    state_root: PathBuf,
}

/// A fresh 64-hex-digit container id.
pub fn new_id() -> String {
    (0..4).map(|_| format!("{:016x}", fastrand::u64(..))).collect()
}

impl Runtime {
    pub fn new(config: &Config) -> Result<Runtime> {
        let state_root = config.runtime_dir();
        let rt: Arc<dyn ContainerRuntime + Send + Sync> = match &config.backend {
            Backend::Native => Arc::new(Native::new(&state_root, &config.shim_binary)),
            Backend::Runc(binary) => Arc::new(Runc::new(&state_root, &config.shim_binary, binary)),
        };
        Ok(Runtime { rt, containers_dir: config.containers_dir(), state_root })
    }

    pub fn backend(&self) -> &'static str {
        self.rt.name()
    }

    fn bundle(&self, id: &str) -> PathBuf {
        self.containers_dir.join(id)
    }

    /// Every container the agent has records of (running or not). Read-only: a bundle whose
    /// create is still in flight has no `meta.json` yet and is simply not listed.
    pub fn list(&self) -> Vec<Meta> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(&self.containers_dir).into_iter().flatten().flatten() {
            if let Ok(Ok(m)) = std::fs::read(e.path().join("meta.json")).map(|b| serde_json::from_slice::<Meta>(&b)) {
                out.push(m);
            }
        }
        out.sort_by_key(|m| (m.pod_uid.clone(), m.container_name.clone(), m.restart_count));
        out
    }

    /// At startup, before anything is created: removes what a crash between create and the
    /// `meta.json` write left — bundles without meta, and runtime containers without a bundle.
    pub fn sweep_incomplete(&self) {
        for e in std::fs::read_dir(&self.containers_dir).into_iter().flatten().flatten() {
            if !e.path().join("meta.json").is_file() {
                let id = e.file_name().to_string_lossy().into_owned();
                tracing::warn!(container = %id, "removing incomplete container bundle");
                let _ = self.rt.delete(&id, true);
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
        for id in self.rt.list().unwrap_or_default() {
            if !self.bundle(&id).join("meta.json").is_file() {
                tracing::warn!(container = %id, "removing a container the agent has no record of");
                let _ = self.rt.delete(&id, true);
            }
        }
    }

    /// Writes the bundle and creates the container (not yet started).
    pub async fn create(&self, meta: &Meta, spec: &Spec) -> Result<()> {
        let bundle = self.bundle(&meta.id);
        std::fs::create_dir_all(&bundle).map_err(|source| Error::Io { op: "create", path: bundle.clone(), source })?;
        let config = bundle.join("config.json");
        std::fs::write(&config, serde_json::to_vec(spec)?).map_err(|source| Error::Io {
            op: "write",
            path: config,
            source,
        })?;
        if let Some(parent) = meta.log_path.parent() {
            std::fs::create_dir_all(parent).map_err(|source| Error::Io {
                op: "create",
                path: parent.into(),
                source,
            })?;
        }
        let rt = self.rt.clone();
        let opts = CreateOptions { log_path: Some(meta.log_path.clone()), stdin: meta.stdin };
        let id = meta.id.clone();
        let b = bundle.clone();
        let created = tokio::task::spawn_blocking(move || rt.create(&id, &b, &opts)).await.map_err(|_| Error::Join)?;
        if let Err(e) = created {
            let _ = std::fs::remove_dir_all(&bundle);
            return Err(e.into());
        }
        self.write_meta(meta)
    }

    pub fn write_meta(&self, meta: &Meta) -> Result<()> {
        let path = self.bundle(&meta.id).join("meta.json");
        let tmp = path.with_extension("tmp");
        std::fs::write(&tmp, serde_json::to_vec(meta)?).map_err(|source| Error::Io {
            op: "write",
            path: tmp.clone(),
            source,
        })?;
        std::fs::rename(&tmp, &path).map_err(|source| Error::Io { op: "write", path, source })
    }

    pub async fn start(&self, meta: &mut Meta) -> Result<()> {
        let rt = self.rt.clone();
        let id = meta.id.clone();
        tokio::task::spawn_blocking(move || rt.start(&id)).await.map_err(|_| Error::Join)??;
        meta.started_at = Some(jiff::Timestamp::now());
        self.write_meta(meta)
    }

    pub fn state(&self, id: &str) -> Result<State> {
        Ok(self.rt.state(id)?)
    }

    /// A write end of the container's stdin (see [`Meta::stdin`]).
    pub fn open_stdin(&self, id: &str) -> Result<std::fs::File> {
        Ok(self.rt.open_stdin(id)?)
    }

    /// Sets the size of the container's terminal (`tty: true`).
    pub fn resize(&self, id: &str, cols: u16, rows: u16) -> Result<()> {
        Ok(self.rt.resize(id, cols, rows)?)
    }

    /// Closes the container's stdin for good (`stdinOnce`).
    pub fn close_stdin(&self, id: &str) -> Result<()> {
        Ok(self.rt.close_stdin(id)?)
    }

    pub fn kill(&self, id: &str, signal: Signal) -> Result<()> {
        Ok(self.rt.kill(id, signal)?)
    }

    /// Whether the container's process exists (created or running).
    pub fn is_alive(&self, id: &str) -> bool {
        matches!(self.state(id).map(|s| s.status), Ok(kaji_runtime::Status::Running | kaji_runtime::Status::Created))
    }

    /// Kubernetes' stop: SIGTERM, up to `grace` for the processes to exit, SIGKILL for what is
    /// left, then up to 5 s for that. Returns the ids that needed SIGKILL.
    pub async fn stop(&self, ids: &[String], grace: std::time::Duration) -> Vec<String> {
        use std::time::Duration;
        let alive: Vec<&String> = ids.iter().filter(|id| self.is_alive(id)).collect();
        for id in &alive {
            let _ = self.kill(id, Signal::SIGTERM);
        }
        let deadline = tokio::time::Instant::now() + grace;
        while tokio::time::Instant::now() < deadline && alive.iter().any(|id| self.is_alive(id)) {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let stubborn: Vec<String> = alive.into_iter().filter(|id| self.is_alive(id)).cloned().collect();
        for id in &stubborn {
            let _ = self.kill(id, Signal::SIGKILL);
        }
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while tokio::time::Instant::now() < deadline && stubborn.iter().any(|id| self.is_alive(id)) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        stubborn
    }

    /// Removes the container (killing it if needed) and its bundle; the log stays with the pod.
    pub async fn remove(&self, id: &str) -> Result<()> {
        let rt = self.rt.clone();
        let i = id.to_string();
        match tokio::task::spawn_blocking(move || rt.delete(&i, true)).await.map_err(|_| Error::Join)? {
            Ok(()) | Err(kaji_runtime::container::Error::State(kaji_runtime::state::Error::NotFound(_))) => {}
            Err(e) => return Err(e.into()),
        }
        let bundle = self.bundle(id);
        match std::fs::remove_dir_all(&bundle) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(Error::Io { op: "remove", path: bundle, source }),
        }
    }

    /// When the container's process exited (the shim writes exit.json then).
    pub fn finished_at(&self, id: &str) -> Option<jiff::Timestamp> {
        let path = self.state_root.join(id).join("exit.json");
        let modified = std::fs::metadata(path).ok()?.modified().ok()?;
        jiff::Timestamp::try_from(modified).ok()
    }

    /// Starts `command` in the running container `id` (blocking: call off the async workers),
    /// with the container's own process spec — user, env, cwd, capabilities, rlimits — as
    /// kubelet's runtimes do; a terminal also gets `TERM=xterm` unless the container sets TERM.
    pub fn exec(&self, id: &str, command: &[String], opts: &ExecOptions) -> Result<Exec> {
        let spec = kaji_runtime::spec::load(&self.bundle(id)).map_err(kaji_runtime::container::Error::from)?;
        let mut process = spec.process().clone().ok_or(Error::NoProcess)?;
        process.set_args(Some(command.to_vec()));
        if opts.tty {
            let mut env = process.env().clone().unwrap_or_default();
            if !env.iter().any(|e| e.starts_with("TERM=")) {
                env.push("TERM=xterm".into());
            }
            process.set_env(Some(env));
        }
        Ok(self.rt.exec(id, &process, opts)?)
    }

    pub fn usage(&self, id: &str) -> Option<kaji_runtime::cgroups::Usage> {
        self.rt.usage(id).ok()
    }

    pub fn state_root(&self) -> &Path {
        &self.state_root
    }
}
