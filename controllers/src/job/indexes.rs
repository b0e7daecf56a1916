//! Indexed Jobs: a pod's completion index, and `status.completedIndexes` as Kubernetes writes it
//! (`1,3-5,7`: sorted, ranges of three or more collapsed).

use k8s_openapi::api::core::v1::Pod;
use std::collections::BTreeSet;

/// The annotation (and, since 1.28, label) carrying a pod's completion index.
pub const INDEX_KEY: &str = "batch.kubernetes.io/job-completion-index";

/// The pod's completion index, if it carries a valid one.
pub fn pod_index(pod: &Pod) -> Option<i32> {
    let meta = &pod.metadata;
    let raw = meta.annotations.as_ref().and_then(|a| a.get(INDEX_KEY));
    let raw = raw.or_else(|| meta.labels.as_ref().and_then(|l| l.get(INDEX_KEY)))?;
    raw.parse::<i32>().ok().filter(|i| *i >= 0)
}

/// Parses `completedIndexes`; malformed parts are skipped.
pub fn parse(s: &str) -> BTreeSet<i32> {
    let mut out = BTreeSet::new();
    for part in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                if let (Ok(a), Ok(b)) = (a.parse::<i32>(), b.parse::<i32>()) {
                    out.extend(a..=b);
                }
            }
            None => {
                if let Ok(i) = part.parse::<i32>() {
                    out.insert(i);
                }
            }
        }
    }
    out
}

/// Formats a set of indexes as Kubernetes does: `0-2` for runs of three or more, else commas.
pub fn format(set: &BTreeSet<i32>) -> String {
    let mut parts = Vec::new();
    let mut iter = set.iter().copied().peekable();
    while let Some(start) = iter.next() {
        let mut end = start;
        while iter.peek() == Some(&(end + 1)) {
            end += 1;
            iter.next();
        }
        match end - start {
            0 => parts.push(start.to_string()),
            1 => {
                parts.push(start.to_string());
                parts.push(end.to_string());
            }
            _ => parts.push(format!("{start}-{end}")),
        }
    }
    parts.join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn completed_indexes_round_trip_in_kubernetes_form() {
        let set: BTreeSet<i32> = [0, 1, 2, 4, 6, 7, 9, 10, 11, 12].into_iter().collect();
        assert_eq!(format(&set), "0-2,4,6,7,9-12");
        assert_eq!(parse("0-2,4,6,7,9-12"), set);
        assert_eq!(format(&BTreeSet::new()), "");
        assert_eq!(parse("x,3"), [3].into_iter().collect());
    }
}
