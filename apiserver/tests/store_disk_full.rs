//! Root-only: the embedded store on a disk that fills up. Writes fail while there is no room
//! (a Status, nothing stored lost), and work again once there is — without restarting the
//! apiserver: redb refuses every transaction after an I/O error until it is reopened, which the
//! store does by itself. The disk is a 6 MiB tmpfs mounted for the test and unmounted after it.

use kaji_apiserver::storage::redb::RedbStore;
use kaji_apiserver::storage::Store;
use std::path::{Path, PathBuf};
use std::process::Command;

struct Tmpfs(PathBuf);

impl Tmpfs {
    fn mount(dir: &Path) -> Self {
        let ok = Command::new("mount").args(["-t", "tmpfs", "-o", "size=6m", "tmpfs"]).arg(dir).status();
        assert!(ok.is_ok_and(|s| s.success()), "mount a tmpfs at {}", dir.display());
        Tmpfs(dir.to_path_buf())
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(&self.0).status();
    }
}

/// Fills what is left of the disk with one file, then returns its path.
fn fill(dir: &Path) -> PathBuf {
    let path = dir.join("filler");
    let mut f = std::fs::File::create(&path).expect("filler");
    let chunk = vec![0u8; 64 << 10];
    while std::io::Write::write_all(&mut f, &chunk).is_ok() {}
    let _ = f.sync_all();
    path
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_fail_on_a_full_disk_and_work_again_once_there_is_room() {
    // SAFETY-free root check: geteuid through /proc (no nix dependency here).
    let uid = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    assert!(uid.lines().any(|l| l.starts_with("Uid:\t0\t")), "needs root (mounts a tmpfs)");
    let dir = tempfile::tempdir().expect("tempdir");
    let disk = Tmpfs::mount(dir.path());
    let store = RedbStore::open(&dir.path().join("store")).expect("open");
    let before = store.create("/registry/configmaps/default/before", b"{\"kept\":true}").expect("create before");
    let mut watch = store.watch("/registry/configmaps/", before).expect("watch");

    let filler = fill(dir.path());
    let big = vec![b'x'; 512 << 10];
    let mut failed = None;
    for i in 0..8 {
        if let Err(e) = store.create(&format!("/registry/configmaps/default/big-{i}"), &big) {
            failed = Some(e);
            break;
        }
    }
    let failed = failed.expect("a write to a full disk fails");
    assert!(failed.to_string().contains("No space left") || failed.to_string().contains("I/O"), "{failed}");
    // And keeps failing while the disk is full, without losing what was stored.
    assert!(store.create("/registry/configmaps/default/still-full", &big).is_err());
    let kept = store.get("/registry/configmaps/default/before").expect("read while full").expect("kept");
    assert_eq!(&kept.value[..], b"{\"kept\":true}");

    std::fs::remove_file(&filler).expect("make room");
    let after = store.create("/registry/configmaps/default/after", b"{}").expect("writes work again");
    assert!(after > before, "revisions go on: {before} then {after}");
    assert!(store.get("/registry/configmaps/default/before").expect("read").is_some());
    // The watch from before the failure sees the later write (and any that landed).
    let mut seen = Vec::new();
    while let Ok(Some(Ok(ev))) = tokio::time::timeout(std::time::Duration::from_secs(5), watch.recv()).await {
        seen.push(ev.key.clone());
        if ev.key.ends_with("/after") {
            break;
        }
    }
    assert_eq!(seen.last().map(String::as_str), Some("/registry/configmaps/default/after"), "{seen:?}");
    drop(watch);
    drop(store);
    drop(disk);
}
