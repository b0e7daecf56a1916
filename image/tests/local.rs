//! Local store operations without a registry: import (OCI layout, docker archive), remove, gc.

use std::collections::HashSet;
use std::fs;

use anyhow::Context as _;
use kaji_image::testing::tarball::Builder;
use kaji_image::testing::{write_docker_archive, write_oci_layout, TestImage, TestLayer};
use kaji_image::{Error, Store, StoreOptions};

fn layer(path: &str, content: &str) -> Vec<u8> {
    Builder::default().dir("data", 0o755).file(path, content.as_bytes(), 0o644).tar()
}

/// Two images sharing a base layer, each with a layer of its own.
fn images() -> (TestImage, TestImage) {
    let base = TestLayer::gzip(&layer("data/base", "base"));
    let a = TestImage::new(vec![base.clone(), TestLayer::plain(&layer("data/a", "a"))]);
    let mut b = TestImage::new(vec![base, TestLayer::gzip(&layer("data/b", "b"))]);
    b.cmd = vec!["b".into()];
    (a, b)
}

#[test]
fn imports_an_oci_layout_directory() -> anyhow::Result<()> {
    let (a, b) = images();
    let dir = tempfile::tempdir()?;
    let layout = dir.path().join("layout");
    write_oci_layout(&layout, &[("127.0.0.1:5000/kaji/a:1", &a), ("kaji/b", &b)])?;
    let store = Store::open(dir.path().join("store"), StoreOptions::default())?;

    let imported = store.import(&layout)?;

    let refs: Vec<&str> = imported.iter().map(|i| i.reference.as_str()).collect();
    assert_eq!(refs, ["127.0.0.1:5000/kaji/a:1", "docker.io/kaji/b:latest"]);
    assert_eq!(imported[0].manifest_digest, a.manifest_digest());
    assert_eq!(imported[1].id, b.config_digest());
    assert_eq!(imported[1].config.cmd, ["b"]);
    assert_eq!(imported[0].layers[0], imported[1].layers[0], "the shared base layer is unpacked once");
    assert_eq!(store.stats().layers_unpacked, 3);
    assert_eq!(fs::read_to_string(imported[0].layers[1].join("data/a"))?, "a");
    assert_eq!(store.get("kaji/b")?.as_ref(), Some(&imported[1]));
    Ok(())
}

#[test]
fn imports_a_docker_archive() -> anyhow::Result<()> {
    let (a, _) = images();
    let dir = tempfile::tempdir()?;
    let archive = write_docker_archive(&dir.path().join("a.tar"), &["kaji/a:2", "localhost:5000/a:3"], &a)?;
    let store = Store::open(dir.path().join("store"), StoreOptions::default())?;

    let imported = store.import(&archive)?;

    let refs: Vec<&str> = imported.iter().map(|i| i.reference.as_str()).collect();
    assert_eq!(refs, ["docker.io/kaji/a:2", "localhost:5000/a:3"]);
    assert_eq!(imported[0].id, a.config_digest());
    assert_eq!(imported[0].manifest_digest, imported[1].manifest_digest);
    assert_eq!(fs::read_to_string(imported[0].layers[0].join("data/base"))?, "base");
    assert_eq!(fs::read_to_string(imported[0].layers[1].join("data/a"))?, "a");
    assert_eq!(store.list()?.len(), 2);
    assert!(fs::read_dir(store.root().join("tmp"))?.next().is_none(), "extraction leftovers cleaned up");
    Ok(())
}

#[test]
fn import_rejects_a_layer_that_does_not_match_its_diff_id() -> anyhow::Result<()> {
    let (mut a, _) = images();
    a.layers[1].diff_id = kaji_image::digest::sha256(b"something else");
    let dir = tempfile::tempdir()?;
    write_oci_layout(&dir.path().join("layout"), &[("kaji/a:1", &a)])?;
    let store = Store::open(dir.path().join("store"), StoreOptions::default())?;
    let err = store.import(&dir.path().join("layout")).expect_err("corrupt layer must be refused");
    assert!(matches!(err, Error::DigestMismatch { .. }), "{err:?}");
    assert!(store.get("kaji/a:1")?.is_none());
    let bad_dir = store.root().join("layers").join(&kaji_image::digest::hex(&a.layers[1].diff_id)[..16]);
    assert!(!bad_dir.exists(), "a layer that failed verification is never moved into place");
    assert!(fs::read_dir(store.root().join("tmp"))?.next().is_none(), "no half-unpacked leftovers");
    // The good base layer stays for a retry until something sweeps it, at the latest the next open.
    drop(store);
    let store = Store::open(dir.path().join("store"), StoreOptions::default())?;
    assert_eq!(fs::read_dir(store.root().join("layers"))?.count(), 0, "orphaned layers swept on open");
    Ok(())
}

#[test]
fn remove_deletes_unshared_layers_and_keeps_shared_ones() -> anyhow::Result<()> {
    let (a, b) = images();
    let dir = tempfile::tempdir()?;
    write_oci_layout(&dir.path().join("layout"), &[("kaji/a:1", &a), ("kaji/b:1", &b)])?;
    let store = Store::open(dir.path().join("store"), StoreOptions::default())?;
    let imported = store.import(&dir.path().join("layout"))?;
    let (ia, ib) = (&imported[0], &imported[1]);

    store.remove("kaji/b:1")?;

    assert!(store.get("kaji/b:1")?.is_none());
    assert!(!ib.layers[1].exists(), "b's own layer is gone");
    assert!(ib.layers[0].is_dir(), "the base layer is still used by a");
    assert_eq!(store.get("kaji/a:1")?.as_ref(), Some(ia));
    assert!(matches!(store.remove("kaji/b:1"), Err(Error::NotPresent(_))));

    store.remove(&ia.id)?;
    assert!(store.list()?.is_empty());
    assert_eq!(fs::read_dir(store.root().join("layers"))?.count(), 0);
    assert_eq!(fs::read_dir(store.root().join("blobs/sha256"))?.count(), 0);
    Ok(())
}

#[test]
fn gc_removes_unused_images_only_above_the_threshold() -> anyhow::Result<()> {
    let (a, b) = images();
    let dir = tempfile::tempdir()?;
    write_oci_layout(&dir.path().join("layout"), &[("kaji/a:1", &a), ("kaji/b:1", &b)])?;
    let store = Store::open(dir.path().join("store"), StoreOptions::default())?;
    let imported = store.import(&dir.path().join("layout"))?;
    let (ia, ib) = (&imported[0], &imported[1]);
    let in_use: HashSet<String> = [ia.repo_digest()].into();

    assert!(store.gc(&in_use, 100, 90)?.is_empty(), "a disk is never more than 100% full");
    assert!(store.get("kaji/b:1")?.is_some());

    // 0/0: any usage is above the threshold and everything unused must go.
    let removed = store.gc(&in_use, 0, 0)?;
    assert_eq!(removed, vec![ib.manifest_digest.clone()]);
    assert!(store.get("kaji/b:1")?.is_none());
    assert!(!ib.layers[1].exists());
    let kept = store.get("kaji/a:1")?.context("in-use image kept")?;
    assert!(kept.layers.iter().all(|l| l.is_dir()));
    Ok(())
}

#[test]
fn a_root_filesystem_directory_imports_as_a_one_layer_image() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let rootfs = dir.path().join("rootfs");
    fs::create_dir_all(rootfs.join("bin"))?;
    fs::write(rootfs.join("bin/tool"), "#!/bin/sh\n")?;
    std::os::unix::fs::symlink("tool", rootfs.join("bin/alias"))?;
    let store = Store::open(dir.path().join("store"), StoreOptions::default())?;
    let config =
        kaji_image::ImageConfig { cmd: vec!["/bin/tool".into()], env: vec!["A=1".into()], ..Default::default() };

    let image = store.import_rootfs(&rootfs, "kaji.local/tool:1", &config)?;

    assert_eq!(image.reference, "kaji.local/tool:1");
    assert_eq!(image.config.cmd, ["/bin/tool"]);
    assert_eq!(image.layers.len(), 1);
    assert_eq!(fs::read_to_string(image.layers[0].join("bin/tool"))?, "#!/bin/sh\n");
    assert_eq!(fs::read_link(image.layers[0].join("bin/alias"))?, std::path::Path::new("tool"), "symlinks stay links");
    let again = Store::open(dir.path().join("store"), StoreOptions::default())?;
    assert_eq!(again.get("kaji.local/tool:1")?.map(|i| i.manifest_digest), Some(image.manifest_digest));
    let gz = dir.path().join("rootfs.tar.gz");
    fs::write(&gz, kaji_image::testing::tarball::gzip(&layer("data/x", "x")))?;
    assert!(store.import_rootfs(&gz, "kaji.local/tool:2", &config).is_err(), "compressed tars are refused");
    Ok(())
}

/// The agent keeps its store open while `kaji-agent image import` (another process) adds to it:
/// the running store sees the new image at once, and neither loses what the other recorded.
#[test]
fn two_stores_on_one_root_see_and_keep_each_others_images() -> anyhow::Result<()> {
    let dir = tempfile::tempdir()?;
    let rootfs = dir.path().join("rootfs");
    fs::create_dir_all(rootfs.join("bin"))?;
    fs::write(rootfs.join("bin/tool"), "#!/bin/sh\n")?;
    let config = kaji_image::ImageConfig::default();
    let agent = Store::open(dir.path().join("store"), StoreOptions::default())?;
    let cli = Store::open(dir.path().join("store"), StoreOptions::default())?;
    assert!(agent.get("kaji.local/tool:1")?.is_none());

    cli.import_rootfs(&rootfs, "kaji.local/tool:1", &config)?;
    assert!(agent.get("kaji.local/tool:1")?.is_some(), "the open store sees the other's import");

    agent.import_rootfs(&rootfs, "kaji.local/tool:2", &config)?;
    agent.touch("kaji.local/tool:1")?;
    let listed =
        |s: &Store| -> anyhow::Result<HashSet<String>> { Ok(s.list()?.into_iter().map(|i| i.reference).collect()) };
    let both: HashSet<String> = ["kaji.local/tool:1".to_string(), "kaji.local/tool:2".to_string()].into();
    assert_eq!(listed(&cli)?, both);
    assert_eq!(listed(&agent)?, both);
    cli.remove("kaji.local/tool:2")?;
    assert!(agent.get("kaji.local/tool:2")?.is_none(), "a removal by the other is seen too");
    assert!(agent.get("kaji.local/tool:1")?.is_some());
    Ok(())
}
