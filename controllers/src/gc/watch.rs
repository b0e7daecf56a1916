//! One watch per collectable resource: keeps that resource's store and the owner graph current,
//! then asks the controllers to look at the changed object and at whatever else the change concerns.

use super::graph::Node;
use super::Ctx;
use futures::StreamExt;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::{self, watcher, Event};
use kube::runtime::WatchStreamExt;
use std::collections::HashSet;
use std::sync::Arc;
use tokio::sync::watch;

/// Runs the watch on `ctx.resources[resource]` until `stop`; watch errors are retried with back-off.
pub async fn run(ctx: Arc<Ctx>, resource: usize, mut writer: Writer<DynamicObject>, mut stop: watch::Receiver<bool>) {
    let ar = ctx.resources[resource].ar.clone();
    let api: Api<DynamicObject> = Api::all_with(ctx.shared.client.clone(), &ar);
    let mut events = watcher(api, watcher::Config::default()).default_backoff().boxed();
    // The uids seen since the current (re)list began.
    let mut listed: Option<HashSet<String>> = None;
    loop {
        let event = tokio::select! {
            _ = stop.wait_for(|s| *s) => return,
            e = events.next() => e,
        };
        let event = match event {
            None => return,
            Some(Ok(event)) => event,
            Some(Err(e)) => {
                tracing::warn!(kind = %ar.kind, error = %e, "watch failed; retrying");
                continue;
            }
        };
        writer.apply_watcher_event(&event);
        let again = {
            let mut graph = ctx.graph();
            match &event {
                Event::Init => {
                    listed = Some(HashSet::new());
                    Vec::new()
                }
                Event::InitApply(obj) | Event::Apply(obj) => match Node::from_object(resource, obj) {
                    Some(node) => {
                        if let (Some(seen), Event::InitApply(_)) = (listed.as_mut(), &event) {
                            seen.insert(node.uid.clone());
                        }
                        let own = node.key.clone();
                        let mut again = graph.upsert(node);
                        again.push(own);
                        again
                    }
                    None => Vec::new(),
                },
                Event::Delete(obj) => obj.metadata.uid.as_deref().map(|uid| graph.remove(uid)).unwrap_or_default(),
                Event::InitDone => graph.retain_listed(resource, &listed.take().unwrap_or_default()),
            }
        };
        ctx.trigger(again);
    }
}
