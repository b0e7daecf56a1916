//! OCI mount options, parsed as runc parses them: flags for mount(2), propagation, filesystem
//! data, the recursive attributes (`rro`, `rsuid`... applied with mount_setattr(2) to a whole
//! bind-mounted tree), and `tmpcopyup`. Pure.

use nix::mount::MsFlags;

/// `MOUNT_ATTR_*` of mount_setattr(2) (linux/mount.h).
pub mod attr {
    pub const RDONLY: u64 = 0x0000_0001;
    pub const NOSUID: u64 = 0x0000_0002;
    pub const NODEV: u64 = 0x0000_0004;
    pub const NOEXEC: u64 = 0x0000_0008;
    /// The access-time bits (relatime is their zero value).
    pub const ATIME: u64 = 0x0000_0070;
    pub const RELATIME: u64 = 0x0000_0000;
    pub const NOATIME: u64 = 0x0000_0010;
    pub const STRICTATIME: u64 = 0x0000_0020;
    pub const NODIRATIME: u64 = 0x0000_0080;
    pub const IDMAP: u64 = 0x0010_0000;
    pub const NOSYMFOLLOW: u64 = 0x0020_0000;
}

/// `MS_NOSYMFOLLOW` (Linux 5.10), which nix does not name.
const MS_NOSYMFOLLOW: MsFlags = MsFlags::from_bits_retain(256);

/// Parsed mount options.
#[derive(Debug, PartialEq)]
pub struct Options {
    pub flags: MsFlags,
    pub propagation: MsFlags,
    pub data: Vec<String>,
    /// Recursive attributes to set and to clear on the whole mounted tree.
    pub rec_set: u64,
    pub rec_clr: u64,
    /// tmpfs: copy what the directory held into the new tmpfs.
    pub tmpcopyup: bool,
}

/// A flag an option sets or clears.
fn flag(opt: &str) -> Option<(bool, MsFlags)> {
    Some(match opt {
        "ro" => (true, MsFlags::MS_RDONLY),
        "rw" => (false, MsFlags::MS_RDONLY),
        "nosuid" => (true, MsFlags::MS_NOSUID),
        "suid" => (false, MsFlags::MS_NOSUID),
        "nodev" => (true, MsFlags::MS_NODEV),
        "dev" => (false, MsFlags::MS_NODEV),
        "noexec" => (true, MsFlags::MS_NOEXEC),
        "exec" => (false, MsFlags::MS_NOEXEC),
        "sync" => (true, MsFlags::MS_SYNCHRONOUS),
        "async" => (false, MsFlags::MS_SYNCHRONOUS),
        "dirsync" => (true, MsFlags::MS_DIRSYNC),
        "remount" => (true, MsFlags::MS_REMOUNT),
        "mand" => (true, MsFlags::MS_MANDLOCK),
        "nomand" => (false, MsFlags::MS_MANDLOCK),
        "atime" => (false, MsFlags::MS_NOATIME),
        "noatime" => (true, MsFlags::MS_NOATIME),
        "diratime" => (false, MsFlags::MS_NODIRATIME),
        "nodiratime" => (true, MsFlags::MS_NODIRATIME),
        "relatime" => (true, MsFlags::MS_RELATIME),
        "norelatime" => (false, MsFlags::MS_RELATIME),
        "strictatime" => (true, MsFlags::MS_STRICTATIME),
        "nostrictatime" => (false, MsFlags::MS_STRICTATIME),
        "iversion" => (true, MsFlags::MS_I_VERSION),
        "noiversion" => (false, MsFlags::MS_I_VERSION),
        "lazytime" => (true, MsFlags::MS_LAZYTIME),
        "nolazytime" => (false, MsFlags::MS_LAZYTIME),
        "silent" => (true, MsFlags::MS_SILENT),
        "loud" => (false, MsFlags::MS_SILENT),
        "nosymfollow" => (true, MS_NOSYMFOLLOW),
        "symfollow" => (false, MS_NOSYMFOLLOW),
        "bind" => (true, MsFlags::MS_BIND),
        "rbind" => (true, MsFlags::MS_BIND | MsFlags::MS_REC),
        "defaults" => (true, MsFlags::empty()),
        _ => return None,
    })
}

/// A recursive attribute an option sets (`true`) or clears.
fn recursive(opt: &str) -> Option<(bool, u64)> {
    Some(match opt {
        "rro" => (true, attr::RDONLY),
        "rrw" => (false, attr::RDONLY),
        "rnosuid" => (true, attr::NOSUID),
        "rsuid" => (false, attr::NOSUID),
        "rnodev" => (true, attr::NODEV),
        "rdev" => (false, attr::NODEV),
        "rnoexec" => (true, attr::NOEXEC),
        "rexec" => (false, attr::NOEXEC),
        "rnodiratime" => (true, attr::NODIRATIME),
        "rdiratime" => (false, attr::NODIRATIME),
        "rrelatime" => (true, attr::RELATIME),
        "rnorelatime" => (false, attr::RELATIME),
        "rnoatime" => (true, attr::NOATIME),
        "ratime" => (false, attr::NOATIME),
        "rstrictatime" => (true, attr::STRICTATIME),
        "rnostrictatime" => (false, attr::STRICTATIME),
        "rnosymfollow" => (true, attr::NOSYMFOLLOW),
        "rsymfollow" => (false, attr::NOSYMFOLLOW),
        _ => return None,
    })
}

fn propagation(opt: &str) -> Option<MsFlags> {
    Some(match opt {
        "private" => MsFlags::MS_PRIVATE,
        "rprivate" => MsFlags::MS_PRIVATE | MsFlags::MS_REC,
        "slave" => MsFlags::MS_SLAVE,
        "rslave" => MsFlags::MS_SLAVE | MsFlags::MS_REC,
        "shared" => MsFlags::MS_SHARED,
        "rshared" => MsFlags::MS_SHARED | MsFlags::MS_REC,
        "unbindable" => MsFlags::MS_UNBINDABLE,
        "runbindable" => MsFlags::MS_UNBINDABLE | MsFlags::MS_REC,
        _ => return None,
    })
}

/// Pure: splits OCI mount options; later options override earlier ones. Anything else is
/// filesystem data (`mode=755`, `size=64m`...).
pub fn parse(options: &[String]) -> Options {
    let mut o = Options {
        flags: MsFlags::empty(),
        propagation: MsFlags::empty(),
        data: Vec::new(),
        rec_set: 0,
        rec_clr: 0,
        tmpcopyup: false,
    };
    for opt in options {
        if let Some((set, f)) = flag(opt) {
            if set {
                o.flags |= f;
            } else {
                o.flags &= !f;
            }
        } else if let Some((set, a)) = recursive(opt) {
            if set {
                o.rec_set |= a;
                o.rec_clr &= !a;
                // The access time is a field of its own: setting one value clears the others.
                if a & attr::ATIME == a {
                    o.rec_clr |= attr::ATIME;
                }
            } else {
                o.rec_clr |= a;
                o.rec_set &= !a;
            }
        } else if let Some(p) = propagation(opt) {
            o.propagation |= p;
        } else if opt == "tmpcopyup" {
            o.tmpcopyup = true;
        } else {
            o.data.push(opt.clone());
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn splits_flags_propagation_and_data() {
        let o = parse(&strings(&["nosuid", "noexec", "ro", "mode=755", "size=65536k", "rslave"]));
        assert_eq!(o.flags, MsFlags::MS_NOSUID | MsFlags::MS_NOEXEC | MsFlags::MS_RDONLY);
        assert_eq!(o.propagation, MsFlags::MS_SLAVE | MsFlags::MS_REC);
        assert_eq!(o.data, strings(&["mode=755", "size=65536k"]));
    }

    #[test]
    fn later_options_override_earlier_ones() {
        assert_eq!(parse(&strings(&["ro", "rw"])).flags, MsFlags::empty());
        assert_eq!(parse(&strings(&["rbind"])).flags, MsFlags::MS_BIND | MsFlags::MS_REC);
        assert_eq!(parse(&strings(&["nosymfollow", "defaults"])).flags, MS_NOSYMFOLLOW);
    }

    #[test]
    fn recursive_attributes_set_and_clear_as_mount_setattr_wants() {
        let o = parse(&strings(&["rbind", "rsuid", "rro", "rnoatime"]));
        assert_eq!(o.rec_set, attr::RDONLY | attr::NOATIME);
        assert_eq!(o.rec_clr, attr::NOSUID | attr::ATIME);
        assert_eq!(o.flags, MsFlags::MS_BIND | MsFlags::MS_REC, "recursive options are not mount(2) flags");
        let o = parse(&strings(&["rro", "rrw"]));
        assert_eq!((o.rec_set, o.rec_clr), (0, attr::RDONLY));
        assert!(parse(&strings(&["tmpcopyup"])).tmpcopyup);
        assert_eq!(parse(&strings(&["runbindable"])).propagation, MsFlags::MS_UNBINDABLE | MsFlags::MS_REC);
    }
}
