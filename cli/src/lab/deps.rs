//! What the lab needs from the machine (apt packages), from the repository's one list,
//! `scripts/deps.sh`, compiled in: installed when missing, or named with the command that
//! installs them (`--no-install`, or no apt on this machine).

use anyhow::{bail, Context, Result};
use std::io::Write as _;
use std::process::{Command, Stdio};

const SCRIPT: &str = include_str!("../../../scripts/deps.sh");

/// Installs what `kaji lab up` needs (one line per package, nothing when all is there), or, with
/// `install` false, fails naming what is missing and the command that installs it.
pub fn ensure(install: bool) -> Result<()> {
    let missing = run(&["--check", "lab"])?;
    if missing.status.success() {
        return Ok(());
    }
    let names = missing_names(&String::from_utf8_lossy(&missing.stdout));
    let has_apt = Command::new("apt-get").arg("--version").output().is_ok_and(|o| o.status.success());
    if !install || !has_apt {
        bail!(
            "the lab needs {} (install with: apt-get install {}{})",
            names.join(", "),
            names.join(" "),
            if install { "; this machine has no apt-get" } else { ", or run `kaji lab up` without --no-install" }
        );
    }
    let out = run_inherit(&["lab"])?;
    if !out.success() {
        bail!("installing {} failed (apt-get install {})", names.join(", "), names.join(" "));
    }
    Ok(())
}

/// `missing: <package> (<why>)` lines → package names.
fn missing_names(check: &str) -> Vec<String> {
    check
        .lines()
        .filter_map(|l| l.strip_prefix("missing: "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_owned)
        .collect()
}

fn command(args: &[&str]) -> Command {
    let mut c = Command::new("bash");
    c.arg("-s").arg("--").args(args).stdin(Stdio::piped());
    c
}

fn feed(child: &mut std::process::Child) -> Result<()> {
    let mut stdin = child.stdin.take().context("bash's stdin")?;
    stdin.write_all(SCRIPT.as_bytes()).context("cannot pass scripts/deps.sh to bash")
}

fn run(args: &[&str]) -> Result<std::process::Output> {
    let mut child = command(args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().context("cannot run bash")?;
    feed(&mut child)?;
    child.wait_with_output().context("bash running scripts/deps.sh")
}

fn run_inherit(args: &[&str]) -> Result<std::process::ExitStatus> {
    let mut child = command(args).spawn().context("cannot run bash")?;
    feed(&mut child)?;
    child.wait().context("bash running scripts/deps.sh")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_check_lines() {
        let out = "missing: busybox-static (the demo and test images are built from it)\nmissing: nftables (nft)\n";
        assert_eq!(missing_names(out), ["busybox-static", "nftables"]);
    }

    #[test]
    fn the_lab_list_is_a_subset_of_the_test_list() {
        // Every package the lab needs is installed by the test command too (tests run labs).
        for line in SCRIPT.lines().map(str::trim).filter(|l| l.starts_with('"')) {
            let fields: Vec<&str> = line.trim_matches('"').split_whitespace().collect();
            if fields.len() > 2 && fields[1].split(',').any(|p| p == "lab") {
                assert!(
                    fields[1].split(',').any(|p| p == "test"),
                    "{} is for the lab but not for the tests",
                    fields[0]
                );
            }
        }
    }
}
