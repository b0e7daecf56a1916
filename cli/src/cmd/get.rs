//! `kaji get`: the server's Tables printed like kubectl, or the objects as json/yaml/name;
//! `-w` keeps printing changes.

use super::{targets, Target};
use crate::cluster::{query, Cluster, ACCEPT_TABLE};
use crate::errors::{self, Reported};
use crate::output::{self, emit, Format};
use crate::resources::Resource;
use crate::table::{Columns, Layout, Options};
use anyhow::{bail, Result};
use futures::TryStreamExt as _;
use kube::core::WatchEvent;
use serde_json::Value;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// TYPE [NAME...] or TYPE/NAME... — a type by plural, singular, short name or kind
    /// (pods, pod, po, deployments.apps, deploy, svc, ns...).
    #[arg(required = true, value_name = "TYPE[/NAME]")]
    pub targets: Vec<String>,
    /// Output format (default: the server's table).
    #[arg(short, long, value_enum)]
    pub output: Option<Format>,
    /// Label selector, e.g. `app=web,tier!=db`.
    #[arg(short = 'l', long)]
    pub selector: Option<String>,
    /// Field selector, e.g. `status.phase=Running`.
    #[arg(long)]
    pub field_selector: Option<String>,
    /// List across all namespaces (adds a NAMESPACE column).
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    /// After listing, keep printing changes.
    #[arg(short, long)]
    pub watch: bool,
    /// Add a LABELS column.
    #[arg(long)]
    pub show_labels: bool,
    /// Keep `metadata.managedFields` in json/yaml output (left out by default, as kubectl does).
    #[arg(long)]
    pub show_managed_fields: bool,
}

pub async fn run(cl: &Cluster, args: Args) -> Result<()> {
    let targets = targets(&args.targets)?;
    if args.watch && (targets.len() > 1 || targets[0].names.len() > 1) {
        bail!("you may only watch one resource type and at most one object");
    }
    if args.all_namespaces && targets.iter().any(|t| !t.names.is_empty()) {
        bail!("a resource cannot be retrieved by name across all namespaces");
    }
    let mut failures = 0;
    for (i, t) in targets.iter().enumerate() {
        let r = cl.resolve(&t.kind).await?;
        let ns = if args.all_namespaces { None } else { cl.namespace_for(&r) };
        if args.watch {
            return watch(cl, &r, ns, t.names.first().map(String::as_str), &args).await;
        }
        let (text, errs) = match args.output {
            None | Some(Format::Wide) => table(cl, &r, ns, t, &args).await?,
            Some(format) => objects(cl, &r, ns, t, &args, format, targets.len() == 1).await?,
        };
        // kubectl separates tables of different types with a blank line.
        if i > 0 && !text.is_empty() && matches!(args.output, None | Some(Format::Wide)) {
            emit("\n")?;
        }
        emit(&text)?;
        for e in &errs {
            eprintln!("{}", errors::one_line(e));
        }
        failures += errs.len();
    }
    if failures > 0 {
        return Err(Reported.into());
    }
    Ok(())
}

fn table_options(args: &Args, r: &Resource) -> Options {
    Options {
        wide: args.output == Some(Format::Wide),
        namespace: args.all_namespaces && r.namespaced,
        labels: args.show_labels,
    }
}

/// `labelSelector`, `fieldSelector` and `extra` as a query string.
fn list_query(args: &Args, name: Option<&str>, extra: &[(&str, &str)]) -> String {
    let fields = match (name, &args.field_selector) {
        (Some(n), Some(f)) => Some(format!("metadata.name={n},{f}")),
        (Some(n), None) => Some(format!("metadata.name={n}")),
        (None, f) => f.clone(),
    };
    let mut pairs: Vec<(&str, &str)> = Vec::new();
    if let Some(l) = &args.selector {
        pairs.push(("labelSelector", l));
    }
    if let Some(f) = &fields {
        pairs.push(("fieldSelector", f));
    }
    pairs.extend_from_slice(extra);
    query(&pairs)
}

/// The Table for `t` as text, and the errors of names that could not be read.
async fn table(
    cl: &Cluster,
    r: &Resource,
    ns: Option<&str>,
    t: &Target,
    args: &Args,
) -> Result<(String, Vec<anyhow::Error>)> {
    let opts = table_options(args, r);
    let path = r.path(ns);
    if t.names.is_empty() {
        let uri = format!("{path}?{}", list_query(args, None, &[("includeObject", "Metadata")]));
        let table = cl.get_json(&uri, ACCEPT_TABLE).await?;
        if table["rows"].as_array().is_none_or(Vec::is_empty) {
            super::no_resources(ns);
            return Ok((String::new(), Vec::new()));
        }
        return Ok((crate::table::render(&table, opts), Vec::new()));
    }
    let mut combined: Option<Value> = None;
    let mut errs = Vec::new();
    for name in &t.names {
        match cl.get_json(&format!("{path}/{name}?includeObject=Metadata"), ACCEPT_TABLE).await {
            Ok(tbl) => match combined.as_mut() {
                None => combined = Some(tbl),
                Some(c) => {
                    let rows = tbl["rows"].as_array().cloned().unwrap_or_default();
                    if let Some(all) = c["rows"].as_array_mut() {
                        all.extend(rows);
                    }
                }
            },
            Err(e) => errs.push(e),
        }
    }
    Ok((combined.map(|t| crate::table::render(&t, opts)).unwrap_or_default(), errs))
}

/// The objects for `t` as json, yaml or names.
async fn objects(
    cl: &Cluster,
    r: &Resource,
    ns: Option<&str>,
    t: &Target,
    args: &Args,
    format: Format,
    only_target: bool,
) -> Result<(String, Vec<anyhow::Error>)> {
    let path = r.path(ns);
    let mut items = Vec::new();
    let mut errs = Vec::new();
    if t.names.is_empty() {
        let list = cl.get_json(&format!("{path}?{}", list_query(args, None, &[])), "application/json").await?;
        items = list["items"].as_array().cloned().unwrap_or_default();
        if items.is_empty() && format == Format::Name {
            super::no_resources(ns);
        }
    } else {
        for name in &t.names {
            match cl.get_json(&format!("{path}/{name}"), "application/json").await {
                Ok(o) => items.push(o),
                Err(e) => errs.push(e),
            }
        }
    }
    let mut items: Vec<Value> = items.into_iter().map(|o| printable(o, r, args)).collect();
    let text = match format {
        Format::Name => items.iter().map(|o| output::name(&r.qualified_kind(), o) + "\n").collect(),
        _ if items.is_empty() && !errs.is_empty() => String::new(),
        _ => {
            let single = only_target && t.names.len() == 1;
            let doc = if single { items.swap_remove(0) } else { output::list(items) };
            if format == Format::Json {
                output::json(&doc)
            } else {
                output::yaml(&doc)?
            }
        }
    };
    Ok((text, errs))
}

/// An object as json/yaml/name output shows it: typed, managedFields only when asked for.
fn printable(obj: Value, r: &Resource, args: &Args) -> Value {
    let obj = output::with_type(obj, &r.api_version(), &r.kind);
    if args.show_managed_fields {
        obj
    } else {
        output::without_managed_fields(obj)
    }
}

/// `-w`: list (printing what is there), then watch from the list's resourceVersion.
async fn watch(cl: &Cluster, r: &Resource, ns: Option<&str>, name: Option<&str>, args: &Args) -> Result<()> {
    let tables = matches!(args.output, None | Some(Format::Wide));
    let accept = if tables { ACCEPT_TABLE } else { "application/json" };
    let path = r.path(ns);
    let include = if tables { &[("includeObject", "Metadata")][..] } else { &[] };
    let first = cl.get_json(&format!("{path}?{}", list_query(args, name, include)), accept).await?;
    let mut rv = first["metadata"]["resourceVersion"].as_str().unwrap_or("").to_string();
    let mut p = Printer {
        columns: tables.then(|| Columns::from_table(&first, table_options(args, r))),
        layout: Layout::default(),
        header_done: false,
        r,
        format: args.output,
    };
    if tables {
        if first["rows"].as_array().is_some_and(|rows| !rows.is_empty()) {
            p.print(&first)?;
        }
    } else {
        for item in first["items"].as_array().into_iter().flatten() {
            p.print(&printable(item.clone(), r, args))?;
        }
    }
    loop {
        let watch = [("watch", "1"), ("resourceVersion", rv.as_str()), ("allowWatchBookmarks", "true")];
        let q = list_query(args, name, &[include, &watch].concat());
        let req = http::Request::get(format!("{path}?{q}")).header(http::header::ACCEPT, accept).body(Vec::new())?;
        let stream = cl.client.request_events::<Value>(req).await.map_err(errors::api)?;
        futures::pin_mut!(stream);
        while let Some(event) = stream.try_next().await.map_err(errors::api)? {
            match event {
                WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
                    let meta = if tables { &o["rows"][0]["object"]["metadata"] } else { &o["metadata"] };
                    if let Some(v) = meta["resourceVersion"].as_str() {
                        rv = v.to_string();
                    }
                    if tables {
                        p.print(&o)?;
                    } else {
                        p.print(&printable(o, r, args))?;
                    }
                }
                WatchEvent::Bookmark(b) => rv = b.metadata.resource_version,
                WatchEvent::Error(s) => return Err(errors::api(kube::Error::Api(s))),
            }
        }
    }
}

/// Prints what a watch sees: table rows aligned with the first ones, or whole objects.
struct Printer<'a> {
    /// Fixed by the list: later watch Tables carry no column definitions.
    columns: Option<Columns>,
    layout: Layout,
    header_done: bool,
    r: &'a Resource,
    format: Option<Format>,
}

impl Printer<'_> {
    fn print(&mut self, obj: &Value) -> Result<()> {
        match (&self.columns, self.format) {
            (Some(cols), _) => {
                let mut rows = Vec::new();
                if !self.header_done {
                    rows.push(cols.header());
                    self.header_done = true;
                }
                rows.extend(cols.rows(obj));
                emit(&self.layout.render(&rows))
            }
            (None, Some(Format::Name)) => emit(&(output::name(&self.r.qualified_kind(), obj) + "\n")),
            (None, Some(Format::Json)) => emit(&output::json(obj)),
            (None, _) => emit(&format!("---\n{}", output::yaml(obj)?)),
        }
    }
}
