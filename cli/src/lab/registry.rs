//! The lab's OCI registry: Debian's `docker-registry` inside the lab namespace at
//! 172.30.0.1:5000 (every node reaches it over the lab bridge; the agents list it as an insecure,
//! plain-HTTP registry), seeded with busybox built on the spot, and `kaji lab image push`.
//! Pushes run on a thread that entered the lab namespace, so the host's stays untouched.

use super::oci::{self, Upload};
use super::topology::{Lab, REGISTRY};
use super::{net, State};
use anyhow::{bail, Context, Result};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The busybox image every lab's registry starts with.
pub const SEED: &str = "kaji/busybox:lab";

pub fn config_path(lab: &Lab) -> PathBuf {
    lab.dir.join("registry/config.yml")
}

/// Writes the registry's config (storage under the lab dir, listening on the bridge address).
pub fn write_config(lab: &Lab) -> Result<()> {
    let dir = lab.dir.join("registry");
    std::fs::create_dir_all(dir.join("data"))?;
    let config = format!(
        "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\nstorage:\n  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\nhttp:\n  addr: {REGISTRY}\n",
        dir.join("data").display()
    );
    std::fs::write(config_path(lab), config).context("cannot write the registry config")
}

/// Waits for the registry to answer `/v2/`, then pushes the seed image built from `rootfs`.
pub async fn seed(lab: &Lab, rootfs: &Path) -> Result<()> {
    publish(lab, oci::from_rootfs(rootfs, SEED, &["sh"])?, SEED).await
}

/// Waits for the registry to answer `/v2/`, then pushes `upload` as `repo_tag`.
pub async fn publish(lab: &Lab, upload: Upload, repo_tag: &'static str) -> Result<()> {
    let netns = lab.netns();
    tokio::task::spawn_blocking(move || {
        net::block_on_in(&netns, move || async move {
            wait(Duration::from_secs(20)).await?;
            push(&upload, repo_tag).await
        })
    })
    .await??;
    Ok(())
}

/// `kaji lab image push <path> [--name repo:tag]`: prints the reference pods should use.
pub async fn push_command(state: &State, path: &Path, name: Option<String>) -> Result<()> {
    let upload = oci::read(path)?;
    let Some(name) = name.or_else(|| upload.name.clone()) else {
        bail!("{} does not name its image; pass --name repository:tag", path.display())
    };
    let target = oci::repository_and_tag(&name);
    let netns = state.lab.netns();
    let pushed = target.clone();
    let digest = tokio::task::spawn_blocking(move || {
        net::block_on_in(&netns, move || async move { push(&upload, &pushed).await })
    })
    .await??;
    println!("pushed {REGISTRY}/{target} ({digest})");
    println!("use it as image: {REGISTRY}/{target}");
    Ok(())
}

fn client() -> reqwest::Client {
    // reqwest is built with rustls-no-provider: a client needs a process-wide provider first.
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

async fn wait(timeout: Duration) -> Result<()> {
    let client = client();
    let deadline = Instant::now() + timeout;
    loop {
        match client.get(format!("http://{REGISTRY}/v2/")).send().await {
            Ok(r) if r.status().is_success() => return Ok(()),
            Ok(r) if Instant::now() > deadline => bail!("the registry answers {} (see registry.log)", r.status()),
            Err(e) if Instant::now() > deadline => {
                bail!("the registry does not answer on {REGISTRY}: {e} (see registry.log)")
            }
            _ => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
}

/// Pushes every blob the registry lacks, then the manifests; the last one is tagged. Returns
/// the tagged manifest's digest.
async fn push(upload: &Upload, repo_tag: &str) -> Result<String> {
    let (repo, tag) = repo_tag.rsplit_once(':').context("want repository:tag")?;
    let base = format!("http://{REGISTRY}/v2/{repo}");
    let client = client();
    for (digest, bytes) in &upload.blobs {
        if client.head(format!("{base}/blobs/{digest}")).send().await?.status().is_success() {
            continue;
        }
        let start = client.post(format!("{base}/blobs/uploads/")).send().await?;
        if start.status() != reqwest::StatusCode::ACCEPTED {
            bail!("starting the upload of {digest}: {}", start.status());
        }
        let location = start.headers().get("location").context("upload without Location")?.to_str()?.to_string();
        let location = if location.starts_with('/') { format!("http://{REGISTRY}{location}") } else { location };
        let sep = if location.contains('?') { '&' } else { '?' };
        let done = client
            .put(format!("{location}{sep}digest={digest}"))
            .header("content-type", "application/octet-stream")
            .body(bytes.clone())
            .send()
            .await?;
        if !done.status().is_success() {
            bail!("uploading {digest}: {} {}", done.status(), done.text().await.unwrap_or_default());
        }
    }
    let mut last = String::new();
    for (i, (media, body)) in upload.manifests.iter().enumerate() {
        last = oci::digest(body);
        let mut refs = vec![last.clone()];
        if i + 1 == upload.manifests.len() {
            refs.push(tag.to_string());
        }
        for r in refs {
            let resp = client
                .put(format!("{base}/manifests/{r}"))
                .header("content-type", media.as_str())
                .body(body.clone())
                .send()
                .await?;
            if !resp.status().is_success() {
                bail!("putting manifest {r}: {} {}", resp.status(), resp.text().await.unwrap_or_default());
            }
        }
    }
    Ok(last)
}
