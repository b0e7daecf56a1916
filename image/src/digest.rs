//! Content digests: `sha256:<hex>` of bytes and of streams, and the check that content matches the
//! digest that names it.

use std::io::{self, Read};

use sha2::{Digest as _, Sha256};

use crate::error::{Error, Result};

/// `sha256:<hex>` of `bytes`.
pub fn sha256(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

/// The 64 hex characters after `sha256:`; callers validate digests before they reach the disk.
pub fn hex(digest: &str) -> &str {
    digest.strip_prefix("sha256:").unwrap_or(digest)
}

/// Fails with [`Error::DigestMismatch`] unless `actual == expected`.
pub fn verify(what: impl FnOnce() -> String, expected: &str, actual: &str) -> Result<()> {
    if expected == actual {
        return Ok(());
    }
    Err(Error::DigestMismatch { what: what(), expected: expected.to_string(), actual: actual.to_string() })
}

/// An incremental sha256 that also counts bytes.
#[derive(Default, Clone)]
pub struct Hasher {
    inner: Sha256,
    len: u64,
}

impl Hasher {
    pub fn update(&mut self, bytes: &[u8]) {
        self.inner.update(bytes);
        self.len += bytes.len() as u64;
    }

    pub fn bytes(&self) -> u64 {
        self.len
    }

    pub fn finish(self) -> String {
        format!("sha256:{:x}", self.inner.finalize())
    }
}

/// A reader that hashes everything read through it.
pub struct HashingReader<R> {
    inner: R,
    hasher: Hasher,
}

impl<R: Read> HashingReader<R> {
    pub fn new(inner: R) -> Self {
        HashingReader { inner, hasher: Hasher::default() }
    }

    /// Drains what the consumer left unread (tar padding) and returns the digest of the whole stream.
    pub fn finish(mut self) -> io::Result<String> {
        io::copy(&mut self, &mut io::sink())?;
        Ok(self.hasher.finish())
    }
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_the_empty_string_like_sha256sum() {
        assert_eq!(sha256(b""), "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    }

    #[test]
    fn streaming_hash_equals_one_shot_hash_including_unread_tail() {
        let data = b"hello world, some layer bytes".to_vec();
        let mut r = HashingReader::new(&data[..]);
        let mut first = [0u8; 5];
        r.read_exact(&mut first).expect("read");
        assert_eq!(r.finish().expect("drain"), sha256(&data));
    }

    #[test]
    fn detects_digest_mismatch() {
        let err = verify(|| "blob x".into(), &sha256(b"a"), &sha256(b"b")).expect_err("must mismatch");
        assert!(matches!(err, Error::DigestMismatch { .. }));
        assert!(err.to_string().contains("blob x has digest sha256:"), "{err}");
        assert!(verify(|| unreachable!(), &sha256(b"a"), &sha256(b"a")).is_ok());
    }
}
