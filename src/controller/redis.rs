//! Redis as a [`PodSet`]: its Pod template, its rollout strategy and its
//! status, all pure; the generic reconciler in [`super::podset`] does the
//! rest.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, PodSecurityContext, PodSpec,
    PodTemplateSpec, Probe, SeccompProfile, SecurityContext, TCPSocketAction, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use super::conditions::{self, Cond, truth};
use super::podset::{NoExtras, PodSet, PodSetSpec, Report};
use super::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use crate::crd::{Redis, RedisStatus};
use crate::engine::hash::{revision_of, stamp};
use crate::engine::plan::{Desired, Strategy};

pub const CONTROLLER: &str = "redis";
const KIND: &str = "Redis";
const NAME_LABEL: &str = "app.kubernetes.io/name";
const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// Uid and gid of the redis user in the official image.
const REDIS_UID: i64 = 999;

/// Redis rolls one Pod at a time and replaces a Pod only once its
/// successor is Ready.
const ROLLOUT: Strategy = Strategy::RollingUpdate {
    max_surge: 1,
    max_unavailable: 0,
};

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

/// The Pod template of a Redis, with its template hash label. Pure.
pub fn pod_template(redis: &Redis) -> PodTemplateSpec {
    let spec = &redis.spec;
    let port = spec.port;
    let container = Container {
        name: "redis".into(),
        image: Some(spec.image.clone()),
        image_pull_policy: Some(spec.image_pull_policy.as_str().into()),
        command: Some(vec!["redis-server".into()]),
        args: Some(vec![
            "--port".into(),
            port.to_string(),
            "--dir".into(),
            "/data".into(),
        ]),
        ports: Some(vec![ContainerPort {
            name: Some("redis".into()),
            container_port: port,
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        readiness_probe: Some(Probe {
            tcp_socket: Some(TCPSocketAction {
                port: IntOrString::Int(port),
                host: None,
            }),
            period_seconds: Some(5),
            ..Default::default()
        }),
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
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(selector_labels(&redis.name_any())),
            ..Default::default()
        }),
        spec: Some(pod_spec),
    };
    stamp(template)
}

/// The status a Redis should show. Pure.
pub fn desired_status(redis: &Redis, report: &Report<'_, ()>) -> RedisStatus {
    let replicas = redis.spec.replicas.max(0);
    let plan = report.plan;
    let c = plan.counts;
    let previous = redis.status.clone().unwrap_or_default();
    let all_ready = c.ready == replicas && c.updated == replicas && c.replicas == replicas;
    let ready = Cond {
        type_: "Ready",
        status: truth(all_ready),
        reason: if all_ready {
            "AllReplicasReady"
        } else {
            "ReplicasNotReady"
        },
        message: format!(
            "{} of {} replicas ready, {} on the current template",
            c.ready, replicas, c.updated
        ),
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
            message: format!("{} replicas, want {}", c.replicas, replicas),
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
            vec![ready, progressing, failure],
            redis.metadata.generation,
            report.now,
        ),
    }
}

impl PodSet for Redis {
    const KIND: &'static str = KIND;
    type Status = RedisStatus;
    type Extras = NoExtras;

    fn pod_set(&self) -> Result<PodSetSpec, String> {
        let template = pod_template(self);
        Ok(PodSetSpec {
            desired: Desired {
                replicas: self.spec.replicas,
                revision: revision_of(&template),
                strategy: ROLLOUT,
                min_ready_seconds: 0,
                paused: false,
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

    fn desired_status(&self, report: &Report<'_, ()>) -> (RedisStatus, Option<i64>) {
        (desired_status(self, report), None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::RedisSpec;
    use crate::crd::redis::PullPolicy;
    use crate::engine::executor::Failure;
    use crate::engine::plan::{Plan, plan};
    use k8s_openapi::jiff::Timestamp;

    fn report<'a>(p: &'a Plan, failure: Option<&'a Failure>, now: Timestamp) -> Report<'a, ()> {
        Report {
            plan: p,
            failure,
            invalid: None,
            extras: &(),
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
            },
        );
        r.metadata.namespace = Some("ns".into());
        r.metadata.generation = Some(2);
        r
    }

    #[test]
    fn template_runs_redis_on_the_port_and_hash_follows_the_spec() {
        let t = pod_template(&redis(7000, "redis:7"));
        let c = &t.spec.as_ref().unwrap().containers[0];
        assert_eq!(
            c.args.as_ref().unwrap()[..2],
            ["--port".to_string(), "7000".to_string()]
        );
        assert_eq!(c.ports.as_ref().unwrap()[0].container_port, 7000);
        assert_eq!(
            c.readiness_probe
                .as_ref()
                .unwrap()
                .tcp_socket
                .as_ref()
                .unwrap()
                .port,
            IntOrString::Int(7000)
        );
        let h1 = revision_of(&t);
        assert_eq!(h1, revision_of(&pod_template(&redis(7000, "redis:7"))));
        assert_ne!(h1, revision_of(&pod_template(&redis(7001, "redis:7"))));
        assert_ne!(h1, revision_of(&pod_template(&redis(7000, "redis:8"))));
        let labels = t.metadata.as_ref().unwrap().labels.as_ref().unwrap();
        assert_eq!(labels[INSTANCE_LABEL], "cache");
        assert_eq!(labels[MANAGED_BY_LABEL], "podkeeper");
    }

    #[test]
    fn status_reports_counts_conditions_and_selector() {
        let r = redis(6379, "redis:7");
        let pods = vec![crate::engine::pods::test_support::pod(
            "a",
            &revision_of(&pod_template(&r)),
            1,
        )];
        let now = Timestamp::from_second(10_000).unwrap();
        let d = Desired {
            replicas: 3,
            revision: revision_of(&pod_template(&r)),
            strategy: ROLLOUT,
            min_ready_seconds: 0,
            paused: false,
        };
        let p = plan(&d, &pods, now);
        let s = desired_status(&r, &report(&p, None, now));
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
            desired_status(&r2, &report(&plan(&d, &pods, later), None, later)),
            s
        );
        // A refused create shows, and clears once a step succeeds.
        let refused = Failure {
            reason: "FailedCreate",
            message: "exceeded quota".into(),
        };
        let failed = desired_status(&r2, &report(&p, Some(&refused), later));
        let rf = conditions::find(&failed.conditions, "ReplicaFailure").unwrap();
        assert_eq!(
            (rf.status.as_str(), rf.reason.as_str()),
            ("True", "FailedCreate")
        );
        let mut r3 = r2.clone();
        r3.status = Some(failed);
        let healed = desired_status(&r3, &report(&p, None, later));
        let rf = conditions::find(&healed.conditions, "ReplicaFailure").unwrap();
        assert_eq!(rf.status, "False");
    }
}
