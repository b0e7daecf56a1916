//! The `pod-template-hash`: Kubernetes' ComputeHash — FNV-32a over the template (here its JSON, where
//! Kubernetes hashes a spew dump), then the collision count as 8 little-endian bytes, printed in
//! decimal and "safe encoded" so it never spells words.

use k8s_openapi::api::core::v1::PodTemplateSpec;

pub const LABEL: &str = "pod-template-hash";

const SAFE_ALPHANUMS: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

pub fn fnv32a(bytes: &[u8]) -> u32 {
    bytes.iter().fold(0x811c_9dc5u32, |h, b| (h ^ u32::from(*b)).wrapping_mul(0x0100_0193))
}

/// apimachinery's rand.SafeEncodeString.
pub fn safe_encode(s: &str) -> String {
    s.bytes().map(|b| char::from(SAFE_ALPHANUMS[usize::from(b) % SAFE_ALPHANUMS.len()])).collect()
}

/// The hash of a template (without any pod-template-hash label) and the deployment's collisionCount.
pub fn compute(template: &PodTemplateSpec, collision_count: Option<i32>) -> String {
    let mut bytes = serde_json::to_vec(template).unwrap_or_default();
    if let Some(c) = collision_count {
        let mut le = [0u8; 8];
        le[..4].copy_from_slice(&u32::from_ne_bytes(c.to_ne_bytes()).to_le_bytes());
        bytes.extend_from_slice(&le);
    }
    safe_encode(&fnv32a(&bytes).to_string())
}

/// The template as the deployment declares it: the same template with the hash label removed.
pub fn without_hash(template: &PodTemplateSpec) -> PodTemplateSpec {
    let mut t = template.clone();
    if let Some(labels) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        labels.remove(LABEL);
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn template(image: &str) -> PodTemplateSpec {
        PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some([("app".to_string(), "web".to_string())].into()),
                ..ObjectMeta::default()
            }),
            spec: Some(PodSpec {
                containers: vec![Container { name: "app".into(), image: Some(image.into()), ..Container::default() }],
                ..PodSpec::default()
            }),
        }
    }

    #[test]
    fn fnv32a_matches_the_reference_vectors() {
        assert_eq!(fnv32a(b""), 0x811c9dc5);
        assert_eq!(fnv32a(b"a"), 0xe40c292c);
        assert_eq!(fnv32a(b"foobar"), 0xbf9cf968);
    }

    #[test]
    fn safe_encoding_uses_kubernetes_alphabet() {
        // '0' is byte 48: 48 % 27 = 21 -> '4'; '9' is 57: 57 % 27 = 3 -> 'f'.
        assert_eq!(safe_encode("09"), "4f");
        assert!(compute(&template("a:1"), None).chars().all(|c| SAFE_ALPHANUMS.contains(&(c as u8))));
    }

    #[test]
    fn hash_is_stable_and_changes_with_template_and_collisions() {
        let a = compute(&template("a:1"), None);
        assert_eq!(a, compute(&template("a:1"), None));
        assert_ne!(a, compute(&template("a:2"), None));
        assert_ne!(a, compute(&template("a:1"), Some(1)));
        assert_eq!(compute(&template("a:1"), Some(0)), compute(&template("a:1"), Some(0)));
    }

    #[test]
    fn hash_label_does_not_count() {
        let mut t = template("a:1");
        if let Some(l) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
            l.insert(LABEL.into(), "abc".into());
        }
        assert_eq!(without_hash(&t), template("a:1"));
    }
}
