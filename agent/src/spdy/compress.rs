//! SPDY/3 header compression: one zlib stream per direction for the whole connection, primed
//! with the spec's dictionary, each header block ending at a sync flush.

use flate2::{Compress, Compression, Decompress, FlushCompress, FlushDecompress, Status};

use super::{Error, Result};

/// SPDY/3's zlib dictionary (draft 3, §2.6.10.1), 1423 bytes.
pub const DICTIONARY: &[u8] = include_bytes!("dictionary.bin");

/// Header blocks larger than this once inflated are refused (a zlib bomb is not a header).
const MAX_INFLATED: usize = 1 << 20;

pub struct Deflater(Compress);

impl Deflater {
    pub fn new() -> Self {
        let mut c = Compress::new(Compression::default(), true);
        c.set_dictionary(DICTIONARY).expect("a fresh zlib stream takes a dictionary");
        Deflater(c)
    }

    /// Compresses one header block, ending it at a sync flush so the peer can read it whole.
    pub fn deflate(&mut self, block: &[u8]) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(block.len() / 2 + 64);
        let start_in = self.0.total_in();
        loop {
            let consumed = (self.0.total_in() - start_in) as usize;
            if out.capacity() - out.len() < 64 {
                out.reserve(256);
            }
            self.0
                .compress_vec(&block[consumed..], &mut out, FlushCompress::Sync)
                .map_err(|e| Error::Compression(e.to_string()))?;
            let done = (self.0.total_in() - start_in) as usize == block.len();
            // A sync flush is complete when zlib left spare room in the output.
            if done && out.len() < out.capacity() {
                return Ok(out);
            }
        }
    }
}

impl Default for Deflater {
    fn default() -> Self {
        Self::new()
    }
}

pub struct Inflater(Decompress);

impl Inflater {
    pub fn new() -> Self {
        Inflater(Decompress::new(true))
    }

    /// Inflates one header block; the first one asks for the dictionary, which is given.
    pub fn inflate(&mut self, block: &[u8]) -> Result<Vec<u8>> {
        let mut out = Vec::with_capacity(block.len() * 4 + 64);
        let start_in = self.0.total_in();
        loop {
            let consumed = (self.0.total_in() - start_in) as usize;
            let before = (self.0.total_in(), out.len());
            if out.capacity() - out.len() < 256 {
                out.reserve(out.capacity().max(256));
            }
            match self.0.decompress_vec(&block[consumed..], &mut out, FlushDecompress::Sync) {
                Ok(Status::StreamEnd) => return Ok(out),
                Ok(_) => {}
                Err(e) => match e.needs_dictionary() {
                    Some(_) => {
                        self.0.set_dictionary(DICTIONARY).map_err(|e| Error::Compression(e.to_string()))?;
                    }
                    None => return Err(Error::Compression(e.to_string())),
                },
            }
            if out.len() > MAX_INFLATED {
                return Err(Error::Compression(format!("header block inflates past {MAX_INFLATED} bytes")));
            }
            let consumed = (self.0.total_in() - start_in) as usize;
            if consumed == block.len() && out.len() < out.capacity() {
                return Ok(out);
            }
            if before == (self.0.total_in(), out.len()) {
                return Err(Error::Compression("the header block is cut short".into()));
            }
        }
    }
}

impl Default for Inflater {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_dictionary_is_spdy3s() {
        assert_eq!(DICTIONARY.len(), 1423);
        assert!(DICTIONARY.starts_with(b"\0\0\0\x07options\0\0\0\x04head"));
        assert!(DICTIONARY.ends_with(b"utf-,*,enq=0."));
    }

    #[test]
    fn header_blocks_round_trip_through_one_shared_stream() {
        let (mut d, mut i) = (Deflater::new(), Inflater::new());
        let first = d.deflate(b"\0\0\0\x01\0\0\0\x0astreamtype\0\0\0\x05error").expect("deflates");
        // The zlib header says a dictionary is in use (FDICT) and which (its Adler-32).
        assert_eq!(first[1] & 0x20, 0x20);
        assert_eq!(&first[2..6], &0xe3c6_a7c2u32.to_be_bytes());
        assert_eq!(i.inflate(&first).expect("inflates"), b"\0\0\0\x01\0\0\0\x0astreamtype\0\0\0\x05error");
        let big: Vec<u8> = (0..20_000u32).flat_map(|n| n.to_be_bytes()).collect();
        for block in [&b"again"[..], &big, b""] {
            let z = d.deflate(block).expect("deflates");
            assert_eq!(i.inflate(&z).expect("inflates"), block);
        }
    }

    #[test]
    fn garbage_is_an_error() {
        assert!(Inflater::new().inflate(b"\x78\x01nonsense that is not deflate").is_err());
    }
}
