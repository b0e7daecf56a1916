//! Runs `iptables`, `iptables-save` and `iptables-restore`, optionally under a command prefix
//! (`ip netns exec <ns>` in tests), and owns the jump rules from the built-in chains.

use crate::render::{is_own_chain, Table};
use std::io::Write;
use std::process::{Command, Stdio};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to run {program}")]
    Spawn {
        program: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{program} failed ({status}): {stderr}")]
    Failed { program: String, status: String, stderr: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

/// A jump from a built-in chain into ours: inserted once, removed by `--cleanup`.
pub struct Jump {
    pub table: Table,
    pub chain: &'static str,
    pub args: &'static [&'static str],
}

const SERVICE_PORTALS: &[&str] = &["-m", "comment", "--comment", "kubernetes service portals", "-j", "KUBE-SERVICES"];
const NEW_SERVICE_PORTALS: &[&str] = &[
    "-m",
    "conntrack",
    "--ctstate",
    "NEW",
    "-m",
    "comment",
    "--comment",
    "kubernetes service portals",
    "-j",
    "KUBE-SERVICES",
];
const NEW_EXTERNAL_PORTALS: &[&str] = &[
    "-m",
    "conntrack",
    "--ctstate",
    "NEW",
    "-m",
    "comment",
    "--comment",
    "kubernetes externally-visible service portals",
    "-j",
    "KUBE-EXTERNAL-SERVICES",
];

/// kube-proxy's jump rules (minus the health-check and load-balancer firewall chains).
pub const JUMPS: &[Jump] = &[
    Jump { table: Table::Nat, chain: "PREROUTING", args: SERVICE_PORTALS },
    Jump { table: Table::Nat, chain: "OUTPUT", args: SERVICE_PORTALS },
    Jump {
        table: Table::Nat,
        chain: "POSTROUTING",
        args: &["-m", "comment", "--comment", "kubernetes postrouting rules", "-j", "KUBE-POSTROUTING"],
    },
    Jump { table: Table::Filter, chain: "INPUT", args: NEW_EXTERNAL_PORTALS },
    Jump { table: Table::Filter, chain: "FORWARD", args: NEW_EXTERNAL_PORTALS },
    Jump { table: Table::Filter, chain: "FORWARD", args: NEW_SERVICE_PORTALS },
    Jump { table: Table::Filter, chain: "OUTPUT", args: NEW_SERVICE_PORTALS },
    Jump {
        table: Table::Filter,
        chain: "FORWARD",
        args: &["-m", "comment", "--comment", "kubernetes forwarding rules", "-j", "KUBE-FORWARD"],
    },
];

/// How to reach the iptables binaries (Debian's `iptables` alternatives pick nft or legacy).
#[derive(Clone, Debug, Default)]
pub struct Iptables {
    prefix: Vec<String>,
    /// `iptables` (Debian's alternative), or `iptables-nft` / `iptables-legacy` explicitly.
    base: Option<String>,
}

impl Iptables {
    /// The binaries on PATH, in this process's network namespace.
    pub fn host() -> Self {
        Self::default()
    }

    /// Every command runs as `<prefix...> <program> <args...>`, e.g. `ip netns exec <ns>`.
    pub fn with_prefix(prefix: Vec<String>) -> Self {
        Self { prefix, base: None }
    }

    /// Uses `<base>`, `<base>-restore` and `<base>-save`, e.g. `iptables-legacy`.
    pub fn backend(mut self, base: &str) -> Self {
        self.base = Some(base.to_string());
        self
    }

    fn command(&self, program: &str) -> Command {
        let renamed;
        let program = match &self.base {
            Some(base) => {
                renamed = program.replacen("iptables", base, 1);
                renamed.as_str()
            }
            None => program,
        };
        match self.prefix.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(program);
                c
            }
            None => Command::new(program),
        }
    }

    fn run(&self, program: &str, args: &[&str], stdin: Option<&str>) -> Result<(i32, String)> {
        let mut cmd = self.command(program);
        cmd.args(args).stdout(Stdio::piped()).stderr(Stdio::piped());
        cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() });
        let spawn_err = |source| Error::Spawn { program: program.to_string(), source };
        let mut child = cmd.spawn().map_err(spawn_err)?;
        if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
            pipe.write_all(input.as_bytes()).map_err(spawn_err)?;
        }
        let out = child.wait_with_output().map_err(spawn_err)?;
        let code = out.status.code().unwrap_or(-1);
        if code != 0 && code != 1 {
            return Err(Error::Failed {
                program: program.to_string(),
                status: out.status.to_string(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        if code == 1 && program != "iptables" {
            return Err(Error::Failed {
                program: program.to_string(),
                status: out.status.to_string(),
                stderr: explain_restore_error(&String::from_utf8_lossy(&out.stderr), stdin),
            });
        }
        Ok((code, String::from_utf8_lossy(&out.stdout).into_owned()))
    }

    /// `iptables-restore --noflush`: one atomic transaction per table.
    pub fn restore(&self, payload: &str) -> Result<()> {
        self.run("iptables-restore", &["--noflush", "-w"], Some(payload)).map(|_| ())
    }

    /// `iptables-restore --test`: parses and checks `payload` without committing it.
    pub fn restore_test(&self, payload: &str) -> Result<()> {
        self.run("iptables-restore", &["--noflush", "-w", "--test"], Some(payload)).map(|_| ())
    }

    pub fn save(&self, table: Table) -> Result<String> {
        self.run("iptables-save", &["-t", table.as_str()], None).map(|(_, out)| out)
    }

    /// The chains kaji owns that exist now.
    pub fn own_chains(&self) -> Result<Vec<(Table, String)>> {
        let mut chains = Vec::new();
        for table in Table::ALL {
            for line in self.save(table)?.lines() {
                if let Some(name) = line.strip_prefix(':').and_then(|l| l.split_whitespace().next()) {
                    if is_own_chain(name) {
                        chains.push((table, name.to_string()));
                    }
                }
            }
        }
        Ok(chains)
    }

    fn has_jump(&self, j: &Jump) -> Result<bool> {
        let mut args = vec!["-w", "-t", j.table.as_str(), "-C", j.chain];
        args.extend_from_slice(j.args);
        Ok(self.run("iptables", &args, None)?.0 == 0)
    }

    fn change_jump(&self, j: &Jump, op: &str) -> Result<()> {
        let mut args = vec!["-w", "-t", j.table.as_str(), op, j.chain];
        args.extend_from_slice(j.args);
        match self.run("iptables", &args, None)? {
            (0, _) => Ok(()),
            _ => Err(Error::Failed {
                program: "iptables".into(),
                status: "exit status: 1".into(),
                stderr: format!("cannot {op} the jump from {} {}", j.table.as_str(), j.chain),
            }),
        }
    }

    /// Inserts the jump rules that are missing (the chains must exist).
    pub fn ensure_jumps(&self) -> Result<()> {
        for j in JUMPS {
            if !self.has_jump(j)? {
                self.change_jump(j, "-I")?;
            }
        }
        Ok(())
    }

    /// Removes every kaji jump rule and chain. Returns how many chains it deleted.
    pub fn cleanup(&self) -> Result<usize> {
        let chains = self.own_chains()?;
        for j in JUMPS {
            // `iptables -C` fails outright when the target chain does not exist: no jump then.
            let target = j.args.last().copied().unwrap_or_default();
            if !chains.iter().any(|(t, n)| *t == j.table && n == target) {
                continue;
            }
            while self.has_jump(j)? {
                self.change_jump(j, "-D")?;
            }
        }
        let mut payload = String::new();
        for table in Table::ALL {
            let names: Vec<&str> = chains.iter().filter(|(t, _)| *t == table).map(|(_, n)| n.as_str()).collect();
            if names.is_empty() {
                continue;
            }
            payload.push_str(&format!("*{}\n", table.as_str()));
            for n in &names {
                payload.push_str(&format!(":{n} - [0:0]\n"));
            }
            for n in &names {
                payload.push_str(&format!("-X {n}\n"));
            }
            payload.push_str("COMMIT\n");
        }
        if !payload.is_empty() {
            self.restore(&payload)?;
        }
        Ok(chains.len())
    }
}

/// iptables-restore says "line N failed": add that line of the payload, which names the
/// service (chain comments carry "namespace/name:port").
fn explain_restore_error(stderr: &str, payload: Option<&str>) -> String {
    let stderr = stderr.trim();
    let line_no = stderr
        .split("line ")
        .nth(1)
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|n| n.parse::<usize>().ok());
    match (line_no, payload) {
        (Some(n), Some(p)) if n > 0 => match p.lines().nth(n - 1) {
            Some(line) => format!("{stderr}; line {n}: {line}"),
            None => stderr.to_string(),
        },
        _ => stderr.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restore_errors_quote_the_failing_line() {
        let payload = "*nat\n:KUBE-SERVICES - [0:0]\n-A KUBE-SERVICES -m comment --comment ns/web -j NOPE\nCOMMIT\n";
        let msg = explain_restore_error("iptables-restore: line 3 failed\n", Some(payload));
        assert_eq!(
            msg,
            "iptables-restore: line 3 failed; line 3: -A KUBE-SERVICES -m comment --comment ns/web -j NOPE"
        );
        assert_eq!(explain_restore_error("something else", Some(payload)), "something else");
    }

    #[test]
    fn runs_under_the_prefix() {
        let ipt = Iptables::with_prefix(vec!["ip".into(), "netns".into(), "exec".into(), "x".into()]);
        let c = ipt.command("iptables-save");
        assert_eq!(c.get_program(), "ip");
        let args: Vec<_> = c.get_args().collect();
        assert_eq!(args, ["netns", "exec", "x", "iptables-save"]);
    }
}
