//! The PodSecurity plugin's configuration (`PodSecurityConfiguration`,
//! `pod-security.admission.config.k8s.io/v1`), read from `--admission-control-config-file`'s
//! `AdmissionConfiguration` entry for the plugin `PodSecurity`, inline or by `path`, as
//! kube-apiserver reads it. Without one: privileged everywhere, nobody exempt.

use kaji_api::pod_security::{Level, LevelVersion, Policy, Version};
use serde_json::Value;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("failed to read {path}")]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{path}: {why}")]
    Invalid { path: PathBuf, why: String },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

const API_VERSIONS: &[&str] = &[
    "pod-security.admission.config.k8s.io/v1",
    "pod-security.admission.config.k8s.io/v1beta1",
    "pod-security.admission.config.k8s.io/v1alpha1",
];

/// Cluster defaults and exemptions.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Config {
    /// The policy of a namespace without `pod-security.kubernetes.io/*` labels.
    pub defaults: Policy,
    pub exempt_usernames: Vec<String>,
    pub exempt_runtime_classes: Vec<String>,
    pub exempt_namespaces: Vec<String>,
}

impl Config {
    /// The `PodSecurity` entry of the admission configuration file, or the defaults when it has none.
    pub fn load(file: &Path) -> Result<Config> {
        let read =
            |p: &Path| std::fs::read_to_string(p).map_err(|source| Error::Read { path: p.to_path_buf(), source });
        let invalid = |p: &Path, why: String| Error::Invalid { path: p.to_path_buf(), why };
        let doc: Value = serde_saphyr::from_str(&read(file)?).map_err(|e| invalid(file, e.to_string()))?;
        if doc.get("kind").and_then(Value::as_str) != Some("AdmissionConfiguration") {
            return Err(invalid(file, "not an AdmissionConfiguration".into()));
        }
        let plugins = doc.get("plugins").and_then(Value::as_array).cloned().unwrap_or_default();
        let Some(entry) = plugins.iter().find(|p| p.get("name").and_then(Value::as_str) == Some("PodSecurity")) else {
            return Ok(Config::default());
        };
        match (entry.get("configuration").filter(|c| !c.is_null()), entry.get("path").and_then(Value::as_str)) {
            (Some(inline), _) => parse(inline).map_err(|why| invalid(file, why)),
            (None, Some(rel)) => {
                let path = file.parent().unwrap_or(Path::new(".")).join(rel);
                let text = read(&path)?;
                let v: Value = serde_saphyr::from_str(&text).map_err(|e| invalid(&path, e.to_string()))?;
                parse(&v).map_err(|why| invalid(&path, why))
            }
            (None, None) => Ok(Config::default()),
        }
    }

    pub fn exempt_namespace(&self, ns: &str) -> bool {
        self.exempt_namespaces.iter().any(|n| n == ns)
    }

    pub fn exempt_user(&self, user: &str) -> bool {
        self.exempt_usernames.iter().any(|u| u == user)
    }

    pub fn exempt_runtime_class(&self, class: Option<&str>) -> bool {
        class.is_some_and(|c| self.exempt_runtime_classes.iter().any(|r| r == c))
    }
}

/// A `PodSecurityConfiguration` object, validated as Kubernetes does (a bad level or version,
/// an empty or repeated exemption, stops the start).
pub fn parse(v: &Value) -> std::result::Result<Config, String> {
    let api_version = v.get("apiVersion").and_then(Value::as_str).unwrap_or("");
    if v.get("kind").and_then(Value::as_str) != Some("PodSecurityConfiguration") || !API_VERSIONS.contains(&api_version)
    {
        return Err(format!("expected a PodSecurityConfiguration of {}", API_VERSIONS[0]));
    }
    let defaults = v.get("defaults").unwrap_or(&Value::Null);
    let mode = |level_key: &str| -> std::result::Result<LevelVersion, String> {
        let field = |k: &str, fallback: &str| defaults.get(k).and_then(Value::as_str).unwrap_or(fallback).to_string();
        let level = field(level_key, "privileged");
        let version = field(&format!("{level_key}-version"), "latest");
        Ok(LevelVersion {
            level: Level::parse(&level).map_err(|e| format!("defaults.{level_key}: Invalid value: {level:?}: {e}"))?,
            version: Version::parse(&version)
                .map_err(|e| format!("defaults.{level_key}-version: Invalid value: {version:?}: {e}"))?,
        })
    };
    let policy = Policy { enforce: mode("enforce")?, audit: mode("audit")?, warn: mode("warn")? };
    let exemptions = v.get("exemptions").unwrap_or(&Value::Null);
    let list = |k: &str| -> std::result::Result<Vec<String>, String> {
        let mut out: Vec<String> = Vec::new();
        for (i, item) in exemptions.get(k).and_then(Value::as_array).into_iter().flatten().enumerate() {
            let s = item.as_str().unwrap_or("");
            if s.is_empty() {
                return Err(format!("exemptions.{k}[{i}]: Invalid value: \"\": must be non-empty"));
            }
            if out.iter().any(|o| o == s) {
                return Err(format!("exemptions.{k}[{i}]: Duplicate value: {s:?}"));
            }
            out.push(s.to_string());
        }
        Ok(out)
    };
    Ok(Config {
        defaults: policy,
        exempt_usernames: list("usernames")?,
        exempt_runtime_classes: list("runtimeClasses")?,
        exempt_namespaces: list("namespaces")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).expect("write");
        p
    }

    const INLINE: &str = "apiVersion: apiserver.config.k8s.io/v1
kind: AdmissionConfiguration
plugins:
- name: PodSecurity
  configuration:
    apiVersion: pod-security.admission.config.k8s.io/v1
    kind: PodSecurityConfiguration
    defaults:
      enforce: baseline
      warn: restricted
      warn-version: v1.30
    exemptions:
      usernames: [system:serviceaccount:kube-system:installer]
      runtimeClasses: [kata]
      namespaces: [kube-system]
";

    #[test]
    fn an_inline_configuration_sets_defaults_and_exemptions() {
        let dir = tempfile::tempdir().expect("tempdir");
        let c = Config::load(&write(dir.path(), "admission.yaml", INLINE)).expect("loads");
        assert_eq!(c.defaults.enforce.to_string(), "baseline:latest");
        assert_eq!(c.defaults.warn.to_string(), "restricted:v1.30");
        assert_eq!(c.defaults.audit.to_string(), "privileged:latest");
        assert!(c.exempt_namespace("kube-system") && !c.exempt_namespace("default"));
        assert!(c.exempt_user("system:serviceaccount:kube-system:installer"));
        assert!(c.exempt_runtime_class(Some("kata")) && !c.exempt_runtime_class(None));
    }

    #[test]
    fn a_configuration_by_path_is_read_beside_the_admission_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        write(
            dir.path(),
            "psa.yaml",
            "apiVersion: pod-security.admission.config.k8s.io/v1\nkind: PodSecurityConfiguration\ndefaults:\n  enforce: restricted\n",
        );
        let file = write(
            dir.path(),
            "admission.yaml",
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins:\n- name: PodSecurity\n  path: psa.yaml\n",
        );
        assert_eq!(Config::load(&file).expect("loads").defaults.enforce.level, Level::Restricted);
    }

    #[test]
    fn bad_levels_and_empty_exemptions_stop_the_start() {
        let dir = tempfile::tempdir().expect("tempdir");
        let bad = INLINE.replace("enforce: baseline", "enforce: strict");
        let err = Config::load(&write(dir.path(), "a.yaml", &bad)).expect_err("bad level");
        assert!(err.to_string().contains("defaults.enforce: Invalid value: \"strict\""), "{err}");
        let empty = INLINE.replace("[kata]", "[\"\"]");
        assert!(Config::load(&write(dir.path(), "b.yaml", &empty)).is_err());
    }

    #[test]
    fn a_file_without_a_pod_security_entry_means_privileged_everywhere() {
        let dir = tempfile::tempdir().expect("tempdir");
        let file = write(
            dir.path(),
            "a.yaml",
            "apiVersion: apiserver.config.k8s.io/v1\nkind: AdmissionConfiguration\nplugins: []\n",
        );
        assert_eq!(Config::load(&file).expect("loads"), Config::default());
    }
}
