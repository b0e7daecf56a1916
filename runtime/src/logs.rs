//! CRI container log format: `<RFC3339Nano> <stdout|stderr> <F|P> <line>`, one record per line;
//! `P` marks a partial line (split because it was too long or the stream ended mid-line).

use std::io::Write;

/// Lines longer than this are split into partial records (as containerd does at 16 KiB).
pub const MAX_LINE: usize = 16 * 1024;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }
}

/// Splits one stream's bytes into CRI records, buffering an unfinished line between reads.
#[derive(Debug)]
pub struct LineWriter {
    stream: Stream,
    pending: Vec<u8>,
    /// Write what is left of a line at the end of each read as a partial record (a terminal's
    /// prompt must show up before its newline does).
    interactive: bool,
}

impl LineWriter {
    pub fn new(stream: Stream) -> Self {
        LineWriter { stream, pending: Vec::new(), interactive: false }
    }

    /// For a terminal: no line is held back waiting for its end.
    pub fn interactive(stream: Stream) -> Self {
        LineWriter { stream, pending: Vec::new(), interactive: true }
    }

    /// Pure: appends `data` and returns complete records (without timestamps) as (tag, line).
    pub fn push(&mut self, data: &[u8]) -> Vec<(char, Vec<u8>)> {
        self.pending.extend_from_slice(data);
        let mut out = Vec::new();
        while let Some(pos) = self.pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.pending.drain(..=pos).take(pos).collect();
            out.push(('F', line));
        }
        while self.pending.len() >= MAX_LINE {
            out.push(('P', self.pending.drain(..MAX_LINE).collect()));
        }
        if self.interactive && !self.pending.is_empty() {
            out.push(('P', std::mem::take(&mut self.pending)));
        }
        out
    }

    /// At end of stream: whatever is left becomes a partial record.
    pub fn finish(&mut self) -> Option<(char, Vec<u8>)> {
        (!self.pending.is_empty()).then(|| ('P', std::mem::take(&mut self.pending)))
    }

    pub fn write_records(&self, out: &mut impl Write, records: &[(char, Vec<u8>)]) -> std::io::Result<()> {
        if records.is_empty() {
            return Ok(());
        }
        let ts = jiff::Timestamp::now();
        let mut buf = Vec::new();
        for (tag, line) in records {
            write!(buf, "{ts:.9} {} {tag} ", self.stream.as_str())?;
            buf.extend_from_slice(line);
            buf.push(b'\n');
        }
        out.write_all(&buf)
    }
}

/// One parsed record of a CRI log file.
#[derive(Debug, PartialEq, Eq)]
pub struct Record<'a> {
    pub time: &'a str,
    pub stream: &'a str,
    pub partial: bool,
    pub line: &'a str,
}

/// Pure: parses one CRI log line; `None` if malformed.
pub fn parse(line: &str) -> Option<Record<'_>> {
    let mut parts = line.splitn(4, ' ');
    let time = parts.next()?;
    let stream = parts.next()?;
    let tag = parts.next()?;
    let line = parts.next().unwrap_or("");
    if !matches!(stream, "stdout" | "stderr") || !matches!(tag, "F" | "P") {
        return None;
    }
    time.parse::<jiff::Timestamp>().ok()?;
    Some(Record { time, stream, partial: tag == "P", line })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn complete_lines_are_full_records_and_the_rest_waits() {
        let mut w = LineWriter::new(Stream::Stdout);
        assert_eq!(w.push(b"hello\nwor"), vec![('F', b"hello".to_vec())]);
        assert_eq!(w.push(b"ld\n"), vec![('F', b"world".to_vec())]);
        assert_eq!(w.push(b"tail"), vec![]);
        assert_eq!(w.finish(), Some(('P', b"tail".to_vec())));
        assert_eq!(w.finish(), None);
    }

    #[test]
    fn an_interactive_writer_holds_nothing_back() {
        let mut w = LineWriter::interactive(Stream::Stdout);
        assert_eq!(w.push(b"/ # "), vec![('P', b"/ # ".to_vec())]);
        assert_eq!(
            w.push(b"ls\r\nbin  dev\r\n/ # "),
            vec![('F', b"ls\r".to_vec()), ('F', b"bin  dev\r".to_vec()), ('P', b"/ # ".to_vec())]
        );
        assert_eq!(w.finish(), None);
    }

    #[test]
    fn long_lines_are_split_into_partial_records() {
        let mut w = LineWriter::new(Stream::Stderr);
        let recs = w.push(&vec![b'x'; MAX_LINE + 10]);
        assert_eq!(recs.len(), 1);
        assert_eq!(recs[0].0, 'P');
        assert_eq!(w.push(b"\n"), vec![('F', vec![b'x'; 10])]);
    }

    #[test]
    fn written_records_parse_back() {
        let w = LineWriter::new(Stream::Stderr);
        let mut out = Vec::new();
        w.write_records(&mut out, &[('F', b"oops: a b".to_vec())]).expect("vec write");
        let text = String::from_utf8(out).expect("utf8");
        let rec = parse(text.trim_end()).expect("parses");
        assert_eq!((rec.stream, rec.partial, rec.line), ("stderr", false, "oops: a b"));
        assert!(rec.time.contains('T') && rec.time.ends_with('Z'), "{}", rec.time);
        assert!(parse("garbage").is_none());
    }
}
