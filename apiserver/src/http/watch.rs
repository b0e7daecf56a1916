//! `?watch=true`: newline-delimited watch events streamed from the cache, filtered per watcher.

use super::errors::{ApiError, ApiResult};
use super::lists::{await_rv, cache_err, selectors};
use super::table::{self, IncludeObject};
use super::{Query, Shared};
use crate::cache::{CacheError, CachedObject, WatchEvent, WatchEventType};
use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use kaji_api::resources::ResourceInfo;
use kaji_api::selector::{FieldSelector, LabelSelector};
use serde_json::{json, Value};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, mpsc};

/// Default stream lifetime when the client sets none (Kubernetes: 30-60 min).
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);
const BOOKMARK_EVERY: Duration = Duration::from_secs(60);

struct Filter {
    ns: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    fn matches(&self, o: &CachedObject) -> bool {
        o.matches(self.ns.as_deref(), &self.labels, &self.fields)
    }

    /// The event this watcher sees, if any: an object leaving the selector is DELETED for it.
    fn view(&self, ev: &WatchEvent) -> Option<WatchEventType> {
        let now = self.matches(&ev.object);
        match ev.kind {
            WatchEventType::Added => now.then_some(WatchEventType::Added),
            WatchEventType::Deleted => now.then_some(WatchEventType::Deleted),
            WatchEventType::Modified => {
                let before = ev.prev.as_ref().is_some_and(|p| self.matches(p));
                match (before, now) {
                    (true, true) => Some(WatchEventType::Modified),
                    (false, true) => Some(WatchEventType::Added),
                    (true, false) => Some(WatchEventType::Deleted),
                    (false, false) => None,
                }
            }
        }
    }
}

struct Encoder {
    kind: &'static str,
    table: Option<&'static str>,
    include: IncludeObject,
    columns_sent: bool,
}

impl Encoder {
    fn event(&mut self, t: WatchEventType, o: &CachedObject) -> Bytes {
        let mut line = Vec::with_capacity(o.json.len() + 40);
        line.extend_from_slice(b"{\"type\":\"");
        line.extend_from_slice(t.as_str().as_bytes());
        line.extend_from_slice(b"\",\"object\":");
        match self.table {
            None => line.extend_from_slice(&o.json),
            Some(tv) => {
                let obj = o.value();
                let meta = json!({"resourceVersion": o.rv.to_string()});
                let t = table::table(self.kind, tv, &[obj], meta, self.include, !self.columns_sent);
                self.columns_sent = true;
                line.extend_from_slice(t.to_string().as_bytes());
            }
        }
        line.extend_from_slice(b"}\n");
        Bytes::from(line)
    }
}

fn line(v: &Value) -> Bytes {
    let mut s = v.to_string();
    s.push('\n');
    Bytes::from(s)
}

fn bookmark(info: &ResourceInfo, rev: u64, initial_end: bool) -> Bytes {
    let mut meta = json!({"resourceVersion": rev.to_string()});
    if initial_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    line(
        &json!({"type": "BOOKMARK", "object": {"kind": info.kind, "apiVersion": info.api_version(), "metadata": meta}}),
    )
}

pub async fn serve(
    s: &Shared,
    info: &'static ResourceInfo,
    ns: Option<&str>,
    name: Option<&str>,
    q: &Query,
    accept: &str,
) -> ApiResult<Response> {
    let (labels, mut fields) = selectors(info, q)?;
    if let Some(n) = name {
        let sel = match fields.requirements().is_empty() {
            true => format!("metadata.name={n}"),
            false => format!("{},metadata.name={n}", q.get("fieldSelector").unwrap_or("")),
        };
        fields = FieldSelector::parse(&sel).map_err(|e| ApiError::bad_request(e.to_string()))?;
    }
    let filter = Filter { ns: ns.map(str::to_string), labels, fields };
    let rv = q.get("resourceVersion").filter(|r| !r.is_empty());
    let send_initial = q.flag("sendInitialEvents");
    let after = match rv {
        None | Some("0") => None,
        Some(n) => {
            Some(n.parse::<u64>().map_err(|_| ApiError::bad_request(format!("invalid resource version: {n:?}")))?)
        }
    };
    if let Some(n) = after {
        await_rv(s, Some(&n.to_string())).await?;
    }
    let timeout =
        q.int("timeoutSeconds")?.filter(|t| *t > 0).map(|t| Duration::from_secs(t as u64)).unwrap_or(DEFAULT_TIMEOUT);
    let bookmarks = q.flag("allowWatchBookmarks");
    let rc = s.cache.resource(info.kind).ok_or_else(|| ApiError::internal("no cache for resource"))?.clone();
    let (tx, rx) = mpsc::channel::<Result<Bytes, Infallible>>(256);
    let mut enc = Encoder {
        kind: info.kind,
        table: table::table_version(accept),
        include: IncludeObject::parse(q.get("includeObject")),
        columns_sent: false,
    };
    match rc.subscribe(if send_initial { None } else { after }, s.cache.revision()) {
        Err(CacheError::Gone { requested, oldest }) => {
            // Kubernetes answers 200 and one ERROR event carrying a 410 Status.
            let status = cache_err(CacheError::Gone { requested, oldest }).status_json();
            let _ = tx.try_send(Ok(line(&json!({"type": "ERROR", "object": status}))));
        }
        Err(e) => return Err(cache_err(e)),
        Ok(sub) => {
            let mut shutdown = s.shutdown.clone();
            let start_rev = sub.rev;
            tokio::spawn(async move {
                let _ = pump(
                    sub.initial,
                    sub.live,
                    &filter,
                    &mut enc,
                    &tx,
                    info,
                    start_rev,
                    send_initial,
                    bookmarks,
                    timeout,
                    &mut shutdown,
                )
                .await;
            });
        }
    }
    let stream = futures::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|b| (b, rx)) });
    Ok(([(header::CONTENT_TYPE, "application/json")], Body::from_stream(stream)).into_response())
}

/// Send initial events, then live ones, until timeout, shutdown, lag or the client leaves.
#[allow(clippy::too_many_arguments)]
async fn pump(
    initial: Vec<Arc<WatchEvent>>,
    mut live: broadcast::Receiver<Arc<WatchEvent>>,
    filter: &Filter,
    enc: &mut Encoder,
    tx: &mpsc::Sender<Result<Bytes, Infallible>>,
    info: &'static ResourceInfo,
    start_rev: u64,
    send_initial: bool,
    bookmarks: bool,
    timeout: Duration,
    shutdown: &mut tokio::sync::watch::Receiver<bool>,
) -> Option<()> {
    let mut last_rev = start_rev;
    for ev in &initial {
        if let Some(t) = filter.view(ev) {
            tx.send(Ok(enc.event(t, &ev.object))).await.ok()?;
        }
        last_rev = last_rev.max(ev.rev);
    }
    if send_initial {
        tx.send(Ok(bookmark(info, last_rev, true))).await.ok()?;
    }
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let mut tick = tokio::time::interval(BOOKMARK_EVERY);
    tick.tick().await;
    loop {
        tokio::select! {
            ev = live.recv() => match ev {
                Ok(ev) => {
                    if let Some(t) = filter.view(&ev) {
                        tx.send(Ok(enc.event(t, &ev.object))).await.ok()?;
                    }
                    last_rev = ev.rev;
                }
                Err(broadcast::error::RecvError::Lagged(n)) => {
                    tracing::warn!(resource = info.plural, missed = n, "closing a watch that fell behind");
                    return None;
                }
                Err(broadcast::error::RecvError::Closed) => return None,
            },
            _ = tick.tick(), if bookmarks => {
                tx.send(Ok(bookmark(info, last_rev, false))).await.ok()?;
            }
            _ = &mut deadline => return Some(()),
            _ = shutdown.changed() => return Some(()),
            _ = tx.closed() => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Map;

    fn obj(app: &str) -> Arc<CachedObject> {
        let mut labels = Map::new();
        labels.insert("app".into(), app.into());
        Arc::new(CachedObject {
            key: "/registry/pods/default/p".into(),
            namespace: Some("default".into()),
            name: "p".into(),
            rv: 1,
            labels: Some(labels),
            fields: vec![],
            json: Bytes::from_static(b"{}"),
        })
    }

    fn filter(sel: &str) -> Filter {
        Filter {
            ns: Some("default".into()),
            labels: LabelSelector::parse(sel).expect("selector"),
            fields: FieldSelector::default(),
        }
    }

    fn modified(from: &str, to: &str) -> WatchEvent {
        WatchEvent { kind: WatchEventType::Modified, rev: 2, object: obj(to), prev: Some(obj(from)) }
    }

    #[test]
    fn an_object_leaving_the_selector_is_deleted_for_that_watcher() {
        let f = filter("app=web");
        assert_eq!(f.view(&modified("web", "db")), Some(WatchEventType::Deleted));
        assert_eq!(f.view(&modified("db", "web")), Some(WatchEventType::Added));
        assert_eq!(f.view(&modified("web", "web")), Some(WatchEventType::Modified));
        assert_eq!(f.view(&modified("db", "db")), None);
    }

    #[test]
    fn other_namespaces_are_not_seen() {
        let f = Filter {
            ns: Some("kube-system".into()),
            labels: LabelSelector::default(),
            fields: FieldSelector::default(),
        };
        assert_eq!(f.view(&modified("web", "web")), None);
    }
}
