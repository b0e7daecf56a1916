//! Root-only tests of re-attach through the CLI, overlay rootfs, and joining a network namespace.

mod common;

use std::os::unix::fs::MetadataExt;
use std::process::Command;

use common::{can_run, stdout_of, Fixture, HELPER};
use kaji_runtime::{ContainerRuntime, Status};

#[test]
fn a_new_owner_reattaches_after_the_creating_process_exits() -> anyhow::Result<()> {
    if !can_run() {
        return Ok(());
    }
    let mut fx = Fixture::new()?;
    let spec = fx.spec("attach", "trap 'echo bye; exit 4' TERM; echo up; while :; do sleep 0.05; done")?;
    let bundle = fx.bundle("attach", &spec)?;
    let log = fx.log_path("attach");
    fx.created.push("attach".into());
    let root = fx.state_root.clone();
    // The "agent" is a separate process (the CLI); it creates, starts and exits.
    let status = Command::new(HELPER)
        .arg("--root")
        .arg(&root)
        .args(["create", "attach", "--bundle"])
        .arg(&bundle)
        .arg("--log-path")
        .arg(&log)
        .status()?;
    assert!(status.success());
    assert!(Command::new(HELPER).arg("--root").arg(&root).args(["start", "attach"]).status()?.success());
    let out = Command::new(HELPER).arg("--root").arg(&root).args(["state", "attach"]).output()?;
    let st: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(st["status"], "running");
    assert_eq!(st["id"], "attach");

    // A fresh runtime instance (the restarted agent) finds and controls it.
    let rt = fx.native();
    assert_eq!(rt.list()?, vec!["attach".to_string()]);
    assert_eq!(rt.state("attach")?.status, Status::Running);
    assert!(common::wait_for_log(&log, "up"));
    assert!(Command::new(HELPER).arg("--root").arg(&root).args(["kill", "attach", "TERM"]).status()?.success());
    let exit = rt.wait("attach", Some(std::time::Duration::from_secs(10)))?;
    assert_eq!(exit.code, 4);
    assert_eq!(stdout_of(&common::read_log(&log)), vec!["up", "bye"]);
    assert!(Command::new(HELPER).arg("--root").arg(&root).args(["delete", "attach"]).status()?.success());
    fx.assert_clean();
    Ok(())
}

#[test]
fn overlay_rootfs_keeps_the_image_layer_read_only() -> anyhow::Result<()> {
    if !can_run() {
        return Ok(());
    }
    let mut fx = Fixture::new()?;
    // A second layer above the busybox one, as the agent stacks an image's layers.
    let top = fx.dir.join("layer-top");
    std::fs::create_dir_all(&top)?;
    std::fs::write(top.join("from-top"), "top\n")?;
    let lower = format!("{}:{}", top.display(), fx.rootfs.display());
    let script = "cat /from-top && echo hi > /written && cat /written && grep ' / ' /proc/mounts | cut -d' ' -f3";
    // The native backend mounts it in the container's mount namespace; the runc backend in the
    // shim's, for runc (as containerd does), and takes it down at delete.
    let runc = fx.runc().expect("runc is installed");
    let backends: [(&str, &dyn kaji_runtime::ContainerRuntime); 2] = [("native", &fx.native()), ("runc", &runc)];
    for (name, rt) in backends {
        let id = format!("overlay-{name}");
        let mut spec = fx.spec(&id, script)?;
        let mut ann = std::collections::HashMap::new();
        ann.insert(kaji_runtime::spec::ANNOTATION_LOWERDIRS.to_string(), lower.clone());
        spec.set_annotations(Some(ann));
        let (exit, log) = fx.run(rt, &id, &spec)?;
        assert_eq!(exit.code, 0, "{name}: {log:?}");
        assert_eq!(stdout_of(&log), vec!["top", "hi", "overlay"], "{name}");
        assert!(!fx.rootfs.join("written").exists(), "{name}: write leaked into the lower layer");
        assert!(!top.join("written").exists(), "{name}: write leaked into the top layer");
        assert_eq!(fx.leftover_mounts(), Vec::<String>::new(), "{name}: mounts left behind");
    }
    fx.assert_clean();
    Ok(())
}

struct Netns(String);

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "delete", &self.0]).status();
    }
}

#[test]
fn joins_a_network_namespace_by_path() -> anyhow::Result<()> {
    if !can_run() || Command::new("ip").arg("-V").output().is_err() {
        return Ok(());
    }
    let mut fx = Fixture::new()?;
    let name = format!("kaji-test-{}", std::process::id());
    assert!(Command::new("ip").args(["netns", "add", &name]).status()?.success());
    let ns = Netns(name.clone());
    let path = std::path::PathBuf::from(format!("/run/netns/{name}"));
    let inode = std::fs::metadata(&path)?.ino();
    let mut spec = fx.spec("netns", "readlink /proc/self/ns/net")?;
    common::edit_linux(&mut spec, |linux| {
        for n in linux.namespaces_mut().iter_mut().flatten() {
            if n.typ() == oci_spec::runtime::LinuxNamespaceType::Network {
                n.set_path(Some(path.clone()));
            }
        }
    })?;
    let (exit, log) = fx.run(&fx.native(), "netns", &spec)?;
    assert_eq!(exit.code, 0, "{log:?}");
    assert_eq!(stdout_of(&log), vec![format!("net:[{inode}]")]);
    fx.assert_clean();
    drop(ns);
    assert!(!path.exists());
    Ok(())
}
