//! The few raw syscalls the runtime needs that no safe wrapper offers: clone with namespace flags,
//! fork, pidfd_open and the child-subreaper prctl.
#![allow(unsafe_code)]

use std::os::fd::{FromRawFd, OwnedFd};

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
