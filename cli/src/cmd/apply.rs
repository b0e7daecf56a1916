//! `kaji apply -f`: create what is missing, patch what differs, leave the rest — client-side by
//! default, as kubectl; `--server-side` leaves the merge and field ownership to the apiserver.

use crate::cluster::Cluster;
use crate::errors::{self, Reported};
use crate::manifest::{self, Doc};
use crate::merge::{self, LAST_APPLIED};
use crate::output::emit;
use crate::resources;
use anyhow::{anyhow, bail, Result};
use kube::api::{DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{json, Value};

/// Field manager kaji's writes are recorded under unless --field-manager says otherwise.
pub const MANAGER: &str = "kaji";

#[derive(clap::Args, Debug)]
#[command(after_help = "\
How: each object is read (GET); a missing one is created (POST), an existing one gets a JSON \
merge patch with the fields that differ — 'unchanged' when none do. The manifest is kept in the \
kubectl.kubernetes.io/last-applied-configuration annotation, like kubectl's client-side apply, \
so a field removed from the manifest is removed from the object, and kubectl and kaji can take \
turns. Lists are replaced whole when they differ. --server-side sends the manifest as \
application/apply-patch+yaml instead: the apiserver merges it (lists by their keys), removes \
fields this field manager applied before and left out now, and refuses to change fields another \
manager set (a conflict) unless --force-conflicts.")]
pub struct Args {
    /// A manifest file, a directory of them (.yaml, .yml, .json) or `-` for stdin; repeatable.
    #[arg(short, long = "filename", required = true, value_name = "FILE|DIR|-")]
    pub files: Vec<String>,
    /// Also read the subdirectories of directories given with -f.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// Server-side apply: the apiserver merges the manifest and tracks who owns which field.
    #[arg(long)]
    pub server_side: bool,
    /// With --server-side: take over fields other managers own instead of failing on conflicts.
    #[arg(long, requires = "server_side")]
    pub force_conflicts: bool,
    /// The name the writes are recorded under in managedFields.
    #[arg(long, default_value = MANAGER, value_name = "NAME")]
    pub field_manager: String,
}

pub async fn run(cl: &Cluster, args: Args) -> Result<()> {
    let docs = manifest::read(&args.files, args.recursive)?;
    let mut failed = false;
    for doc in &docs {
        match apply(cl, doc, &args).await {
            Ok(line) => emit(&format!("{line}\n"))?,
            Err(e) => {
                failed = true;
                eprintln!("{}", errors::one_line(&e));
            }
        }
    }
    if failed {
        return Err(Reported.into());
    }
    Ok(())
}

/// Applies one object; the line to print (`deployment.apps/web configured`).
async fn apply(cl: &Cluster, doc: &Doc, args: &Args) -> Result<String> {
    let mut obj = doc.object.clone();
    let api_version = obj["apiVersion"].as_str().unwrap_or("").to_string();
    let kind = obj["kind"].as_str().unwrap_or("").to_string();
    let name = obj["metadata"]["name"].as_str().unwrap_or("").to_string();
    let own_ns = obj["metadata"]["namespace"].as_str().map(str::to_string);
    let Some(r) = resources::for_kind(cl.resources().await?, &api_version, &kind).cloned() else {
        bail!(
            "resource mapping not found for name: {name:?} namespace: {:?} from {:?}: no matches for kind {kind:?} in version {api_version:?}",
            own_ns.unwrap_or_default(),
            doc.source
        );
    };
    if name.is_empty() {
        bail!("error when applying {kind} from {:?}: metadata.name is required", doc.source);
    }
    let ns = if r.namespaced {
        let ns = namespace(own_ns.as_deref(), &cl.namespace, cl.namespace_flag)?;
        obj["metadata"]["namespace"] = json!(ns);
        Some(ns)
    } else {
        None
    };
    let api = cl.api(&r, ns.as_deref());
    let what = format!("{}/{name}", r.qualified_kind());
    if args.server_side {
        let mut pp = PatchParams::apply(&args.field_manager);
        pp.force = args.force_conflicts;
        api.patch(&name, &pp, &Patch::Apply(&obj)).await.map_err(conflict_hint)?;
        return Ok(format!("{what} serverside-applied"));
    }
    let desired = with_last_applied(obj)?;
    let live = api.get_opt(&name).await.map_err(errors::api)?;
    let Some(live) = live else {
        let pp = PostParams { field_manager: Some(args.field_manager.clone()), ..Default::default() };
        let body: DynamicObject = serde_json::from_value(desired)?;
        api.create(&pp, &body).await.map_err(errors::api)?;
        return Ok(format!("{what} created"));
    };
    let live = serde_json::to_value(&live)?;
    let original: Option<Value> =
        live["metadata"]["annotations"][LAST_APPLIED].as_str().and_then(|s| serde_json::from_str(s).ok());
    let patch = merge::three_way(original.as_ref(), &desired, &live);
    if patch.is_empty() {
        return Ok(format!("{what} unchanged"));
    }
    let pp = PatchParams { field_manager: Some(args.field_manager.clone()), ..Default::default() };
    api.patch(&name, &pp, &Patch::Merge(Value::Object(patch))).await.map_err(errors::api)?;
    Ok(format!("{what} configured"))
}

/// A server-side apply conflict as kubectl words it, with the way out.
fn conflict_hint(e: kube::Error) -> anyhow::Error {
    match &e {
        kube::Error::Api(s) if s.code == 409 && s.message.starts_with("Apply failed") => anyhow!(
            "{}\nre-run with --force-conflicts to take these fields over, or leave them out of the manifest",
            s.message
        ),
        _ => errors::api(e),
    }
}

/// The namespace a namespaced object goes to: its own, else `-n`/the context's; a manifest's
/// namespace that contradicts an explicit `-n` is refused, as kubectl does.
fn namespace(own: Option<&str>, current: &str, explicit: bool) -> Result<String> {
    match own.filter(|n| !n.is_empty()) {
        Some(own) if explicit && own != current => Err(anyhow!(
            "the namespace from the provided object {own:?} does not match the namespace {current:?}. \
             You must pass '--namespace={own}' to perform this operation."
        )),
        Some(own) => Ok(own.to_string()),
        None => Ok(current.to_string()),
    }
}

/// The manifest with itself (as compact JSON, without this annotation) in the last-applied
/// annotation, as kubectl records it.
fn with_last_applied(mut obj: Value) -> Result<Value> {
    // `pointer_mut`, not indexing: `obj["metadata"]["annotations"]` would add a null.
    if let Some(a) = obj.pointer_mut("/metadata/annotations").and_then(Value::as_object_mut) {
        a.remove(LAST_APPLIED);
        if a.is_empty() {
            obj["metadata"].as_object_mut().map(|m| m.remove("annotations"));
        }
    }
    let text = serde_json::to_string(&obj)? + "\n";
    obj["metadata"]["annotations"][LAST_APPLIED] = json!(text);
    Ok(obj)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_objects_namespace_wins_unless_it_contradicts_dash_n() {
        assert_eq!(namespace(Some("prod"), "default", false).expect("own"), "prod");
        assert_eq!(namespace(None, "dev", true).expect("flag"), "dev");
        assert_eq!(namespace(Some("dev"), "dev", true).expect("same"), "dev");
        let err = namespace(Some("prod"), "dev", true).expect_err("mismatch").to_string();
        assert!(err.contains("\"prod\" does not match the namespace \"dev\""), "{err}");
    }

    #[test]
    fn last_applied_is_the_manifest_itself() {
        let plain = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}});
        let out = with_last_applied(plain).expect("annotated");
        assert_eq!(
            out["metadata"]["annotations"][LAST_APPLIED],
            "{\"apiVersion\":\"v1\",\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"c\"}}\n"
        );

        let obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
                         "metadata": {"name": "c", "annotations": {LAST_APPLIED: "stale"}}, "data": {"k": "v"}});
        let out = with_last_applied(obj).expect("annotated");
        let text = out["metadata"]["annotations"][LAST_APPLIED].as_str().expect("annotation");
        assert_eq!(
            text,
            "{\"apiVersion\":\"v1\",\"data\":{\"k\":\"v\"},\"kind\":\"ConfigMap\",\"metadata\":{\"name\":\"c\"}}\n"
        );
    }
}
