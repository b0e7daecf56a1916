//! JSON patches (RFC 6902) under kube-apiserver's limits: at most 10000 operations
//! (`maxJSONPatchOperations`), and every `copy` together may add at most the request body limit
//! (json-patch's `AccumulatedCopySizeLimit`, which kube-apiserver sets to
//! `--max-request-body-bytes`), so a small patch cannot make the apiserver allocate without bound.

use crate::http::errors::ApiError;
use json_patch::{Patch, PatchOperation};
use serde_json::Value;

/// Kubernetes' `maxJSONPatchOperations`.
pub const MAX_OPERATIONS: usize = 10_000;

/// Why a JSON patch was refused.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("The allowed maximum operations in a JSON patch is {MAX_OPERATIONS}, got {0}")]
    TooManyOperations(usize),
    #[error("the JSON patch is invalid: {0}")]
    Decode(#[source] serde_json::Error),
    #[error("Unable to complete the copy, the accumulated size increase of copy is {accumulated}, exceeding the limit {limit}")]
    CopyTooLarge { accumulated: u64, limit: u64 },
    #[error("{0}")]
    Apply(#[from] json_patch::PatchError),
}

impl From<Error> for ApiError {
    /// 413 for too many operations (Kubernetes' `NewRequestEntityTooLargeError`), 400 for a
    /// patch that is no patch, 422 for one that cannot be applied.
    fn from(e: Error) -> Self {
        match e {
            Error::TooManyOperations(_) => ApiError::entity_too_large(e.to_string()),
            Error::Decode(_) => ApiError::bad_request(e.to_string()),
            Error::CopyTooLarge { .. } | Error::Apply(_) => {
                ApiError::new(422, "Invalid", format!("the JSON patch could not be applied: {e}"))
            }
        }
    }
}

/// The operations of a decoded JSON patch body, refused past [`MAX_OPERATIONS`].
pub fn decode(patch: Value) -> Result<Patch, Error> {
    if let Some(ops) = patch.as_array().filter(|ops| ops.len() > MAX_OPERATIONS) {
        return Err(Error::TooManyOperations(ops.len()));
    }
    serde_json::from_value(patch).map_err(Error::Decode)
}

/// Apply `patch` to `doc`; the values all `copy` operations copy may sum to at most
/// `copy_limit` bytes of JSON (0: no limit). On error `doc` may be partly patched: callers patch
/// a copy they drop on error.
pub fn apply(doc: &mut Value, patch: &Patch, copy_limit: u64) -> Result<(), Error> {
    let mut copied: u64 = 0;
    for op in &patch.0 {
        if let (PatchOperation::Copy(c), true) = (op, copy_limit > 0) {
            // A missing source is the patch's own error, which applying it reports.
            if let Some(value) = doc.pointer(c.from.as_str()) {
                copied = copied.saturating_add(json_size(value));
                if copied > copy_limit {
                    return Err(Error::CopyTooLarge { accumulated: copied, limit: copy_limit });
                }
            }
        }
        json_patch::patch_unsafe(doc, std::slice::from_ref(op))?;
    }
    Ok(())
}

/// The length of `value` as JSON, measured without writing it anywhere.
fn json_size(value: &Value) -> u64 {
    struct Count(u64);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len() as u64;
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a Value to a sink that never fails cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A patch that doubles `/a` `n` times: `{"x":"aaaa..."}` becomes 2^n copies of it.
    fn doubling(n: usize) -> Value {
        let mut ops = vec![json!({"op": "add", "path": "/a", "value": [{"x": "y".repeat(64)}]})];
        for _ in 0..n {
            ops.push(json!({"op": "copy", "from": "/a", "path": "/b"}));
            ops.push(json!({"op": "add", "path": "/a/-", "value": 0}));
            ops.push(json!({"op": "move", "from": "/b", "path": "/a/-"}));
        }
        Value::Array(ops)
    }

    #[test]
    fn a_doubling_copy_patch_stops_at_the_copy_limit() {
        let mut doc = json!({});
        let patch = decode(doubling(30)).expect("a valid patch");
        let err = apply(&mut doc, &patch, 1 << 20).expect_err("2^30 copies exceed 1 MiB");
        assert!(matches!(err, Error::CopyTooLarge { limit: 1048576, .. }), "{err}");
        assert!(json_size(&doc) < 2 << 20, "the document stayed near the limit: {}", json_size(&doc));
        let api = ApiError::from(err);
        assert_eq!((api.code, api.reason), (422, "Invalid"));
        assert!(api.message.contains("Unable to complete the copy, the accumulated size increase of copy is"));
    }

    #[test]
    fn copies_within_the_limit_apply() {
        let mut doc = json!({});
        apply(&mut doc, &decode(doubling(3)).expect("valid"), 1 << 20).expect("small copies apply");
        // Each round adds a 0 and the former list as one element.
        assert_eq!(doc["a"].as_array().map(Vec::len), Some(7));
        assert!(json_size(&doc) > 8 * 64, "three doublings: {doc}");
    }

    #[test]
    fn no_copy_limit_is_zero() {
        let mut doc = json!({});
        apply(&mut doc, &decode(doubling(12)).expect("valid"), 0).expect("unlimited");
    }

    #[test]
    fn more_than_ten_thousand_operations_are_too_large() {
        let op = json!({"op": "test", "path": "/a", "value": 1});
        let err = decode(Value::Array(vec![op.clone(); MAX_OPERATIONS + 1])).expect_err("too many");
        let api = ApiError::from(err);
        assert_eq!((api.code, api.reason), (413, "RequestEntityTooLarge"));
        assert_eq!(
            api.message,
            "Request entity too large: The allowed maximum operations in a JSON patch is 10000, got 10001"
        );
        assert!(decode(Value::Array(vec![op; MAX_OPERATIONS])).is_ok());
    }

    #[test]
    fn a_patch_that_is_no_list_of_operations_is_a_bad_request() {
        let api = ApiError::from(decode(json!({"op": "add"})).expect_err("not a list"));
        assert_eq!(api.code, 400);
        assert!(api.message.starts_with("the JSON patch is invalid: "), "{}", api.message);
    }
}
