//! `kaji delete`: by TYPE NAME, TYPE/NAME, label selector or manifest; then, like kubectl, wait
//! until each object is really gone (finalizers, graceful pod termination) unless `--wait=false`.

use super::targets;
use crate::cluster::Cluster;
use crate::errors::{self, Reported};
use crate::manifest;
use crate::output::emit;
use crate::resources::{self, Resource};
use anyhow::{bail, Context, Result};
use kube::api::{DeleteParams, ListParams, PropagationPolicy};
use kube::runtime::wait::{await_condition, conditions};
use std::time::Duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Cascade {
    /// Delete the object now; the garbage collector deletes its dependents afterwards.
    Background,
    /// Delete the dependents first; the object goes last.
    Foreground,
    /// Leave the dependents, without their owner reference.
    Orphan,
}

#[derive(clap::Args, Debug)]
pub struct Args {
    /// TYPE NAME... or TYPE/NAME... (or TYPE with -l/--all).
    #[arg(value_name = "TYPE[/NAME]")]
    pub targets: Vec<String>,
    /// Delete the objects in these manifests (files, directories, `-`).
    #[arg(short, long = "filename", value_name = "FILE|DIR|-")]
    pub files: Vec<String>,
    /// Also read the subdirectories of directories given with -f.
    #[arg(short = 'R', long)]
    pub recursive: bool,
    /// Delete the objects of TYPE matching this label selector.
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// Delete every object of TYPE in the namespace.
    #[arg(long)]
    pub all: bool,
    /// What happens to dependents (a Deployment's ReplicaSets, their pods).
    #[arg(long, value_enum, default_value = "background")]
    pub cascade: Cascade,
    /// Wait until the objects are gone (`--wait=false` returns at once).
    #[arg(long, default_value_t = true, num_args = 0..=1, default_missing_value = "true", action = clap::ArgAction::Set)]
    pub wait: bool,
    /// Seconds a pod gets to terminate (default: its terminationGracePeriodSeconds).
    #[arg(long)]
    pub grace_period: Option<u32>,
    /// A missing object is not an error.
    #[arg(long)]
    pub ignore_not_found: bool,
    /// Give up waiting after this long (e.g. 30s, 2m); default: wait as long as it takes.
    #[arg(long, value_parser = parse_duration)]
    pub timeout: Option<Duration>,
}

/// `90s`, `2m`, `1h`, `500ms`, or bare seconds.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let (num, unit) = s.find(|c: char| !c.is_ascii_digit()).map_or((s, "s"), |i| s.split_at(i));
    let n: u64 = num.parse().map_err(|_| format!("invalid duration {s:?} (e.g. 30s, 2m)"))?;
    Ok(match unit {
        "ms" => Duration::from_millis(n),
        "s" => Duration::from_secs(n),
        "m" => Duration::from_secs(n * 60),
        "h" => Duration::from_secs(n * 3600),
        _ => return Err(format!("invalid duration {s:?} (e.g. 30s, 2m)")),
    })
}

/// One object to delete.
struct Victim {
    r: Resource,
    ns: Option<String>,
    name: String,
}

pub async fn run(cl: &Cluster, args: Args) -> Result<()> {
    let victims = collect(cl, &args).await?;
    let dp = DeleteParams {
        propagation_policy: Some(match args.cascade {
            Cascade::Background => PropagationPolicy::Background,
            Cascade::Foreground => PropagationPolicy::Foreground,
            Cascade::Orphan => PropagationPolicy::Orphan,
        }),
        grace_period_seconds: args.grace_period,
        ..Default::default()
    };
    let mut failed = false;
    let mut pending = Vec::new();
    for v in &victims {
        let api = cl.api(&v.r, v.ns.as_deref());
        match api.delete(&v.name, &dp).await.map_err(errors::api) {
            Ok(res) => {
                emit(&format!("{} {:?} deleted\n", v.r.qualified_kind(), v.name))?;
                // Left: the object is still there (finalizers, graceful deletion).
                if let Some(uid) = res.left().and_then(|o| o.metadata.uid) {
                    pending.push((api, v, uid));
                }
            }
            Err(e) if args.ignore_not_found && errors::is_not_found(&e) => {}
            Err(e) => {
                failed = true;
                eprintln!("{}", errors::one_line(&e));
            }
        }
    }
    if args.wait {
        for (api, v, uid) in pending {
            let gone = await_condition(api, &v.name, conditions::is_deleted(&uid));
            let res = match args.timeout {
                Some(t) => tokio::time::timeout(t, gone).await.ok(),
                None => Some(gone.await),
            };
            match res {
                Some(Ok(_)) => {}
                Some(Err(e)) => bail!("waiting for {} {:?} to be deleted: {e}", v.r.qualified_kind(), v.name),
                None => bail!("timed out waiting for {} {:?} to be deleted", v.r.qualified_kind(), v.name),
            }
        }
    }
    if failed {
        return Err(Reported.into());
    }
    Ok(())
}

async fn collect(cl: &Cluster, args: &Args) -> Result<Vec<Victim>> {
    let mut out = Vec::new();
    if !args.files.is_empty() {
        if !args.targets.is_empty() {
            bail!("use either -f or TYPE NAME, not both");
        }
        for doc in manifest::read(&args.files, args.recursive)? {
            let o = &doc.object;
            let (av, kind) = (o["apiVersion"].as_str().unwrap_or(""), o["kind"].as_str().unwrap_or(""));
            let r = resources::for_kind(cl.resources().await?, av, kind)
                .with_context(|| format!("{}: no matches for kind {kind:?} in version {av:?}", doc.source))?
                .clone();
            let ns = o["metadata"]["namespace"].as_str().map(str::to_string).unwrap_or_else(|| cl.namespace.clone());
            let name = o["metadata"]["name"].as_str().unwrap_or("").to_string();
            out.push(Victim { ns: r.namespaced.then_some(ns), r, name });
        }
        return Ok(out);
    }
    if args.targets.is_empty() {
        bail!("you must specify the type of resource to delete, or -f");
    }
    for t in targets(&args.targets)? {
        let r = cl.resolve(&t.kind).await?;
        let ns = cl.namespace_for(&r).map(str::to_string);
        let names = match (t.names.is_empty(), &args.selector, args.all) {
            (false, None, false) => t.names,
            (true, Some(_), _) | (true, None, true) => {
                let lp = args.selector.as_deref().map_or_else(ListParams::default, |s| ListParams::default().labels(s));
                let list = cl.api(&r, ns.as_deref()).list(&lp).await.map_err(errors::api)?;
                if list.items.is_empty() {
                    super::no_resources(ns.as_deref());
                }
                list.items.into_iter().filter_map(|o| o.metadata.name).collect()
            }
            (true, None, false) => bail!("resource(s) were provided, but no name was specified"),
            (false, ..) => bail!("name cannot be provided when a selector or --all is specified"),
        };
        out.extend(names.into_iter().map(|name| Victim { r: r.clone(), ns: ns.clone(), name }));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_like_kubectls() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("2m"), Ok(Duration::from_secs(120)));
        assert_eq!(parse_duration("15"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("3d").is_err());
    }
}
