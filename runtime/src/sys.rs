//! The few raw syscalls the runtime needs that no safe wrapper offers: clone with namespace flags,
//! fork, pidfd_open, the child-subreaper prctl, and for exec an extra fd for a spawned helper,
//! pseudo-terminals (open, resize, controlling terminal).
#![allow(unsafe_code)]

use std::fs::File;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command};

use nix::errno::Errno;
use nix::sched::CloneFlags;
use nix::unistd::Pid;

/// Where a process continues after [`clone_process`] or [`fork`].
pub enum Forked {
    Parent(Pid),
    Child,
}

/// `clone(2)` with fork semantics (child continues on a copy of the stack) plus namespace flags.
///
/// Only call from a single-threaded process: the child inherits one thread and any lock another
/// thread held stays locked forever. The shim, a freshly exec'd process, is the only caller.
pub fn clone_process(flags: CloneFlags) -> Result<Forked, Errno> {
    let raw = flags.bits() as libc::c_ulong | libc::SIGCHLD as libc::c_ulong;
    // SAFETY: a NULL stack gives fork semantics (the child runs on a copy-on-write copy of this
    // stack); the other pointer arguments are unused because no CLONE_*TID/SETTLS flag is set.
    // The caller is single-threaded, so the child starts with a consistent heap and no held locks.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            raw,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
            0usize,
        )
    };
    match ret {
        -1 => Err(Errno::last()),
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(Pid::from_raw(pid as i32))),
    }
}

/// `fork(2)`, for the shim to detach from its caller. Same single-thread rule as [`clone_process`].
pub fn fork() -> Result<Forked, Errno> {
    // SAFETY: only called by the freshly exec'd, single-threaded shim before it starts any thread.
    match unsafe { nix::unistd::fork() }? {
        nix::unistd::ForkResult::Parent { child } => Ok(Forked::Parent(child)),
        nix::unistd::ForkResult::Child => Ok(Forked::Child),
    }
}

/// `openat(2)` relative to `dir`, close-on-exec.
pub fn openat(dir: BorrowedFd<'_>, path: &std::path::Path, flags: nix::fcntl::OFlag) -> Result<OwnedFd, Errno> {
    let fd = nix::fcntl::openat(
        Some(dir.as_raw_fd()),
        path,
        flags | nix::fcntl::OFlag::O_CLOEXEC,
        nix::sys::stat::Mode::empty(),
    )?;
    // SAFETY: openat(2) just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, 0, prog)` with `bpf`, an array of `struct sock_filter`.
pub fn load_seccomp_filter(bpf: &[u8]) -> Result<(), Errno> {
    let size = std::mem::size_of::<libc::sock_filter>();
    if bpf.is_empty() || !bpf.len().is_multiple_of(size) || bpf.len() / size > usize::from(u16::MAX) {
        return Err(Errno::EINVAL);
    }
    // Copied into properly aligned instructions: the bytes come from a Vec<u8>.
    let program: Vec<libc::sock_filter> = bpf
        .chunks_exact(size)
        .map(|c| libc::sock_filter {
            code: u16::from_ne_bytes([c[0], c[1]]),
            jt: c[2],
            jf: c[3],
            k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
        })
        .collect();
    let prog = libc::sock_fprog { len: program.len() as u16, filter: program.as_ptr().cast_mut() };
    // SAFETY: `prog` points at `program`, which outlives the call; the kernel copies it.
    let ret =
        unsafe { libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, 0, &prog as *const libc::sock_fprog) };
    if ret < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// `pidfd_open(2)`: a file descriptor that becomes readable when `pid` exits.
pub fn pidfd_open(pid: Pid) -> Result<OwnedFd, Errno> {
    // SAFETY: plain syscall with integer arguments; the result is checked before use.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0) };
    if ret < 0 {
        return Err(Errno::last());
    }
    // SAFETY: the kernel returned a new file descriptor that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as i32) })
}

/// Makes this process the reaper of orphaned descendants (needed when a runc-created init is
/// reparented to the shim).
pub fn set_child_subreaper() -> Result<(), Errno> {
    // SAFETY: prctl with integer arguments only.
    let ret = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    Errno::result(ret).map(drop)
}

/// Asks the kernel to SIGKILL this process when its parent dies (container init ← shim).
pub fn set_parent_death_signal() -> Result<(), Errno> {
    // SAFETY: prctl with integer arguments only.
    let ret = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL, 0, 0, 0) };
    Errno::result(ret).map(drop)
}

/// Spawns `cmd` (a fresh exec of a helper or of runc, never a fork that keeps running our code)
/// with, between fork and exec: `extra` installed as fd `target` (a report pipe beside the
/// stdio), and with `terminal`, a new session whose controlling terminal is stdin (runc bridges
/// its own terminal to the one it makes in the container, and needs one to do that).
pub fn spawn(cmd: &mut Command, extra: Option<(OwnedFd, RawFd)>, terminal: bool) -> std::io::Result<Child> {
    let fd = extra.as_ref().map(|(fd, target)| (fd.as_raw_fd(), *target));
    // SAFETY: the closure runs in the forked child before exec and only calls dup2, fcntl,
    // setsid and ioctl, which are async-signal-safe; it touches no heap, lock or Rust state.
    unsafe {
        cmd.pre_exec(move || {
            let check = |ret: libc::c_int| if ret < 0 { Err(std::io::Error::last_os_error()) } else { Ok(()) };
            if let Some((raw, target)) = fd {
                if raw == target {
                    // dup2 onto itself keeps FD_CLOEXEC: clear it so the fd survives exec.
                    check(libc::fcntl(raw, libc::F_SETFD, 0))?;
                } else {
                    check(libc::dup2(raw, target))?;
                }
            }
            if terminal {
                check(libc::setsid())?;
                check(libc::ioctl(0, libc::TIOCSCTTY, 0))?;
            }
            Ok(())
        });
    }
    let child = cmd.spawn();
    drop(extra);
    child
}

/// Takes ownership of an inherited file descriptor (the helper's report pipe), if it is open.
pub fn take_inherited_fd(fd: RawFd) -> Option<OwnedFd> {
    nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_GETFD).ok()?;
    // SAFETY: the fd is open (F_GETFD succeeded) and was installed by our parent for us alone;
    // nothing else in this freshly exec'd process refers to it.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A new pseudo-terminal: (master, slave), both close-on-exec, the slave never becoming our
/// controlling terminal, with the given initial size.
pub fn open_pty(size: Option<(u16, u16)>) -> std::io::Result<(File, File)> {
    use std::os::unix::fs::OpenOptionsExt;
    let master = File::options().read(true).write(true).custom_flags(libc::O_NOCTTY).open("/dev/ptmx")?;
    let unlock: libc::c_int = 0;
    // SAFETY: TIOCSPTLCK reads one c_int through the pointer, which is valid for the call.
    if unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCSPTLCK, &unlock) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    let flags = libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC;
    // SAFETY: TIOCGPTPEER takes the open flags by value and returns a new fd or -1.
    let peer = unsafe { libc::ioctl(master.as_raw_fd(), libc::TIOCGPTPEER, flags) };
    if peer < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: the kernel just returned this fd and nothing else owns it.
    let slave = File::from(unsafe { OwnedFd::from_raw_fd(peer) });
    if let Some((cols, rows)) = size {
        set_window_size(master.as_fd(), cols, rows)?;
    }
    Ok((master, slave))
}

/// Sends `fd` over the unix socket `sock` (SCM_RIGHTS, with one byte of data).
pub fn send_fd(sock: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> Result<(), Errno> {
    send_with_fd(sock, b"t", fd)
}

/// Sends `data` with `fd` attached (SCM_RIGHTS) in one message; never raises SIGPIPE.
pub fn send_with_fd(sock: BorrowedFd<'_>, data: &[u8], fd: BorrowedFd<'_>) -> Result<(), Errno> {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    let iov = [std::io::IoSlice::new(data)];
    let fds = [fd.as_raw_fd()];
    sendmsg::<()>(sock.as_raw_fd(), &iov, &[ControlMessage::ScmRights(&fds)], MsgFlags::MSG_NOSIGNAL, None).map(drop)
}

/// Receives one fd sent with [`send_fd`] (close-on-exec); `None` if the message carried none.
pub fn recv_fd(sock: BorrowedFd<'_>) -> Result<Option<OwnedFd>, Errno> {
    recv_with_fd(sock, &mut [0u8; 1]).map(|(_, fd)| fd)
}

/// Receives one message into `buf` and the first fd it carried (close-on-exec). `(0, None)` at
/// end of file.
pub fn recv_with_fd(sock: BorrowedFd<'_>, buf: &mut [u8]) -> Result<(usize, Option<OwnedFd>), Errno> {
    use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
    let mut iov = [std::io::IoSliceMut::new(buf)];
    let mut space = nix::cmsg_space!([RawFd; 1]);
    let msg = recvmsg::<()>(sock.as_raw_fd(), &mut iov, Some(&mut space), MsgFlags::MSG_CMSG_CLOEXEC)?;
    let mut got = None;
    for c in msg.cmsgs()? {
        if let ControlMessageOwned::ScmRights(fds) = c {
            for fd in fds {
                // SAFETY: the kernel installed these fds for us just now; nothing else owns them.
                let owned = unsafe { OwnedFd::from_raw_fd(fd) };
                got.get_or_insert(owned);
            }
        }
    }
    Ok((msg.bytes, got))
}

/// Sets a terminal's size (TIOCSWINSZ); the foreground process group gets SIGWINCH.
pub fn set_window_size(fd: BorrowedFd<'_>, cols: u16, rows: u16) -> std::io::Result<()> {
    let ws = libc::winsize { ws_row: rows, ws_col: cols, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCSWINSZ reads a winsize through the pointer, which is valid for the call.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCSWINSZ, &ws) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// Makes the terminal on `fd` this session leader's controlling terminal (TIOCSCTTY).
pub fn set_controlling_terminal(fd: RawFd) -> Result<(), Errno> {
    // SAFETY: TIOCSCTTY takes an integer argument (0: do not steal from another session).
    let ret = unsafe { libc::ioctl(fd, libc::TIOCSCTTY, 0) };
    Errno::result(ret).map(drop)
}

/// Sets `signal` to be ignored (`true`) or back to its default action (`false`). The fork
/// server ignores SIGCHLD (the kernel reaps the shims it forks) and each shim takes it back; the
/// container's process gets SIGPIPE at its default again (the Rust runtime ignores it at
/// start-up, and an ignored signal stays ignored across exec).
pub fn set_ignored(signal: nix::sys::signal::Signal, ignored: bool) -> Result<(), Errno> {
    use nix::sys::signal::SigHandler;
    let handler = if ignored { SigHandler::SigIgn } else { SigHandler::SigDfl };
    // SAFETY: SIG_IGN and SIG_DFL install no handler code, so no async-signal-safety concern.
    unsafe { nix::sys::signal::signal(signal, handler) }.map(drop)
}
