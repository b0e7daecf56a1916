//! Seccomp: the OCI `linux.seccomp` profile compiled with libseccomp and loaded into the init
//! just before exec, and the default profile (a Docker-like deny-list).

use libseccomp::{ScmpAction, ScmpArch, ScmpArgCompare, ScmpCompareOp, ScmpFilterContext, ScmpSyscall};
use oci_spec::runtime::{
    Arch, LinuxSeccomp, LinuxSeccompAction, LinuxSeccompBuilder, LinuxSeccompOperator, LinuxSyscallBuilder,
};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to {op} seccomp filter")]
    Filter {
        op: &'static str,
        #[source]
        source: libseccomp::error::SeccompError,
    },
    #[error("failed to read the generated seccomp filter")]
    Export(#[source] std::io::Error),
    #[error("failed to load seccomp filter")]
    Load(#[source] std::io::Error),
    #[error("SCMP_ACT_NOTIFY {0}")]
    Notify(&'static str),
    #[error("failed to pass the seccomp notify fd to {path}")]
    Listener {
        path: std::path::PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to add seccomp rule for {name}")]
    Rule {
        name: String,
        #[source]
        source: libseccomp::error::SeccompError,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Syscalls the default profile refuses with EPERM: kernel modules, kexec, reboot, clock,
/// keyrings, bpf, perf, namespaces, mounts, swap, accounting and other host-wide knobs.
pub const DEFAULT_DENIED: &[&str] = &[
    "acct",
    "add_key",
    "bpf",
    "clock_adjtime",
    "clock_settime",
    "create_module",
    "delete_module",
    "finit_module",
    "fsconfig",
    "fsmount",
    "fsopen",
    "fspick",
    "get_kernel_syms",
    "io_uring_enter",
    "io_uring_register",
    "io_uring_setup",
    "get_mempolicy",
    "init_module",
    "ioperm",
    "iopl",
    "kcmp",
    "kexec_file_load",
    "kexec_load",
    "keyctl",
    "lookup_dcookie",
    "mbind",
    "mount",
    "mount_setattr",
    "move_mount",
    "move_pages",
    "name_to_handle_at",
    "nfsservctl",
    "open_by_handle_at",
    "open_tree",
    "perf_event_open",
    "pivot_root",
    "process_vm_readv",
    "process_vm_writev",
    "query_module",
    "quotactl",
    "reboot",
    "request_key",
    "set_mempolicy",
    "setns",
    "settimeofday",
    "stime",
    "swapoff",
    "swapon",
    "sysfs",
    "syslog",
    "umount",
    "umount2",
    "unshare",
    "uselib",
    "userfaultfd",
    "ustat",
    "vm86",
    "vm86old",
];

/// The namespace flags of `clone` that moby's and containerd's RuntimeDefault refuse
/// (0x7E020000: NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET).
pub const CLONE_NAMESPACE_FLAGS: [u64; 7] =
    [0x0002_0000, 0x0200_0000, 0x0400_0000, 0x0800_0000, 0x1000_0000, 0x2000_0000, 0x4000_0000];

/// The default profile: allow everything except [`DEFAULT_DENIED`] (EPERM), `clone` with any
/// namespace flag (EPERM; one masked rule a flag, OR-ed by libseccomp), and `clone3` (ENOSYS, so
/// libc falls back to `clone`, whose flags a filter can read) — as RuntimeDefault refuses them
/// to a container without CAP_SYS_ADMIN: no user namespaces, so no way around the rest.
pub fn default_profile() -> LinuxSeccomp {
    let errno = |names: Vec<String>, errno: i32, args: Option<Vec<oci_spec::runtime::LinuxSeccompArg>>| {
        let mut b = LinuxSyscallBuilder::default()
            .names(names)
            .action(LinuxSeccompAction::ScmpActErrno)
            .errno_ret(errno as u32);
        if let Some(args) = args {
            b = b.args(args);
        }
        b.build().expect("static syscall rule is valid")
    };
    let mut rules = vec![errno(DEFAULT_DENIED.iter().map(|s| s.to_string()).collect(), libc::EPERM, None)];
    for flag in CLONE_NAMESPACE_FLAGS {
        let arg = oci_spec::runtime::LinuxSeccompArgBuilder::default()
            .index(0usize)
            .value(flag)
            .value_two(flag)
            .op(LinuxSeccompOperator::ScmpCmpMaskedEq)
            .build()
            .expect("static argument rule is valid");
        rules.push(errno(vec!["clone".into()], libc::EPERM, Some(vec![arg])));
    }
    rules.push(errno(vec!["clone3".into()], libc::ENOSYS, None));
    LinuxSeccompBuilder::default()
        .default_action(LinuxSeccompAction::ScmpActAllow)
        .syscalls(rules)
        .build()
        .expect("static seccomp profile is valid")
}

fn action(action: LinuxSeccompAction, errno: Option<u32>) -> ScmpAction {
    match action {
        LinuxSeccompAction::ScmpActKill | LinuxSeccompAction::ScmpActKillThread => ScmpAction::KillThread,
        LinuxSeccompAction::ScmpActKillProcess => ScmpAction::KillProcess,
        LinuxSeccompAction::ScmpActTrap => ScmpAction::Trap,
        LinuxSeccompAction::ScmpActErrno => ScmpAction::Errno(errno.unwrap_or(libc::EPERM as u32) as i32),
        LinuxSeccompAction::ScmpActTrace => ScmpAction::Trace(errno.unwrap_or(libc::EPERM as u32) as u16),
        LinuxSeccompAction::ScmpActLog => ScmpAction::Log,
        LinuxSeccompAction::ScmpActAllow => ScmpAction::Allow,
        LinuxSeccompAction::ScmpActNotify => ScmpAction::Notify,
    }
}

fn arch(arch: Arch) -> Option<ScmpArch> {
    Some(match arch {
        Arch::ScmpArchX86 => ScmpArch::X86,
        Arch::ScmpArchX86_64 => ScmpArch::X8664,
        Arch::ScmpArchX32 => ScmpArch::X32,
        Arch::ScmpArchArm => ScmpArch::Arm,
        Arch::ScmpArchAarch64 => ScmpArch::Aarch64,
        _ => return None,
    })
}

fn compare(op: LinuxSeccompOperator, value: u64) -> ScmpCompareOp {
    match op {
        LinuxSeccompOperator::ScmpCmpNe => ScmpCompareOp::NotEqual,
        LinuxSeccompOperator::ScmpCmpLt => ScmpCompareOp::Less,
        LinuxSeccompOperator::ScmpCmpLe => ScmpCompareOp::LessOrEqual,
        LinuxSeccompOperator::ScmpCmpEq => ScmpCompareOp::Equal,
        LinuxSeccompOperator::ScmpCmpGe => ScmpCompareOp::GreaterEqual,
        LinuxSeccompOperator::ScmpCmpGt => ScmpCompareOp::Greater,
        // OCI (runc, libseccomp-golang): `value` is the mask, `valueTwo` what the masked argument
        // must equal — moby's `clone` rule {value: 0x7E020000, valueTwo: 0} means "no namespace flag".
        LinuxSeccompOperator::ScmpCmpMaskedEq => ScmpCompareOp::MaskedEqual(value),
    }
}

/// One OCI argument condition as libseccomp takes it (for MASKED_EQ the datum is `valueTwo`).
fn arg_compare(a: &oci_spec::runtime::LinuxSeccompArg) -> ScmpArgCompare {
    let datum = match a.op() {
        LinuxSeccompOperator::ScmpCmpMaskedEq => a.value_two().unwrap_or(0),
        _ => a.value(),
    };
    ScmpArgCompare::new(a.index() as u32, compare(a.op(), a.value()), datum)
}

/// A compiled filter: the BPF program libseccomp generated for a profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Filter {
    /// `struct sock_filter` instructions, 8 bytes each, in host byte order.
    bpf: Vec<u8>,
    /// Some rule's action is SCMP_ACT_NOTIFY: loading it makes a listener fd.
    notify: bool,
}

/// Pure: whether the profile asks for SCMP_ACT_NOTIFY anywhere (then the runtime hands the
/// filter's listener fd to `listenerPath`).
pub fn uses_notify(profile: &LinuxSeccomp) -> bool {
    profile.default_action() == LinuxSeccompAction::ScmpActNotify
        || profile.syscalls().iter().flatten().any(|r| r.action() == LinuxSeccompAction::ScmpActNotify)
}

/// Pure: runc's rules for SCMP_ACT_NOTIFY. Not the default action (every syscall would wait for
/// the listener, the ones the runtime makes to hand it over included), never for `write`, and
/// only with a `listenerPath` to hand the fd to.
fn check_notify(profile: &LinuxSeccomp) -> Result<()> {
    if !uses_notify(profile) {
        return Ok(());
    }
    if profile.default_action() == LinuxSeccompAction::ScmpActNotify {
        return Err(Error::Notify("cannot be used as default action"));
    }
    let notify = |r: &&oci_spec::runtime::LinuxSyscall| r.action() == LinuxSeccompAction::ScmpActNotify;
    if profile.syscalls().iter().flatten().filter(notify).any(|r| r.names().iter().any(|n| n == "write")) {
        return Err(Error::Notify("cannot be used for the write syscall"));
    }
    if profile.listener_path().is_none() {
        return Err(Error::Notify("needs seccomp.listenerPath, the socket its listener fd is sent to"));
    }
    Ok(())
}

/// Compiles the profile into BPF. Syscall names unknown on this architecture are skipped, as
/// runc does.
pub fn compile(profile: &LinuxSeccomp) -> Result<Filter> {
    check_notify(profile)?;
    let ctx = context(profile)?;
    // libseccomp 2.5 (Debian 12) exports to a file descriptor only.
    let memfd = nix::sys::memfd::memfd_create(c"kaji-seccomp", nix::sys::memfd::MemFdCreateFlag::MFD_CLOEXEC)
        .map_err(|e| Error::Export(e.into()))?;
    ctx.export_bpf(&memfd).map_err(|source| Error::Filter { op: "generate", source })?;
    let mut file = std::fs::File::from(memfd);
    let mut bpf = Vec::new();
    std::io::Seek::rewind(&mut file)
        .and_then(|()| std::io::Read::read_to_end(&mut file, &mut bpf))
        .map_err(Error::Export)?;
    Ok(Filter { bpf, notify: uses_notify(profile) })
}

/// The default profile and its filter, compiled once per process by [`warm_up`].
static DEFAULT: std::sync::OnceLock<(LinuxSeccomp, Filter)> = std::sync::OnceLock::new();

/// Compiles the default profile once, in the fork server, so that every shim it forks — and the
/// container init each clones — inherits the program instead of compiling it again: building
/// libseccomp's rules and generating the BPF took 0.2–0.35 ms of each container's setup here.
pub fn warm_up() {
    let profile = default_profile();
    if let Ok(filter) = compile(&profile) {
        let _ = DEFAULT.set((profile, filter));
    }
}

/// The filter for `profile`: the one [`warm_up`] compiled when the profile is the default,
/// compiled now otherwise.
pub fn filter_for(profile: &LinuxSeccomp) -> Result<std::borrow::Cow<'static, Filter>> {
    match DEFAULT.get() {
        Some((default, filter)) if default == profile => Ok(std::borrow::Cow::Borrowed(filter)),
        _ => compile(profile).map(std::borrow::Cow::Owned),
    }
}

/// Builds libseccomp's filter context for the profile.
fn context(profile: &LinuxSeccomp) -> Result<ScmpFilterContext> {
    let default = action(profile.default_action(), profile.default_errno_ret());
    let mut ctx = ScmpFilterContext::new(default).map_err(|source| Error::Filter { op: "create", source })?;
    for a in profile.architectures().iter().flatten().filter_map(|a| arch(*a)) {
        if a != ScmpArch::native() {
            ctx.add_arch(a).map_err(|source| Error::Filter { op: "add architecture to", source })?;
        }
    }
    // no_new_privs is set by the process module according to the spec, not implicitly here.
    ctx.set_ctl_nnp(false).map_err(|source| Error::Filter { op: "configure", source })?;
    for rule in profile.syscalls().iter().flatten() {
        let act = action(rule.action(), rule.errno_ret());
        if act == default {
            continue;
        }
        let conditions: Vec<ScmpArgCompare> = rule.args().iter().flatten().map(arg_compare).collect();
        for name in rule.names() {
            let Ok(syscall) = ScmpSyscall::from_name(name) else { continue };
            let added = if conditions.is_empty() {
                ctx.add_rule(act, syscall)
            } else {
                ctx.add_rule_conditional(act, syscall, &conditions)
            };
            added.map_err(|source| Error::Rule { name: name.clone(), source })?;
        }
    }
    Ok(ctx)
}

/// Loads a compiled filter into the calling thread (inherited across exec) as libseccomp's own
/// load does with the attributes [`context`] sets: `seccomp(SECCOMP_SET_MODE_FILTER, flags,
/// prog)`, with SECCOMP_FILTER_FLAG_NEW_LISTENER when the filter notifies — its listener fd is
/// returned then. Without no_new_privs this needs CAP_SYS_ADMIN.
pub fn load(filter: &Filter) -> Result<Option<std::os::fd::OwnedFd>> {
    crate::sys::load_seccomp_filter(&filter.bpf, filter.notify).map_err(|e| Error::Load(e.into()))
}

/// What runc sends to a seccomp agent at `listenerPath` with the listener fd (SCM_RIGHTS), as
/// one message: `ContainerProcessState` of the runtime spec.
pub fn process_state(profile: &LinuxSeccomp, pid: i32, state: &crate::state::State) -> serde_json::Value {
    serde_json::json!({
        "ociVersion": crate::state::OCI_VERSION,
        "fds": ["seccompFd"],
        "pid": pid,
        "metadata": profile.listener_metadata().clone().unwrap_or_default(),
        "state": state,
    })
}

/// Connects to the profile's `listenerPath` (a host path: before joining a mount namespace).
pub fn connect_listener(profile: &LinuxSeccomp) -> Result<std::os::unix::net::UnixStream> {
    let path = profile.listener_path().clone().unwrap_or_default();
    std::os::unix::net::UnixStream::connect(&path).map_err(|source| Error::Listener { path, source })
}

/// Sends the agent connected at `sock` (see [`connect_listener`]) `message` with the listener
/// `fd`, in one message.
pub fn send_to_listener(
    profile: &LinuxSeccomp,
    sock: &std::os::unix::net::UnixStream,
    message: &serde_json::Value,
    fd: std::os::fd::BorrowedFd<'_>,
) -> Result<()> {
    let err =
        |source: std::io::Error| Error::Listener { path: profile.listener_path().clone().unwrap_or_default(), source };
    let data = serde_json::to_vec(message).map_err(|e| err(e.into()))?;
    crate::sys::send_with_fd(std::os::fd::AsFd::as_fd(sock), &data, fd).map_err(|e| err(e.into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_profile_compiles_and_skips_unknown_names() {
        let mut profile = default_profile();
        let mut rules = profile.syscalls().clone().unwrap_or_default();
        rules.push(
            LinuxSyscallBuilder::default()
                .names(vec!["no_such_syscall".to_string()])
                .action(LinuxSeccompAction::ScmpActErrno)
                .build()
                .expect("valid rule"),
        );
        profile.set_syscalls(Some(rules));
        compile(&profile).expect("compiles");
    }

    /// On a thread of its own (a filter loaded without TSYNC binds only its thread; root: loading
    /// needs CAP_SYS_ADMIN without no_new_privs): the default filter's answer to each raw call,
    /// as errno (0: allowed). A call that made a child process ends that child at once.
    #[allow(unsafe_code)]
    fn errno_under_default_filter(calls: Vec<(libc::c_long, [libc::c_long; 2])>) -> Vec<i32> {
        let filter = compile(&default_profile()).expect("compiles");
        std::thread::spawn(move || {
            load(&filter).expect("load the filter (root)");
            calls
                .iter()
                .map(|(nr, args)| {
                    // SAFETY: integer arguments only; a clone here has fork semantics (NULL stack)
                    // and its child leaves through _exit before touching anything.
                    let r = unsafe { libc::syscall(*nr, args[0], args[1], 0, 0, 0) };
                    match r {
                        0 if *nr == libc::SYS_clone => crate::sys::exit_now(0),
                        r if r < 0 => std::io::Error::last_os_error().raw_os_error().unwrap_or(-1),
                        pid if *nr == libc::SYS_clone => {
                            let _ = nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid as i32), None);
                            0
                        }
                        _ => 0,
                    }
                })
                .collect()
        })
        .join()
        .expect("thread")
    }

    #[test]
    fn the_default_profile_refuses_user_namespaces_and_io_uring_but_not_fork() {
        assert!(nix::unistd::geteuid().is_root(), "loading a filter without no_new_privs needs root");
        let sigchld = libc::SIGCHLD as libc::c_long;
        let got = errno_under_default_filter(vec![
            (libc::SYS_clone, [libc::CLONE_NEWUSER as libc::c_long | sigchld, 0]),
            (libc::SYS_clone, [libc::CLONE_NEWNS as libc::c_long | libc::CLONE_NEWNET as libc::c_long | sigchld, 0]),
            (libc::SYS_clone3, [0, 0]),
            (libc::SYS_io_uring_setup, [1, 0]),
            (libc::SYS_unshare, [libc::CLONE_NEWUSER as libc::c_long, 0]),
            (libc::SYS_clone, [sigchld, 0]),
        ]);
        // A plain fork is allowed (its child _exits at once: r == 0 there), so its errno is 0.
        assert_eq!(got, [libc::EPERM, libc::EPERM, libc::ENOSYS, libc::EPERM, libc::EPERM, 0]);
    }

    #[test]
    fn masked_equality_takes_the_mask_from_value_as_runc_does() {
        let arg = oci_spec::runtime::LinuxSeccompArgBuilder::default()
            .index(0usize)
            .value(0x7E02_0000u64)
            .value_two(0u64)
            .op(LinuxSeccompOperator::ScmpCmpMaskedEq)
            .build()
            .expect("valid");
        assert_eq!(arg_compare(&arg), ScmpArgCompare::new(0, ScmpCompareOp::MaskedEqual(0x7E02_0000), 0));
    }

    #[test]
    fn the_default_filter_compiled_once_is_the_one_compiled_now() {
        warm_up();
        let profile = default_profile();
        let cached = filter_for(&profile).expect("compiles");
        assert!(matches!(cached, std::borrow::Cow::Borrowed(_)));
        assert_eq!(*cached, compile(&profile).expect("compiles"));
        let mut other = default_profile();
        other.set_default_action(LinuxSeccompAction::ScmpActErrno);
        assert!(matches!(filter_for(&other).expect("compiles"), std::borrow::Cow::Owned(_)));
    }

    #[test]
    fn notify_follows_runcs_rules() {
        let notify = |names: &[&str]| {
            let mut profile = default_profile();
            let mut rules = profile.syscalls().clone().unwrap_or_default();
            rules.push(
                LinuxSyscallBuilder::default()
                    .names(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                    .action(LinuxSeccompAction::ScmpActNotify)
                    .build()
                    .expect("valid rule"),
            );
            profile.set_syscalls(Some(rules));
            profile
        };
        let err = |p: &LinuxSeccomp| compile(p).err().map(|e| e.to_string()).unwrap_or_default();
        let mut p = notify(&["mkdir"]);
        assert!(err(&p).contains("listenerPath"), "{}", err(&p));
        p.set_listener_path(Some("/run/agent.sock".into()));
        let filter = compile(&p).expect("compiles");
        assert!(filter.notify && uses_notify(&p));
        assert!(!compile(&default_profile()).expect("compiles").notify);
        let mut p = notify(&["write"]);
        p.set_listener_path(Some("/run/agent.sock".into()));
        assert!(err(&p).contains("write syscall"), "{}", err(&p));
        let mut p = default_profile();
        p.set_default_action(LinuxSeccompAction::ScmpActNotify);
        p.set_listener_path(Some("/run/agent.sock".into()));
        assert!(err(&p).contains("default action"), "{}", err(&p));
    }
}
