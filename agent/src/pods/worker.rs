//! One worker per pod UID. `sync` is a sequence of idempotent `ensure_*` steps — pod directory
//! and cgroup, sandbox, volumes, init containers in order, app containers with restart policy and
//! back-off — followed by a status write when something changed. `terminate` is its own path:
//! SIGTERM, the grace period, SIGKILL, teardown, then the pod object is deleted.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use jiff::Timestamp;
use k8s_openapi::api::core::v1::{Container, Pod, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use serde_json::json;
use tokio::sync::{watch, Notify};
use tokio::time::Instant;
use tracing::Instrument;

use super::backoff::Backoff;
use super::status::{self, Exited, Run, View};
use super::Shared;
use crate::env::{self, Refs};
use crate::runtime::Meta;
use crate::sandbox::{Sandbox, Wanted};
use crate::volumes::{self, PodDir};

/// Why a container is not running, as its waiting state shows it.
type Waiting = (String, String);

pub struct Worker {
    s: Arc<Shared>,
    uid: String,
    rx: watch::Receiver<Option<Arc<Pod>>>,
    stop: watch::Receiver<bool>,
    wake: Arc<Notify>,
    /// Every container of this pod the runtime holds (the newest two per name).
    containers: Vec<Meta>,
    waiting: HashMap<String, Waiting>,
    backoff: Backoff,
    /// Earliest next attempt to start a container whose last attempt failed.
    retry_at: HashMap<String, Instant>,
    watched: HashSet<String>,
    last_status: Option<serde_json::Value>,
    next_wake: Option<Instant>,
    start_time: Option<Timestamp>,
    sandbox_ready: bool,
    /// The pod's address on the pod network, once attached.
    pod_ip: Option<String>,
    terminated: bool,
    reported_running: bool,
    first_seen: std::time::Instant,
    /// Probe results by container id, written by the probers.
    probes: crate::probes::Results,
    probing: HashSet<String>,
}

fn pod_key(p: &Pod) -> String {
    format!("{}/{}", p.metadata.namespace.as_deref().unwrap_or(""), p.metadata.name.as_deref().unwrap_or(""))
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        let next = c.to_string();
        if !s.contains(&next) {
            s.push_str(": ");
            s.push_str(&next);
        }
        cur = c.source();
    }
    s
}

/// The state of one container run, as the runtime reports it now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum RunState {
    /// Created but never started (an agent stopped between the two).
    Created,
    Running,
    Exited(i32),
}

impl Worker {
    pub fn new(
        s: Arc<Shared>,
        uid: String,
        rx: watch::Receiver<Option<Arc<Pod>>>,
        stop: watch::Receiver<bool>,
        containers: Vec<Meta>,
    ) -> Worker {
        Worker {
            s,
            uid,
            rx,
            stop,
            wake: Arc::new(Notify::new()),
            containers,
            waiting: HashMap::new(),
            backoff: Backoff::default(),
            retry_at: HashMap::new(),
            watched: HashSet::new(),
            last_status: None,
            next_wake: None,
            start_time: None,
            sandbox_ready: false,
            pod_ip: None,
            terminated: false,
            reported_running: false,
            first_seen: std::time::Instant::now(),
            probes: Default::default(),
            probing: HashSet::new(),
        }
    }

    fn pod_dir(&self) -> PodDir {
        PodDir(self.s.config.pods_dir().join(&self.uid))
    }

    fn wake_in(&mut self, d: Duration) {
        let at = Instant::now() + d;
        self.next_wake = Some(self.next_wake.map_or(at, |w| w.min(at)));
    }

    /// Runs until the pod is gone (true) or the agent stops (false).
    pub async fn run(mut self) -> bool {
        loop {
            let pod = self.rx.borrow_and_update().clone();
            self.next_wake = None;
            match pod {
                None => {
                    if !self.terminated {
                        self.kill_all(None, Duration::from_secs(2)).await;
                    }
                    // Retried: what is left would otherwise wait for the next agent start.
                    let mut delay = Duration::from_millis(500);
                    while let Err(e) = teardown(&self.s, &self.uid, &self.containers).await {
                        tracing::warn!(uid = %self.uid, error = %e, "cannot tear pod down; retrying");
                        tokio::select! {
                            _ = self.stop.wait_for(|s| *s) => return false,
                            _ = tokio::time::sleep(delay) => {}
                        }
                        delay = (delay * 2).min(Duration::from_secs(10));
                    }
                    return true;
                }
                Some(p) if p.metadata.deletion_timestamp.is_some() => {
                    if !self.terminated {
                        let span = tracing::info_span!("terminate_pod", pod = %pod_key(&p), uid = %self.uid);
                        if let Err(e) = self.terminate(&p).instrument(span).await {
                            tracing::warn!(pod = %pod_key(&p), error = %e, "terminating pod failed; retrying");
                            self.wake_in(Duration::from_secs(2));
                        }
                    }
                }
                Some(p) => {
                    let span = tracing::info_span!("sync_pod", pod = %pod_key(&p), uid = %self.uid);
                    let t0 = std::time::Instant::now();
                    if let Err(e) = self.sync(&p).instrument(span).await {
                        tracing::warn!(pod = %pod_key(&p), error = %e, "pod sync failed; retrying");
                        self.wake_in(Duration::from_secs(2));
                    }
                    self.s.metrics.observe_sync(t0.elapsed());
                }
            }
            let next = self.next_wake;
            let timer = async move {
                match next {
                    Some(t) => tokio::time::sleep_until(t).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                _ = self.stop.wait_for(|s| *s) => return false,
                r = self.rx.changed() => if r.is_err() { return false },
                _ = self.wake.notified() => {}
                _ = timer => {}
            }
        }
    }

    /// The token of every projected `serviceAccountToken` source, from the token manager; the
    /// worker wakes when the first of them is due for refresh, to write the new one.
    async fn fetch_tokens(&mut self, p: &Pod, refs: &mut Refs) {
        for v in p.spec.iter().flat_map(|s| s.volumes.iter().flatten()) {
            for (i, src) in v.projected.iter().flat_map(|p| p.sources.iter().flatten()).enumerate() {
                let Some(t) = &src.service_account_token else { continue };
                let got = self.s.tokens.get(&self.s.client, p, t).await;
                if let Ok(issued) = &got {
                    let wait = issued.refresh_at().as_second() - Timestamp::now().as_second();
                    self.wake_in(Duration::from_secs(wait.max(1) as u64));
                }
                refs.tokens.insert(env::token_key(&v.name, i), got.map(|t| t.token));
            }
        }
    }

    fn latest(&self, name: &str) -> Option<&Meta> {
        self.containers.iter().filter(|m| m.container_name == name).max_by_key(|m| m.restart_count)
    }

    /// The pod's user namespace range: the one its dir records (kubelet's `userns` file), else
    /// a new one, recorded there before anything uses it.
    fn ensure_userns_range(&self, dir: &PodDir) -> Result<u32, crate::userns::Error> {
        let mut alloc = self.s.userns.lock().expect("userns allocator lock");
        if let Some(start) = crate::userns::read(&dir.0).and_then(|m| m.start()) {
            if alloc.adopt(&self.uid, start) {
                return Ok(start);
            }
        }
        let start = alloc.allocate(&self.uid)?;
        if let Err(e) = crate::userns::write(&dir.0, &crate::userns::Mappings::for_start(start)) {
            alloc.release(&self.uid);
            return Err(e);
        }
        Ok(start)
    }

    fn previous(&self, name: &str) -> Option<&Meta> {
        let latest = self.latest(name)?.restart_count;
        self.containers
            .iter()
            .filter(|m| m.container_name == name && m.restart_count < latest)
            .max_by_key(|m| m.restart_count)
    }

    fn run_state(&self, m: &Meta) -> RunState {
        match self.s.runtime.state(&m.id) {
            Ok(st) => match st.status {
                kaji_runtime::Status::Stopped => RunState::Exited(st.exit.map(|e| e.code).unwrap_or(137)),
                kaji_runtime::Status::Running => RunState::Running,
                _ if m.started_at.is_none() => RunState::Created,
                _ => RunState::Running,
            },
            Err(_) => RunState::Exited(137),
        }
    }

    async fn sync(&mut self, p: &Pod) -> anyhow::Result<()> {
        let spec = p.spec.clone().unwrap_or_default();
        let phase = p.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_default();
        if (phase == "Succeeded" || phase == "Failed") && self.last_status.is_none() && !self.any_running() {
            // Finished before this agent started: nothing runs again, the status stands.
            return Ok(());
        }
        if self.start_time.is_none() {
            self.start_time =
                p.status.as_ref().and_then(|s| s.start_time.as_ref()).map(|t| t.0).or(Some(Timestamp::now()));
        }
        let dir = self.pod_dir();
        self.ensure_pod_dir_and_cgroup(p, &dir)?;
        let mut wanted = Wanted::for_pod(p);
        if crate::userns::wanted(p) {
            match self.ensure_userns_range(&dir) {
                Ok(start) => wanted.user = Some(start),
                Err(e) => {
                    let msg = format!("Failed to create pod sandbox: {e}");
                    self.event_warning(p, "FailedCreatePodSandBox", msg.clone());
                    return Err(anyhow::anyhow!(msg));
                }
            }
        }
        let sandbox = Sandbox::new(dir.0.join("ns"), wanted);
        let hostname = crate::volumes::pod_hostname(p);
        let (sb, binary) = (sandbox.clone(), self.s.config.shim_binary.clone());
        tokio::task::spawn_blocking(move || sb.ensure(&hostname, &binary)).await??;
        if let (Some(net), Some(netns)) = (self.s.network.clone(), sandbox.netns()) {
            if self.pod_ip.is_none() {
                match net.attach(p, &netns).await {
                    Ok(ip) => self.pod_ip = Some(ip.to_string()),
                    Err(e) => {
                        let (reason, msg) = match e {
                            crate::network::Error::NoPodCidr => ("NetworkNotReady", e.to_string()),
                            _ => ("FailedCreatePodSandBox", format!("Failed to create pod sandbox: {e}")),
                        };
                        tracing::warn!(pod = ?p.metadata.name, error = %msg, "cannot attach the pod to the network");
                        if self.waiting.values().all(|(_, m)| m != &msg) {
                            self.event_warning(p, reason, msg.clone());
                        }
                        for c in spec.init_containers.iter().flatten().chain(spec.containers.iter()) {
                            if self.latest(&c.name).is_none() {
                                self.waiting.insert(c.name.clone(), ("ContainerCreating".into(), msg.clone()));
                            }
                        }
                        self.wake_in(Duration::from_secs(2));
                        return self.write_status(p).await;
                    }
                }
            }
        }
        self.sandbox_ready = true;
        let pod_ip = self.pod_ip(p);
        for w in volumes::write_etc(&dir, p, pod_ip.as_deref().unwrap_or(""), &self.s.config)? {
            self.event_warning(p, w.reason, w.message);
        }
        let mut refs = Refs::fetch(&self.s.client, p, None).await?;
        self.fetch_tokens(p, &mut refs).await;
        let volume_paths = match volumes::ensure(&dir, p, &refs, &self.node_env(p)) {
            Ok(v) => v,
            Err(volumes::Error::Config(msg)) => {
                if self.waiting.values().all(|(_, m)| m != &msg) {
                    self.event_warning(p, "FailedMount", format!("MountVolume.SetUp failed: {msg}"));
                }
                for c in spec.init_containers.iter().flatten().chain(spec.containers.iter()) {
                    if self.latest(&c.name).is_none() {
                        self.waiting.insert(c.name.clone(), ("ContainerCreating".into(), msg.clone()));
                    }
                }
                self.wake_in(Duration::from_secs(5));
                return self.write_status(p).await;
            }
            Err(e) => return Err(e.into()),
        };
        let ctx = StartCtx { dir: &dir, sandbox: &sandbox, volumes: &volume_paths };

        let policy = spec.restart_policy.clone().unwrap_or_else(|| "Always".into());
        let inits = spec.init_containers.clone().unwrap_or_default();
        let apps_started = spec.containers.iter().any(|c| self.latest(&c.name).is_some());
        let mut inits_done = true;
        if !apps_started {
            for ic in &inits {
                let state = self.latest(&ic.name).map(|m| (m.clone(), self.run_state(m)));
                match state {
                    None => {
                        self.start(p, ic, true, &ctx).await;
                        inits_done = false;
                        break;
                    }
                    Some((m, RunState::Created)) => {
                        self.s.runtime.remove(&m.id).await?;
                        self.containers.retain(|c| c.id != m.id);
                        self.start(p, ic, true, &ctx).await;
                        inits_done = false;
                        break;
                    }
                    Some((m, RunState::Running)) => {
                        self.watch_exit(&m.id);
                        inits_done = false;
                        break;
                    }
                    Some((_, RunState::Exited(0))) => continue,
                    Some((m, RunState::Exited(_))) => {
                        inits_done = false;
                        if policy != "Never" {
                            self.restart(p, ic, true, &m, &ctx).await;
                        }
                        break;
                    }
                }
            }
        }
        if inits_done {
            for c in &spec.containers {
                let state = self.latest(&c.name).map(|m| (m.clone(), self.run_state(m)));
                match state {
                    None => self.start(p, c, false, &ctx).await,
                    Some((m, RunState::Created)) => {
                        self.s.runtime.remove(&m.id).await?;
                        self.containers.retain(|x| x.id != m.id);
                        self.start(p, c, false, &ctx).await;
                    }
                    Some((m, RunState::Running)) => {
                        self.waiting.remove(&c.name);
                        self.watch_exit(&m.id);
                        self.ensure_prober(p, c, &m.id, sandbox.netns());
                    }
                    Some((m, RunState::Exited(code))) => {
                        let again = match policy.as_str() {
                            "Always" => true,
                            "OnFailure" => code != 0,
                            _ => false,
                        };
                        if again {
                            self.restart(p, c, false, &m, &ctx).await;
                        } else {
                            self.waiting.remove(&c.name);
                        }
                    }
                }
            }
        } else {
            for c in &spec.containers {
                self.waiting.entry(c.name.clone()).or_insert_with(|| ("PodInitializing".into(), String::new()));
            }
        }
        self.write_status(p).await
    }

    fn any_running(&self) -> bool {
        self.containers.iter().any(|m| self.run_state(m) == RunState::Running)
    }

    fn pod_ip(&self, p: &Pod) -> Option<String> {
        let host_network = p.spec.as_ref().and_then(|s| s.host_network).unwrap_or(false);
        if host_network {
            return Some(self.s.config.node_ip.to_string());
        }
        self.pod_ip.clone()
    }

    fn node_env(&self, p: &Pod) -> env::Node {
        env::Node {
            host_ip: self.s.config.node_ip.to_string(),
            pod_ip: self.pod_ip(p).unwrap_or_default(),
            allocatable_cpu_millis: self.s.allocatable.cpu_millis,
            allocatable_memory_bytes: self.s.allocatable.memory_bytes,
        }
    }

    fn ensure_pod_dir_and_cgroup(&self, p: &Pod, dir: &PodDir) -> anyhow::Result<()> {
        std::fs::create_dir_all(&dir.0)?;
        let path = crate::cgroup::pod_path(&self.s.config.kubepods_cgroup(), p);
        let marker = dir.0.join("cgroup");
        if !marker.exists() {
            std::fs::write(&marker, path.to_string_lossy().as_bytes())?;
        }
        if !crate::cgroup::exists(&path) {
            crate::cgroup::ensure(self.s.config.cgroup_driver, &path, &crate::cgroup::pod_limits(p))?;
        }
        Ok(())
    }

    /// Restarts an exited container unless it is in back-off (then it waits as CrashLoopBackOff).
    async fn restart(&mut self, p: &Pod, c: &Container, init: bool, last: &Meta, ctx: &StartCtx<'_>) {
        let finished = self.s.runtime.finished_at(&last.id).unwrap_or_else(Timestamp::now);
        let key = format!("restart/{}", c.name);
        if let Some(wait) = self.backoff.wait(&key, finished, Timestamp::now()) {
            let delay = self.backoff.current(&key).unwrap_or(wait).as_secs();
            let message = format!(
                "back-off {delay}s restarting failed container={} pod={}_{}({})",
                c.name,
                p.metadata.name.as_deref().unwrap_or(""),
                p.metadata.namespace.as_deref().unwrap_or(""),
                self.uid
            );
            if self.waiting.get(&c.name).is_none_or(|(r, _)| r != "CrashLoopBackOff") {
                self.event_warning(
                    p,
                    "BackOff",
                    format!("Back-off restarting failed container {} in pod {}", c.name, pod_key(p)),
                );
            }
            self.waiting.insert(c.name.clone(), ("CrashLoopBackOff".into(), message));
            self.wake_in(wait);
            return;
        }
        self.backoff.next(&key, finished);
        self.start(p, c, init, ctx).await;
    }

    /// Starts a new run of `c`: image, env, spec, create, start. Failures leave the container
    /// waiting with Kubernetes' reason and retry with back-off.
    async fn start(&mut self, p: &Pod, c: &Container, init: bool, ctx: &StartCtx<'_>) {
        let key = format!("start/{}", c.name);
        if let Some(at) = self.retry_at.get(&key) {
            if *at > Instant::now() {
                let at = *at;
                if let Some((reason, message)) = self.waiting.get_mut(&c.name) {
                    if reason == "ErrImagePull" {
                        // As kubelet: the back-off keeps the registry's reason visible.
                        let image = c.image.clone().unwrap_or_default();
                        *message = format!("Back-off pulling image \"{image}\": ErrImagePull: {message}");
                        *reason = "ImagePullBackOff".into();
                    }
                }
                self.next_wake = Some(self.next_wake.map_or(at, |w| w.min(at)));
                return;
            }
        }
        match self.try_start(p, c, init, ctx).await {
            Ok(()) => {
                self.waiting.remove(&c.name);
                self.retry_at.remove(&key);
                self.backoff.reset(&key);
            }
            Err(w) => {
                let delay = self.backoff.next(&key, Timestamp::now());
                self.retry_at.insert(key, Instant::now() + delay);
                self.wake_in(delay);
                self.waiting.insert(c.name.clone(), w);
            }
        }
    }

    async fn try_start(&mut self, p: &Pod, c: &Container, init: bool, ctx: &StartCtx<'_>) -> Result<(), Waiting> {
        let image = self.ensure_image(p, c).await?;
        let node = self.node_env(p);
        let config_error = |msg: String| ("CreateContainerConfigError".to_string(), msg);
        let refs = Refs::fetch(&self.s.client, p, Some(c)).await.map_err(|e| config_error(e.to_string()))?;
        let env = match env::build(p, c, &image.config.env, &refs, &node) {
            Ok(env) => env,
            Err(msg) => {
                self.event_warning(p, "Failed", format!("Error: {msg}"));
                return Err(config_error(msg));
            }
        };
        let args = env::command_line(c, &image.config.entrypoint, &image.config.cmd, &env);
        if args.is_empty() {
            let msg = "no command specified".to_string();
            self.event_warning(p, "Failed", format!("Error: {msg}"));
            return Err(("CreateContainerError".into(), msg));
        }
        let restart_count = self.latest(&c.name).map(|m| m.restart_count + 1).unwrap_or(0);
        let id = crate::runtime::new_id();
        let dir = ctx.dir;
        let termination_log = dir.termination_log(&c.name, restart_count);
        let io_err = |e: std::io::Error| ("CreateContainerError".to_string(), e.to_string());
        if let Some(parent) = termination_log.parent() {
            std::fs::create_dir_all(parent).map_err(io_err)?;
        }
        std::fs::write(&termination_log, b"").map_err(io_err)?;
        let pod_cgroup = crate::cgroup::pod_path(&self.s.config.kubepods_cgroup(), p);
        let meta = Meta {
            id: id.clone(),
            pod_uid: self.uid.clone(),
            pod_namespace: p.metadata.namespace.clone().unwrap_or_default(),
            pod_name: p.metadata.name.clone().unwrap_or_default(),
            container_name: c.name.clone(),
            init,
            restart_count,
            image: c.image.clone().unwrap_or_default(),
            image_id: image.repo_digest(),
            log_path: dir.0.join("logs").join(&c.name).join(format!("{restart_count}.log")),
            termination_log: termination_log.clone(),
            termination_message_policy: c.termination_message_policy.clone().unwrap_or_else(|| "File".into()),
            created_at: Timestamp::now(),
            started_at: None,
            stdin: c.stdin.unwrap_or(false),
            stdin_once: c.stdin_once.unwrap_or(false),
        };
        let annotations = HashMap::from([
            ("io.kubernetes.pod.uid".to_string(), self.uid.clone()),
            ("io.kubernetes.pod.name".to_string(), meta.pod_name.clone()),
            ("io.kubernetes.pod.namespace".to_string(), meta.pod_namespace.clone()),
            ("io.kubernetes.container.name".to_string(), c.name.clone()),
            ("io.kubernetes.container.restartCount".to_string(), restart_count.to_string()),
        ]);
        let subpaths = match prepare_subpaths(dir, c, ctx.volumes, &env) {
            Ok(s) => s,
            Err(msg) => {
                self.event_warning(p, "Failed", format!("Error: {msg}"));
                return Err(("CreateContainerConfigError".into(), msg));
            }
        };
        let inputs = crate::spec::Inputs {
            pod: p,
            container: c,
            layers: &image.layers,
            image: &image.config,
            env,
            args,
            joins: ctx.sandbox.joins(),
            cgroups_path: crate::cgroup::container_path(&pod_cgroup, &id),
            volumes: ctx.volumes,
            subpaths: &subpaths,
            pod_dir: dir,
            termination_log: &termination_log,
            annotations,
            userns: ctx.sandbox.wanted.user,
        };
        let spec = match crate::spec::build(&inputs) {
            Ok(s) => s,
            Err(msg) => {
                self.event_warning(p, "Failed", format!("Error: {msg}"));
                return Err(("CreateContainerConfigError".into(), msg));
            }
        };
        let mut meta = meta;
        if let Err(e) = self.s.runtime.create(&meta, &spec).await {
            let msg = chain(&e);
            self.event_warning(p, "Failed", format!("Error: {msg}"));
            return Err(("CreateContainerError".into(), msg));
        }
        self.event_normal(p, "Created", format!("Created container {}", c.name));
        if let Err(e) = self.s.runtime.start(&mut meta).await {
            let msg = chain(&e);
            let _ = self.s.runtime.remove(&meta.id).await;
            self.event_warning(p, "Failed", format!("Error: {msg}"));
            return Err(("RunContainerError".into(), msg));
        }
        self.s.metrics.container_started();
        self.event_normal(p, "Started", format!("Started container {}", c.name));
        self.containers.push(meta);
        if let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.post_start.as_ref()) {
            // As kubelet: the hook runs before the pod's next container starts; if it fails, the
            // container is killed and restarts as its policy says.
            let netns = ctx.sandbox.netns();
            let timeout = Duration::from_secs(POST_START_TIMEOUT_SECONDS);
            if let Err(why) = crate::lifecycle::run(hook, c, netns, (&self.s.runtime, &id), timeout).await {
                let what = crate::lifecycle::describe(hook);
                let message =
                    format!("{what} for Container {:?} in Pod {:?} failed - error: {why}", c.name, pod_key(p));
                tracing::warn!(pod = %pod_key(p), container = %c.name, error = %why, "postStart hook failed");
                self.event_warning(p, "FailedPostStartHook", message);
                self.event_normal(p, "Killing", format!("FailedPostStartHook: stopping container {}", c.name));
                self.s.runtime.stop(std::slice::from_ref(&id), grace_period(p)).await;
            }
        }
        self.watch_exit(&id);
        if !init {
            self.ensure_prober(p, c, &id, ctx.sandbox.netns());
        }
        self.gc_runs(&c.name).await;
        Ok(())
    }

    /// Keeps the newest two runs per container (the current one and `--previous`).
    async fn gc_runs(&mut self, name: &str) {
        let mut runs: Vec<Meta> = self.containers.iter().filter(|m| m.container_name == name).cloned().collect();
        runs.sort_by_key(|m| std::cmp::Reverse(m.restart_count));
        for old in runs.into_iter().skip(2) {
            if let Err(e) = self.s.runtime.remove(&old.id).await {
                tracing::warn!(container = %old.id, error = %e, "cannot remove old container");
                continue;
            }
            let _ = std::fs::remove_file(&old.log_path);
            let _ = std::fs::remove_file(&old.termination_log);
            self.containers.retain(|m| m.id != old.id);
        }
    }

    /// The image per the pull policy; errors are the waiting reasons kubelet shows.
    async fn ensure_image(&mut self, p: &Pod, c: &Container) -> Result<kaji_image::Image, Waiting> {
        let reference = c.image.clone().unwrap_or_default();
        if reference.is_empty() {
            return Err(("InvalidImageName".into(), "container has no image".into()));
        }
        let parsed = kaji_image::normalize(&reference).map_err(|e| ("InvalidImageName".to_string(), e.to_string()))?;
        let policy = c.image_pull_policy.clone().unwrap_or_else(|| {
            if parsed.digest.is_none() && parsed.tag.as_deref().is_none_or(|t| t == "latest") {
                "Always".into()
            } else {
                "IfNotPresent".into()
            }
        });
        let local = self.s.images.get(&reference).ok().flatten();
        match (policy.as_str(), local) {
            ("Never", Some(i)) | ("IfNotPresent", Some(i)) => {
                let _ = self.s.images.touch(&i.manifest_digest);
                self.event_normal(p, "Pulled", format!("Container image \"{reference}\" already present on machine"));
                return Ok(i);
            }
            ("Never", None) => {
                let msg = format!("Container image \"{reference}\" is not present with pull policy of Never");
                self.event_warning(p, "ErrImageNeverPull", msg.clone());
                return Err(("ErrImageNeverPull".into(), msg));
            }
            _ => {}
        }
        let creds = self.pull_credentials(p, &parsed.registry).await;
        self.event_normal(p, "Pulling", format!("Pulling image \"{reference}\""));
        let t0 = std::time::Instant::now();
        match self.s.images.pull(&reference, creds.as_ref()).await {
            Ok(i) => {
                self.s.metrics.observe_pull(t0.elapsed());
                self.event_normal(
                    p,
                    "Pulled",
                    format!("Successfully pulled image \"{reference}\" in {:.3}s", t0.elapsed().as_secs_f64()),
                );
                Ok(i)
            }
            Err(e) => {
                let msg = chain(&e);
                self.event_warning(p, "Failed", format!("Failed to pull image \"{reference}\": {msg}"));
                Err(("ErrImagePull".into(), msg))
            }
        }
    }

    /// Credentials for `registry` from the pod's imagePullSecrets (dockerconfigjson or dockercfg).
    async fn pull_credentials(&self, p: &Pod, registry: &str) -> Option<kaji_image::Credentials> {
        let ns = p.metadata.namespace.clone().unwrap_or_else(|| "default".into());
        let api: Api<Secret> = Api::namespaced(self.s.client.clone(), &ns);
        for r in p.spec.iter().flat_map(|s| s.image_pull_secrets.iter().flatten()) {
            let Ok(Some(secret)) = api.get_opt(&r.name).await else { continue };
            let data = secret.data.unwrap_or_default();
            if let Some(v) = data.get(".dockerconfigjson") {
                if let Some(c) = kaji_image::credentials_from_docker_config(&v.0, registry) {
                    return Some(c);
                }
            }
            if let Some(v) = data.get(".dockercfg") {
                // The legacy format is the "auths" map itself.
                let wrapped = json!({"auths": serde_json::from_slice::<serde_json::Value>(&v.0).unwrap_or_default()});
                if let Some(c) = kaji_image::credentials_from_docker_config(wrapped.to_string().as_bytes(), registry) {
                    return Some(c);
                }
            }
        }
        None
    }

    /// Wakes the worker when the container's process exits and its exit status is recorded.
    fn watch_exit(&mut self, id: &str) {
        if !self.watched.insert(id.to_string()) {
            return;
        }
        let Ok(st) = self.s.runtime.state(id) else { return };
        let (wake, runtime, id, stop) = (self.wake.clone(), self.s.runtime.clone(), id.to_string(), self.stop.clone());
        // A blocking poll on a pidfd (tokio's AsyncFd registration would need unsafe code); it
        // wakes every second to notice the agent stopping.
        let exited = move || {
            use std::os::fd::AsFd;
            let fd = kaji_runtime::sys::pidfd_open(nix::unistd::Pid::from_raw(st.pid)).ok();
            // Checked once the pidfd is open: a container that had already exited (its pid maybe
            // reused) is not waited for. After that, only the pidfd tells.
            let running = matches!(runtime.state(&id).map(|s| s.status), Ok(kaji_runtime::Status::Running));
            while let Some(fd) = fd.as_ref().filter(|_| st.pid > 0 && running) {
                if *stop.borrow() {
                    return false;
                }
                let mut fds = [nix::poll::PollFd::new(fd.as_fd(), nix::poll::PollFlags::POLLIN)];
                match nix::poll::poll(&mut fds, nix::poll::PollTimeout::from(1000u16)) {
                    Ok(0) | Err(nix::errno::Errno::EINTR) => continue,
                    _ => break,
                }
            }
            // The shim reaps the process and writes exit.json right after.
            for _ in 0..500 {
                match runtime.state(&id) {
                    Ok(s) if s.status != kaji_runtime::Status::Stopped => std::thread::sleep(Duration::from_millis(10)),
                    _ => break,
                }
            }
            true
        };
        tokio::spawn(async move {
            if let Ok(true) = tokio::task::spawn_blocking(exited).await {
                wake.notify_one();
            }
        });
    }

    fn views(&self, containers: &[Container]) -> Vec<View> {
        containers
            .iter()
            .map(|c| View {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                current: self.latest(&c.name).map(|m| self.run_of(m)),
                previous: self.previous(&c.name).map(|m| self.run_of(m)),
                waiting: self.waiting.get(&c.name).cloned(),
                probes_ready: self.probe_state(&c.name).is_none_or(|s| s.ready),
                probes_started: self.probe_state(&c.name).is_none_or(|s| s.started),
            })
            .collect()
    }

    fn probe_state(&self, name: &str) -> Option<crate::probes::ProbeState> {
        let id = &self.latest(name)?.id;
        self.probes.lock().ok()?.get(id).copied()
    }

    /// Starts the prober of a running container that has probes (once per container).
    fn ensure_prober(&mut self, p: &Pod, c: &Container, id: &str, netns: Option<PathBuf>) {
        if c.readiness_probe.is_none() && c.liveness_probe.is_none() && c.startup_probe.is_none() {
            return;
        }
        if !self.probing.insert(id.to_string()) {
            return;
        }
        if let Ok(mut r) = self.probes.lock() {
            r.entry(id.to_string()).or_insert(crate::probes::ProbeState {
                ready: c.readiness_probe.is_none(),
                started: c.startup_probe.is_none(),
            });
        }
        let prober = Prober {
            s: self.s.clone(),
            pod: Arc::new(p.clone()),
            c: c.clone(),
            id: id.to_string(),
            netns,
            results: self.probes.clone(),
            wake: self.wake.clone(),
            stop: self.stop.clone(),
        };
        tokio::spawn(prober.run());
    }

    fn run_of(&self, m: &Meta) -> Run {
        let exit = match self.s.runtime.state(&m.id) {
            Ok(st) if st.status == kaji_runtime::Status::Stopped => {
                let e = st.exit.unwrap_or(kaji_runtime::Exit { code: 137, signal: Some(9), oom_killed: false });
                Some(Exited {
                    code: e.code,
                    signal: e.signal,
                    oom_killed: e.oom_killed,
                    finished_at: self.s.runtime.finished_at(&m.id),
                    message: termination_message(m, e.code),
                })
            }
            Ok(_) => None,
            Err(_) => Some(Exited {
                code: 137,
                signal: None,
                oom_killed: false,
                finished_at: None,
                message: Some("The container could not be located when the pod was terminated".into()),
            }),
        };
        Run {
            id: m.id.clone(),
            restart_count: m.restart_count,
            image_id: m.image_id.clone(),
            started_at: m.started_at,
            exit,
        }
    }

    async fn write_status(&mut self, p: &Pod) -> anyhow::Result<()> {
        let spec = p.spec.clone().unwrap_or_default();
        let inits = self.views(spec.init_containers.as_deref().unwrap_or(&[]));
        let apps = self.views(&spec.containers);
        let facts = status::Facts {
            pod: p,
            host_ip: self.s.config.node_ip.to_string(),
            pod_ip: self.pod_ip(p),
            start_time: self.start_time,
            sandbox_ready: self.sandbox_ready,
            now: Timestamp::now(),
        };
        let st = status::pod_status(&facts, &inits, &apps);
        let value = serde_json::to_value(&st)?;
        if self.last_status.as_ref() == Some(&value) {
            return Ok(());
        }
        if !self.reported_running && st.phase.as_deref() == Some("Running") {
            self.reported_running = true;
            self.s.metrics.observe_pod_start(self.first_seen.elapsed());
        }
        let api: Api<Pod> =
            Api::namespaced(self.s.client.clone(), p.metadata.namespace.as_deref().unwrap_or("default"));
        let name = p.metadata.name.clone().unwrap_or_default();
        match api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&json!({"status": value}))).await {
            Ok(_) => {
                self.last_status = Some(value);
                Ok(())
            }
            Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Every running container's preStop hook (in parallel, within the grace period), then
    /// SIGTERM with what is left of it, SIGKILL for what is still running after that.
    /// Without the pod (its object is gone already) or without a grace period, no hooks run.
    async fn kill_all(&mut self, p: Option<&Pod>, grace: Duration) {
        let started = std::time::Instant::now();
        let netns = p.and_then(|p| Sandbox::new(self.pod_dir().0.join("ns"), Wanted::for_pod(p)).netns());
        let hooks: Vec<_> = p
            .filter(|_| !grace.is_zero())
            .into_iter()
            .flat_map(|p| self.containers.iter().map(move |m| (p, m)))
            .filter(|(_, m)| self.s.runtime.is_alive(&m.id))
            .filter_map(|(p, m)| {
                let c = pod_container(p, &m.container_name)?;
                c.lifecycle.as_ref()?.pre_stop.as_ref()?;
                Some(run_pre_stop(&self.s, p, c, &m.id, netns.clone(), grace))
            })
            .collect();
        let ran = !hooks.is_empty();
        futures::future::join_all(hooks).await;
        let grace = if ran { crate::lifecycle::remaining_grace(grace, started) } else { grace };
        let ids: Vec<String> = self.containers.iter().map(|m| m.id.clone()).collect();
        for id in self.s.runtime.stop(&ids, grace).await {
            tracing::info!(container = %id, "grace period over; killed");
        }
    }

    async fn terminate(&mut self, p: &Pod) -> anyhow::Result<()> {
        let grace = p
            .metadata
            .deletion_grace_period_seconds
            .or_else(|| p.spec.as_ref().and_then(|s| s.termination_grace_period_seconds))
            .unwrap_or(30)
            .max(0) as u64;
        for m in self.containers.iter().filter(|m| self.s.runtime.is_alive(&m.id)) {
            self.event_normal(p, "Killing", format!("Stopping container {}", m.container_name));
        }
        self.kill_all(Some(p), Duration::from_secs(grace)).await;
        self.sandbox_ready = false;
        let _ = self.write_status(p).await;
        teardown(&self.s, &self.uid, &self.containers).await?;
        self.containers.clear();
        let api: Api<Pod> =
            Api::namespaced(self.s.client.clone(), p.metadata.namespace.as_deref().unwrap_or("default"));
        let dp = DeleteParams {
            grace_period_seconds: Some(0),
            preconditions: Some(Preconditions { uid: Some(self.uid.clone()), resource_version: None }),
            ..DeleteParams::default()
        };
        match api.delete(p.metadata.name.as_deref().unwrap_or(""), &dp).await {
            Ok(_) => {}
            Err(kube::Error::Api(e)) if e.code == 404 || e.code == 409 => {}
            Err(e) => return Err(e.into()),
        }
        self.terminated = true;
        tracing::info!(pod = %pod_key(p), "pod terminated");
        Ok(())
    }

    fn event_normal(&self, p: &Pod, reason: &'static str, message: String) {
        let _ = self.s.events.send((Arc::new(p.clone()), false, reason, message));
    }

    fn event_warning(&self, p: &Pod, reason: &'static str, message: String) {
        let _ = self.s.events.send((Arc::new(p.clone()), true, reason, message));
    }
}

/// Runs one container's startup, liveness and readiness probes until it stops running.
struct Prober {
    s: Arc<Shared>,
    pod: Arc<Pod>,
    c: Container,
    id: String,
    netns: Option<PathBuf>,
    results: crate::probes::Results,
    wake: Arc<Notify>,
    stop: watch::Receiver<bool>,
}

impl Prober {
    fn update(&self, f: impl FnOnce(&mut crate::probes::ProbeState)) {
        if let Ok(mut r) = self.results.lock() {
            if let Some(st) = r.get_mut(&self.id) {
                f(st);
            }
        }
        self.wake.notify_one();
    }

    fn alive(&self) -> bool {
        self.s.runtime.is_alive(&self.id)
    }

    fn event(&self, warning: bool, reason: &'static str, message: String) {
        let _ = self.s.events.send((self.pod.clone(), warning, reason, message));
    }

    async fn run(self) {
        use crate::probes::{Counter, Outcome};
        let t0 = Instant::now();
        let due = |p: &Option<k8s_openapi::api::core::v1::Probe>| {
            p.as_ref().map(|p| t0 + Duration::from_secs(p.initial_delay_seconds.unwrap_or(0).max(0) as u64))
        };
        let period =
            |p: &k8s_openapi::api::core::v1::Probe| Duration::from_secs(p.period_seconds.unwrap_or(10).max(1) as u64);
        let (mut next_startup, mut next_live, mut next_ready) =
            (due(&self.c.startup_probe), due(&self.c.liveness_probe), due(&self.c.readiness_probe));
        let (mut startup, mut live, mut ready) = (Counter::default(), Counter::default(), Counter::default());
        let mut started = self.c.startup_probe.is_none();
        let mut warned = false;
        let mut stop = self.stop.clone();
        loop {
            if *stop.borrow() || !self.alive() {
                break;
            }
            let now = Instant::now();
            let check = |probe: &k8s_openapi::api::core::v1::Probe, next: &mut Option<Instant>| {
                let run = next.is_some_and(|t| t <= now);
                if run {
                    *next = Some(now + period(probe));
                }
                run
            };
            let mut results: Vec<(&'static str, Outcome)> = Vec::new();
            if !started {
                if let Some(p) = self.c.startup_probe.as_ref().filter(|p| check(p, &mut next_startup)) {
                    results.push((
                        "Startup",
                        crate::probes::run(p, &self.c, self.netns.clone(), (&self.s.runtime, &self.id)).await,
                    ));
                }
            } else {
                if let Some(p) = self.c.liveness_probe.as_ref().filter(|p| check(p, &mut next_live)) {
                    results.push((
                        "Liveness",
                        crate::probes::run(p, &self.c, self.netns.clone(), (&self.s.runtime, &self.id)).await,
                    ));
                }
                if let Some(p) = self.c.readiness_probe.as_ref().filter(|p| check(p, &mut next_ready)) {
                    results.push((
                        "Readiness",
                        crate::probes::run(p, &self.c, self.netns.clone(), (&self.s.runtime, &self.id)).await,
                    ));
                }
            }
            for (kind, outcome) in results {
                let (ok, why) = match outcome {
                    Outcome::Success => (true, String::new()),
                    Outcome::Unsupported(why) => {
                        if !warned {
                            warned = true;
                            self.event(
                                true,
                                "ProbeWarning",
                                format!("{kind} probe not run, counted as passing: {why}"),
                            );
                        }
                        (true, String::new())
                    }
                    Outcome::Failure(why) => {
                        self.event(true, "Unhealthy", format!("{kind} probe failed: {why}"));
                        (false, why)
                    }
                };
                let probe = match kind {
                    "Startup" => self.c.startup_probe.as_ref(),
                    "Liveness" => self.c.liveness_probe.as_ref(),
                    _ => self.c.readiness_probe.as_ref(),
                };
                let (st, ft) = probe
                    .map(|p| (p.success_threshold.unwrap_or(1), p.failure_threshold.unwrap_or(3)))
                    .unwrap_or((1, 3));
                let counter = match kind {
                    "Startup" => &mut startup,
                    "Liveness" => &mut live,
                    _ => &mut ready,
                };
                match (kind, counter.record(ok, st, ft)) {
                    ("Startup", Some(true)) => {
                        started = true;
                        next_live = due(&self.c.liveness_probe).map(|t| t.max(Instant::now()));
                        next_ready = due(&self.c.readiness_probe).map(|t| t.max(Instant::now()));
                        self.update(|s| s.started = true);
                    }
                    ("Readiness", Some(r)) => self.update(|s| s.ready = r),
                    ("Startup" | "Liveness", Some(false)) => {
                        tracing::info!(container = %self.c.name, reason = %why, "{kind} probe failed; restarting");
                        self.event(
                            false,
                            "Killing",
                            format!(
                                "Container {} failed {} probe, will be restarted",
                                self.c.name,
                                kind.to_lowercase()
                            ),
                        );
                        self.kill().await;
                        return self.forget();
                    }
                    _ => {}
                }
            }
            let next = [next_startup, next_live, next_ready].into_iter().flatten().min();
            let sleep = next.map(|t| t.saturating_duration_since(Instant::now())).unwrap_or(Duration::from_secs(1));
            tokio::select! {
                _ = stop.wait_for(|s| *s) => break,
                _ = tokio::time::sleep(sleep.min(Duration::from_secs(1))) => {}
            }
        }
        self.forget();
    }

    fn forget(&self) {
        if let Ok(mut r) = self.results.lock() {
            r.remove(&self.id);
        }
    }

    /// The preStop hook, then SIGTERM with what is left of the pod's grace period, SIGKILL.
    async fn kill(&self) {
        let mut grace = grace_period(&self.pod);
        if self.c.lifecycle.as_ref().is_some_and(|l| l.pre_stop.is_some()) {
            let started = std::time::Instant::now();
            run_pre_stop(&self.s, &self.pod, &self.c, &self.id, self.netns.clone(), grace).await;
            grace = crate::lifecycle::remaining_grace(grace, started);
        }
        self.s.runtime.stop(std::slice::from_ref(&self.id), grace).await;
    }
}

/// How long a postStart hook may run before it counts as failed (kubelet has no bound; a hook
/// that never ends must not hold the pod's worker forever).
const POST_START_TIMEOUT_SECONDS: u64 = 300;

/// The pod's terminationGracePeriodSeconds (default 30).
fn grace_period(p: &Pod) -> Duration {
    let seconds = p.spec.as_ref().and_then(|s| s.termination_grace_period_seconds).unwrap_or(30).max(0);
    Duration::from_secs(seconds as u64)
}

fn pod_container<'p>(p: &'p Pod, name: &str) -> Option<&'p Container> {
    let spec = p.spec.as_ref()?;
    spec.containers.iter().chain(spec.init_containers.iter().flatten()).find(|c| c.name == name)
}

/// Runs a container's preStop hook within `grace`; a failure is an event, never a reason to
/// keep the container (kubelet goes on to SIGTERM either way).
async fn run_pre_stop(s: &Arc<Shared>, p: &Pod, c: &Container, id: &str, netns: Option<PathBuf>, grace: Duration) {
    let Some(hook) = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()) else { return };
    let run = crate::lifecycle::run(hook, c, netns, (&s.runtime, id), grace);
    let outcome = match tokio::time::timeout(grace, run).await {
        Ok(r) => r,
        Err(_) => Err(format!("did not finish within the grace period ({}s)", grace.as_secs())),
    };
    if let Err(why) = outcome {
        let what = crate::lifecycle::describe(hook);
        tracing::warn!(pod = %pod_key(p), container = %c.name, error = %why, "preStop hook failed");
        let message = format!("{what} for Container {:?} in Pod {:?} failed - error: {why}", c.name, pod_key(p));
        let _ = s.events.send((Arc::new(p.clone()), true, "FailedPreStopHook", message));
    }
}

struct StartCtx<'a> {
    dir: &'a PodDir,
    sandbox: &'a Sandbox,
    volumes: &'a HashMap<String, PathBuf>,
}

/// Binds each subPath of the container's mounts (`crate::subpath`), by mount index; the error is
/// kubelet's message (the details, which may describe the node's files, go to the log only).
fn prepare_subpaths(
    dir: &PodDir,
    c: &k8s_openapi::api::core::v1::Container,
    volumes: &HashMap<String, PathBuf>,
    env: &[String],
) -> Result<HashMap<usize, PathBuf>, String> {
    let vars: HashMap<String, String> =
        env.iter().filter_map(|e| e.split_once('=')).map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let mut out = HashMap::new();
    for (i, m) in c.volume_mounts.iter().flatten().enumerate() {
        let rel = match crate::subpath::requested(m, &vars) {
            Ok(Some(rel)) => rel,
            Ok(None) => continue,
            Err(e) => return Err(e.to_string()),
        };
        let Some(volume) = volumes.get(&m.name) else { continue };
        let target = crate::subpath::target(dir, &m.name, &c.name, i);
        match crate::subpath::prepare(volume, &rel, &target) {
            Ok(t) => {
                out.insert(i, t);
            }
            Err(e) => {
                tracing::warn!(container = %c.name, volume_mount = %m.name, error = %chain(&e), "failed to prepare subPath");
                return Err(match e {
                    crate::subpath::Error::Create { .. } => format!(
                        "failed to create subPath directory for volumeMount {:?} of container {:?}",
                        m.name, c.name
                    ),
                    _ => format!("failed to prepare subPath for volumeMount {:?} of container {:?}", m.name, c.name),
                });
            }
        }
    }
    Ok(out)
}

/// The termination message: the file the container wrote (≤ 4 KiB), or with
/// FallbackToLogsOnError and a failure, the end of its log.
fn termination_message(m: &Meta, code: i32) -> Option<String> {
    let mut text = std::fs::read(&m.termination_log).ok().map(|mut b| {
        b.truncate(4096);
        String::from_utf8_lossy(&b).into_owned()
    });
    if text.as_deref().is_none_or(str::is_empty) && m.termination_message_policy == "FallbackToLogsOnError" && code != 0
    {
        text = crate::logs::tail_text(&m.log_path, 80, 2048);
    }
    text.filter(|t| !t.is_empty())
}

/// Removes everything a pod had on the node: containers, sandbox, cgroup, directory.
pub async fn teardown(s: &Shared, uid: &str, containers: &[Meta]) -> anyhow::Result<()> {
    s.tokens.forget(uid);
    teardown_pod(&s.runtime, &s.config, s.network.as_deref(), uid, containers).await?;
    // Its dir (and `userns` file) is gone: the range is free.
    s.userns.lock().expect("userns allocator lock").release(uid);
    Ok(())
}

pub async fn teardown_pod(
    runtime: &crate::runtime::Runtime,
    config: &crate::Config,
    network: Option<&crate::network::Network>,
    uid: &str,
    containers: &[Meta],
) -> anyhow::Result<()> {
    let mut ids: Vec<String> = containers.iter().map(|m| m.id.clone()).collect();
    for m in runtime.list() {
        if m.pod_uid == uid && !ids.contains(&m.id) {
            ids.push(m.id);
        }
    }
    for id in ids {
        runtime.remove(&id).await?;
    }
    if let Some(net) = network {
        net.detach(uid).await?;
    }
    let dir = PodDir(config.pods_dir().join(uid));
    let sandbox = Sandbox::new(dir.0.join("ns"), Wanted::all());
    tokio::task::spawn_blocking(move || sandbox.teardown()).await??;
    if let Ok(path) = std::fs::read_to_string(dir.0.join("cgroup")) {
        crate::cgroup::remove(std::path::Path::new(path.trim()))?;
    }
    volumes::teardown(&dir)?;
    Ok(())
}
