//! `root` + a path from the container's point of view, with every symlink on the way resolved
//! as the container would see it: an absolute link restarts at `root`, `..` stops at `root`. A
//! rootfs whose `/etc` links to the host's `/etc` (or `../../..`) must not make a mount land
//! outside it (filepath-securejoin's rule, which runc follows).

use std::path::{Component, Path, PathBuf};

/// More symlinks than this on one path: ELOOP.
const MAX_LINKS: usize = 255;

/// Resolves `unsafe_path` under `root`. The result is inside `root`; components that do not
/// exist (yet) are appended as they are.
pub fn join(root: &Path, unsafe_path: &Path) -> std::io::Result<PathBuf> {
    let mut pending: Vec<std::ffi::OsString> = components(unsafe_path);
    pending.reverse();
    // Resolved so far, relative to root.
    let mut done: Vec<std::ffi::OsString> = Vec::new();
    let mut links = 0;
    while let Some(c) = pending.pop() {
        if c == ".." {
            done.pop();
            continue;
        }
        let candidate: PathBuf = root.join(done.iter().collect::<PathBuf>()).join(&c);
        match std::fs::symlink_metadata(&candidate) {
            Ok(md) if md.file_type().is_symlink() => {
                links += 1;
                if links > MAX_LINKS {
                    return Err(std::io::Error::from_raw_os_error(libc::ELOOP));
                }
                let target = std::fs::read_link(&candidate)?;
                if target.is_absolute() {
                    done.clear();
                }
                let mut more = components(&target);
                more.reverse();
                pending.extend(more);
            }
            _ => done.push(c),
        }
    }
    Ok(root.join(done.iter().collect::<PathBuf>()))
}

/// Pure: the normal and `..` components of a path (`/`, `.` dropped).
fn components(p: &Path) -> Vec<std::ffi::OsString> {
    p.components()
        .filter_map(|c| match c {
            Component::Normal(n) => Some(n.to_os_string()),
            Component::ParentDir => Some("..".into()),
            _ => None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::symlink;

    #[test]
    fn symlinks_resolve_inside_the_root() -> std::io::Result<()> {
        let dir = tempfile::tempdir()?;
        let root = dir.path().join("root");
        std::fs::create_dir_all(root.join("real/sub"))?;
        symlink("/real", root.join("abs"))?;
        symlink("../../../../..", root.join("up"))?;
        symlink("/usr/etc", root.join("etc"))?;
        symlink("loop", root.join("loop"))?;
        assert_eq!(join(&root, Path::new("/abs/sub"))?, root.join("real/sub"));
        assert_eq!(join(&root, Path::new("/up/real"))?, root.join("real"));
        assert_eq!(join(&root, Path::new("/etc/passwd"))?, root.join("usr/etc/passwd"), "never the host's /usr/etc");
        assert_eq!(join(&root, Path::new("/../../x"))?, root.join("x"));
        assert_eq!(join(&root, Path::new("/real/new/dir"))?, root.join("real/new/dir"));
        assert_eq!(join(&root, Path::new("/loop")).map_err(|e| e.raw_os_error()), Err(Some(libc::ELOOP)));
        Ok(())
    }
}
