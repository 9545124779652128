//! Voluntary disruptions of a Redis (`kubectl drain`, node upgrades,
//! autoscalers): the PodDisruptionBudgets that pace them; the members on
//! cordoned nodes, which replication treats as retiring so that a primary
//! there is switched over before a drain evicts it; and members stranded
//! by a local volume on a cordoned or deleted node ([`stranded`]), whose
//! claim is replaced so that they start elsewhere and resync from the
//! primary. Pure; the caches and the writes are in [`crate::redis::hooks`].
//!
//! Two budgets per Redis, over disjoint sets of Pods (the eviction API
//! refuses to evict a Pod that more than one budget selects):
//!
//! - `<name>`: the members labelled replica, `minAvailable: replicas - 2`
//!   (at least 0; `replicas - 1` while no primary is known, when every
//!   member is labelled replica): one replica down at a time.
//! - `<name>-primary` (two members or more): the member labelled primary,
//!   `minAvailable: 1`: the eviction API refuses to evict the primary
//!   (`kubectl drain` retries every 5 s). `kubectl drain` cordons the node
//!   first; the operator sees the cordon and hands the role over with
//!   `FAILOVER` (a planned switchover's write pause), the labels move, and
//!   the next eviction takes a replica.
//!
//! Together: one member down at a time, never the primary first. Every Pod
//! carries a role label from its creation (`replica`).
//!
//! Counts, not `maxUnavailable`: with `maxUnavailable` the disruption
//! controller reads the expected number of Pods from their owner's `scale`
//! subresource, which fails while its discovery does not know the Redis
//! kind yet (seen on a fresh control plane: `SyncFailed`, every eviction
//! refused); with an integer `minAvailable` it counts the Pods it selects.
//! The budgets follow `spec.replicas`.
//!
//! A single member has no one to hand over to: no primary budget, so a
//! drain evicts it (and its Pod comes back where its claim allows). Both
//! budgets let an unhealthy Pod be evicted (`unhealthyPodEvictionPolicy:
//! AlwaysAllow`): a member that is not Ready serves no one, and a drain
//! should not wait for it.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod};
use k8s_openapi::api::policy::v1::{PodDisruptionBudget, PodDisruptionBudgetSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::api::Redis;
use crate::api::names::{CLAIM_LABEL, ROLE_LABEL};
use crate::redis::pod::selector_labels;
use crate::runtime::owner::Owner;

/// What the primary's budget adds to a Redis's name.
pub const PRIMARY_BUDGET_SUFFIX: &str = "-primary";

/// The budgets a Redis should have (see the module doc), with or without a
/// primary known. Pure.
pub fn desired_budgets(
    redis: &Redis,
    owner: &Owner,
    has_primary: bool,
) -> Vec<PodDisruptionBudget> {
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
    let with_role = |role: &str| {
        let mut labels = selector_labels(&name);
        labels.insert(ROLE_LABEL.into(), role.into());
        labels
    };
    let members = redis.spec.replicas.max(0);
    let replicas = if has_primary { members - 1 } else { members };
    let mut budgets = vec![budget(
        name.clone(),
        with_role("replica"),
        (replicas - 1).max(0),
    )];
    if members >= 2 {
        budgets.push(budget(
            format!("{name}{PRIMARY_BUDGET_SUFFIX}"),
            with_role("primary"),
            1,
        ));
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

/// The annotation the scheduler puts on a claim it chose a node for
/// (volumes provisioned on first use: local-path, TopoLVM, OpenEBS local):
/// the volume lives on that node.
pub const SELECTED_NODE_ANNOTATION: &str = "volume.kubernetes.io/selected-node";

/// A member that cannot start because its claim's volume is on a node that
/// is cordoned or gone.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stranded {
    pub pod: String,
    pub pod_uid: String,
    pub claim: String,
    pub claim_uid: String,
    pub node: String,
    /// The node is gone (else cordoned).
    pub node_gone: bool,
}

/// Members whose Pod the scheduler cannot place because their claim's
/// volume is on a cordoned or deleted node (a local volume: it cannot
/// follow the Pod). `keep` is the claim never given up (the recorded
/// primary's). Pure.
pub fn stranded(
    pods: &[Arc<Pod>],
    claims: &[Arc<PersistentVolumeClaim>],
    nodes: &[Arc<Node>],
    keep: Option<&str>,
) -> Vec<Stranded> {
    let cordoned = cordoned(nodes);
    let known: BTreeSet<String> = nodes.iter().map(|n| n.name_any()).collect();
    pods.iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && unschedulable(p))
        .filter_map(|p| {
            let claim = p.labels().get(CLAIM_LABEL)?;
            if Some(claim.as_str()) == keep {
                return None;
            }
            let c = claims.iter().find(|c| {
                c.name_any() == *claim
                    && c.namespace() == p.namespace()
                    && c.metadata.deletion_timestamp.is_none()
            })?;
            let node = c.annotations().get(SELECTED_NODE_ANNOTATION)?;
            let gone = !known.contains(node);
            (gone || cordoned.contains(node)).then(|| Stranded {
                pod: p.name_any(),
                pod_uid: p.uid().unwrap_or_default(),
                claim: claim.clone(),
                claim_uid: c.uid().unwrap_or_default(),
                node: node.clone(),
                node_gone: gone,
            })
        })
        .collect()
}

/// Not scheduled, and the scheduler said why (`PodScheduled` False,
/// `Unschedulable`).
fn unschedulable(p: &Pod) -> bool {
    let status = p.status.as_ref();
    status
        .and_then(|s| s.phase.as_deref())
        .is_none_or(|ph| ph == "Pending")
        && status
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .any(|c| {
                c.type_ == "PodScheduled"
                    && c.status == "False"
                    && c.reason.as_deref() == Some("Unschedulable")
            })
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

    fn spec_of(b: &PodDisruptionBudget) -> PodDisruptionBudgetSpec {
        b.spec.clone().unwrap()
    }

    #[test]
    fn one_replica_down_at_a_time_and_the_primary_only_after_a_switchover() {
        let r = redis(3);
        let owner = Owner::of(&r, "Redis");
        let b = desired_budgets(&r, &owner, true);
        let names: Vec<_> = b.iter().map(|b| b.name_any()).collect();
        assert_eq!(names, ["cache", "cache-primary"]);
        let spec = |i: usize| b[i].spec.clone().unwrap();
        assert_eq!(spec(0).min_available, Some(IntOrString::Int(1)));
        assert_eq!(spec(1).min_available, Some(IntOrString::Int(1)));
        let sel = spec(1).selector.unwrap().match_labels.unwrap();
        assert_eq!(sel[ROLE_LABEL], "primary");
        assert_eq!(sel["app.kubernetes.io/instance"], "cache");
        // Disjoint: the eviction API refuses a Pod two budgets select.
        let replicas = spec(0).selector.unwrap().match_labels.unwrap();
        assert_eq!(replicas[ROLE_LABEL], "replica");
        // No primary yet: every member is labelled replica.
        let none = desired_budgets(&r, &owner, false);
        assert_eq!(spec_of(&none[0]).min_available, Some(IntOrString::Int(2)));
        assert_eq!(b[0].owner_references()[0].uid, "u1");
        assert!(budget_in_sync(&b[0], &b[0].clone()));
        assert!(!budget_in_sync(&b[0], &b[1]));
    }

    #[test]
    fn a_single_member_can_always_be_drained() {
        let r = redis(1);
        let b = desired_budgets(&r, &Owner::of(&r, "Redis"), true);
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

    fn pending_on(name: &str, claim: &str, unschedulable: bool) -> Arc<Pod> {
        use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(format!("uid-{name}")),
                labels: Some([(CLAIM_LABEL.to_string(), claim.to_string())].into()),
                ..Default::default()
            },
            spec: Some(PodSpec::default()),
            status: Some(PodStatus {
                phase: Some("Pending".into()),
                conditions: Some(vec![PodCondition {
                    type_: "PodScheduled".into(),
                    status: if unschedulable { "False" } else { "True" }.into(),
                    reason: unschedulable.then(|| "Unschedulable".to_string()),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        })
    }

    fn claim_on(name: &str, node: Option<&str>) -> Arc<PersistentVolumeClaim> {
        Arc::new(PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("ns".into()),
                uid: Some(format!("uid-{name}")),
                annotations: node
                    .map(|n| [(SELECTED_NODE_ANNOTATION.to_string(), n.to_string())].into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    fn node(name: &str, unschedulable: bool) -> Arc<Node> {
        Arc::new(Node {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(NodeSpec {
                unschedulable: Some(unschedulable),
                ..Default::default()
            }),
            status: None,
        })
    }

    #[test]
    fn a_member_whose_local_volume_is_on_a_cordoned_or_gone_node_is_stranded() {
        let nodes = [node("n1", true), node("n2", false)];
        let claims = [
            claim_on("c1", Some("n1")),
            claim_on("c2", Some("n2")),
            claim_on("c3", Some("n3")),
            claim_on("c4", None),
        ];
        let pods = [
            pending_on("a", "c1", true),
            pending_on("b", "c2", true),
            pending_on("c", "c3", true),
            pending_on("d", "c4", true),
            pending_on("e", "c1", false),
        ];
        let s = stranded(&pods, &claims, &nodes, None);
        let got: Vec<_> = s
            .iter()
            .map(|s| (s.pod.as_str(), s.node.as_str(), s.node_gone))
            .collect();
        // a: cordoned node; c: node gone; b: node fine; d: no node known;
        // e: not refused by the scheduler (yet).
        assert_eq!(got, [("a", "n1", false), ("c", "n3", true)]);
        assert_eq!(s[0].claim_uid, "uid-c1");
        // The primary's claim is never given up.
        let s = stranded(&pods, &claims, &nodes, Some("c1"));
        assert_eq!(s.iter().map(|s| s.pod.as_str()).collect::<Vec<_>>(), ["c"]);
    }
}
