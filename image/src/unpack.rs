//! Unpacks one layer tar (plain, gzip or zstd) into a directory that overlayfs can use as a
//! lowerdir: OCI whiteouts become overlayfs whiteouts (`.wh.x` → char device 0:0 `x`,
//! `.wh..wh..opq` → `trusted.overlay.opaque=y`), ownership, modes, mtimes, links and xattrs are
//! kept, and no entry may land outside the directory (`..`, absolute paths, writes through symlinks).

use std::fs::{self, OpenOptions};
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::{lchown, symlink, OpenOptionsExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use nix::errno::Errno;
use nix::sys::stat::{makedev, mknod, utimensat, Mode, SFlag, UtimensatFlags};
use nix::sys::time::TimeSpec;
use tar::EntryType;

use crate::digest::HashingReader;
use crate::error::{Error, IoContext, Result};
use crate::manifest::Compression;

const WHITEOUT_PREFIX: &str = ".wh.";
const OPAQUE_WHITEOUT: &str = ".wh..wh..opq";
pub const OPAQUE_XATTR: &str = "trusted.overlay.opaque";

/// What unpacking produced: the digest of the uncompressed tar (the layer's diff ID) and the
/// bytes of regular files written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unpacked {
    pub diff_id: String,
    pub size: u64,
}

/// Unpacks the layer stream `reader` into the existing, empty directory `dest`.
pub fn unpack_layer(reader: impl Read, dest: &Path) -> Result<Unpacked> {
    let mut buffered = BufReader::with_capacity(256 * 1024, reader);
    let head = buffered.fill_buf().ctx("read layer from", dest)?;
    let decompressed: Box<dyn Read> = match Compression::sniff(head) {
        Compression::Gzip => Box::new(flate2::bufread::MultiGzDecoder::new(buffered)),
        Compression::Zstd => Box::new(zstd::stream::read::Decoder::with_buffer(buffered).ctx("start zstd for", dest)?),
        Compression::None => Box::new(buffered),
    };
    let mut hashing = HashingReader::new(decompressed);
    let mut dirs = Vec::new();
    let mut size = 0;
    {
        let mut archive = tar::Archive::new(&mut hashing);
        for entry in archive.entries().map_err(|e| bad_tar(dest, e))? {
            let mut entry = entry.map_err(|e| bad_tar(dest, e))?;
            if let Some(dir) = unpack_entry(&mut entry, dest, &mut size)? {
                dirs.push(dir);
            }
        }
    }
    let diff_id = hashing.finish().map_err(|e| bad_tar(dest, e))?;
    // Directory mtimes last: creating their children changed them. Deepest first.
    for dir in dirs.iter().rev() {
        set_metadata(&dir.path, &dir.meta, false)?;
    }
    Ok(Unpacked { diff_id, size })
}

fn bad_tar(dest: &Path, e: io::Error) -> Error {
    Error::invalid("layer tar", format!("reading it into {}: {e}", dest.display()))
}

#[derive(Debug, Clone)]
struct Meta {
    mode: u32,
    uid: u64,
    gid: u64,
    mtime: u64,
}

struct PendingDir {
    path: PathBuf,
    meta: Meta,
}

fn unpack_entry<R: Read>(entry: &mut tar::Entry<'_, R>, dest: &Path, size: &mut u64) -> Result<Option<PendingDir>> {
    let raw = entry.path().map_err(|e| bad_tar(dest, e))?.into_owned();
    let header = entry.header();
    let meta = Meta {
        mode: header.mode().unwrap_or(0o644),
        uid: header.uid().unwrap_or(0),
        gid: header.gid().unwrap_or(0),
        mtime: header.mtime().unwrap_or(0),
    };
    let kind = header.entry_type();
    let Some(rel) = clean_relative(&raw)? else {
        // The layer root itself (`./`).
        return Ok(kind.is_dir().then(|| PendingDir { path: dest.to_path_buf(), meta }));
    };
    let name = rel.file_name().and_then(|n| n.to_str()).unwrap_or_default().to_string();
    let parent_rel = rel.parent().unwrap_or(Path::new(""));
    if name == OPAQUE_WHITEOUT {
        let dir = ensure_dirs(dest, parent_rel, true)?;
        xattr::set(&dir, OPAQUE_XATTR, b"y").ctx("set trusted.overlay.opaque on", &dir)?;
        return Ok(None);
    }
    if let Some(hidden) = name.strip_prefix(WHITEOUT_PREFIX) {
        if hidden.starts_with(WHITEOUT_PREFIX) {
            return Ok(None); // aufs metadata (.wh..wh.plnk and friends): meaningless here
        }
        let parent = ensure_dirs(dest, parent_rel, true)?;
        let target = parent.join(hidden);
        clear(&target, false)?;
        mknod(&target, SFlag::S_IFCHR, Mode::empty(), makedev(0, 0))
            .map_err(|e| Error::io("create whiteout device", &target, e.into()))?;
        set_metadata(&target, &Meta { mode: 0, ..meta }, true)?;
        return Ok(None);
    }
    let parent = ensure_dirs(dest, parent_rel, true)?;
    let target = parent.join(&name);
    match kind {
        EntryType::Directory => {
            clear(&target, true)?;
            if !target.is_dir() {
                fs::create_dir(&target).ctx("create directory", &target)?;
            }
            apply_xattrs(entry, &target)?;
            return Ok(Some(PendingDir { path: target, meta }));
        }
        EntryType::Regular | EntryType::Continuous | EntryType::GNUSparse => {
            clear(&target, false)?;
            let mut file =
                OpenOptions::new().write(true).create_new(true).mode(0o600).open(&target).ctx("create", &target)?;
            *size += io::copy(entry, &mut file).map_err(|e| bad_tar(dest, e))?;
        }
        EntryType::Symlink => {
            let link = entry.link_name().map_err(|e| bad_tar(dest, e))?.ok_or_else(|| missing_link(&raw))?;
            clear(&target, false)?;
            symlink(&link, &target).ctx("create symlink", &target)?;
            apply_xattrs(entry, &target)?;
            set_metadata(&target, &meta, true)?;
            return Ok(None);
        }
        EntryType::Link => {
            let link = entry.link_name().map_err(|e| bad_tar(dest, e))?.ok_or_else(|| missing_link(&raw))?;
            let link_rel = clean_relative(&link)?.ok_or_else(|| escape(&link))?;
            let source = ensure_dirs(dest, link_rel.parent().unwrap_or(Path::new("")), false)?
                .join(link_rel.file_name().ok_or_else(|| escape(&link))?);
            clear(&target, false)?;
            // link(2) does not follow a symlink source, so this cannot reach outside the layer.
            fs::hard_link(&source, &target).ctx("create hard link", &target)?;
            return Ok(None);
        }
        EntryType::Char | EntryType::Block | EntryType::Fifo => {
            let flag = match kind {
                EntryType::Char => SFlag::S_IFCHR,
                EntryType::Block => SFlag::S_IFBLK,
                _ => SFlag::S_IFIFO,
            };
            let major = header.device_major().ok().flatten().unwrap_or(0);
            let minor = header.device_minor().ok().flatten().unwrap_or(0);
            clear(&target, false)?;
            mknod(&target, flag, Mode::from_bits_truncate(0o600), makedev(major.into(), minor.into()))
                .map_err(|e| Error::io("create device node", &target, e.into()))?;
        }
        // PAX/GNU headers are consumed by the tar reader; anything else is not a file.
        _ => return Ok(None),
    }
    apply_xattrs(entry, &target)?;
    set_metadata(&target, &meta, false)?;
    Ok(None)
}

fn missing_link(raw: &Path) -> Error {
    Error::invalid("layer tar", format!("link entry {} has no target", raw.display()))
}

fn escape(raw: &Path) -> Error {
    Error::invalid("layer tar", format!("entry {} escapes the layer directory", raw.display()))
}

/// The entry's path relative to the layer root; `None` for the root itself. Rejects `..` and
/// absolute paths rather than silently rewriting them.
pub(crate) fn clean_relative(raw: &Path) -> Result<Option<PathBuf>> {
    let mut out = PathBuf::new();
    for component in raw.components() {
        match component {
            Component::Normal(c) => out.push(c),
            Component::CurDir => {}
            Component::ParentDir | Component::RootDir | Component::Prefix(_) => return Err(escape(raw)),
        }
    }
    Ok((!out.as_os_str().is_empty()).then_some(out))
}

/// Walks `rel` under `dest` component by component, refusing symlinks (a write through one could
/// land anywhere) and, when `create`, making missing directories.
pub(crate) fn ensure_dirs(dest: &Path, rel: &Path, create: bool) -> Result<PathBuf> {
    let mut path = dest.to_path_buf();
    for component in rel.components() {
        path.push(component);
        match fs::symlink_metadata(&path) {
            Ok(m) if m.file_type().is_symlink() => {
                return Err(Error::invalid(
                    "layer tar",
                    format!("entry under {} would be written through a symlink", path.display()),
                ))
            }
            Ok(m) if m.is_dir() => {}
            Ok(_) => return Err(Error::invalid("layer tar", format!("{} is not a directory", path.display()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound && create => {
                fs::create_dir(&path).ctx("create directory", &path)?;
                fs::set_permissions(&path, fs::Permissions::from_mode(0o755)).ctx("chmod", &path)?;
            }
            Err(e) => return Err(Error::io("inspect", &path, e)),
        }
    }
    Ok(path)
}

/// Removes whatever is at `path` (a later entry replaces an earlier one), except that a directory
/// stays when `keep_dir` (a repeated directory entry only updates metadata).
pub(crate) fn clear(path: &Path, keep_dir: bool) -> Result<()> {
    match fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() && keep_dir => Ok(()),
        Ok(m) if m.is_dir() => fs::remove_dir_all(path).ctx("remove", path),
        Ok(_) => fs::remove_file(path).ctx("remove", path),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(Error::io("inspect", path, e)),
    }
}

fn set_metadata(path: &Path, meta: &Meta, is_symlink: bool) -> Result<()> {
    let (uid, gid) = (u32::try_from(meta.uid).ok(), u32::try_from(meta.gid).ok());
    match lchown(path, uid, gid) {
        // Unprivileged (tests, rootless): keep our own ownership rather than fail.
        Err(e) if e.kind() == io::ErrorKind::PermissionDenied => {}
        other => other.ctx("chown", path)?,
    }
    if !is_symlink {
        // After chown, which clears setuid/setgid.
        fs::set_permissions(path, fs::Permissions::from_mode(meta.mode & 0o7777)).ctx("chmod", path)?;
    }
    let mtime = TimeSpec::new(i64::try_from(meta.mtime).unwrap_or(i64::MAX), 0);
    utimensat(None, path, &mtime, &mtime, UtimensatFlags::NoFollowSymlink)
        .map_err(|e| Error::io("set mtime of", path, e.into()))
}

/// PAX `SCHILY.xattr.*` records (file capabilities and the like).
fn apply_xattrs<R: Read>(entry: &mut tar::Entry<'_, R>, path: &Path) -> Result<()> {
    let Ok(Some(extensions)) = entry.pax_extensions() else { return Ok(()) };
    for ext in extensions.flatten() {
        let Some(name) = ext.key().ok().and_then(|k| k.strip_prefix("SCHILY.xattr.")) else { continue };
        if name.starts_with("trusted.overlay.") {
            continue; // only whiteout conversion may produce overlay metadata
        }
        match xattr::set(path, name, ext.value_bytes()) {
            // Unprivileged, or a filesystem without xattrs: the file is still usable.
            Err(e) if [Errno::EPERM, Errno::ENOTSUP].iter().any(|n| e.raw_os_error() == Some(*n as i32)) => {}
            other => other.ctx("set xattr on", path)?,
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::{FileTypeExt, MetadataExt};

    use super::*;
    use crate::testing::tarball::{gzip, Builder, TarEntry};

    fn unpack(bytes: &[u8]) -> (tempfile::TempDir, Result<Unpacked>) {
        let dir = tempfile::tempdir().expect("tempdir");
        let result = unpack_layer(bytes, dir.path());
        (dir, result)
    }

    #[test]
    fn converts_whiteouts_to_overlayfs_form() {
        let tar = Builder::default()
            .dir("etc", 0o755)
            .file("etc/.wh.passwd", b"", 0o644)
            .dir("var/cache", 0o755)
            .file("var/cache/.wh..wh..opq", b"", 0o644)
            .file("var/cache/new", b"n", 0o644)
            .file(".wh..wh.plnk", b"", 0o644)
            .tar();
        let (dir, result) = unpack(&tar);
        result.expect("unpack");
        let whiteout = fs::symlink_metadata(dir.path().join("etc/passwd")).expect("whiteout exists");
        assert!(whiteout.file_type().is_char_device(), "whiteout must be a char device");
        assert_eq!(whiteout.rdev(), 0, "whiteout must be device 0:0");
        assert!(!dir.path().join("etc/.wh.passwd").exists());
        let opaque = xattr::get(dir.path().join("var/cache"), OPAQUE_XATTR).expect("read xattr");
        assert_eq!(opaque.as_deref(), Some(&b"y"[..]));
        assert!(!dir.path().join("var/cache/.wh..wh..opq").exists());
        assert!(dir.path().join("var/cache/new").exists());
        assert!(!dir.path().join(".wh..wh.plnk").exists());
    }

    #[test]
    fn keeps_modes_owners_links_and_mtimes() {
        let tar = Builder::default()
            .entry(TarEntry::dir("bin", 0o755))
            .entry(TarEntry::file("bin/tool", b"#!", 0o4755).owner(1000, 2000).mtime(1_600_000_000))
            .entry(TarEntry::symlink("bin/link", "tool"))
            .entry(TarEntry::hardlink("bin/hard", "bin/tool"))
            .entry(TarEntry::dir("data", 0o700).owner(5, 6).mtime(1_500_000_000))
            .entry(TarEntry::file("data/x", b"x", 0o600))
            .tar();
        let (dir, result) = unpack(&tar);
        let unpacked = result.expect("unpack");
        assert_eq!(unpacked.size, 3);
        let tool = fs::metadata(dir.path().join("bin/tool")).expect("tool");
        assert_eq!((tool.mode() & 0o7777, tool.uid(), tool.gid()), (0o4755, 1000, 2000));
        assert_eq!(tool.mtime(), 1_600_000_000);
        assert_eq!(fs::read_link(dir.path().join("bin/link")).expect("symlink"), Path::new("tool"));
        assert_eq!(fs::metadata(dir.path().join("bin/hard")).expect("hardlink").ino(), tool.ino());
        let data = fs::metadata(dir.path().join("data")).expect("data");
        assert_eq!((data.mode() & 0o7777, data.uid(), data.gid(), data.mtime()), (0o700, 5, 6, 1_500_000_000));
    }

    #[test]
    fn diff_id_is_the_digest_of_the_uncompressed_tar() {
        let tar = Builder::default().file("a", b"hello", 0o644).tar();
        let want = crate::digest::sha256(&tar);
        let gz = gzip(&tar);
        let zst = zstd::encode_all(&tar[..], 3).expect("zstd");
        for bytes in [&tar, &gz, &zst] {
            let (dir, result) = unpack(bytes);
            assert_eq!(result.expect("unpack").diff_id, want);
            assert_eq!(fs::read(dir.path().join("a")).expect("a"), b"hello");
        }
    }

    #[test]
    fn rejects_entries_escaping_the_layer() {
        let cases = [
            Builder::default().entry(TarEntry::raw_file("../evil", b"x")).tar(),
            Builder::default().entry(TarEntry::raw_file("a/../../evil", b"x")).tar(),
            Builder::default().entry(TarEntry::raw_file("/abs", b"x")).tar(),
            Builder::default().entry(TarEntry::symlink("up", "..")).entry(TarEntry::raw_file("up/evil", b"x")).tar(),
            Builder::default().entry(TarEntry::symlink("etc", "/etc")).file("etc/evil", b"x", 0o644).tar(),
            Builder::default().entry(TarEntry::hardlink("h", "../outside")).tar(),
        ];
        for (i, tar) in cases.iter().enumerate() {
            let outer = tempfile::tempdir().expect("tempdir");
            let dest = outer.path().join("layer");
            fs::create_dir(&dest).expect("mkdir");
            let result = unpack_layer(&tar[..], &dest);
            assert!(matches!(result, Err(Error::Invalid { .. })), "case {i}: {result:?}");
            assert!(!outer.path().join("evil").exists(), "case {i} wrote outside");
        }
        assert!(!Path::new("/etc/evil").exists());
    }

    #[test]
    fn later_entries_replace_earlier_ones() {
        let tar = Builder::default()
            .file("f", b"old", 0o644)
            .entry(TarEntry::symlink("f", "/etc/shadow"))
            .file("f", b"new", 0o644)
            .tar();
        let (dir, result) = unpack(&tar);
        result.expect("unpack");
        let meta = fs::symlink_metadata(dir.path().join("f")).expect("f");
        assert!(meta.is_file());
        assert_eq!(fs::read(dir.path().join("f")).expect("f"), b"new");
    }
}
