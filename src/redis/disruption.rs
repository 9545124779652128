//! Voluntary disruptions of a Redis (`kubectl drain`, node upgrades,
//! autoscalers): the PodDisruptionBudgets that pace them, and the members
//! on cordoned nodes, which replication treats as retiring so that a
//! primary there is switched over before a drain evicts it. Pure; the
//! caches and the writes are in [`crate::redis::hooks`].
//!
//! Two budgets per Redis of two members or more:
//!
//! - `<name>`: every member, `minAvailable: replicas - 1`: one member
//!   down at a time, so a drain never takes the primary and a replica
//!   together.
//! - `<name>-primary`: the member labelled primary, `minAvailable: 1`:
//!   the eviction API refuses to evict the primary (`kubectl drain` retries
//!   every 5 s). `kubectl drain` cordons the node first; the operator sees
//!   the cordon and hands the role over with `FAILOVER` (a planned
//!   switchover's write pause), the label moves, and the next eviction
//!   takes a replica.
//!
//! Counts, not `maxUnavailable`: with `maxUnavailable` the disruption
//! controller reads the expected number of Pods from their owner's `scale`
//! subresource, which fails while its discovery does not know the Redis
//! kind yet (seen on a fresh control plane: `SyncFailed`, every eviction
//! refused); with an integer `minAvailable` it counts the Pods it selects.
//! The budget follows `spec.replicas`.
//!
//! A single member has no one to hand over to: only the first budget
//! (`minAvailable: 0`), so a drain evicts it (and its Pod comes back where
//! its claim allows). Both
//! budgets let an unhealthy Pod be evicted (`unhealthyPodEvictionPolicy:
//! AlwaysAllow`): a member that is not Ready serves no one, and a drain
//! should not wait for it.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::api::Redis;
use crate::api::names::ROLE_LABEL;
use crate::redis::pod::selector_labels;
use crate::runtime::owner::Owner;

/// What the primary's budget adds to a Redis's name.
pub const PRIMARY_BUDGET_SUFFIX: &str = "-primary";

/// The budgets a Redis should have (see the module doc). Pure.
pub fn desired_budgets(redis: &Redis, owner: &Owner) -> Vec<PodDisruptionBudget> {
    let name = redis.name_any();
    let budget = |name: String, labels, min_available| PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(owner.namespace.clone()),
            labels: Some(selector_labels(&redis.name_any())),
            owner_references: Some(vec![owner.reference.clone()]),
            ..Default::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            min_available: Some(IntOrString::Int(min_available)),
            selector: Some(LabelSelector {
                match_labels: Some(labels),
                match_expressions: None,
            }),
            unhealthy_pod_eviction_policy: Some("AlwaysAllow".into()),
            max_unavailable: None,
        }),
        status: None,
    };
    let members = redis.spec.replicas.max(0);
    let mut budgets = vec![budget(
        name.clone(),
        selector_labels(&name),
        (members - 1).max(0),
    )];
    if redis.spec.replicas >= 2 {
        let mut primary = selector_labels(&name);
        primary.insert(ROLE_LABEL.into(), "primary".into());
        budgets.push(budget(format!("{name}{PRIMARY_BUDGET_SUFFIX}"), primary, 1));
    }
    budgets
}

/// The names of every budget a Redis may have, wanted now or not.
pub fn budget_names(redis: &Redis) -> [String; 2] {
    let name = redis.name_any();
    [name.clone(), format!("{name}{PRIMARY_BUDGET_SUFFIX}")]
}

/// A live budget already says what `want` says (the fields podkeeper sets).
pub fn budget_in_sync(want: &PodDisruptionBudget, live: &PodDisruptionBudget) -> bool {
    want.spec == live.spec
        && live
            .owner_references()
            .iter()
            .any(|r| want.owner_references().iter().any(|w| w.uid == r.uid))
}

/// The members on a cordoned node (`spec.unschedulable`, as `kubectl
/// cordon` and `kubectl drain` set it). Pure.
pub fn on_cordoned_nodes(pods: &[Arc<Pod>], cordoned: &BTreeSet<String>) -> Vec<String> {
    pods.iter()
        .filter(|p| {
            p.spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_some_and(|n| cordoned.contains(n))
        })
        .map(|p| p.name_any())
        .collect()
}

/// The names of the cordoned nodes among `nodes`.
pub fn cordoned(nodes: &[Arc<Node>]) -> BTreeSet<String> {
    nodes
        .iter()
        .filter(|n| n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true))
        .map(|n| n.name_any())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{NodeSpec, PodSpec};
    use serde_json::json;

    fn redis(replicas: i32) -> Redis {
        let mut r: Redis = serde_json::from_value(json!({
            "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
            "metadata": {"name": "cache", "namespace": "ns", "uid": "u1"},
            "spec": {"replicas": replicas},
        }))
        .unwrap();
        r.metadata.generation = Some(1);
        r
    }

    #[test]
    fn one_member_down_at_a_time_and_the_primary_only_after_a_switchover() {
        let r = redis(3);
        let owner = Owner::of(&r, "Redis");
        let b = desired_budgets(&r, &owner);
        let names: Vec<_> = b.iter().map(|b| b.name_any()).collect();
        assert_eq!(names, ["cache", "cache-primary"]);
        let spec = |i: usize| b[i].spec.clone().unwrap();
        assert_eq!(spec(0).min_available, Some(IntOrString::Int(2)));
        assert_eq!(spec(1).min_available, Some(IntOrString::Int(1)));
        let sel = spec(1).selector.unwrap().match_labels.unwrap();
        assert_eq!(sel[ROLE_LABEL], "primary");
        assert_eq!(sel["app.kubernetes.io/instance"], "cache");
        assert!(
            !spec(0)
                .selector
                .unwrap()
                .match_labels
                .unwrap()
                .contains_key(ROLE_LABEL)
        );
        assert_eq!(b[0].owner_references()[0].uid, "u1");
        assert!(budget_in_sync(&b[0], &b[0].clone()));
        assert!(!budget_in_sync(&b[0], &b[1]));
    }

    #[test]
    fn a_single_member_can_always_be_drained() {
        let r = redis(1);
        let b = desired_budgets(&r, &Owner::of(&r, "Redis"));
        assert_eq!(b.len(), 1, "no primary budget: no one to hand over to");
        let spec = b[0].spec.clone().unwrap();
        assert_eq!(spec.min_available, Some(IntOrString::Int(0)));
        assert_eq!(budget_names(&r), ["cache", "cache-primary"]);
    }

    #[test]
    fn members_on_cordoned_nodes_are_found() {
        let node = |name: &str, unschedulable: Option<bool>| {
            Arc::new(Node {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    ..Default::default()
                },
                spec: Some(NodeSpec {
                    unschedulable,
                    ..Default::default()
                }),
                status: None,
            })
        };
        let nodes = [
            node("n1", Some(true)),
            node("n2", Some(false)),
            node("n3", None),
        ];
        let c = cordoned(&nodes);
        assert_eq!(c, BTreeSet::from(["n1".to_string()]));
        let pod = |name: &str, node: Option<&str>| {
            Arc::new(Pod {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    ..Default::default()
                },
                spec: Some(PodSpec {
                    node_name: node.map(str::to_string),
                    ..Default::default()
                }),
                status: None,
            })
        };
        let pods = [pod("a", Some("n1")), pod("b", Some("n2")), pod("c", None)];
        assert_eq!(on_cordoned_nodes(&pods, &c), ["a"]);
    }
}
