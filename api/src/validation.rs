//! Validation of API objects: field-level causes with Kubernetes' own field paths and wording.
//!
//! Objects are validated after defaulting (see `defaults.rs`). Fields that defaulting always
//! fills (restartPolicy, protocol, imagePullPolicy, ...) are checked only when present, so
//! validating an undefaulted object never reports a missing defaulted field.

use std::collections::{BTreeMap, HashSet};
use std::fmt::Write as _;
use std::net::IpAddr;

use serde_json::{Map, Value};

// ---------------------------------------------------------------------------------------------
// Causes
// ---------------------------------------------------------------------------------------------

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
        "Deployment" | "ReplicaSet" => format!("{kind}.apps"),
        "EndpointSlice" => format!("{kind}.discovery.k8s.io"),
        "Lease" => format!("{kind}.coordination.k8s.io"),
        _ => kind.to_string(),
    }
}

/// Go's `strconv.Quote`.
fn go_quote(s: &str) -> String {
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
fn go_map(m: Option<&Map<String, Value>>) -> String {
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
fn go_slice(type_name: &str, items: &[&str]) -> String {
    let parts: Vec<String> = items.iter().map(|s| go_quote(s)).collect();
    format!("[]{type_name}{{{}}}", parts.join(", "))
}

// ---------------------------------------------------------------------------------------------
// Name and format rules (apimachinery/pkg/util/validation)
// ---------------------------------------------------------------------------------------------

const DNS1123_LABEL_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?";
const DNS1123_LABEL_MSG: &str = "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character";
const DNS1123_SUBDOMAIN_FMT: &str = "[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*";
const DNS1123_SUBDOMAIN_MSG: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character";
const DNS1035_LABEL_FMT: &str = "[a-z]([-a-z0-9]*[a-z0-9])?";
const DNS1035_LABEL_MSG: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character";
const QNAME_FMT: &str = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]";
const QNAME_MSG: &str =
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const LABEL_VALUE_FMT: &str = "(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?";
const LABEL_VALUE_MSG: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character";
const CONFIG_KEY_FMT: &str = "[-._a-zA-Z0-9]+";
const CONFIG_KEY_MSG: &str = "a valid config key must consist of alphanumeric characters, '-', '_' or '.'";
const ENV_NAME_MSG: &str =
    "a valid environment variable name must consist only of printable ASCII characters other than '='";
const PERCENT_FMT: &str = "[0-9]+%";
const PERCENT_MSG: &str = "a valid percent string must be a numeric string followed by an ending '%'";
const IS_NEGATIVE_MSG: &str = "must be greater than or equal to 0";
const IMMUTABLE_MSG: &str = "field is immutable";
const FILE_MODE_MSG: &str = "must be a number between 0 and 0777 (octal), both inclusive";
const QUANTITY_MSG: &str =
    "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'";
const IP_MSG: &str = "must be a valid IP address, (e.g. 10.9.8.7 or 2001:db8::ffff)";
const CIDR_MSG: &str = "must be a valid CIDR value, (e.g. 10.9.8.0/24 or 2001:db8::/64)";

fn regex_error(msg: &str, fmt: &str, examples: &[&str]) -> String {
    if examples.is_empty() {
        return format!("{msg} (regex used for validation is '{fmt}')");
    }
    let mut out = format!("{msg} (e.g. ");
    for (i, e) in examples.iter().enumerate() {
        if i > 0 {
            out.push_str(" or ");
        }
        let _ = write!(out, "'{e}', ");
    }
    let _ = write!(out, "regex used for validation is '{fmt}')");
    out
}

fn max_len_error(n: usize) -> String {
    format!("must be no more than {n} characters")
}

fn inclusive_range_error(lo: i64, hi: i64) -> String {
    format!("must be between {lo} and {hi}, inclusive")
}

fn is_lower_alnum(c: u8) -> bool {
    c.is_ascii_lowercase() || c.is_ascii_digit()
}

fn matches_dns1123_label(v: &str) -> bool {
    let b = v.as_bytes();
    match (b.first(), b.last()) {
        (Some(&f), Some(&l)) => {
            is_lower_alnum(f) && is_lower_alnum(l) && b.iter().all(|&c| is_lower_alnum(c) || c == b'-')
        }
        _ => false,
    }
}

fn matches_dns1123_subdomain(v: &str) -> bool {
    v.split('.').all(matches_dns1123_label)
}

fn matches_qualified_name_part(v: &str) -> bool {
    let b = v.as_bytes();
    match (b.first(), b.last()) {
        (Some(f), Some(l)) => {
            f.is_ascii_alphanumeric()
                && l.is_ascii_alphanumeric()
                && b.iter().all(|&c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
        }
        _ => false,
    }
}

/// `IsDNS1123Label`: a lowercase RFC 1123 label of at most 63 characters.
pub fn dns1123_label_errors(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !matches_dns1123_label(v) {
        if matches_dns1123_subdomain(v) {
            errs.push("must not contain dots".to_string());
        } else {
            errs.push(regex_error(DNS1123_LABEL_MSG, DNS1123_LABEL_FMT, &["my-name", "123-abc"]));
        }
    }
    errs
}

/// `IsDNS1123Subdomain`: a lowercase RFC 1123 subdomain of at most 253 characters.
pub fn dns1123_subdomain_errors(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 253 {
        errs.push(max_len_error(253));
    }
    if !matches_dns1123_subdomain(v) {
        errs.push(regex_error(DNS1123_SUBDOMAIN_MSG, DNS1123_SUBDOMAIN_FMT, &["example.com"]));
    }
    errs
}

/// `IsDNS1035Label`: like a DNS-1123 label but starting with a letter (Service names).
pub fn dns1035_label_errors(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push(max_len_error(63));
    }
    let starts_alpha = v.as_bytes().first().is_some_and(|c| c.is_ascii_lowercase());
    if !(starts_alpha && matches_dns1123_label(v)) {
        errs.push(regex_error(DNS1035_LABEL_MSG, DNS1035_LABEL_FMT, &["my-name", "abc-123"]));
    }
    errs
}

/// `IsQualifiedName`: `[prefix/]name`, the format of label and annotation keys.
pub fn qualified_name_errors(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let parts: Vec<&str> = v.split('/').collect();
    let name = match parts.as_slice() {
        [name] => *name,
        [prefix, name] => {
            if prefix.is_empty() {
                errs.push("prefix part must be non-empty".to_string());
            } else {
                errs.extend(dns1123_subdomain_errors(prefix).into_iter().map(|m| format!("prefix part {m}")));
            }
            *name
        }
        _ => {
            errs.push(format!(
                "a qualified name {} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')",
                regex_error(QNAME_MSG, QNAME_FMT, &["MyName", "my.name", "123-abc"])
            ));
            return errs;
        }
    };
    if name.is_empty() {
        errs.push("name part must be non-empty".to_string());
    } else if name.len() > 63 {
        errs.push(format!("name part {}", max_len_error(63)));
    }
    if !matches_qualified_name_part(name) {
        errs.push(format!("name part {}", regex_error(QNAME_MSG, QNAME_FMT, &["MyName", "my.name", "123-abc"])));
    }
    errs
}

/// `IsValidLabelValue`: empty, or a qualified-name part of at most 63 characters.
pub fn label_value_errors(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 63 {
        errs.push(max_len_error(63));
    }
    if !(v.is_empty() || matches_qualified_name_part(v)) {
        errs.push(regex_error(LABEL_VALUE_MSG, LABEL_VALUE_FMT, &["MyValue", "my_value", "12345"]));
    }
    errs
}

/// `IsValidPortName`: an IANA_SVC_NAME.
pub fn port_name_errors(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 15 {
        errs.push(max_len_error(15));
    }
    if v.is_empty() || !v.bytes().all(|c| is_lower_alnum(c) || c == b'-') {
        errs.push("must contain only alpha-numeric characters (a-z, 0-9), and hyphens (-)".to_string());
    }
    if !v.bytes().any(|c| c.is_ascii_lowercase()) {
        errs.push("must contain at least one letter (a-z)".to_string());
    }
    if v.contains("--") {
        errs.push("must not contain consecutive hyphens".to_string());
    }
    if v.starts_with('-') || v.ends_with('-') {
        errs.push("must not begin or end with a hyphen".to_string());
    }
    errs
}

/// `IsRelaxedEnvVarName` (RelaxedEnvironmentVariableValidation is on by default since 1.32).
pub fn env_var_name_errors(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.is_empty() {
        errs.push("environment variable name must be non-empty".to_string());
    }
    if v.chars().any(|c| !(' '..='~').contains(&c) || c == '=') {
        errs.push(ENV_NAME_MSG.to_string());
    }
    errs
}

/// `IsConfigMapKey`: keys of ConfigMap and Secret data.
pub fn config_map_key_errors(v: &str) -> Vec<String> {
    let mut errs = Vec::new();
    if v.len() > 253 {
        errs.push(max_len_error(253));
    }
    if v.is_empty() || !v.bytes().all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b'_')) {
        errs.push(regex_error(CONFIG_KEY_MSG, CONFIG_KEY_FMT, &["key.name", "KEY_NAME", "key-name"]));
    }
    if v == "." {
        errs.push("must not be '.'".to_string());
    } else if v == ".." {
        errs.push("must not be '..'".to_string());
    } else if v.starts_with("..") {
        errs.push("must not start with '..'".to_string());
    }
    errs
}

fn port_num_errors(p: i64) -> Vec<String> {
    if (1..=65535).contains(&p) {
        Vec::new()
    } else {
        vec![inclusive_range_error(1, 65535)]
    }
}

fn percent_errors(v: &str) -> Vec<String> {
    let ok = v.len() > 1 && v.ends_with('%') && v[..v.len() - 1].bytes().all(|c| c.is_ascii_digit());
    if ok {
        Vec::new()
    } else {
        vec![regex_error(PERCENT_MSG, PERCENT_FMT, &["1%", "93%"])]
    }
}

fn valid_cidr(v: &str) -> bool {
    let Some((ip, bits)) = v.split_once('/') else {
        return false;
    };
    let Ok(ip) = ip.parse::<IpAddr>() else {
        return false;
    };
    let Ok(bits) = bits.parse::<u8>() else {
        return false;
    };
    bits <= if ip.is_ipv4() { 32 } else { 128 }
}

// ---------------------------------------------------------------------------------------------
// Quantities
// ---------------------------------------------------------------------------------------------

/// Parses a Kubernetes resource quantity (`500m`, `1`, `128Mi`, `1G`, `1e3`, `0.5`) into
/// nano-units, rounding up like the apiserver does. `None` when it is not a quantity or overflows.
pub fn parse_quantity(s: &str) -> Option<i128> {
    let (negative, rest) = match s.as_bytes().first() {
        Some(b'-') => (true, &s[1..]),
        Some(b'+') => (false, &s[1..]),
        _ => (false, s),
    };
    let num_end = rest.find(|c: char| !(c.is_ascii_digit() || c == '.')).unwrap_or(rest.len());
    let (num, suffix) = rest.split_at(num_end);
    let (int_part, frac_part) = num.split_once('.').unwrap_or((num, ""));
    if frac_part.contains('.') || (int_part.is_empty() && frac_part.is_empty()) {
        return None;
    }
    let (exp10, pow2): (i32, u32) = match suffix {
        "" => (0, 0),
        "n" => (-9, 0),
        "u" => (-6, 0),
        "m" => (-3, 0),
        "k" => (3, 0),
        "M" => (6, 0),
        "G" => (9, 0),
        "T" => (12, 0),
        "P" => (15, 0),
        "E" => (18, 0),
        "Ki" => (0, 10),
        "Mi" => (0, 20),
        "Gi" => (0, 30),
        "Ti" => (0, 40),
        "Pi" => (0, 50),
        "Ei" => (0, 60),
        s if s.len() > 1 && (s.starts_with('e') || s.starts_with('E')) => (s[1..].parse::<i32>().ok()?, 0),
        _ => return None,
    };
    let digits = format!("{int_part}{frac_part}");
    let digits = digits.trim_start_matches('0');
    if digits.len() > 36 {
        return None;
    }
    let mut value: i128 = if digits.is_empty() { 0 } else { digits.parse().ok()? };
    value = value.checked_mul(1i128.checked_shl(pow2)?)?;
    let frac_len = i32::try_from(frac_part.len()).ok()?;
    let exp = exp10.checked_add(9)?.checked_sub(frac_len)?;
    if exp >= 0 {
        let factor = 10i128.checked_pow(u32::try_from(exp).ok()?)?;
        value = value.checked_mul(factor)?;
    } else {
        let shift = u32::try_from(-exp).ok()?;
        value = match 10i128.checked_pow(shift) {
            Some(div) => (value + div - 1) / div,
            None => i128::from(value > 0),
        };
    }
    Some(if negative { -value } else { value })
}

fn quantity_of(v: &Value) -> Option<i128> {
    match v {
        Value::String(s) => parse_quantity(s),
        Value::Number(n) => parse_quantity(&n.to_string()),
        _ => None,
    }
}

fn quantity_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    }
}

// ---------------------------------------------------------------------------------------------
// JSON access
// ---------------------------------------------------------------------------------------------

fn st<'a>(v: &'a Value, key: &str) -> &'a str {
    v.get(key).and_then(Value::as_str).unwrap_or("")
}

fn arr<'a>(v: &'a Value, key: &str) -> &'a [Value] {
    v.get(key).and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[])
}

fn obj<'a>(v: &'a Value, key: &str) -> Option<&'a Map<String, Value>> {
    v.get(key).and_then(Value::as_object)
}

fn int(v: &Value, key: &str) -> Option<i64> {
    v.get(key).and_then(Value::as_i64)
}

fn has(v: &Value, key: &str) -> bool {
    v.get(key).is_some_and(|x| !x.is_null())
}

fn strs(v: &Value, key: &str) -> Vec<String> {
    arr(v, key).iter().filter_map(Value::as_str).map(str::to_string).collect()
}

/// Equality the way apimachinery's semantic DeepEqual sees JSON: null, missing, `[]` and `{}` are alike.
fn semantic_eq(a: Option<&Value>, b: Option<&Value>) -> bool {
    fn empty(v: Option<&Value>) -> bool {
        match v {
            None | Some(Value::Null) => true,
            Some(Value::Array(a)) => a.is_empty(),
            Some(Value::Object(o)) => o.values().all(|x| empty(Some(x))),
            _ => false,
        }
    }
    match (a, b) {
        (Some(Value::Object(x)), Some(Value::Object(y))) => {
            x.keys().chain(y.keys()).all(|k| semantic_eq(x.get(k), y.get(k)))
        }
        (Some(Value::Array(x)), Some(Value::Array(y))) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| semantic_eq(Some(p), Some(q)))
        }
        _ if empty(a) && empty(b) => true,
        (Some(x), Some(y)) => x == y,
        _ => false,
    }
}

// ---------------------------------------------------------------------------------------------
// Entry points
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Create,
    Update,
}

/// Full validation of a new object (metadata + spec). The caller already resolved
/// `generateName` and filled the namespace of namespaced kinds.
pub fn validate_create(kind: &str, obj: &Value) -> Vec<Cause> {
    validate_object(kind, obj, Op::Create)
}

/// [`validate_create`] of `new` plus what may not change relative to `old`.
///
/// Server-owned values the client may omit (uid, creationTimestamp, clusterIP) count as
/// unchanged when absent from `new`; the caller carries them over from `old`.
pub fn validate_update(kind: &str, new: &Value, old: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    validate_meta_update(new, old, &mut out);
    if kind == "Pod" {
        // ValidatePodUpdate stops early when containers are added or removed.
        if let Some(stop) = pod_container_count_change(new, old) {
            out.push(stop);
            return out;
        }
    }
    out.extend(validate_object(kind, new, Op::Update));
    let null = Value::Null;
    let new_spec = new.get("spec").unwrap_or(&null);
    let old_spec = old.get("spec").unwrap_or(&null);
    match kind {
        "Pod" => validate_pod_spec_update(new_spec, old_spec, &mut out),
        "Service" => validate_service_update(new_spec, old_spec, &mut out),
        "Deployment" | "ReplicaSet" if !semantic_eq(new_spec.get("selector"), old_spec.get("selector")) => {
            let shown = label_selector_string(new_spec.get("selector"));
            out.push(Cause::invalid("spec.selector", BadValue::Raw(shown), IMMUTABLE_MSG));
        }
        "Secret" => {
            if st(new, "type") != st(old, "type") && has(old, "type") {
                out.push(Cause::invalid("type", st(new, "type"), IMMUTABLE_MSG));
            }
            validate_immutable_data(new, old, &["data"], &mut out);
        }
        "ConfigMap" => validate_immutable_data(new, old, &["data", "binaryData"], &mut out),
        "EndpointSlice" if st(new, "addressType") != st(old, "addressType") => {
            out.push(Cause::invalid("addressType", st(new, "addressType"), IMMUTABLE_MSG));
        }
        "Node" => validate_node_update(new_spec, old_spec, &mut out),
        _ => {}
    }
    out
}

/// A write to the status subresource: metadata rules plus kind-specific status checks.
pub fn validate_status_update(kind: &str, new: &Value, old: &Value) -> Vec<Cause> {
    let mut out = Vec::new();
    validate_meta_update(new, old, &mut out);
    let meta = new.get("metadata").unwrap_or(&Value::Null);
    validate_meta_maps(meta, &mut out);
    let null = Value::Null;
    let status = new.get("status").unwrap_or(&null);
    match kind {
        "Pod" => validate_pod_status_update(new, old, &mut out),
        "Namespace" => {
            let phase = st(status, "phase");
            if has(meta, "deletionTimestamp") {
                if phase != "Terminating" {
                    out.push(Cause::invalid(
                        "status.Phase",
                        phase,
                        "may only be 'Terminating' if `deletionTimestamp` is not empty",
                    ));
                }
            } else if phase != "Active" {
                out.push(Cause::invalid("status.Phase", phase, "may only be 'Active' if `deletionTimestamp` is empty"));
            }
        }
        "Deployment" => validate_replica_status(
            status,
            &[
                "replicas",
                "updatedReplicas",
                "readyReplicas",
                "availableReplicas",
                "unavailableReplicas",
                "observedGeneration",
                "collisionCount",
            ],
            &["updatedReplicas", "readyReplicas", "availableReplicas"],
            &mut out,
        ),
        "ReplicaSet" => validate_replica_status(
            status,
            &["replicas", "fullyLabeledReplicas", "readyReplicas", "availableReplicas", "observedGeneration"],
            &["fullyLabeledReplicas", "readyReplicas", "availableReplicas"],
            &mut out,
        ),
        "Service" => {
            for (i, ing) in arr(obj_or_null(status, "loadBalancer"), "ingress").iter().enumerate() {
                let ip = st(ing, "ip");
                if !ip.is_empty() && ip.parse::<IpAddr>().is_err() {
                    out.push(Cause::invalid(format!("status.loadBalancer.ingress[{i}].ip"), ip, IP_MSG));
                }
            }
        }
        _ => {}
    }
    out
}

fn obj_or_null<'a>(v: &'a Value, key: &str) -> &'a Value {
    static NULL: Value = Value::Null;
    v.get(key).unwrap_or(&NULL)
}

fn validate_object(kind: &str, obj: &Value, op: Op) -> Vec<Cause> {
    let mut out = Vec::new();
    let meta = obj_or_null(obj, "metadata");
    let (namespaced, rule) = match kind {
        "Namespace" => (Some(false), NameRule::Label),
        "Node" => (Some(false), NameRule::Subdomain),
        "Service" => (Some(true), NameRule::Dns1035),
        "Pod" | "Endpoints" | "Event" | "ConfigMap" | "Secret" | "ServiceAccount" | "Deployment" | "ReplicaSet"
        | "EndpointSlice" | "Lease" => (Some(true), NameRule::Subdomain),
        _ => (None, NameRule::Subdomain),
    };
    validate_object_meta(meta, namespaced, rule, &mut out);
    let spec = obj_or_null(obj, "spec");
    match kind {
        "Pod" => {
            validate_pod_spec(spec, "spec", true, &mut out);
            if op == Op::Create && !arr(spec, "ephemeralContainers").is_empty() {
                out.push(Cause::forbidden("spec.ephemeralContainers", "cannot be set on create"));
            }
            if op == Op::Create && !st(spec, "nodeName").is_empty() && !arr(spec, "schedulingGates").is_empty() {
                out.push(Cause::forbidden(
                    "spec.nodeName",
                    "cannot be set until all schedulingGates have been cleared",
                ));
            }
        }
        "Service" => validate_service(obj, &mut out),
        "Deployment" => validate_deployment_spec(spec, &mut out),
        "ReplicaSet" => validate_replica_set_spec(spec, &mut out),
        "Namespace" => {
            for f in strs(spec, "finalizers") {
                validate_finalizer_name(&f, "spec.finalizers", &mut out);
            }
        }
        "ConfigMap" => validate_config_map(obj, &mut out),
        "Secret" => validate_secret(obj, &mut out),
        "Endpoints" => validate_endpoints(obj, &mut out),
        "EndpointSlice" => validate_endpoint_slice(obj, &mut out),
        "Lease" => {
            if let Some(d) = int(spec, "leaseDurationSeconds") {
                if d <= 0 {
                    out.push(Cause::invalid("spec.leaseDurationSeconds", d, "must be greater than 0"));
                }
            }
            if let Some(t) = int(spec, "leaseTransitions") {
                if t < 0 {
                    out.push(Cause::invalid("spec.leaseTransitions", t, IS_NEGATIVE_MSG));
                }
            }
        }
        "Event" => validate_event(obj, &mut out),
        "Node" => validate_node(obj, &mut out),
        _ => {}
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Metadata
// ---------------------------------------------------------------------------------------------

#[derive(Clone, Copy)]
enum NameRule {
    Subdomain,
    Label,
    Dns1035,
}

const STANDARD_FINALIZERS: [&str; 3] = ["kubernetes", "orphan", "foregroundDeletion"];

fn validate_object_meta(meta: &Value, namespaced: Option<bool>, rule: NameRule, out: &mut Vec<Cause>) {
    let name = st(meta, "name");
    if name.is_empty() {
        out.push(Cause::required("metadata.name", "name or generateName is required"));
    } else {
        let errs = match rule {
            NameRule::Subdomain => dns1123_subdomain_errors(name),
            NameRule::Label => dns1123_label_errors(name),
            NameRule::Dns1035 => dns1035_label_errors(name),
        };
        out.extend(errs.iter().map(|m| Cause::invalid("metadata.name", name, m)));
    }
    let ns = st(meta, "namespace");
    match namespaced {
        Some(true) if ns.is_empty() => out.push(Cause::required("metadata.namespace", "")),
        Some(true) => {
            out.extend(dns1123_label_errors(ns).iter().map(|m| Cause::invalid("metadata.namespace", ns, m)));
        }
        Some(false) if !ns.is_empty() => out.push(Cause::forbidden("metadata.namespace", "not allowed on this type")),
        _ => {}
    }
    if let Some(g) = int(meta, "generation") {
        if g < 0 {
            out.push(Cause::invalid("metadata.generation", g, IS_NEGATIVE_MSG));
        }
    }
    validate_meta_maps(meta, out);
}

/// Labels, annotations, owner references and finalizers: checked on create, update and status writes.
fn validate_meta_maps(meta: &Value, out: &mut Vec<Cause>) {
    validate_labels(obj(meta, "labels"), "metadata.labels", out);
    validate_annotations(obj(meta, "annotations"), "metadata.annotations", out);
    validate_owner_references(arr(meta, "ownerReferences"), out);
    let finalizers = strs(meta, "finalizers");
    for f in &finalizers {
        for m in qualified_name_errors(f) {
            out.push(Cause::invalid("metadata.finalizers", f, &m));
        }
    }
    if finalizers.iter().any(|f| f == "orphan") && finalizers.iter().any(|f| f == "foregroundDeletion") {
        let refs: Vec<&str> = finalizers.iter().map(String::as_str).collect();
        out.push(Cause::invalid(
            "metadata.finalizers",
            BadValue::Raw(go_slice("string", &refs)),
            "finalizer orphan and foregroundDeletion cannot be both set",
        ));
    }
    for (i, f) in finalizers.iter().enumerate() {
        if !f.contains('/') && !STANDARD_FINALIZERS.contains(&f.as_str()) {
            out.push(Cause::invalid(
                format!("metadata.finalizers[{i}]"),
                f,
                "name is neither a standard finalizer name nor is it fully qualified",
            ));
        }
    }
}

fn validate_finalizer_name(f: &str, path: &str, out: &mut Vec<Cause>) {
    out.extend(qualified_name_errors(f).iter().map(|m| Cause::invalid(path, f, m)));
    if !f.contains('/') && !STANDARD_FINALIZERS.contains(&f) {
        out.push(Cause::invalid(path, f, "name is neither a standard finalizer name nor is it fully qualified"));
    }
}

fn validate_labels(labels: Option<&Map<String, Value>>, path: &str, out: &mut Vec<Cause>) {
    let Some(labels) = labels else { return };
    for (k, v) in labels {
        out.extend(qualified_name_errors(k).iter().map(|m| Cause::invalid(path, k, m)));
        let v = v.as_str().unwrap_or("");
        out.extend(label_value_errors(v).iter().map(|m| Cause::invalid(path, v, m)));
    }
}

const TOTAL_ANNOTATION_SIZE_LIMIT: usize = 256 * 1024;

fn validate_annotations(annotations: Option<&Map<String, Value>>, path: &str, out: &mut Vec<Cause>) {
    let Some(annotations) = annotations else {
        return;
    };
    let mut total = 0usize;
    for (k, v) in annotations {
        out.extend(qualified_name_errors(&k.to_lowercase()).iter().map(|m| Cause::invalid(path, k, m)));
        total += k.len() + v.as_str().map_or(0, str::len);
    }
    if total > TOTAL_ANNOTATION_SIZE_LIMIT {
        out.push(Cause::too_long(path, TOTAL_ANNOTATION_SIZE_LIMIT));
    }
}

fn owner_ref_string(r: &Value) -> String {
    let opt_bool = |k: &str| match r.get(k).and_then(Value::as_bool) {
        Some(b) => format!("(*bool)({b})"),
        None => "(*bool)(nil)".to_string(),
    };
    format!(
        "v1.OwnerReference{{APIVersion:{}, Kind:{}, Name:{}, UID:{}, Controller:{}, BlockOwnerDeletion:{}}}",
        go_quote(st(r, "apiVersion")),
        go_quote(st(r, "kind")),
        go_quote(st(r, "name")),
        go_quote(st(r, "uid")),
        opt_bool("controller"),
        opt_bool("blockOwnerDeletion"),
    )
}

fn validate_owner_references(refs: &[Value], out: &mut Vec<Cause>) {
    let path = "metadata.ownerReferences";
    let mut first_controller: Option<String> = None;
    for r in refs {
        let api_version = st(r, "apiVersion");
        let (group, version) = match api_version.rsplit_once('/') {
            Some((g, v)) => (g, v),
            None => ("", api_version),
        };
        if version.is_empty() {
            out.push(Cause::invalid(format!("{path}.apiVersion"), api_version, "version must not be empty"));
        }
        for key in ["kind", "name", "uid"] {
            if st(r, key).is_empty() {
                out.push(Cause::invalid(format!("{path}.{key}"), "", "must not be empty"));
            }
        }
        if group.is_empty() && version == "v1" && st(r, "kind") == "Event" {
            out.push(Cause::invalid(
                path,
                BadValue::Raw(owner_ref_string(r)),
                "/v1, Kind=Event is disallowed from being an owner",
            ));
        }
        if r.get("controller").and_then(Value::as_bool) == Some(true) {
            let current = format!("{}/{}", st(r, "kind"), st(r, "name"));
            match &first_controller {
                Some(first) => {
                    let all: Vec<String> = refs.iter().map(owner_ref_string).collect();
                    out.push(Cause::invalid(
                        path,
                        BadValue::Raw(format!("[]v1.OwnerReference{{{}}}", all.join(", "))),
                        &format!(
                            "Only one reference can have Controller set to true. Found \"true\" in references for {first} and {current}"
                        ),
                    ));
                }
                None => first_controller = Some(current),
            }
        }
    }
}

/// Go's `metav1.Time` rendering (`time.Time.String()`), used for immutable-timestamp errors.
fn go_time(s: &str) -> BadValue {
    match s.parse::<jiff::Timestamp>() {
        Ok(ts) => BadValue::Raw(ts.strftime("%Y-%m-%d %H:%M:%S +0000 UTC").to_string()),
        Err(_) => BadValue::Str(s.to_string()),
    }
}

fn validate_meta_update(new: &Value, old: &Value, out: &mut Vec<Cause>) {
    let nm = obj_or_null(new, "metadata");
    let om = obj_or_null(old, "metadata");
    for key in ["name", "namespace"] {
        if st(nm, key) != st(om, key) {
            out.push(Cause::invalid(format!("metadata.{key}"), st(nm, key), IMMUTABLE_MSG));
        }
    }
    let uid = st(nm, "uid");
    if !uid.is_empty() && uid != st(om, "uid") {
        out.push(Cause::invalid("metadata.uid", uid, IMMUTABLE_MSG));
    }
    let created = st(nm, "creationTimestamp");
    if !created.is_empty() && created != st(om, "creationTimestamp") {
        out.push(Cause::invalid("metadata.creationTimestamp", go_time(created), IMMUTABLE_MSG));
    }
    if has(om, "deletionTimestamp") {
        let old_f: HashSet<String> = strs(om, "finalizers").into_iter().collect();
        let mut extra: Vec<String> = strs(nm, "finalizers").into_iter().filter(|f| !old_f.contains(f)).collect();
        extra.sort();
        extra.dedup();
        if !extra.is_empty() {
            let refs: Vec<&str> = extra.iter().map(String::as_str).collect();
            out.push(Cause::forbidden(
                "metadata.finalizers",
                &format!(
                    "no new finalizers can be added if the object is being deleted, found new finalizers {}",
                    go_slice("string", &refs)
                ),
            ));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Pod spec
// ---------------------------------------------------------------------------------------------

const VOLUME_SOURCES: [&str; 30] = [
    "emptyDir",
    "hostPath",
    "gitRepo",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "secret",
    "nfs",
    "iscsi",
    "glusterfs",
    "flocker",
    "persistentVolumeClaim",
    "rbd",
    "cinder",
    "cephfs",
    "quobyte",
    "downwardAPI",
    "fc",
    "flexVolume",
    "configMap",
    "azureFile",
    "vsphereVolume",
    "photonPersistentDisk",
    "portworxVolume",
    "azureDisk",
    "storageos",
    "projected",
    "scaleIO",
    "csi",
    "ephemeral",
    "image",
];

const PROTOCOLS: [&str; 3] = ["SCTP", "TCP", "UDP"];

fn validate_pod_spec(spec: &Value, path: &str, is_pod: bool, out: &mut Vec<Cause>) {
    if let Some(g) = int(spec, "terminationGracePeriodSeconds") {
        if g < 0 {
            out.push(Cause::invalid(format!("{path}.terminationGracePeriodSeconds"), g, IS_NEGATIVE_MSG));
        }
    }
    let volumes = validate_volumes(arr(spec, "volumes"), &format!("{path}.volumes"), out);

    let containers = arr(spec, "containers");
    let cpath = format!("{path}.containers");
    if containers.is_empty() {
        out.push(Cause::required(cpath.as_str(), ""));
    }
    let mut names: HashSet<&str> = HashSet::new();
    for (i, c) in containers.iter().enumerate() {
        let p = format!("{cpath}[{i}]");
        validate_container_common(c, &p, &volumes, is_pod, out);
        let name = st(c, "name");
        if !names.insert(name) {
            out.push(Cause::duplicate(format!("{p}.name"), name));
        }
        if let Some(l) = c.get("lifecycle").filter(|l| !l.is_null()) {
            validate_lifecycle(l, &format!("{p}.lifecycle"), out);
        }
        validate_probes(c, &p, out);
        if has(c, "restartPolicy") {
            out.push(Cause::forbidden(format!("{p}.restartPolicy"), "may not be set for non-init containers"));
        }
    }
    check_host_port_conflicts(containers, &cpath, out);

    let ipath = format!("{path}.initContainers");
    for (i, c) in arr(spec, "initContainers").iter().enumerate() {
        let p = format!("{ipath}[{i}]");
        validate_container_common(c, &p, &volumes, is_pod, out);
        let mut restart_always = false;
        if has(c, "restartPolicy") {
            let rp = st(c, "restartPolicy");
            if rp == "Always" {
                restart_always = true;
            } else {
                out.push(Cause::not_supported(format!("{p}.restartPolicy"), rp, &["Always"]));
            }
        }
        let name = st(c, "name");
        if names.contains(name) {
            out.push(Cause::duplicate(format!("{p}.name"), name));
        } else if !name.is_empty() {
            names.insert(name);
        }
        check_host_port_conflicts(std::slice::from_ref(c), &ipath, out);
        if restart_always {
            if let Some(l) = c.get("lifecycle").filter(|l| !l.is_null()) {
                validate_lifecycle(l, &format!("{p}.lifecycle"), out);
            }
            validate_probes(c, &p, out);
        } else {
            for field in ["lifecycle", "livenessProbe", "readinessProbe", "startupProbe"] {
                if has(c, field) {
                    out.push(Cause::forbidden(
                        format!("{p}.{field}"),
                        "may not be set for init containers without restartPolicy=Always",
                    ));
                }
            }
        }
    }
    if !is_pod && !arr(spec, "ephemeralContainers").is_empty() {
        out.push(Cause::forbidden(
            format!("{path}.ephemeralContainers"),
            "ephemeral containers not allowed in pod template",
        ));
    }

    if spec.get("hostNetwork").and_then(Value::as_bool) == Some(true) {
        for (i, c) in containers.iter().enumerate() {
            for (j, port) in arr(c, "ports").iter().enumerate() {
                let hp = int(port, "hostPort").unwrap_or(0);
                let cp = int(port, "containerPort").unwrap_or(0);
                if (is_pod || hp != 0) && hp != cp {
                    out.push(Cause::invalid(
                        format!("{cpath}[{i}].ports[{j}].hostPort"),
                        hp,
                        "must match `containerPort` when `hostNetwork` is true",
                    ));
                }
            }
        }
    }

    let rp = st(spec, "restartPolicy");
    if !rp.is_empty() && !["Always", "OnFailure", "Never"].contains(&rp) {
        out.push(Cause::not_supported(format!("{path}.restartPolicy"), rp, &["Always", "OnFailure", "Never"]));
    }
    let dns = st(spec, "dnsPolicy");
    let dns_values = ["ClusterFirstWithHostNet", "ClusterFirst", "Default", "None"];
    if !dns.is_empty() && !dns_values.contains(&dns) {
        out.push(Cause::not_supported(format!("{path}.dnsPolicy"), dns, &dns_values));
    }
    if dns == "None" {
        match spec.get("dnsConfig").filter(|d| !d.is_null()) {
            None => out.push(Cause::required(
                format!("{path}.dnsConfig"),
                "must provide `dnsConfig` when `dnsPolicy` is None",
            )),
            Some(cfg) if arr(cfg, "nameservers").is_empty() => out.push(Cause::required(
                format!("{path}.dnsConfig.nameservers"),
                "must provide at least one DNS nameserver when `dnsPolicy` is None",
            )),
            Some(_) => {}
        }
    }
    validate_labels(obj(spec, "nodeSelector"), &format!("{path}.nodeSelector"), out);
    for (key, errs_of) in [
        ("serviceAccountName", dns1123_subdomain_errors as fn(&str) -> Vec<String>),
        ("nodeName", dns1123_subdomain_errors),
        ("priorityClassName", dns1123_subdomain_errors),
        ("hostname", dns1123_label_errors),
        ("subdomain", dns1123_label_errors),
    ] {
        let v = st(spec, key);
        if !v.is_empty() {
            out.extend(errs_of(v).iter().map(|m| Cause::invalid(format!("{path}.{key}"), v, m)));
        }
    }
    if let Some(ads) = int(spec, "activeDeadlineSeconds") {
        if !(1..=i64::from(i32::MAX)).contains(&ads) {
            out.push(Cause::invalid(
                format!("{path}.activeDeadlineSeconds"),
                ads,
                &inclusive_range_error(1, i64::from(i32::MAX)),
            ));
        }
    }
    validate_tolerations(arr(spec, "tolerations"), &format!("{path}.tolerations"), out);
}

fn validate_volumes(volumes: &[Value], path: &str, out: &mut Vec<Cause>) -> HashSet<String> {
    let mut valid = HashSet::new();
    let mut seen = HashSet::new();
    for (i, vol) in volumes.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let mut el = Vec::new();
        let mut count = 0;
        for src in VOLUME_SOURCES {
            if !has(vol, src) {
                continue;
            }
            if count > 0 {
                el.push(Cause::forbidden(format!("{p}.{src}"), "may not specify more than 1 volume type"));
                continue;
            }
            count += 1;
            validate_volume_source(src, obj_or_null(vol, src), &format!("{p}.{src}"), &mut el);
        }
        if count == 0 {
            el.push(Cause::required(p.as_str(), "must specify a volume type"));
        }
        let name = st(vol, "name");
        if name.is_empty() {
            el.push(Cause::required(format!("{p}.name"), ""));
        } else {
            el.extend(dns1123_label_errors(name).iter().map(|m| Cause::invalid(format!("{p}.name"), name, m)));
        }
        if seen.contains(name) {
            el.push(Cause::duplicate(format!("{p}.name"), name));
        }
        seen.insert(name.to_string());
        if el.is_empty() {
            valid.insert(name.to_string());
        } else {
            out.extend(el);
        }
    }
    valid
}

fn validate_volume_source(src: &str, v: &Value, p: &str, out: &mut Vec<Cause>) {
    let required = |key: &str, out: &mut Vec<Cause>| {
        if st(v, key).is_empty() {
            out.push(Cause::required(format!("{p}.{key}"), ""));
        }
    };
    match src {
        "secret" => required("secretName", out),
        "configMap" => required("name", out),
        "persistentVolumeClaim" => required("claimName", out),
        "hostPath" => required("path", out),
        "nfs" => {
            required("server", out);
            required("path", out);
        }
        _ => {}
    }
    if let Some(mode) = int(v, "defaultMode") {
        if !(0..=0o777).contains(&mode) {
            out.push(Cause::invalid(format!("{p}.defaultMode"), mode, FILE_MODE_MSG));
        }
    }
    if matches!(src, "secret" | "configMap") {
        for (i, item) in arr(v, "items").iter().enumerate() {
            let ip = format!("{p}.items[{i}]");
            for key in ["key", "path"] {
                if st(item, key).is_empty() {
                    out.push(Cause::required(format!("{ip}.{key}"), ""));
                }
            }
            if let Some(mode) = int(item, "mode") {
                if !(0..=0o777).contains(&mode) {
                    out.push(Cause::invalid(format!("{ip}.mode"), mode, FILE_MODE_MSG));
                }
            }
        }
    }
}

fn validate_container_common(c: &Value, p: &str, volumes: &HashSet<String>, is_pod: bool, out: &mut Vec<Cause>) {
    let name = st(c, "name");
    if name.is_empty() {
        out.push(Cause::required(format!("{p}.name"), ""));
    } else {
        out.extend(dns1123_label_errors(name).iter().map(|m| Cause::invalid(format!("{p}.name"), name, m)));
    }
    let image = st(c, "image");
    if image.is_empty() {
        out.push(Cause::required(format!("{p}.image"), ""));
    } else if is_pod && image.trim() != image {
        out.push(Cause::invalid(format!("{p}.image"), image, "must not have leading or trailing whitespace"));
    }
    let tmp = st(c, "terminationMessagePolicy");
    if !tmp.is_empty() && tmp != "File" && tmp != "FallbackToLogsOnError" {
        out.push(Cause::not_supported(
            format!("{p}.terminationMessagePolicy"),
            tmp,
            &["File", "FallbackToLogsOnError"],
        ));
    }
    validate_container_ports(arr(c, "ports"), &format!("{p}.ports"), out);
    validate_env(arr(c, "env"), &format!("{p}.env"), out);
    validate_env_from(arr(c, "envFrom"), &format!("{p}.envFrom"), out);
    validate_volume_mounts(arr(c, "volumeMounts"), volumes, &format!("{p}.volumeMounts"), out);
    let pull = st(c, "imagePullPolicy");
    if !pull.is_empty() && !["Always", "IfNotPresent", "Never"].contains(&pull) {
        out.push(Cause::not_supported(format!("{p}.imagePullPolicy"), pull, &["Always", "IfNotPresent", "Never"]));
    }
    if let Some(res) = c.get("resources").filter(|r| !r.is_null()) {
        validate_resources(res, &format!("{p}.resources"), out);
    }
}

fn validate_container_ports(ports: &[Value], path: &str, out: &mut Vec<Cause>) {
    let mut names = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let name = st(port, "name");
        if !name.is_empty() {
            let errs = port_name_errors(name);
            if !errs.is_empty() {
                out.extend(errs.iter().map(|m| Cause::invalid(format!("{p}.name"), name, m)));
            } else if !names.insert(name) {
                out.push(Cause::duplicate(format!("{p}.name"), name));
            }
        }
        match int(port, "containerPort").unwrap_or(0) {
            0 => out.push(Cause::required(format!("{p}.containerPort"), "")),
            cp => out.extend(port_num_errors(cp).iter().map(|m| Cause::invalid(format!("{p}.containerPort"), cp, m))),
        }
        let hp = int(port, "hostPort").unwrap_or(0);
        if hp != 0 {
            out.extend(port_num_errors(hp).iter().map(|m| Cause::invalid(format!("{p}.hostPort"), hp, m)));
        }
        let proto = st(port, "protocol");
        if !proto.is_empty() && !PROTOCOLS.contains(&proto) {
            out.push(Cause::not_supported(format!("{p}.protocol"), proto, &PROTOCOLS));
        }
    }
}

fn check_host_port_conflicts(containers: &[Value], path: &str, out: &mut Vec<Cause>) {
    let mut seen = HashSet::new();
    for (ci, c) in containers.iter().enumerate() {
        for (pi, port) in arr(c, "ports").iter().enumerate() {
            let hp = int(port, "hostPort").unwrap_or(0);
            if hp == 0 {
                continue;
            }
            let proto = match st(port, "protocol") {
                "" => "TCP",
                p => p,
            };
            let key = format!("{proto}/{}/{hp}", st(port, "hostIP"));
            if !seen.insert(key.clone()) {
                out.push(Cause::duplicate(format!("{path}[{ci}].ports[{pi}].hostPort"), key));
            }
        }
    }
}

const ENV_FIELD_PATHS: [&str; 9] = [
    "metadata.name",
    "metadata.namespace",
    "metadata.uid",
    "spec.nodeName",
    "spec.serviceAccountName",
    "status.hostIP",
    "status.hostIPs",
    "status.podIP",
    "status.podIPs",
];

fn validate_env(env: &[Value], path: &str, out: &mut Vec<Cause>) {
    for (i, ev) in env.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let name = st(ev, "name");
        if name.is_empty() {
            out.push(Cause::required(format!("{p}.name"), ""));
        } else {
            out.extend(env_var_name_errors(name).iter().map(|m| Cause::invalid(format!("{p}.name"), name, m)));
        }
        let Some(from) = ev.get("valueFrom").filter(|v| !v.is_null()) else {
            continue;
        };
        let vp = format!("{p}.valueFrom");
        let sources = ["fieldRef", "resourceFieldRef", "configMapKeyRef", "secretKeyRef"];
        let n = sources.iter().filter(|s| has(from, s)).count();
        if n == 0 {
            out.push(Cause::invalid(
                vp.as_str(),
                "",
                "must specify one of: `fieldRef`, `resourceFieldRef`, `configMapKeyRef` or `secretKeyRef`",
            ));
        } else if !st(ev, "value").is_empty() {
            out.push(Cause::invalid(vp.as_str(), "", "may not be specified when `value` is not empty"));
        } else if n > 1 {
            out.push(Cause::invalid(vp.as_str(), "", "may not have more than one field specified at a time"));
        }
        if let Some(fr) = from.get("fieldRef").filter(|v| !v.is_null()) {
            let fp = st(fr, "fieldPath");
            if st(fr, "apiVersion").is_empty() {
                out.push(Cause::required(format!("{vp}.fieldRef.apiVersion"), ""));
            } else if fp.is_empty() {
                out.push(Cause::required(format!("{vp}.fieldRef.fieldPath"), ""));
            } else if !(ENV_FIELD_PATHS.contains(&fp)
                || fp.starts_with("metadata.labels['")
                || fp.starts_with("metadata.annotations['"))
            {
                out.push(Cause::not_supported(format!("{vp}.fieldRef.fieldPath"), fp, &ENV_FIELD_PATHS));
            }
        }
        for key in ["configMapKeyRef", "secretKeyRef"] {
            if let Some(sel) = from.get(key).filter(|v| !v.is_null()) {
                let sp = format!("{vp}.{key}");
                let sel_name = st(sel, "name");
                out.extend(
                    dns1123_subdomain_errors(sel_name)
                        .iter()
                        .map(|m| Cause::invalid(format!("{sp}.name"), sel_name, m)),
                );
                let k = st(sel, "key");
                if k.is_empty() {
                    out.push(Cause::required(format!("{sp}.key"), ""));
                } else {
                    out.extend(config_map_key_errors(k).iter().map(|m| Cause::invalid(format!("{sp}.key"), k, m)));
                }
            }
        }
    }
}

fn validate_env_from(env_from: &[Value], path: &str, out: &mut Vec<Cause>) {
    for (i, ef) in env_from.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let prefix = st(ef, "prefix");
        if !prefix.is_empty() {
            out.extend(env_var_name_errors(prefix).iter().map(|m| Cause::invalid(format!("{p}.prefix"), prefix, m)));
        }
        let n = ["configMapRef", "secretRef"].iter().filter(|k| has(ef, k)).count();
        if n == 0 {
            out.push(Cause::invalid(path, "", "must specify one of: `configMapRef` or `secretRef`"));
        } else if n > 1 {
            out.push(Cause::invalid(path, "", "may not have more than one field specified at a time"));
        }
        for key in ["configMapRef", "secretRef"] {
            if let Some(r) = ef.get(key).filter(|v| !v.is_null()) {
                if st(r, "name").is_empty() {
                    out.push(Cause::required(format!("{p}.{key}.name"), ""));
                }
            }
        }
    }
}

fn validate_volume_mounts(mounts: &[Value], volumes: &HashSet<String>, path: &str, out: &mut Vec<Cause>) {
    let mut mount_points = HashSet::new();
    for (i, m) in mounts.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let name = st(m, "name");
        if name.is_empty() {
            out.push(Cause::required(format!("{p}.name"), ""));
        }
        if !volumes.contains(name) {
            out.push(Cause::not_found(format!("{p}.name"), name));
        }
        let mp = st(m, "mountPath");
        if mp.is_empty() {
            out.push(Cause::required(format!("{p}.mountPath"), ""));
        }
        if !mount_points.insert(mp) {
            out.push(Cause::invalid(format!("{p}.mountPath"), mp, "must be unique"));
        }
        let sub = st(m, "subPathExpr");
        if !sub.is_empty() && !st(m, "subPath").is_empty() {
            out.push(Cause::invalid(format!("{p}.subPathExpr"), sub, "subPathExpr and subPath are mutually exclusive"));
        }
    }
}

/// Native resources (no domain, or a `kubernetes.io/` domain) other than hugepages may be overcommitted.
fn overcommit_allowed(name: &str) -> bool {
    let native = !name.contains('/') || name.contains("kubernetes.io/");
    native && !name.starts_with("hugepages-")
}

fn validate_resource_name(name: &str, p: &str, out: &mut Vec<Cause>) {
    out.extend(qualified_name_errors(name).iter().map(|m| Cause::invalid(p, name, m)));
    if !name.contains('/') && !["cpu", "memory", "ephemeral-storage"].contains(&name) && !name.starts_with("hugepages-")
    {
        out.push(Cause::invalid(p, name, "must be a standard resource for containers"));
    }
}

fn validate_resources(res: &Value, path: &str, out: &mut Vec<Cause>) {
    let lim_path = format!("{path}.limits");
    let req_path = format!("{path}.requests");
    let empty = Map::new();
    let limits = obj(res, "limits").unwrap_or(&empty);
    let requests = obj(res, "requests").unwrap_or(&empty);
    let mut parsed_limits = BTreeMap::new();
    for (name, q) in limits {
        let p = format!("{lim_path}[{name}]");
        validate_resource_name(name, &p, out);
        match quantity_of(q) {
            None => out.push(Cause::invalid(p, quantity_text(q), QUANTITY_MSG)),
            Some(v) if v < 0 => out.push(Cause::invalid(p, quantity_text(q), IS_NEGATIVE_MSG)),
            Some(v) => {
                parsed_limits.insert(name.as_str(), (v, quantity_text(q)));
            }
        }
    }
    for (name, q) in requests {
        let p = format!("{req_path}[{name}]");
        validate_resource_name(name, &p, out);
        let Some(v) = quantity_of(q) else {
            out.push(Cause::invalid(p, quantity_text(q), QUANTITY_MSG));
            continue;
        };
        if v < 0 {
            out.push(Cause::invalid(p, quantity_text(q), IS_NEGATIVE_MSG));
            continue;
        }
        let shown = quantity_text(q);
        match parsed_limits.get(name.as_str()) {
            Some((lim, lim_text)) if v != *lim && !overcommit_allowed(name) => out.push(Cause::invalid(
                req_path.as_str(),
                shown,
                &format!("must be equal to {name} limit of {lim_text}"),
            )),
            Some((lim, lim_text)) if v > *lim => out.push(Cause::invalid(
                req_path.as_str(),
                shown,
                &format!("must be less than or equal to {name} limit of {lim_text}"),
            )),
            Some(_) => {}
            None if !overcommit_allowed(name) && !limits.contains_key(name) => {
                out.push(Cause::required(lim_path.as_str(), "Limit must be set for non overcommitable resources"));
            }
            None => {}
        }
    }
}

fn validate_probes(c: &Value, p: &str, out: &mut Vec<Cause>) {
    for probe in ["livenessProbe", "readinessProbe", "startupProbe"] {
        let Some(pr) = c.get(probe).filter(|v| !v.is_null()) else {
            continue;
        };
        let pp = format!("{p}.{probe}");
        validate_handler(pr, &pp, &["exec", "httpGet", "tcpSocket", "grpc"], out);
        for key in ["initialDelaySeconds", "timeoutSeconds", "periodSeconds", "successThreshold", "failureThreshold"] {
            if let Some(n) = int(pr, key) {
                if n < 0 {
                    out.push(Cause::invalid(format!("{pp}.{key}"), n, IS_NEGATIVE_MSG));
                }
            }
        }
        if probe != "readinessProbe" {
            if let Some(n) = int(pr, "successThreshold") {
                if n != 1 {
                    out.push(Cause::invalid(format!("{pp}.successThreshold"), n, "must be 1"));
                }
            }
        }
    }
}

fn validate_lifecycle(l: &Value, p: &str, out: &mut Vec<Cause>) {
    for hook in ["postStart", "preStop"] {
        if let Some(h) = l.get(hook).filter(|v| !v.is_null()) {
            validate_handler(h, &format!("{p}.{hook}"), &["exec", "httpGet", "tcpSocket", "sleep"], out);
        }
    }
}

fn validate_handler(h: &Value, p: &str, kinds: &[&str], out: &mut Vec<Cause>) {
    let mut n = 0;
    for kind in kinds {
        let Some(action) = h.get(*kind).filter(|v| !v.is_null()) else {
            continue;
        };
        let ap = format!("{p}.{kind}");
        if n > 0 {
            out.push(Cause::forbidden(ap, "may not specify more than 1 handler type"));
            continue;
        }
        n += 1;
        match *kind {
            "exec" if arr(action, "command").is_empty() => out.push(Cause::required(format!("{ap}.command"), "")),
            "httpGet" => {
                if action.get("path").and_then(Value::as_str) == Some("") {
                    out.push(Cause::required(format!("{ap}.path"), ""));
                }
                validate_port_num_or_name(action.get("port"), &format!("{ap}.port"), out);
                let scheme = st(action, "scheme");
                if !scheme.is_empty() && scheme != "HTTP" && scheme != "HTTPS" {
                    out.push(Cause::not_supported(format!("{ap}.scheme"), scheme, &["HTTP", "HTTPS"]));
                }
            }
            "tcpSocket" | "grpc" => validate_port_num_or_name(action.get("port"), &format!("{ap}.port"), out),
            _ => {}
        }
    }
    if n == 0 {
        out.push(Cause::required(p, "must specify a handler type"));
    }
}

fn validate_port_num_or_name(port: Option<&Value>, p: &str, out: &mut Vec<Cause>) {
    match port {
        Some(Value::Number(n)) => {
            let n = n.as_i64().unwrap_or(0);
            out.extend(port_num_errors(n).iter().map(|m| Cause::invalid(p, n, m)));
        }
        Some(Value::String(s)) => out.extend(port_name_errors(s).iter().map(|m| Cause::invalid(p, s, m))),
        _ => out.extend(port_num_errors(0).iter().map(|m| Cause::invalid(p, 0i64, m))),
    }
}

fn validate_tolerations(tolerations: &[Value], path: &str, out: &mut Vec<Cause>) {
    for (i, t) in tolerations.iter().enumerate() {
        let p = format!("{path}[{i}]");
        let key = st(t, "key");
        let op = st(t, "operator");
        let effect = st(t, "effect");
        let value = st(t, "value");
        if !key.is_empty() {
            out.extend(qualified_name_errors(key).iter().map(|m| Cause::invalid(format!("{p}.key"), key, m)));
        }
        if key.is_empty() && op != "Exists" {
            out.push(Cause::invalid(
                format!("{p}.operator"),
                op,
                "operator must be Exists when `key` is empty, which means \"match all values and all keys\"",
            ));
        }
        if has(t, "tolerationSeconds") && effect != "NoExecute" {
            out.push(Cause::invalid(
                format!("{p}.effect"),
                effect,
                "effect must be 'NoExecute' when `tolerationSeconds` is set",
            ));
        }
        match op {
            "Equal" | "" => {
                let errs = label_value_errors(value);
                if !errs.is_empty() {
                    out.push(Cause::invalid(format!("{p}.operator"), value, &errs.join(";")));
                }
            }
            "Exists" => {
                if !value.is_empty() {
                    out.push(Cause::invalid(
                        format!("{p}.operator"),
                        value,
                        "value must be empty when `operator` is 'Exists'",
                    ));
                }
            }
            _ => out.push(Cause::not_supported(format!("{p}.operator"), op, &["Equal", "Exists"])),
        }
        if !effect.is_empty() && !["NoSchedule", "PreferNoSchedule", "NoExecute"].contains(&effect) {
            out.push(Cause::not_supported(
                format!("{p}.effect"),
                effect,
                &["NoSchedule", "PreferNoSchedule", "NoExecute"],
            ));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Pod updates
// ---------------------------------------------------------------------------------------------

const UPDATABLE_POD_SPEC_FIELDS: &str = "`spec.containers[*].image`,`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)";

fn pod_container_count_change(new: &Value, old: &Value) -> Option<Cause> {
    let ns = obj_or_null(new, "spec");
    let os = obj_or_null(old, "spec");
    for key in ["containers", "initContainers"] {
        if arr(ns, key).len() != arr(os, key).len() {
            return Some(Cause::forbidden(format!("spec.{key}"), "pod updates may not add or remove containers"));
        }
    }
    None
}

fn validate_pod_spec_update(new: &Value, old: &Value, out: &mut Vec<Cause>) {
    if let Some(ads) = int(new, "activeDeadlineSeconds") {
        if !(0..=i64::from(i32::MAX)).contains(&ads) {
            out.push(Cause::invalid("spec.activeDeadlineSeconds", ads, &inclusive_range_error(0, i64::from(i32::MAX))));
            return;
        }
        if let Some(old_ads) = int(old, "activeDeadlineSeconds") {
            if old_ads < ads {
                out.push(Cause::invalid(
                    "spec.activeDeadlineSeconds",
                    ads,
                    "must be less than or equal to previous value",
                ));
                return;
            }
        }
    } else if has(old, "activeDeadlineSeconds") {
        out.push(Cause::invalid(
            "spec.activeDeadlineSeconds",
            BadValue::Raw("null".to_string()),
            "must not update from a positive integer to nil value",
        ));
    }
    // Only additions to tolerations; an existing one may change only its tolerationSeconds.
    let new_tol = arr(new, "tolerations");
    for old_t in arr(old, "tolerations") {
        let found = new_tol
            .iter()
            .any(|n| ["key", "operator", "value", "effect"].iter().all(|k| semantic_eq(n.get(*k), old_t.get(*k))));
        if !found {
            out.push(Cause::forbidden(
                "spec.tolerations",
                "existing toleration can not be modified except its tolerationSeconds",
            ));
            break;
        }
    }
    // Everything else must be unchanged: munge the updatable fields and compare.
    let mut munged = new.clone();
    if let Some(m) = munged.as_object_mut() {
        for key in ["containers", "initContainers"] {
            if let Some(Value::Array(cs)) = m.get_mut(key) {
                for (i, c) in cs.iter_mut().enumerate() {
                    let old_image = arr(old, key).get(i).and_then(|o| o.get("image")).cloned();
                    if let Some(cm) = c.as_object_mut() {
                        match old_image {
                            Some(img) => cm.insert("image".to_string(), img),
                            None => cm.remove("image"),
                        };
                    }
                }
            }
        }
        for key in ["activeDeadlineSeconds", "tolerations", "schedulingGates", "terminationGracePeriodSeconds"] {
            match old.get(key) {
                Some(v) => m.insert(key.to_string(), v.clone()),
                None => m.remove(key),
            };
        }
        // spec.nodeName may be set once (binding); changing it afterwards is caught below.
        if st(old, "nodeName").is_empty() {
            match old.get("nodeName") {
                Some(v) => m.insert("nodeName".to_string(), v.clone()),
                None => m.remove("nodeName"),
            };
        }
    }
    if !semantic_eq(Some(&munged), Some(old)) {
        let diff = spec_diff(old, &munged);
        out.push(Cause::forbidden(
            "spec",
            &format!("pod updates may not change fields other than {UPDATABLE_POD_SPEC_FIELDS}\n{diff}"),
        ));
    }
}

/// A short diff of the top-level spec fields that differ (`cmp.Diff` stands here in Kubernetes).
fn spec_diff(old: &Value, new: &Value) -> String {
    let empty = Map::new();
    let o = old.as_object().unwrap_or(&empty);
    let n = new.as_object().unwrap_or(&empty);
    let keys: std::collections::BTreeSet<&String> = o.keys().chain(n.keys()).collect();
    let mut out = String::from("  core.PodSpec{\n");
    for k in keys {
        if semantic_eq(o.get(k), n.get(k)) {
            continue;
        }
        let show = |v: Option<&Value>| v.map_or_else(|| "null".to_string(), Value::to_string);
        let _ = writeln!(out, "-  {k}: {}", show(o.get(k)));
        let _ = writeln!(out, "+  {k}: {}", show(n.get(k)));
    }
    out.push_str("  }");
    out
}

fn validate_pod_status_update(new: &Value, old: &Value, out: &mut Vec<Cause>) {
    let status = obj_or_null(new, "status");
    let old_status = obj_or_null(old, "status");
    let phases = ["Pending", "Running", "Succeeded", "Failed", "Unknown"];
    let phase = st(status, "phase");
    if !phase.is_empty() && !phases.contains(&phase) {
        out.push(Cause::not_supported("status.phase", phase, &phases));
    }
    if st(obj_or_null(new, "spec"), "nodeName") != st(obj_or_null(old, "spec"), "nodeName") {
        out.push(Cause::forbidden("status.nodeName", "may not be changed directly"));
    }
    let old_qos = st(old_status, "qosClass");
    if !old_qos.is_empty() && st(status, "qosClass") != old_qos {
        out.push(Cause::invalid("status.qosClass", st(status, "qosClass"), IMMUTABLE_MSG));
    }
    for key in ["podIPs", "hostIPs"] {
        for (i, ip) in arr(status, key).iter().enumerate() {
            let ip = st(ip, "ip");
            if ip.parse::<IpAddr>().is_err() {
                out.push(Cause::invalid(format!("status.{key}[{i}].ip"), ip, IP_MSG));
            }
        }
    }
    let restart = st(obj_or_null(old, "spec"), "restartPolicy");
    if restart != "Always" {
        let new_statuses = arr(status, "containerStatuses");
        for (i, os) in arr(old_status, "containerStatuses").iter().enumerate() {
            let Some(term) = os.get("state").and_then(|s| s.get("terminated")).filter(|t| !t.is_null()) else {
                continue;
            };
            if int(term, "exitCode").unwrap_or(0) != 0 && restart == "OnFailure" {
                continue;
            }
            let revived = new_statuses.iter().any(|ns| {
                st(ns, "name") == st(os, "name")
                    && ns.get("state").and_then(|s| s.get("terminated")).is_none_or(Value::is_null)
            });
            if revived {
                out.push(Cause::forbidden(
                    format!("status.containerStatuses[{i}].state"),
                    "may not be transitioned to non-terminated state",
                ));
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Services
// ---------------------------------------------------------------------------------------------

fn service_cluster_ips(spec: &Value) -> Vec<String> {
    let ips = strs(spec, "clusterIPs");
    if !ips.is_empty() {
        return ips;
    }
    match st(spec, "clusterIP") {
        "" => Vec::new(),
        ip => vec![ip.to_string()],
    }
}

fn is_headless(spec: &Value) -> bool {
    let ips = service_cluster_ips(spec);
    ips.len() == 1 && ips[0] == "None"
}

fn validate_service(svc: &Value, out: &mut Vec<Cause>) {
    let spec = obj_or_null(svc, "spec");
    let ty = st(spec, "type");
    let headless = is_headless(spec);
    let ports = arr(spec, "ports");
    if ports.is_empty() && !headless && ty != "ExternalName" {
        out.push(Cause::required("spec.ports", ""));
    }
    match ty {
        "LoadBalancer" | "NodePort" if headless => out.push(Cause::invalid(
            "spec.clusterIPs[0]",
            "None",
            &format!("may not be set to 'None' for {ty} services"),
        )),
        "ExternalName" => {
            if !service_cluster_ips(spec).is_empty() {
                out.push(Cause::forbidden("spec.clusterIPs", "may not be set for ExternalName services"));
            }
            if !arr(spec, "ipFamilies").is_empty() {
                out.push(Cause::forbidden("spec.ipFamilies", "may not be set for ExternalName services"));
            }
            if has(spec, "ipFamilyPolicy") {
                out.push(Cause::forbidden("spec.ipFamilyPolicy", "may not be set for ExternalName services"));
            }
            let cname = st(spec, "externalName");
            let cname = cname.strip_suffix('.').unwrap_or(cname);
            if cname.is_empty() {
                out.push(Cause::required("spec.externalName", ""));
            } else {
                out.extend(
                    dns1123_subdomain_errors(cname).iter().map(|m| Cause::invalid("spec.externalName", cname, m)),
                );
            }
        }
        _ => {}
    }
    let mut names = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let p = format!("spec.ports[{i}]");
        let name = st(port, "name");
        if ports.len() > 1 && name.is_empty() {
            out.push(Cause::required(format!("{p}.name"), ""));
        } else if !name.is_empty() {
            out.extend(dns1123_label_errors(name).iter().map(|m| Cause::invalid(format!("{p}.name"), name, m)));
            if !names.insert(name) {
                out.push(Cause::duplicate(format!("{p}.name"), name));
            }
        }
        let num = int(port, "port").unwrap_or(0);
        out.extend(port_num_errors(num).iter().map(|m| Cause::invalid(format!("{p}.port"), num, m)));
        let proto = st(port, "protocol");
        if !proto.is_empty() && !PROTOCOLS.contains(&proto) {
            out.push(Cause::not_supported(format!("{p}.protocol"), proto, &PROTOCOLS));
        }
        if let Some(tp) = port.get("targetPort").filter(|v| !v.is_null()) {
            validate_port_num_or_name(Some(tp), &format!("{p}.targetPort"), out);
        }
        let node_port = int(port, "nodePort").unwrap_or(0);
        if node_port != 0 {
            match ty {
                "ClusterIP" | "" => {
                    out.push(Cause::forbidden(format!("{p}.nodePort"), "may not be used when `type` is 'ClusterIP'"))
                }
                "ExternalName" => {
                    out.push(Cause::forbidden(format!("{p}.nodePort"), "may not be used when `type` is 'ExternalName'"))
                }
                _ if !(30000..=32767).contains(&node_port) => out.push(Cause::invalid(
                    format!("{p}.nodePort"),
                    node_port,
                    "provided port is not in the valid range. The range of valid ports is 30000-32767",
                )),
                _ => {}
            }
        }
    }
    validate_labels(obj(spec, "selector"), "spec.selector", out);

    let affinity = st(spec, "sessionAffinity");
    match affinity {
        "" | "None" => {
            if has(spec, "sessionAffinityConfig") && affinity == "None" {
                out.push(Cause::forbidden(
                    "spec.sessionAffinityConfig",
                    "must not be set when session affinity is None",
                ));
            }
        }
        "ClientIP" => {
            let timeout = spec
                .get("sessionAffinityConfig")
                .and_then(|c| c.get("clientIP"))
                .and_then(|c| c.get("timeoutSeconds"))
                .and_then(Value::as_i64);
            if let Some(t) = timeout {
                if !(1..=86400).contains(&t) {
                    out.push(Cause::invalid(
                        "spec.sessionAffinityConfig.clientIP.timeoutSeconds",
                        t,
                        "must be greater than 0 and less than 86400",
                    ));
                }
            }
        }
        other => out.push(Cause::not_supported("spec.sessionAffinity", other, &["ClientIP", "None"])),
    }

    if ty != "ExternalName" {
        validate_cluster_ips(spec, out);
    }
    for (i, ip) in strs(spec, "externalIPs").iter().enumerate() {
        validate_non_special_ip(ip, &format!("spec.externalIPs[{i}]"), out);
    }
    let types = ["ClusterIP", "ExternalName", "LoadBalancer", "NodePort"];
    if !ty.is_empty() && !types.contains(&ty) {
        out.push(Cause::not_supported("spec.type", ty, &types));
    }

    let mut node_ports = HashSet::new();
    let mut seen_ports = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let proto = match st(port, "protocol") {
            "" => "TCP",
            p => p,
        };
        let node_port = int(port, "nodePort").unwrap_or(0);
        if node_port != 0 && !node_ports.insert((proto, node_port)) {
            out.push(Cause::duplicate(format!("spec.ports[{i}].nodePort"), node_port));
        }
        let num = int(port, "port").unwrap_or(0);
        if !seen_ports.insert((proto, num)) {
            let shown = format!(
                "core.ServicePort{{Name:\"\", Protocol:{}, AppProtocol:(*string)(nil), Port:{num}, TargetPort:intstr.IntOrString{{Type:0, IntVal:0, StrVal:\"\"}}, NodePort:0}}",
                go_quote(proto)
            );
            out.push(Cause::duplicate(format!("spec.ports[{i}]"), BadValue::Raw(shown)));
        }
    }
    if has(spec, "allocateLoadBalancerNodePorts") && ty != "LoadBalancer" {
        out.push(Cause::forbidden(
            "spec.allocateLoadBalancerNodePorts",
            "may only be used when `type` is 'LoadBalancer'",
        ));
    }
    let external =
        matches!(ty, "LoadBalancer" | "NodePort") || (ty == "ClusterIP" && !arr(spec, "externalIPs").is_empty());
    let etp = st(spec, "externalTrafficPolicy");
    if !etp.is_empty() {
        if !external {
            out.push(Cause::invalid(
                "spec.externalTrafficPolicy",
                etp,
                "may only be set for externally-accessible services",
            ));
        } else if etp != "Cluster" && etp != "Local" {
            out.push(Cause::not_supported("spec.externalTrafficPolicy", etp, &["Cluster", "Local"]));
        }
    }
    let itp = st(spec, "internalTrafficPolicy");
    if !itp.is_empty() && itp != "Cluster" && itp != "Local" {
        out.push(Cause::not_supported("spec.internalTrafficPolicy", itp, &["Cluster", "Local"]));
    }
}

fn validate_cluster_ips(spec: &Value, out: &mut Vec<Cause>) {
    let cluster_ip = st(spec, "clusterIP");
    let listed = strs(spec, "clusterIPs");
    if !cluster_ip.is_empty() && !listed.is_empty() && listed[0] != cluster_ip {
        let refs: Vec<&str> = listed.iter().map(String::as_str).collect();
        out.push(Cause::invalid(
            "spec.clusterIPs",
            BadValue::Raw(go_slice("string", &refs)),
            "first value must match `clusterIP`",
        ));
    }
    let families = strs(spec, "ipFamilies");
    let mut seen = HashSet::new();
    for (i, f) in families.iter().enumerate() {
        if f != "IPv4" && f != "IPv6" {
            out.push(Cause::not_supported(format!("spec.ipFamilies[{i}]"), f, &["IPv4", "IPv6"]));
        }
        if !seen.insert(f) {
            out.push(Cause::duplicate(format!("spec.ipFamilies[{i}]"), f));
        }
    }
    let policy = st(spec, "ipFamilyPolicy");
    let policies = ["PreferDualStack", "RequireDualStack", "SingleStack"];
    if has(spec, "ipFamilyPolicy") && !policies.contains(&policy) {
        out.push(Cause::not_supported("spec.ipFamilyPolicy", policy, &policies));
    }
    // Validate clusterIPs if given, else the lone clusterIP at its own path.
    let (ips, field): (Vec<String>, &str) = if listed.is_empty() {
        (service_cluster_ips(spec), "spec.clusterIP")
    } else {
        (listed.clone(), "spec.clusterIPs")
    };
    let mut bad = false;
    for (i, ip) in ips.iter().enumerate() {
        let p = if listed.is_empty() { field.to_string() } else { format!("{field}[{i}]") };
        if i == 0 && ip == "None" {
            if ips.len() > 1 {
                bad = true;
                let refs: Vec<&str> = ips.iter().map(String::as_str).collect();
                out.push(Cause::invalid(
                    field,
                    BadValue::Raw(go_slice("string", &refs)),
                    "'None' must be the first and only value",
                ));
            }
            continue;
        }
        if ip.parse::<IpAddr>().is_err() {
            bad = true;
            out.push(Cause::invalid(p, ip, IP_MSG));
        }
    }
    if ips.len() > 2 {
        let refs: Vec<&str> = ips.iter().map(String::as_str).collect();
        out.push(Cause::invalid(field, BadValue::Raw(go_slice("string", &refs)), "may only hold up to 2 values"));
    }
    if bad {
        return;
    }
    if ips.len() == 2 {
        let v6: Vec<bool> = ips.iter().map(|ip| ip.parse::<IpAddr>().is_ok_and(|a| a.is_ipv6())).collect();
        if v6[0] == v6[1] {
            let refs: Vec<&str> = ips.iter().map(String::as_str).collect();
            out.push(Cause::invalid(
                field,
                BadValue::Raw(go_slice("string", &refs)),
                "may specify no more than one IP for each IP family",
            ));
        }
    }
    if !is_headless(spec) {
        for (i, (ip, fam)) in ips.iter().zip(&families).enumerate() {
            let is_v6 = ip.parse::<IpAddr>().is_ok_and(|a| a.is_ipv6());
            let p = if listed.is_empty() { field.to_string() } else { format!("{field}[{i}]") };
            if fam == "IPv4" && is_v6 {
                out.push(Cause::invalid(p, ip, &format!("expected an IPv4 value as indicated by `ipFamilies[{i}]`")));
            } else if fam == "IPv6" && !is_v6 {
                out.push(Cause::invalid(p, ip, &format!("expected an IPv6 value as indicated by `ipFamilies[{i}]`")));
            }
        }
    }
}

fn validate_non_special_ip(ip: &str, p: &str, out: &mut Vec<Cause>) {
    let Ok(addr) = ip.parse::<IpAddr>() else {
        out.push(Cause::invalid(p, ip, IP_MSG));
        return;
    };
    if addr.is_unspecified() {
        out.push(Cause::invalid(p, ip, &format!("may not be unspecified ({ip})")));
    }
    if addr.is_loopback() {
        out.push(Cause::invalid(p, ip, "may not be in the loopback range (127.0.0.0/8, ::1/128)"));
    }
    let link_local_unicast = match addr {
        IpAddr::V4(a) => a.is_link_local(),
        IpAddr::V6(a) => (a.segments()[0] & 0xffc0) == 0xfe80,
    };
    if link_local_unicast {
        out.push(Cause::invalid(p, ip, "may not be in the link-local range (169.254.0.0/16, fe80::/10)"));
    }
    let link_local_multicast = match addr {
        IpAddr::V4(a) => a.octets()[0] == 224 && a.octets()[1] == 0 && a.octets()[2] == 0,
        IpAddr::V6(a) => (a.segments()[0] & 0xff0f) == 0xff02,
    };
    if link_local_multicast {
        out.push(Cause::invalid(p, ip, "may not be in the link-local multicast range (224.0.0.0/24, ff02::/10)"));
    }
}

fn validate_service_update(new: &Value, old: &Value, out: &mut Vec<Cause>) {
    if st(new, "type") == "ExternalName" || st(old, "type") == "ExternalName" {
        return;
    }
    let new_ips = service_cluster_ips(new);
    let old_ips = service_cluster_ips(old);
    // Absent in the update: the server carries the allocated values over.
    if new_ips.is_empty() || old_ips.is_empty() || (is_headless(new) && is_headless(old)) {
        return;
    }
    let refs: Vec<&str> = new_ips.iter().map(String::as_str).collect();
    let shown = go_slice("string", &refs);
    if new_ips.len() == old_ips.len() {
        for (i, (n, o)) in new_ips.iter().zip(&old_ips).enumerate() {
            if n != o {
                out.push(Cause::invalid(
                    format!("spec.clusterIPs[{i}]"),
                    BadValue::Raw(shown.clone()),
                    "may not change once set",
                ));
            }
        }
    } else if new_ips[0] != old_ips[0] {
        out.push(Cause::invalid("spec.clusterIPs[0]", BadValue::Raw(shown), "may not change once set"));
    }
    let new_fam = strs(new, "ipFamilies");
    let old_fam = strs(old, "ipFamilies");
    if let (Some(n), Some(o)) = (new_fam.first(), old_fam.first()) {
        if n != o {
            let refs: Vec<&str> = new_fam.iter().map(String::as_str).collect();
            out.push(Cause::invalid(
                "spec.ipFamilies[0]",
                BadValue::Raw(go_slice("core.IPFamily", &refs)),
                "may not change once set",
            ));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Deployments and ReplicaSets
// ---------------------------------------------------------------------------------------------

fn validate_label_selector(sel: &Value, path: &str, out: &mut Vec<Cause>) {
    validate_labels(obj(sel, "matchLabels"), &format!("{path}.matchLabels"), out);
    for (i, req) in arr(sel, "matchExpressions").iter().enumerate() {
        let p = format!("{path}.matchExpressions[{i}]");
        let values = strs(req, "values");
        match st(req, "operator") {
            "In" | "NotIn" if values.is_empty() => {
                out.push(Cause::required(format!("{p}.values"), "must be specified when `operator` is 'In' or 'NotIn'"))
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => out.push(Cause::forbidden(
                format!("{p}.values"),
                "may not be specified when `operator` is 'Exists' or 'DoesNotExist'",
            )),
            "In" | "NotIn" | "Exists" | "DoesNotExist" => {}
            op => out.push(Cause::invalid(format!("{p}.operator"), op, "not a valid selector operator")),
        }
        let key = st(req, "key");
        out.extend(qualified_name_errors(key).iter().map(|m| Cause::invalid(format!("{p}.key"), key, m)));
        for (j, v) in values.iter().enumerate() {
            out.extend(label_value_errors(v).iter().map(|m| Cause::invalid(format!("{p}.values[{j}]"), v, m)));
        }
    }
}

fn selector_is_empty(sel: &Value) -> bool {
    obj(sel, "matchLabels").is_none_or(Map::is_empty) && arr(sel, "matchExpressions").is_empty()
}

fn selector_matches(sel: &Value, labels: Option<&Map<String, Value>>) -> bool {
    let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
    let labels_ok =
        obj(sel, "matchLabels").is_none_or(|m| m.iter().all(|(k, v)| get(k).is_some() && get(k) == v.as_str()));
    labels_ok
        && arr(sel, "matchExpressions").iter().all(|req| {
            let key = st(req, "key");
            let values = strs(req, "values");
            match st(req, "operator") {
                "In" => get(key).is_some_and(|v| values.iter().any(|x| x == v)),
                "NotIn" => get(key).is_none_or(|v| !values.iter().any(|x| x == v)),
                "Exists" => get(key).is_some(),
                "DoesNotExist" => get(key).is_none(),
                _ => false,
            }
        })
}

/// The generated `String()` of `*metav1.LabelSelector`, which Go prints for selector errors.
fn label_selector_string(sel: Option<&Value>) -> String {
    let Some(sel) = sel.filter(|s| !s.is_null()) else {
        return "nil".to_string();
    };
    let mut labels = String::from("map[string]string{");
    if let Some(m) = obj(sel, "matchLabels") {
        let sorted: BTreeMap<&String, &Value> = m.iter().collect();
        for (k, v) in sorted {
            let _ = write!(labels, "{k}: {},", v.as_str().unwrap_or(""));
        }
    }
    labels.push('}');
    let mut exprs = String::from("[]LabelSelectorRequirement{");
    for req in arr(sel, "matchExpressions") {
        let _ = write!(
            exprs,
            "LabelSelectorRequirement{{Key:{},Operator:{},Values:[{}],}},",
            st(req, "key"),
            st(req, "operator"),
            strs(req, "values").join(" ")
        );
    }
    exprs.push('}');
    format!("&LabelSelector{{MatchLabels:{labels},MatchExpressions:{exprs},}}")
}

fn validate_nonnegative(v: &Value, key: &str, path: &str, out: &mut Vec<Cause>) {
    if let Some(n) = int(v, key) {
        if n < 0 {
            out.push(Cause::invalid(format!("{path}.{key}"), n, IS_NEGATIVE_MSG));
        }
    }
}

fn validate_selector_and_template(spec: &Value, out: &mut Vec<Cause>) {
    match spec.get("selector").filter(|s| !s.is_null()) {
        None => out.push(Cause::required("spec.selector", "")),
        Some(sel) => {
            validate_label_selector(sel, "spec.selector", out);
            if selector_is_empty(sel) {
                out.push(Cause::invalid(
                    "spec.selector",
                    BadValue::Raw(label_selector_string(Some(sel))),
                    "empty selector is invalid for deployment",
                ));
            }
        }
    }
    let template = obj_or_null(spec, "template");
    let tmeta = obj_or_null(template, "metadata");
    let tlabels = obj(tmeta, "labels");
    if let Some(sel) = spec.get("selector").filter(|s| !s.is_null() && !selector_is_empty(s)) {
        if !selector_matches(sel, tlabels) {
            out.push(Cause::invalid(
                "spec.template.metadata.labels",
                BadValue::Raw(go_map(tlabels)),
                "`selector` does not match template `labels`",
            ));
        }
    }
    validate_labels(tlabels, "spec.template.labels", out);
    validate_annotations(obj(tmeta, "annotations"), "spec.template.annotations", out);
    let tspec = obj_or_null(template, "spec");
    validate_pod_spec(tspec, "spec.template.spec", false, out);
    let rp = st(tspec, "restartPolicy");
    if !rp.is_empty() && rp != "Always" {
        out.push(Cause::not_supported("spec.template.spec.restartPolicy", rp, &["Always"]));
    }
    if has(tspec, "activeDeadlineSeconds") {
        out.push(Cause::forbidden(
            "spec.template.spec.activeDeadlineSeconds",
            "activeDeadlineSeconds in ReplicaSet is not Supported",
        ));
    }
}

fn validate_replica_set_spec(spec: &Value, out: &mut Vec<Cause>) {
    validate_nonnegative(spec, "replicas", "spec", out);
    validate_nonnegative(spec, "minReadySeconds", "spec", out);
    validate_selector_and_template(spec, out);
}

/// An IntOrString as Go prints it (`25%` or `1`), and its value for the both-zero check.
fn int_or_percent(v: Option<&Value>) -> Option<(String, i64)> {
    match v? {
        Value::Number(n) => {
            let n = n.as_i64().unwrap_or(0);
            Some((n.to_string(), n))
        }
        Value::String(s) => {
            let n = s.strip_suffix('%').and_then(|d| d.parse::<i64>().ok()).unwrap_or(0);
            Some((s.clone(), n))
        }
        _ => None,
    }
}

fn validate_deployment_spec(spec: &Value, out: &mut Vec<Cause>) {
    validate_nonnegative(spec, "replicas", "spec", out);
    validate_selector_and_template(spec, out);
    let strategy = obj_or_null(spec, "strategy");
    match st(strategy, "type") {
        "Recreate" => {
            if has(strategy, "rollingUpdate") {
                out.push(Cause::forbidden(
                    "spec.strategy.rollingUpdate",
                    "may not be specified when strategy `type` is 'Recreate'",
                ));
            }
        }
        "RollingUpdate" | "" => {
            let ru = obj_or_null(strategy, "rollingUpdate");
            let p = "spec.strategy.rollingUpdate";
            let mut zero = [false, false];
            for (idx, key) in ["maxUnavailable", "maxSurge"].iter().enumerate() {
                let Some((shown, n)) = int_or_percent(ru.get(*key)) else {
                    continue;
                };
                zero[idx] = n == 0;
                if let Some(Value::String(s)) = ru.get(*key) {
                    out.extend(
                        percent_errors(s)
                            .iter()
                            .map(|m| Cause::invalid(format!("{p}.{key}"), BadValue::Raw(shown.clone()), m)),
                    );
                } else if n < 0 {
                    out.push(Cause::invalid(format!("{p}.{key}"), n, IS_NEGATIVE_MSG));
                }
            }
            let both_set = has(ru, "maxUnavailable") && has(ru, "maxSurge");
            if both_set && zero[0] && zero[1] {
                let shown = int_or_percent(ru.get("maxUnavailable")).map_or_else(String::new, |s| s.0);
                out.push(Cause::invalid(
                    format!("{p}.maxUnavailable"),
                    BadValue::Raw(shown),
                    "may not be 0 when `maxSurge` is 0",
                ));
            }
            if let Some(Value::String(s)) = ru.get("maxUnavailable") {
                if percent_errors(s).is_empty() && s.trim_end_matches('%').parse::<i64>().is_ok_and(|n| n > 100) {
                    out.push(Cause::invalid(
                        format!("{p}.maxUnavailable"),
                        BadValue::Raw(s.clone()),
                        "must not be greater than 100%",
                    ));
                }
            }
        }
        other => out.push(Cause::not_supported("spec.strategy.type", other, &["Recreate", "RollingUpdate"])),
    }
    validate_nonnegative(spec, "minReadySeconds", "spec", out);
    validate_nonnegative(spec, "revisionHistoryLimit", "spec", out);
    if let Some(pds) = int(spec, "progressDeadlineSeconds") {
        if pds < 0 {
            out.push(Cause::invalid("spec.progressDeadlineSeconds", pds, IS_NEGATIVE_MSG));
        }
        if pds <= int(spec, "minReadySeconds").unwrap_or(0) {
            out.push(Cause::invalid("spec.progressDeadlineSeconds", pds, "must be greater than minReadySeconds"));
        }
    }
}

fn validate_replica_status(status: &Value, nonneg: &[&str], bounded: &[&str], out: &mut Vec<Cause>) {
    for key in nonneg {
        validate_nonnegative(status, key, "status", out);
    }
    let replicas = int(status, "replicas").unwrap_or(0);
    for key in bounded {
        let n = int(status, key).unwrap_or(0);
        if n > replicas {
            out.push(Cause::invalid(format!("status.{key}"), n, "cannot be greater than status.replicas"));
        }
    }
    let available = int(status, "availableReplicas").unwrap_or(0);
    if available > int(status, "readyReplicas").unwrap_or(0) {
        out.push(Cause::invalid("status.availableReplicas", available, "cannot be greater than readyReplicas"));
    }
}

// ---------------------------------------------------------------------------------------------
// ConfigMaps, Secrets
// ---------------------------------------------------------------------------------------------

const MAX_SECRET_SIZE: usize = 1024 * 1024;

fn base64_decoded_len(s: &str) -> usize {
    let s = s.trim_end_matches('=');
    s.len() * 3 / 4
}

fn validate_config_map(cm: &Value, out: &mut Vec<Cause>) {
    let mut total = 0usize;
    let binary = obj(cm, "binaryData");
    if let Some(data) = obj(cm, "data") {
        for (k, v) in data {
            let p = format!("data[{k}]");
            out.extend(config_map_key_errors(k).iter().map(|m| Cause::invalid(p.as_str(), k, m)));
            if binary.is_some_and(|b| b.contains_key(k)) {
                out.push(Cause::invalid(p.as_str(), k, "duplicate of key present in binaryData"));
            }
            total += v.as_str().map_or(0, str::len);
        }
    }
    if let Some(data) = binary {
        for (k, v) in data {
            let p = format!("binaryData[{k}]");
            out.extend(config_map_key_errors(k).iter().map(|m| Cause::invalid(p.as_str(), k, m)));
            total += v.as_str().map_or(0, base64_decoded_len);
        }
    }
    if total > MAX_SECRET_SIZE {
        out.push(Cause::too_long("", MAX_SECRET_SIZE));
    }
}

fn validate_secret(secret: &Value, out: &mut Vec<Cause>) {
    let mut total = 0usize;
    let data = obj(secret, "data");
    let string_data = obj(secret, "stringData");
    for (map, decode) in [(data, true), (string_data, false)] {
        let Some(map) = map else { continue };
        for (k, v) in map {
            let p = format!("data[{k}]");
            out.extend(config_map_key_errors(k).iter().map(|m| Cause::invalid(p.as_str(), k, m)));
            let s = v.as_str().unwrap_or("");
            total += if decode { base64_decoded_len(s) } else { s.len() };
        }
    }
    if total > MAX_SECRET_SIZE {
        out.push(Cause::too_long("data", MAX_SECRET_SIZE));
    }
    let has_key = |k: &str| data.is_some_and(|d| d.contains_key(k)) || string_data.is_some_and(|d| d.contains_key(k));
    let mut require = |k: &str| {
        if !has_key(k) {
            out.push(Cause::required(format!("data[{k}]"), ""));
        }
    };
    match st(secret, "type") {
        "kubernetes.io/service-account-token" => {
            let meta = obj_or_null(secret, "metadata");
            let sa = obj(meta, "annotations").and_then(|a| a.get("kubernetes.io/service-account.name"));
            if sa.and_then(Value::as_str).unwrap_or("").is_empty() {
                out.push(Cause::required("metadata.annotations[kubernetes.io/service-account.name]", ""));
            }
        }
        "kubernetes.io/dockercfg" => require(".dockercfg"),
        "kubernetes.io/dockerconfigjson" => require(".dockerconfigjson"),
        "kubernetes.io/basic-auth" if !has_key("username") && !has_key("password") => {
            require("username");
            require("password");
        }
        "kubernetes.io/ssh-auth" => require("ssh-privatekey"),
        "kubernetes.io/tls" => {
            require("tls.crt");
            require("tls.key");
        }
        _ => {}
    }
}

fn validate_immutable_data(new: &Value, old: &Value, fields: &[&str], out: &mut Vec<Cause>) {
    if old.get("immutable").and_then(Value::as_bool) != Some(true) {
        return;
    }
    if new.get("immutable").and_then(Value::as_bool) != Some(true) {
        out.push(Cause::forbidden("immutable", "field is immutable when `immutable` is set"));
    }
    for f in fields {
        if !semantic_eq(new.get(*f), old.get(*f)) {
            out.push(Cause::forbidden(*f, "field is immutable when `immutable` is set"));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Endpoints, EndpointSlices, Events, Nodes
// ---------------------------------------------------------------------------------------------

fn validate_endpoint_port(port: &Value, require_name: bool, port_optional: bool, p: &str, out: &mut Vec<Cause>) {
    let name = st(port, "name");
    if require_name && name.is_empty() {
        out.push(Cause::required(format!("{p}.name"), ""));
    } else if !name.is_empty() {
        out.extend(dns1123_label_errors(name).iter().map(|m| Cause::invalid(format!("{p}.name"), name, m)));
    }
    if !port_optional || has(port, "port") {
        let n = int(port, "port").unwrap_or(0);
        out.extend(port_num_errors(n).iter().map(|m| Cause::invalid(format!("{p}.port"), n, m)));
    }
    let proto = st(port, "protocol");
    if !proto.is_empty() && !PROTOCOLS.contains(&proto) {
        out.push(Cause::not_supported(format!("{p}.protocol"), proto, &PROTOCOLS));
    }
    let app = st(port, "appProtocol");
    if has(port, "appProtocol") {
        out.extend(qualified_name_errors(app).iter().map(|m| Cause::invalid(format!("{p}.appProtocol"), app, m)));
    }
}

fn validate_endpoints(ep: &Value, out: &mut Vec<Cause>) {
    for (i, ss) in arr(ep, "subsets").iter().enumerate() {
        let p = format!("subsets[{i}]");
        if arr(ss, "addresses").is_empty() && arr(ss, "notReadyAddresses").is_empty() {
            out.push(Cause::required(p.as_str(), "must specify `addresses` or `notReadyAddresses`"));
        }
        for key in ["addresses", "notReadyAddresses"] {
            for (j, addr) in arr(ss, key).iter().enumerate() {
                let ap = format!("{p}.{key}[{j}]");
                let ip = st(addr, "ip");
                if ip.parse::<IpAddr>().is_err() {
                    out.push(Cause::invalid(format!("{ap}.ip"), ip, IP_MSG));
                }
                let hostname = st(addr, "hostname");
                if !hostname.is_empty() {
                    out.extend(
                        dns1123_label_errors(hostname)
                            .iter()
                            .map(|m| Cause::invalid(format!("{ap}.hostname"), hostname, m)),
                    );
                }
                if let Some(node) = addr.get("nodeName").and_then(Value::as_str) {
                    out.extend(
                        dns1123_subdomain_errors(node)
                            .iter()
                            .map(|m| Cause::invalid(format!("{ap}.nodeName"), node, m)),
                    );
                }
                validate_non_special_ip(ip, &format!("{ap}.ip"), out);
            }
        }
        let ports = arr(ss, "ports");
        for (k, port) in ports.iter().enumerate() {
            validate_endpoint_port(port, ports.len() > 1, false, &format!("{p}.ports[{k}]"), out);
        }
    }
}

fn validate_endpoint_slice(slice: &Value, out: &mut Vec<Cause>) {
    let address_type = st(slice, "addressType");
    let endpoints = arr(slice, "endpoints");
    if endpoints.len() > 1000 {
        out.push(Cause::too_many("endpoints", endpoints.len(), 1000));
    }
    for (i, ep) in endpoints.iter().enumerate() {
        let p = format!("endpoints[{i}]");
        let addrs = strs(ep, "addresses");
        if addrs.is_empty() {
            out.push(Cause::required(format!("{p}.addresses"), "must contain at least 1 address"));
        } else if addrs.len() > 100 {
            out.push(Cause::too_many(format!("{p}.addresses"), addrs.len(), 100));
        }
        for (j, a) in addrs.iter().enumerate() {
            let ap = format!("{p}.addresses[{j}]");
            match address_type {
                "IPv4" => match a.parse::<IpAddr>() {
                    Ok(IpAddr::V4(_)) => validate_non_special_ip(a, &ap, out),
                    _ => out.push(Cause::invalid(ap, a, "must be a valid IPv4 address")),
                },
                "IPv6" => match a.parse::<IpAddr>() {
                    Ok(IpAddr::V6(_)) => validate_non_special_ip(a, &ap, out),
                    _ => out.push(Cause::invalid(ap, a, "must be a valid IPv6 address")),
                },
                "FQDN" => {
                    let name = a.strip_suffix('.').unwrap_or(a);
                    let errs = dns1123_subdomain_errors(name);
                    if !errs.is_empty() {
                        out.push(Cause::invalid(ap, name, &errs.join(",")));
                    } else if name.split('.').count() < 2 {
                        out.push(Cause::invalid(
                            ap,
                            name,
                            "should be a domain with at least two segments separated by dots",
                        ));
                    }
                }
                _ => {}
            }
        }
        let hostname = st(ep, "hostname");
        if !hostname.is_empty() {
            out.extend(
                dns1123_label_errors(hostname).iter().map(|m| Cause::invalid(format!("{p}.hostname"), hostname, m)),
            );
        }
        if let Some(node) = ep.get("nodeName").and_then(Value::as_str) {
            out.extend(dns1123_subdomain_errors(node).iter().map(|m| Cause::invalid(format!("{p}.nodeName"), node, m)));
        }
    }
    let ports = arr(slice, "ports");
    if ports.len() > 100 {
        out.push(Cause::too_many("ports", ports.len(), 100));
    }
    let mut names = HashSet::new();
    for (i, port) in ports.iter().enumerate() {
        let p = format!("ports[{i}]");
        validate_endpoint_port(port, false, true, &p, out);
        let name = st(port, "name");
        if !names.insert(name) {
            out.push(Cause::duplicate(format!("{p}.name"), name));
        }
    }
    let types = ["FQDN", "IPv4", "IPv6"];
    if address_type.is_empty() {
        out.push(Cause::required("addressType", ""));
    } else if !types.contains(&address_type) {
        out.push(Cause::not_supported("addressType", address_type, &types));
    }
}

fn validate_event(ev: &Value, out: &mut Vec<Cause>) {
    let ns = st(obj_or_null(ev, "metadata"), "namespace");
    let involved = obj_or_null(ev, "involvedObject");
    let ins = st(involved, "namespace");
    let mismatch = if ins.is_empty() { !ns.is_empty() && ns != "default" } else { ns != ins };
    if mismatch {
        out.push(Cause::invalid("involvedObject.namespace", ins, "does not match event.namespace"));
    }
}

fn validate_node(node: &Value, out: &mut Vec<Cause>) {
    let spec = obj_or_null(node, "spec");
    let mut unique: HashSet<(String, String)> = HashSet::new();
    for (i, t) in arr(spec, "taints").iter().enumerate() {
        let p = format!("metadata.taints[{i}]");
        let key = st(t, "key");
        out.extend(qualified_name_errors(key).iter().map(|m| Cause::invalid(format!("{p}.key"), key, m)));
        let value = st(t, "value");
        let errs = label_value_errors(value);
        if !errs.is_empty() {
            out.push(Cause::invalid(format!("{p}.value"), value, &errs.join(";")));
        }
        let effect = st(t, "effect");
        let effects = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
        if effect.is_empty() {
            out.push(Cause::required(format!("{p}.effect"), ""));
        } else if !effects.contains(&effect) {
            out.push(Cause::not_supported(format!("{p}.effect"), effect, &effects));
        }
        if !unique.insert((key.to_string(), effect.to_string())) {
            let mut c = Cause::duplicate(
                p.as_str(),
                BadValue::Raw(format!(
                    "core.Taint{{Key:{}, Value:{}, Effect:{}, TimeAdded:<nil>}}",
                    go_quote(key),
                    go_quote(value),
                    go_quote(effect)
                )),
            );
            c.message.push_str(": taints must be unique by key and effect pair");
            out.push(c);
        }
    }
    for (i, cidr) in strs(spec, "podCIDRs").iter().enumerate() {
        if !valid_cidr(cidr) {
            out.push(Cause::invalid(format!("spec.podCIDRs[{i}]"), cidr, CIDR_MSG));
        }
    }
}

fn validate_node_update(new: &Value, old: &Value, out: &mut Vec<Cause>) {
    let old_cidrs = strs(old, "podCIDRs");
    if !old_cidrs.is_empty() && strs(new, "podCIDRs") != old_cidrs {
        out.push(Cause::forbidden("spec.podCIDRs", "node updates may not change podCIDR except from \"\" to valid"));
    }
    let old_provider = st(old, "providerID");
    if !old_provider.is_empty() && st(new, "providerID") != old_provider {
        out.push(Cause::forbidden(
            "spec.providerID",
            "node updates may not change providerID except from \"\" to valid",
        ));
    }
}

// ---------------------------------------------------------------------------------------------
// Tests
// ---------------------------------------------------------------------------------------------

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn pod(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"}, "spec": spec})
    }

    fn fields(causes: &[Cause]) -> Vec<&str> {
        causes.iter().map(|c| c.field.as_str()).collect()
    }

    fn deployment(selector: Value, labels: Value) -> Value {
        json!({
            "metadata": {"name": "web", "namespace": "default"},
            "spec": {
                "replicas": 2,
                "selector": selector,
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "app", "image": "nginx"}]}
                }
            }
        })
    }

    #[test]
    fn a_valid_pod_has_no_causes() {
        let p = pod(json!({"containers": [{"name": "app", "image": "nginx:1.27", "ports": [{"containerPort": 80}]}]}));
        assert_eq!(validate_create("Pod", &p), vec![]);
    }

    #[test]
    fn a_pod_without_image_gives_the_kubernetes_message() {
        let p = pod(json!({"containers": [{"name": "app"}]}));
        let causes = validate_create("Pod", &p);
        assert_eq!(
            causes,
            vec![Cause {
                reason: "FieldValueRequired".into(),
                message: "Required value".into(),
                field: "spec.containers[0].image".into()
            }]
        );
        assert_eq!(
            invalid_message("Pod", "web", &causes),
            "Pod \"web\" is invalid: spec.containers[0].image: Required value"
        );
    }

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
    fn a_pod_needs_at_least_one_container() {
        let causes = validate_create("Pod", &pod(json!({})));
        assert_eq!(fields(&causes), vec!["spec.containers"]);
    }

    #[test]
    fn an_uppercase_name_is_not_a_subdomain() {
        let mut p = pod(json!({"containers": [{"name": "app", "image": "nginx"}]}));
        p["metadata"]["name"] = json!("Web");
        let causes = validate_create("Pod", &p);
        assert_eq!(causes.len(), 1);
        assert_eq!(
            causes[0].message,
            "Invalid value: \"Web\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
        );
    }

    #[test]
    fn dns_label_errors_match_apimachinery() {
        assert_eq!(dns1123_label_errors("web-1"), Vec::<String>::new());
        assert_eq!(dns1123_label_errors("a.b"), vec!["must not contain dots".to_string()]);
        assert_eq!(
            dns1123_label_errors("Web"),
            vec!["a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')".to_string()]
        );
        assert_eq!(dns1123_label_errors(&"a".repeat(64))[0], "must be no more than 63 characters");
        assert!(dns1123_subdomain_errors("my.example.com").is_empty());
        assert_eq!(dns1123_subdomain_errors(&"a".repeat(254)).len(), 1);
    }

    #[test]
    fn qualified_names_check_prefix_and_name_parts() {
        assert!(qualified_name_errors("app.kubernetes.io/name").is_empty());
        assert_eq!(qualified_name_errors("/x"), vec!["prefix part must be non-empty".to_string()]);
        assert!(qualified_name_errors("a/b/c")[0].starts_with("a qualified name must consist of"));
        assert!(qualified_name_errors("-x")[0].starts_with("name part must consist of alphanumeric"));
        assert!(label_value_errors("").is_empty());
        assert!(label_value_errors("v1.2_3").is_empty());
        assert_eq!(label_value_errors("a b").len(), 1);
    }

    #[test]
    fn container_names_must_be_unique_across_init_containers() {
        let p = pod(json!({
            "containers": [{"name": "app", "image": "x"}],
            "initContainers": [{"name": "app", "image": "y"}]
        }));
        let causes = validate_create("Pod", &p);
        assert_eq!(causes, vec![Cause::duplicate("spec.initContainers[0].name", "app")]);
        assert_eq!(causes[0].message, "Duplicate value: \"app\"");
    }

    #[test]
    fn restart_policy_lists_supported_values_in_kubernetes_order() {
        let p = pod(json!({"restartPolicy": "Sometimes", "containers": [{"name": "app", "image": "x"}]}));
        let causes = validate_create("Pod", &p);
        assert_eq!(
            causes[0].message,
            "Unsupported value: \"Sometimes\": supported values: \"Always\", \"OnFailure\", \"Never\""
        );
    }

    #[test]
    fn ports_are_checked_for_range_protocol_and_name() {
        let p = pod(json!({"containers": [{"name": "app", "image": "x", "ports": [
            {"containerPort": 70000, "protocol": "ICMP", "name": "web_1"},
            {"containerPort": 80, "hostPort": 8080, "name": "web"},
            {"containerPort": 81, "name": "web"}
        ]}]}));
        let causes = validate_create("Pod", &p);
        assert_eq!(
            fields(&causes),
            vec![
                "spec.containers[0].ports[0].name",
                "spec.containers[0].ports[0].containerPort",
                "spec.containers[0].ports[0].protocol",
                "spec.containers[0].ports[2].name",
            ]
        );
        assert_eq!(causes[1].message, "Invalid value: 70000: must be between 1 and 65535, inclusive");
        assert_eq!(causes[3].reason, "FieldValueDuplicate");
    }

    #[test]
    fn volume_mounts_must_reference_a_volume() {
        let p = pod(json!({
            "volumes": [{"name": "data", "emptyDir": {}}, {"name": "two", "emptyDir": {}, "configMap": {"name": "c"}}],
            "containers": [{"name": "app", "image": "x", "volumeMounts": [
                {"name": "data", "mountPath": "/data"},
                {"name": "missing", "mountPath": "/m"},
                {"name": "data"}
            ]}]
        }));
        let causes = validate_create("Pod", &p);
        assert_eq!(
            fields(&causes),
            vec![
                "spec.volumes[1].configMap",
                "spec.containers[0].volumeMounts[1].name",
                "spec.containers[0].volumeMounts[2].mountPath",
            ]
        );
        assert_eq!(causes[1].message, "Not found: \"missing\"");
    }

    #[test]
    fn a_volume_without_a_source_is_rejected() {
        let p = pod(json!({"volumes": [{"name": "v"}], "containers": [{"name": "a", "image": "x"}]}));
        let causes = validate_create("Pod", &p);
        assert_eq!(causes, vec![Cause::required("spec.volumes[0]", "must specify a volume type")]);
    }

    #[test]
    fn requests_may_not_exceed_limits() {
        let p = pod(json!({"containers": [{"name": "a", "image": "x", "resources": {
            "limits": {"cpu": "500m", "memory": "128Mi"},
            "requests": {"cpu": "1", "memory": "64Mi"}
        }}]}));
        let causes = validate_create("Pod", &p);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.containers[0].resources.requests");
        assert_eq!(causes[0].message, "Invalid value: \"1\": must be less than or equal to cpu limit of 500m");
    }

    #[test]
    fn quantities_parse_to_nano_units() {
        assert_eq!(parse_quantity("500m"), Some(500_000_000));
        assert_eq!(parse_quantity("1"), Some(1_000_000_000));
        assert_eq!(parse_quantity("128Mi"), Some(128 * 1024 * 1024 * 1_000_000_000));
        assert_eq!(parse_quantity("1G"), Some(1_000_000_000_000_000_000));
        assert_eq!(parse_quantity("1e3"), parse_quantity("1k"));
        assert_eq!(parse_quantity("0.5"), parse_quantity("500m"));
        assert_eq!(parse_quantity("-1"), Some(-1_000_000_000));
        assert_eq!(parse_quantity("1n"), Some(1));
        assert_eq!(parse_quantity("0.1n"), Some(1));
        assert_eq!(parse_quantity("abc"), None);
        assert_eq!(parse_quantity(""), None);
        assert_eq!(parse_quantity("1.2.3"), None);
        assert_eq!(parse_quantity("5Xi"), None);
    }

    #[test]
    fn env_names_follow_the_relaxed_rule() {
        let p = pod(json!({"containers": [{"name": "a", "image": "x", "env": [
            {"name": "MY.VAR-1", "value": "v"}, {"name": "A=B"}, {"name": ""}
        ]}]}));
        let causes = validate_create("Pod", &p);
        assert_eq!(fields(&causes), vec!["spec.containers[0].env[1].name", "spec.containers[0].env[2].name"]);
    }

    #[test]
    fn tolerations_check_operator_and_effect() {
        let p = pod(json!({"containers": [{"name": "a", "image": "x"}], "tolerations": [
            {"operator": "Equal", "value": "x"},
            {"key": "k", "operator": "Maybe"},
            {"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 5}
        ]}));
        let causes = validate_create("Pod", &p);
        assert_eq!(
            fields(&causes),
            vec!["spec.tolerations[0].operator", "spec.tolerations[1].operator", "spec.tolerations[2].effect"]
        );
    }

    #[test]
    fn pod_update_may_change_only_image_and_a_few_fields() {
        let old = pod(json!({"containers": [{"name": "a", "image": "x:1"}], "nodeName": "n1"}));
        let mut new = old.clone();
        new["spec"]["containers"][0]["image"] = json!("x:2");
        new["spec"]["activeDeadlineSeconds"] = json!(30);
        assert_eq!(validate_update("Pod", &new, &old), vec![]);

        new["spec"]["restartPolicy"] = json!("Never");
        let causes = validate_update("Pod", &new, &old);
        assert_eq!(fields(&causes), vec!["spec"]);
        assert!(causes[0].message.starts_with(
            "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,`spec.initContainers[*].image`"
        ));
        assert!(causes[0].message.contains("+  restartPolicy: \"Never\""));
    }

    #[test]
    fn pod_node_name_can_be_set_once_but_not_changed() {
        let old = pod(json!({"containers": [{"name": "a", "image": "x"}]}));
        let mut bound = old.clone();
        bound["spec"]["nodeName"] = json!("n1");
        assert_eq!(validate_update("Pod", &bound, &old), vec![]);
        let mut moved = bound.clone();
        moved["spec"]["nodeName"] = json!("n2");
        assert_eq!(fields(&validate_update("Pod", &moved, &bound)), vec!["spec"]);
    }

    #[test]
    fn pod_update_may_not_add_containers() {
        let old = pod(json!({"containers": [{"name": "a", "image": "x"}]}));
        let mut new = old.clone();
        new["spec"]["containers"] = json!([{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]);
        let causes = validate_update("Pod", &new, &old);
        assert_eq!(causes, vec![Cause::forbidden("spec.containers", "pod updates may not add or remove containers")]);
    }

    #[test]
    fn tolerations_may_only_be_added() {
        let old = pod(json!({"containers": [{"name": "a", "image": "x"}],
            "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]}));
        let mut new = old.clone();
        new["spec"]["tolerations"][0]["tolerationSeconds"] = json!(10);
        new["spec"]["tolerations"]
            .as_array_mut()
            .into_iter()
            .for_each(|a| a.push(json!({"key": "z", "operator": "Exists"})));
        assert_eq!(validate_update("Pod", &new, &old), vec![]);
        new["spec"]["tolerations"] = json!([]);
        assert_eq!(fields(&validate_update("Pod", &new, &old)), vec!["spec.tolerations"]);
    }

    #[test]
    fn metadata_name_and_uid_are_immutable() {
        let old = json!({"metadata": {"name": "a", "namespace": "default", "uid": "u1", "creationTimestamp": "2024-01-02T03:04:05Z"}, "data": {}});
        let mut new = old.clone();
        new["metadata"]["name"] = json!("b");
        new["metadata"]["uid"] = json!("u2");
        new["metadata"]["creationTimestamp"] = json!("2025-01-02T03:04:05Z");
        let causes = validate_update("ConfigMap", &new, &old);
        assert_eq!(fields(&causes), vec!["metadata.name", "metadata.uid", "metadata.creationTimestamp"]);
        assert_eq!(causes[0].message, "Invalid value: \"b\": field is immutable");
        assert_eq!(causes[2].message, "Invalid value: 2025-01-02 03:04:05 +0000 UTC: field is immutable");
        let mut omitted = old.clone();
        omitted["metadata"].as_object_mut().into_iter().for_each(|m| {
            m.remove("uid");
        });
        assert_eq!(validate_update("ConfigMap", &omitted, &old), vec![]);
    }

    #[test]
    fn labels_annotations_owner_references_and_finalizers_are_checked() {
        let cm = json!({"metadata": {
            "name": "c", "namespace": "default",
            "labels": {"bad key!": "ok", "app": "-bad"},
            "annotations": {"Example.com/Note": "fine"},
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "a", "uid": "1", "controller": true},
                {"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "b", "uid": "2", "controller": true},
                {"apiVersion": "", "kind": "", "name": "c", "uid": "3"}
            ],
            "finalizers": ["example.com/f", "custom"]
        }});
        let causes = validate_create("ConfigMap", &cm);
        assert_eq!(
            fields(&causes),
            vec![
                "metadata.labels",
                "metadata.labels",
                "metadata.ownerReferences",
                "metadata.ownerReferences.apiVersion",
                "metadata.ownerReferences.kind",
                "metadata.finalizers[1]",
            ]
        );
        assert!(causes[2].message.ends_with(
            "Only one reference can have Controller set to true. Found \"true\" in references for ReplicaSet/a and ReplicaSet/b"
        ));
    }

    #[test]
    fn annotations_may_total_at_most_256_kib() {
        let big = "x".repeat(TOTAL_ANNOTATION_SIZE_LIMIT);
        let cm = json!({"metadata": {"name": "c", "namespace": "d", "annotations": {"a": big}}});
        let causes = validate_create("ConfigMap", &cm);
        assert_eq!(causes, vec![Cause::too_long("metadata.annotations", 262144)]);
        assert_eq!(causes[0].message, "Too long: must have at most 262144 bytes");
    }

    #[test]
    fn namespaced_kinds_need_a_namespace_and_cluster_kinds_refuse_one() {
        let cm = json!({"metadata": {"name": "c"}});
        assert_eq!(validate_create("ConfigMap", &cm), vec![Cause::required("metadata.namespace", "")]);
        let ns = json!({"metadata": {"name": "team-a", "namespace": "x"}});
        assert_eq!(fields(&validate_create("Namespace", &ns)), vec!["metadata.namespace"]);
        let ns = json!({"metadata": {"name": "team.a"}});
        assert_eq!(validate_create("Namespace", &ns)[0].message, "Invalid value: \"team.a\": must not contain dots");
    }

    #[test]
    fn service_names_are_dns_1035_labels() {
        let svc = json!({"metadata": {"name": "1web", "namespace": "d"}, "spec": {"ports": [{"port": 80}]}});
        let causes = validate_create("Service", &svc);
        assert_eq!(fields(&causes), vec!["metadata.name"]);
        assert!(causes[0].message.contains("a DNS-1035 label must consist of"));
    }

    #[test]
    fn services_need_ports_unless_external_name() {
        let svc = json!({"metadata": {"name": "web", "namespace": "d"}, "spec": {"type": "ClusterIP"}});
        assert_eq!(validate_create("Service", &svc), vec![Cause::required("spec.ports", "")]);
        let ext = json!({"metadata": {"name": "web", "namespace": "d"}, "spec": {"type": "ExternalName", "externalName": "example.com"}});
        assert_eq!(validate_create("Service", &ext), vec![]);
        let headless = json!({"metadata": {"name": "web", "namespace": "d"}, "spec": {"clusterIP": "None"}});
        assert_eq!(validate_create("Service", &headless), vec![]);
    }

    #[test]
    fn service_ports_need_names_when_several_and_valid_node_ports() {
        let svc = json!({"metadata": {"name": "web", "namespace": "d"}, "spec": {
            "type": "ClusterIP",
            "clusterIP": "10.0.0.300",
            "sessionAffinity": "Sticky",
            "ports": [{"port": 80, "nodePort": 30080}, {"name": "b", "port": 0}]
        }});
        let causes = validate_create("Service", &svc);
        assert_eq!(
            fields(&causes),
            vec![
                "spec.ports[0].name",
                "spec.ports[0].nodePort",
                "spec.ports[1].port",
                "spec.sessionAffinity",
                "spec.clusterIP",
            ]
        );
        let np = json!({"metadata": {"name": "web", "namespace": "d"}, "spec": {"type": "NodePort", "ports": [{"port": 80, "nodePort": 80}]}});
        assert_eq!(
            validate_create("Service", &np)[0].message,
            "Invalid value: 80: provided port is not in the valid range. The range of valid ports is 30000-32767"
        );
    }

    #[test]
    fn service_cluster_ip_may_not_change() {
        let old = json!({"metadata": {"name": "web", "namespace": "d"}, "spec": {"clusterIP": "10.0.0.10", "clusterIPs": ["10.0.0.10"], "ports": [{"port": 80}]}});
        let mut new = old.clone();
        new["spec"]["clusterIP"] = json!("10.0.0.11");
        new["spec"]["clusterIPs"] = json!(["10.0.0.11"]);
        let causes = validate_update("Service", &new, &old);
        assert_eq!(
            causes,
            vec![Cause::invalid(
                "spec.clusterIPs[0]",
                BadValue::Raw("[]string{\"10.0.0.11\"}".into()),
                "may not change once set"
            )]
        );
        let mut to_external = old.clone();
        to_external["spec"] = json!({"type": "ExternalName", "externalName": "example.com"});
        assert_eq!(validate_update("Service", &to_external, &old), vec![]);
    }

    #[test]
    fn deployment_selector_must_match_template_labels() {
        let d = deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "api", "tier": "x"}));
        let causes = validate_create("Deployment", &d);
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "spec.template.metadata.labels");
        assert_eq!(
            causes[0].message,
            "Invalid value: map[string]string{\"app\":\"api\", \"tier\":\"x\"}: `selector` does not match template `labels`"
        );
        let ok = deployment(
            json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["web"]}]}),
            json!({"app": "web"}),
        );
        assert_eq!(validate_create("Deployment", &ok), vec![]);
    }

    #[test]
    fn deployment_needs_a_non_empty_selector_and_always_restart() {
        let mut d = deployment(json!({}), json!({"app": "web"}));
        d["spec"]["template"]["spec"]["restartPolicy"] = json!("Never");
        d["spec"]["replicas"] = json!(-1);
        let causes = validate_create("Deployment", &d);
        assert_eq!(fields(&causes), vec!["spec.replicas", "spec.selector", "spec.template.spec.restartPolicy"]);
        let mut no_sel = deployment(json!({}), json!({}));
        no_sel["spec"].as_object_mut().into_iter().for_each(|s| {
            s.remove("selector");
        });
        assert_eq!(validate_create("Deployment", &no_sel), vec![Cause::required("spec.selector", "")]);
    }

    #[test]
    fn deployment_template_pod_spec_is_validated_under_its_path() {
        let d = deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "web"}));
        let mut bad = d.clone();
        bad["spec"]["template"]["spec"]["containers"][0]["image"] = json!("");
        assert_eq!(fields(&validate_create("Deployment", &bad)), vec!["spec.template.spec.containers[0].image"]);
    }

    #[test]
    fn rolling_update_may_not_have_both_zero() {
        let mut d = deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "web"}));
        d["spec"]["strategy"] =
            json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "0%"}});
        let causes = validate_create("Deployment", &d);
        assert_eq!(
            causes,
            vec![Cause::invalid(
                "spec.strategy.rollingUpdate.maxUnavailable",
                BadValue::Raw("0".into()),
                "may not be 0 when `maxSurge` is 0"
            )]
        );
        d["spec"]["strategy"] = json!({"type": "Blue"});
        assert_eq!(fields(&validate_create("Deployment", &d)), vec!["spec.strategy.type"]);
    }

    #[test]
    fn deployment_selector_is_immutable() {
        let old = deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "web", "v": "2"}));
        let new = deployment(json!({"matchLabels": {"app": "web", "v": "2"}}), json!({"app": "web", "v": "2"}));
        let causes = validate_update("Deployment", &new, &old);
        assert_eq!(
            causes,
            vec![Cause::invalid(
                "spec.selector",
                BadValue::Raw("&LabelSelector{MatchLabels:map[string]string{app: web,v: 2,},MatchExpressions:[]LabelSelectorRequirement{},}".into()),
                "field is immutable"
            )]
        );
        assert_eq!(fields(&validate_update("ReplicaSet", &new, &old)), vec!["spec.selector"]);
    }

    #[test]
    fn config_map_keys_and_immutability() {
        let cm =
            json!({"metadata": {"name": "c", "namespace": "d"}, "data": {"ok.key": "v", "bad/key": "v", "..x": "v"}});
        let causes = validate_create("ConfigMap", &cm);
        assert_eq!(fields(&causes), vec!["data[..x]", "data[bad/key]"]);
        assert_eq!(causes[0].message, "Invalid value: \"..x\": must not start with '..'");

        let old = json!({"metadata": {"name": "c", "namespace": "d"}, "immutable": true, "data": {"a": "1"}});
        let mut new = old.clone();
        new["data"]["a"] = json!("2");
        assert_eq!(
            validate_update("ConfigMap", &new, &old),
            vec![Cause::forbidden("data", "field is immutable when `immutable` is set")]
        );
    }

    #[test]
    fn secret_data_is_limited_to_one_mib_and_type_is_immutable() {
        let big = "A".repeat(1_400_000);
        let s = json!({"metadata": {"name": "s", "namespace": "d"}, "type": "Opaque", "data": {"k": big}});
        assert_eq!(validate_create("Secret", &s), vec![Cause::too_long("data", 1048576)]);
        let old = json!({"metadata": {"name": "s", "namespace": "d"}, "type": "Opaque"});
        let mut new = old.clone();
        new["type"] = json!("kubernetes.io/tls");
        let causes = validate_update("Secret", &new, &old);
        assert_eq!(fields(&causes), vec!["data[tls.crt]", "data[tls.key]", "type"]);
    }

    #[test]
    fn endpoints_and_slices_check_addresses_and_ports() {
        let ep = json!({"metadata": {"name": "e", "namespace": "d"}, "subsets": [
            {"addresses": [{"ip": "10.1.2.3"}, {"ip": "nope"}, {"ip": "127.0.0.1"}], "ports": [{"port": 80, "protocol": "TCP"}]},
            {"ports": [{"port": 80}]}
        ]});
        let causes = validate_create("Endpoints", &ep);
        assert_eq!(
            fields(&causes),
            vec![
                "subsets[0].addresses[1].ip",
                "subsets[0].addresses[1].ip",
                "subsets[0].addresses[2].ip",
                "subsets[1]",
            ]
        );
        let slice = json!({"metadata": {"name": "s", "namespace": "d"}, "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.0.0.1"]}, {"addresses": ["fd00::1"]}, {"addresses": []}],
            "ports": [{"name": "http", "port": 80, "protocol": "TCP"}, {"name": "http", "port": 81}]});
        let causes = validate_create("EndpointSlice", &slice);
        assert_eq!(fields(&causes), vec!["endpoints[1].addresses[0]", "endpoints[2].addresses", "ports[1].name"]);
        let bad_type = json!({"metadata": {"name": "s", "namespace": "d"}, "addressType": "IPX"});
        assert_eq!(
            validate_create("EndpointSlice", &bad_type)[0].message,
            "Unsupported value: \"IPX\": supported values: \"FQDN\", \"IPv4\", \"IPv6\""
        );
        let mut changed = slice.clone();
        changed["addressType"] = json!("IPv6");
        changed["endpoints"] = json!([]);
        changed["ports"] = json!([]);
        assert_eq!(fields(&validate_update("EndpointSlice", &changed, &slice)), vec!["addressType"]);
        assert_eq!(
            invalid_message("EndpointSlice", "s", &[Cause::required("addressType", "")]),
            "EndpointSlice.discovery.k8s.io \"s\" is invalid: addressType: Required value"
        );
    }

    #[test]
    fn lease_duration_must_be_positive() {
        let l =
            json!({"metadata": {"name": "n1", "namespace": "kube-node-lease"}, "spec": {"leaseDurationSeconds": 0}});
        assert_eq!(
            validate_create("Lease", &l),
            vec![Cause::invalid("spec.leaseDurationSeconds", 0i64, "must be greater than 0")]
        );
    }

    #[test]
    fn event_namespace_must_match_its_object() {
        let e =
            json!({"metadata": {"name": "e.1", "namespace": "a"}, "involvedObject": {"kind": "Pod", "namespace": "b"}});
        assert_eq!(fields(&validate_create("Event", &e)), vec!["involvedObject.namespace"]);
    }

    #[test]
    fn node_taints_need_valid_effects() {
        let n = json!({"metadata": {"name": "n1"}, "spec": {"taints": [{"key": "k", "effect": "Maybe"}], "podCIDRs": ["10.244.0.0/24", "x"]}});
        assert_eq!(fields(&validate_create("Node", &n)), vec!["metadata.taints[0].effect", "spec.podCIDRs[1]"]);
    }

    #[test]
    fn pod_status_update_checks_phase_and_node_name() {
        let old = json!({"metadata": {"name": "p", "namespace": "d"}, "spec": {"nodeName": "n1", "restartPolicy": "Never"},
            "status": {"phase": "Running", "qosClass": "BestEffort",
                "containerStatuses": [{"name": "a", "state": {"terminated": {"exitCode": 0}}}]}});
        let mut new = old.clone();
        new["status"]["phase"] = json!("Done");
        new["spec"]["nodeName"] = json!("n2");
        new["status"]["containerStatuses"] = json!([{"name": "a", "state": {"running": {}}}]);
        let causes = validate_status_update("Pod", &new, &old);
        assert_eq!(fields(&causes), vec!["status.phase", "status.nodeName", "status.containerStatuses[0].state"]);
        assert_eq!(
            causes[0].message,
            "Unsupported value: \"Done\": supported values: \"Pending\", \"Running\", \"Succeeded\", \"Failed\", \"Unknown\""
        );
    }

    #[test]
    fn status_updates_still_guard_metadata() {
        let old = json!({"metadata": {"name": "p", "namespace": "d"}, "status": {"replicas": 1}});
        let mut new = old.clone();
        new["metadata"]["name"] = json!("q");
        new["status"]["readyReplicas"] = json!(2);
        let causes = validate_status_update("ReplicaSet", &new, &old);
        assert_eq!(fields(&causes), vec!["metadata.name", "status.readyReplicas"]);
    }

    #[test]
    fn defaulted_objects_validate_cleanly() {
        let objects = [
            (
                "Pod",
                pod(json!({"containers": [{"name": "a", "image": "nginx", "ports": [{"containerPort": 80}],
                "readinessProbe": {"httpGet": {"port": 80}}}],
                "volumes": [{"name": "v"}]})),
            ),
            ("Deployment", deployment(json!({"matchLabels": {"app": "web"}}), json!({"app": "web"}))),
            (
                "Service",
                json!({"metadata": {"name": "web", "namespace": "d"},
                "spec": {"type": "NodePort", "selector": {"app": "web"}, "ports": [{"port": 80}]}}),
            ),
            ("Service", json!({"metadata": {"name": "db", "namespace": "d"}, "spec": {"clusterIP": "None"}})),
            ("Namespace", json!({"metadata": {"name": "team-a"}})),
            ("Secret", json!({"metadata": {"name": "s", "namespace": "d"}, "data": {"k": "dg=="}})),
            (
                "EndpointSlice",
                json!({"metadata": {"name": "s", "namespace": "d"}, "addressType": "IPv4",
                "endpoints": [{"addresses": ["10.0.0.1"]}], "ports": [{"port": 80}]}),
            ),
        ];
        for (kind, mut obj) in objects {
            crate::defaults::apply_defaults(kind, &mut obj);
            assert_eq!(validate_create(kind, &obj), vec![], "{kind}");
            assert_eq!(validate_update(kind, &obj, &obj), vec![], "{kind}");
        }
    }

    #[test]
    fn go_quoting_escapes_like_strconv_quote() {
        assert_eq!(go_quote("a\"b\\c\n\u{1}é"), "\"a\\\"b\\\\c\\n\\x01é\"");
    }
}
