//! In-memory layer tarballs for tests: any entry type, any name (including the malicious ones the
//! `tar` crate's own builder refuses), plus gzip.

use std::io::Write;

use tar::{EntryType, Header};

/// One tar entry to write.
#[derive(Debug, Clone)]
pub struct TarEntry {
    path: String,
    kind: EntryType,
    data: Vec<u8>,
    link: String,
    mode: u32,
    uid: u64,
    gid: u64,
    mtime: u64,
}

impl TarEntry {
    fn new(path: &str, kind: EntryType, mode: u32) -> TarEntry {
        TarEntry { path: path.into(), kind, data: Vec::new(), link: String::new(), mode, uid: 0, gid: 0, mtime: 1 }
    }

    pub fn dir(path: &str, mode: u32) -> TarEntry {
        TarEntry::new(path, EntryType::Directory, mode)
    }

    pub fn file(path: &str, data: &[u8], mode: u32) -> TarEntry {
        TarEntry { data: data.to_vec(), ..TarEntry::new(path, EntryType::Regular, mode) }
    }

    /// A regular file whose name is written verbatim (`../x`, `/x`).
    pub fn raw_file(path: &str, data: &[u8]) -> TarEntry {
        TarEntry::file(path, data, 0o644)
    }

    pub fn symlink(path: &str, target: &str) -> TarEntry {
        TarEntry { link: target.into(), ..TarEntry::new(path, EntryType::Symlink, 0o777) }
    }

    pub fn hardlink(path: &str, target: &str) -> TarEntry {
        TarEntry { link: target.into(), ..TarEntry::new(path, EntryType::Link, 0o644) }
    }

    pub fn owner(mut self, uid: u64, gid: u64) -> TarEntry {
        (self.uid, self.gid) = (uid, gid);
        self
    }

    pub fn mtime(mut self, mtime: u64) -> TarEntry {
        self.mtime = mtime;
        self
    }
}

/// Collects entries and writes them as one uncompressed tar.
#[derive(Debug, Clone, Default)]
pub struct Builder {
    entries: Vec<TarEntry>,
}

impl Builder {
    pub fn entry(mut self, entry: TarEntry) -> Builder {
        self.entries.push(entry);
        self
    }

    pub fn dir(self, path: &str, mode: u32) -> Builder {
        self.entry(TarEntry::dir(path, mode))
    }

    pub fn file(self, path: &str, data: &[u8], mode: u32) -> Builder {
        self.entry(TarEntry::file(path, data, mode))
    }

    pub fn symlink(self, path: &str, target: &str) -> Builder {
        self.entry(TarEntry::symlink(path, target))
    }

    /// The tar bytes. Names longer than 100 bytes use GNU long-name records.
    pub fn tar(&self) -> Vec<u8> {
        let mut builder = tar::Builder::new(Vec::new());
        for e in &self.entries {
            let mut header = Header::new_gnu();
            header.set_entry_type(e.kind);
            header.set_mode(e.mode);
            header.set_uid(e.uid);
            header.set_gid(e.gid);
            header.set_mtime(e.mtime);
            header.set_size(e.data.len() as u64);
            header.set_link_name_literal(e.link.as_bytes()).expect("link names in tests fit 100 bytes");
            if e.path.len() <= 100 {
                let name = &mut header.as_old_mut().name;
                name[..e.path.len()].copy_from_slice(e.path.as_bytes());
                header.set_cksum();
                builder.append(&header, &e.data[..]).expect("write to a Vec");
            } else {
                builder.append_data(&mut header, &e.path, &e.data[..]).expect("long test path is valid");
            }
        }
        builder.into_inner().expect("write to a Vec")
    }
}

pub fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    encoder.write_all(bytes).expect("write to a Vec");
    encoder.finish().expect("write to a Vec")
}

pub fn zstd(bytes: &[u8]) -> Vec<u8> {
    zstd::encode_all(bytes, 3).expect("compress in memory")
}
