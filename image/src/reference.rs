//! Image references and docker's normalization rules: `busybox` is
//! `docker.io/library/busybox:latest`, `host:port/x` keeps its host, `@sha256:...` pins a digest.

use std::fmt;

use crate::error::{Error, Result};

pub const DOCKER_HUB: &str = "docker.io";
const DOCKER_HUB_API: &str = "registry-1.docker.io";

/// A fully qualified image reference.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Reference {
    /// `docker.io`, `quay.io`, `127.0.0.1:5000`.
    pub registry: String,
    /// `library/busybox`, `kaji/busybox`.
    pub repository: String,
    /// `latest` when neither tag nor digest was given.
    pub tag: Option<String>,
    /// `sha256:<64 hex>`.
    pub digest: Option<String>,
}

impl Reference {
    /// `registry/repository`, the name without tag or digest.
    pub fn name(&self) -> String {
        format!("{}/{}", self.registry, self.repository)
    }

    /// The host the registry's v2 API lives on (`docker.io` is served by `registry-1.docker.io`).
    pub fn api_host(&self) -> &str {
        if self.registry == DOCKER_HUB {
            DOCKER_HUB_API
        } else {
            &self.registry
        }
    }

    /// What to ask the registry's manifest endpoint for: the digest if pinned, else the tag.
    pub fn manifest_ref(&self) -> &str {
        self.digest.as_deref().or(self.tag.as_deref()).unwrap_or("latest")
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.repository)?;
        if let Some(tag) = &self.tag {
            write!(f, ":{tag}")?;
        }
        if let Some(digest) = &self.digest {
            write!(f, "@{digest}")?;
        }
        Ok(())
    }
}

/// Parses and normalizes `reference` the way docker and containerd do.
pub fn normalize(reference: &str) -> Result<Reference> {
    let bad = |reason: &str| Error::BadReference { reference: reference.to_string(), reason: reason.to_string() };
    if reference.is_empty() {
        return Err(bad("empty reference"));
    }
    let (rest, digest) = match reference.split_once('@') {
        Some((rest, digest)) => {
            validate_digest(digest).map_err(|reason| bad(&reason))?;
            (rest, Some(digest.to_string()))
        }
        None => (reference, None),
    };
    let last_slash = rest.rfind('/').map_or(0, |i| i + 1);
    let (name, tag) = match rest[last_slash..].rfind(':') {
        Some(i) => (&rest[..last_slash + i], Some(&rest[last_slash + i + 1..])),
        None => (rest, None),
    };
    if let Some(tag) = tag {
        if !valid_tag(tag) {
            return Err(bad("tag must be 1-128 characters of [A-Za-z0-9_.-], not starting with '.' or '-'"));
        }
    }
    let (registry, repository) = match name.split_once('/') {
        Some((first, rest)) if first.contains(['.', ':']) || first == "localhost" => (first.to_string(), rest),
        _ => (DOCKER_HUB.to_string(), name),
    };
    let registry = if registry == "index.docker.io" { DOCKER_HUB.to_string() } else { registry };
    let repository = if registry == DOCKER_HUB && !repository.contains('/') {
        format!("library/{repository}")
    } else {
        repository.to_string()
    };
    if repository.chars().any(|c| c.is_ascii_uppercase()) {
        return Err(bad("repository name must be lowercase"));
    }
    if !repository.split('/').all(valid_path_component) {
        return Err(bad("repository path components must be [a-z0-9] separated by '.', '_', '__' or '-'"));
    }
    let tag = match (tag, &digest) {
        (Some(tag), _) => Some(tag.to_string()),
        (None, Some(_)) => None,
        (None, None) => Some("latest".to_string()),
    };
    Ok(Reference { registry, repository, tag, digest })
}

/// Checks `sha256:<64 lowercase hex>`, the only digest algorithm registries use in practice.
pub fn validate_digest(digest: &str) -> Result<(), String> {
    let Some(hex) = digest.strip_prefix("sha256:") else {
        return Err(format!("digest {digest:?} is not sha256:<hex>"));
    };
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)) {
        return Err(format!("digest {digest:?} does not have 64 lowercase hex characters"));
    }
    Ok(())
}

fn valid_tag(tag: &str) -> bool {
    let mut bytes = tag.bytes();
    let first_ok = bytes.next().is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_');
    first_ok && tag.len() <= 128 && bytes.all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'))
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`
fn valid_path_component(component: &str) -> bool {
    let bytes = component.as_bytes();
    let alnum = |b: u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    if bytes.is_empty() || !alnum(bytes[0]) || !alnum(bytes[bytes.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < bytes.len() {
        if alnum(bytes[i]) {
            i += 1;
            continue;
        }
        let start = i;
        while i < bytes.len() && !alnum(bytes[i]) {
            i += 1;
        }
        let sep = &component[start..i];
        if !(sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|b| b == b'-')) {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: &str = "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn normalizes_like_docker() {
        let table = [
            ("busybox", "docker.io/library/busybox:latest"),
            ("busybox:1.36", "docker.io/library/busybox:1.36"),
            ("library/busybox", "docker.io/library/busybox:latest"),
            ("docker.io/busybox", "docker.io/library/busybox:latest"),
            ("index.docker.io/library/busybox:1", "docker.io/library/busybox:1"),
            ("kaji/app", "docker.io/kaji/app:latest"),
            ("quay.io/coreos/etcd:v3.5", "quay.io/coreos/etcd:v3.5"),
            ("localhost/app", "localhost/app:latest"),
            ("127.0.0.1:5000/kaji/busybox:1", "127.0.0.1:5000/kaji/busybox:1"),
            ("registry:5000/app", "registry:5000/app:latest"),
            ("[::1]:5000/app:v1", "[::1]:5000/app:v1"),
            ("a/b/c/d_e__f.g-h---i:t", "docker.io/a/b/c/d_e__f.g-h---i:t"),
        ];
        for (input, want) in table {
            let got = normalize(input).unwrap_or_else(|e| panic!("{input}: {e}"));
            assert_eq!(got.to_string(), want, "{input}");
        }
    }

    #[test]
    fn keeps_digest_without_inventing_a_tag() {
        let r = normalize(&format!("busybox@{D}")).expect("valid");
        assert_eq!(r.to_string(), format!("docker.io/library/busybox@{D}"));
        assert_eq!(r.manifest_ref(), D);
        let r = normalize(&format!("127.0.0.1:5000/x:1@{D}")).expect("valid");
        assert_eq!((r.tag.as_deref(), r.manifest_ref()), (Some("1"), D));
    }

    #[test]
    fn rejects_malformed_references() {
        for input in [
            "",
            "Busybox",
            "busybox:",
            "busybox:-x",
            "busybox@sha256:abc",
            "busybox@md5:e3b0c44298fc1c149afbf4c8996fb924",
            "a//b",
            "a/-b",
            "host:5000/app:t:u",
            "a b",
        ] {
            assert!(matches!(normalize(input), Err(Error::BadReference { .. })), "{input:?} should be rejected");
        }
    }

    #[test]
    fn docker_hub_is_served_from_registry_1() {
        assert_eq!(normalize("busybox").expect("valid").api_host(), "registry-1.docker.io");
        assert_eq!(normalize("127.0.0.1:5000/a").expect("valid").api_host(), "127.0.0.1:5000");
    }
}
