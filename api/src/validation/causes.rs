//! Field causes and the `Status` message built from them, quoted the way Go prints values.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;

use serde_json::{Map, Value};

/// One field error, as it appears in `Status.details.causes`.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Cause {
    /// `FieldValueRequired`, `FieldValueInvalid`, `FieldValueDuplicate`, `FieldValueNotSupported`,
    /// `FieldValueForbidden`, `FieldValueTooLong`, `FieldValueTooMany` or `FieldValueNotFound`.
    pub reason: String,
    /// What apimachinery's `field.Error.ErrorBody()` gives, e.g. `Required value`.
    pub message: String,
    /// The field path, e.g. `spec.containers[0].image`.
    pub field: String,
}

/// A rejected value, rendered as Go's `field.Error` renders it: strings quoted like `%q`,
/// numbers and booleans bare, anything else pre-rendered by the caller.
#[derive(Debug, Clone, PartialEq)]
pub enum BadValue {
    Str(String),
    Int(i64),
    Bool(bool),
    Raw(String),
}

impl BadValue {
    fn render(&self) -> String {
        match self {
            BadValue::Str(s) => go_quote(s),
            BadValue::Int(i) => i.to_string(),
            BadValue::Bool(b) => b.to_string(),
            BadValue::Raw(r) => r.clone(),
        }
    }
}

impl From<&str> for BadValue {
    fn from(s: &str) -> Self {
        BadValue::Str(s.to_string())
    }
}

impl From<String> for BadValue {
    fn from(s: String) -> Self {
        BadValue::Str(s)
    }
}

impl From<&String> for BadValue {
    fn from(s: &String) -> Self {
        BadValue::Str(s.clone())
    }
}

impl From<i64> for BadValue {
    fn from(i: i64) -> Self {
        BadValue::Int(i)
    }
}

impl From<i32> for BadValue {
    fn from(i: i32) -> Self {
        BadValue::Int(i64::from(i))
    }
}

impl From<bool> for BadValue {
    fn from(b: bool) -> Self {
        BadValue::Bool(b)
    }
}

impl Cause {
    fn build(reason: &str, field: impl Into<String>, kind: &str, value: Option<BadValue>, detail: &str) -> Cause {
        let mut message = kind.to_string();
        if let Some(v) = value {
            message.push_str(": ");
            message.push_str(&v.render());
        }
        if !detail.is_empty() {
            message.push_str(": ");
            message.push_str(detail);
        }
        Cause { reason: reason.to_string(), message, field: field.into() }
    }

    /// `Required value[: detail]`.
    pub fn required(field: impl Into<String>, detail: &str) -> Cause {
        Cause::build("FieldValueRequired", field, "Required value", None, detail)
    }

    /// `Forbidden[: detail]`.
    pub fn forbidden(field: impl Into<String>, detail: &str) -> Cause {
        Cause::build("FieldValueForbidden", field, "Forbidden", None, detail)
    }

    /// `Invalid value: <value>[: detail]`.
    pub fn invalid(field: impl Into<String>, value: impl Into<BadValue>, detail: &str) -> Cause {
        Cause::build("FieldValueInvalid", field, "Invalid value", Some(value.into()), detail)
    }

    /// `Unsupported value: <value>: supported values: "a", "b"`.
    pub fn not_supported(field: impl Into<String>, value: impl Into<BadValue>, supported: &[&str]) -> Cause {
        let detail = if supported.is_empty() {
            String::new()
        } else {
            let quoted: Vec<String> = supported.iter().map(|s| go_quote(s)).collect();
            format!("supported values: {}", quoted.join(", "))
        };
        Cause::build("FieldValueNotSupported", field, "Unsupported value", Some(value.into()), &detail)
    }

    /// `Duplicate value: <value>`.
    pub fn duplicate(field: impl Into<String>, value: impl Into<BadValue>) -> Cause {
        Cause::build("FieldValueDuplicate", field, "Duplicate value", Some(value.into()), "")
    }

    /// `Not found: <value>`.
    pub fn not_found(field: impl Into<String>, value: impl Into<BadValue>) -> Cause {
        Cause::build("FieldValueNotFound", field, "Not found", Some(value.into()), "")
    }

    /// `Too long: must have at most <max> bytes`.
    pub fn too_long(field: impl Into<String>, max_bytes: usize) -> Cause {
        let detail = format!("must have at most {max_bytes} bytes");
        Cause::build("FieldValueTooLong", field, "Too long", None, &detail)
    }

    /// `Too many: <actual>: must have at most <max> items`.
    pub fn too_many(field: impl Into<String>, actual: usize, max: usize) -> Cause {
        let detail = format!("must have at most {max} items");
        let actual = i64::try_from(actual).unwrap_or(i64::MAX);
        Cause::build("FieldValueTooMany", field, "Too many", Some(BadValue::Int(actual)), &detail)
    }

    /// `<field>: <message>`, as Go's `field.Error.Error()`.
    pub fn error_string(&self) -> String {
        format!("{}: {}", self.field, self.message)
    }
}

/// `Pod "web" is invalid: spec.containers[0].image: Required value`: the message of
/// apimachinery's `NewInvalid`, with the same de-duplication and `[a, b]` joining.
pub fn invalid_message(kind: &str, name: &str, causes: &[Cause]) -> String {
    let mut seen = HashSet::new();
    let mut msgs = Vec::new();
    for c in causes {
        let m = c.error_string();
        if seen.insert(m.clone()) {
            msgs.push(m);
        }
    }
    let head = format!("{} {} is invalid", qualified_kind(kind), go_quote(name));
    match msgs.len() {
        0 => head,
        1 => format!("{head}: {}", msgs[0]),
        _ => format!("{head}: [{}]", msgs.join(", ")),
    }
}

fn qualified_kind(kind: &str) -> String {
    match kind {
        "Deployment" | "ReplicaSet" | "DaemonSet" | "StatefulSet" | "ControllerRevision" => format!("{kind}.apps"),
        "Job" | "CronJob" => format!("{kind}.batch"),
        // The scale subresource's body (`autoscaling.Kind("Scale")`).
        "Scale" => format!("{kind}.autoscaling"),
        "StorageClass" => format!("{kind}.storage.k8s.io"),
        "CertificateSigningRequest" => format!("{kind}.certificates.k8s.io"),
        "EndpointSlice" => format!("{kind}.discovery.k8s.io"),
        "Lease" => format!("{kind}.coordination.k8s.io"),
        _ => kind.to_string(),
    }
}

/// Go's `strconv.Quote`.
pub(crate) fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\u{7}' => out.push_str("\\a"),
            '\u{8}' => out.push_str("\\b"),
            '\u{b}' => out.push_str("\\v"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c if c.is_control() => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%#v` of a `map[string]string` (keys sorted).
pub(crate) fn go_map(m: Option<&Map<String, Value>>) -> String {
    match m {
        None => "map[string]string(nil)".to_string(),
        Some(m) => {
            let sorted: BTreeMap<&String, &str> = m.iter().map(|(k, v)| (k, v.as_str().unwrap_or(""))).collect();
            let parts: Vec<String> = sorted.iter().map(|(k, v)| format!("{}:{}", go_quote(k), go_quote(v))).collect();
            format!("map[string]string{{{}}}", parts.join(", "))
        }
    }
}

/// Go's `%#v` of a `[]string` (or a named string slice such as `[]core.IPFamily`).
pub(crate) fn go_slice(type_name: &str, items: &[&str]) -> String {
    let parts: Vec<String> = items.iter().map(|s| go_quote(s)).collect();
    format!("[]{type_name}{{{}}}", parts.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn several_causes_are_joined_in_brackets_and_deduplicated() {
        let causes = vec![
            Cause::required("spec.containers", ""),
            Cause::required("spec.containers", ""),
            Cause::required("metadata.name", "name or generateName is required"),
        ];
        assert_eq!(
            invalid_message("Deployment", "web", &causes),
            "Deployment.apps \"web\" is invalid: [spec.containers: Required value, metadata.name: Required value: name or generateName is required]"
        );
    }

    #[test]
    fn go_quoting_escapes_like_strconv_quote() {
        assert_eq!(go_quote("a\"b\\c\n\u{1}é"), "\"a\\\"b\\\\c\\n\\x01é\"");
    }
}
