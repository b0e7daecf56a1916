//! `kaji lab` behaviour that needs no running lab; the lab itself is exercised end to end by the
//! kaji-e2e crate (tests/), which runs one lab per test run.

use std::process::{Command, Output};

fn kaji(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_kaji")).args(args).output().expect("kaji runs")
}

#[test]
fn commands_on_a_dir_without_a_lab_say_so() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let dir = tmp.path().to_string_lossy().to_string();
    for verb in [&["status"][..], &["logs", "apiserver"], &["restart", "agent-1"]] {
        let out = kaji(&[&["lab"], verb, &["--dir", &dir]].concat());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{verb:?} succeeded without a lab");
        assert!(err.contains(&format!("no lab in {dir}")) && err.contains("kaji lab up"), "{verb:?}: {err}");
    }
    let down = kaji(&["lab", "down", "--dir", &dir]);
    assert!(down.status.success(), "down without a lab is a no-op");
    assert!(String::from_utf8_lossy(&down.stderr).contains("no lab in"));
}

#[test]
fn node_count_is_checked_and_the_forwarder_stays_hidden() {
    let out = kaji(&["lab", "up", "--nodes", "0", "--dir", "/nonexistent/kaji-lab"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--nodes"), "{}", String::from_utf8_lossy(&out.stderr));
    let help = String::from_utf8_lossy(&kaji(&["lab", "--help"]).stdout).to_string();
    for verb in ["up", "status", "logs", "restart", "down"] {
        assert!(help.contains(verb), "{help}");
    }
    assert!(!help.lines().any(|l| l.trim_start().starts_with("forward")), "{help}");
}

#[test]
fn completion_scripts_cover_the_commands() {
    let out = kaji(&["completion", "bash"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let script = String::from_utf8_lossy(&out.stdout);
    for word in ["apply", "rollout", "lab", "--kubeconfig"] {
        assert!(script.contains(word), "bash completion lacks {word}");
    }
    let bad = kaji(&["completion", "tcsh"]);
    assert!(!bad.status.success(), "an unknown shell is refused");
}
