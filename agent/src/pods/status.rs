//! Pod status from what the agent observed — pure, so every phase/condition rule is table-tested:
//! containerStatuses (waiting/running/terminated, lastState, restartCount), phase as kubelet's
//! `getPhase` computes it, and the conditions PodReadyToStartContainers, Initialized,
//! ContainersReady, Ready, PodScheduled.

use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting, ContainerStatus, HostIP,
    Pod, PodCondition, PodIP, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

/// One run of a container as the runtime reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct Run {
    pub id: String,
    pub restart_count: u32,
    pub image_id: String,
    pub started_at: Option<jiff::Timestamp>,
    /// None while running (or created).
    pub exit: Option<Exited>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Exited {
    pub code: i32,
    pub signal: Option<i32>,
    pub oom_killed: bool,
    pub finished_at: Option<jiff::Timestamp>,
    pub message: Option<String>,
}

/// What the status needs to know about one container of the spec.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct View {
    pub name: String,
    pub image: String,
    /// The newest run, and the one before it.
    pub current: Option<Run>,
    pub previous: Option<Run>,
    /// Why it is not running now (ContainerCreating, ErrImagePull, CrashLoopBackOff...).
    pub waiting: Option<(String, String)>,
    /// Readiness and startup probes passed (true for a container without them).
    pub probes_ready: bool,
    pub probes_started: bool,
}

fn time(t: Option<jiff::Timestamp>) -> Option<Time> {
    t.map(Time)
}

fn terminated(run: &Run, e: &Exited) -> ContainerStateTerminated {
    let reason = if e.oom_killed {
        "OOMKilled"
    } else if e.code == 0 {
        "Completed"
    } else {
        "Error"
    };
    ContainerStateTerminated {
        container_id: Some(format!("kaji://{}", run.id)),
        exit_code: e.code,
        signal: e.signal,
        reason: Some(reason.into()),
        message: e.message.clone().filter(|m| !m.is_empty()),
        started_at: time(run.started_at),
        finished_at: time(e.finished_at),
    }
}

pub fn container_status(v: &View) -> ContainerStatus {
    let waiting = |(reason, message): &(String, String)| ContainerState {
        waiting: Some(ContainerStateWaiting {
            reason: Some(reason.clone()),
            message: Some(message.clone()).filter(|m| !m.is_empty()),
        }),
        ..ContainerState::default()
    };
    let (state, last_state) = match (&v.current, &v.waiting) {
        (None, w) => {
            let w = w.clone().unwrap_or_else(|| ("ContainerCreating".into(), String::new()));
            (waiting(&w), None)
        }
        (Some(run), Some(w)) if run.exit.is_some() => {
            let e = run.exit.as_ref().expect("checked is_some");
            (waiting(w), Some(ContainerState { terminated: Some(terminated(run, e)), ..ContainerState::default() }))
        }
        (Some(run), _) => {
            let state = match &run.exit {
                None => ContainerState {
                    running: Some(ContainerStateRunning { started_at: time(run.started_at) }),
                    ..ContainerState::default()
                },
                Some(e) => ContainerState { terminated: Some(terminated(run, e)), ..ContainerState::default() },
            };
            let last = v.previous.as_ref().and_then(|p| {
                let e = p.exit.as_ref()?;
                Some(ContainerState { terminated: Some(terminated(p, e)), ..ContainerState::default() })
            });
            (state, last)
        }
    };
    let running = state.running.is_some();
    ContainerStatus {
        name: v.name.clone(),
        image: v.image.clone(),
        image_id: v.current.as_ref().map(|r| r.image_id.clone()).unwrap_or_default(),
        container_id: v.current.as_ref().map(|r| format!("kaji://{}", r.id)),
        ready: running && v.probes_ready && v.probes_started,
        started: Some(running && v.probes_started),
        restart_count: v.current.as_ref().map(|r| r.restart_count as i32).unwrap_or(0),
        state: Some(state),
        last_state: Some(last_state.unwrap_or_default()),
        ..ContainerStatus::default()
    }
}

/// Kubelet's `getPhase`: Pending until every init container succeeded and no container waits
/// for its first start; Running while any runs or will restart; then Succeeded/Failed.
pub fn phase(restart_policy: &str, inits: &[ContainerStatus], apps: &[ContainerStatus]) -> &'static str {
    let init_failed = inits.iter().any(|s| {
        s.state.as_ref().and_then(|st| st.terminated.as_ref()).is_some_and(|t| t.exit_code != 0)
            || s.last_state.as_ref().and_then(|st| st.terminated.as_ref()).is_some_and(|t| t.exit_code != 0)
                && s.state.as_ref().is_some_and(|st| st.waiting.is_some())
    });
    let init_done =
        inits.iter().all(|s| s.state.as_ref().and_then(|st| st.terminated.as_ref()).is_some_and(|t| t.exit_code == 0));
    if !init_done {
        return if init_failed && restart_policy == "Never" { "Failed" } else { "Pending" };
    }
    let (mut running, mut waiting, mut stopped, mut succeeded) = (0, 0, 0, 0);
    for s in apps {
        let st = s.state.clone().unwrap_or_default();
        let last_terminated = s.last_state.as_ref().and_then(|l| l.terminated.as_ref());
        if st.running.is_some() {
            running += 1;
        } else if let Some(t) = &st.terminated {
            stopped += 1;
            if t.exit_code == 0 {
                succeeded += 1;
            }
        } else if st.waiting.is_some() {
            match last_terminated {
                Some(t) => {
                    stopped += 1;
                    if t.exit_code == 0 {
                        succeeded += 1;
                    }
                }
                None => waiting += 1,
            }
        } else {
            waiting += 1;
        }
    }
    if waiting > 0 {
        return "Pending";
    }
    if running > 0 {
        return "Running";
    }
    if stopped == apps.len() && !apps.is_empty() {
        if restart_policy == "Always" {
            return "Running";
        }
        if stopped == succeeded {
            return "Succeeded";
        }
        if restart_policy == "Never" {
            return "Failed";
        }
        return "Running";
    }
    "Pending"
}

fn condition(type_: &str, ok: bool, reason: Option<String>, message: Option<String>, now: &Time) -> PodCondition {
    PodCondition {
        type_: type_.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: if ok { None } else { reason },
        message: if ok { None } else { message },
        last_transition_time: Some(now.clone()),
        last_probe_time: None,
        ..PodCondition::default()
    }
}

/// What the agent knows about the pod beyond its containers.
pub struct Facts<'a> {
    pub pod: &'a Pod,
    pub host_ip: String,
    pub pod_ip: Option<String>,
    pub start_time: Option<jiff::Timestamp>,
    pub sandbox_ready: bool,
    pub now: jiff::Timestamp,
}

/// The whole status; lastTransitionTime comes from the pod's current status when a condition
/// did not change.
pub fn pod_status(f: &Facts<'_>, inits: &[View], apps: &[View]) -> PodStatus {
    let now = Time(f.now);
    let spec = f.pod.spec.clone().unwrap_or_default();
    let policy = spec.restart_policy.clone().unwrap_or_else(|| "Always".into());
    let init_statuses: Vec<ContainerStatus> = inits.iter().map(container_status).collect();
    let mut app_statuses: Vec<ContainerStatus> = apps.iter().map(container_status).collect();
    let phase = phase(&policy, &init_statuses, &app_statuses);
    let terminal = phase == "Succeeded" || phase == "Failed";
    if terminal {
        for s in &mut app_statuses {
            s.ready = false;
        }
    }
    let incomplete: Vec<String> = init_statuses
        .iter()
        .filter(|s| s.state.as_ref().and_then(|st| st.terminated.as_ref()).is_none_or(|t| t.exit_code != 0))
        .map(|s| s.name.clone())
        .collect();
    let unready: Vec<String> = app_statuses.iter().filter(|s| !s.ready).map(|s| s.name.clone()).collect();
    let not_ready_reason = if terminal { "PodCompleted" } else { "ContainersNotReady" };
    let mut conditions = vec![
        condition("PodReadyToStartContainers", f.sandbox_ready, None, None, &now),
        condition(
            "Initialized",
            incomplete.is_empty() || (terminal && phase == "Succeeded"),
            Some("ContainersNotInitialized".into()),
            Some(format!("containers with incomplete status: [{}]", incomplete.join(" "))),
            &now,
        ),
        condition(
            "Ready",
            unready.is_empty(),
            Some(not_ready_reason.into()),
            (!terminal).then(|| format!("containers with unready status: [{}]", unready.join(" "))),
            &now,
        ),
        condition(
            "ContainersReady",
            unready.is_empty(),
            Some(not_ready_reason.into()),
            (!terminal).then(|| format!("containers with unready status: [{}]", unready.join(" "))),
            &now,
        ),
        condition("PodScheduled", true, None, None, &now),
    ];
    let old = f.pod.status.as_ref().and_then(|s| s.conditions.clone()).unwrap_or_default();
    for c in &mut conditions {
        if let Some(o) = old.iter().find(|o| o.type_ == c.type_ && o.status == c.status) {
            c.last_transition_time = o.last_transition_time.clone();
        }
    }
    PodStatus {
        phase: Some(phase.into()),
        conditions: Some(conditions),
        host_ip: Some(f.host_ip.clone()),
        host_ips: Some(vec![HostIP { ip: f.host_ip.clone() }]),
        pod_ip: f.pod_ip.clone(),
        pod_ips: f.pod_ip.clone().map(|ip| vec![PodIP { ip }]),
        start_time: time(f.start_time),
        qos_class: f.pod.status.as_ref().and_then(|s| s.qos_class.clone()),
        init_container_statuses: (!init_statuses.is_empty()).then_some(init_statuses),
        container_statuses: Some(app_statuses),
        ..PodStatus::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn run(id: &str, restarts: u32, exit: Option<i32>) -> Run {
        Run {
            id: id.into(),
            restart_count: restarts,
            image_id: "img@sha256:1".into(),
            started_at: Some(jiff::Timestamp::UNIX_EPOCH),
            exit: exit.map(|code| Exited { code, signal: None, oom_killed: false, finished_at: None, message: None }),
        }
    }

    fn view(name: &str, current: Option<Run>, previous: Option<Run>, waiting: Option<(&str, &str)>) -> View {
        View {
            name: name.into(),
            image: "busybox".into(),
            current,
            previous,
            waiting: waiting.map(|(r, m)| (r.to_string(), m.to_string())),
            probes_ready: true,
            probes_started: true,
        }
    }

    fn facts(pod: &Pod) -> Facts<'_> {
        Facts {
            pod,
            host_ip: "10.0.0.1".into(),
            pod_ip: None,
            start_time: None,
            sandbox_ready: true,
            now: jiff::Timestamp::UNIX_EPOCH,
        }
    }

    fn pod(policy: &str) -> Pod {
        serde_json::from_value(json!({"spec": {"restartPolicy": policy, "containers": []}})).expect("valid")
    }

    fn cond<'a>(s: &'a PodStatus, t: &str) -> &'a PodCondition {
        s.conditions.as_ref().and_then(|c| c.iter().find(|c| c.type_ == t)).expect("condition present")
    }

    #[test]
    fn a_running_container_makes_a_ready_running_pod() {
        let p = pod("Always");
        let s = pod_status(&facts(&p), &[], &[view("a", Some(run("c1", 0, None)), None, None)]);
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert_eq!(cond(&s, "Ready").status, "True");
        let cs = &s.container_statuses.as_ref().expect("statuses")[0];
        assert!(cs.ready && cs.state.as_ref().is_some_and(|st| st.running.is_some()));
        assert_eq!(cs.container_id.as_deref(), Some("kaji://c1"));
    }

    #[test]
    fn a_crash_looping_container_waits_with_its_last_exit_and_keeps_the_pod_running() {
        let p = pod("Always");
        let v = view(
            "a",
            Some(run("c2", 3, Some(1))),
            Some(run("c1", 2, Some(1))),
            Some(("CrashLoopBackOff", "back-off 40s")),
        );
        let s = pod_status(&facts(&p), &[], &[v]);
        assert_eq!(s.phase.as_deref(), Some("Running"));
        let cs = &s.container_statuses.as_ref().expect("statuses")[0];
        assert_eq!(cs.restart_count, 3);
        let st = cs.state.as_ref().expect("state");
        assert_eq!(st.waiting.as_ref().and_then(|w| w.reason.as_deref()), Some("CrashLoopBackOff"));
        let last = cs.last_state.as_ref().and_then(|l| l.terminated.as_ref()).expect("last terminated");
        assert_eq!((last.exit_code, last.reason.as_deref()), (1, Some("Error")));
        assert_eq!(cond(&s, "Ready").reason.as_deref(), Some("ContainersNotReady"));
    }

    #[test]
    fn phases_follow_the_restart_policy_once_everything_stopped() {
        let done = |code| vec![view("a", Some(run("c", 0, Some(code))), None, None)];
        let phase_of = |policy: &str, code| pod_status(&facts(&pod(policy)), &[], &done(code)).phase;
        assert_eq!(phase_of("Never", 0).as_deref(), Some("Succeeded"));
        assert_eq!(phase_of("Never", 2).as_deref(), Some("Failed"));
        assert_eq!(phase_of("OnFailure", 0).as_deref(), Some("Succeeded"));
        assert_eq!(phase_of("OnFailure", 2).as_deref(), Some("Running"));
        assert_eq!(phase_of("Always", 0).as_deref(), Some("Running"));
        let s = pod_status(&facts(&pod("Never")), &[], &done(0));
        assert_eq!(cond(&s, "Ready").reason.as_deref(), Some("PodCompleted"));
    }

    #[test]
    fn init_containers_hold_the_pod_pending_and_fail_it_under_never() {
        let p = pod("Never");
        let apps = [view("a", None, None, Some(("PodInitializing", "")))];
        let running_init = [view("i", Some(run("i1", 0, None)), None, None)];
        let s = pod_status(&facts(&p), &running_init, &apps);
        assert_eq!(s.phase.as_deref(), Some("Pending"));
        assert_eq!(cond(&s, "Initialized").message.as_deref(), Some("containers with incomplete status: [i]"));
        let failed_init = [view("i", Some(run("i1", 0, Some(1))), None, None)];
        assert_eq!(pod_status(&facts(&p), &failed_init, &apps).phase.as_deref(), Some("Failed"));
        let ok_init = [view("i", Some(run("i1", 0, Some(0))), None, None)];
        let s = pod_status(&facts(&p), &ok_init, &[view("a", Some(run("c", 0, None)), None, None)]);
        assert_eq!((s.phase.as_deref(), cond(&s, "Initialized").status.as_str()), (Some("Running"), "True"));
    }

    #[test]
    fn a_running_container_failing_readiness_is_not_ready() {
        let p = pod("Always");
        let mut v = view("a", Some(run("c1", 0, None)), None, None);
        v.probes_ready = false;
        let s = pod_status(&facts(&p), &[], &[v]);
        assert_eq!(s.phase.as_deref(), Some("Running"));
        assert!(!s.container_statuses.as_ref().expect("statuses")[0].ready);
        assert_eq!(cond(&s, "Ready").status, "False");
    }

    #[test]
    fn oom_kills_are_reported_as_such() {
        let mut r = run("c", 0, Some(137));
        if let Some(e) = r.exit.as_mut() {
            e.oom_killed = true;
            e.signal = Some(9);
        }
        let cs = container_status(&view("a", Some(r), None, None));
        let t = cs.state.and_then(|s| s.terminated).expect("terminated");
        assert_eq!((t.reason.as_deref(), t.exit_code), (Some("OOMKilled"), 137));
    }

    #[test]
    fn unchanged_conditions_keep_their_transition_time() {
        let mut p = pod("Always");
        let apps = [view("a", Some(run("c1", 0, None)), None, None)];
        let first = pod_status(&facts(&p), &[], &apps);
        p.status = Some(first.clone());
        let mut later = facts(&p);
        later.now = jiff::Timestamp::from_second(100).expect("valid");
        let second = pod_status(&later, &[], &apps);
        assert_eq!(first, second, "nothing changed, nothing to write");
    }
}
