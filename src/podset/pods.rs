//! Observed Pods as plain values, so that planning and ranking are pure.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;

use crate::api::names::RESIZE_REFUSED_ANNOTATION;
use crate::api::names::{CLAIM_LABEL, DELETION_COST_ANNOTATION, TEMPLATE_HASH_LABEL};
use crate::podset::inplace;
use crate::podset::revision::InPlaceKeys;

/// The Pod's Ready condition is True (as the kubelet last reported it).
pub fn pod_is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// What an in-place update must keep of a Pod: its name, UID, IP and node.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct PodIdentity {
    pub name: String,
    pub uid: String,
    pub ip: String,
    pub node: String,
}

impl PodIdentity {
    pub fn of(p: &Pod) -> PodIdentity {
        PodIdentity {
            name: p.metadata.name.clone().unwrap_or_default(),
            uid: p.metadata.uid.clone().unwrap_or_default(),
            ip: p
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.clone())
                .unwrap_or_default(),
            node: p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default(),
        }
    }

    /// The identities of `pods`, sorted by name.
    pub fn of_all(pods: &[Pod]) -> Vec<PodIdentity> {
        let mut v: Vec<PodIdentity> = pods.iter().map(PodIdentity::of).collect();
        v.sort();
        v
    }
}

/// A Pod's phase, in the order the ReplicaSet controller prefers to delete.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    Pending,
    Unknown,
    Running,
    Succeeded,
    Failed,
}

/// What the engine needs to know about one Pod.
#[derive(Clone, Debug, PartialEq)]
pub struct ObservedPod {
    pub name: String,
    pub uid: String,
    /// The template hash label, if any.
    pub revision: Option<String>,
    pub phase: Phase,
    /// Bound to a node.
    pub node: Option<String>,
    /// When the Ready condition last turned True, if it is True now.
    pub ready_since: Option<Timestamp>,
    pub deletion_cost: i32,
    pub created: Timestamp,
    /// Has a deletionTimestamp.
    pub terminating: bool,
    pub restarts: i32,
    /// Its in-place keys, if it has them (see [`crate::podset::inplace`]).
    pub in_place: Option<InPlaceKeys>,
    /// The revision for which the API server refused to resize it.
    pub resize_refused: Option<String>,
    /// The kubelet reported its resize infeasible: it must be replaced.
    pub resize_infeasible: bool,
    /// The PersistentVolumeClaim it keeps its data on, if any
    /// ([`crate::api::names::CLAIM_LABEL`]).
    pub claim: Option<String>,
}

impl ObservedPod {
    /// Counts towards the replicas: neither terminating nor finished.
    pub fn is_active(&self) -> bool {
        !self.terminating && !matches!(self.phase, Phase::Succeeded | Phase::Failed)
    }

    /// Succeeded or Failed: it will not run again.
    pub fn is_finished(&self) -> bool {
        matches!(self.phase, Phase::Succeeded | Phase::Failed)
    }

    pub fn is_ready(&self) -> bool {
        self.ready_since.is_some()
    }

    /// Ready for at least `min_ready_seconds` at `now`.
    pub fn is_available(&self, min_ready_seconds: i64, now: Timestamp) -> bool {
        match self.ready_since {
            Some(since) => {
                min_ready_seconds <= 0 || now.as_second() - since.as_second() >= min_ready_seconds
            }
            None => false,
        }
    }

    /// Reads the fields the engine uses. A Pod without a name or uid (which
    /// the API server never returns) yields `None`.
    pub fn from_pod(pod: &Pod) -> Option<Self> {
        let meta = &pod.metadata;
        let status = pod.status.as_ref();
        let phase = match status.and_then(|s| s.phase.as_deref()) {
            Some("Running") => Phase::Running,
            Some("Succeeded") => Phase::Succeeded,
            Some("Failed") => Phase::Failed,
            Some("Pending") | None => Phase::Pending,
            Some(_) => Phase::Unknown,
        };
        let revision = meta
            .labels
            .as_ref()
            .and_then(|l| l.get(TEMPLATE_HASH_LABEL))
            .cloned();
        // Updated in place to its current revision and not done yet: not
        // Ready, whatever its condition says (the kubelet may not have
        // restarted the container yet).
        let updating = revision.is_some()
            && inplace::updated_in_place(pod) == revision.as_deref()
            && !inplace::settled(pod);
        let ready_since = status
            .and_then(|s| s.conditions.as_ref())
            .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
            .filter(|c| c.status == "True" && !updating)
            .map(|c| {
                c.last_transition_time
                    .as_ref()
                    .map(|t| t.0)
                    .unwrap_or_default()
            });
        let restarts = status
            .and_then(|s| s.container_statuses.as_ref())
            .map(|cs| cs.iter().map(|c| c.restart_count).sum())
            .unwrap_or(0);
        Some(ObservedPod {
            name: meta.name.clone()?,
            uid: meta.uid.clone()?,
            revision,
            phase,
            node: pod
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .filter(|n| !n.is_empty()),
            ready_since,
            deletion_cost: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(DELETION_COST_ANNOTATION))
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            created: meta
                .creation_timestamp
                .as_ref()
                .map(|t| t.0)
                .unwrap_or_default(),
            terminating: meta.deletion_timestamp.is_some(),
            restarts,
            in_place: InPlaceKeys::read(meta.annotations.as_ref()),
            resize_refused: meta
                .annotations
                .as_ref()
                .and_then(|a| a.get(RESIZE_REFUSED_ANNOTATION))
                .cloned(),
            resize_infeasible: inplace::resize_infeasible(pod),
            claim: meta
                .labels
                .as_ref()
                .and_then(|l| l.get(CLAIM_LABEL))
                .cloned(),
        })
    }
}

#[cfg(test)]
pub(crate) mod test_support {
    use super::*;

    /// A running, ready, scheduled Pod of revision `rev` created at second
    /// `created` and ready since then.
    pub fn pod(name: &str, rev: &str, created: i64) -> ObservedPod {
        ObservedPod {
            name: name.into(),
            uid: format!("uid-{name}"),
            revision: Some(rev.into()),
            phase: Phase::Running,
            node: Some("node-a".into()),
            ready_since: Some(Timestamp::from_second(created).unwrap()),
            deletion_cost: 0,
            created: Timestamp::from_second(created).unwrap(),
            terminating: false,
            restarts: 0,
            in_place: None,
            resize_refused: None,
            resize_infeasible: false,
            claim: None,
        }
    }

    pub fn pending(name: &str, rev: &str, created: i64) -> ObservedPod {
        ObservedPod {
            phase: Phase::Pending,
            ready_since: None,
            node: None,
            ..pod(name, rev, created)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    #[test]
    fn reads_a_ready_pod() {
        let t = Timestamp::from_second(1_000).unwrap();
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("a".into()),
                uid: Some("u".into()),
                labels: Some([(TEMPLATE_HASH_LABEL.to_string(), "h1".to_string())].into()),
                annotations: Some(
                    [(DELETION_COST_ANNOTATION.to_string(), "-5".to_string())].into(),
                ),
                creation_timestamp: Some(Time(t)),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some("n1".into()),
                ..Default::default()
            }),
            status: Some(PodStatus {
                phase: Some("Running".into()),
                conditions: Some(vec![PodCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    last_transition_time: Some(Time(t)),
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        };
        let o = ObservedPod::from_pod(&pod).unwrap();
        assert_eq!(o.revision.as_deref(), Some("h1"));
        assert_eq!(o.deletion_cost, -5);
        assert_eq!(o.phase, Phase::Running);
        assert!(o.is_active() && o.is_ready());
        assert!(!o.is_available(10, Timestamp::from_second(1_005).unwrap()));
        assert!(o.is_available(10, Timestamp::from_second(1_010).unwrap()));
    }

    #[test]
    fn finished_and_terminating_pods_are_not_active() {
        let mut p = test_support::pod("a", "h", 1);
        p.phase = Phase::Failed;
        assert!(!p.is_active());
        let mut p = test_support::pod("a", "h", 1);
        p.terminating = true;
        assert!(!p.is_active());
    }
}
