//! Status conditions per the Kubernetes API conventions (metav1.Condition,
//! in `status.conditions`, for every kind): lastTransitionTime moves only
//! when the status changes, so an unchanged condition is written back byte
//! for byte and a no-op reconcile writes nothing.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use k8s_openapi::jiff::Timestamp;

/// A condition as computed, before times are reconciled with the old one.
pub struct Cond<'a> {
    pub type_: &'a str,
    /// "True", "False" or "Unknown".
    pub status: &'a str,
    pub reason: &'a str,
    pub message: String,
}

/// Builds the condition list, keeping each old lastTransitionTime when the
/// status did not change.
pub fn merge(
    old: &[Condition],
    new: Vec<Cond<'_>>,
    generation: Option<i64>,
    now: Timestamp,
) -> Vec<Condition> {
    new.into_iter()
        .map(|c| {
            let status = c.status;
            let previous = old.iter().find(|o| o.type_ == c.type_);
            let last_transition_time = match previous {
                Some(p) if p.status == status => p.last_transition_time.clone(),
                _ => Time(now),
            };
            Condition {
                type_: c.type_.to_string(),
                status: status.to_string(),
                reason: c.reason.to_string(),
                message: c.message,
                observed_generation: generation,
                last_transition_time,
            }
        })
        .collect()
}

/// "True" or "False".
pub fn truth(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// Looks a condition up by type.
pub fn find<'a>(conditions: &'a [Condition], type_: &str) -> Option<&'a Condition> {
    conditions.iter().find(|c| c.type_ == type_)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn transition_time_moves_only_with_status() {
        let t0 = Timestamp::from_second(100).unwrap();
        let t1 = Timestamp::from_second(200).unwrap();
        let first = merge(
            &[],
            vec![Cond {
                type_: "Ready",
                status: "False",
                reason: "ReplicasNotReady",
                message: "0/1".into(),
            }],
            Some(1),
            t0,
        );
        let same = merge(
            &first,
            vec![Cond {
                type_: "Ready",
                status: "False",
                reason: "ReplicasNotReady",
                message: "0/1".into(),
            }],
            Some(1),
            t1,
        );
        assert_eq!(first, same);
        let flipped = merge(
            &same,
            vec![Cond {
                type_: "Ready",
                status: "True",
                reason: "AllReplicasReady",
                message: "1/1".into(),
            }],
            Some(1),
            t1,
        );
        assert_eq!(flipped[0].last_transition_time, Time(t1));
        assert_eq!(find(&flipped, "Ready").unwrap().status, "True");
    }
}
