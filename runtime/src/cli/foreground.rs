//! What a foreground `run` or `exec` does while the container's process runs: every signal we
//! get forwarded to it, and its terminal bridged to ours.

use std::os::fd::AsFd;

use anyhow::Context;
use nix::sys::signal::Signal;
use nix::unistd::Pid;

use crate::sys;

/// Every signal blocked and readable from a signalfd instead, to forward to the container.
pub struct Signals {
    pub fd: nix::sys::signalfd::SignalFd,
}

impl Signals {
    pub fn block() -> anyhow::Result<Self> {
        use nix::sys::signal::{SigSet, SigmaskHow};
        let all = SigSet::all();
        nix::sys::signal::pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&all), None).context("block signals")?;
        let fd = nix::sys::signalfd::SignalFd::with_flags(&all, nix::sys::signalfd::SfdFlags::SFD_CLOEXEC)
            .context("signalfd")?;
        Ok(Signals { fd })
    }
}

/// Waits for our child `child` to exit, forwarding every signal we get to `target` (the
/// container's process: the init for `run`, the command for `exec`, whose helper is the child)
/// and, with a terminal, our terminal's size to it. Returns the child's exit code, 128 + n for
/// signal n.
pub fn wait(signals: &Signals, child: Pid, target: Pid, terminal: Option<Bridge>) -> i32 {
    if let Some(t) = &terminal {
        t.resize();
    }
    let code = loop {
        let Ok(Some(info)) = signals.fd.read_signal() else { break 255 };
        let Ok(sig) = Signal::try_from(info.ssi_signo as i32) else { continue };
        match sig {
            Signal::SIGCHLD => {
                if let Some(code) = reap(child) {
                    break code;
                }
            }
            Signal::SIGWINCH => {
                if let Some(t) = &terminal {
                    t.resize();
                }
            }
            Signal::SIGURG => {}
            other => {
                let _ = nix::sys::signal::kill(target, other);
            }
        }
    };
    if let Some(t) = terminal {
        t.finish();
    }
    code
}

/// Reaps every exited child; `child`'s exit code once it is among them.
fn reap(child: Pid) -> Option<i32> {
    use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
    let mut code = None;
    loop {
        match waitpid(Pid::from_raw(-1), Some(WaitPidFlag::WNOHANG)) {
            Ok(WaitStatus::Exited(pid, c)) if pid == child => code = Some(c),
            Ok(WaitStatus::Signaled(pid, s, _)) if pid == child => code = Some(128 + s as i32),
            Ok(WaitStatus::StillAlive) | Err(_) => return code,
            Ok(_) => {}
        }
    }
}

/// A foreground container's terminal bridged to ours: our stdin into its master, its output to
/// our stdout, our terminal (if stdin is one) in raw mode meanwhile.
pub struct Bridge {
    master: std::fs::File,
    saved: Option<nix::sys::termios::Termios>,
    output: std::thread::JoinHandle<()>,
}

impl Bridge {
    pub fn start(master: std::fs::File) -> Bridge {
        use nix::sys::termios::{cfmakeraw, tcgetattr, tcsetattr, SetArg};
        let stdin = std::io::stdin();
        let saved = tcgetattr(stdin.as_fd()).ok();
        if let Some(t) = &saved {
            let mut raw = t.clone();
            cfmakeraw(&mut raw);
            let _ = tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw);
        }
        if let Ok(mut to) = master.try_clone() {
            let _ = std::thread::Builder::new().spawn(move || {
                let _ = std::io::copy(&mut std::io::stdin(), &mut to);
            });
        }
        let mut from = master.try_clone().ok();
        let output = std::thread::spawn(move || {
            if let Some(f) = from.as_mut() {
                let _ = std::io::copy(f, &mut std::io::stdout());
            }
        });
        Bridge { master, saved, output }
    }

    /// Gives the container's terminal the size of ours.
    pub fn resize(&self) {
        if let Ok((cols, rows)) = sys::window_size(std::io::stdin().as_fd()) {
            let _ = sys::set_window_size(self.master.as_fd(), cols, rows);
        }
    }

    /// Waits for the output to drain (every holder of the terminal gone) and restores ours.
    pub fn finish(self) {
        drop(self.master);
        let _ = self.output.join();
        if let Some(t) = &self.saved {
            let _ = nix::sys::termios::tcsetattr(std::io::stdin().as_fd(), nix::sys::termios::SetArg::TCSANOW, t);
        }
    }
}
