//! What a lab could leave on the machine — network namespaces, cgroups, mounts, processes — and
//! the check that none of it is left. The readers of `/proc` text are pure and table-tested.

use super::topology::Lab;
use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// One process as `/proc` shows it.
#[derive(Debug, Default, Clone)]
pub struct ProcInfo {
    pub pid: i32,
    pub exe: String,
    pub cmdline: Vec<String>,
    /// The inode of its network namespace (`net:[ino]`).
    pub netns: Option<u64>,
    /// `/proc/<pid>/cgroup` as read.
    pub cgroup: String,
}

/// Mount points (field 5 of mountinfo, octal escapes undone) with the filesystem type.
fn mounts(mountinfo: &str) -> Vec<(String, String)> {
    mountinfo
        .lines()
        .filter_map(|l| {
            let point = l.split(' ').nth(4)?;
            let fstype = l.split(" - ").nth(1)?.split(' ').next()?;
            Some((unescape(point), fstype.to_string()))
        })
        .collect()
}

fn unescape(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(i) = rest.find('\\') {
        out.push_str(&rest[..i]);
        let code = rest.get(i + 1..i + 4).and_then(|o| u8::from_str_radix(o, 8).ok());
        match code {
            Some(b) => {
                out.push(char::from(b));
                rest = &rest[i + 4..];
            }
            None => {
                out.push('\\');
                rest = &rest[i + 1..];
            }
        }
    }
    out + rest
}

/// Mount points at or below `dir`.
pub fn mounts_under(mountinfo: &str, dir: &Path) -> Vec<String> {
    mounts(mountinfo).into_iter().map(|(p, _)| p).filter(|p| Path::new(p).starts_with(dir)).collect()
}

/// Where each cgroup hierarchy (v1 and v2) is mounted.
pub fn cgroup_roots(mountinfo: &str) -> Vec<PathBuf> {
    let roots: BTreeSet<String> =
        mounts(mountinfo).into_iter().filter(|(_, t)| t == "cgroup" || t == "cgroup2").map(|(p, _)| p).collect();
    roots.into_iter().map(PathBuf::from).collect()
}

/// Why `p` belongs to the lab, if it does.
pub fn belongs(p: &ProcInfo, lab: &Lab, netns_inodes: &[(String, u64)]) -> Option<String> {
    if let Some((ns, _)) = netns_inodes.iter().find(|(_, ino)| Some(*ino) == p.netns) {
        return Some(format!("in network namespace {ns}"));
    }
    let cgroup = p
        .cgroup
        .lines()
        .filter_map(|l| l.splitn(3, ':').nth(2))
        .find(|path| Path::new(path).components().any(|c| lab.owns(&c.as_os_str().to_string_lossy())));
    if let Some(path) = cgroup {
        return Some(format!("in cgroup {path}"));
    }
    // Only the lab's own kinds of program: someone's `less <dir>/agent-1.log` is not the lab's.
    let lab_program = p.exe.starts_with("kaji-") || p.exe == "docker-registry" || p.exe == "nsenter";
    let in_dir = p.cmdline.iter().any(|a| a.split('=').any(|part| Path::new(part).starts_with(&lab.dir)));
    if in_dir && lab_program {
        return Some(format!("runs from {}", lab.dir.display()));
    }
    let args: Vec<&str> = p.cmdline.iter().map(String::as_str).collect();
    let forwards_this_lab = args.get(1..3) == Some(&["lab", "forward"][..]) && args.contains(&lab.netns().as_str());
    (p.exe == "kaji" && forwards_this_lab).then(|| "the lab's API forwarder".to_string())
}

/// Every process on the machine except this one.
pub fn processes() -> Vec<ProcInfo> {
    let me = std::process::id();
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| u32::try_from(*pid).ok() != Some(me))
        .filter_map(|pid| {
            let base = PathBuf::from(format!("/proc/{pid}"));
            let cmdline = std::fs::read(base.join("cmdline")).ok()?;
            let exe = std::fs::read_link(base.join("exe"))
                .ok()
                .and_then(|e| e.file_name().map(|n| n.to_string_lossy().trim_end_matches(" (deleted)").to_string()))
                .unwrap_or_default();
            let netns = std::fs::read_link(base.join("ns/net"))
                .ok()
                .and_then(|l| l.to_string_lossy().strip_prefix("net:[")?.strip_suffix(']')?.parse().ok());
            Some(ProcInfo {
                pid,
                exe,
                cmdline: cmdline
                    .split(|b| *b == 0)
                    .filter(|a| !a.is_empty())
                    .map(|a| String::from_utf8_lossy(a).into_owned())
                    .collect(),
                netns,
                cgroup: std::fs::read_to_string(base.join("cgroup")).unwrap_or_default(),
            })
        })
        .collect()
}

/// Everything of `lab` still on the machine, one line each; empty when it is all gone.
/// `netns_inodes` are the lab's namespaces as they were before deletion (members keep a deleted
/// namespace alive, so only the inode finds them then).
pub fn find(lab: &Lab, netns_inodes: &[(String, u64)]) -> Vec<String> {
    let mut left = Vec::new();
    for ns in super::net::namespaces().into_iter().filter(|n| lab.owns(n)) {
        left.push(format!("network namespace {ns}"));
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    for root in cgroup_roots(&mountinfo) {
        let Ok(entries) = std::fs::read_dir(&root) else { continue };
        for e in entries.filter_map(|e| e.ok()) {
            if lab.owns(&e.file_name().to_string_lossy()) {
                left.push(format!("cgroup {}", e.path().display()));
            }
        }
    }
    for m in mounts_under(&mountinfo, &lab.dir) {
        left.push(format!("mount {m}"));
    }
    for p in processes() {
        if let Some(why) = belongs(&p, lab, netns_inodes) {
            left.push(format!("process {} {} ({why})", p.pid, p.cmdline.join(" ")));
        }
    }
    left
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
25 1 253:0 / / rw,relatime shared:1 - ext4 /dev/vda rw
30 25 0:26 / /sys/fs/cgroup rw shared:2 - tmpfs tmpfs rw
31 30 0:27 / /sys/fs/cgroup/memory rw shared:3 - cgroup cgroup rw,memory
32 30 0:28 / /sys/fs/cgroup/unified rw shared:4 - cgroup2 cgroup2 rw
40 25 0:50 / /tmp/l/node-1/pods/u/ns/net rw shared:9 - nsfs nsfs rw
41 25 0:51 / /tmp/l2/x rw shared:9 - overlay overlay rw
42 25 0:52 / /tmp/l/with\\040space rw shared:9 - tmpfs tmpfs rw
";

    fn lab() -> Lab {
        Lab { dir: PathBuf::from("/tmp/l"), port: 7001, nodes: 2, ha: false }
    }

    #[test]
    fn finds_mounts_below_the_lab_dir_only() {
        assert_eq!(mounts_under(MOUNTINFO, Path::new("/tmp/l")), ["/tmp/l/node-1/pods/u/ns/net", "/tmp/l/with space"]);
    }

    #[test]
    fn finds_every_cgroup_hierarchy() {
        let roots = cgroup_roots(MOUNTINFO);
        assert_eq!(roots, [PathBuf::from("/sys/fs/cgroup/memory"), PathBuf::from("/sys/fs/cgroup/unified")]);
    }

    #[test]
    fn tells_which_processes_are_the_labs() {
        let l = lab();
        let inodes = [("kaji-lab-7001-node-1".to_string(), 99)];
        let p = |exe: &str, args: &[&str], netns: u64, cgroup: &str| ProcInfo {
            pid: 1,
            exe: exe.into(),
            cmdline: args.iter().map(|a| (*a).to_string()).collect(),
            netns: Some(netns),
            cgroup: cgroup.into(),
        };
        let why = |p: ProcInfo| belongs(&p, &l, &inodes);
        assert_eq!(
            why(p("kaji-agent", &["kaji-agent"], 99, "")).as_deref(),
            Some("in network namespace kaji-lab-7001-node-1")
        );
        assert!(why(p("sh", &["sh"], 1, "4:memory:/kaji-lab-7001-node-2/kubepods/pod1/c")).is_some());
        assert!(
            why(p("kaji-agent", &["kaji-agent", "fork-server", "--root", "/tmp/l/node-1/runtime"], 1, "")).is_some()
        );
        assert!(why(p("kaji", &["kaji", "lab", "forward", "--netns", "kaji-lab-7001"], 1, "")).is_some());
        // Not the lab's: another lab, a user's `kaji lab status`, an unrelated shell.
        assert!(why(p("sh", &["sh"], 1, "4:memory:/kaji-lab-70011-node-1/kubepods")).is_none());
        assert!(why(p("kaji", &["kaji", "lab", "forward", "--netns", "kaji-lab-7002"], 1, "")).is_none());
        assert!(why(p("kaji", &["kaji", "lab", "status", "--dir", "/tmp/l"], 1, "")).is_none());
        assert!(why(p("kaji-agent", &["kaji-agent", "--root-dir", "/tmp/l2/node-1"], 1, "0::/")).is_none());
        assert!(why(p("less", &["less", "/tmp/l/agent-1.log"], 1, "")).is_none());
        assert!(why(p("docker-registry", &["docker-registry", "serve", "/tmp/l/registry/config.yml"], 1, "")).is_some());
    }
}
