//! Audit logging as kube-apiserver does it (`--audit-policy-file`, `--audit-log-*`): the policy
//! decides each request's level, the pipeline records its stages, one writer thread logs them.
//! No policy file, no audit.

pub mod backend;
pub mod event;
pub mod policy;
pub mod record;

pub use record::Recorder;

/// The audit flags.
#[derive(Debug, Clone, Default)]
pub struct Config {
    /// `--audit-policy-file`: without it nothing is audited.
    pub policy_file: Option<std::path::PathBuf>,
    /// `--audit-log-path` and its rotation: without a path nothing is written.
    pub log: Option<backend::LogConfig>,
}

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Policy(#[from] policy::Error),
    #[error(transparent)]
    Backend(#[from] backend::Error),
}

/// The policy and where its events go.
pub struct Audit {
    policy: policy::Policy,
    backend: backend::Backend,
}

impl Audit {
    /// Some when both a policy file and a log path are given (as kube-apiserver, which audits
    /// nothing without a policy and has no backend without a path).
    pub fn start(config: &Config, counters: backend::Counters) -> Result<Option<Self>, Error> {
        let (Some(policy_file), Some(log)) = (&config.policy_file, &config.log) else {
            if config.policy_file.is_some() || config.log.is_some() {
                tracing::warn!("audit logging needs both --audit-policy-file and --audit-log-path; nothing is audited");
            }
            return Ok(None);
        };
        let policy = policy::Policy::load(policy_file)?;
        let backend = backend::Backend::start(log, counters)?;
        tracing::info!(policy = %policy_file.display(), log = %log.path.display(), "auditing requests");
        Ok(Some(Self { policy, backend }))
    }

    /// Writes what is queued before the process exits (at most `timeout`; blocks).
    pub fn flush(&self, timeout: std::time::Duration) -> bool {
        self.backend.flush(timeout)
    }
}
