//! Collection responses encoded one item at a time into the body as it is sent, as
//! kube-apiserver does since 1.33 (StreamingCollectionEncodingToJSON): the list's memory is its
//! shared cached objects plus one chunk, never the whole encoded list.

use crate::cache::CachedObject;
use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::{IntoResponse, Response};
use hyper::body::{Frame, SizeHint};
use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

/// Items are gathered into chunks of about this size before they are handed to the connection.
const CHUNK: usize = 64 * 1024;

/// Appends one item's JSON to the chunk being filled.
pub type Encode = Box<dyn FnMut(&CachedObject, &mut Vec<u8>) + Send>;

/// A JSON collection `head` + items separated by commas + `tail`, encoded lazily. `head` is the
/// object up to and including the array's `[`; `tail` closes both.
pub struct Collection {
    head: Option<Bytes>,
    items: std::vec::IntoIter<Arc<CachedObject>>,
    encode: Encode,
    first: bool,
    tail: Option<&'static [u8]>,
    /// The exact body length when it is known up front (sent as Content-Length).
    len: Option<u64>,
}

impl Collection {
    /// The cached objects' own JSON spliced in as stored: the length is known, nothing is re-encoded.
    pub fn items(head: Bytes, items: Vec<Arc<CachedObject>>) -> Self {
        let commas = items.len().saturating_sub(1);
        let len = head.len() + items.iter().map(|o| o.json.len()).sum::<usize>() + commas + TAIL.len();
        let mut c = Self::encoded(head, items, Box::new(|o, buf| buf.extend_from_slice(&o.json)));
        c.len = Some(len as u64);
        c
    }

    /// Each item turned into something else (a Table row) as it is reached; the length is unknown.
    pub fn encoded(head: Bytes, items: Vec<Arc<CachedObject>>, encode: Encode) -> Self {
        Self { head: Some(head), items: items.into_iter(), encode, first: true, tail: Some(TAIL), len: None }
    }

    /// The next chunk: the head, then items until the chunk is full, then the tail.
    fn next_chunk(&mut self) -> Option<Bytes> {
        if let Some(head) = self.head.take() {
            return Some(head);
        }
        let mut buf = Vec::new();
        for o in self.items.by_ref() {
            if !std::mem::take(&mut self.first) {
                buf.push(b',');
            }
            (self.encode)(&o, &mut buf);
            if buf.len() >= CHUNK {
                return Some(buf.into());
            }
        }
        if let Some(tail) = self.tail.take() {
            buf.extend_from_slice(tail);
        }
        (!buf.is_empty()).then(|| buf.into())
    }

    pub fn into_response(self) -> Response {
        ([(header::CONTENT_TYPE, "application/json")], Body::new(self)).into_response()
    }
}

const TAIL: &[u8] = b"]}";

impl hyper::body::Body for Collection {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        Poll::Ready(self.get_mut().next_chunk().map(|b| Ok(Frame::data(b))))
    }

    fn is_end_stream(&self) -> bool {
        self.head.is_none() && self.tail.is_none()
    }

    fn size_hint(&self) -> SizeHint {
        match self.len {
            // Only asked before the first frame, so the whole length is still ahead.
            Some(n) if self.head.is_some() => SizeHint::with_exact(n),
            _ => SizeHint::default(),
        }
    }
}

/// `value` serialized up to and including the `[` of its last key's array, which must be empty
/// (serde_json sorts map keys, so the array's key must also sort last): the head of a collection
/// whose items are written after it.
pub fn open_array(value: &serde_json::Value) -> Bytes {
    let mut v = serde_json::to_vec(value).expect("a JSON value always serializes");
    assert!(v.ends_with(b"[]}"), "the collection's array must be empty and last");
    v.truncate(v.len() - TAIL.len());
    v.into()
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use serde_json::{json, Value};

    /// A cached pod whose JSON is `v` (what the selectors need is left empty: no test here selects).
    pub fn cached(v: Value) -> Arc<CachedObject> {
        let name = v["metadata"]["name"].as_str().unwrap_or_default().to_string();
        Arc::new(CachedObject {
            key: format!("/registry/pods/default/{name}"),
            namespace: Some("default".into()),
            name,
            rv: 1,
            labels: None,
            fields: Vec::new(),
            json: serde_json::to_vec(&v).expect("json").into(),
        })
    }

    pub fn pod(i: usize, filler: usize) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": format!("web-{i}"), "namespace": "default", "resourceVersion": (10 + i).to_string(),
                            "creationTimestamp": "2020-01-01T00:00:00Z",
                            "labels": {"app": "web"}, "annotations": {"note": "é\"\\\n".repeat(filler)}},
               "spec": {"containers": [{"name": "c", "image": "busybox"}]}, "status": {"phase": "Running"}})
    }

    /// The body as sent, and the frames it was sent in.
    pub async fn collect(c: Collection) -> (Vec<u8>, usize, Option<u64>) {
        let hint = hyper::body::Body::size_hint(&c).exact();
        let mut body = Body::new(c);
        let (mut out, mut frames) = (Vec::new(), 0);
        while let Some(f) = body.frame().await {
            out.extend_from_slice(f.expect("infallible").data_ref().expect("data frame"));
            frames += 1;
        }
        (out, frames, hint)
    }

    #[tokio::test]
    async fn items_larger_than_a_chunk_are_split_across_frames_with_the_exact_length_announced() {
        let items: Vec<_> = (0..40).map(|i| cached(pod(i, 1000))).collect();
        let (body, frames, hint) = collect(Collection::items(Bytes::from_static(b"{\"items\":["), items.clone())).await;
        assert_eq!(hint, Some(body.len() as u64));
        assert!(frames > 3, "40 items of ~7 KB come in several chunks, got {frames}");
        let v: Value = serde_json::from_slice(&body).expect("the body is one JSON document");
        assert_eq!(v["items"].as_array().map(Vec::len), Some(40));
        assert_eq!(v["items"][39], pod(39, 1000));
    }

    #[tokio::test]
    async fn an_empty_collection_is_its_head_and_tail() {
        let (body, _, hint) = collect(Collection::items(Bytes::from_static(b"{\"items\":["), Vec::new())).await;
        assert_eq!(body, b"{\"items\":[]}");
        assert_eq!(hint, Some(12));
    }
}
