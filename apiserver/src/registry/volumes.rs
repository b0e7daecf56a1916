//! The PersistentVolume strategy's `lastPhaseTransitionTime` (the storage admission plugins are in
//! `auth/storage.rs`).

use super::meta::{self, timestamp};
use serde_json::{json, Value};

/// A new PersistentVolume starts Pending, stamped with the time it got there.
pub fn new_volume_status(pv: &mut Value) {
    pv["status"] = json!({"phase": "Pending", "lastPhaseTransitionTime": timestamp(meta::now())});
}

/// A status write that moves a PersistentVolume to another phase stamps the transition time,
/// unless the writer set a new one itself.
pub fn stamp_phase_transition(new: &mut Value, old: &Value) {
    let phase = |v: &Value| v.pointer("/status/phase").and_then(Value::as_str).map(str::to_string);
    let time = |v: &Value| v.pointer("/status/lastPhaseTransitionTime").cloned();
    if phase(new) != phase(old) && (time(new).is_none_or(|t| t.is_null()) || time(new) == time(old)) {
        if let Some(status) = new.get_mut("status").and_then(Value::as_object_mut) {
            status.insert("lastPhaseTransitionTime".into(), json!(timestamp(meta::now())));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_phase_change_is_stamped_but_a_rewrite_is_not() {
        let old = json!({"status": {"phase": "Pending", "lastPhaseTransitionTime": "2025-01-01T00:00:00Z"}});
        let mut same = old.clone();
        stamp_phase_transition(&mut same, &old);
        assert_eq!(same, old);
        let mut bound = json!({"status": {"phase": "Bound", "lastPhaseTransitionTime": "2025-01-01T00:00:00Z"}});
        stamp_phase_transition(&mut bound, &old);
        assert_ne!(bound["status"]["lastPhaseTransitionTime"], "2025-01-01T00:00:00Z");
        let mut explicit = json!({"status": {"phase": "Bound", "lastPhaseTransitionTime": "2025-02-01T00:00:00Z"}});
        stamp_phase_transition(&mut explicit, &old);
        assert_eq!(explicit["status"]["lastPhaseTransitionTime"], "2025-02-01T00:00:00Z");
    }
}
