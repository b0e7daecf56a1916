//! Device rules on cgroup v2, which has no devices controller: an eBPF program of type
//! `BPF_PROG_TYPE_CGROUP_DEVICE` attached to the container's cgroup decides every open and mknod
//! of a device node, as runc does it. The program encodes the state the v1 devices controller
//! would reach from the same rules ([`emulate`]: a default plus exceptions, with v1's exact
//! semantics — an `a` rule resets, an allow under allow-by-default removes access bits from an
//! identical exception, a deny under deny-by-default likewise, exceptions under deny-by-default
//! must cover the whole request, under allow-by-default any overlap denies), so a spec means the
//! same on v1 and v2: `tests/devices.rs` runs one matrix of accesses under both on this kernel.
//! The loader is four bpf(2) calls, written here instead of pulling in libbpf's C build.

use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use oci_spec::runtime::{LinuxDeviceCgroup, LinuxDeviceType};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to open cgroup {path}")]
    Open {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("the kernel refused the device program: {log}")]
    Load {
        log: String,
        #[source]
        source: std::io::Error,
    },
    #[error("failed to attach the device program to {path}")]
    Attach {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// `BPF_DEVCG_DEV_*`: the device type in the program's context.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    Block = 1,
    Char = 2,
}

/// `BPF_DEVCG_ACC_*` bits.
pub const MKNOD: u8 = 1;
pub const READ: u8 = 2;
pub const WRITE: u8 = 4;
const ALL: u8 = MKNOD | READ | WRITE;

/// One exception of the v1 controller: a device (wildcards: `None`) and the access it names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Exception {
    pub kind: Kind,
    pub major: Option<u32>,
    pub minor: Option<u32>,
    pub access: u8,
}

/// The state of a v1 devices cgroup: its default and its exceptions, in the order added.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Emulated {
    pub default_allow: bool,
    pub exceptions: Vec<Exception>,
}

/// Pure: `rwm` letters as access bits (unknown letters ignored, as the kernel ignores them not:
/// the spec is validated by oci-spec's parser).
pub fn access_bits(access: &str) -> u8 {
    access.chars().fold(0, |a, c| {
        a | match c {
            'm' => MKNOD,
            'r' => READ,
            'w' => WRITE,
            _ => 0,
        }
    })
}

/// Pure: the state a new v1 devices cgroup (under a parent that allows everything) reaches when
/// `rules` are written to it in order (`devices.allow`/`devices.deny`).
pub fn emulate<'a>(rules: impl IntoIterator<Item = &'a LinuxDeviceCgroup>) -> Emulated {
    let mut e = Emulated { default_allow: true, exceptions: Vec::new() };
    for r in rules {
        let kind = match r.typ().unwrap_or(LinuxDeviceType::A) {
            LinuxDeviceType::B => Kind::Block,
            LinuxDeviceType::C | LinuxDeviceType::U => Kind::Char,
            // `a`: the whole cgroup becomes allow- or deny-by-default, whatever else it says.
            _ => {
                e = Emulated { default_allow: r.allow(), exceptions: Vec::new() };
                continue;
            }
        };
        let ex = Exception {
            kind,
            major: r.major().and_then(|m| u32::try_from(m).ok()),
            minor: r.minor().and_then(|m| u32::try_from(m).ok()),
            access: r.access().as_deref().map_or(ALL, access_bits),
        };
        // A rule in the direction of the default takes access away from an identical exception;
        // one against it adds an exception (or access to an identical one).
        if r.allow() == e.default_allow {
            e.exceptions.retain_mut(|x| {
                if (x.kind, x.major, x.minor) == (ex.kind, ex.major, ex.minor) {
                    x.access &= !ex.access;
                }
                x.access != 0
            });
        } else if let Some(x) =
            e.exceptions.iter_mut().find(|x| (x.kind, x.major, x.minor) == (ex.kind, ex.major, ex.minor))
        {
            x.access |= ex.access;
        } else {
            e.exceptions.push(ex);
        }
    }
    e
}

impl Emulated {
    /// Pure: the v1 controller's verdict on `access` to a device.
    pub fn allows(&self, kind: Kind, major: u32, minor: u32, access: u8) -> bool {
        let matches =
            |x: &Exception| x.kind == kind && x.major.is_none_or(|m| m == major) && x.minor.is_none_or(|m| m == minor);
        if self.default_allow {
            // Denied when any exception overlaps the request at all.
            !self.exceptions.iter().any(|x| matches(x) && x.access & access != 0)
        } else {
            // Allowed only when one exception covers the whole request.
            self.exceptions.iter().any(|x| matches(x) && access & !x.access == 0)
        }
    }
}

/// One eBPF instruction (`struct bpf_insn`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Insn {
    pub code: u8,
    pub dst: u8,
    pub src: u8,
    pub off: i16,
    pub imm: i32,
}

const LDX_MEM_W: u8 = 0x61;
const ALU32_AND_K: u8 = 0x54;
const ALU32_RSH_K: u8 = 0x74;
const ALU32_MOV_K: u8 = 0xb4;
const ALU32_MOV_X: u8 = 0xbc;
const JMP_JNE_K: u8 = 0x55;
const JMP_JNE_X: u8 = 0x5d;
const JMP_JEQ_K: u8 = 0x15;
const JMP_EXIT: u8 = 0x95;

fn insn(code: u8, dst: u8, src: u8, off: i16, imm: i32) -> Insn {
    Insn { code, dst, src, off, imm }
}

/// Pure: the program deciding as `e` does. Registers: r2 the device type, r3 the access asked
/// for, r4 major, r5 minor (from `struct bpf_cgroup_dev_ctx` at r1); one block per exception,
/// each falling through to the next unless it matches; the default at the end.
pub fn program(e: &Emulated) -> Vec<Insn> {
    let mut p = vec![
        insn(LDX_MEM_W, 2, 1, 0, 0),
        insn(ALU32_AND_K, 2, 0, 0, 0xffff),
        insn(LDX_MEM_W, 3, 1, 0, 0),
        insn(ALU32_RSH_K, 3, 0, 0, 16),
        insn(LDX_MEM_W, 4, 1, 4, 0),
        insn(LDX_MEM_W, 5, 1, 8, 0),
    ];
    let verdict = i32::from(!e.default_allow);
    for x in &e.exceptions {
        // The tests, each jumping to the next block when it fails: its offset is filled in
        // once the block's length is known.
        let mut block: Vec<Insn> = vec![insn(JMP_JNE_K, 2, 0, 0, x.kind as i32)];
        if x.access != ALL {
            block.push(insn(ALU32_MOV_X, 1, 3, 0, 0));
            block.push(insn(ALU32_AND_K, 1, 0, 0, i32::from(x.access)));
            block.push(match e.default_allow {
                // A deny exception matches any overlap: skip when there is none.
                true => insn(JMP_JEQ_K, 1, 0, 0, 0),
                // An allow exception must cover the request: skip when it does not.
                false => insn(JMP_JNE_X, 1, 3, 0, 0),
            });
        }
        if let Some(m) = x.major {
            block.push(insn(JMP_JNE_K, 4, 0, 0, m as i32));
        }
        if let Some(m) = x.minor {
            block.push(insn(JMP_JNE_K, 5, 0, 0, m as i32));
        }
        block.push(insn(ALU32_MOV_K, 0, 0, 0, verdict));
        block.push(insn(JMP_EXIT, 0, 0, 0, 0));
        let len = block.len();
        for (i, ins) in block.iter_mut().enumerate() {
            if matches!(ins.code, JMP_JNE_K | JMP_JNE_X | JMP_JEQ_K) {
                ins.off = (len - i - 1) as i16;
            }
        }
        p.extend(block);
    }
    p.push(insn(ALU32_MOV_K, 0, 0, 0, i32::from(e.default_allow)));
    p.push(insn(JMP_EXIT, 0, 0, 0, 0));
    p
}

/// Pure: the program as the kernel takes it (`struct bpf_insn`, little-endian x86-64/arm64).
pub fn encode(p: &[Insn]) -> Vec<u8> {
    let mut out = Vec::with_capacity(p.len() * 8);
    for i in p {
        out.push(i.code);
        out.push((i.src << 4) | (i.dst & 0x0f));
        out.extend_from_slice(&i.off.to_le_bytes());
        out.extend_from_slice(&i.imm.to_le_bytes());
    }
    out
}

/// The device rules libcgroups (and runc) add after a spec's own (see `cgroups`).
pub fn with_defaults(rules: &[LinuxDeviceCgroup]) -> Vec<LinuxDeviceCgroup> {
    let mut all = rules.to_vec();
    all.extend(crate::cgroups::DEFAULT_DEVICE_RULES.iter().filter_map(|r| rule(true, r)));
    all
}

/// Pure: a rule from its `devices.allow`/`devices.deny` line (`c 1:3 rwm`, `b *:* m`, `a`).
pub fn rule(allow: bool, line: &str) -> Option<LinuxDeviceCgroup> {
    let mut parts = line.split_whitespace();
    let typ = match parts.next()? {
        "c" => LinuxDeviceType::C,
        "b" => LinuxDeviceType::B,
        "a" => LinuxDeviceType::A,
        _ => return None,
    };
    let (major, minor) = parts.next().unwrap_or("*:*").split_once(':')?;
    let num = |s: &str| s.parse::<i64>().ok();
    let mut r = LinuxDeviceCgroup::default();
    r.set_allow(allow);
    r.set_typ(Some(typ));
    r.set_major(num(major));
    r.set_minor(num(minor));
    r.set_access(Some(parts.next().unwrap_or("rwm").to_string()));
    Some(r)
}

/// Loads the program for `rules` (for a container: the spec's [`with_defaults`]) and attaches
/// it to the v2 cgroup directory `dir`, beside any its ancestors have (`BPF_F_ALLOW_MULTI`: all
/// must allow).
pub fn attach(dir: &Path, rules: &[LinuxDeviceCgroup]) -> Result<()> {
    let bytes = encode(&program(&emulate(rules)));
    let prog = crate::sys::bpf_load_device_program(&bytes).map_err(|(source, log)| Error::Load { log, source })?;
    let cgroup = std::fs::File::open(dir).map_err(|source| Error::Open { path: dir.to_path_buf(), source })?;
    crate::sys::bpf_attach_device_program(cgroup.as_raw_fd(), prog.as_raw_fd())
        .map_err(|source| Error::Attach { path: dir.to_path_buf(), source })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(allow: bool, line: &str) -> LinuxDeviceCgroup {
        rule(allow, line).expect("valid rule")
    }

    #[test]
    fn an_all_rule_resets_and_later_rules_add_or_take_away() {
        let e = emulate(&[
            r(true, "c 1:3 r"),
            r(false, "a *:* rwm"),
            r(true, "c 1:3 rw"),
            r(true, "c 1:3 m"),
            r(false, "c 1:3 w"),
            r(true, "b *:* m"),
        ]);
        assert!(!e.default_allow);
        assert_eq!(
            e.exceptions,
            vec![
                Exception { kind: Kind::Char, major: Some(1), minor: Some(3), access: READ | MKNOD },
                Exception { kind: Kind::Block, major: None, minor: None, access: MKNOD },
            ]
        );
        assert!(e.allows(Kind::Char, 1, 3, READ));
        assert!(!e.allows(Kind::Char, 1, 3, READ | WRITE), "the whole request must be covered");
        assert!(e.allows(Kind::Block, 8, 0, MKNOD));
        assert!(!e.allows(Kind::Block, 8, 0, READ));
    }

    #[test]
    fn under_allow_by_default_any_overlap_with_an_exception_denies() {
        let e = emulate(&[r(false, "c 1:* w")]);
        assert!(e.default_allow);
        assert!(!e.allows(Kind::Char, 1, 5, READ | WRITE));
        assert!(e.allows(Kind::Char, 1, 5, READ));
        assert!(e.allows(Kind::Block, 1, 5, WRITE));
    }

    /// The program, run by a tiny interpreter of the instructions it uses, decides as the
    /// emulated controller does for every type, device and access combination tried.
    #[test]
    fn the_program_decides_as_the_emulated_controller() {
        fn run(p: &[Insn], kind: Kind, major: u32, minor: u32, access: u8) -> u64 {
            let mut r = [0u64; 11];
            let ctx = [(u32::from(access) << 16) | kind as u32, major, minor];
            let mut pc = 0usize;
            loop {
                let i = p[pc];
                let (d, s) = (i.dst as usize, i.src as usize);
                pc += 1;
                match i.code {
                    LDX_MEM_W => r[d] = u64::from(ctx[i.off as usize / 4]),
                    ALU32_AND_K => r[d] = (r[d] as u32 & i.imm as u32) as u64,
                    ALU32_RSH_K => r[d] = ((r[d] as u32) >> i.imm) as u64,
                    ALU32_MOV_K => r[d] = i.imm as u32 as u64,
                    ALU32_MOV_X => r[d] = r[s] as u32 as u64,
                    JMP_JNE_K if r[d] != i.imm as i64 as u64 => pc += i.off as usize,
                    JMP_JNE_X if r[d] != r[s] => pc += i.off as usize,
                    JMP_JEQ_K if r[d] == i.imm as i64 as u64 => pc += i.off as usize,
                    JMP_EXIT => return r[0],
                    _ => {}
                }
            }
        }
        let sets = [
            vec![r(false, "a *:* rwm")],
            with_defaults(&[r(false, "a *:* rwm")]),
            vec![r(false, "c 1:5 w"), r(false, "b 7:* rwm")],
            vec![r(false, "a *:* rwm"), r(true, "c 1:* r"), r(true, "c *:5 w")],
            vec![r(true, "a *:* rwm"), r(false, "c *:* m")],
        ];
        for rules in &sets {
            let e = emulate(rules);
            let p = program(&e);
            for kind in [Kind::Char, Kind::Block] {
                for (major, minor) in [(1, 3), (1, 5), (7, 0), (254, 0), (5, 2), (136, 4)] {
                    for access in 1..=7u8 {
                        let want = u64::from(e.allows(kind, major, minor, access));
                        assert_eq!(
                            run(&p, kind, major, minor, access),
                            want,
                            "{rules:?} {kind:?} {major}:{minor} {access}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn instructions_encode_as_struct_bpf_insn() {
        assert_eq!(encode(&[insn(JMP_JNE_X, 1, 3, 2, 0)]), vec![0x5d, 0x31, 2, 0, 0, 0, 0, 0]);
        assert_eq!(encode(&[insn(ALU32_MOV_K, 0, 0, 0, -1)]), vec![0xb4, 0, 0, 0, 0xff, 0xff, 0xff, 0xff]);
    }
}
