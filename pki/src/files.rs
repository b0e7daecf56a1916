//! Files that hold keys (and kubeconfigs that embed them): written whole, 0600 from the first
//! byte (a temporary file in the same directory, renamed over the old one), in 0700 directories.

use crate::{Error, Result};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> Error + '_ {
    move |source| Error::Io { path: path.display().to_string(), source }
}

/// Write `contents` to `path` with `mode`, atomically; parent directories are made 0700.
pub fn write(path: &Path, contents: &[u8], mode: u32) -> Result<()> {
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        if !dir.exists() {
            std::fs::DirBuilder::new().recursive(true).mode(0o700).create(dir).map_err(io(dir))?;
        }
    }
    let name = path.file_name().map(|n| n.to_string_lossy().to_string()).unwrap_or_default();
    let tmp = path.with_file_name(format!(".{name}.tmp{}", std::process::id()));
    let result = (|| {
        let mut f = std::fs::OpenOptions::new().write(true).create(true).truncate(true).mode(mode).open(&tmp)?;
        // A leftover temporary file keeps its old mode through open: set it again.
        f.set_permissions(std::fs::Permissions::from_mode(mode))?;
        f.write_all(contents)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    result.map_err(io(path))
}

/// A key, or anything embedding one: 0600.
pub fn write_private(path: &Path, contents: &str) -> Result<()> {
    write(path, contents.as_bytes(), 0o600)
}

/// A certificate: 0644.
pub fn write_public(path: &Path, contents: &str) -> Result<()> {
    write(path, contents.as_bytes(), 0o644)
}

pub fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).map_err(io(path))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn private_files_are_0600_and_replace_what_was_there() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("pki/sub/ca.key");
        write_private(&path, "one").expect("write");
        write_private(&path, "two").expect("rewrite");
        assert_eq!(read(&path).expect("read"), "two");
        let mode = std::fs::metadata(&path).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let dir_mode = std::fs::metadata(dir.path().join("pki")).expect("stat").permissions().mode() & 0o777;
        assert_eq!(dir_mode, 0o700);
        write_public(&dir.path().join("ca.crt"), "cert").expect("write");
        let mode = std::fs::metadata(dir.path().join("ca.crt")).expect("stat").permissions().mode() & 0o777;
        assert_eq!(mode, 0o644);
        assert_eq!(std::fs::read_dir(dir.path().join("pki/sub")).expect("ls").count(), 1, "no temporary file left");
    }
}
