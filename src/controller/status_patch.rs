//! The JSON merge patch (RFC 7386) that turns one status into another.
//!
//! A status struct serialized as a whole cannot remove anything: its
//! `None` fields are skipped, so a merge patch of it leaves them as they
//! were (remove `spec.service`, and `status.network` stayed for ever). The
//! patch built here names every field that changed, with an explicit
//! `null` for every field that is gone; an unchanged status gives no patch
//! at all, so nothing is written.

use serde_json::{Map, Value};

/// The merge patch from `old` to `new`, or `None` when they are equal.
/// Objects are compared key by key; anything else (lists included, as
/// merge patches replace them whole) is replaced when it differs.
pub fn diff(old: &Value, new: &Value) -> Option<Value> {
    match (old, new) {
        (Value::Object(o), Value::Object(n)) => {
            let mut patch = Map::new();
            for (k, nv) in n {
                match o.get(k) {
                    Some(ov) => {
                        if let Some(p) = diff(ov, nv) {
                            patch.insert(k.clone(), p);
                        }
                    }
                    None if nv.is_null() => {}
                    None => {
                        patch.insert(k.clone(), strip_nulls(nv));
                    }
                }
            }
            for (k, ov) in o {
                if !n.contains_key(k) && !ov.is_null() {
                    patch.insert(k.clone(), Value::Null);
                }
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        _ if old == new => None,
        // A null in a merge patch deletes; a new null value is a deletion.
        (_, n) => Some(strip_nulls(n)),
    }
}

/// Nulls inside a new object would read as deletions; drop them.
fn strip_nulls(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k.clone(), strip_nulls(v)))
                .collect(),
        ),
        other => other.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn unchanged_gives_nothing() {
        let s = json!({"replicas": 3, "conditions": [{"type": "Ready"}]});
        assert_eq!(diff(&s, &s), None);
    }

    #[test]
    fn removed_fields_become_null_and_lists_are_replaced() {
        let old = json!({
            "network": {"loadBalancer": {}},
            "workflow": {"replicas": 2, "conditions": [{"type": "A"}]},
            "selector": "app=x"
        });
        let new = json!({
            "workflow": {"replicas": 3},
            "selector": "app=x",
            "conditions": [{"type": "Ready", "status": "True"}]
        });
        assert_eq!(
            diff(&old, &new),
            Some(json!({
                "network": null,
                "workflow": {"replicas": 3, "conditions": null},
                "conditions": [{"type": "Ready", "status": "True"}]
            }))
        );
    }

    #[test]
    fn from_nothing_the_patch_is_the_status() {
        let new = json!({"replicas": 1, "selector": "a=b"});
        assert_eq!(diff(&Value::Null, &new), Some(new.clone()));
        assert_eq!(diff(&json!({}), &new), Some(new));
    }
}
