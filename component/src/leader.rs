//! Leader election through a coordination.k8s.io/v1 Lease, as client-go's leaderelection does:
//! one holder renews the lease; others take it over once it has not been renewed for its duration.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kube::api::{Api, PostParams};
use std::time::Duration;

#[derive(Clone, Debug)]
pub struct LeaderElection {
    pub lease_name: String,
    pub namespace: String,
    pub identity: String,
    pub lease_duration: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl LeaderElection {
    /// client-go's defaults: lease `lease_name` (e.g. `kube-scheduler`) in `kube-system`,
    /// 15 s / 10 s / 2 s.
    pub fn new(lease_name: &str, identity: String) -> Self {
        Self {
            lease_name: lease_name.into(),
            namespace: "kube-system".into(),
            identity,
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// client-go's checks (`NewLeaderElector`): lease duration > renew deadline > 1.2 × retry
    /// period > 0; and, since a Lease holds whole seconds, a lease of at least a second.
    pub fn validate(&self) -> Result<(), String> {
        if self.retry_period.is_zero() {
            return Err("--leader-elect-retry-period must be greater than zero".into());
        }
        if self.lease_duration < Duration::from_secs(1) {
            return Err("--leader-elect-lease-duration must be at least 1s (a Lease counts whole seconds)".into());
        }
        if self.lease_duration <= self.renew_deadline {
            return Err("--leader-elect-lease-duration must be greater than --leader-elect-renew-deadline".into());
        }
        if self.renew_deadline <= self.retry_period.mul_f64(1.2) {
            return Err(
                "--leader-elect-renew-deadline must be greater than --leader-elect-retry-period times 1.2 (client-go's jitter factor)".into(),
            );
        }
        Ok(())
    }
}

#[derive(Debug, PartialEq, Eq)]
pub enum Decision {
    /// No lease yet: create it.
    Create,
    /// We hold it: renew.
    Renew,
    /// Free or expired: take it over.
    TakeOver,
    /// Someone else holds a live lease, for this much longer unless they renew it.
    Wait { expires_in: Duration },
}

/// How one attempt to acquire or renew ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Attempt {
    /// We hold the lease.
    Held,
    /// Someone else does; with the time left on their lease when that is known.
    NotHeld { expires_in: Option<Duration> },
}

/// What to do with the lease as it stands at `now`.
pub fn decide(lease: Option<&Lease>, me: &str, now: jiff::Timestamp) -> Decision {
    let Some(spec) = lease.map(|l| l.spec.clone().unwrap_or_default()) else { return Decision::Create };
    match spec.holder_identity.as_deref() {
        Some(h) if h == me => return Decision::Renew,
        None | Some("") => return Decision::TakeOver,
        Some(_) => {}
    }
    let renewed = spec.renew_time.or(spec.acquire_time).map(|t| t.0.as_millisecond()).unwrap_or(0);
    let duration_ms = i64::from(spec.lease_duration_seconds.unwrap_or(0)) * 1000;
    let left_ms = renewed + duration_ms - now.as_millisecond();
    if left_ms < 0 {
        Decision::TakeOver
    } else {
        Decision::Wait { expires_in: Duration::from_millis(left_ms.unsigned_abs()) }
    }
}

/// One attempt to acquire or renew.
pub async fn try_acquire_or_renew(api: &Api<Lease>, cfg: &LeaderElection) -> Result<Attempt, kube::Error> {
    let now = jiff::Timestamp::now();
    let current = api.get_opt(&cfg.lease_name).await?;
    let decision = decide(current.as_ref(), &cfg.identity, now);
    let old = current.as_ref().and_then(|l| l.spec.clone()).unwrap_or_default();
    let mut spec = LeaseSpec {
        holder_identity: Some(cfg.identity.clone()),
        lease_duration_seconds: Some(i32::try_from(cfg.lease_duration.as_secs()).unwrap_or(i32::MAX)),
        renew_time: Some(MicroTime(now)),
        acquire_time: Some(MicroTime(now)),
        lease_transitions: old.lease_transitions,
        ..LeaseSpec::default()
    };
    let result = match (decision, current) {
        (Decision::Wait { expires_in }, _) => return Ok(Attempt::NotHeld { expires_in: Some(expires_in) }),
        (Decision::Create, _) => {
            spec.lease_transitions = Some(0);
            let lease = Lease {
                metadata: ObjectMeta { name: Some(cfg.lease_name.clone()), ..ObjectMeta::default() },
                spec: Some(spec),
            };
            api.create(&PostParams::default(), &lease).await
        }
        (d, Some(mut lease)) => {
            if d == Decision::Renew {
                spec.acquire_time = old.acquire_time;
            } else {
                spec.lease_transitions = Some(old.lease_transitions.unwrap_or(0) + 1);
            }
            lease.spec = Some(spec);
            // resourceVersion is kept, so a concurrent writer makes this a 409 Conflict.
            api.replace(&cfg.lease_name, &PostParams::default(), &lease).await
        }
        (_, None) => return Ok(Attempt::NotHeld { expires_in: None }),
    };
    match result {
        Ok(_) => Ok(Attempt::Held),
        Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::NotHeld { expires_in: None }),
        Err(e) => Err(e),
    }
}

/// Waits until we hold the lease. A standby tries again every retry period, or as soon as the
/// holder's lease runs out if that comes first: a dead leader is replaced when its lease expires,
/// not up to a retry period later.
pub async fn acquire(api: &Api<Lease>, cfg: &LeaderElection) {
    loop {
        let mut wait = cfg.retry_period;
        match try_acquire_or_renew(api, cfg).await {
            Ok(Attempt::Held) => {
                tracing::info!(lease = %cfg.lease_name, identity = %cfg.identity, "acquired the lease");
                return;
            }
            Ok(Attempt::NotHeld { expires_in }) => {
                tracing::debug!(lease = %cfg.lease_name, ?expires_in, "lease held by another instance");
                wait = next_try(cfg.retry_period, expires_in);
            }
            Err(e) => tracing::warn!(lease = %cfg.lease_name, error = %e, "cannot acquire the lease"),
        }
        tokio::time::sleep(wait).await;
    }
}

/// When a standby tries again: after the retry period, or just after the holder's lease expires.
pub fn next_try(retry_period: Duration, expires_in: Option<Duration>) -> Duration {
    expires_in.map_or(retry_period, |left| retry_period.min(left + Duration::from_millis(10)))
}

/// Renews the lease every retry period; returns when it could not be renewed within the renew deadline.
pub async fn hold(api: &Api<Lease>, cfg: &LeaderElection) {
    loop {
        tokio::time::sleep(cfg.retry_period).await;
        let deadline = tokio::time::Instant::now() + cfg.renew_deadline;
        loop {
            match tokio::time::timeout_at(deadline, try_acquire_or_renew(api, cfg)).await {
                Ok(Ok(Attempt::Held)) => break,
                Ok(Ok(Attempt::NotHeld { .. })) => return,
                Ok(Err(e)) => tracing::warn!(error = %e, "cannot renew the lease; retrying"),
                Err(_) => return,
            }
            if tokio::time::timeout_at(deadline, tokio::time::sleep(cfg.retry_period)).await.is_err() {
                return;
            }
        }
    }
}

/// Gives the lease up (on shutdown) so another instance need not wait for it to expire.
pub async fn release(api: &Api<Lease>, cfg: &LeaderElection) {
    let Ok(Some(mut lease)) = api.get_opt(&cfg.lease_name).await else { return };
    let Some(spec) = lease.spec.as_mut() else { return };
    if spec.holder_identity.as_deref() != Some(cfg.identity.as_str()) {
        return;
    }
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    if let Err(e) = api.replace(&cfg.lease_name, &PostParams::default(), &lease).await {
        tracing::warn!(error = %e, "cannot release the lease");
    }
}

/// How work run under [`while_leading`] ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Led<T> {
    /// `stop` fired before the lease was acquired.
    Stopped,
    /// The work finished (the lease, if any, was released).
    Done(T),
    /// The lease (named here) was lost while working.
    Lost(String),
}

/// Run `work` while holding the lease of `election` (or at once without one): wait for the lease
/// unless `stop` fires first, run, release the lease when the work ends, and abandon the work if
/// the lease is lost. `work` is a future, so nothing in it starts before the lease is held.
pub async fn while_leading<T>(
    client: &kube::Client,
    election: Option<&LeaderElection>,
    stop: &mut tokio::sync::watch::Receiver<bool>,
    work: impl std::future::Future<Output = T>,
) -> Led<T> {
    let Some(le) = election else { return Led::Done(work.await) };
    let api = Api::<Lease>::namespaced(client.clone(), &le.namespace);
    tokio::select! {
        _ = stop.wait_for(|s| *s) => return Led::Stopped,
        _ = acquire(&api, le) => {}
    }
    tokio::select! {
        out = work => {
            release(&api, le).await;
            Led::Done(out)
        }
        _ = hold(&api, le) => {
            tracing::error!(lease = %le.lease_name, "lost the lease; stopping");
            Led::Lost(le.lease_name.clone())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(holder: Option<&str>, renewed: &str, secs: i32) -> Lease {
        Lease {
            metadata: ObjectMeta::default(),
            spec: Some(LeaseSpec {
                holder_identity: holder.map(String::from),
                renew_time: Some(MicroTime(renewed.parse().expect("time"))),
                lease_duration_seconds: Some(secs),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn decisions() {
        let now: jiff::Timestamp = "2025-01-01T00:00:20Z".parse().expect("time");
        let cases = [
            ("no lease", None, Decision::Create),
            ("ours", Some(lease(Some("me"), "2025-01-01T00:00:00Z", 15)), Decision::Renew),
            (
                "theirs, fresh",
                Some(lease(Some("other"), "2025-01-01T00:00:10Z", 15)),
                Decision::Wait { expires_in: Duration::from_secs(5) },
            ),
            ("theirs, expired", Some(lease(Some("other"), "2025-01-01T00:00:04Z", 15)), Decision::TakeOver),
            ("released", Some(lease(None, "2025-01-01T00:00:19Z", 1)), Decision::TakeOver),
        ];
        for (name, l, want) in cases {
            assert_eq!(decide(l.as_ref(), "me", now), want, "{name}");
        }
    }

    #[test]
    fn a_standby_tries_again_as_the_holders_lease_runs_out() {
        let retry = Duration::from_secs(2);
        assert_eq!(next_try(retry, None), retry);
        assert_eq!(next_try(retry, Some(Duration::from_secs(9))), retry);
        assert_eq!(next_try(retry, Some(Duration::from_millis(700))), Duration::from_millis(710));
        assert_eq!(next_try(retry, Some(Duration::ZERO)), Duration::from_millis(10));
    }
}
