//! The Kubernetes release kaji implements, in one place: the API types (k8s-openapi's feature in
//! the workspace's Cargo.toml names the same minor), the apiserver's `/version`, the kubelet version
//! nodes report and the probes' User-Agent. The conformance suite kaji is measured with
//! (`tests/conformance`) is built from the same release.

/// Kubernetes' major version.
pub const MAJOR: &str = "1";
/// Kubernetes' minor version, as `/version` reports it (kubectl's dispatcher picks its client by it).
pub const MINOR: &str = "37";
/// The release, `v<major>.<minor>.<patch>`.
pub const RELEASE: &str = "v1.37.2";

/// The version kaji's components report: the release with kaji's own version as a pre-release
/// part (`v1.37.2-kaji.0.1.0`), a semantic version as clients parse it.
pub fn git_version() -> String {
    format!("{RELEASE}-kaji.{}", env!("CARGO_PKG_VERSION"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_release_and_the_minor_agree() {
        assert_eq!(RELEASE.split('.').nth(1), Some(MINOR));
        assert!(git_version().starts_with(&format!("{RELEASE}-kaji.")));
    }
}
