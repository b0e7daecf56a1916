//! `kaji lab status` (each component running or not, the API, each node) and `kaji lab logs`.

use super::topology::Lab;
use super::{procs, up, State};
use anyhow::{bail, Context, Result};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, ListParams};
use std::fmt::Write as _;
use std::io::{Read as _, Seek as _, Write as _};
use std::time::Duration;

/// Writes to stdout; false once the reader is gone (`kaji lab logs -f agent-1 | head` is not
/// an error).
fn emit(bytes: &[u8]) -> Result<bool> {
    let mut out = std::io::stdout().lock();
    match out.write_all(bytes).and_then(|()| out.flush()) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Prints the lab's state; fails unless every component runs and the API answers.
pub async fn status(state: &State) -> Result<()> {
    let lab = &state.lab;
    let mut out = String::new();
    writeln!(out, "lab in {}: port {}, {} node(s)", lab.dir.display(), lab.port, lab.nodes)?;
    let mut down = 0;
    for c in &state.components {
        let place = c.netns.as_deref().unwrap_or("host network namespace");
        match procs::running(&lab.dir, c) {
            Some(pid) => writeln!(out, "  {:<20} running (pid {pid}, {place})", c.name)?,
            None => {
                down += 1;
                writeln!(out, "  {:<20} not running", c.name)?;
            }
        }
    }
    let client = super::security::client(lab).await?;
    let api = tokio::time::timeout(Duration::from_secs(5), client.apiserver_version()).await;
    let api_ready = matches!(api, Ok(Ok(_)));
    writeln!(out, "API {}: {}", lab.server(), if api_ready { "ready" } else { "not answering" })?;
    if api_ready {
        let nodes = Api::<Node>::all(client).list(&ListParams::default()).await?;
        for i in lab.node_ids() {
            let name = Lab::node_name(i);
            let node = nodes.items.iter().find(|n| n.metadata.name.as_deref() == Some(name.as_str()));
            let cidr = node.and_then(|n| n.spec.as_ref()?.pod_cidr.clone()).unwrap_or_else(|| "none yet".into());
            let state = match node {
                Some(n) if up::ready(n) => "Ready",
                Some(_) => "NotReady",
                None => "not registered",
            };
            writeln!(out, "  node {name:<16} {state:<15} ip {:<12} podCIDR {cidr}", Lab::node_ip(i))?;
        }
    }
    writeln!(out, "kubeconfig: {}", lab.dir.join("kubeconfig").display())?;
    emit(out.as_bytes())?;
    if down > 0 || !api_ready {
        bail!(
            "the lab is not healthy: {down} component(s) not running{}",
            if api_ready { "" } else { ", API not answering" }
        );
    }
    Ok(())
}

/// Prints `<dir>/<component>.log`; with `follow`, keeps printing what is appended until Ctrl-C.
pub async fn logs(state: &State, name: &str, follow: bool) -> Result<()> {
    let c = state.component(name)?;
    let path = procs::log_file(&state.lab.dir, &c.name);
    let mut file = std::fs::File::open(&path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut buf = Vec::new();
    file.read_to_end(&mut buf)?;
    if !emit(&buf)? || !follow {
        return Ok(());
    }
    let mut pos = file.stream_position()?;
    loop {
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return Ok(()),
            _ = tokio::time::sleep(Duration::from_millis(250)) => {}
        }
        let len = std::fs::metadata(&path)?.len();
        if len < pos {
            // Truncated meanwhile: start over.
            pos = 0;
        }
        file.seek(std::io::SeekFrom::Start(pos))?;
        buf.clear();
        file.read_to_end(&mut buf)?;
        pos += buf.len() as u64;
        if !emit(&buf)? {
            return Ok(());
        }
    }
}
