//! The demo image without a network: a root filesystem built from the host's busybox-static,
//! imported into each node's image store with `kaji-agent image import`.

use super::procs;
use super::topology::{Lab, DEMO_IMAGE};
use anyhow::{bail, Context, Result};
use std::path::Path;
use std::process::Command;

pub const BUSYBOX: &str = "/bin/busybox";

/// A root filesystem with busybox and its applets, /etc/passwd and /etc/group, and /www.
pub fn busybox_rootfs(root: &Path) -> Result<()> {
    if !Path::new(BUSYBOX).exists() {
        bail!("{BUSYBOX} not found: the demo image is built from it (apt-get install busybox-static)");
    }
    let _ = std::fs::remove_dir_all(root);
    for d in ["bin", "etc", "tmp", "proc", "sys", "dev", "root", "www"] {
        std::fs::create_dir_all(root.join(d)).with_context(|| format!("cannot create {}", root.join(d).display()))?;
    }
    std::fs::copy(BUSYBOX, root.join("bin/busybox"))?;
    let list = Command::new(BUSYBOX).arg("--list").output().context("busybox --list")?;
    for applet in String::from_utf8_lossy(&list.stdout).lines().map(str::trim).filter(|a| !a.is_empty()) {
        if applet != "busybox" {
            std::os::unix::fs::symlink("busybox", root.join("bin").join(applet))?;
        }
    }
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n",
    )?;
    std::fs::write(root.join("etc/group"), "root:x:0:\nnogroup:x:65534:\n")?;
    std::fs::write(root.join("www/index.html"), "hello from kaji\n")?;
    Ok(())
}

/// Imports the root filesystem at `rootfs` as the demo image into node `i`'s store.
pub fn import(lab: &Lab, i: u8, rootfs: &Path) -> Result<()> {
    let agent = procs::sibling_binary("kaji-agent")?;
    let args: Vec<String> = vec![
        "--root-dir".into(),
        lab.node_dir(i).to_string_lossy().into_owned(),
        "image".into(),
        "import".into(),
        "--tag".into(),
        DEMO_IMAGE.into(),
        "--cmd".into(),
        "sh".into(),
        rootfs.to_string_lossy().into_owned(),
    ];
    procs::run(&agent, None, &args).map(drop)
}
