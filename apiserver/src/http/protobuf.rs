//! Kubernetes protobuf request bodies (`application/vnd.kubernetes.protobuf`) decoded to JSON.
//!
//! kubectl's typed clients (`create namespace|deployment|configmap|secret|service|serviceaccount`,
//! `auth can-i`) send `k8s\0` + a `runtime.Unknown` whose `raw` is the object's message. The message type comes from
//! the envelope's `typeMeta`, its schema from the descriptor set build.rs derives from k8s-pb, and
//! the conversion walks any message the way Kubernetes' JSON encoding would print it:
//! - presence is kept: an absent field is omitted, a present `0` or `false` stays (`replicas: 0`);
//! - a present empty singular string is omitted: Go sends every non-pointer string, and its JSON
//!   drops the empty ones (`omitempty`);
//! - Quantity, IntOrString, Time, MicroTime and embedded objects take their JSON forms, bytes are
//!   base64, maps are objects, and Go's inlined structs (a Volume's VolumeSource) are flattened.

use super::errors::ApiError;
use base64::Engine as _;
use k8s_pb::apimachinery::pkg::runtime::Unknown;
use prost::Message as _;
use prost_reflect::{DescriptorPool, DynamicMessage, MapKey, MessageDescriptor, ReflectMessage as _, Value as Pb};
use serde_json::{Map, Number, Value};
use std::collections::HashMap;
use std::sync::LazyLock;

pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
const MAGIC: &[u8] = b"k8s\0";

const QUANTITY: &str = "k8s.io.apimachinery.pkg.api.resource.Quantity";
const INT_OR_STRING: &str = "k8s.io.apimachinery.pkg.util.intstr.IntOrString";
const TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.Time";
const MICRO_TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime";
/// Messages whose `raw` bytes are an embedded object (JSON, or protobuf with the magic prefix).
const EMBEDDED: [&str; 3] = [
    "k8s.io.apimachinery.pkg.runtime.RawExtension",
    "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1",
    "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSON",
];
/// Messages that wrap a Go `[]string` (`+protobuf.nullable=true`): JSON arrays.
const STRING_LISTS: [&str; 2] = ["Verbs", "ExtraValue"];

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("provided data does not appear to be a protobuf message, expected prefix [107 56 115 0]")]
    NotProtobuf,
    #[error("error decoding protobuf body: {0}")]
    Envelope(#[source] prost::DecodeError),
    #[error("unsupported protobuf content encoding {0:?}")]
    ContentEncoding(String),
    #[error("Object 'Kind' is missing in the protobuf body")]
    MissingKind,
    #[error("no kind {kind:?} is registered for version {api_version:?}")]
    NotRegistered { kind: String, api_version: String },
    #[error("error decoding protobuf {kind}: {source}")]
    Object {
        kind: String,
        #[source]
        source: prost::DecodeError,
    },
    #[error("{field}: the embedded object is not JSON: {source}")]
    Embedded {
        field: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("{field}: time {seconds} is out of range")]
    Time { field: String, seconds: i64 },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

impl From<Error> for ApiError {
    fn from(e: Error) -> Self {
        ApiError::bad_request(e.to_string())
    }
}

/// Decode a protobuf request body to the JSON object a JSON client would have sent.
pub fn decode(body: &[u8]) -> Result<Value> {
    let raw = body.strip_prefix(MAGIC).ok_or(Error::NotProtobuf)?;
    let unknown = Unknown::decode(raw).map_err(Error::Envelope)?;
    if let Some(enc) = unknown.content_encoding.filter(|e| !e.is_empty()) {
        return Err(Error::ContentEncoding(enc));
    }
    let type_meta = unknown.type_meta.unwrap_or_default();
    let kind = type_meta.kind.unwrap_or_default();
    let api_version = type_meta.api_version.unwrap_or_default();
    if kind.is_empty() {
        return Err(Error::MissingKind);
    }
    let Some(desc) = SCHEMA.lookup(&api_version, &kind) else {
        return Err(Error::NotRegistered { kind, api_version });
    };
    let msg = DynamicMessage::decode(desc, unknown.raw.as_deref().unwrap_or_default())
        .map_err(|source| Error::Object { kind: kind.clone(), source })?;
    let mut obj = object(&msg, "")?;
    obj.insert("apiVersion".into(), api_version.into());
    obj.insert("kind".into(), kind.into());
    Ok(Value::Object(obj))
}

/// The messages of the descriptor set by (group's first label, version, lowercased kind).
struct Schema {
    kinds: HashMap<(String, String, String), MessageDescriptor>,
}

static SCHEMA: LazyLock<Schema> = LazyLock::new(|| {
    let bytes: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/kubernetes.binpb"));
    let pool = DescriptorPool::decode(bytes).expect("build.rs writes a consistent descriptor set");
    let mut messages: Vec<MessageDescriptor> = pool.all_messages().filter(|m| !m.is_map_entry()).collect();
    // `k8s.io.api.*` first, so the built-in groups win over same-named aggregated ones.
    messages.sort_by_key(|m| !m.package_name().starts_with("k8s.io.api."));
    let mut kinds = HashMap::new();
    for m in messages {
        let mut parts = m.package_name().rsplit('.');
        let (Some(version), Some(label)) = (parts.next(), parts.next()) else { continue };
        kinds.entry((label.to_string(), version.to_string(), m.name().to_ascii_lowercase())).or_insert(m);
    }
    Schema { kinds }
});

impl Schema {
    /// `apps/v1` + `Deployment` is `k8s.io.api.apps.v1.Deployment`; core (`v1`) lives in `api.core`.
    /// meta/v1's kinds (DeleteOptions...) are in every group version, as Kubernetes registers them.
    fn lookup(&self, api_version: &str, kind: &str) -> Option<MessageDescriptor> {
        let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
        let label = group.split('.').next().filter(|l| !l.is_empty()).unwrap_or("core");
        let get =
            |label: &str, version: &str| self.kinds.get(&(label.into(), version.into(), kind.to_ascii_lowercase()));
        get(label, version).or_else(|| get("meta", "v1")).cloned()
    }
}

/// A message as a JSON object, one key per present field.
fn object(msg: &DynamicMessage, path: &str) -> Result<Map<String, Value>> {
    let mut out = Map::new();
    for (field, value) in msg.fields() {
        let name = field.json_name();
        // A Go struct embedded with `json:",inline"` (build.rs gives it no JSON name).
        if name.is_empty() {
            if let Some(Value::Object(inline)) = element(value, path)? {
                out.extend(inline);
            }
            continue;
        }
        let path = if path.is_empty() { name.to_string() } else { format!("{path}.{name}") };
        let json = match value {
            Pb::String(s) if s.is_empty() => None,
            other => element(other, &path)?,
        };
        if let Some(json) = json {
            out.insert(name.to_string(), json);
        }
    }
    Ok(out)
}

/// One value; `None` when Kubernetes' JSON would leave it out (a zero Time, an empty RawExtension).
fn element(value: &Pb, path: &str) -> Result<Option<Value>> {
    Ok(Some(match value {
        Pb::Bool(b) => Value::Bool(*b),
        Pb::I32(n) => (*n).into(),
        Pb::I64(n) => (*n).into(),
        Pb::U32(n) => (*n).into(),
        Pb::U64(n) => (*n).into(),
        Pb::EnumNumber(n) => (*n).into(),
        Pb::F32(f) => Number::from_f64(f64::from(*f)).map_or(Value::Null, Value::Number),
        Pb::F64(f) => Number::from_f64(*f).map_or(Value::Null, Value::Number),
        Pb::String(s) => Value::String(s.clone()),
        Pb::Bytes(b) => Value::String(base64::engine::general_purpose::STANDARD.encode(b)),
        Pb::Message(m) => return message(m, path),
        Pb::List(items) => Value::Array(
            items.iter().map(|v| element(v, path).map(|j| j.unwrap_or(Value::Null))).collect::<Result<_>>()?,
        ),
        Pb::Map(entries) => {
            let mut m = Map::new();
            for (k, v) in entries {
                m.insert(map_key(k), element(v, path)?.unwrap_or(Value::Null));
            }
            Value::Object(m)
        }
    }))
}

fn message(msg: &DynamicMessage, path: &str) -> Result<Option<Value>> {
    let desc = msg.descriptor();
    let full_name = desc.full_name();
    Ok(match full_name {
        QUANTITY => Some(Value::String(string(msg, 1).unwrap_or_else(|| "0".into()))),
        INT_OR_STRING => Some(match int(msg, 1) {
            Some(1) => Value::String(string(msg, 3).unwrap_or_default()),
            _ => int(msg, 2).unwrap_or(0).into(),
        }),
        // Go reads an empty Time as the zero time, which JSON prints as null; nanoseconds are dropped.
        TIME => match int(msg, 1) {
            None => None,
            Some(seconds) => Some(Value::String(timestamp(seconds, None, path)?)),
        },
        MICRO_TIME => match int(msg, 1) {
            None => None,
            Some(seconds) => Some(Value::String(timestamp(seconds, Some(int(msg, 2).unwrap_or(0)), path)?)),
        },
        n if EMBEDDED.contains(&n) => match msg.get_field_by_number(1).as_deref() {
            Some(Pb::Bytes(raw)) if !raw.is_empty() => Some(embedded(raw, path)?),
            _ => None,
        },
        _ if full_name.starts_with("k8s.io.") && STRING_LISTS.contains(&desc.name()) => {
            match msg.get_field_by_number(1) {
                Some(items) => element(&items, path)?,
                None => Some(Value::Array(Vec::new())),
            }
        }
        _ => Some(Value::Object(object(msg, path)?)),
    })
}

fn embedded(raw: &[u8], path: &str) -> Result<Value> {
    if raw.starts_with(MAGIC) {
        return decode(raw);
    }
    serde_json::from_slice(raw).map_err(|source| Error::Embedded { field: path.to_string(), source })
}

/// RFC 3339 in UTC: seconds for metav1.Time, microseconds for metav1.MicroTime.
fn timestamp(seconds: i64, nanos: Option<i64>, path: &str) -> Result<String> {
    let t = jiff::Timestamp::from_second(seconds).map_err(|_| Error::Time { field: path.to_string(), seconds })?;
    let text = t.to_string();
    Ok(match nanos {
        None => text,
        Some(n) => format!("{}.{:06}Z", text.trim_end_matches('Z'), n.clamp(0, 999_999_999) / 1000),
    })
}

fn int(msg: &DynamicMessage, number: u32) -> Option<i64> {
    if !msg.has_field_by_number(number) {
        return None;
    }
    match msg.get_field_by_number(number).as_deref() {
        Some(Pb::I32(n)) => Some(i64::from(*n)),
        Some(Pb::I64(n)) => Some(*n),
        _ => None,
    }
}

fn string(msg: &DynamicMessage, number: u32) -> Option<String> {
    if !msg.has_field_by_number(number) {
        return None;
    }
    msg.get_field_by_number(number).and_then(|v| v.as_str().map(str::to_string))
}

fn map_key(k: &MapKey) -> String {
    match k {
        MapKey::String(s) => s.clone(),
        MapKey::Bool(b) => b.to_string(),
        MapKey::I32(n) => n.to_string(),
        MapKey::I64(n) => n.to_string(),
        MapKey::U32(n) => n.to_string(),
        MapKey::U64(n) => n.to_string(),
    }
}

#[cfg(test)]
mod tests {
    //! `testdata/protobuf/*.pb` are request bodies real kubectl v1.32.4 sent to a logging server
    //! (`create namespace foo`, `create deployment web --image=busybox --replicas=2 -- sleep 1`,
    //! `create deployment zero --image=nginx --replicas=0`, `create configmap cm --from-literal=a=b
    //! --from-file=blob=<00 01 02 ff fe "bin"> --from-file=text.txt`, `create secret generic s
    //! --from-literal=x=y`, `auth can-i get pods`). The others are encoded with k8s-pb's types.

    use super::*;
    use k8s_pb::api::apps::v1 as apps;
    use k8s_pb::api::coordination::v1 as coordination;
    use k8s_pb::api::core::v1 as core;
    use k8s_pb::apimachinery::pkg::api::resource::Quantity;
    use k8s_pb::apimachinery::pkg::apis::meta::v1 as meta;
    use k8s_pb::apimachinery::pkg::runtime::{RawExtension, TypeMeta};
    use k8s_pb::apimachinery::pkg::util::intstr::IntOrString;
    use serde_json::json;

    fn fixture(name: &str) -> Value {
        let path = format!("{}/testdata/protobuf/{name}.pb", env!("CARGO_MANIFEST_DIR"));
        let body = std::fs::read(&path).unwrap_or_else(|e| panic!("read {path}: {e}"));
        decode(&body).unwrap_or_else(|e| panic!("decode {name}: {e}"))
    }

    fn envelope(api_version: &str, kind: &str, object: &impl prost::Message) -> Vec<u8> {
        let unknown = Unknown {
            type_meta: Some(TypeMeta { api_version: Some(api_version.into()), kind: Some(kind.into()) }),
            raw: Some(object.encode_to_vec()),
            content_encoding: Some(String::new()),
            content_type: Some(String::new()),
        };
        [MAGIC, &unknown.encode_to_vec()].concat()
    }

    fn meta(name: &str) -> Option<meta::ObjectMeta> {
        Some(meta::ObjectMeta { name: Some(name.into()), ..Default::default() })
    }

    fn empty_strings(v: &Value, path: &str, out: &mut Vec<String>) {
        match v {
            Value::String(s) if s.is_empty() => out.push(path.to_string()),
            Value::Object(m) if !path.ends_with("data") && !path.ends_with("labels") => {
                m.iter().for_each(|(k, v)| empty_strings(v, &format!("{path}.{k}"), out))
            }
            Value::Array(a) => a.iter().for_each(|v| empty_strings(v, &format!("{path}[]"), out)),
            _ => {}
        }
    }

    #[test]
    fn kubectl_create_namespace_decodes_to_the_json_object() {
        assert_eq!(
            fixture("create-namespace"),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "foo", "generation": 0},
                   "spec": {}, "status": {}}),
            "Go sends its non-pointer int64 generation; the create path replaces it"
        );
    }

    #[test]
    fn kubectl_create_deployment_keeps_replicas_command_and_labels() {
        let d = fixture("create-deployment");
        assert_eq!((d["apiVersion"].as_str(), d["kind"].as_str()), (Some("apps/v1"), Some("Deployment")));
        assert_eq!(
            d["metadata"],
            json!({"name": "web", "labels": {"app": "web"}, "generation": 0}),
            "no zero creationTimestamp"
        );
        assert_eq!(d["spec"]["replicas"], 2);
        assert_eq!(d["spec"]["selector"], json!({"matchLabels": {"app": "web"}}));
        let template = &d["spec"]["template"];
        assert_eq!(template["metadata"]["labels"], json!({"app": "web"}));
        let c = &template["spec"]["containers"][0];
        assert_eq!((c["name"].as_str(), c["image"].as_str()), (Some("busybox"), Some("busybox")));
        assert_eq!(c["command"], json!(["sleep", "1"]));
        assert_eq!(c["resources"], json!({}));
        let mut empty = Vec::new();
        empty_strings(&d, "", &mut empty);
        assert!(empty.is_empty(), "Go's empty non-pointer strings are left out: {empty:?}");
    }

    #[test]
    fn an_explicit_zero_is_kept_and_an_absent_field_is_left_out() {
        assert_eq!(fixture("create-deployment-zero")["spec"]["replicas"], 0);
        let d = apps::Deployment { metadata: meta("web"), spec: Some(Default::default()), status: None };
        let v = decode(&envelope("apps/v1", "Deployment", &d)).expect("decodes");
        assert_eq!(v["spec"], json!({}), "replicas was never set: {v}");
        assert!(v.get("status").is_none());
    }

    #[test]
    fn configmap_binary_data_and_secret_data_are_base64() {
        let cm = fixture("create-configmap");
        assert_eq!(cm["data"], json!({"a": "b", "text.txt": "hello\n"}));
        let blob = base64::engine::general_purpose::STANDARD.encode(b"\x00\x01\x02\xff\xfebin");
        assert_eq!(cm["binaryData"], json!({"blob": blob}));
        let s = fixture("create-secret");
        assert_eq!((s["kind"].as_str(), &s["data"]), (Some("Secret"), &json!({"x": "eQ=="})));
        assert!(s.get("type").is_none(), "an empty type is left to defaulting");
    }

    #[test]
    fn kubectl_auth_can_i_decodes_to_a_self_subject_access_review() {
        let r = fixture("auth-can-i");
        assert_eq!(r["apiVersion"], "authorization.k8s.io/v1");
        assert_eq!(r["spec"]["resourceAttributes"], json!({"namespace": "default", "verb": "get", "resource": "pods"}));
    }

    #[test]
    fn kubernetes_special_types_take_their_json_forms() {
        let port = |p: IntOrString| core::Probe {
            handler: Some(core::ProbeHandler {
                tcp_socket: Some(core::TcpSocketAction { port: Some(p), host: None }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let pod = core::Pod {
            metadata: Some(meta::ObjectMeta {
                name: Some("p".into()),
                creation_timestamp: Some(meta::Time { seconds: Some(1_700_000_000), nanos: Some(5) }),
                managed_fields: vec![meta::ManagedFieldsEntry {
                    fields_v1: Some(meta::FieldsV1 { raw: Some(br#"{"f:spec":{}}"#.to_vec()) }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            spec: Some(core::PodSpec {
                host_ipc: Some(true),
                volumes: vec![core::Volume {
                    name: Some("v".into()),
                    volume_source: Some(core::VolumeSource {
                        config_map: Some(core::ConfigMapVolumeSource {
                            local_object_reference: Some(core::LocalObjectReference { name: Some("cm".into()) }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                }],
                containers: vec![core::Container {
                    name: Some("c".into()),
                    resources: Some(core::ResourceRequirements {
                        limits: [("cpu".to_string(), Quantity { string: Some("500m".into()) })].into(),
                        ..Default::default()
                    }),
                    liveness_probe: Some(port(IntOrString { r#type: Some(0), int_val: Some(8080), str_val: None })),
                    readiness_probe: Some(port(IntOrString {
                        r#type: Some(1),
                        int_val: None,
                        str_val: Some("http".into()),
                    })),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            status: Some(core::PodStatus {
                pod_ip: Some("10.0.0.7".into()),
                start_time: Some(meta::Time::default()),
                ..Default::default()
            }),
        };
        let v = decode(&envelope("v1", "Pod", &pod)).expect("decodes");
        assert_eq!(v["metadata"]["creationTimestamp"], "2023-11-14T22:13:20Z");
        assert_eq!(v["metadata"]["managedFields"][0]["fieldsV1"], json!({"f:spec": {}}));
        assert_eq!(v["spec"]["hostIPC"], true, "JSON names keep Kubernetes' casing");
        assert_eq!(v["spec"]["volumes"], json!([{"name": "v", "configMap": {"name": "cm"}}]), "inline structs");
        let c = &v["spec"]["containers"][0];
        assert_eq!(c["resources"]["limits"], json!({"cpu": "500m"}));
        assert_eq!(c["livenessProbe"]["tcpSocket"]["port"], 8080);
        assert_eq!(c["readinessProbe"]["tcpSocket"]["port"], "http");
        assert_eq!(v["status"], json!({"podIP": "10.0.0.7"}), "an empty Time is Go's zero time, null in JSON");

        let lease = coordination::Lease {
            metadata: meta("l"),
            spec: Some(coordination::LeaseSpec {
                renew_time: Some(meta::MicroTime { seconds: Some(1_700_000_000), nanos: Some(123_456_789) }),
                ..Default::default()
            }),
        };
        let v = decode(&envelope("coordination.k8s.io/v1", "Lease", &lease)).expect("decodes");
        assert_eq!(v["spec"]["renewTime"], "2023-11-14T22:13:20.123456Z");

        let rev = apps::ControllerRevision {
            metadata: meta("r"),
            data: Some(RawExtension { raw: Some(br#"{"spec":{"x":1}}"#.to_vec()) }),
            revision: Some(3),
        };
        let v = decode(&envelope("apps/v1", "ControllerRevision", &rev)).expect("decodes");
        assert_eq!((&v["data"], &v["revision"]), (&json!({"spec": {"x": 1}}), &json!(3)));
    }

    #[test]
    fn delete_options_decode_in_any_group_version() {
        let opts = meta::DeleteOptions {
            grace_period_seconds: Some(0),
            propagation_policy: Some("Foreground".into()),
            ..Default::default()
        };
        let v = decode(&envelope("apps/v1", "DeleteOptions", &opts)).expect("decodes");
        assert_eq!(
            v,
            json!({"apiVersion": "apps/v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0,
                   "propagationPolicy": "Foreground"})
        );
    }

    #[test]
    fn every_served_kind_has_a_protobuf_schema() {
        for r in kaji_api::resources::RESOURCES {
            assert!(SCHEMA.lookup(&r.api_version(), r.kind).is_some(), "{} {}", r.api_version(), r.kind);
        }
    }

    #[test]
    fn malformed_bodies_are_bad_requests_that_say_why() {
        let err = ApiError::from(decode(b"{\"kind\":\"Pod\"}").expect_err("no magic"));
        assert_eq!((err.code, err.reason), (400, "BadRequest"));
        assert!(err.message.contains("expected prefix [107 56 115 0]"), "{}", err.message);
        let err = decode(&envelope("v1", "Gizmo", &core::Pod::default())).expect_err("unknown kind");
        assert_eq!(err.to_string(), r#"no kind "Gizmo" is registered for version "v1""#);
        let ns = std::fs::read(format!("{}/testdata/protobuf/create-namespace.pb", env!("CARGO_MANIFEST_DIR")))
            .expect("fixture");
        let err = decode(&ns[..ns.len() - 3]).expect_err("truncated");
        assert!(err.to_string().starts_with("error decoding protobuf"), "{err}");
        let bad = RawExtension { raw: Some(b"not json".to_vec()) };
        let rev = apps::ControllerRevision { metadata: meta("r"), data: Some(bad), revision: None };
        let err = decode(&envelope("apps/v1", "ControllerRevision", &rev)).expect_err("raw is not JSON");
        assert!(err.to_string().starts_with("data: the embedded object is not JSON"), "{err}");
    }
}
