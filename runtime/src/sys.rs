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

/// `openat2(2)` of `path` beneath `dir` (`RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS`: no `..`, absolute
/// path or symlink may leave `dir`, no `/proc` magic link is followed), close-on-exec.
pub fn openat2_beneath(
    dir: BorrowedFd<'_>,
    path: &std::path::Path,
    flags: nix::fcntl::OFlag,
) -> Result<OwnedFd, Errno> {
    use nix::fcntl::{OpenHow, ResolveFlag};
    let how = OpenHow::new()
        .flags(flags | nix::fcntl::OFlag::O_CLOEXEC)
        .resolve(ResolveFlag::RESOLVE_BENEATH | ResolveFlag::RESOLVE_NO_MAGICLINKS);
    let fd = nix::fcntl::openat2(dir.as_raw_fd(), path, how)?;
    // SAFETY: openat2(2) just returned this descriptor; nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `seccomp(SECCOMP_SET_MODE_FILTER, flags, prog)` with `bpf`, an array of `struct
/// sock_filter`; with `listener`, SECCOMP_FILTER_FLAG_NEW_LISTENER, and the fd it returns.
pub fn load_seccomp_filter(bpf: &[u8], listener: bool) -> Result<Option<OwnedFd>, Errno> {
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
    let flags = if listener { libc::SECCOMP_FILTER_FLAG_NEW_LISTENER } else { 0 };
    let ret = unsafe {
        libc::syscall(libc::SYS_seccomp, libc::SECCOMP_SET_MODE_FILTER, flags, &prog as *const libc::sock_fprog)
    };
    if ret < 0 {
        return Err(Errno::last());
    }
    // SAFETY: with NEW_LISTENER, seccomp(2) returned a new fd that nothing else owns.
    Ok(listener.then(|| unsafe { OwnedFd::from_raw_fd(ret as RawFd) }))
}

/// `struct mount_attr` of `mount_setattr(2)`, the kernel's layout.
#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// `AT_RECURSIVE` of the new mount API (not in libc): the call applies to every mount below.
const AT_RECURSIVE: libc::c_uint = 0x8000;

/// The raw `mount_setattr(2)` on `path` relative to `dirfd`.
fn setattr(dirfd: RawFd, path: &std::ffi::CStr, flags: libc::c_uint, attr: &MountAttr) -> Result<(), Errno> {
    // SAFETY: `path` is NUL-terminated and `attr` a struct mount_attr (its size passed along),
    // both valid for the call; `dirfd` is AT_FDCWD or a descriptor the caller borrows.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            dirfd,
            path.as_ptr(),
            flags,
            attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    if ret < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// `mount_setattr(2)` on the mount at `path` (and, `recursive`, every mount below it): sets
/// and clears `MOUNT_ATTR_*` attributes (see [`crate::mountopts::attr`]).
pub fn mount_setattr(path: &std::path::Path, recursive: bool, set: u64, clear: u64) -> Result<(), Errno> {
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| Errno::EINVAL)?;
    let attr = MountAttr { attr_set: set, attr_clr: clear, propagation: 0, userns_fd: 0 };
    setattr(libc::AT_FDCWD, &c, if recursive { AT_RECURSIVE } else { 0 }, &attr)
}

/// `bpf(BPF_PROG_LOAD)` of a `BPF_PROG_TYPE_CGROUP_DEVICE` program (`struct bpf_insn` bytes).
/// On failure, the error and the verifier's log.
pub fn bpf_load_device_program(insns: &[u8]) -> Result<OwnedFd, (std::io::Error, String)> {
    /// The head of `union bpf_attr` for BPF_PROG_LOAD; the kernel reads zeros for the rest.
    #[repr(C)]
    #[derive(Default)]
    struct ProgLoad {
        prog_type: u32,
        insn_cnt: u32,
        insns: u64,
        license: u64,
        log_level: u32,
        log_size: u32,
        log_buf: u64,
        kern_version: u32,
        prog_flags: u32,
    }
    const BPF_PROG_LOAD: libc::c_long = 5;
    const BPF_PROG_TYPE_CGROUP_DEVICE: u32 = 15;
    let license = c"Apache";
    let mut log = vec![0u8; 64 * 1024];
    let load = |with_log: bool, log: &mut Vec<u8>| {
        let attr = ProgLoad {
            prog_type: BPF_PROG_TYPE_CGROUP_DEVICE,
            insn_cnt: (insns.len() / 8) as u32,
            insns: insns.as_ptr() as u64,
            license: license.as_ptr() as u64,
            log_level: u32::from(with_log),
            log_size: if with_log { log.len() as u32 } else { 0 },
            log_buf: if with_log { log.as_mut_ptr() as u64 } else { 0 },
            ..Default::default()
        };
        // SAFETY: `attr` points at the instructions, the license and the log buffer, all alive
        // for the call; its size is passed and the kernel reads no more than that.
        unsafe {
            libc::syscall(libc::SYS_bpf, BPF_PROG_LOAD, &attr as *const ProgLoad, std::mem::size_of::<ProgLoad>())
        }
    };
    let fd = load(false, &mut log);
    if fd >= 0 {
        // SAFETY: bpf(2) just returned this descriptor; nothing else owns it.
        return Ok(unsafe { OwnedFd::from_raw_fd(fd as i32) });
    }
    let err = std::io::Error::last_os_error();
    // Once more with the verifier's log, to say why.
    let _ = load(true, &mut log);
    let text = String::from_utf8_lossy(log.split(|b| *b == 0).next().unwrap_or_default()).trim().to_string();
    Err((err, text))
}

/// `bpf(BPF_PROG_ATTACH)` of a device program to the cgroup directory `cgroup`, with
/// `BPF_F_ALLOW_MULTI` (programs of the ancestors keep deciding too).
pub fn bpf_attach_device_program(cgroup: RawFd, prog: RawFd) -> std::io::Result<()> {
    #[repr(C)]
    struct ProgAttach {
        target_fd: u32,
        attach_bpf_fd: u32,
        attach_type: u32,
        attach_flags: u32,
        replace_bpf_fd: u32,
    }
    const BPF_PROG_ATTACH: libc::c_long = 8;
    const BPF_CGROUP_DEVICE: u32 = 6;
    const BPF_F_ALLOW_MULTI: u32 = 2;
    let attr = ProgAttach {
        target_fd: cgroup as u32,
        attach_bpf_fd: prog as u32,
        attach_type: BPF_CGROUP_DEVICE,
        attach_flags: BPF_F_ALLOW_MULTI,
        replace_bpf_fd: 0,
    };
    // SAFETY: `attr` is a valid, fully initialised attribute block of the size passed.
    let ret = unsafe {
        libc::syscall(libc::SYS_bpf, BPF_PROG_ATTACH, &attr as *const ProgAttach, std::mem::size_of::<ProgAttach>())
    };
    if ret < 0 {
        return Err(std::io::Error::last_os_error());
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

/// Undoes [`set_parent_death_signal`]: a container left to its caller's reaper (runc's
/// `create`) outlives the process that made it.
pub fn clear_parent_death_signal() -> Result<(), Errno> {
    // SAFETY: prctl with integer arguments only.
    let ret = unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, 0, 0, 0, 0) };
    Errno::result(ret).map(drop)
}

/// Marks every fd from `first` up close-on-exec (`close_range(first, ~0, CLOSE_RANGE_CLOEXEC)`),
/// as runc does before the container's process starts: nothing the caller leaked reaches it
/// beyond stdio and the fds it was asked to pass.
pub fn cloexec_from(first: RawFd) -> Result<(), Errno> {
    const CLOSE_RANGE_CLOEXEC: libc::c_uint = 1 << 2;
    // SAFETY: close_range with integer arguments only; with CLOEXEC it closes nothing.
    let ret =
        unsafe { libc::syscall(libc::SYS_close_range, first as libc::c_uint, libc::c_uint::MAX, CLOSE_RANGE_CLOEXEC) };
    if ret < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// Clears close-on-exec on `fd` (an fd passed to the container's process).
pub fn clear_cloexec(fd: RawFd) -> Result<(), Errno> {
    nix::fcntl::fcntl(fd, nix::fcntl::FcntlArg::F_SETFD(nix::fcntl::FdFlag::empty())).map(drop)
}

/// Every signal back to its default action and none blocked: what the container's process
/// starts with, whatever the runtime inherited (a shell's `nohup` ignores SIGHUP, systemd
/// ignores SIGPIPE for services, Rust ignores SIGPIPE at start-up, an engine may block some)
/// — an ignored signal stays ignored across exec and the mask is inherited, so a process
/// started without this would, for example, never see the SIGHUP that asks it to reload.
pub fn reset_signals() {
    /// The kernel's `struct sigaction` (x86-64 and arm64 layout): the C library's wrapper
    /// refuses the signals it reserves for itself (32 and 33), which an ignoring parent may
    /// still have passed on, so the syscall is made directly.
    #[repr(C)]
    struct KernelSigaction {
        handler: usize,
        flags: u64,
        restorer: usize,
        mask: u64,
    }
    let dfl = KernelSigaction { handler: libc::SIG_DFL, flags: 0, restorer: 0, mask: 0 };
    for sig in 1..=64 {
        if sig == libc::SIGKILL || sig == libc::SIGSTOP {
            continue;
        }
        // SAFETY: rt_sigaction with a valid struct (SIG_DFL: no handler code runs) and the
        // kernel's sigset size; no old action is read back.
        unsafe {
            libc::syscall(
                libc::SYS_rt_sigaction,
                sig,
                &dfl as *const KernelSigaction,
                std::ptr::null_mut::<u8>(),
                8usize,
            );
        }
    }
    // SAFETY: an empty set, initialised by sigemptyset, and no old mask read back.
    unsafe {
        let mut none: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut none);
        libc::pthread_sigmask(libc::SIG_SETMASK, &none, std::ptr::null_mut());
    }
}

/// Spawns `cmd` (a fresh exec of a helper or of runc, never a fork that keeps running our code)
/// with, between fork and exec: each of `extra` installed as its target fd (report pipes beside
/// the stdio), and with `terminal`, a new session whose controlling terminal is stdin (runc
/// bridges its own terminal to the one it makes in the container, and needs one to do that).
pub fn spawn(cmd: &mut Command, extra: Vec<(OwnedFd, RawFd)>, terminal: bool) -> std::io::Result<Child> {
    let fds: Vec<(RawFd, RawFd)> = extra.iter().map(|(fd, target)| (fd.as_raw_fd(), *target)).collect();
    // Above every source and target: the sources are first moved there, so installing one
    // target can never close a source that is still to be installed.
    let floor = fds.iter().map(|(a, b)| (*a).max(*b)).max().unwrap_or(0) + 1;
    // SAFETY: the closure runs in the forked child before exec and only calls fcntl, dup2,
    // close, setsid and ioctl, which are async-signal-safe; it touches no heap (`fds` was built
    // before the fork and is only read), lock or Rust state.
    unsafe {
        cmd.pre_exec(move || {
            let check = |ret: libc::c_int| if ret < 0 { Err(std::io::Error::last_os_error()) } else { Ok(ret) };
            let mut moved = [0 as RawFd; 8];
            if fds.len() > moved.len() {
                return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
            }
            for (i, (raw, _)) in fds.iter().enumerate() {
                moved[i] = check(libc::fcntl(*raw, libc::F_DUPFD_CLOEXEC, floor))?;
            }
            for (i, (_, target)) in fds.iter().enumerate() {
                // dup2 clears FD_CLOEXEC on the new fd, so it survives exec.
                check(libc::dup2(moved[i], *target))?;
                libc::close(moved[i]);
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

/// A terminal's size (TIOCGWINSZ): (cols, rows).
pub fn window_size(fd: BorrowedFd<'_>) -> std::io::Result<(u16, u16)> {
    let mut ws = libc::winsize { ws_row: 0, ws_col: 0, ws_xpixel: 0, ws_ypixel: 0 };
    // SAFETY: TIOCGWINSZ writes a winsize through the pointer, which is valid for the call.
    if unsafe { libc::ioctl(fd.as_raw_fd(), libc::TIOCGWINSZ, &mut ws) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((ws.ws_col, ws.ws_row))
}

/// Makes the terminal on `fd` this session leader's controlling terminal (TIOCSCTTY).
pub fn set_controlling_terminal(fd: RawFd) -> Result<(), Errno> {
    // SAFETY: TIOCSCTTY takes an integer argument (0: do not steal from another session).
    let ret = unsafe { libc::ioctl(fd, libc::TIOCSCTTY, 0) };
    Errno::result(ret).map(drop)
}

/// setdomainname(2), which nix does not wrap.
pub fn set_domainname(name: &str) -> Result<(), Errno> {
    // SAFETY: the pointer and length describe `name`'s bytes, valid for the call.
    let ret = unsafe { libc::setdomainname(name.as_ptr().cast(), name.len()) };
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

/// `open_tree(2)` with `OPEN_TREE_CLONE`: a detached copy of the mount at `path` (and,
/// `recursive`, of every mount below it), to be changed and attached elsewhere.
pub fn open_tree_clone(path: &std::path::Path, recursive: bool) -> Result<OwnedFd, Errno> {
    const OPEN_TREE_CLONE: libc::c_uint = 1;
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| Errno::EINVAL)?;
    let flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: `c` is a NUL-terminated path valid for the call.
    let ret = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, c.as_ptr(), flags) };
    if ret < 0 {
        return Err(Errno::last());
    }
    // SAFETY: open_tree returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(ret as RawFd) })
}

/// `mount_setattr(2)` with `MOUNT_ATTR_IDMAP` on the detached mount `tree` (every mount in it
/// when `recursive`): its files' owners are mapped through the user namespace `userns`.
pub fn idmap_tree(tree: BorrowedFd<'_>, userns: BorrowedFd<'_>, recursive: bool) -> Result<(), Errno> {
    const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
    let attr =
        MountAttr { attr_set: MOUNT_ATTR_IDMAP, attr_clr: 0, propagation: 0, userns_fd: userns.as_raw_fd() as u64 };
    // An empty path with AT_EMPTY_PATH names `tree` itself.
    let flags = libc::AT_EMPTY_PATH as libc::c_uint | if recursive { AT_RECURSIVE } else { 0 };
    setattr(tree.as_raw_fd(), c"", flags, &attr)
}

/// `move_mount(2)` of the detached mount `tree` onto `target`.
pub fn attach_tree(tree: BorrowedFd<'_>, target: &std::path::Path) -> Result<(), Errno> {
    const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x4;
    let c = std::ffi::CString::new(target.as_os_str().as_encoded_bytes()).map_err(|_| Errno::EINVAL)?;
    // SAFETY: both paths are NUL-terminated and valid for the call; the empty one with
    // MOVE_MOUNT_F_EMPTY_PATH names `tree` itself.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            c.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    if ret < 0 {
        return Err(Errno::last());
    }
    Ok(())
}

/// `_exit(2)`: ends a forked child at once, without running exit handlers or flushing buffers
/// that are copies of its parent's.
pub fn exit_now(code: i32) -> ! {
    // SAFETY: _exit has no preconditions; it never returns.
    unsafe { libc::_exit(code) }
}
