//! The pod sandbox: network, IPC and UTS namespaces created once per pod and kept alive by
//! bind-mounting their nsfs files under the pod directory (no pause process), with the hostname
//! set and loopback up. Containers join them by path; teardown unmounts them. A `hostUsers:
//! false` pod also gets a user namespace (its range from `userns.rs`) that owns the others, made
//! by a short-lived `kaji-agent userns-hold` process (a threaded process cannot unshare one).

use std::path::{Path, PathBuf};

use nix::mount::{MntFlags, MsFlags};
use nix::sched::CloneFlags;
use oci_spec::runtime::LinuxNamespaceType;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to {op} for the pod sandbox at {path}")]
    Sys {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: nix::Error,
    },
    #[error("failed to {op} {path}")]
    Io {
        op: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to bring loopback up in the pod network namespace: {0}")]
    Loopback(String),
    #[error("the sandbox thread panicked")]
    Thread,
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Which namespaces the pod gets of its own (the host's are used for the others).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Wanted {
    pub net: bool,
    pub ipc: bool,
    pub uts: bool,
    /// A user namespace of the pod's own, mapping 0..65536 to host ids from this one.
    pub user: Option<u32>,
}

impl Wanted {
    pub fn for_pod(pod: &k8s_openapi::api::core::v1::Pod) -> Wanted {
        let spec = pod.spec.as_ref();
        let host_network = spec.and_then(|s| s.host_network).unwrap_or(false);
        let ipc = !spec.and_then(|s| s.host_ipc).unwrap_or(false);
        Wanted { net: !host_network, ipc, uts: !host_network, user: None }
    }

    /// Every kind of namespace a sandbox can have (for teardown).
    pub fn all() -> Wanted {
        Wanted { net: true, ipc: true, uts: true, user: Some(0) }
    }

    fn list(self) -> Vec<(&'static str, CloneFlags, LinuxNamespaceType)> {
        let mut v = Vec::new();
        if self.user.is_some() {
            v.push(("user", CloneFlags::CLONE_NEWUSER, LinuxNamespaceType::User));
        }
        if self.net {
            v.push(("net", CloneFlags::CLONE_NEWNET, LinuxNamespaceType::Network));
        }
        if self.ipc {
            v.push(("ipc", CloneFlags::CLONE_NEWIPC, LinuxNamespaceType::Ipc));
        }
        if self.uts {
            v.push(("uts", CloneFlags::CLONE_NEWUTS, LinuxNamespaceType::Uts));
        }
        v
    }
}

/// The pod's namespace files: `<dir>/net`, `<dir>/ipc`, `<dir>/uts`.
#[derive(Clone, Debug)]
pub struct Sandbox {
    pub dir: PathBuf,
    pub wanted: Wanted,
}

impl Sandbox {
    pub fn new(dir: PathBuf, wanted: Wanted) -> Sandbox {
        Sandbox { dir, wanted }
    }

    /// (namespace type, path) for each namespace containers must join.
    pub fn joins(&self) -> Vec<(LinuxNamespaceType, PathBuf)> {
        self.wanted.list().into_iter().map(|(name, _, t)| (t, self.dir.join(name))).collect()
    }

    /// The network namespace file, if the pod has its own.
    pub fn netns(&self) -> Option<PathBuf> {
        self.wanted.net.then(|| self.dir.join("net"))
    }

    pub fn exists(&self) -> bool {
        self.wanted.list().iter().all(|(name, _, _)| crate::volumes::is_mountpoint(&self.dir.join(name)))
    }

    /// Creates the namespaces unless they exist. Runs on a short-lived thread of its own, since
    /// `unshare` changes the namespaces of the calling thread.
    pub fn ensure(&self, hostname: &str, agent_binary: &Path) -> Result<()> {
        if self.exists() {
            return Ok(());
        }
        self.teardown()?;
        std::fs::create_dir_all(&self.dir).map_err(|source| Error::Io {
            op: "create",
            path: self.dir.clone(),
            source,
        })?;
        let (dir, wanted, hostname) = (self.dir.clone(), self.wanted, hostname.to_string());
        let result = match wanted.user {
            Some(start) => create_in_userns(&self.dir, wanted, &hostname, agent_binary, start),
            None => std::thread::spawn(move || create(&dir, wanted, &hostname)).join().map_err(|_| Error::Thread)?,
        };
        if result.is_err() {
            let _ = self.teardown();
        }
        result
    }

    /// Unmounts and removes the namespace files (the namespaces die with their last user).
    pub fn teardown(&self) -> Result<()> {
        for (name, _, _) in Wanted::all().list() {
            let path = self.dir.join(name);
            if crate::volumes::is_mountpoint(&path) {
                nix::mount::umount2(&path, MntFlags::MNT_DETACH).map_err(|source| Error::Sys {
                    op: "unmount",
                    path: path.clone(),
                    source,
                })?;
            }
            match std::fs::remove_file(&path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(source) => return Err(Error::Io { op: "remove", path, source }),
            }
        }
        match std::fs::remove_dir(&self.dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(Error::Io { op: "remove", path: self.dir.clone(), source }),
        }
    }
}

/// On a dedicated thread: unshare, set the hostname, bring lo up, bind-mount the ns files.
fn create(dir: &Path, wanted: Wanted, hostname: &str) -> Result<()> {
    let list = wanted.list();
    let flags = list.iter().fold(CloneFlags::empty(), |acc, (_, f, _)| acc | *f);
    if flags.is_empty() {
        return Ok(());
    }
    nix::sched::unshare(flags).map_err(|source| Error::Sys { op: "unshare", path: dir.to_path_buf(), source })?;
    if wanted.uts {
        nix::unistd::sethostname(hostname).map_err(|source| Error::Sys {
            op: "set hostname",
            path: dir.to_path_buf(),
            source,
        })?;
    }
    if wanted.net {
        loopback_up()?;
    }
    for (name, _, _) in list {
        let target = dir.join(name);
        std::fs::File::create(&target).map_err(|source| Error::Io { op: "create", path: target.clone(), source })?;
        let source = PathBuf::from(format!("/proc/thread-self/ns/{name}"));
        nix::mount::mount(Some(&source), &target, None::<&str>, MsFlags::MS_BIND, None::<&str>)
            .map_err(|source| Error::Sys { op: "bind-mount namespace", path: target.clone(), source })?;
    }
    Ok(())
}

/// A sandbox whose namespaces a new user namespace owns: `kaji-agent userns-hold` unshares
/// them all at once and waits; we write its id maps, set the hostname and bring lo up from a
/// thread that joins its UTS and network namespaces, bind-mount its namespace files, and let
/// it go.
fn create_in_userns(dir: &Path, wanted: Wanted, hostname: &str, agent_binary: &Path, start: u32) -> Result<()> {
    use std::io::{BufRead, Write};
    let io = |op: &'static str, path: &Path| {
        let path = path.to_path_buf();
        move |source| Error::Io { op, path, source }
    };
    let mut cmd = std::process::Command::new(agent_binary);
    cmd.arg("userns-hold");
    for (name, flag) in [("--net", wanted.net), ("--ipc", wanted.ipc), ("--uts", wanted.uts)] {
        if flag {
            cmd.arg(name);
        }
    }
    cmd.stdin(std::process::Stdio::piped()).stdout(std::process::Stdio::piped());
    let mut child = cmd.spawn().map_err(io("run", agent_binary))?;
    let result = (|| {
        let mut line = String::new();
        let stdout = child.stdout.take().ok_or(Error::Thread)?;
        std::io::BufReader::new(stdout).read_line(&mut line).map_err(io("read", agent_binary))?;
        if line.trim() != "ready" {
            return Err(Error::Io {
                op: "start",
                path: agent_binary.to_path_buf(),
                source: std::io::Error::other(format!("userns-hold said {:?}", line.trim())),
            });
        }
        let proc = PathBuf::from(format!("/proc/{}", child.id()));
        let map = format!("0 {start} {}\n", crate::userns::LENGTH);
        for file in ["gid_map", "uid_map"] {
            let path = proc.join(file);
            std::fs::File::options()
                .write(true)
                .open(&path)
                .and_then(|mut f| f.write_all(map.as_bytes()))
                .map_err(io("write", &path))?;
        }
        let (ns, name) = (proc.join("ns"), hostname.to_string());
        std::thread::spawn(move || configure(&ns, wanted, &name)).join().map_err(|_| Error::Thread)??;
        for (name, _, _) in wanted.list() {
            let target = dir.join(name);
            std::fs::File::create(&target).map_err(io("create", &target))?;
            nix::mount::mount(Some(&proc.join("ns").join(name)), &target, None::<&str>, MsFlags::MS_BIND, None::<&str>)
                .map_err(|source| Error::Sys { op: "bind-mount namespace", path: target.clone(), source })?;
        }
        Ok(())
    })();
    drop(child.stdin.take());
    if result.is_err() {
        let _ = child.kill();
    }
    let _ = child.wait();
    result
}

/// On a thread of its own: joins the holder's UTS and network namespaces (the agent's root may,
/// whatever user namespace owns them) to set the hostname and bring lo up.
fn configure(ns: &Path, wanted: Wanted, hostname: &str) -> Result<()> {
    let join = |name: &str, flag: CloneFlags| -> Result<()> {
        let path = ns.join(name);
        let f = std::fs::File::open(&path).map_err(|source| Error::Io { op: "open", path: path.clone(), source })?;
        nix::sched::setns(f, flag).map_err(|source| Error::Sys { op: "join", path, source })
    };
    if wanted.uts {
        join("uts", CloneFlags::CLONE_NEWUTS)?;
        nix::unistd::sethostname(hostname).map_err(|source| Error::Sys {
            op: "set hostname",
            path: ns.to_path_buf(),
            source,
        })?;
    }
    if wanted.net {
        join("net", CloneFlags::CLONE_NEWNET)?;
        loopback_up()?;
    }
    Ok(())
}

/// `kaji-agent userns-hold`: unshares a user namespace together with the asked-for others (so
/// it owns them), says `ready` and waits for stdin to close. Single-threaded (unshare of a user
/// namespace refuses threaded callers); returns the exit code.
pub fn hold(net: bool, ipc: bool, uts: bool) -> i32 {
    use std::io::{Read, Write};
    let mut flags = CloneFlags::CLONE_NEWUSER;
    for (want, f) in [(net, CloneFlags::CLONE_NEWNET), (ipc, CloneFlags::CLONE_NEWIPC), (uts, CloneFlags::CLONE_NEWUTS)]
    {
        if want {
            flags |= f;
        }
    }
    if let Err(e) = nix::sched::unshare(flags) {
        println!("error: failed to unshare: {e}");
        return 1;
    }
    let mut out = std::io::stdout();
    if writeln!(out, "ready").and_then(|()| out.flush()).is_err() {
        return 1;
    }
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    0
}

/// Sets `lo` up through rtnetlink, from the (new) network namespace of this thread.
fn loopback_up() -> Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .map_err(|e| Error::Loopback(e.to_string()))?;
    rt.block_on(async {
        let (connection, handle, _) = rtnetlink::new_connection().map_err(|e| Error::Loopback(e.to_string()))?;
        let conn = tokio::spawn(connection);
        let msg = rtnetlink::LinkUnspec::new_with_index(1).up().build();
        let result = handle.link().set(msg).execute().await.map_err(|e| Error::Loopback(e.to_string()));
        conn.abort();
        result
    })
}
