//! Audit logging with the real binary (`--audit-policy-file`, `--audit-log-*`): a policy of None
//! for one user, Metadata for secrets, RequestResponse for configmaps and Metadata otherwise; the
//! log is read as someone would after an incident — who did what, as whom, with what answer, what
//! a Secret's line does not hold — and rotated, failing and absent logs are checked too.

mod common;

use common::ApiServer;
use serde_json::{json, Value};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

const TOKENS: &str = "root-token,root,0,system:masters\n\
lee-token,lee,1001\n\
quiet-token,quiet,1002,system:masters\n";

const POLICY: &str = r#"
apiVersion: audit.k8s.io/v1
kind: Policy
rules:
- level: None
  users: ["quiet"]
- level: None
  nonResourceURLs: ["/readyz", "/healthz*"]
- level: Metadata
  resources:
  - group: ""
    resources: ["secrets"]
- level: RequestResponse
  resources:
  - group: ""
    resources: ["configmaps"]
- level: Metadata
"#;

struct Api {
    server: ApiServer,
    log: PathBuf,
    dir: tempfile::TempDir,
}

/// One answer: status, headers (lowercased names), body.
struct Answer {
    code: u16,
    headers: Vec<(String, String)>,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<String> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone())
    }

    fn audit_id(&self) -> String {
        self.header("audit-id").expect("an audited apiserver's response carries Audit-Id")
    }
}

impl Api {
    /// The binary with the tokens, RBAC, POLICY and the log at `<tmp>/audit.log`, plus `extra`.
    fn start(extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let log = dir.path().join("audit.log");
        Self::start_logging_to(dir, &log.to_string_lossy(), extra)
    }

    fn start_logging_to(dir: tempfile::TempDir, log: &str, extra: &[&str]) -> Self {
        let write = |name: &str, text: &str| {
            let p = dir.path().join(name);
            std::fs::write(&p, text).expect("write");
            p.to_string_lossy().to_string()
        };
        let tokens = write("tokens.csv", TOKENS);
        let policy = write("policy.yaml", POLICY);
        let mut flags = vec![
            "--token-auth-file",
            &tokens,
            "--authorization-mode",
            "RBAC",
            "--audit-policy-file",
            &policy,
            "--audit-log-path",
            log,
        ];
        flags.extend_from_slice(extra);
        let server = ApiServer::start_with(&dir.path().join("data"), &flags);
        Self { server, log: PathBuf::from(log), dir }
    }

    fn call(&self, token: &str, headers: &[(&str, &str)], method: &str, path: &str, body: Option<Value>) -> Answer {
        let mut s = TcpStream::connect(&self.server.addr).expect("connect");
        s.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
        let body = body.map(|b| b.to_string()).unwrap_or_default();
        let content_type = if method == "PATCH" { "application/merge-patch+json" } else { "application/json" };
        let mut head = format!(
            "{method} {path} HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\nContent-Type: {content_type}\r\nUser-Agent: audit-test/1.0\r\nContent-Length: {}\r\nConnection: close\r\n",
            self.server.addr,
            body.len()
        );
        for (k, v) in headers {
            head.push_str(&format!("{k}: {v}\r\n"));
        }
        s.write_all(format!("{head}\r\n{body}").as_bytes()).expect("send");
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out);
        let text = String::from_utf8_lossy(&out).to_string();
        let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
        let mut lines = head.lines();
        let code = lines.next().and_then(|l| l.split(' ').nth(1)).and_then(|c| c.parse().ok()).unwrap_or(0);
        let headers = lines
            .filter_map(|l| l.split_once(':'))
            .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_string()))
            .collect();
        Answer { code, headers, body: body.to_string() }
    }

    /// The log's events for `audit_id`, once its `last` stage is written (the writer is a
    /// thread of its own: poll, with a deadline).
    fn events(&self, audit_id: &str, last: &str) -> Vec<Value> {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let events: Vec<Value> = read_log(&self.log).into_iter().filter(|e| e["auditID"] == audit_id).collect();
            if events.iter().any(|e| e["stage"] == last) {
                return events;
            }
            assert!(Instant::now() < deadline, "no {last} event for {audit_id}; have {events:?}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// The ResponseComplete event of `answer`.
    fn completed(&self, answer: &Answer) -> Value {
        let events = self.events(&answer.audit_id(), "ResponseComplete");
        events.into_iter().find(|e| e["stage"] == "ResponseComplete").expect("ResponseComplete")
    }

    /// A request whose events, once written, follow everything asked before it: the log holds
    /// all it will ever hold about earlier requests (one writer, events in the order sent).
    fn barrier(&self) {
        let probe = self.call("root-token", &[], "GET", "/api/v1/namespaces/default", None);
        self.events(&probe.audit_id(), "ResponseComplete");
    }

    fn metric(&self, name: &str) -> f64 {
        let metrics = self.call("root-token", &[], "GET", "/metrics", None);
        metrics
            .body
            .lines()
            .find_map(|l| l.strip_prefix(name).and_then(|rest| rest.strip_prefix(' ')))
            .and_then(|n| n.trim().parse::<f64>().ok())
            .unwrap_or(0.0)
    }
}

/// The log's whole lines (the writer may be half way through the last one).
fn read_log(path: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let whole = text.rfind('\n').map_or("", |end| &text[..end]);
    whole.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}"))).collect()
}

fn stages(events: &[Value]) -> Vec<&str> {
    events.iter().filter_map(|e| e["stage"].as_str()).collect()
}

#[test]
fn a_secret_is_logged_at_metadata_and_its_data_never_appears() {
    let api = Api::start(&[]);
    let secret = json!({"metadata": {"name": "s1"}, "data": {"password": "aHVudGVyMg=="}});
    let created = api.call("root-token", &[], "POST", "/api/v1/namespaces/default/secrets", Some(secret));
    assert_eq!(created.code, 201, "{}", created.body);
    let events = api.events(&created.audit_id(), "ResponseComplete");
    assert_eq!(stages(&events), ["RequestReceived", "ResponseComplete"]);
    let done = &events[1];
    assert_eq!(done["kind"], "Event");
    assert_eq!(done["apiVersion"], "audit.k8s.io/v1");
    assert_eq!(done["level"], "Metadata");
    assert_eq!(done["verb"], "create");
    assert_eq!(done["requestURI"], "/api/v1/namespaces/default/secrets");
    assert_eq!(done["user"]["username"], "root");
    assert_eq!(done["user"]["groups"], json!(["system:masters", "system:authenticated"]));
    assert!(done.get("impersonatedUser").is_none());
    assert_eq!(done["userAgent"], "audit-test/1.0");
    assert_eq!(done["sourceIPs"], json!(["127.0.0.1"]));
    let object_ref = json!({"resource": "secrets", "namespace": "default", "name": "s1", "apiVersion": "v1"});
    assert_eq!(done["objectRef"], object_ref, "the created object's name completes objectRef");
    assert_eq!(done["responseStatus"], json!({"metadata": {}, "code": 201}));
    assert_eq!(done["annotations"]["authorization.k8s.io/decision"], "allow");
    assert!(done.get("requestObject").is_none() && done.get("responseObject").is_none(), "{done}");
    assert!(events[0].get("annotations").is_none(), "RequestReceived comes before authorization");
    assert!(events[0].get("responseStatus").is_none());
    // Timestamps: metav1.MicroTime, UTC, and the stage's is not before the request's.
    let received = done["requestReceivedTimestamp"].as_str().expect("requestReceivedTimestamp");
    assert_eq!((received.len(), &received[19..20], &received[26..]), (27, ".", "Z"), "{received}");
    assert_eq!(events[0]["requestReceivedTimestamp"], received);
    assert!(done["stageTimestamp"].as_str() >= Some(received));

    // Read, patched and listed: the data is in the answers, never in the log.
    let got = api.call("root-token", &[], "GET", "/api/v1/namespaces/default/secrets/s1", None);
    assert!(got.body.contains("aHVudGVyMg=="), "{}", got.body);
    let patch = json!({"data": {"password": "c3dvcmRmaXNo"}});
    let patched = api.call("root-token", &[], "PATCH", "/api/v1/namespaces/default/secrets/s1", Some(patch));
    assert_eq!(patched.code, 200, "{}", patched.body);
    let listed = api.call("root-token", &[], "GET", "/api/v1/namespaces/default/secrets", None);
    assert!(listed.body.contains("c3dvcmRmaXNo"));
    assert_eq!(api.completed(&got)["verb"], "get");
    let done = api.completed(&patched);
    assert_eq!((done["verb"].as_str(), done["objectRef"]["name"].as_str()), (Some("patch"), Some("s1")));
    assert_eq!(api.completed(&listed)["verb"], "list");
    let text = std::fs::read_to_string(&api.log).expect("log");
    for secret in ["aHVudGVyMg==", "hunter2", "c3dvcmRmaXNo", "swordfish"] {
        assert!(!text.contains(secret), "a Secret's data reached the audit log: {secret}");
    }
}

#[test]
fn a_configmap_is_logged_with_its_request_and_response_bodies() {
    let api = Api::start(&[]);
    let cm = json!({"metadata": {"name": "c1"}, "data": {"colour": "teal"}});
    let created = api.call("root-token", &[], "POST", "/api/v1/namespaces/default/configmaps", Some(cm));
    assert_eq!(created.code, 201, "{}", created.body);
    let done = api.completed(&created);
    assert_eq!(done["level"], "RequestResponse");
    assert_eq!(done["requestObject"]["data"], json!({"colour": "teal"}));
    assert_eq!(done["responseObject"]["metadata"]["namespace"], "default");
    assert_eq!(done["responseObject"]["metadata"]["uid"].as_str().map(str::len), Some(36));
    assert_eq!(done["responseObject"]["data"], json!({"colour": "teal"}));
    // A patch is recorded as sent.
    let patch = json!({"data": {"colour": "plum"}});
    let patched = api.call("root-token", &[], "PATCH", "/api/v1/namespaces/default/configmaps/c1", Some(patch.clone()));
    assert_eq!(patched.code, 200, "{}", patched.body);
    let done = api.completed(&patched);
    assert_eq!(done["requestObject"], patch);
    assert_eq!(done["responseObject"]["data"], json!({"colour": "plum"}));
    // A client's own Audit-ID is kept; every response carries one.
    let mine = api.call("root-token", &[("Audit-ID", "my-own-id")], "GET", "/api/v1/namespaces/default", None);
    assert_eq!(mine.audit_id(), "my-own-id");
    assert_eq!(api.events("my-own-id", "ResponseComplete").len(), 2);
    // A watch is long-running: ResponseStarted when it begins, ResponseComplete when it ends.
    let watch =
        api.call("root-token", &[], "GET", "/api/v1/namespaces/default/configmaps?watch=1&timeoutSeconds=1", None);
    assert_eq!(watch.code, 200);
    let events = api.events(&watch.audit_id(), "ResponseComplete");
    assert_eq!(stages(&events), ["RequestReceived", "ResponseStarted", "ResponseComplete"]);
    assert_eq!(events[1]["verb"], "watch");
    assert_eq!(events[1]["responseStatus"]["code"], 200);
    assert!(events[2].get("responseObject").is_none(), "a watch's stream is not kept");
}

#[test]
fn refusals_are_logged_with_their_status_and_impersonation_with_both_users() {
    let api = Api::start(&[]);
    // 403 from RBAC: the decision, the code and the Status' reason, at Metadata.
    let refused = api.call("lee-token", &[], "GET", "/api/v1/namespaces/default/secrets", None);
    assert_eq!(refused.code, 403, "{}", refused.body);
    let done = api.completed(&refused);
    assert_eq!((done["verb"].as_str(), done["user"]["username"].as_str()), (Some("list"), Some("lee")));
    assert_eq!(done["annotations"]["authorization.k8s.io/decision"], "forbid");
    assert_eq!(done["responseStatus"]["code"], 403);
    assert_eq!(done["responseStatus"]["status"], "Failure");
    assert_eq!(done["responseStatus"]["reason"], "Forbidden");
    let message = done["responseStatus"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(r#"User "lee" cannot list resource "secrets""#), "{message}");

    // Impersonated: `user` is who authenticated, `impersonatedUser` whom they acted as, and the
    // authorization is the target's.
    let asked =
        api.call("root-token", &[("Impersonate-User", "lee")], "GET", "/api/v1/namespaces/default/configmaps", None);
    assert_eq!(asked.code, 403, "{}", asked.body);
    let events = api.events(&asked.audit_id(), "ResponseComplete");
    let done = events.last().expect("an event");
    assert_eq!(done["user"]["username"], "root");
    assert_eq!(done["impersonatedUser"], json!({"username": "lee", "groups": ["system:authenticated"]}));
    assert_eq!(done["annotations"]["authorization.k8s.io/decision"], "forbid");
    assert_eq!(done["responseStatus"]["code"], 403);
    assert!(events[0].get("impersonatedUser").is_none(), "impersonation comes after RequestReceived");
    let allowed = api.call(
        "root-token",
        &[("Impersonate-User", "ann"), ("Impersonate-Group", "system:masters")],
        "GET",
        "/api/v1/namespaces/default/configmaps",
        None,
    );
    assert_eq!(allowed.code, 200, "{}", allowed.body);
    let done = api.completed(&allowed);
    assert_eq!(done["user"]["username"], "root");
    assert_eq!(done["impersonatedUser"]["username"], "ann");
    assert_eq!(done["impersonatedUser"]["groups"], json!(["system:masters", "system:authenticated"]));
    assert_eq!(done["annotations"]["authorization.k8s.io/decision"], "allow");

    // An impersonation refused: the requester, no target, the 403.
    let denied = api.call("lee-token", &[("Impersonate-User", "root")], "GET", "/api/v1/namespaces", None);
    assert_eq!(denied.code, 403, "{}", denied.body);
    let done = api.completed(&denied);
    assert_eq!(done["user"]["username"], "lee");
    assert!(done.get("impersonatedUser").is_none(), "{done}");
    assert_eq!(done["responseStatus"]["code"], 403);

    // Failed authentication: one ResponseStarted event with the 401 and no user.
    let stranger = api.call("no-such-token", &[], "GET", "/api/v1/pods", None);
    assert_eq!(stranger.code, 401);
    let events = api.events(&stranger.audit_id(), "ResponseStarted");
    assert_eq!(stages(&events), ["ResponseStarted"]);
    assert_eq!(events[0]["user"], json!({}));
    assert_eq!(
        events[0]["responseStatus"],
        json!({"metadata": {}, "message": "Authentication failed, attempted: bearer", "code": 401})
    );
}

#[test]
fn a_user_at_level_none_leaves_no_line() {
    let api = Api::start(&[]);
    let cm = json!({"metadata": {"name": "unheard"}, "data": {"k": "v"}});
    let quiet = api.call("quiet-token", &[], "POST", "/api/v1/namespaces/default/configmaps", Some(cm));
    assert_eq!(quiet.code, 201, "{}", quiet.body);
    let id = quiet.audit_id();
    let loud = api.call("root-token", &[], "GET", "/api/v1/namespaces/default/configmaps/unheard", None);
    assert_eq!(api.completed(&loud)["responseObject"]["metadata"]["name"], "unheard");
    api.barrier();
    let log = read_log(&api.log);
    assert!(log.iter().all(|e| e["auditID"] != id.as_str() && e["user"]["username"] != "quiet"), "quiet was logged");
    assert!(log.iter().all(|e| e["requestURI"] != "/readyz"), "the start's /readyz polls were logged");
    // Counted: every line written was an event sent.
    let total = api.metric("apiserver_audit_event_total");
    assert!(total >= log.len() as f64, "{total} < {}", log.len());
}

#[test]
fn rotation_keeps_audit_log_maxbackup_backups_of_whole_lines() {
    let api = Api::start(&["--audit-log-maxsize", "1", "--audit-log-maxbackup", "2"]);
    // Each create's ResponseComplete holds its ~400 KB body twice: past 1 MB at every second line.
    let big = "x".repeat(400 * 1024);
    let mut ids = Vec::new();
    for i in 0..6 {
        let cm = json!({"metadata": {"name": format!("big{i}")}, "data": {"blob": big}});
        let created = api.call("root-token", &[], "POST", "/api/v1/namespaces/default/configmaps", Some(cm));
        assert_eq!(created.code, 201, "{}", created.body);
        ids.push(created.audit_id());
    }
    api.events(ids.last().expect("ids"), "ResponseComplete");
    let mut backups: Vec<String> = std::fs::read_dir(api.dir.path())
        .expect("dir")
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("audit-") && n.ends_with(".log"))
        .collect();
    backups.sort();
    assert_eq!(backups.len(), 2, "{backups:?}");
    let mut kept = Vec::new();
    for name in &backups {
        // audit-2026-12-07T05-39-13.123.log, in UTC, as lumberjack names them.
        let stamp = &name["audit-".len()..name.len() - ".log".len()];
        assert_eq!((stamp.len(), &stamp[10..11], &stamp[13..14], &stamp[19..20]), (23, "T", "-", "."), "{name}");
        let path = api.dir.path().join(name);
        let size = std::fs::metadata(&path).expect("stat").len();
        assert!(size <= 1024 * 1024, "{name} is {size} bytes, past --audit-log-maxsize 1");
        kept.extend(read_log(&path));
    }
    kept.extend(read_log(&api.log));
    // The newest creates are all there, whole; the oldest went with the oldest backups.
    let completed = |id: &str| kept.iter().any(|e| e["auditID"] == id && e["stage"] == "ResponseComplete");
    assert!(ids[3..].iter().all(|id| completed(id)), "a recent create's line is missing");
    assert!(!completed(&ids[0]), "more than 2 backups' worth kept");
}

#[test]
fn a_log_that_cannot_be_written_fails_no_request() {
    let dir = tempfile::tempdir().expect("tempdir");
    let api = Api::start_logging_to(dir, "/dev/full", &[]);
    for i in 0..3 {
        let cm = json!({"metadata": {"name": format!("c{i}")}});
        let created = api.call("root-token", &[], "POST", "/api/v1/namespaces/default/configmaps", Some(cm));
        assert_eq!(created.code, 201, "{}", created.body);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let failed = || api.metric(r#"apiserver_audit_error_total{plugin="log"}"#);
    while failed() < 6.0 {
        assert!(Instant::now() < deadline, "{} write failures counted, want 6", failed());
        std::thread::sleep(Duration::from_millis(20));
    }
    let listed = api.call("root-token", &[], "GET", "/api/v1/namespaces/default/configmaps", None);
    assert_eq!(listed.code, 200, "the apiserver still serves");
}

#[test]
fn without_a_policy_nothing_is_audited_at_all() {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = dir.path().join("audit.log");
    let server = ApiServer::start_with(&dir.path().join("data"), &["--audit-log-path", &log.to_string_lossy()]);
    let api = Api { server, log: log.clone(), dir };
    let a = api.call("", &[], "GET", "/api/v1/namespaces", None);
    assert_eq!(a.code, 200);
    assert_eq!(a.header("audit-id"), None, "no audit work, not even an ID");
    assert!(!log.exists(), "the log was opened");
}

#[test]
fn audit_log_path_dash_writes_only_events_to_stdout() {
    use std::io::BufRead;
    use std::process::{Command, Stdio};
    let dir = tempfile::tempdir().expect("tempdir");
    let policy = dir.path().join("policy.yaml");
    std::fs::write(&policy, POLICY).expect("write");
    let tokens = dir.path().join("tokens.csv");
    std::fs::write(&tokens, TOKENS).expect("write");
    let addr_file = dir.path().join("addr");
    /// The child, killed however the test ends.
    struct Child(std::process::Child);
    impl Drop for Child {
        fn drop(&mut self) {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
    let mut child = Child(
        Command::new(env!("CARGO_BIN_EXE_kaji-apiserver"))
            .args(["--insecure-port", "0", "--data-dir"])
            .arg(dir.path().join("data"))
            .arg("--address-file")
            .arg(&addr_file)
            .arg("--token-auth-file")
            .arg(&tokens)
            .arg("--audit-policy-file")
            .arg(&policy)
            .args(["--audit-log-path", "-"])
            .env("RUST_LOG", "info")
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("kaji-apiserver starts"),
    );
    let stdout = child.0.stdout.take().expect("stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let addr = loop {
        match std::fs::read_to_string(&addr_file) {
            Ok(a) if !a.is_empty() => break a,
            _ if Instant::now() > deadline => panic!("apiserver did not start within 20s"),
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    let auth = [("Authorization", "Bearer root-token")];
    let (code, _) = common::http_with(&addr, "GET", "/api/v1/namespaces/default", &auth, None, "");
    assert_eq!(code, 200);
    // Every line up to that request's ResponseComplete is an event; info logs went elsewhere.
    let mut seen = Vec::new();
    while !seen
        .iter()
        .any(|e: &Value| e["stage"] == "ResponseComplete" && e["requestURI"] == "/api/v1/namespaces/default")
    {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok(line) = rx.recv_timeout(left) else { panic!("no ResponseComplete on stdout; read {seen:?}") };
        let event: Value = serde_json::from_str(&line).unwrap_or_else(|e| panic!("not an event ({e}): {line}"));
        assert_eq!(event["kind"], "Event", "{line}");
        seen.push(event);
    }
}
