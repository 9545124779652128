//! The short, stable digest of an object's contents: the template hash of
//! a Pod template, and the hash of a Service as applied.

use serde::Serialize;
use sha2::{Digest, Sha256};

/// Ten lowercase hex characters of the SHA-256 of the value's JSON form
/// (a Pod template's revision, a Service as applied).
/// k8s-openapi types serialize their fields in a fixed order and maps are
/// sorted (BTreeMap), so equal values hash equally.
pub fn content_hash<T: Serialize>(value: &T) -> String {
    let json = serde_json::to_vec(value).unwrap_or_default();
    let digest = Sha256::digest(&json);
    digest.iter().take(5).map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    #[test]
    fn equal_values_hash_equally_and_changes_show() {
        let a: BTreeMap<&str, &str> = [("image", "redis:7"), ("port", "6379")].into();
        let b: BTreeMap<&str, &str> = [("port", "6379"), ("image", "redis:7")].into();
        let c: BTreeMap<&str, &str> = [("port", "6380"), ("image", "redis:7")].into();
        assert_eq!(content_hash(&a), content_hash(&b));
        assert_ne!(content_hash(&a), content_hash(&c));
        assert_eq!(content_hash(&a).len(), 10);
        assert!(content_hash(&a).chars().all(|ch| ch.is_ascii_hexdigit()));
    }
}
