//! Images as a registry wants them: blobs plus manifests, read from an OCI image layout or a
//! `docker save` archive, or built on the spot from a root filesystem (the seeded busybox).

use anyhow::{bail, Context, Result};
use serde_json::{json, Value};
use sha2::{Digest as _, Sha256};
use std::collections::BTreeMap;
use std::io::Read as _;
use std::path::Path;

pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const OCI_LAYER_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
const REF_NAME: &str = "org.opencontainers.image.ref.name";

/// What one push sends: blobs (by digest), then manifests in order (children before the index
/// that lists them), the last one also under `tag`.
#[derive(Debug, Default)]
pub struct Upload {
    /// `repository:tag` as found in the image (None: the user must name it).
    pub name: Option<String>,
    pub blobs: BTreeMap<String, Vec<u8>>,
    /// (media type, body)
    pub manifests: Vec<(String, Vec<u8>)>,
}

pub fn digest(bytes: &[u8]) -> String {
    format!("sha256:{:x}", Sha256::digest(bytes))
}

/// `registry.example:5000/team/app:1` → `team/app:1`; `app` → `app:latest`.
pub fn repository_and_tag(reference: &str) -> String {
    let mut parts: Vec<&str> = reference.split('/').collect();
    if parts.len() > 1 && (parts[0].contains('.') || parts[0].contains(':') || parts[0] == "localhost") {
        parts.remove(0);
    }
    let path = parts.join("/");
    let last = path.rsplit('/').next().unwrap_or_default();
    if last.contains(':') || last.contains('@') {
        path
    } else {
        format!("{path}:latest")
    }
}

/// An image from a root filesystem directory: one uncompressed layer, `Cmd` as given.
pub fn from_rootfs(rootfs: &Path, name: &str, cmd: &[&str]) -> Result<Upload> {
    let mut builder = tar::Builder::new(Vec::new());
    builder.follow_symlinks(false);
    let mut top: Vec<_> = std::fs::read_dir(rootfs)?.collect::<std::io::Result<_>>()?;
    top.sort_by_key(std::fs::DirEntry::file_name);
    for e in top {
        let name = e.file_name();
        if e.file_type()?.is_dir() {
            builder.append_dir_all(&name, e.path())
        } else {
            builder.append_path_with_name(e.path(), &name)
        }
        .with_context(|| format!("cannot pack {}", e.path().display()))?;
    }
    let layer = builder.into_inner()?;
    let config = serde_json::to_vec(&json!({
        "architecture": "amd64", "os": "linux",
        "config": {"Cmd": cmd, "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},
        "rootfs": {"type": "layers", "diff_ids": [digest(&layer)]},
    }))?;
    let mut up = Upload { name: Some(name.to_string()), ..Default::default() };
    let manifest = manifest(&mut up, config, vec![layer])?;
    up.manifests.push((OCI_MANIFEST.into(), manifest));
    Ok(up)
}

/// An OCI manifest over `config` and `layers` (gzip-compressed or plain tars), blobs recorded.
fn manifest(up: &mut Upload, config: Vec<u8>, layers: Vec<Vec<u8>>) -> Result<Vec<u8>> {
    let layer_descs: Vec<Value> = layers
        .iter()
        .map(|l| {
            let media = if l.starts_with(&[0x1f, 0x8b]) { OCI_LAYER_GZIP } else { OCI_LAYER_TAR };
            json!({"mediaType": media, "digest": digest(l), "size": l.len()})
        })
        .collect();
    let body = serde_json::to_vec(&json!({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": {"mediaType": OCI_CONFIG, "digest": digest(&config), "size": config.len()},
        "layers": layer_descs,
    }))?;
    up.blobs.insert(digest(&config), config);
    for l in layers {
        up.blobs.insert(digest(&l), l);
    }
    Ok(body)
}

/// An OCI image layout directory or a docker-archive tar.
pub fn read(path: &Path) -> Result<Upload> {
    if path.join("oci-layout").exists() {
        read_layout(path)
    } else if path.is_file() {
        read_docker_archive(path)
    } else {
        bail!("{} is neither an OCI image layout (no oci-layout file) nor a docker-archive tar", path.display())
    }
}

fn read_layout(dir: &Path) -> Result<Upload> {
    let blob = |d: &str| -> Result<Vec<u8>> {
        let hex = d.strip_prefix("sha256:").with_context(|| format!("unsupported digest {d}"))?;
        std::fs::read(dir.join("blobs/sha256").join(hex)).with_context(|| format!("blob {d} missing from the layout"))
    };
    let index: Value = serde_json::from_slice(&std::fs::read(dir.join("index.json")).context("index.json")?)?;
    let Some(top) = index["manifests"].as_array().and_then(|m| m.first()) else {
        bail!("the layout's index.json lists no image")
    };
    let mut up = Upload { name: top["annotations"][REF_NAME].as_str().map(str::to_string), ..Default::default() };
    collect(&mut up, top, &blob)?;
    Ok(up)
}

/// Pushes the descriptor's blobs and, children first, its manifests.
fn collect(up: &mut Upload, desc: &Value, blob: &dyn Fn(&str) -> Result<Vec<u8>>) -> Result<()> {
    let d = desc["digest"].as_str().context("descriptor without digest")?;
    let body = blob(d)?;
    let parsed: Value = serde_json::from_slice(&body)?;
    let media = desc["mediaType"].as_str().or(parsed["mediaType"].as_str()).unwrap_or(OCI_MANIFEST).to_string();
    if media == OCI_INDEX || media == DOCKER_LIST {
        for child in parsed["manifests"].as_array().into_iter().flatten() {
            collect(up, child, blob)?;
        }
    } else {
        let mut refs = vec![parsed["config"].clone()];
        refs.extend(parsed["layers"].as_array().cloned().unwrap_or_default());
        for r in refs {
            let d = r["digest"].as_str().context("blob descriptor without digest")?;
            up.blobs.insert(d.to_string(), blob(d)?);
        }
    }
    up.manifests.push((media, body));
    Ok(())
}

fn read_docker_archive(path: &Path) -> Result<Upload> {
    let file = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let mut files = BTreeMap::new();
    for entry in tar::Archive::new(file).entries()? {
        let mut entry = entry?;
        let name = entry.path()?.to_string_lossy().trim_start_matches("./").to_string();
        let mut bytes = Vec::new();
        entry.read_to_end(&mut bytes)?;
        files.insert(name, bytes);
    }
    let manifest: Value =
        serde_json::from_slice(files.get("manifest.json").context("no manifest.json in the archive")?)?;
    let image = &manifest[0];
    let take = |name: &str| files.get(name).cloned().with_context(|| format!("{name} missing from the archive"));
    let config = take(image["Config"].as_str().context("manifest.json names no Config")?)?;
    let layers = image["Layers"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|l| take(l.as_str().unwrap_or_default()))
        .collect::<Result<Vec<_>>>()?;
    let mut up = Upload { name: image["RepoTags"][0].as_str().map(str::to_string), ..Default::default() };
    let body = self::manifest(&mut up, config, layers)?;
    up.manifests.push((OCI_MANIFEST.into(), body));
    Ok(up)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_lose_their_registry_and_gain_a_tag() {
        assert_eq!(repository_and_tag("registry.example:5000/team/app:1"), "team/app:1");
        assert_eq!(repository_and_tag("docker.io/library/busybox"), "library/busybox:latest");
        assert_eq!(repository_and_tag("app"), "app:latest");
        assert_eq!(repository_and_tag("localhost/app:2"), "app:2");
        assert_eq!(repository_and_tag("team/app:3"), "team/app:3");
    }

    #[test]
    fn a_rootfs_becomes_one_layer_image_whose_blobs_match_its_manifest() {
        let tmp = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir_all(tmp.path().join("bin")).expect("mkdir");
        std::fs::write(tmp.path().join("bin/x"), "x").expect("write");
        std::os::unix::fs::symlink("x", tmp.path().join("bin/y")).expect("symlink");
        let up = from_rootfs(tmp.path(), "kaji/t:1", &["sh"]).expect("image");
        let (media, body) = &up.manifests[0];
        assert_eq!(media, OCI_MANIFEST);
        let m: Value = serde_json::from_slice(body).expect("json");
        let layer = &up.blobs[m["layers"][0]["digest"].as_str().expect("digest")];
        assert_eq!(m["layers"][0]["mediaType"], OCI_LAYER_TAR);
        assert!(up.blobs.contains_key(m["config"]["digest"].as_str().expect("config")));
        let names: Vec<String> = tar::Archive::new(&layer[..])
            .entries()
            .expect("tar")
            .map(|e| e.expect("entry").path().expect("path").to_string_lossy().into_owned())
            .collect();
        assert!(names.contains(&"bin/y".to_string()), "{names:?}");
    }
}
