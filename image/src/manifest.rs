//! OCI and Docker v2 manifest, index and config documents, and the pure decisions on them: which
//! index entry matches our platform, how a layer is compressed, what the runtime config is.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
pub const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
pub const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
pub const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
pub const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
pub const DOCKER_CONFIG: &str = "application/vnd.docker.container.image.v1+json";
pub const OCI_LAYER_TAR: &str = "application/vnd.oci.image.layer.v1.tar";
pub const OCI_LAYER_GZIP: &str = "application/vnd.oci.image.layer.v1.tar+gzip";
pub const OCI_LAYER_ZSTD: &str = "application/vnd.oci.image.layer.v1.tar+zstd";
pub const DOCKER_LAYER_GZIP: &str = "application/vnd.docker.image.rootfs.diff.tar.gzip";

/// The `Accept` header for manifest requests, in order of preference.
pub const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.index.v1+json, \
    application/vnd.docker.distribution.manifest.list.v2+json, \
    application/vnd.oci.image.manifest.v1+json, \
    application/vnd.docker.distribution.manifest.v2+json";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Descriptor {
    #[serde(default)]
    pub media_type: String,
    pub digest: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub platform: Option<Platform>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

/// An OS/architecture pair (plus ARM variant), as in OCI index entries.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Platform {
    pub os: String,
    pub architecture: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub variant: Option<String>,
}

impl Platform {
    pub fn new(os: &str, architecture: &str, variant: Option<&str>) -> Platform {
        Platform { os: os.into(), architecture: architecture.into(), variant: variant.map(Into::into) }
    }

    /// The platform this process runs on, in Go's GOOS/GOARCH spelling.
    pub fn host() -> Platform {
        let (arch, variant) = match std::env::consts::ARCH {
            "x86_64" => ("amd64", None),
            "x86" => ("386", None),
            "aarch64" => ("arm64", Some("v8")),
            "arm" => ("arm", Some("v7")),
            "powerpc64" if cfg!(target_endian = "little") => ("ppc64le", None),
            "loongarch64" => ("loong64", None),
            other => (other, None),
        };
        Platform::new(std::env::consts::OS, arch, variant)
    }
}

impl std::fmt::Display for Platform {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        Ok(())
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Manifest {
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    pub config: Descriptor,
    pub layers: Vec<Descriptor>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Index {
    pub schema_version: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    pub manifests: Vec<Descriptor>,
}

/// A manifest-endpoint document: either a single-platform manifest or an index of them.
#[derive(Debug, Clone)]
pub enum Document {
    Manifest(Manifest),
    Index(Index),
}

/// Parses a manifest-endpoint body, using the response `Content-Type` when the body lacks `mediaType`.
pub fn parse_document(body: &[u8], content_type: Option<&str>) -> Result<Document> {
    #[derive(Deserialize)]
    #[serde(rename_all = "camelCase")]
    struct Probe {
        schema_version: Option<u32>,
        media_type: Option<String>,
        manifests: Option<serde_json::Value>,
    }
    let probe: Probe = serde_json::from_slice(body).map_err(|e| Error::invalid("manifest", e))?;
    if probe.schema_version == Some(1) {
        return Err(Error::invalid("manifest", "docker schema 1 manifests are not supported; re-push the image"));
    }
    let media_type = probe.media_type.as_deref().or(content_type.map(|c| c.split(';').next().unwrap_or(c).trim()));
    let is_index = match media_type {
        Some(OCI_INDEX | DOCKER_LIST) => true,
        Some(OCI_MANIFEST | DOCKER_MANIFEST) => false,
        _ => probe.manifests.is_some(),
    };
    if is_index {
        serde_json::from_slice(body).map(Document::Index).map_err(|e| Error::invalid("image index", e))
    } else {
        serde_json::from_slice(body).map(Document::Manifest).map_err(|e| Error::invalid("image manifest", e))
    }
}

/// Picks the index entry for `want`: same os and architecture, preferring the exact variant, then
/// no variant. arm64 treats a missing variant and `v8` as the same. Attestations are never picked.
pub fn select_platform<'a>(index: &'a Index, want: &Platform) -> Option<&'a Descriptor> {
    let normalize_variant = |arch: &str, v: Option<&str>| match (arch, v) {
        ("arm64", Some("v8")) => None,
        (_, v) => v.map(str::to_string),
    };
    let want_variant = normalize_variant(&want.architecture, want.variant.as_deref());
    let candidates = index.manifests.iter().filter(|d| {
        d.annotations.get("vnd.docker.reference.type").is_none_or(|t| t != "attestation-manifest")
            && d.platform.as_ref().is_some_and(|p| p.os == want.os && p.architecture == want.architecture)
    });
    let mut fallback = None;
    for d in candidates {
        let p = d.platform.as_ref().expect("filtered on platform presence");
        let variant = normalize_variant(&p.architecture, p.variant.as_deref());
        if variant == want_variant {
            return Some(d);
        }
        if variant.is_none() || fallback.is_none() {
            fallback = Some(d);
        }
    }
    fallback
}

/// How a layer blob is compressed, sniffed from its first bytes (docker archives do not say).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Zstd,
}

impl Compression {
    pub fn sniff(head: &[u8]) -> Compression {
        match head {
            [0x1f, 0x8b, ..] => Compression::Gzip,
            [0x28, 0xb5, 0x2f, 0xfd, ..] => Compression::Zstd,
            _ => Compression::None,
        }
    }
}

/// Whether `media_type` is a layer we can unpack (compression itself is sniffed from the bytes).
pub fn is_supported_layer(media_type: &str) -> bool {
    let base = media_type.trim();
    base.is_empty()
        || [OCI_LAYER_TAR, "application/vnd.oci.image.layer.nondistributable.v1.tar"]
            .iter()
            .any(|t| base == *t || base == format!("{t}+gzip") || base == format!("{t}+zstd"))
        || base.starts_with("application/vnd.docker.image.rootfs.") && !base.contains("encrypted")
}

/// The image config blob (`application/vnd.oci.image.config.v1+json`), the parts we use.
#[derive(Debug, Clone, Deserialize)]
pub struct ConfigFile {
    #[serde(default)]
    pub architecture: String,
    #[serde(default)]
    pub os: String,
    #[serde(default)]
    pub config: Option<RuntimeConfig>,
    pub rootfs: RootFs,
}

#[derive(Debug, Clone, Deserialize)]
pub struct RootFs {
    #[serde(default)]
    pub diff_ids: Vec<String>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "PascalCase")]
pub struct RuntimeConfig {
    pub user: Option<String>,
    pub exposed_ports: Option<BTreeMap<String, serde_json::Value>>,
    pub env: Option<Vec<String>>,
    pub entrypoint: Option<Vec<String>>,
    pub cmd: Option<Vec<String>>,
    pub working_dir: Option<String>,
    pub labels: Option<BTreeMap<String, String>>,
    pub stop_signal: Option<String>,
}

/// What the agent needs from an image's config to build a container spec.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ImageConfig {
    pub entrypoint: Vec<String>,
    pub cmd: Vec<String>,
    pub env: Vec<String>,
    pub working_dir: String,
    pub user: String,
    /// `80/tcp`, `53/udp`.
    pub exposed_ports: Vec<String>,
    pub labels: BTreeMap<String, String>,
    pub stop_signal: Option<String>,
}

impl From<RuntimeConfig> for ImageConfig {
    fn from(c: RuntimeConfig) -> ImageConfig {
        ImageConfig {
            entrypoint: c.entrypoint.unwrap_or_default(),
            cmd: c.cmd.unwrap_or_default(),
            env: c.env.unwrap_or_default(),
            working_dir: c.working_dir.unwrap_or_default(),
            user: c.user.unwrap_or_default(),
            exposed_ports: c.exposed_ports.unwrap_or_default().into_keys().collect(),
            labels: c.labels.unwrap_or_default(),
            stop_signal: c.stop_signal.filter(|s| !s.is_empty()),
        }
    }
}

/// Parses a config blob and checks it has one diff ID per manifest layer.
pub fn parse_config(body: &[u8], layer_count: usize) -> Result<ConfigFile> {
    let config: ConfigFile = serde_json::from_slice(body).map_err(|e| Error::invalid("image config", e))?;
    if config.rootfs.diff_ids.len() != layer_count {
        return Err(Error::invalid(
            "image config",
            format!("{} diff_ids for {} manifest layers", config.rootfs.diff_ids.len(), layer_count),
        ));
    }
    for diff_id in &config.rootfs.diff_ids {
        crate::reference::validate_digest(diff_id).map_err(|e| Error::invalid("image config", e))?;
    }
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(arch: &str, variant: Option<&str>, digest: &str) -> Descriptor {
        Descriptor {
            media_type: OCI_MANIFEST.into(),
            digest: digest.into(),
            size: 1,
            platform: Some(Platform::new("linux", arch, variant)),
            annotations: BTreeMap::new(),
        }
    }

    fn index(entries: Vec<Descriptor>) -> Index {
        Index { schema_version: 2, media_type: Some(OCI_INDEX.into()), manifests: entries }
    }

    #[test]
    fn selects_matching_platform() {
        let idx =
            index(vec![entry("arm", Some("v6"), "a6"), entry("amd64", None, "x"), entry("arm", Some("v7"), "a7")]);
        let pick = |p: Platform| select_platform(&idx, &p).map(|d| d.digest.clone());
        assert_eq!(pick(Platform::new("linux", "amd64", None)).as_deref(), Some("x"));
        assert_eq!(pick(Platform::new("linux", "arm", Some("v7"))).as_deref(), Some("a7"));
        assert_eq!(pick(Platform::new("linux", "s390x", None)), None);
        assert_eq!(pick(Platform::new("windows", "amd64", None)), None);
    }

    #[test]
    fn arm64_without_variant_matches_v8() {
        let idx = index(vec![entry("arm64", Some("v8"), "v8")]);
        assert_eq!(select_platform(&idx, &Platform::new("linux", "arm64", None)).map(|d| &d.digest[..]), Some("v8"));
        let idx = index(vec![entry("arm64", None, "none")]);
        let want = Platform::new("linux", "arm64", Some("v8"));
        assert_eq!(select_platform(&idx, &want).map(|d| &d.digest[..]), Some("none"));
    }

    #[test]
    fn never_selects_attestations() {
        let mut att = entry("amd64", None, "att");
        att.annotations.insert("vnd.docker.reference.type".into(), "attestation-manifest".into());
        let idx = index(vec![att, entry("amd64", None, "img")]);
        assert_eq!(select_platform(&idx, &Platform::new("linux", "amd64", None)).map(|d| &d.digest[..]), Some("img"));
    }

    #[test]
    fn parses_documents_by_media_type_or_shape() {
        let m = br#"{"schemaVersion":2,"config":{"digest":"c","size":1},"layers":[]}"#;
        assert!(matches!(parse_document(m, Some(DOCKER_MANIFEST)), Ok(Document::Manifest(_))));
        let i = br#"{"schemaVersion":2,"manifests":[]}"#;
        assert!(matches!(parse_document(i, None), Ok(Document::Index(_))));
        let s1 = br#"{"schemaVersion":1,"fsLayers":[]}"#;
        assert!(matches!(parse_document(s1, None), Err(Error::Invalid { .. })));
    }

    #[test]
    fn sniffs_compression_and_accepts_layer_types() {
        assert_eq!(Compression::sniff(&[0x1f, 0x8b, 8]), Compression::Gzip);
        assert_eq!(Compression::sniff(&[0x28, 0xb5, 0x2f, 0xfd]), Compression::Zstd);
        assert_eq!(Compression::sniff(b"etc/"), Compression::None);
        for t in [OCI_LAYER_TAR, OCI_LAYER_GZIP, OCI_LAYER_ZSTD, DOCKER_LAYER_GZIP] {
            assert!(is_supported_layer(t), "{t}");
        }
        assert!(!is_supported_layer("application/vnd.oci.image.layer.v1.tar+gzip+encrypted"));
        assert!(!is_supported_layer("application/vnd.cncf.helm.chart.content.v1.tar+gzip"));
    }

    #[test]
    fn config_requires_one_diff_id_per_layer() {
        let c = br#"{"config":{"Cmd":["sh"],"Env":null,"ExposedPorts":{"80/tcp":{}}},"rootfs":{"type":"layers","diff_ids":["sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"]}}"#;
        let parsed = parse_config(c, 1).expect("valid config");
        let ic = ImageConfig::from(parsed.config.unwrap_or_default());
        assert_eq!((ic.cmd, ic.env, ic.exposed_ports), (vec!["sh".to_string()], vec![], vec!["80/tcp".to_string()]));
        assert!(parse_config(c, 2).is_err());
        let escaping = br#"{"rootfs":{"diff_ids":["sha256:../../../../etc"]}}"#;
        assert!(parse_config(escaping, 1).is_err(), "diff IDs name directories and must be plain digests");
    }
}
