//! The conformance suite every Store backend must pass. `open` must reopen the same data each call.

use super::{Error, EventKind, Store};
use std::sync::Arc;
use std::time::Duration;

pub async fn run_all<S: Store, F: Fn() -> S>(open: F) {
    {
        let s = open();
        create_get_and_already_exists(&s);
        update_is_compare_and_swap(&s);
        delete_returns_the_old_value(&s);
        list_is_sorted_and_prefix_bounded(&s);
        watch_replays_history_then_goes_live(&s).await;
        compaction_makes_old_revisions_gone(&s).await;
    }
    restart_keeps_data_and_revision(&open);
    concurrent_cas_writers_lose_no_update(Arc::new(open()));
}

fn create_get_and_already_exists(s: &impl Store) {
    let r1 = s.create("/t/a/1", b"one").expect("create");
    assert!(r1 > 0);
    let kv = s.get("/t/a/1").expect("get").expect("present");
    assert_eq!(&*kv.value, b"one");
    assert_eq!((kv.create_revision, kv.mod_revision), (r1, r1));
    assert!(matches!(s.create("/t/a/1", b"again"), Err(Error::AlreadyExists(_))));
    assert_eq!(&*s.get("/t/a/1").expect("get").expect("present").value, b"one", "a failed create changes nothing");
    assert!(s.get("/t/a/missing").expect("get").is_none());
    assert_eq!(s.current_revision(), r1, "a failed write takes no revision");
}

fn update_is_compare_and_swap(s: &impl Store) {
    let r1 = s.create("/t/b/1", b"v1").expect("create");
    let r2 = s.update("/t/b/1", b"v2", r1).expect("update at the current revision");
    assert!(r2 > r1);
    match s.update("/t/b/1", b"v3", r1) {
        Err(Error::Conflict { expected, actual, .. }) => assert_eq!((expected, actual), (r1, r2)),
        other => panic!("stale update must conflict, got {other:?}"),
    }
    let kv = s.get("/t/b/1").expect("get").expect("present");
    assert_eq!((&*kv.value, kv.create_revision, kv.mod_revision), (&b"v2"[..], r1, r2));
    assert!(matches!(s.update("/t/b/missing", b"x", 1), Err(Error::NotFound(_))));
}

fn delete_returns_the_old_value(s: &impl Store) {
    let r1 = s.create("/t/c/1", b"gone soon").expect("create");
    assert!(matches!(s.delete("/t/c/1", Some(r1 + 1000)), Err(Error::Conflict { .. })));
    let (rev, old) = s.delete("/t/c/1", Some(r1)).expect("delete");
    assert!(rev > r1);
    assert_eq!(&*old.value, b"gone soon");
    assert!(s.get("/t/c/1").expect("get").is_none());
    assert!(matches!(s.delete("/t/c/1", None), Err(Error::NotFound(_))));
}

fn list_is_sorted_and_prefix_bounded(s: &impl Store) {
    for k in ["/t/d/b", "/t/d/a", "/t/d/c", "/t/dd/x", "/t/e/a"] {
        s.create(k, k.as_bytes()).expect("create");
    }
    let (items, rev) = s.list("/t/d/").expect("list");
    let keys: Vec<_> = items.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["/t/d/a", "/t/d/b", "/t/d/c"]);
    assert_eq!(rev, s.current_revision());
}

async fn next(w: &mut super::WatchStream) -> super::Event {
    tokio::time::timeout(Duration::from_secs(5), w.recv())
        .await
        .expect("event within 5s")
        .expect("stream open")
        .expect("no error")
}

async fn watch_replays_history_then_goes_live(s: &impl Store) {
    let start = s.current_revision();
    let r1 = s.create("/t/w/1", b"a").expect("create");
    s.create("/t/other/1", b"x").expect("create");
    let r2 = s.update("/t/w/1", b"b", r1).expect("update");
    let mut w = s.watch("/t/w/", start).expect("watch");
    let e1 = next(&mut w).await;
    assert_eq!((e1.kind, e1.revision, e1.created, &*e1.value), (EventKind::Put, r1, true, &b"a"[..]));
    let e2 = next(&mut w).await;
    assert_eq!((e2.revision, e2.prev.as_deref()), (r2, Some(&b"a"[..])));
    let (r3, _) = s.delete("/t/w/1", None).expect("delete");
    let e3 = next(&mut w).await;
    assert_eq!((e3.kind, e3.revision, &*e3.value), (EventKind::Delete, r3, &b"b"[..]));
    // A watch from the middle sees only what came after.
    let mut w2 = s.watch("/t/w/", r2).expect("watch");
    assert_eq!(next(&mut w2).await.revision, r3);
}

async fn compaction_makes_old_revisions_gone(s: &impl Store) {
    let r = s.create("/t/k/1", b"a").expect("create");
    s.compact(r).expect("compact");
    assert_eq!(s.compacted_revision(), r);
    assert!(matches!(s.watch("/t/k/", r - 1), Err(Error::Compacted { .. })));
    let mut w = s.watch("/t/k/", r).expect("watch at the compacted revision is allowed");
    let r2 = s.update("/t/k/1", b"b", r).expect("update");
    assert_eq!(next(&mut w).await.revision, r2);
    assert!(s.get("/t/k/1").expect("get").is_some(), "compaction keeps current values");
}

fn restart_keeps_data_and_revision<S: Store, F: Fn() -> S>(open: &F) {
    let (rev, compacted) = {
        let s = open();
        s.create("/t/p/1", b"durable").expect("create");
        (s.current_revision(), s.compacted_revision())
    };
    let s = open();
    assert_eq!(s.current_revision(), rev);
    assert_eq!(s.compacted_revision(), compacted);
    assert_eq!(&*s.get("/t/p/1").expect("get").expect("survives restart").value, b"durable");
    let r = s.create("/t/p/2", b"x").expect("create");
    assert_eq!(r, rev + 1, "revisions continue after a restart");
}

fn concurrent_cas_writers_lose_no_update<S: Store>(s: Arc<S>) {
    s.create("/t/counter", b"0").expect("create");
    let threads: Vec<_> = (0..4)
        .map(|_| {
            let s = s.clone();
            std::thread::spawn(move || {
                for _ in 0..25 {
                    loop {
                        let kv = s.get("/t/counter").expect("get").expect("present");
                        let n: u64 = std::str::from_utf8(&kv.value).expect("utf8").parse().expect("number");
                        match s.update("/t/counter", (n + 1).to_string().as_bytes(), kv.mod_revision) {
                            Ok(_) => break,
                            Err(Error::Conflict { .. }) => continue,
                            Err(e) => panic!("unexpected {e}"),
                        }
                    }
                }
            })
        })
        .collect();
    for t in threads {
        t.join().expect("writer thread");
    }
    let kv = s.get("/t/counter").expect("get").expect("present");
    assert_eq!(&*kv.value, b"100");
}
