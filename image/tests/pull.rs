//! Pulls against a real `docker-registry` process per test (Debian package `docker-registry`).

use std::fs;
use std::os::unix::fs::{FileTypeExt, MetadataExt};

use anyhow::Context as _;
use kaji_image::testing::tarball::Builder;
use kaji_image::testing::{busybox_image, push, push_busybox, push_index, Registry, TestImage, TestLayer};
use kaji_image::{Credentials, Error, Platform, Store, StoreOptions};

fn store() -> anyhow::Result<(tempfile::TempDir, Store)> {
    let dir = tempfile::tempdir()?;
    let store = Store::open(dir.path().join("images"), StoreOptions::default())?;
    Ok((dir, store))
}

#[tokio::test]
async fn pulls_by_tag_and_unpacks_busybox() -> anyhow::Result<()> {
    let registry = Registry::start()?;
    let pushed = push_busybox(&registry.addr, "kaji/busybox:1").await?;
    let (_dir, store) = store()?;
    let reference = format!("{}/kaji/busybox:1", registry.addr);

    let image = store.pull(&reference, None).await?;

    assert_eq!(image.reference, reference);
    assert_eq!(image.id, pushed.config_digest());
    assert_eq!(image.manifest_digest, pushed.manifest_digest());
    assert_eq!(image.config.cmd, ["sh"]);
    assert!(image.config.env.iter().any(|e| e.starts_with("PATH=")), "{:?}", image.config.env);
    assert_eq!(image.layers.len(), 1);
    let layer = &image.layers[0];
    assert!(layer.starts_with(store.root().join("layers")), "{}", layer.display());
    let sh = fs::symlink_metadata(layer.join("bin/sh")).context("bin/sh in the layer")?;
    assert!(sh.file_type().is_symlink());
    assert_eq!(fs::metadata(layer.join("bin/busybox"))?.mode() & 0o7777, 0o755);
    assert_eq!(fs::metadata(layer.join("tmp"))?.mode() & 0o7777, 0o1777);
    assert_eq!(store.get(&reference)?, Some(image.clone()));
    assert_eq!(store.get(&image.id)?.map(|i| i.manifest_digest), Some(image.manifest_digest.clone()));
    assert_eq!(image.repo_digest(), format!("{}/kaji/busybox@{}", registry.addr, image.manifest_digest));
    Ok(())
}

#[tokio::test]
async fn pulls_by_digest_and_verifies_it() -> anyhow::Result<()> {
    let registry = Registry::start()?;
    let pushed = push_busybox(&registry.addr, "kaji/busybox:1").await?;
    let (_dir, store) = store()?;
    let by_digest = format!("{}/kaji/busybox@{}", registry.addr, pushed.manifest_digest());

    let image = store.pull(&by_digest, None).await?;
    assert_eq!(image.manifest_digest, pushed.manifest_digest());
    assert_eq!(image.reference, by_digest);
    assert!(store.get(&by_digest)?.is_some());

    let unknown = format!("{}/kaji/busybox@sha256:{}", registry.addr, "0".repeat(64));
    let err = store.pull(&unknown, None).await.expect_err("unknown digest must fail");
    assert!(matches!(err, Error::NotFound { .. }), "{err:?}");
    Ok(())
}

#[tokio::test]
async fn missing_image_is_not_found_with_a_message_naming_it() -> anyhow::Result<()> {
    let registry = Registry::start()?;
    push_busybox(&registry.addr, "kaji/busybox:1").await?;
    let (_dir, store) = store()?;
    for missing in ["kaji/busybox:2", "nope:1"] {
        let reference = format!("{}/{missing}", registry.addr);
        let err = store.pull(&reference, None).await.expect_err("missing image must fail");
        assert!(matches!(err, Error::NotFound { status: 404, .. }), "{err:?}");
        let message = err.to_string();
        assert!(message.starts_with(&format!("failed to pull \"{reference}\": ")), "{message}");
        assert!(message.contains(&format!("(registry {} answered 404)", registry.addr)), "{message}");
    }
    let err = store.pull(&format!("{}/kaji/busybox:2", registry.addr), None).await.expect_err("missing");
    assert!(err.to_string().contains("manifest unknown"), "{err}");
    assert!(store.list()?.is_empty());
    Ok(())
}

#[tokio::test]
async fn unreachable_registry_is_a_network_error() -> anyhow::Result<()> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port();
    let (_dir, store) = store()?;
    let err = store.pull(&format!("127.0.0.1:{port}/x:1"), None).await.expect_err("nothing listens");
    assert!(matches!(err, Error::Network { .. }), "{err:?}");
    assert!(err.is_transient());
    assert!(err.to_string().to_lowercase().contains("connection refused"), "{err}");
    Ok(())
}

#[tokio::test]
async fn htpasswd_registry_needs_the_right_credentials() -> anyhow::Result<()> {
    let registry = Registry::start_with_auth("alice", "secret")?;
    let right = Credentials { username: "alice".into(), password: "secret".into() };
    let wrong = Credentials { username: "alice".into(), password: "nope".into() };
    push(&registry.addr, "private/busybox:1", &busybox_image()?, Some(&right)).await?;
    let (_dir, store) = store()?;
    let reference = format!("{}/private/busybox:1", registry.addr);

    let anonymous = store.pull(&reference, None).await.expect_err("anonymous pull must fail");
    assert!(matches!(anonymous, Error::Unauthorized { .. }), "{anonymous:?}");
    let rejected = store.pull(&reference, Some(&wrong)).await.expect_err("wrong password must fail");
    assert!(matches!(rejected, Error::Unauthorized { .. }), "{rejected:?}");
    assert!(rejected.to_string().contains("answered 401"), "{rejected}");

    let image = store.pull(&reference, Some(&right)).await?;
    assert!(image.layers[0].join("bin/sh").symlink_metadata().is_ok());
    Ok(())
}

#[tokio::test]
async fn whiteouts_in_an_upper_layer_become_overlayfs_whiteouts() -> anyhow::Result<()> {
    let registry = Registry::start()?;
    let lower = Builder::default()
        .dir("etc", 0o755)
        .file("etc/gone", b"lower", 0o644)
        .file("etc/kept", b"lower", 0o644)
        .dir("opt/dir", 0o755)
        .file("opt/dir/old", b"old", 0o644)
        .tar();
    let upper = Builder::default()
        .file("etc/.wh.gone", b"", 0o644)
        .file("opt/dir/.wh..wh..opq", b"", 0o644)
        .file("opt/dir/new", b"new", 0o644)
        .tar();
    let image = TestImage::new(vec![TestLayer::gzip(&lower), TestLayer::plain(&upper)]);
    push(&registry.addr, "kaji/whiteout:1", &image, None).await?;
    let (_dir, store) = store()?;

    let pulled = store.pull(&format!("{}/kaji/whiteout:1", registry.addr), None).await?;

    let [low, up] = &pulled.layers[..] else { anyhow::bail!("want 2 layers, got {:?}", pulled.layers) };
    assert_eq!(fs::read(low.join("etc/gone"))?, b"lower");
    let whiteout = fs::symlink_metadata(up.join("etc/gone"))?;
    assert!(whiteout.file_type().is_char_device() && whiteout.rdev() == 0, "{whiteout:?}");
    assert!(!up.join("etc/kept").exists(), "upper layer holds only its own entries");
    assert_eq!(xattr::get(up.join("opt/dir"), "trusted.overlay.opaque")?.as_deref(), Some(&b"y"[..]));
    assert!(xattr::get(low.join("opt/dir"), "trusted.overlay.opaque")?.is_none());
    assert!(up.join("opt/dir/new").is_file() && !up.join("opt/dir/.wh..wh..opq").exists());
    Ok(())
}

fn marked(arch: &str, variant: Option<&str>) -> TestImage {
    let tar = Builder::default().file("arch", arch.as_bytes(), 0o644).tar();
    let mut image = TestImage::new(vec![TestLayer::gzip(&tar)]);
    image.platform = Platform::new("linux", arch, variant);
    image
}

#[tokio::test]
async fn index_resolves_to_the_configured_platform() -> anyhow::Result<()> {
    let registry = Registry::start()?;
    let host = Platform::host();
    let other_arch = if host.architecture == "s390x" { "riscv64" } else { "s390x" };
    let native = marked(&host.architecture, host.variant.as_deref());
    let other = marked(other_arch, None);
    let index_digest = push_index(&registry.addr, "kaji/multi:1", &[&other, &native]).await?;
    let reference = format!("{}/kaji/multi:1", registry.addr);

    let (_dir, store) = store()?;
    let image = store.pull(&reference, None).await?;
    assert_eq!(fs::read_to_string(image.layers[0].join("arch"))?, host.architecture);
    assert_eq!(image.id, native.config_digest());
    assert_eq!(image.manifest_digest, index_digest, "the reference resolves to the index");

    let dir = tempfile::tempdir()?;
    let opts = StoreOptions { platform: Platform::new("linux", other_arch, None), ..StoreOptions::default() };
    let s390 = Store::open(dir.path(), opts)?.pull(&reference, None).await?;
    assert_eq!(fs::read_to_string(s390.layers[0].join("arch"))?, other_arch);

    let opts = StoreOptions { platform: Platform::new("windows", "amd64", None), ..StoreOptions::default() };
    let err = Store::open(dir.path().join("w"), opts)?.pull(&reference, None).await.expect_err("no windows image");
    assert!(matches!(err, Error::Unsupported { .. }), "{err:?}");
    assert!(err.to_string().contains("no image for platform windows/amd64"), "{err}");
    Ok(())
}

#[tokio::test]
async fn pulls_zstd_layers() -> anyhow::Result<()> {
    let registry = Registry::start()?;
    let tar = Builder::default().dir("data", 0o755).file("data/z", b"zstd content", 0o600).tar();
    let image = TestImage::new(vec![TestLayer::zstd(&tar)]);
    push(&registry.addr, "kaji/zstd:1", &image, None).await?;
    let (_dir, store) = store()?;
    let pulled = store.pull(&format!("{}/kaji/zstd:1", registry.addr), None).await?;
    assert_eq!(fs::read(pulled.layers[0].join("data/z"))?, b"zstd content");
    Ok(())
}

#[tokio::test]
async fn concurrent_pulls_of_one_image_download_once() -> anyhow::Result<()> {
    let registry = Registry::start()?;
    push_busybox(&registry.addr, "kaji/busybox:1").await?;
    let (_dir, store) = store()?;
    let reference = format!("{}/kaji/busybox:1", registry.addr);

    let other = store.clone();
    let (a, b) = tokio::join!(store.pull(&reference, None), other.pull(&reference, None));
    let (a, b) = (a?, b?);
    assert_eq!(a, b);
    assert_eq!(store.stats().blobs_downloaded, 2, "one config and one layer for both pulls");
    assert_eq!(store.stats().layers_unpacked, 1);

    // A later pull re-resolves the tag but reuses the config and the unpacked layer.
    store.pull(&reference, None).await?;
    assert_eq!(store.stats().blobs_downloaded, 2);
    Ok(())
}

#[tokio::test]
async fn images_survive_a_restart() -> anyhow::Result<()> {
    let registry = Registry::start()?;
    push_busybox(&registry.addr, "kaji/busybox:1").await?;
    let dir = tempfile::tempdir()?;
    let reference = format!("{}/kaji/busybox:1", registry.addr);
    let pulled = Store::open(dir.path(), StoreOptions::default())?.pull(&reference, None).await?;
    drop(registry);

    let reopened = Store::open(dir.path(), StoreOptions::default())?;
    let found = reopened.get(&reference)?.context("image after restart")?;
    assert_eq!(found, pulled);
    assert!(found.layers[0].join("bin/busybox").is_file());
    assert_eq!(reopened.list()?, vec![pulled]);
    Ok(())
}
