//! `metadata.managedFields`: decoding, validating and encoding the entries.

use super::fieldpath::{from_fields_v1, to_fields_v1, FieldSet};
use serde_json::{json, Map, Value};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Operation {
    Apply,
    Update,
}

impl Operation {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Apply => "Apply",
            Self::Update => "Update",
        }
    }
}

/// One manager's claim on the object's fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub manager: String,
    pub operation: Operation,
    pub api_version: String,
    pub time: Option<String>,
    /// `""` for the main resource, else `status` or `scale`.
    pub subresource: String,
    pub fields: FieldSet,
}

impl Entry {
    /// Kubernetes tells managers apart by name, operation and subresource, and updaters also by
    /// API version (an applier keeps one entry across versions).
    pub fn same_manager(&self, other: &Entry) -> bool {
        self.manager == other.manager
            && self.operation == other.operation
            && self.subresource == other.subresource
            && (self.operation == Operation::Apply || self.api_version == other.api_version)
    }

    /// How a conflict names this manager: `"kubectl-scale" with subresource "scale" using apps/v1`.
    pub fn describe(&self) -> String {
        let mut s = Value::from(self.manager.as_str()).to_string();
        if !self.subresource.is_empty() {
            s.push_str(&format!(" with subresource {}", Value::from(self.subresource.as_str())));
        }
        if self.operation == Operation::Update {
            s.push_str(&format!(" using {}", self.api_version));
        }
        s
    }
}

/// What a writer put in `metadata.managedFields`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Sent {
    /// Absent or empty: keep the live object's entries.
    Nothing,
    /// `[{}]`: start over with no entries.
    Reset,
    Entries(Vec<Entry>),
}

/// A managedFields entry that is not valid; `field` is relative to `metadata.managedFields`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Invalid {
    pub field: String,
    pub message: String,
}

/// Read what a writer sent (`None` = the field was absent).
pub fn decode_sent(v: Option<&Value>) -> Result<Sent, Invalid> {
    let Some(v) = v.filter(|v| !v.is_null()) else { return Ok(Sent::Nothing) };
    let Some(list) = v.as_array() else {
        return Err(Invalid { field: String::new(), message: "must be a list of ManagedFieldsEntry".into() });
    };
    match list.as_slice() {
        [] => Ok(Sent::Nothing),
        [only] if only.as_object().is_some_and(Map::is_empty) => Ok(Sent::Reset),
        _ => decode(v).map(Sent::Entries),
    }
}

/// Decode a managedFields list.
pub fn decode(v: &Value) -> Result<Vec<Entry>, Invalid> {
    let list = v
        .as_array()
        .ok_or_else(|| Invalid { field: String::new(), message: "must be a list of ManagedFieldsEntry".into() })?;
    list.iter()
        .enumerate()
        .map(|(i, e)| {
            decode_entry(e).map_err(|(f, m)| {
                let field = if f.is_empty() { format!("[{i}]") } else { format!("[{i}].{f}") };
                Invalid { field, message: m }
            })
        })
        .collect()
}

fn decode_entry(e: &Value) -> Result<Entry, (&'static str, String)> {
    let text = |f: &'static str| -> Result<String, (&'static str, String)> {
        match e.get(f) {
            None | Some(Value::Null) => Ok(String::new()),
            Some(Value::String(s)) => Ok(s.clone()),
            Some(_) => Err((f, "must be a string".into())),
        }
    };
    if !e.is_object() {
        return Err(("", "must be an object".into()));
    }
    let manager = text("manager")?;
    if manager.chars().count() > 128 {
        return Err(("manager", "Too long: may not be more than 128 bytes".into()));
    }
    let operation = match text("operation")?.as_str() {
        "Apply" => Operation::Apply,
        "Update" => Operation::Update,
        other => return Err(("operation", format!("Invalid value: {other:?}: must be `Apply` or `Update`"))),
    };
    match text("fieldsType")?.as_str() {
        "" | "FieldsV1" => {}
        other => return Err(("fieldsType", format!("Invalid value: {other:?}: must be `FieldsV1`"))),
    }
    let fields = match e.get("fieldsV1") {
        None | Some(Value::Null) => FieldSet::new(),
        Some(f) => from_fields_v1(f).map_err(|m| ("fieldsV1", m))?,
    };
    let time = text("time")?;
    if !time.is_empty() && time.parse::<jiff::Timestamp>().is_err() {
        return Err(("time", format!("invalid time {time:?}")));
    }
    Ok(Entry {
        manager,
        operation,
        api_version: text("apiVersion")?,
        time: Some(time).filter(|t| !t.is_empty()),
        subresource: text("subresource")?,
        fields,
    })
}

/// Encode entries in Kubernetes' order: appliers first, then by time, manager, version, subresource.
pub fn encode(entries: &[Entry]) -> Value {
    let mut sorted: Vec<&Entry> = entries.iter().collect();
    sorted.sort_by(|a, b| {
        (a.operation, &a.time, &a.manager, &a.api_version, &a.subresource).cmp(&(
            b.operation,
            &b.time,
            &b.manager,
            &b.api_version,
            &b.subresource,
        ))
    });
    Value::Array(
        sorted
            .into_iter()
            .map(|e| {
                let mut v = json!({"manager": e.manager, "operation": e.operation.as_str(), "apiVersion": e.api_version,
                                   "fieldsType": "FieldsV1", "fieldsV1": to_fields_v1(&e.fields)});
                if let Some(t) = &e.time {
                    v["time"] = t.clone().into();
                }
                if !e.subresource.is_empty() {
                    v["subresource"] = e.subresource.clone().into();
                }
                v
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_in_kubernetes_order() {
        let v = json!([
            {"manager": "kubectl-scale", "operation": "Update", "apiVersion": "apps/v1", "time": "2024-01-02T00:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:replicas": {}}}, "subresource": "scale"},
            {"manager": "kubectl", "operation": "Apply", "apiVersion": "apps/v1", "time": "2024-01-03T00:00:00Z",
             "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {"f:app": {}}}}},
        ]);
        let entries = decode(&v).expect("valid");
        assert_eq!(entries[0].describe(), r#""kubectl-scale" with subresource "scale" using apps/v1"#);
        assert_eq!(entries[1].describe(), r#""kubectl""#);
        let out = encode(&entries);
        assert_eq!(out[0], v[1], "appliers first");
        assert_eq!(out[1], v[0]);
    }

    #[test]
    fn invalid_entries_say_which_field_is_wrong() {
        let bad = |e: Value| decode_sent(Some(&json!([e]))).expect_err("invalid");
        let ok = json!({"manager": "m", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {}});
        assert!(decode_sent(Some(&json!([ok.clone()]))).is_ok());
        let mut e = ok.clone();
        e["operation"] = "Replace".into();
        assert_eq!(bad(e).field, "[0].operation");
        let mut e = ok.clone();
        e["fieldsType"] = "FieldsV2".into();
        assert_eq!(bad(e).field, "[0].fieldsType");
        let mut e = ok.clone();
        e["fieldsV1"] = json!({"nope": {}});
        assert_eq!(bad(e).field, "[0].fieldsV1");
        let mut e = ok;
        e["time"] = "yesterday".into();
        assert_eq!(bad(e).field, "[0].time");
        assert!(decode_sent(Some(&json!("x"))).is_err());
    }

    #[test]
    fn an_empty_entry_resets_and_an_empty_list_keeps() {
        assert_eq!(decode_sent(Some(&json!([{}]))), Ok(Sent::Reset));
        assert_eq!(decode_sent(Some(&json!([]))), Ok(Sent::Nothing));
        assert_eq!(decode_sent(None), Ok(Sent::Nothing));
    }
}
