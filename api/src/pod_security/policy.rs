//! Levels, versions and a namespace's policy from its `pod-security.kubernetes.io/*` labels
//! (`pod-security-admission/api/helpers.go`).

use std::collections::BTreeMap;
use std::fmt;

pub const ENFORCE_LABEL: &str = "pod-security.kubernetes.io/enforce";
pub const ENFORCE_VERSION_LABEL: &str = "pod-security.kubernetes.io/enforce-version";
pub const AUDIT_LABEL: &str = "pod-security.kubernetes.io/audit";
pub const AUDIT_VERSION_LABEL: &str = "pod-security.kubernetes.io/audit-version";
pub const WARN_LABEL: &str = "pod-security.kubernetes.io/warn";
pub const WARN_VERSION_LABEL: &str = "pod-security.kubernetes.io/warn-version";

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Level {
    Privileged,
    Baseline,
    Restricted,
}

impl Level {
    pub fn as_str(self) -> &'static str {
        match self {
            Level::Privileged => "privileged",
            Level::Baseline => "baseline",
            Level::Restricted => "restricted",
        }
    }

    /// `ParseLevel`: an unknown level is an error (the caller picks the fallback).
    pub fn parse(s: &str) -> Result<Level, String> {
        match s {
            "privileged" => Ok(Level::Privileged),
            "baseline" => Ok(Level::Baseline),
            "restricted" => Ok(Level::Restricted),
            _ => Err("must be one of privileged, baseline, restricted".into()),
        }
    }
}

/// `latest` or `v1.<minor>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Version {
    #[default]
    Latest,
    V1(u32),
}

impl Version {
    /// `ParseVersion`: `latest` or `v1.x` (no leading zeros); anything else is an error.
    pub fn parse(s: &str) -> Result<Version, String> {
        const WHY: &str = "must be \"latest\" or \"v1.x\"";
        if s == "latest" {
            return Ok(Version::Latest);
        }
        let minor = s.strip_prefix("v1.").ok_or(WHY)?;
        let digits_only = !minor.is_empty() && minor.bytes().all(|b| b.is_ascii_digit());
        if !digits_only || (minor.len() > 1 && minor.starts_with('0')) {
            return Err(WHY.into());
        }
        minor.parse().map(Version::V1).map_err(|_| WHY.into())
    }

    /// The minor version checks are selected by; latest has every check.
    pub fn minor(self) -> u32 {
        match self {
            Version::Latest => u32::MAX,
            Version::V1(m) => m,
        }
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Version::Latest => f.write_str("latest"),
            Version::V1(m) => write!(f, "v1.{m}"),
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LevelVersion {
    pub level: Level,
    pub version: Version,
}

impl LevelVersion {
    pub const PRIVILEGED: LevelVersion = LevelVersion { level: Level::Privileged, version: Version::Latest };
}

impl fmt::Display for LevelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.level.as_str(), self.version)
    }
}

/// What a namespace enforces, audits and warns about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    pub enforce: LevelVersion,
    pub audit: LevelVersion,
    pub warn: LevelVersion,
}

impl Default for Policy {
    /// Kubernetes' defaults without a configuration: privileged:latest everywhere.
    fn default() -> Self {
        Self { enforce: LevelVersion::PRIVILEGED, audit: LevelVersion::PRIVILEGED, warn: LevelVersion::PRIVILEGED }
    }
}

/// A label that did not parse: `metadata.labels[<label>]: Invalid value: "<value>": <why>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyError {
    pub label: &'static str,
    pub value: String,
    pub message: String,
}

impl Policy {
    /// `PolicyToEvaluate`: the labels over `defaults`. A policy is always returned: a bad enforce
    /// level fails closed (restricted), a bad audit or warn level fails open (privileged), a bad
    /// version is latest; the errors say which labels were bad.
    pub fn from_labels(labels: &BTreeMap<String, String>, defaults: Policy) -> (Policy, Vec<PolicyError>) {
        let mut p = defaults;
        let mut errs = Vec::new();
        let mut level = |label: &'static str, fallback: Level, into: &mut LevelVersion| {
            if let Some(v) = labels.get(label) {
                into.level = Level::parse(v).unwrap_or_else(|message| {
                    errs.push(PolicyError { label, value: v.clone(), message });
                    fallback
                });
            }
        };
        level(ENFORCE_LABEL, Level::Restricted, &mut p.enforce);
        level(AUDIT_LABEL, Level::Privileged, &mut p.audit);
        level(WARN_LABEL, Level::Privileged, &mut p.warn);
        let mut version = |label: &'static str, into: &mut LevelVersion| {
            if let Some(v) = labels.get(label) {
                into.version = Version::parse(v).unwrap_or_else(|message| {
                    errs.push(PolicyError { label, value: v.clone(), message });
                    Version::Latest
                });
            }
        };
        version(ENFORCE_VERSION_LABEL, &mut p.enforce);
        version(AUDIT_VERSION_LABEL, &mut p.audit);
        version(WARN_VERSION_LABEL, &mut p.warn);
        (p, errs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn versions_are_latest_or_v1_minor_without_leading_zeros() {
        assert_eq!(Version::parse("latest"), Ok(Version::Latest));
        assert_eq!(Version::parse("v1.0"), Ok(Version::V1(0)));
        assert_eq!(Version::parse("v1.25"), Ok(Version::V1(25)));
        for bad in ["v1.05", "v2.1", "1.25", "v1.", "v1.x", "Latest"] {
            assert!(Version::parse(bad).is_err(), "{bad}");
        }
        assert_eq!(Version::V1(25).to_string(), "v1.25");
    }

    #[test]
    fn labels_override_the_defaults_mode_by_mode() {
        let defaults =
            Policy { enforce: LevelVersion { level: Level::Baseline, version: Version::Latest }, ..Policy::default() };
        let (p, errs) =
            Policy::from_labels(&labels(&[(WARN_LABEL, "restricted"), (WARN_VERSION_LABEL, "v1.30")]), defaults);
        assert!(errs.is_empty());
        assert_eq!(p.enforce.to_string(), "baseline:latest");
        assert_eq!(p.warn.to_string(), "restricted:v1.30");
        assert_eq!(p.audit.to_string(), "privileged:latest");
    }

    #[test]
    fn a_bad_enforce_level_fails_closed_and_bad_audit_or_warn_levels_fail_open() {
        let (p, errs) = Policy::from_labels(
            &labels(&[(ENFORCE_LABEL, "strict"), (WARN_LABEL, "loud"), (ENFORCE_VERSION_LABEL, "v9")]),
            Policy::default(),
        );
        assert_eq!(p.enforce.to_string(), "restricted:latest");
        assert_eq!(p.warn.level, Level::Privileged);
        assert_eq!(errs.len(), 3);
        assert_eq!(errs[0].label, ENFORCE_LABEL);
        assert_eq!(errs[0].message, "must be one of privileged, baseline, restricted");
    }
}
