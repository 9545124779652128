//! Pods that are simulated: on the local control plane (`podkeeper-dev
//! dev` without a Docker engine, and the tests) kwok plays the kubelet, so
//! a Redis's Pods are scheduled, Running and Ready, but no redis-server runs
//! in them: no member ever answers, and there is no primary. The status says
//! so, instead of a bare `NoPrimary`: the Replicated and Ready conditions
//! take the reason [`REASON`] with a message that says how to get real
//! Pods (`kubectl get redis` shows it under STATUS). No Event: a dev
//! cluster's every Redis would write one, and the status says it already.
//!
//! The local control plane's kwok stages
//! (`dev/src/localcluster/kwok-stages.yaml`) mark every Pod they run with
//! the Pod condition [`POD_CONDITION`]; the operator reads it from the Pods
//! it watches anyway (no other object, no other permission).

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;

use crate::api::redis::MemberStatus;

/// The Pod condition (status `True`) that kwok's stages set on the Pods
/// they run: no container runs in such a Pod.
pub const POD_CONDITION: &str = "kwok.podkeeper.dev/Simulated";
/// The reason of the Replicated and Ready conditions while every member
/// is simulated.
pub const REASON: &str = "Simulated";
/// What the condition says.
pub const MESSAGE: &str = "the Pods run on kwok nodes, which simulate Pods without running their \
    containers: no redis-server answers, so there is no primary. For a Redis that serves, run \
    it on a cluster with real containers: in podkeeper's repository, `cargo run -- dev --kind` \
    with a Docker engine running (`.ci/docker-engine.sh` starts one)";

/// kwok runs this Pod: it carries [`POD_CONDITION`], True.
pub fn is_simulated(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_deref())
        .unwrap_or_default()
        .iter()
        .any(|c| c.type_ == POD_CONDITION && c.status == "True")
}

/// No node has started the Pod yet (it would not answer on any cluster).
fn not_started(pod: &Pod) -> bool {
    matches!(
        pod.status.as_ref().and_then(|s| s.phase.as_deref()),
        None | Some("Pending")
    )
}

/// The Replicated condition to show instead of the replication round's,
/// when no member answers and their Pods are simulated: every member is
/// unreachable, and each member's Pod is simulated or not started yet, at
/// least one simulated. `None` otherwise (a member answers, or a Pod runs
/// on a real node). Pure.
pub fn replicated_condition(
    pods: &[Arc<Pod>],
    members: &[MemberStatus],
) -> Option<(&'static str, &'static str, String)> {
    if members.is_empty() || members.iter().any(|m| m.link_status != "unreachable") {
        return None;
    }
    let mut simulated = 0;
    for member in members {
        let pod = pods.iter().find(|p| p.name_any() == member.pod)?;
        if is_simulated(pod) {
            simulated += 1;
        } else if !not_started(pod) {
            return None;
        }
    }
    (simulated > 0).then(|| ("False", REASON, MESSAGE.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{PodCondition, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(name: &str, phase: &str, simulated: Option<&str>) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: None,
            status: Some(PodStatus {
                phase: Some(phase.into()),
                conditions: simulated.map(|status| {
                    vec![
                        PodCondition {
                            type_: "Ready".into(),
                            status: "True".into(),
                            ..Default::default()
                        },
                        PodCondition {
                            type_: POD_CONDITION.into(),
                            status: status.into(),
                            ..Default::default()
                        },
                    ]
                }),
                ..Default::default()
            }),
        })
    }

    fn member(pod: &str, link: &str) -> MemberStatus {
        MemberStatus {
            pod: pod.into(),
            role: if link == "unreachable" {
                "unknown"
            } else {
                "replica"
            }
            .into(),
            link_status: link.into(),
        }
    }

    #[test]
    fn simulated_when_no_member_answers_and_their_pods_run_on_kwok() {
        let kwok = vec![
            pod("r-a", "Running", Some("True")),
            pod("r-b", "Running", Some("True")),
            pod("r-c", "Pending", None),
        ];
        let unreachable: Vec<MemberStatus> = ["r-a", "r-b", "r-c"]
            .iter()
            .map(|p| member(p, "unreachable"))
            .collect();
        let (status, reason, message) = replicated_condition(&kwok, &unreachable).unwrap();
        assert_eq!((status, reason), ("False", "Simulated"));
        assert!(
            message.contains("simulate") && message.contains("cargo run -- dev --kind"),
            "{message}"
        );

        // A member answers: replication speaks for itself.
        let mut answering = unreachable.clone();
        answering[1] = member("r-b", "up");
        assert_eq!(replicated_condition(&kwok, &answering), None);
        // A Pod that runs on a real node (no mark, or not True) and does
        // not answer is a real failure, not a simulation.
        for real in [
            pod("r-c", "Running", None),
            pod("r-c", "Running", Some("False")),
        ] {
            let mixed = vec![kwok[0].clone(), kwok[1].clone(), real];
            assert_eq!(replicated_condition(&mixed, &unreachable), None);
        }
        // Nothing started yet, or no members: nothing to tell.
        let pending = vec![pod("r-c", "Pending", None)];
        assert_eq!(
            replicated_condition(&pending, &unreachable[2..]),
            None,
            "no Pod is simulated yet"
        );
        assert_eq!(replicated_condition(&kwok, &[]), None);
        // A member whose Pod is not among the Pods: not known to be simulated.
        assert_eq!(replicated_condition(&kwok[..1], &unreachable[..2]), None);
    }
}
