//! The short, stable digest of an object's contents: the template hash of
//! a Pod template, and the hash of a Service as applied.

use serde::Serialize;
use sha2::{Digest, Sha256};

/// Ten lowercase hex characters of the SHA-256 of the value's JSON form.
/// k8s-openapi types serialize their fields in a fixed order and maps are
/// sorted (BTreeMap), so equal templates hash equally.
pub fn template_hash<T: Serialize>(template: &T) -> String {
    let json = serde_json::to_vec(template).unwrap_or_default();
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
        assert_eq!(template_hash(&a), template_hash(&b));
        assert_ne!(template_hash(&a), template_hash(&c));
        assert_eq!(template_hash(&a).len(), 10);
        assert!(template_hash(&a).chars().all(|ch| ch.is_ascii_hexdigit()));
    }
}
