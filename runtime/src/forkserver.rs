//! The fork server: one `kaji-runtime fork-server` helper, exec'd once per runtime instance,
//! that forks a shim for each container on request — instead of an exec of the helper per
//! container, which costs about 1.3 ms of loading, relocating and starting a 27 MB binary.
//!
//! Why it is safe: the server is a fresh exec with one thread, like the helper it replaces, so
//! its forks have the same clean state (no lock another thread held, a consistent heap). It
//! reads nothing but requests; everything a shim needs is in its request (the shim's
//! [`Args`](crate::shim::Args), as JSON) and in what the helper would have inherited anyway
//! (environment, cwd, cgroup, rlimits of the process that started the server).
//!
//! The protocol: a `SOCK_SEQPACKET` socket pair, one message per container, carrying the
//! request and the write end of a pipe. The forked shim writes its one-line report (`ok <pid>`
//! or `error: <why>`) into that pipe as it would on a helper's stdout. The server ignores
//! SIGCHLD, so the kernel reaps shims that end while it runs; shims outlive it (they are in
//! sessions of their own), and it exits when the last copy of the client's end is closed —
//! the runtime dropped, or its process gone.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;

use nix::fcntl::OFlag;
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::Signal;
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};

use crate::shim::{self, Args};
use crate::sys::{self, Forked};

/// The fd the server finds its end of the socket on.
pub const FD: i32 = 3;

/// Largest request accepted (a shim's paths and id; far below this).
const MAX_REQUEST: usize = 64 * 1024;

/// Entry point of the hidden `fork-server` verb (of `kaji-runtime` and of `kaji-agent`): serves
/// requests on the socket inherited as fd [`FD`] until end of file. Call it before any thread
/// starts.
pub fn main() -> i32 {
    match sys::take_inherited_fd(FD) {
        Some(control) => serve(control),
        None => {
            eprintln!("fork-server: no socket on fd {FD} (it is started by the runtime library)");
            2
        }
    }
}

fn serve(control: OwnedFd) -> i32 {
    if sys::set_ignored(Signal::SIGCHLD, true).is_err() {
        return 1;
    }
    crate::cgroups::warm_up();
    crate::seccomp::warm_up();
    let mut buf = vec![0u8; MAX_REQUEST];
    loop {
        let (n, reply) = match sys::recv_with_fd(control.as_fd(), &mut buf) {
            Ok((0, _)) => return 0,
            Ok(got) => got,
            Err(nix::errno::Errno::EINTR) => continue,
            Err(_) => return 1,
        };
        // A request without its reply pipe has nobody to answer to.
        let Some(reply) = reply else { continue };
        let args = match serde_json::from_slice::<Args>(&buf[..n]) {
            Ok(a) => a,
            Err(e) => {
                let _ = nix::unistd::write(&reply, format!("error: bad fork server request: {e}\n").as_bytes());
                continue;
            }
        };
        match sys::fork() {
            Ok(Forked::Child) => std::process::exit(child(args, reply, control)),
            Ok(Forked::Parent(_)) => {}
            Err(e) => {
                let _ = nix::unistd::write(&reply, format!("error: failed to fork shim: {e}\n").as_bytes());
            }
        }
    }
}

/// In the forked child: the request's pipe becomes stdout, the server's own socket goes, and
/// the shim runs as it would after a helper's exec.
fn child(args: Args, reply: OwnedFd, control: OwnedFd) -> i32 {
    drop(control);
    if sys::set_ignored(Signal::SIGCHLD, false).is_err() || nix::unistd::dup2(reply.as_raw_fd(), 1).is_err() {
        return 1;
    }
    drop(reply);
    shim::run(args)
}

/// The runtime's side: starts the server on first use, and again if it died.
#[derive(Debug)]
pub struct Client {
    helper: PathBuf,
    /// The state root, passed to the server for `ps` to show whose it is.
    root: PathBuf,
    server: Mutex<Option<Server>>,
}

#[derive(Debug)]
struct Server {
    sock: OwnedFd,
    child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        // End of file is the server's signal to exit; reap it so no zombie is left.
        let _ = nix::sys::socket::shutdown(self.sock.as_raw_fd(), nix::sys::socket::Shutdown::Both);
        let _ = self.child.wait();
    }
}

impl Client {
    pub fn new(helper: impl Into<PathBuf>, root: impl Into<PathBuf>) -> Self {
        Client { helper: helper.into(), root: root.into(), server: Mutex::new(None) }
    }

    /// Has the server fork a shim with `args`; returns the shim's one-line report (`ok <pid>` or
    /// `error: <why>`), empty if the shim ended without one.
    pub fn launch(&self, args: &Args) -> io::Result<String> {
        let request = serde_json::to_vec(args).map_err(io::Error::other)?;
        let mut line = String::new();
        for attempt in 0..2 {
            let report = self.send(&request)?;
            line.clear();
            let _ = BufReader::new(report).read_line(&mut line);
            // No report and a dead server: it died with our request unread (killed between our
            // send and its fork). Once more, on a new server.
            if !line.is_empty() || attempt == 1 || !self.server_gone() {
                break;
            }
        }
        Ok(line)
    }

    /// Sends one request with a new report pipe; returns the pipe's read end.
    fn send(&self, request: &[u8]) -> io::Result<File> {
        let (read, write) = nix::unistd::pipe2(OFlag::O_CLOEXEC)?;
        let mut server = self.server.lock().unwrap_or_else(|e| e.into_inner());
        // One retry: a server that died (killed, or its exec failed) is replaced once.
        for attempt in 0..2 {
            if server.is_none() {
                *server = Some(spawn(&self.helper, &self.root)?);
            }
            let sent = server.as_ref().map(|s| sys::send_with_fd(s.sock.as_fd(), request, write.as_fd()));
            match sent {
                Some(Ok(())) => return Ok(File::from(read)),
                Some(Err(e)) if attempt == 1 => return Err(e.into()),
                _ => *server = None,
            }
        }
        Err(io::Error::other("fork server unavailable"))
    }

    /// Whether the server's end of the socket is closed (it exited); if so, forgets (and reaps) it.
    /// A server's exit closes its socket before it discards the requests it did not read, so a
    /// caller that saw its report pipe close unanswered sees the hang-up here.
    fn server_gone(&self) -> bool {
        let mut server = self.server.lock().unwrap_or_else(|e| e.into_inner());
        let hung_up = server.as_ref().is_some_and(|s| {
            let mut fds = [PollFd::new(s.sock.as_fd(), PollFlags::empty())];
            nix::poll::poll(&mut fds, PollTimeout::ZERO).is_ok()
                && fds[0].revents().is_some_and(|r| r.intersects(PollFlags::POLLHUP | PollFlags::POLLERR))
        });
        if hung_up {
            *server = None;
        }
        hung_up
    }
}

fn spawn(helper: &Path, root: &Path) -> io::Result<Server> {
    let (ours, theirs) =
        socketpair(AddressFamily::Unix, SockType::SeqPacket, None, SockFlag::SOCK_CLOEXEC).map_err(io::Error::from)?;
    let mut cmd = Command::new(helper);
    cmd.arg("fork-server").arg("--root").arg(root).stdin(Stdio::null()).stdout(Stdio::null()).stderr(Stdio::null());
    let child = sys::spawn(&mut cmd, vec![(theirs, FD)], false)?;
    Ok(Server { sock: ours, child })
}
