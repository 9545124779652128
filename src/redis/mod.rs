//! Redis as a [`PodSet`]: its Pod template, its rollout strategy and its
//! status, all pure; the generic reconciler in [`crate::podset::reconcile`] does the
//! rest.

pub mod hooks;
pub mod replication;
pub mod simulated;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, PodSecurityContext, PodSpec,
    PodTemplateSpec, SeccompProfile, SecurityContext, Service, ServicePort, ServiceSpec,
    TopologySpreadConstraint, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::api::replication::{
    REPLICATED_CONDITION, ROLE_LABEL, primary_service_name, replicas_service_name,
};
use crate::api::{Redis, RedisStatus};
use crate::podset::ObservedPod;
use crate::podset::executor::Owner;
use crate::podset::inplace::InPlaceKeys;
use crate::podset::plan::{DeleteReason, Desired, InPlace, Plan, Strategy, Update, victim};
use crate::podset::rank::sort_for_deletion;
use crate::podset::reconcile::{PodSet, PodSetSpec, Report};
use crate::podset::revision::{revision_of, stamp};
use crate::redis::hooks::{Replication, ReplicationExtras};
use crate::redis::replication::config::{config_args, server_command};
use crate::runtime::conditions::{self, Cond, truth};
use crate::runtime::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};

pub const CONTROLLER: &str = "redis";
const KIND: &str = "Redis";
pub const NAME_LABEL: &str = "app.kubernetes.io/name";
pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// Uid and gid of the redis user in the official image.
const REDIS_UID: i64 = 999;

/// Redis rolls one Pod at a time and replaces a Pod only once its
/// successor is Ready.
const ROLLOUT: Strategy = Strategy::RollingUpdate {
    max_surge: 1,
    max_unavailable: 0,
};

/// An image or resources change is applied in place, one Pod at a time:
/// the updating Pod (a replica, or the old primary after its handover) is
/// the one unavailable Pod. A single-Pod Redis has no replica to hand over
/// to, so it is always replaced (its successor syncs first).
const IN_PLACE_UNAVAILABLE: i32 = 1;

/// The labels that select a Redis's Pods.
pub fn selector_labels(name: &str) -> BTreeMap<String, String> {
    [
        (NAME_LABEL.to_string(), "redis".to_string()),
        (INSTANCE_LABEL.to_string(), name.to_string()),
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string()),
    ]
    .into()
}

/// The selector in string form, for status.selector and `kubectl scale`.
pub fn selector_string(name: &str) -> String {
    selector_labels(name)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The redis-server command and arguments of a member: `spec.config`
/// (validated; `maxmemory` from the memory limit unless set), listening on
/// every address of the Pod (Debian's redis-server defaults to loopback
/// with protected mode), data in /data, and starting as a replica of the
/// placeholder (see [`crate::redis::replication`]). Pure.
pub fn server_args(redis: &Redis) -> Result<(Vec<String>, Vec<String>), String> {
    let spec = &redis.spec;
    let memory_limit = spec
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("memory"));
    let mut args: Vec<String> = ["--bind", "*", "-::*", "--dir", "/data"]
        .iter()
        .map(|a| a.to_string())
        .collect();
    args.extend(config_args(&spec.config, memory_limit).map_err(|e| e.to_string())?);
    let port =
        u16::try_from(spec.port).map_err(|_| format!("spec.port {} out of range", spec.port))?;
    Ok(server_command(port, &args, spec.auth.is_some()))
}

/// Spread the members over nodes (at most one more on any node than on
/// another, counting only nodes the Pods may run on) and, where nodes have
/// zones, over zones as far as the scheduler can.
fn spread(name: &str) -> Vec<TopologySpreadConstraint> {
    let selector = LabelSelector {
        match_labels: Some(selector_labels(name)),
        ..Default::default()
    };
    [
        ("kubernetes.io/hostname", "DoNotSchedule"),
        ("topology.kubernetes.io/zone", "ScheduleAnyway"),
    ]
    .into_iter()
    .map(|(key, when)| TopologySpreadConstraint {
        label_selector: Some(selector.clone()),
        max_skew: 1,
        topology_key: key.into(),
        when_unsatisfiable: when.into(),
        node_taints_policy: Some("Honor".into()),
        ..Default::default()
    })
    .collect()
}

/// The Pod template of a Redis, with its template hash label, or why
/// `spec.config` cannot work. Pure.
pub fn pod_template(redis: &Redis) -> Result<PodTemplateSpec, String> {
    let spec = &redis.spec;
    let port = spec.port;
    let (command, args) = server_args(redis)?;
    let env = spec
        .auth
        .as_ref()
        .map(|auth| vec![crate::redis::replication::objects::password_env(auth)]);
    let container = Container {
        name: "redis".into(),
        image: Some(spec.image.clone()),
        image_pull_policy: Some(spec.image_pull_policy.as_str().into()),
        command: Some(command),
        args: Some(args),
        env,
        ports: Some(vec![ContainerPort {
            name: Some("redis".into()),
            container_port: port,
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        readiness_probe: Some(crate::redis::replication::objects::readiness_probe(
            u16::try_from(port).unwrap_or(6379),
            spec.auth.is_some(),
        )),
        resources: spec.resources.clone(),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                add: None,
            }),
            ..Default::default()
        }),
        volume_mounts: Some(vec![VolumeMount {
            name: "data".into(),
            mount_path: "/data".into(),
            ..Default::default()
        }]),
        ..Default::default()
    };
    let pod_spec = PodSpec {
        containers: vec![container],
        topology_spread_constraints: Some(spread(&redis.name_any())),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(REDIS_UID),
            run_as_group: Some(REDIS_UID),
            fs_group: Some(REDIS_UID),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            }),
            ..Default::default()
        }),
        volumes: Some(vec![Volume {
            name: "data".into(),
            empty_dir: Some(EmptyDirVolumeSource::default()),
            ..Default::default()
        }]),
        ..Default::default()
    };
    // Every member starts as a replica (of the placeholder); the operator
    // moves the label of the one it makes primary.
    let mut labels = selector_labels(&redis.name_any());
    labels.insert(ROLE_LABEL.into(), "replica".into());
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels),
            ..Default::default()
        }),
        spec: Some(pod_spec),
    };
    Ok(stamp(template))
}

/// The names of a Redis's two Services, primary's first.
pub fn service_names(redis: &Redis) -> [String; 2] {
    let name = redis.name_any();
    [primary_service_name(&name), replicas_service_name(&name)]
}

/// The two Services of a Redis: `<name>` selects the primary (read-write),
/// `<name>-replicas` the replicas (read-only; Services send traffic to
/// ready Pods only). Owned by the Redis. Pure.
pub fn desired_services(redis: &Redis, owner: &Owner) -> Vec<Service> {
    let name = redis.name_any();
    service_names(redis)
        .into_iter()
        .zip(["primary", "replica"])
        .map(|(service, role)| {
            let mut selector = selector_labels(&name);
            selector.insert(ROLE_LABEL.into(), role.into());
            Service {
                metadata: ObjectMeta {
                    name: Some(service),
                    namespace: Some(owner.namespace.clone()),
                    labels: Some(
                        [
                            (MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string()),
                            (INSTANCE_LABEL.to_string(), name.clone()),
                            (NAME_LABEL.to_string(), "redis".to_string()),
                        ]
                        .into(),
                    ),
                    owner_references: Some(vec![owner.reference.clone()]),
                    ..Default::default()
                },
                spec: Some(ServiceSpec {
                    selector: Some(selector),
                    ports: Some(vec![ServicePort {
                        name: Some("redis".into()),
                        port: redis.spec.port,
                        target_port: Some(IntOrString::String("redis".into())),
                        protocol: Some("TCP".into()),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                status: None,
            }
        })
        .collect()
}

/// Keeps `primary` out of the engine's deletions. A scale-down takes the
/// next Pod in the engine's order instead; a rollout replaces the other
/// outdated Pods first (one in the same state, ready or not, so the
/// rollout's availability arithmetic holds). Returns `true` when the
/// primary is the one left to go: it is held back and must be handed over
/// first (it is "retiring"). Scaling to zero deletes it with the others.
/// Pure.
pub fn spare_primary(plan: &mut Plan, pods: &[ObservedPod], primary: &str, revision: &str) -> bool {
    let Some(i) = plan.delete.iter().position(|v| v.name == primary) else {
        return false;
    };
    let reason = plan.delete[i].reason;
    let the_primary = pods.iter().find(|p| p.name == primary);
    let deleted = |name: &str| plan.delete.iter().any(|v| v.name == name);
    let others: Vec<&ObservedPod> = pods
        .iter()
        .filter(|p| p.is_active() && p.name != primary)
        .collect();
    if reason == DeleteReason::ScaleDown && others.iter().all(|p| deleted(&p.name)) {
        // Nothing stays: scaling to zero.
        return false;
    }
    let mut candidates: Vec<&ObservedPod> = others
        .into_iter()
        .filter(|p| !deleted(&p.name))
        .filter(|p| {
            let current = p.revision.as_deref() == Some(revision);
            match reason {
                DeleteReason::ScaleDown => current,
                DeleteReason::Outdated | DeleteReason::ResizeInfeasible => !current,
                DeleteReason::Cleanup => false,
            }
        })
        .filter(|p| the_primary.is_none_or(|q| p.is_ready() == q.is_ready()))
        .collect();
    sort_for_deletion(&mut candidates);
    match candidates.first() {
        Some(c) => {
            plan.delete[i] = victim(c, reason);
            false
        }
        None => {
            plan.delete.remove(i);
            true
        }
    }
}

/// Keeps `primary` out of the engine's in-place updates, as
/// [`spare_primary`] does for deletions: another outdated Pod in the same
/// state that the planner would update in place goes instead. Returns
/// `true` when the primary is the one left to update: it is held back and
/// handed over first. Pure.
pub fn spare_primary_in_place(
    plan: &mut Plan,
    pods: &[ObservedPod],
    primary: &str,
    desired: &Desired,
) -> bool {
    let Some(i) = plan.in_place.iter().position(|u| u.name == primary) else {
        return false;
    };
    let the_primary = pods.iter().find(|p| p.name == primary);
    let taken = |name: &str| {
        plan.in_place.iter().any(|u| u.name == name) || plan.delete.iter().any(|v| v.name == name)
    };
    let mut candidates: Vec<&ObservedPod> = pods
        .iter()
        .filter(|p| p.is_active() && p.name != primary && !taken(&p.name))
        .filter(|p| p.revision.as_deref() != Some(desired.revision.as_str()))
        .filter(|p| the_primary.is_none_or(|q| p.is_ready() == q.is_ready()))
        .filter(|p| crate::podset::plan::in_place_change(desired, p).is_some())
        .collect();
    sort_for_deletion(&mut candidates);
    match candidates.first() {
        Some(c) => {
            plan.in_place[i] = Update {
                name: c.name.clone(),
                uid: c.uid.clone(),
                change: crate::podset::plan::in_place_change(desired, c)
                    .unwrap_or(crate::podset::inplace::Change::Images),
            };
            false
        }
        None => {
            plan.in_place.remove(i);
            true
        }
    }
}

/// The status a Redis should show. Pure.
pub fn desired_status(redis: &Redis, report: &Report<'_, Replication>) -> RedisStatus {
    let replicas = redis.spec.replicas.max(0);
    let plan = report.plan;
    let c = plan.counts;
    let previous = redis.status.clone().unwrap_or_default();
    let repl = report.extras;
    let all_ready = c.ready == replicas && c.updated == replicas && c.replicas == replicas;
    let replicated = match (report.invalid, &repl.condition) {
        (Some(message), _) => Cond {
            type_: REPLICATED_CONDITION,
            status: "False",
            reason: "InvalidSpec",
            message: message.to_string(),
        },
        (None, Some((ok, reason, message))) => Cond {
            type_: REPLICATED_CONDITION,
            status: truth(*ok),
            reason,
            message: message.clone(),
        },
        (None, None) => Cond {
            type_: REPLICATED_CONDITION,
            status: "Unknown",
            reason: "NotObserved",
            message: "replication has not been observed yet".into(),
        },
    };
    // Ready: a primary accepts writes and every replica is linked and
    // caught up (with no Pods asked for, there is nothing to replicate),
    // and the Services that clients use are there as wanted.
    let serving = replicas == 0 || replicated.status == "True";
    let services = repl.services_pending.is_empty();
    let ready = Cond {
        type_: "Ready",
        status: truth(all_ready && serving && services),
        reason: if !all_ready {
            "ReplicasNotReady"
        } else if !serving && replicated.reason == simulated::REASON {
            simulated::REASON
        } else if !serving {
            "NotReplicated"
        } else if !services {
            "ServicesPending"
        } else {
            "Replicated"
        },
        message: if all_ready && !serving {
            format!(
                "{} of {replicas} Pods ready; {}",
                c.ready, replicated.message
            )
        } else if all_ready && !services {
            format!(
                "{} of {replicas} Pods ready and replicated; Service {} not applied yet",
                c.ready,
                repl.services_pending.join(" and ")
            )
        } else {
            format!(
                "{} of {} replicas ready, {} on the current template",
                c.ready, replicas, c.updated
            )
        },
    };
    let progressing = if plan.complete {
        Cond {
            type_: "Progressing",
            status: "False",
            reason: "Complete",
            message: format!("{replicas} replicas on the current template"),
        }
    } else if plan.rolling {
        Cond {
            type_: "Progressing",
            status: "True",
            reason: "RollingUpdate",
            message: format!("{} of {} replicas updated", c.updated, replicas),
        }
    } else {
        Cond {
            type_: "Progressing",
            status: "True",
            reason: "Scaling",
            message: if c.replicas == replicas && c.terminating > 0 {
                format!(
                    "{replicas} replicas; waiting for {} terminating Pod(s) to go",
                    c.terminating
                )
            } else {
                format!("{} replicas, want {}", c.replicas, replicas)
            },
        }
    };
    let failure = match report.failure {
        Some(f) => Cond {
            type_: "ReplicaFailure",
            status: "True",
            reason: f.reason,
            message: f.message.clone(),
        },
        None => Cond {
            type_: "ReplicaFailure",
            status: "False",
            reason: "NoFailure",
            message: "the last Pod creates and deletes succeeded".into(),
        },
    };
    RedisStatus {
        replicas: c.replicas,
        ready_replicas: c.ready,
        updated_replicas: c.updated,
        observed_generation: redis.metadata.generation,
        selector: selector_string(&redis.name_any()),
        conditions: conditions::merge(
            &previous.conditions,
            vec![ready, progressing, failure, replicated],
            redis.metadata.generation,
            report.now,
        ),
        primary: repl.primary.clone(),
        members: repl.members.clone(),
    }
}

impl PodSet for Redis {
    const KIND: &'static str = KIND;
    type Status = RedisStatus;
    type Extras = ReplicationExtras;

    fn pod_set(&self) -> Result<PodSetSpec, String> {
        let template = pod_template(self)?;
        Ok(PodSetSpec {
            desired: Desired {
                replicas: self.spec.replicas,
                revision: revision_of(&template),
                strategy: ROLLOUT,
                min_ready_seconds: 0,
                paused: false,
                in_place: (self.spec.replicas >= 2).then(|| InPlace {
                    keys: InPlaceKeys::read(
                        template
                            .metadata
                            .as_ref()
                            .and_then(|m| m.annotations.as_ref()),
                    )
                    .unwrap_or_default(),
                    max_unavailable: IN_PLACE_UNAVAILABLE,
                    resize: true,
                }),
            },
            template,
        })
    }

    fn replicas(&self) -> i32 {
        self.spec.replicas
    }

    fn current_status(&self) -> Option<&RedisStatus> {
        self.status.as_ref()
    }

    fn desired_status(&self, report: &Report<'_, Replication>) -> (RedisStatus, Option<i64>) {
        (
            desired_status(self, report),
            report.extras.requeue_after_seconds,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::RedisSpec;
    use crate::api::redis::PrimaryStatus;
    use crate::api::redis::PullPolicy;
    use crate::podset::executor::Failure;
    use crate::podset::plan::plan;
    use k8s_openapi::jiff::Timestamp;

    fn report<'a>(
        p: &'a Plan,
        failure: Option<&'a Failure>,
        repl: &'a Replication,
        now: Timestamp,
    ) -> Report<'a, Replication> {
        Report {
            plan: p,
            failure,
            invalid: None,
            extras: repl,
            now,
        }
    }

    fn redis(port: i32, image: &str) -> Redis {
        let mut r = Redis::new(
            "cache",
            RedisSpec {
                replicas: 3,
                image: image.into(),
                port,
                resources: None,
                image_pull_policy: PullPolicy::IfNotPresent,
                auth: None,
                config: Default::default(),
                failover: Default::default(),
            },
        );
        r.metadata.namespace = Some("ns".into());
        r.metadata.generation = Some(2);
        r
    }

    fn tmpl(r: &Redis) -> PodTemplateSpec {
        pod_template(r).unwrap()
    }

    #[test]
    fn template_runs_redis_on_the_port_and_hash_follows_the_spec() {
        let t = tmpl(&redis(7000, "redis:7"));
        let c = &t.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            c.args.as_ref().unwrap()[..2],
            ["--port".to_string(), "7000".to_string()]
        );
        let args = c.args.as_ref().unwrap().join(" ");
        assert!(args.contains("--replicaof 127.0.0.1 1"), "{args}");
        assert!(args.contains("--protected-mode no"), "{args}");
        assert!(args.contains("--bind * -::*"), "{args}");
        assert_eq!(c.ports.as_ref().unwrap()[0].container_port, 7000);
        let probe = c.readiness_probe.as_ref().unwrap().exec.as_ref().unwrap();
        let probe = probe.command.as_ref().unwrap().join(" ");
        assert!(
            probe.contains("redis-cli -p 7000 info replication")
                && probe.contains("master_link_status:up")
                && !probe.contains("REDISCLI_AUTH"),
            "{probe}"
        );
        let h1 = revision_of(&t);
        assert_eq!(h1, revision_of(&tmpl(&redis(7000, "redis:7"))));
        assert_ne!(h1, revision_of(&tmpl(&redis(7001, "redis:7"))));
        assert_ne!(h1, revision_of(&tmpl(&redis(7000, "redis:8"))));
        let labels = t.metadata.as_ref().unwrap().labels.as_ref().unwrap();
        assert_eq!(labels[INSTANCE_LABEL], "cache");
        assert_eq!(labels[MANAGED_BY_LABEL], "podkeeper");
    }

    fn observed(name: &str, revision: &str, ready: bool, age: i64) -> ObservedPod {
        let mut p = crate::podset::pods::test_support::pod(name, revision, 1);
        p.created = Timestamp::from_second(1_000 - age).unwrap();
        if !ready {
            p.ready_since = None;
        }
        p
    }

    fn victims(p: &Plan) -> Vec<(&str, DeleteReason)> {
        p.delete
            .iter()
            .map(|v| (v.name.as_str(), v.reason))
            .collect()
    }

    #[test]
    fn an_in_place_rollout_updates_the_replicas_first_and_holds_the_primary_back() {
        let redis: Redis = serde_json::from_value(serde_json::json!({
            "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
            "metadata": {"name": "kv", "namespace": "ns", "uid": "u"},
            "spec": {"replicas": 3, "image": "redis:8"},
        }))
        .unwrap();
        let spec = redis.pod_set().unwrap();
        let d = spec.desired;
        let ip = d.in_place.clone().expect("Redis opts in with 3 replicas");
        let now = Timestamp::from_second(10_000).unwrap();
        let mut pods: Vec<ObservedPod> = ["a", "b", "c"]
            .iter()
            .enumerate()
            .map(|(i, n)| {
                let mut p = observed(n, "old", true, i as i64);
                p.in_place = Some(ip.keys.clone());
                p
            })
            .collect();
        let mut order = Vec::new();
        for _ in 0..3 {
            let mut p = plan(&d, &pods, now);
            assert!(p.create == 0 && p.delete.is_empty(), "{p:?}");
            let held = spare_primary_in_place(&mut p, &pods, "b", &d);
            if held {
                assert!(p.in_place.is_empty());
                break;
            }
            assert_eq!(p.in_place.len(), 1);
            let name = p.in_place[0].name.clone();
            assert_ne!(name, "b", "the primary is not updated while primary");
            let pod = pods.iter_mut().find(|x| x.name == name).unwrap();
            pod.revision = Some(d.revision.clone());
            order.push(name);
        }
        order.sort();
        assert_eq!(
            order,
            ["a", "c"],
            "both replicas, then the primary is held back"
        );
        // A single-Pod Redis is replaced, never updated in place.
        let mut one = redis.clone();
        one.spec.replicas = 1;
        assert!(one.pod_set().unwrap().desired.in_place.is_none());
    }

    #[test]
    fn scale_down_takes_a_replica_instead_of_the_primary() {
        let pods: Vec<ObservedPod> = ["a", "b", "c"]
            .iter()
            .enumerate()
            .map(|(i, n)| observed(n, "h1", true, i as i64))
            .collect();
        let d = Desired {
            replicas: 1,
            revision: "h1".into(),
            strategy: ROLLOUT,
            min_ready_seconds: 0,
            paused: false,
            in_place: None,
        };
        let now = Timestamp::from_second(10_000).unwrap();
        for primary in ["a", "b", "c"] {
            let mut p = plan(&d, &pods, now);
            assert_eq!(p.delete.len(), 2);
            assert!(!spare_primary(&mut p, &pods, primary, "h1"));
            assert_eq!(p.delete.len(), 2, "still two go");
            assert!(
                p.delete.iter().all(|v| v.name != primary),
                "{primary} kept: {:?}",
                victims(&p)
            );
        }
        // Scaling to zero takes the primary with the others.
        let zero = Desired {
            replicas: 0,
            ..d.clone()
        };
        let mut p = plan(&zero, &pods, now);
        assert!(!spare_primary(&mut p, &pods, "a", "h1"));
        assert_eq!(p.delete.len(), 3);
    }

    #[test]
    fn rollout_replaces_replicas_first_and_holds_the_primary_back_last() {
        let now = Timestamp::from_second(10_000).unwrap();
        let d = Desired {
            replicas: 3,
            revision: "h2".into(),
            strategy: ROLLOUT,
            min_ready_seconds: 0,
            paused: false,
            in_place: None,
        };
        // One new Pod is Ready: one old Pod may go; the engine's order may
        // pick the primary, but a replica goes instead.
        let mut pods = vec![
            observed("old-a", "h1", true, 30),
            observed("old-b", "h1", true, 20),
            observed("old-c", "h1", true, 10),
            observed("new-1", "h2", true, 1),
        ];
        for primary in ["old-a", "old-b", "old-c"] {
            let mut p = plan(&d, &pods, now);
            assert_eq!(p.delete.len(), 1);
            assert!(!spare_primary(&mut p, &pods, primary, "h2"));
            assert_eq!(p.delete.len(), 1);
            assert_ne!(p.delete[0].name, primary);
            assert_eq!(p.delete[0].reason, DeleteReason::Outdated);
        }
        // Only the primary is left on the old template: it is held back,
        // to be handed over first.
        pods.retain(|p| p.name == "old-a" || p.name.starts_with("new"));
        pods.push(observed("new-2", "h2", true, 1));
        pods.push(observed("new-3", "h2", true, 1));
        let mut p = plan(&d, &pods, now);
        assert_eq!(victims(&p), [("old-a", DeleteReason::Outdated)]);
        assert!(spare_primary(&mut p, &pods, "old-a", "h2"));
        assert!(p.delete.is_empty());
        // Not the primary: untouched.
        let mut p = plan(&d, &pods, now);
        assert!(!spare_primary(&mut p, &pods, "new-1", "h2"));
        assert_eq!(victims(&p), [("old-a", DeleteReason::Outdated)]);
    }

    #[test]
    fn services_select_the_primary_and_the_replicas_on_the_spec_port() {
        let mut r = redis(7000, "redis:7");
        r.metadata.uid = Some("uid-cache".into());
        let owner = Owner::of(&r, "Redis");
        let services = desired_services(&r, &owner);
        let got: Vec<(String, String, i32)> = services
            .iter()
            .map(|s| {
                let spec = s.spec.as_ref().unwrap();
                (
                    s.name_any(),
                    spec.selector.as_ref().unwrap()[ROLE_LABEL].clone(),
                    spec.ports.as_ref().unwrap()[0].port,
                )
            })
            .collect();
        assert_eq!(
            got,
            [
                ("cache".to_string(), "primary".to_string(), 7000),
                ("cache-replicas".to_string(), "replica".to_string(), 7000)
            ]
        );
        for s in &services {
            let sel = s.spec.as_ref().unwrap().selector.as_ref().unwrap();
            assert_eq!(sel[INSTANCE_LABEL], "cache");
            assert_eq!(s.owner_references()[0].uid, "uid-cache");
        }
    }

    #[test]
    fn password_comes_from_the_secret_and_config_is_checked() {
        let mut r = redis(6379, "redis:7");
        r.spec.auth = Some(crate::api::redis::AuthSpec {
            secret_name: "pw".into(),
            key: "password".into(),
        });
        r.spec.resources = Some(k8s_openapi::api::core::v1::ResourceRequirements {
            limits: Some(
                [(
                    "memory".to_string(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity("100Mi".into()),
                )]
                .into(),
            ),
            ..Default::default()
        });
        let t = tmpl(&r);
        let spec = t.spec.as_ref().unwrap();
        let c = &spec.containers[0];
        let env = &c.env.as_ref().unwrap()[0];
        assert_eq!(env.name, crate::redis::replication::config::PASSWORD_ENV);
        assert!(env.value.is_none(), "the password is not in the Pod spec");
        let sel = env
            .value_from
            .as_ref()
            .unwrap()
            .secret_key_ref
            .as_ref()
            .unwrap();
        assert_eq!((sel.name.as_str(), sel.key.as_str()), ("pw", "password"));
        assert_eq!(c.command.as_ref().unwrap(), &["sh".to_string()]);
        let args = c.args.as_ref().unwrap().join(" ");
        assert!(
            args.contains("--maxmemory 78643200"),
            "75 % of 100Mi: {args}"
        );
        let spread = spec.topology_spread_constraints.as_ref().unwrap();
        assert_eq!(
            spread
                .iter()
                .map(|s| (s.topology_key.as_str(), s.when_unsatisfiable.as_str()))
                .collect::<Vec<_>>(),
            [
                ("kubernetes.io/hostname", "DoNotSchedule"),
                ("topology.kubernetes.io/zone", "ScheduleAnyway")
            ]
        );
        r.spec.config = [("replicaof".to_string(), "10.0.0.1 6379".to_string())].into();
        let err = r.pod_set().unwrap_err();
        assert!(err.contains("replicaof"), "{err}");
    }

    #[test]
    fn ready_needs_replication_as_well_as_ready_pods() {
        let r = redis(6379, "redis:7");
        let rev = revision_of(&tmpl(&r));
        let pods: Vec<ObservedPod> = ["a", "b", "c"]
            .iter()
            .map(|n| observed(n, &rev, true, 1))
            .collect();
        let now = Timestamp::from_second(10_000).unwrap();
        let d = Desired {
            replicas: 3,
            revision: rev,
            strategy: ROLLOUT,
            min_ready_seconds: 0,
            paused: false,
            in_place: None,
        };
        let p = plan(&d, &pods, now);
        let waiting = Replication {
            condition: Some((false, "NoPrimary", "no member answers".into())),
            ..Default::default()
        };
        let s = desired_status(&r, &report(&p, None, &waiting, now));
        let ready = conditions::find(&s.conditions, "Ready").unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "NotReplicated")
        );
        assert!(ready.message.contains("no member answers"));
        let done = Replication {
            primary: Some(PrimaryStatus {
                pod: "a".into(),
                run_id: "x".into(),
            }),
            condition: Some((true, "Replicated", "a is primary".into())),
            ..Default::default()
        };
        let pending = Replication {
            services_pending: vec!["r-replicas".into()],
            ..done.clone()
        };
        let s = desired_status(&r, &report(&p, None, &pending, now));
        let ready = conditions::find(&s.conditions, "Ready").unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "ServicesPending"),
            "not Ready for clients before their Services are there"
        );
        assert!(ready.message.contains("r-replicas"), "{}", ready.message);
        let s = desired_status(&r, &report(&p, None, &done, now));
        let ready = conditions::find(&s.conditions, "Ready").unwrap();
        assert_eq!(ready.status, "True");
        assert_eq!(s.primary.unwrap().pod, "a");
        let repl = conditions::find(&s.conditions, "Replicated").unwrap();
        assert_eq!(repl.status, "True");
    }

    #[test]
    fn status_reports_counts_conditions_and_selector() {
        let r = redis(6379, "redis:7");
        let pods = vec![crate::podset::pods::test_support::pod(
            "a",
            &revision_of(&tmpl(&r)),
            1,
        )];
        let now = Timestamp::from_second(10_000).unwrap();
        let d = Desired {
            replicas: 3,
            revision: revision_of(&tmpl(&r)),
            strategy: ROLLOUT,
            min_ready_seconds: 0,
            paused: false,
            in_place: None,
        };
        let p = plan(&d, &pods, now);
        let repl = Replication::default();
        let s = desired_status(&r, &report(&p, None, &repl, now));
        assert_eq!(
            (s.replicas, s.ready_replicas, s.updated_replicas),
            (1, 1, 1)
        );
        assert_eq!(s.observed_generation, Some(2));
        assert_eq!(
            s.selector,
            "app.kubernetes.io/instance=cache,app.kubernetes.io/managed-by=podkeeper,app.kubernetes.io/name=redis"
        );
        let ready = conditions::find(&s.conditions, "Ready").unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "ReplicasNotReady")
        );
        let progressing = conditions::find(&s.conditions, "Progressing").unwrap();
        assert_eq!(
            (progressing.status.as_str(), progressing.reason.as_str()),
            ("True", "Scaling")
        );
        // Same inputs, later: nothing changes, so nothing would be written.
        let mut r2 = r.clone();
        r2.status = Some(s.clone());
        let later = Timestamp::from_second(20_000).unwrap();
        assert_eq!(
            desired_status(&r2, &report(&plan(&d, &pods, later), None, &repl, later)),
            s
        );
        // A refused create shows, and clears once a step succeeds.
        let refused = Failure {
            reason: "FailedCreate",
            message: "exceeded quota".into(),
        };
        let failed = desired_status(&r2, &report(&p, Some(&refused), &repl, later));
        let rf = conditions::find(&failed.conditions, "ReplicaFailure").unwrap();
        assert_eq!(
            (rf.status.as_str(), rf.reason.as_str()),
            ("True", "FailedCreate")
        );
        let mut r3 = r2.clone();
        r3.status = Some(failed);
        let healed = desired_status(&r3, &report(&p, None, &repl, later));
        let rf = conditions::find(&healed.conditions, "ReplicaFailure").unwrap();
        assert_eq!(rf.status, "False");
    }
}
