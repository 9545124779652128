//! Which Pods go first when there are too many, in the order the ReplicaSet
//! controller uses (pkg/controller/controller_utils.go, ActivePodsWithRanks):
//!
//! 1. unscheduled before scheduled;
//! 2. Pending before Unknown before Running;
//! 3. not ready before ready;
//! 4. lower `controller.kubernetes.io/pod-deletion-cost` first;
//! 5. more Pods of the same owner on the same node first (spreads what is left);
//! 6. ready for a shorter time first;
//! 7. more container restarts first;
//! 8. newer first.
//!
//! Ties end on the name, so the order is total and repeatable.

use std::cmp::Ordering;
use std::collections::HashMap;

use crate::podset::ObservedPod;

/// Sorts `pods` so that the first one is the first to delete.
pub fn sort_for_deletion(pods: &mut [&ObservedPod]) {
    let mut per_node: HashMap<&str, usize> = HashMap::new();
    for p in pods.iter() {
        if let Some(node) = p.node.as_deref() {
            *per_node.entry(node).or_default() += 1;
        }
    }
    let colocated = |p: &ObservedPod| {
        p.node
            .as_deref()
            .and_then(|n| per_node.get(n))
            .copied()
            .unwrap_or(0)
    };
    pods.sort_by(|a, b| compare(a, b, colocated(a), colocated(b)));
}

fn compare(a: &ObservedPod, b: &ObservedPod, a_colocated: usize, b_colocated: usize) -> Ordering {
    // `false` sorts before `true`, so each key is "keep-worthiness".
    a.node
        .is_some()
        .cmp(&b.node.is_some())
        .then_with(|| a.phase.cmp(&b.phase))
        .then_with(|| a.is_ready().cmp(&b.is_ready()))
        .then_with(|| a.deletion_cost.cmp(&b.deletion_cost))
        .then_with(|| b_colocated.cmp(&a_colocated))
        // Ready more recently (a later timestamp) goes first.
        .then_with(|| b.ready_since.cmp(&a.ready_since))
        .then_with(|| b.restarts.cmp(&a.restarts))
        .then_with(|| b.created.cmp(&a.created))
        .then_with(|| a.name.cmp(&b.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podset::pods::Phase;
    use crate::podset::pods::test_support::{pending, pod};
    use k8s_openapi::jiff::Timestamp;
    use proptest::prelude::*;

    fn order(pods: &[ObservedPod]) -> Vec<String> {
        let mut refs: Vec<&ObservedPod> = pods.iter().collect();
        sort_for_deletion(&mut refs);
        refs.iter().map(|p| p.name.clone()).collect()
    }

    #[test]
    fn follows_the_replicaset_order() {
        let unscheduled = pending("unscheduled", "h", 1);
        let mut scheduled_pending = pending("scheduled-pending", "h", 1);
        scheduled_pending.node = Some("n1".into());
        let mut not_ready = pod("not-ready", "h", 1);
        not_ready.ready_since = None;
        let mut cheap = pod("cheap", "h", 1);
        cheap.deletion_cost = -10;
        let old = pod("old", "h", 1);
        let mut newer = pod("newer", "h", 50);
        newer.ready_since = old.ready_since;
        let input = vec![old, newer, cheap, not_ready, scheduled_pending, unscheduled];
        assert_eq!(
            order(&input),
            [
                "unscheduled",
                "scheduled-pending",
                "not-ready",
                "cheap",
                "newer",
                "old"
            ]
        );
    }

    #[test]
    fn prefers_crowded_nodes_then_recently_ready_then_restarts() {
        let mut a = pod("a", "h", 1);
        a.node = Some("busy".into());
        let mut b = pod("b", "h", 1);
        b.node = Some("busy".into());
        let mut c = pod("c", "h", 1);
        c.node = Some("quiet".into());
        // a and b share a node: one of them goes before c.
        assert_eq!(order(&[c.clone(), a.clone(), b.clone()])[0], "a");

        let mut recent = pod("recent", "h", 1);
        recent.ready_since = Some(Timestamp::from_second(100).unwrap());
        recent.node = Some("x".into());
        let mut long = pod("long", "h", 1);
        long.node = Some("y".into());
        assert_eq!(order(&[long.clone(), recent]), ["recent", "long"]);

        let mut flaky = pod("flaky", "h", 1);
        flaky.restarts = 3;
        flaky.node = Some("z".into());
        assert_eq!(order(&[long, flaky]), ["flaky", "long"]);
    }

    fn arb_pod() -> impl Strategy<Value = ObservedPod> {
        (
            "[a-z]{1,6}",
            any::<bool>(),
            0u8..3,
            any::<bool>(),
            -3i32..3,
            0i64..100,
            0i32..3,
        )
            .prop_map(|(name, scheduled, phase, ready, cost, created, restarts)| {
                let mut p = pod(&name, "h", created);
                p.node = scheduled.then(|| format!("n{}", created % 3));
                p.phase = [Phase::Pending, Phase::Unknown, Phase::Running][phase as usize];
                p.ready_since = ready.then(|| Timestamp::from_second(created).unwrap());
                p.deletion_cost = cost;
                p.restarts = restarts;
                p
            })
    }

    proptest! {
        /// Whatever the input order, the result is the same, and an
        /// unscheduled Pod never follows a scheduled one.
        #[test]
        fn order_is_total_and_puts_unscheduled_first(mut pods in proptest::collection::vec(arb_pod(), 0..12)) {
            pods.sort_by(|a, b| a.name.cmp(&b.name));
            pods.dedup_by(|a, b| a.name == b.name);
            let forward = order(&pods);
            pods.reverse();
            prop_assert_eq!(&forward, &order(&pods));
            let by_name: HashMap<_, _> = pods.iter().map(|p| (p.name.clone(), p)).collect();
            let first_scheduled = forward.iter().position(|n| by_name[n].node.is_some()).unwrap_or(forward.len());
            prop_assert!(forward[first_scheduled..].iter().all(|n| by_name[n].node.is_some()));
        }
    }
}
