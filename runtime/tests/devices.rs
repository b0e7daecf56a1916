//! Root-only: the eBPF device program (cgroup v2) decides every mknod and open as the v1
//! devices controller does with the same rules, on this kernel. Each rule set is written to a v1
//! devices cgroup and compiled into a program attached to a v2 cgroup (on a hybrid host the
//! kernel has both); one matrix of accesses runs in each, and the verdicts must be equal — and
//! equal to the emulator's.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use kaji_runtime::devices::{self, Kind};
use oci_spec::runtime::LinuxDeviceCgroup;

fn rule(allow: bool, line: &str) -> LinuxDeviceCgroup {
    devices::rule(allow, line).expect("valid rule")
}

/// Devices probed: type, major, minor. Block ones that do not exist here (the open fails after
/// the cgroup's check, with ENXIO), and the char devices every container has.
const DEVICES: &[(char, u32, u32)] = &[
    ('c', 1, 3),
    ('c', 1, 5),
    ('c', 1, 7),
    ('c', 1, 9),
    ('c', 5, 2),
    ('c', 10, 183),
    ('b', 259, 4095),
    ('b', 7, 4095),
];

/// A cgroup directory removed when dropped (after the probe has left it).
struct Dir(PathBuf);

impl Drop for Dir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// Runs the access matrix in a shell that first moves itself into `procs`; returns one verdict
/// per line: `mknod <t> <maj> <min> ok|denied`, `open <node> <r|w|rw> ok|denied`.
fn probe(procs: &Path, nodes: &Path, scratch: &Path) -> anyhow::Result<Vec<String>> {
    let mut script = format!("echo $$ > {}\n", procs.display());
    for (t, ma, mi) in DEVICES {
        let made = scratch.join(format!("{t}{ma}-{mi}"));
        script.push_str(&format!(
            "if mknod {m} {t} {ma} {mi} 2>/dev/null; then echo mknod {t} {ma} {mi} ok; else echo mknod {t} {ma} {mi} denied; fi; rm -f {m}\n",
            m = made.display()
        ));
        let node = nodes.join(format!("{t}{ma}-{mi}"));
        // Write access only where writing is harmless (null, zero, full, absent devices).
        let modes: &[(&str, &str)] = match (*t, *ma, *mi) {
            ('c', 1, 3) | ('c', 1, 5) | ('c', 1, 7) | ('b', _, _) => &[("r", "<"), ("w", ">"), ("rw", "<>")],
            _ => &[("r", "<")],
        };
        for (name, redir) in modes {
            script.push_str(&format!(
                "if ( exec 3{redir} {n} ) 2>&1 | grep -q 'not permitted'; then echo open {t}{ma}:{mi} {name} denied; else echo open {t}{ma}:{mi} {name} ok; fi\n",
                n = node.display()
            ));
        }
    }
    let out = Command::new("/bin/busybox").args(["sh", "-c", &script]).output()?;
    anyhow::ensure!(out.status.success(), "probe: {}", String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8_lossy(&out.stdout).lines().map(str::to_string).collect())
}

/// The emulator's verdicts for the same matrix.
fn expected(rules: &[LinuxDeviceCgroup], probe: &[String]) -> Vec<String> {
    let e = devices::emulate(rules);
    probe
        .iter()
        .map(|line| {
            let f: Vec<&str> = line.split(' ').collect();
            let (kind_major_minor, access) = match f[0] {
                "mknod" => (format!("{}{}:{}", f[1], f[2], f[3]), devices::MKNOD),
                _ => (f[1].to_string(), devices::access_bits(f[2])),
            };
            let kind = if kind_major_minor.starts_with('b') { Kind::Block } else { Kind::Char };
            let (ma, mi) = kind_major_minor[1..].split_once(':').unwrap_or_default();
            let ok = e.allows(kind, ma.parse().unwrap_or(0), mi.parse().unwrap_or(0), access);
            let verdict = if ok { "ok" } else { "denied" };
            let mut f2: Vec<String> = f[..f.len() - 1].iter().map(|s| s.to_string()).collect();
            f2.push(verdict.into());
            f2.join(" ")
        })
        .collect()
}

#[test]
fn the_device_program_decides_as_the_v1_controller() -> anyhow::Result<()> {
    common::require_root_and_busybox();
    let unified = if kaji_runtime::cgroups::is_unified() {
        PathBuf::from("/sys/fs/cgroup")
    } else {
        PathBuf::from("/sys/fs/cgroup/unified")
    };
    assert!(
        unified.join("cgroup.procs").exists(),
        "needs a cgroup v2 hierarchy (pure v2, or a hybrid host's /sys/fs/cgroup/unified)"
    );
    let v1 = Path::new("/sys/fs/cgroup/devices");
    let v1 = v1.join("devices.allow").exists().then_some(v1);
    let tmp = tempfile::Builder::new().prefix("kaji-devices").tempdir()?;
    let (nodes, scratch) = (tmp.path().join("nodes"), tmp.path().join("scratch"));
    std::fs::create_dir_all(&nodes)?;
    std::fs::create_dir_all(&scratch)?;
    for (t, ma, mi) in DEVICES {
        let kind = if *t == 'b' { nix::sys::stat::SFlag::S_IFBLK } else { nix::sys::stat::SFlag::S_IFCHR };
        let mode = nix::sys::stat::Mode::from_bits_truncate(0o666);
        nix::sys::stat::mknod(
            &nodes.join(format!("{t}{ma}-{mi}")),
            kind,
            mode,
            nix::sys::stat::makedev((*ma).into(), (*mi).into()),
        )?;
    }
    let sets: Vec<(&str, Vec<LinuxDeviceCgroup>)> = vec![
        ("kaji's default", devices::with_defaults(&[rule(false, "a *:* rwm")])),
        ("allow all but", vec![rule(false, "c 1:5 w"), rule(false, "b *:* r"), rule(false, "c 10:* rwm")]),
        (
            "deny all but",
            vec![
                rule(false, "a *:* rwm"),
                rule(true, "c 1:* rm"),
                rule(true, "c *:5 w"),
                rule(false, "c 1:* m"),
                rule(true, "b 259:4095 rw"),
            ],
        ),
    ];
    for (n, (name, rules)) in sets.iter().enumerate() {
        let tag = format!("kaji-test-dev-{}-{n}", std::process::id());
        let v2_dir = Dir(unified.join(&tag));
        std::fs::create_dir(&v2_dir.0)?;
        devices::attach(&v2_dir.0, rules)?;
        let by_program = probe(&v2_dir.0.join("cgroup.procs"), &nodes, &scratch)?;
        assert_eq!(by_program, expected(rules, &by_program), "{name}: the program vs the emulator");
        let denied = by_program.iter().filter(|l| l.ends_with("denied")).count();
        assert!(
            denied > 0 && denied < by_program.len(),
            "{name}: a matrix that tells allowed from denied: {by_program:#?}"
        );
        eprintln!("{name}: {denied} of {} denied", by_program.len());
        if let Some(v1) = v1 {
            let v1_dir = Dir(v1.join(&tag));
            std::fs::create_dir(&v1_dir.0)?;
            for r in rules {
                let file = if r.allow() { "devices.allow" } else { "devices.deny" };
                std::fs::write(v1_dir.0.join(file), r.to_string())?;
            }
            let by_v1 = probe(&v1_dir.0.join("cgroup.procs"), &nodes, &scratch)?;
            assert_eq!(by_program, by_v1, "{name}: the program vs the v1 controller");
        }
    }
    Ok(())
}
