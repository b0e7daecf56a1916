//! An apiserver with Node,RBAC authorization on the plain-HTTP test port, users from a static
//! token file (`<name>-token` authenticates `<name>`), and roles granted to them on the fly — what
//! the tests of under-privileged writers use.

use super::{http_with, ApiServer};
use serde_json::{json, Value};
use std::time::Duration;

pub struct TokenApi {
    pub server: ApiServer,
    pub dir: tempfile::TempDir,
}

impl TokenApi {
    /// `root` in system:masters, the `users` as themselves, `system:node:<n>` for each of `nodes`;
    /// `extra` flags after `--authorization-mode Node,RBAC`.
    pub fn start(users: &[&str], nodes: &[&str], extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut csv = String::from("root-token,root,0,system:masters\n");
        for (i, u) in users.iter().enumerate() {
            csv.push_str(&format!("{u}-token,{u},{}\n", 1000 + i));
        }
        for n in nodes {
            csv.push_str(&format!("{n}-token,system:node:{n},{n},system:nodes\n"));
        }
        std::fs::write(dir.path().join("tokens.csv"), csv).expect("write tokens");
        let server = Self::launch(dir.path(), extra);
        Self { server, dir }
    }

    fn launch(dir: &std::path::Path, extra: &[&str]) -> ApiServer {
        let tokens = dir.join("tokens.csv").to_string_lossy().to_string();
        let mut flags = vec!["--token-auth-file", &tokens, "--authorization-mode", "Node,RBAC"];
        flags.extend_from_slice(extra);
        ApiServer::start_with(&dir.join("data"), &flags)
    }

    /// The same users and data, served again with other `extra` flags.
    pub fn restart(&mut self, extra: &[&str]) {
        self.server.kill9();
        self.server = Self::launch(self.dir.path(), extra);
    }

    /// One request as `who` (a user or node name, or `root`), with `content_type`; (status, body).
    pub fn raw(&self, who: &str, method: &str, path: &str, body: Option<&str>, content_type: &str) -> (u16, Value) {
        let auth = format!("Bearer {who}-token");
        let (code, text) = http_with(&self.server.addr, method, path, &[("Authorization", &auth)], body, content_type);
        (code, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// [`raw`](Self::raw) with a JSON body (a merge patch for PATCH).
    pub fn call(&self, who: &str, method: &str, path: &str, body: Option<Value>) -> (u16, Value) {
        let ct = if method == "PATCH" { "application/merge-patch+json" } else { "application/json" };
        self.raw(who, method, path, body.map(|b| b.to_string()).as_deref(), ct)
    }

    /// A 2xx, or the test fails with what came back.
    pub fn ok(&self, who: &str, method: &str, path: &str, body: Value) -> Value {
        let (code, v) = self.call(who, method, path, Some(body));
        assert!((200..300).contains(&code), "{method} {path} as {who}: {code} {v}");
        v
    }

    /// A Role `name` in `ns` with `rules`, bound to `user`; returns once the authorizer's view (the
    /// watch cache) lets `user` do what the first rule's first verb says.
    pub fn grant(&self, ns: &str, name: &str, user: &str, rules: Value) {
        let rbac = format!("/apis/rbac.authorization.k8s.io/v1/namespaces/{ns}");
        self.ok("root", "POST", &format!("{rbac}/roles"), json!({"metadata": {"name": name}, "rules": rules}));
        self.ok(
            "root",
            "POST",
            &format!("{rbac}/rolebindings"),
            json!({
            "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "User", "name": user, "apiGroup": "rbac.authorization.k8s.io"}]}),
        );
        let first = &rules[0];
        let (res, sub) = match first["resources"][0].as_str().unwrap_or("").split_once('/') {
            Some((r, s)) => (r.to_string(), s.to_string()),
            None => (first["resources"][0].as_str().unwrap_or("").to_string(), String::new()),
        };
        let attrs = json!({"namespace": ns, "verb": first["verbs"][0], "group": first["apiGroups"][0],
                           "resource": res, "subresource": sub});
        let review = json!({"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                            "spec": {"user": user, "resourceAttributes": attrs}});
        for _ in 0..200 {
            let v = self.ok("root", "POST", "/apis/authorization.k8s.io/v1/subjectaccessreviews", review.clone());
            if v["status"]["allowed"] == true {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        panic!("the grant of {name} to {user} never took effect");
    }
}
