//! OCI POSIX-platform hooks: run one lifecycle point's hooks with the container state on stdin,
//! the hook's own argv and environment, and its timeout enforced on its whole process group.
//! Where and in which namespaces each point runs is the caller's business (shim, init, start,
//! delete); this module only runs a list and says which hook failed and why.

use std::fs::File;
use std::io::Read;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::fcntl::{fcntl, FcntlArg, OFlag};
use nix::poll::{PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use oci_spec::runtime::{Hook, Hooks};

use crate::state::State;
use crate::sys;

/// Bytes of a failed hook's output kept for the error message (the end of it).
const OUTPUT_TAIL: usize = 2048;

/// A lifecycle point at which hooks run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Point {
    Prestart,
    CreateRuntime,
    CreateContainer,
    StartContainer,
    Poststart,
    Poststop,
}

impl std::fmt::Display for Point {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Point::Prestart => "prestart",
            Point::CreateRuntime => "createRuntime",
            Point::CreateContainer => "createContainer",
            Point::StartContainer => "startContainer",
            Point::Poststart => "poststart",
            Point::Poststop => "poststop",
        })
    }
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{point} hook {path} could not be started")]
    Spawn {
        point: Point,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{point} hook {path} timed out after {seconds}s and was killed")]
    Timeout { point: Point, path: PathBuf, seconds: i64 },
    #[error("{point} hook {path} failed with {status}{output}")]
    Failed { point: Point, path: PathBuf, status: String, output: String },
    #[error("failed to encode the container state for {point} hooks")]
    Encode {
        point: Point,
        #[source]
        source: serde_json::Error,
    },
    #[error("failed to wait for {point} hook {path}")]
    Wait {
        point: Point,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Pure: the hooks of one point, in the order they run.
pub fn at(hooks: &Hooks, point: Point) -> &[Hook] {
    #[allow(deprecated)] // prestart is deprecated by the spec but runtimes must still run it
    let list = match point {
        Point::Prestart => hooks.prestart(),
        Point::CreateRuntime => hooks.create_runtime(),
        Point::CreateContainer => hooks.create_container(),
        Point::StartContainer => hooks.start_container(),
        Point::Poststart => hooks.poststart(),
        Point::Poststop => hooks.poststop(),
    };
    list.as_deref().unwrap_or_default()
}

/// Pure: whether any hook is set at one of `points`.
pub fn any(hooks: Option<&Hooks>, points: &[Point]) -> bool {
    hooks.is_some_and(|h| points.iter().any(|p| !at(h, *p).is_empty()))
}

/// Pure: `KEY=value` entries as pairs; entries without `=` are dropped.
pub fn env_pairs(env: &[String]) -> Vec<(&str, &str)> {
    env.iter().filter_map(|e| e.split_once('=')).filter(|(k, _)| !k.is_empty()).collect()
}

/// Runs the hooks of `point` in order with `state` on stdin; the first failure stops the list.
/// `cwd` is the working directory of hooks run by the runtime (runc uses the bundle).
pub fn run_all(hooks: Option<&Hooks>, point: Point, state: &State, cwd: Option<&Path>) -> Result<()> {
    let Some(hooks) = hooks else { return Ok(()) };
    let list = at(hooks, point);
    if list.is_empty() {
        return Ok(());
    }
    let json = serde_json::to_vec(state).map_err(|source| Error::Encode { point, source })?;
    for hook in list {
        run(point, hook, &json, cwd)?;
    }
    Ok(())
}

/// Runs every hook of `point` even when some fail, logging each failure as a warning (the spec's
/// rule for poststart and poststop). Returns the failures for callers that report them.
pub fn run_all_warn(hooks: Option<&Hooks>, point: Point, state: &State, cwd: Option<&Path>) -> Vec<Error> {
    let Some(hooks) = hooks else { return Vec::new() };
    let list = at(hooks, point);
    if list.is_empty() {
        return Vec::new();
    }
    let json = match serde_json::to_vec(state) {
        Ok(j) => j,
        Err(source) => {
            let e = Error::Encode { point, source };
            tracing::warn!(container = %state.id, hook = %point, error = %chain(&e), "hooks not run");
            return vec![e];
        }
    };
    let mut failed = Vec::new();
    for hook in list {
        if let Err(e) = run(point, hook, &json, cwd) {
            tracing::warn!(container = %state.id, hook = %point, error = %chain(&e), "hook failed");
            failed.push(e);
        }
    }
    failed
}

pub(crate) fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// Runs one hook: its argv and exactly its environment, in its own process group (killed as a
/// whole when the timeout passes), `state` written to its stdin, stdout and stderr kept for the
/// error message. Waits for the hook itself, not for background children it leaves behind.
pub fn run(point: Point, hook: &Hook, state: &[u8], cwd: Option<&Path>) -> Result<()> {
    let path = hook.path().clone();
    let spawn_err = |source| Error::Spawn { point, path: path.clone(), source };
    let (out_r, out_w) = nix::unistd::pipe2(OFlag::O_CLOEXEC).map_err(|e| spawn_err(e.into()))?;
    let mut cmd = Command::new(&path);
    if let Some((arg0, rest)) = hook.args().as_deref().and_then(<[String]>::split_first) {
        cmd.arg0(arg0).args(rest);
    }
    cmd.env_clear().envs(env_pairs(hook.env().as_deref().unwrap_or_default()));
    if let Some(dir) = cwd {
        cmd.current_dir(dir);
    }
    let err_w = out_w.try_clone().map_err(spawn_err)?;
    cmd.stdin(Stdio::piped()).stdout(Stdio::from(out_w)).stderr(Stdio::from(err_w)).process_group(0);
    let mut child = cmd.spawn().map_err(spawn_err)?;
    // The Command still owns the parent's copies of the output pipe's write end.
    drop(cmd);
    let pid = Pid::from_raw(child.id() as i32);
    let wait_err = |source| Error::Wait { point, path: path.clone(), source };
    let pidfd = sys::pidfd_open(pid).map_err(|e| wait_err(e.into()));
    let pidfd = match pidfd {
        Ok(fd) => fd,
        Err(e) => {
            let _ = kill(Pid::from_raw(-pid.as_raw()), Signal::SIGKILL);
            let _ = child.wait();
            return Err(e);
        }
    };
    let stdin = child.stdin.take().map(OwnedFd::from);
    let deadline = hook.timeout().map(|s| Instant::now() + Duration::from_secs(s.max(1) as u64));
    let mut io = HookIo { stdin, state, written: 0, out: Some(out_r), tail: Vec::new() };
    let exited = io.pump(&pidfd, deadline).map_err(&wait_err);
    if !matches!(exited, Ok(true)) {
        let _ = kill(Pid::from_raw(-pid.as_raw()), Signal::SIGKILL);
        let _ = child.wait();
        exited?;
        return Err(Error::Timeout { point, path, seconds: hook.timeout().unwrap_or_default() });
    }
    let status = child.wait().map_err(wait_err)?;
    io.drain();
    if status.success() {
        return Ok(());
    }
    Err(Error::Failed { point, path, status: describe(status), output: io.output() })
}

/// The hook's stdin (the state, written as the hook reads it) and its merged stdout/stderr.
struct HookIo<'a> {
    stdin: Option<OwnedFd>,
    state: &'a [u8],
    written: usize,
    out: Option<OwnedFd>,
    tail: Vec<u8>,
}

impl HookIo<'_> {
    /// Feeds stdin and reads output until the hook exits (`Ok(true)`) or the deadline passes
    /// (`Ok(false)`).
    fn pump(&mut self, pidfd: &OwnedFd, deadline: Option<Instant>) -> std::io::Result<bool> {
        for fd in self.stdin.iter().chain(self.out.iter()) {
            fcntl(fd.as_raw_fd(), FcntlArg::F_SETFL(OFlag::O_NONBLOCK))?;
        }
        loop {
            let timeout = match deadline {
                None => PollTimeout::NONE,
                Some(d) => match d.checked_duration_since(Instant::now()) {
                    Some(left) => PollTimeout::try_from(left).unwrap_or(PollTimeout::MAX),
                    None => return Ok(false),
                },
            };
            let mut fds = vec![PollFd::new(pidfd.as_fd(), PollFlags::POLLIN)];
            if let Some(fd) = &self.stdin {
                fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLOUT));
            }
            if let Some(fd) = &self.out {
                fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
            }
            match nix::poll::poll(&mut fds, timeout) {
                Ok(0) => return Ok(false),
                Ok(_) => {}
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
            let ready: Vec<bool> = fds.iter().map(|f| f.revents().is_some_and(|r| !r.is_empty())).collect();
            drop(fds);
            let mut i = 1;
            if self.stdin.is_some() {
                if ready[i] {
                    self.feed();
                }
                i += 1;
            }
            if self.out.is_some() && ready[i] {
                self.read_some();
            }
            if ready[0] {
                return Ok(true);
            }
        }
    }

    fn feed(&mut self) {
        let Some(fd) = &self.stdin else { return };
        match nix::unistd::write(fd, &self.state[self.written..]) {
            Ok(n) => self.written += n,
            Err(nix::errno::Errno::EAGAIN | nix::errno::Errno::EINTR) => return,
            // EPIPE: the hook does not read its stdin, which is its right.
            Err(_) => self.written = self.state.len(),
        }
        if self.written >= self.state.len() {
            self.stdin = None;
        }
    }

    /// Reads what is available; closes the pipe at end of stream.
    fn read_some(&mut self) {
        let Some(fd) = self.out.take() else { return };
        let mut file = File::from(fd);
        let mut buf = [0u8; 4096];
        loop {
            match file.read(&mut buf) {
                Ok(0) => return,
                Ok(n) => {
                    self.tail.extend_from_slice(&buf[..n]);
                    if self.tail.len() > OUTPUT_TAIL {
                        self.tail.drain(..self.tail.len() - OUTPUT_TAIL);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(_) => return,
            }
        }
        self.out = Some(OwnedFd::from(file));
    }

    /// After the hook exited: whatever output is already there (background children that kept
    /// the pipe open are not waited for).
    fn drain(&mut self) {
        self.read_some();
        self.out = None;
        self.stdin = None;
    }

    fn output(&self) -> String {
        let text = String::from_utf8_lossy(&self.tail);
        let text = text.trim();
        if text.is_empty() {
            String::new()
        } else {
            format!(", output: {text}")
        }
    }
}

/// Pure: "exit status 3" or "signal 9".
fn describe(status: ExitStatus) -> String {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(c), _) => format!("exit status {c}"),
        (None, Some(s)) => format!("signal {s}"),
        _ => status.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use oci_spec::runtime::{HookBuilder, HooksBuilder};

    fn hook(script: &str, timeout: Option<i64>) -> Hook {
        let mut b = HookBuilder::default()
            .path("/bin/sh")
            .args(vec!["sh".to_string(), "-c".to_string(), script.to_string()])
            .env(vec!["ONLY=this".to_string(), "broken".to_string()]);
        if let Some(t) = timeout {
            b = b.timeout(t);
        }
        b.build().expect("valid hook")
    }

    #[test]
    fn passes_state_on_stdin_and_exactly_the_hook_environment() {
        let dir = std::env::temp_dir().join(format!("kaji-hooks-unit-{}", std::process::id()));
        std::fs::create_dir_all(&dir).expect("temp dir is writable");
        let out = dir.join("out");
        let h = hook(&format!("{{ cat; echo; env | sort | tr '\\n' ' '; }} > {}", out.display()), Some(5));
        run(Point::CreateRuntime, &h, br#"{"id":"c1"}"#, Some(&dir)).expect("hook succeeds");
        let text = std::fs::read_to_string(&out).expect("hook wrote its output");
        let _ = std::fs::remove_dir_all(&dir);
        let mut lines = text.lines();
        assert_eq!(lines.next(), Some(r#"{"id":"c1"}"#));
        let env = lines.next().unwrap_or_default();
        assert!(env.contains("ONLY=this"), "{env}");
        assert!(!env.contains("HOME=") && !env.contains("broken"), "{env}");
    }

    #[test]
    fn a_failing_hook_is_named_with_its_status_and_output() {
        let err = run(Point::CreateRuntime, &hook("echo nope >&2; exit 3", None), b"{}", None)
            .expect_err("exit 3 is a failure");
        let msg = err.to_string();
        assert!(msg.starts_with("createRuntime hook /bin/sh failed with exit status 3"), "{msg}");
        assert!(msg.ends_with("output: nope"), "{msg}");
    }

    #[test]
    fn a_hook_past_its_timeout_is_killed_with_its_children() {
        let t = Instant::now();
        let err =
            run(Point::Poststart, &hook("sleep 30 & sleep 30; wait", Some(1)), b"{}", None).expect_err("times out");
        assert!(matches!(err, Error::Timeout { seconds: 1, .. }), "{err}");
        assert!(t.elapsed() < Duration::from_secs(10), "took {:?}", t.elapsed());
    }

    #[test]
    fn a_hook_that_ignores_stdin_still_succeeds() {
        let big = vec![b'x'; 1 << 20];
        run(Point::Poststop, &hook("exit 0", Some(5)), &big, None).expect("succeeds");
    }

    #[test]
    fn background_children_holding_the_output_do_not_block() {
        let t = Instant::now();
        run(Point::Poststop, &hook("sleep 5 & exit 0", None), b"{}", None).expect("succeeds");
        assert!(t.elapsed() < Duration::from_secs(4), "took {:?}", t.elapsed());
    }

    #[test]
    fn a_missing_binary_fails_to_start() {
        let h = HookBuilder::default().path("/nonexistent/hook").build().expect("valid hook");
        assert!(matches!(run(Point::Prestart, &h, b"{}", None), Err(Error::Spawn { .. })));
    }

    #[test]
    fn lists_hooks_per_point() {
        let hooks = HooksBuilder::default()
            .create_runtime(vec![hook("true", None)])
            .poststop(vec![hook("true", None), hook("true", None)])
            .build()
            .expect("valid hooks");
        assert_eq!(at(&hooks, Point::Poststop).len(), 2);
        assert!(at(&hooks, Point::Prestart).is_empty());
        assert!(any(Some(&hooks), &[Point::Prestart, Point::CreateRuntime]));
        assert!(!any(Some(&hooks), &[Point::StartContainer]));
        assert!(!any(None, &[Point::Poststop]));
        assert_eq!(env_pairs(&["A=1".into(), "B".into(), "=x".into(), "C=a=b".into()]), vec![("A", "1"), ("C", "a=b")]);
    }
}
