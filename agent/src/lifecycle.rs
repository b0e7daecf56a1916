//! Container lifecycle hooks, as kubelet runs them: `postStart` right after a container
//! starts (a failure kills the container, which then restarts as its policy says), `preStop`
//! before a container is stopped (deletion or a failed liveness probe), within the grace
//! period, whose rest — at least 2 s, kubelet's minimum — then goes to SIGTERM. Handlers:
//! `exec` (in the container), `httpGet` and `tcpSocket` (from inside the pod's network
//! namespace, as probes do) and `sleep`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Probe};

use crate::probes::Outcome;
use crate::runtime::Runtime;

/// Kubelet's minimum for what is left of the grace period after a preStop hook.
pub const MIN_GRACE_AFTER_PRE_STOP: Duration = Duration::from_secs(2);

/// The hook as a probe with one attempt: the same handlers, run the same way. Pure.
pub fn as_probe(h: &LifecycleHandler, timeout: Duration) -> Probe {
    Probe {
        exec: h.exec.clone(),
        http_get: h.http_get.clone(),
        tcp_socket: h.tcp_socket.clone(),
        timeout_seconds: Some(i32::try_from(timeout.as_secs().max(1)).unwrap_or(i32::MAX)),
        ..Probe::default()
    }
}

/// What a hook did, for the event kubelet records (`FailedPostStartHook`/`FailedPreStopHook`).
pub fn describe(h: &LifecycleHandler) -> String {
    if let Some(e) = &h.exec {
        return format!("Exec lifecycle hook ({:?})", e.command.clone().unwrap_or_default());
    }
    if let Some(g) = &h.http_get {
        return format!("HTTP lifecycle hook ({})", g.path.as_deref().unwrap_or("/"));
    }
    if h.tcp_socket.is_some() {
        return "TCP lifecycle hook".into();
    }
    if let Some(s) = &h.sleep {
        return format!("Sleep lifecycle hook ({}s)", s.seconds);
    }
    "lifecycle hook".into()
}

/// How a hook runs, decided before any IO. Pure.
#[derive(Debug, PartialEq, Eq)]
pub enum Plan {
    Sleep(Duration),
    Probe,
}

pub fn plan(h: &LifecycleHandler) -> Result<Plan, String> {
    if let Some(s) = &h.sleep {
        let seconds = u64::try_from(s.seconds).map_err(|_| format!("invalid sleep: {} seconds", s.seconds))?;
        return Ok(Plan::Sleep(Duration::from_secs(seconds)));
    }
    if h.exec.is_none() && h.http_get.is_none() && h.tcp_socket.is_none() {
        return Err("the hook has no handler".into());
    }
    Ok(Plan::Probe)
}

/// Runs one hook, bounded by `timeout`: Ok, or the reason it failed.
pub async fn run(
    h: &LifecycleHandler,
    c: &Container,
    netns: Option<PathBuf>,
    target: (&Runtime, &str),
    timeout: Duration,
) -> Result<(), String> {
    match plan(h)? {
        Plan::Sleep(wanted) => {
            tokio::time::sleep(wanted.min(timeout)).await;
            Ok(())
        }
        Plan::Probe => match crate::probes::run(&as_probe(h, timeout), c, netns, target).await {
            Outcome::Success => Ok(()),
            Outcome::Failure(why) | Outcome::Unsupported(why) => Err(why),
        },
    }
}

/// The grace period left after a preStop hook that began at `started`.
pub fn remaining_grace(grace: Duration, started: Instant) -> Duration {
    grace.saturating_sub(started.elapsed()).max(MIN_GRACE_AFTER_PRE_STOP)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{ExecAction, HTTPGetAction, SleepAction};
    use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

    #[test]
    fn a_hook_runs_as_a_one_shot_probe_with_its_timeout() {
        let h = LifecycleHandler {
            exec: Some(ExecAction { command: Some(vec!["sh".into(), "-c".into(), "true".into()]) }),
            ..LifecycleHandler::default()
        };
        let p = as_probe(&h, Duration::from_secs(30));
        assert_eq!(p.exec, h.exec);
        assert_eq!(p.timeout_seconds, Some(30));
        assert_eq!(as_probe(&h, Duration::ZERO).timeout_seconds, Some(1), "a probe needs at least 1 s");
        let g = LifecycleHandler {
            http_get: Some(HTTPGetAction {
                port: IntOrString::Int(80),
                path: Some("/quit".into()),
                ..Default::default()
            }),
            ..LifecycleHandler::default()
        };
        assert_eq!(as_probe(&g, Duration::from_secs(5)).http_get, g.http_get);
        assert_eq!(describe(&g), "HTTP lifecycle hook (/quit)");
        assert_eq!(describe(&h), "Exec lifecycle hook ([\"sh\", \"-c\", \"true\"])");
    }

    #[test]
    fn what_is_left_of_the_grace_period_is_at_least_two_seconds() {
        let now = Instant::now();
        assert!(remaining_grace(Duration::from_secs(30), now) > Duration::from_secs(29));
        assert_eq!(remaining_grace(Duration::from_secs(1), now), MIN_GRACE_AFTER_PRE_STOP);
    }

    #[test]
    fn sleep_hooks_wait_and_empty_hooks_fail() {
        let h = LifecycleHandler { sleep: Some(SleepAction { seconds: 3 }), ..LifecycleHandler::default() };
        assert_eq!(plan(&h), Ok(Plan::Sleep(Duration::from_secs(3))));
        let bad = LifecycleHandler { sleep: Some(SleepAction { seconds: -1 }), ..LifecycleHandler::default() };
        assert!(plan(&bad).is_err());
        assert_eq!(plan(&LifecycleHandler::default()), Err("the hook has no handler".into()));
        let exec = LifecycleHandler { exec: Some(ExecAction { command: None }), ..LifecycleHandler::default() };
        assert_eq!(plan(&exec), Ok(Plan::Probe));
    }
}
