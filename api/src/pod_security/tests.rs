//! Every check with a passing and a failing pod, and the aggregate message.

use super::*;
use serde_json::json;

const BASELINE: LevelVersion = LevelVersion { level: Level::Baseline, version: Version::Latest };
const RESTRICTED: LevelVersion = LevelVersion { level: Level::Restricted, version: Version::Latest };

/// A pod that passes restricted; `patch` is merged into its spec.
fn restricted_spec() -> Value {
    json!({
        "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [{
            "name": "c",
            "image": "busybox",
            "securityContext": {"allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
        }],
    })
}

fn merge(base: &mut Value, patch: &Value) {
    match (base, patch) {
        (Value::Object(b), Value::Object(p)) => {
            for (k, v) in p {
                merge(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (b, p) => *b = p.clone(),
    }
}

fn with(patch: Value) -> Value {
    let mut spec = restricted_spec();
    merge(&mut spec, &patch);
    spec
}

fn container(sc: Value) -> Value {
    let mut c = restricted_spec()["containers"][0].clone();
    merge(&mut c, &json!({"securityContext": sc}));
    c
}

fn message(lv: LevelVersion, meta: &Value, spec: &Value) -> String {
    forbidden_detail(&evaluate(lv, meta, spec))
}

#[test]
fn a_restricted_pod_passes_every_level() {
    for lv in [BASELINE, RESTRICTED, LevelVersion::PRIVILEGED] {
        assert_eq!(evaluate(lv, &json!({}), &restricted_spec()), vec![], "{lv}");
    }
}

#[test]
fn privileged_evaluates_nothing() {
    let spec = json!({"hostNetwork": true, "containers": [{"name": "c", "securityContext": {"privileged": true}}]});
    assert!(evaluate(LevelVersion::PRIVILEGED, &json!({}), &spec).is_empty());
}

/// (spec failing one baseline check, its message at baseline)
fn baseline_failures() -> Vec<(Value, Value, &'static str)> {
    let none = json!({});
    vec![
        (
            none.clone(),
            with(json!({"containers": [container(json!({"appArmorProfile": {"type": "Unconfined"}}))]})),
            r#"forbidden AppArmor profile (container "c" must not set AppArmor profile type to "Unconfined")"#,
        ),
        (
            json!({"annotations": {"container.apparmor.security.beta.kubernetes.io/c": "unconfined"}}),
            restricted_spec(),
            r#"forbidden AppArmor profile (annotation must not set AppArmor profile type to "container.apparmor.security.beta.kubernetes.io/c="unconfined"")"#,
        ),
        (
            none.clone(),
            with(
                json!({"containers": [container(json!({"capabilities": {"add": ["NET_ADMIN", "CHOWN", "SYS_ADMIN"]}}))]}),
            ),
            r#"non-default capabilities (container "c" must not include "NET_ADMIN", "SYS_ADMIN" in securityContext.capabilities.add)"#,
        ),
        (
            none.clone(),
            with(json!({"hostNetwork": true, "hostPID": true})),
            "host namespaces (hostNetwork=true, hostPID=true)",
        ),
        (
            none.clone(),
            with(
                json!({"volumes": [{"name": "root", "hostPath": {"path": "/"}}, {"name": "etc", "hostPath": {"path": "/etc"}}]}),
            ),
            r#"hostPath volumes (volumes "root", "etc")"#,
        ),
        (
            none.clone(),
            with(
                json!({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 8080}, {"containerPort": 81}]}]}),
            ),
            r#"hostPort (container "c" uses hostPort 8080)"#,
        ),
        (
            none.clone(),
            with(
                json!({"containers": [{"name": "c", "livenessProbe": {"httpGet": {"host": "10.0.0.1", "port": 80}}}]}),
            ),
            r#"probe or lifecycle host (container "c" uses probe or lifecycle host "10.0.0.1")"#,
        ),
        (
            none.clone(),
            with(json!({"containers": [container(json!({"privileged": true}))]})),
            r#"privileged (container "c" must not set securityContext.privileged=true)"#,
        ),
        (
            none.clone(),
            with(json!({"containers": [container(json!({"procMount": "Unmasked"}))]})),
            r#"procMount (container "c" must not set securityContext.procMount to "Unmasked")"#,
        ),
        (
            none.clone(),
            with(json!({"securityContext": {"seLinuxOptions": {"type": "spc_t", "user": "root"}}})),
            r#"seLinuxOptions (pod set forbidden securityContext.seLinuxOptions: type "spc_t"; user may not be set)"#,
        ),
        (
            none.clone(),
            with(json!({"containers": [container(json!({"seccompProfile": {"type": "Unconfined"}}))]})),
            r#"seccompProfile (container "c" must not set securityContext.seccompProfile.type to "Unconfined")"#,
        ),
        (
            none.clone(),
            with(
                json!({"securityContext": {"sysctls": [{"name": "kernel.msgmax", "value": "1"}, {"name": "net.ipv4.tcp_syncookies", "value": "1"}]}}),
            ),
            "forbidden sysctls (kernel.msgmax)",
        ),
        (
            none,
            with(json!({"securityContext": {"windowsOptions": {"hostProcess": true}}})),
            "hostProcess (pod must not set securityContext.windowsOptions.hostProcess=true)",
        ),
    ]
}

#[test]
fn every_baseline_check_refuses_its_field_with_kubernetes_words() {
    for (meta, spec, want) in baseline_failures() {
        assert_eq!(message(BASELINE, &meta, &spec), want);
    }
}

#[test]
fn the_allowed_values_of_baseline_checks_pass() {
    let fine = [
        with(
            json!({"containers": [container(json!({"appArmorProfile": {"type": "Localhost", "localhostProfile": "p"}}))]}),
        ),
        with(
            json!({"containers": [container(json!({"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}))]}),
        ),
        with(json!({"hostNetwork": false})),
        with(json!({"containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 0}]}]})),
        with(json!({"containers": [container(json!({"procMount": "Default", "privileged": false}))]})),
        with(json!({"securityContext": {"seLinuxOptions": {"type": "container_engine_t", "level": "s0:c1"}}})),
        with(json!({"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_rmem", "value": "1"}]}})),
        with(json!({"securityContext": {"windowsOptions": {"hostProcess": false}}})),
    ];
    for spec in fine {
        assert_eq!(evaluate(BASELINE, &json!({}), &spec), vec![], "{spec}");
    }
    let meta = json!({"annotations": {"container.apparmor.security.beta.kubernetes.io/c": "runtime/default"}});
    assert!(evaluate(BASELINE, &meta, &restricted_spec()).is_empty());
}

#[test]
fn every_restricted_check_refuses_its_field_with_kubernetes_words() {
    let cases = [
        (
            with(json!({"containers": [container(json!({"allowPrivilegeEscalation": true}))]})),
            r#"allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false)"#,
        ),
        (
            with(
                json!({"containers": [container(json!({"capabilities": {"drop": ["NET_RAW"], "add": ["SYS_ADMIN"]}}))]}),
            ),
            r#"unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]; container "c" must not include "SYS_ADMIN" in securityContext.capabilities.add)"#,
        ),
        (
            with(
                json!({"volumes": [{"name": "h", "hostPath": {"path": "/"}}, {"name": "s", "secret": {"secretName": "x"}}]}),
            ),
            r#"restricted volume types (volume "h" uses restricted volume type "hostPath")"#,
        ),
        (
            with(json!({"securityContext": {"runAsNonRoot": false}})),
            "runAsNonRoot != true (pod must not set securityContext.runAsNonRoot=false)",
        ),
        (
            with(json!({"securityContext": {"runAsNonRoot": null}})),
            r#"runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true)"#,
        ),
        (
            with(json!({"containers": [container(json!({"runAsUser": 0}))]})),
            r#"runAsUser=0 (container "c" must not set runAsUser=0)"#,
        ),
        (
            with(json!({"securityContext": {"seccompProfile": null}})),
            r#"seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#,
        ),
    ];
    for (spec, want) in cases {
        assert_eq!(message(RESTRICTED, &json!({}), &spec), want);
    }
}

#[test]
fn the_allowed_values_of_restricted_checks_pass() {
    let fine = [
        with(
            json!({"containers": [container(json!({"capabilities": {"drop": ["ALL"], "add": ["NET_BIND_SERVICE"]}}))]}),
        ),
        with(
            json!({"volumes": [{"name": "e", "emptyDir": {}}, {"name": "p", "persistentVolumeClaim": {"claimName": "x"}}]}),
        ),
        with(
            json!({"securityContext": {"runAsNonRoot": null}, "containers": [container(json!({"runAsNonRoot": true}))]}),
        ),
        with(json!({"securityContext": {"runAsUser": 1000}})),
        with(
            json!({"securityContext": {"seccompProfile": null}, "containers": [container(json!({"seccompProfile": {"type": "Localhost"}}))]}),
        ),
    ];
    for spec in fine {
        assert_eq!(evaluate(RESTRICTED, &json!({}), &spec), vec![], "{spec}");
    }
}

#[test]
fn a_bare_pod_under_restricted_lists_its_failures_in_kubernetes_order() {
    let spec = json!({"containers": [{"name": "c", "image": "nginx", "securityContext": {"privileged": true}}]});
    assert_eq!(
        message(RESTRICTED, &json!({}), &spec),
        concat!(
            r#"privileged (container "c" must not set securityContext.privileged=true), "#,
            r#"allowPrivilegeEscalation != false (container "c" must set securityContext.allowPrivilegeEscalation=false), "#,
            r#"unrestricted capabilities (container "c" must set securityContext.capabilities.drop=["ALL"]), "#,
            r#"runAsNonRoot != true (pod or container "c" must set securityContext.runAsNonRoot=true), "#,
            r#"seccompProfile (pod or container "c" must set securityContext.seccompProfile.type to "RuntimeDefault" or "Localhost")"#,
        )
    );
}

#[test]
fn restricted_replaces_the_baseline_checks_it_overrides() {
    let spec = with(json!({"volumes": [{"name": "h", "hostPath": {"path": "/"}}]}));
    let reasons: Vec<String> = evaluate(RESTRICTED, &json!({}), &spec).into_iter().map(|v| v.reason).collect();
    assert_eq!(reasons, ["restricted volume types"]);
}

#[test]
fn older_policy_versions_lack_the_newer_checks() {
    let probe = with(json!({"containers": [{"name": "c", "readinessProbe": {"tcpSocket": {"host": "h", "port": 1}}}]}));
    let v = |m| LevelVersion { level: Level::Baseline, version: Version::V1(m) };
    assert!(evaluate(v(33), &json!({}), &probe).is_empty());
    assert_eq!(evaluate(v(34), &json!({}), &probe).len(), 1);
    let sysctl = with(json!({"securityContext": {"sysctls": [{"name": "net.ipv4.tcp_wmem", "value": "1"}]}}));
    assert_eq!(message(v(31), &json!({}), &sysctl), "forbidden sysctls (net.ipv4.tcp_wmem)");
    assert!(evaluate(v(32), &json!({}), &sysctl).is_empty());
}

#[test]
fn windows_pods_skip_the_linux_only_restricted_checks() {
    let spec =
        json!({"os": {"name": "windows"}, "securityContext": {"runAsNonRoot": true}, "containers": [{"name": "c"}]});
    assert!(evaluate(RESTRICTED, &json!({}), &spec).is_empty());
}

#[test]
fn init_and_ephemeral_containers_are_checked_too() {
    let spec = with(json!({
        "initContainers": [{"name": "i", "securityContext": {"privileged": true}}],
        "ephemeralContainers": [{"name": "e", "securityContext": {"privileged": true}}],
    }));
    assert_eq!(
        message(BASELINE, &json!({}), &spec),
        r#"privileged (containers "i", "e" must not set securityContext.privileged=true)"#
    );
}

#[test]
fn workloads_yield_their_pod_templates() {
    let deploy = json!({"spec": {"template": {"metadata": {"labels": {"a": "b"}}, "spec": {"containers": []}}}});
    let (meta, spec) = pod_template("Deployment", &deploy).expect("template");
    assert_eq!(meta["labels"]["a"], "b");
    assert_eq!(spec["containers"], json!([]));
    let cron = json!({"spec": {"jobTemplate": {"spec": {"template": {"spec": {"hostPID": true}}}}}});
    assert_eq!(pod_template("CronJob", &cron).expect("template").1["hostPID"], true);
    assert!(pod_template("Service", &deploy).is_none());
}
