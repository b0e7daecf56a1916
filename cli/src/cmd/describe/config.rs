//! `describe configmap|secret`: their keys; a Secret's values are never printed, only sizes.

use super::common::{metadata, s};
use super::writer::Out;
use serde_json::Value;

pub fn configmap(out: &mut Out, cm: &Value) {
    metadata(out, cm);
    out.header(0, "");
    out.header(0, "Data");
    out.header(0, "====");
    for (k, v) in cm["data"].as_object().into_iter().flatten() {
        out.header(0, &format!("{k}:"));
        out.header(0, "----");
        out.header(0, s(v).trim_end());
        out.header(0, "");
    }
    out.header(0, "");
    out.header(0, "BinaryData");
    out.header(0, "====");
    for (k, v) in cm["binaryData"].as_object().into_iter().flatten() {
        out.kv(0, k, format!("{} bytes", decoded_len(&s(v))));
    }
    out.header(0, "");
}

pub fn secret(out: &mut Out, secret: &Value) {
    metadata(out, secret);
    out.header(0, "");
    out.kv(0, "Type", s(&secret["type"]));
    out.header(0, "");
    out.header(0, "Data");
    out.header(0, "====");
    for (k, v) in secret["data"].as_object().into_iter().flatten() {
        out.kv(0, k, format!("{} bytes", decoded_len(&s(v))));
    }
    out.header(0, "");
}

/// The length of base64 data once decoded.
fn decoded_len(b64: &str) -> usize {
    let t = b64.trim_end_matches('=');
    t.len() * 3 / 4
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn secret_values_are_never_printed() {
        let mut o = Out::default();
        secret(
            &mut o,
            &json!({"metadata": {"name": "s", "namespace": "d"}, "type": "Opaque",
                               "data": {"password": "aHVudGVyMg=="}}),
        );
        let text = o.render();
        assert!(text.contains("password:  7 bytes"), "{text}");
        assert!(!text.contains("aHVudGVyMg") && !text.contains("hunter2"), "{text}");
    }

    #[test]
    fn configmap_values_are_shown_under_their_key() {
        let mut o = Out::default();
        configmap(&mut o, &json!({"metadata": {"name": "c", "namespace": "d"}, "data": {"mode": "fast"}}));
        assert!(o.render().contains("Data\n====\nmode:\n----\nfast\n"), "{}", o.render());
    }
}
