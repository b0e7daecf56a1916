//! Reaches nf_tables: transactions go straight to the kernel as netlink batches (`netlink`)
//! or, when asked, as text to `nft -f -`; listing what our table holds and deleting it use the
//! `nft` binary. Either runs in this network namespace or in a named one (tests, the bench).

use crate::nftables::netlink::{self, Netlink};
use crate::nftables::render::TABLE;
use std::io::{self, BufRead, BufReader, Read, Write};
use std::process::{Command, Stdio};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to run nft")]
    Spawn(#[source] io::Error),
    #[error("nft {args} failed ({status}): {stderr}")]
    Failed { args: String, status: String, stderr: String },
    #[error("failed to write the transaction to nft")]
    Write(#[source] io::Error),
    #[error(transparent)]
    Netlink(#[from] netlink::Error),
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl Error {
    /// nft failed with EBUSY: the kernel still saw a reference to an object being deleted.
    pub fn is_busy(&self) -> bool {
        match self {
            Error::Failed { stderr, .. } => stderr.contains("Device or resource busy"),
            Error::Netlink(e) => e.is_busy(),
            _ => false,
        }
    }
}

/// nft's own error text names the line and echoes it (chain names carry the service); keep the
/// first few of a long list.
const MAX_STDERR: usize = 4096;

/// How to reach nf_tables.
#[derive(Clone, Debug, Default)]
pub struct Nft {
    prefix: Vec<String>,
    /// Transactions as netlink batches; `None`: as text to `nft -f -`.
    netlink: Option<Netlink>,
}

/// The chains and sets our table holds now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Objects {
    pub chains: Vec<String>,
    pub sets: Vec<String>,
}

impl Nft {
    /// This process's network namespace: netlink, and `nft` on PATH.
    pub fn host() -> Self {
        Self { prefix: Vec::new(), netlink: Some(Netlink::new(None)) }
    }

    /// The network namespace `name` (under `/run/netns`, as `ip netns add` makes it).
    pub fn in_netns(name: &str) -> Self {
        Self {
            prefix: vec!["ip".into(), "netns".into(), "exec".into(), name.into()],
            netlink: Some(Netlink::new(Some(format!("/run/netns/{name}").into()))),
        }
    }

    /// Only the `nft` binary, every command run as `<prefix...> nft <args...>` (e.g. a wrapper
    /// script in tests): transactions as text.
    pub fn with_prefix(prefix: Vec<String>) -> Self {
        Self { prefix, netlink: None }
    }

    /// Transactions as text to `nft -f -` rather than netlink batches (`--nftables-writer nft`).
    pub fn through_nft(mut self) -> Self {
        self.netlink = None;
        self
    }

    /// Where netlink batches go, if transactions are written that way.
    pub fn netlink(&self) -> Option<&Netlink> {
        self.netlink.as_ref()
    }

    fn command(&self, args: &[&str]) -> Command {
        let mut c = match self.prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg("nft");
                c
            }
            None => Command::new("nft"),
        };
        c.args(args);
        c
    }

    /// Runs `nft <args> -f -` with what `write` produces on its stdin; returns the bytes written.
    /// nft reads the whole transaction before committing it, so a failure changes nothing.
    pub fn run_with<F>(&self, args: &[&str], write: F) -> Result<usize>
    where
        F: FnOnce(&mut dyn Write) -> io::Result<()>,
    {
        let mut all = args.to_vec();
        all.extend(["-f", "-"]);
        let mut child = self
            .command(&all)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(Error::Spawn)?;
        // Read stderr while writing, or a long error list could block both sides.
        let mut stderr = child.stderr.take().expect("stderr is piped");
        let reader = std::thread::spawn(move || {
            let mut text = String::new();
            let _ = stderr.read_to_string(&mut text);
            text
        });
        let stdin = child.stdin.take().expect("stdin is piped");
        let mut counted = Counting { inner: io::BufWriter::with_capacity(256 * 1024, stdin), bytes: 0 };
        let written = write(&mut counted).and_then(|_| counted.flush());
        let bytes = counted.bytes;
        drop(counted);
        let status = child.wait().map_err(Error::Spawn)?;
        let stderr = reader.join().unwrap_or_default();
        if !status.success() {
            let mut stderr = stderr.trim().to_string();
            if stderr.len() > MAX_STDERR {
                let cut = (0..=MAX_STDERR).rev().find(|i| stderr.is_char_boundary(*i)).unwrap_or(0);
                stderr.truncate(cut);
                stderr.push_str(" ...");
            }
            return Err(Error::Failed { args: all.join(" "), status: status.to_string(), stderr });
        }
        written.map_err(Error::Write)?;
        Ok(bytes)
    }

    /// Applies one transaction.
    pub fn apply(&self, payload: &str) -> Result<()> {
        self.run_with(&[], |w| w.write_all(payload.as_bytes())).map(|_| ())
    }

    /// `nft -c`: parses `payload` and has the kernel check it, without committing anything.
    pub fn check(&self, payload: &str) -> Result<()> {
        self.run_with(&["-c"], |w| w.write_all(payload.as_bytes())).map(|_| ())
    }

    fn output(&self, args: &[&str]) -> Result<String> {
        let out = self.command(args).stdin(Stdio::null()).output().map_err(Error::Spawn)?;
        if !out.status.success() {
            return Err(Error::Failed {
                args: args.join(" "),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    }

    /// The chains and sets of our table (none if it does not exist). Streams nft's listing of
    /// the family's chains (names only, no rules) rather than the whole table.
    pub fn objects(&self) -> Result<Objects> {
        Ok(Objects {
            chains: self.names(&["-t", "list", "chains", "ip"], "chain")?,
            sets: self.names(&["-t", "list", "sets", "ip"], "set")?,
        })
    }

    fn names(&self, args: &[&str], kind: &str) -> Result<Vec<String>> {
        let mut child = self
            .command(args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(Error::Spawn)?;
        let stdout = child.stdout.take().expect("stdout is piped");
        let names = parse_names(BufReader::new(stdout), kind);
        let out = child.wait_with_output().map_err(Error::Spawn)?;
        if !out.status.success() {
            return Err(Error::Failed {
                args: args.join(" "),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        Ok(names)
    }

    /// `nft -s list table ip kaji-proxy` (stateless: no counters or set contents), or `None`
    /// when the table does not exist.
    pub fn table(&self) -> Result<Option<String>> {
        if !self.output(&["list", "tables", "ip"])?.lines().any(|l| l.trim() == format!("table ip {TABLE}")) {
            return Ok(None);
        }
        self.output(&["-s", "list", "table", "ip", TABLE]).map(Some)
    }

    /// Deletes our table and everything in it. Returns whether there was one.
    pub fn cleanup(&self) -> Result<bool> {
        let existed = self.table()?.is_some();
        if existed {
            self.apply(&format!("add table ip {TABLE}\ndelete table ip {TABLE}\n"))?;
        }
        Ok(existed)
    }
}

/// Names of `kind` ("chain", "set") inside `table ip kaji-proxy { ... }` of an `nft -t list`.
fn parse_names(listing: impl BufRead, kind: &str) -> Vec<String> {
    let header = format!("table ip {TABLE} {{");
    let mut ours = false;
    let mut names = Vec::new();
    for line in listing.lines().map_while(|l| l.ok()) {
        if line.starts_with("table ") {
            ours = line == header;
        } else if ours {
            let name = line.strip_prefix('\t').and_then(|l| l.strip_prefix(kind)).and_then(|l| l.strip_prefix(' '));
            if let Some(name) = name.and_then(|l| l.strip_suffix(" {")) {
                names.push(name.to_string());
            }
        }
    }
    names
}

struct Counting<W> {
    inner: W,
    bytes: usize,
}

impl<W: Write> Write for Counting<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.bytes += n;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_only_our_tables_names() {
        let listing = "table ip filter {\n\tchain INPUT {\n\t\ttype filter hook input priority filter; policy accept;\n\t}\n}\n\
                       table ip kaji-proxy {\n\tchain nat-output {\n\t\ttype nat hook output priority -100; policy accept;\n\t}\n\
                       \tchain endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80 {\n\t}\n}\n";
        assert_eq!(
            parse_names(listing.as_bytes(), "chain"),
            ["nat-output", "endpoint-5OJB2KTY-ns1/svc1/tcp/p80__10.180.0.1/80"]
        );
        assert!(parse_names(listing.as_bytes(), "set").is_empty());
    }

    #[test]
    fn runs_under_the_prefix() {
        let nft = Nft::with_prefix(vec!["ip".into(), "netns".into(), "exec".into(), "x".into()]);
        let c = nft.command(&["-c", "-f", "-"]);
        assert_eq!(c.get_program(), "ip");
        let args: Vec<_> = c.get_args().collect();
        assert_eq!(args, ["netns", "exec", "x", "nft", "-c", "-f", "-"]);
    }
}
