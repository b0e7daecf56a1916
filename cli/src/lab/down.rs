//! `kaji lab down`: stop what `up` started (newest first), clean each node from inside its
//! namespace, delete the namespaces, and prove nothing of the lab is left.

use super::topology::Lab;
use super::{leftovers, net, procs, State};
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::time::Duration;

pub fn down(dir: &Path, purge: bool) -> Result<()> {
    let state = match State::load(dir) {
        Ok(s) => s,
        Err(_) if !Lab::state_file(dir).exists() => {
            eprintln!("no lab in {}", dir.display());
            return purge_dir(dir, purge);
        }
        Err(e) => return Err(e),
    };
    let lab = &state.lab;
    let inodes: Vec<(String, u64)> =
        net::lab_namespaces(lab).into_iter().filter_map(|ns| net::inode(&ns).map(|i| (ns, i))).collect();
    let mut failed = Vec::new();
    for c in state.components.iter().rev() {
        if let Some(pid) = procs::running(dir, c) {
            eprint!("stopping {} (pid {pid}) ... ", c.name);
            if procs::stop(pid, &c.binary, Duration::from_secs(15)) {
                eprintln!("done");
            } else {
                eprintln!("failed: still running");
                failed.push(format!("{} (pid {pid}) did not stop", c.name));
            }
        }
        let _ = std::fs::remove_file(procs::pid_file(dir, &c.name));
    }
    for i in lab.node_ids().filter(|i| lab.node_dir(*i).exists()) {
        eprint!("removing {}'s containers, sandboxes, pod network and cgroups ... ", Lab::node_name(i));
        match clean_node(lab, i) {
            Ok(()) => eprintln!("done"),
            Err(e) => {
                eprintln!("failed: {e:#}");
                failed.push(format!("cleaning {}: {e:#}", Lab::node_name(i)));
            }
        }
    }
    for ns in net::lab_namespaces(lab) {
        eprint!("deleting network namespace {ns} ... ");
        match net::delete(&ns) {
            Ok(()) => eprintln!("done"),
            Err(e) => {
                eprintln!("failed: {e:#}");
                failed.push(format!("{e:#}"));
            }
        }
    }
    eprint!("checking that nothing of the lab is left ... ");
    let left = leftovers::find(lab, &inodes);
    if left.is_empty() {
        eprintln!("done");
    } else {
        eprintln!("failed: {} thing(s) left", left.len());
        for l in &left {
            eprintln!("  left: {l}");
        }
        bail!("kaji lab down left {} thing(s) behind (listed above)", left.len());
    }
    if !failed.is_empty() {
        bail!("kaji lab down: {}", failed.join("; "));
    }
    purge_dir(dir, purge)
}

/// `kaji-agent cleanup` inside the node's namespace (recreated empty if it is gone, so the
/// cleanup never runs in the host's).
fn clean_node(lab: &Lab, i: u8) -> Result<()> {
    let ns = lab.node_netns(i);
    if !net::exists(&ns) {
        net::ip(&["netns".into(), "add".into(), ns.clone()])?;
    }
    let agent = procs::sibling_binary("kaji-agent")?;
    procs::run(&agent, Some(&ns), &lab.cleanup_args(i)).map(drop)
}

/// Deletes the lab dir — never while anything is mounted below it.
fn purge_dir(dir: &Path, purge: bool) -> Result<()> {
    if !purge || !dir.exists() {
        return Ok(());
    }
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
    let canonical = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let mounted = leftovers::mounts_under(&mountinfo, &canonical);
    if !mounted.is_empty() {
        bail!("not deleting {}: still mounted below it: {}", dir.display(), mounted.join(", "));
    }
    std::fs::remove_dir_all(dir).with_context(|| format!("cannot remove {}", dir.display()))?;
    eprintln!("removed {}", dir.display());
    Ok(())
}
