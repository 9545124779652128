//! The Redis reconciler: observe (watch cache) -> plan (pure) -> act
//! (executor) -> report (status, only when it changed).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, PodSecurityContext, PodSpec,
    PodTemplateSpec, Probe, SeccompProfile, SecurityContext, TCPSocketAction, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::{Api, ResourceExt};
use tracing::instrument;

use super::conditions::{self, Cond};
use super::{Context, Error, FINALIZER, MANAGED_BY_LABEL, MANAGED_BY_VALUE, next_action};
use crate::crd::{Redis, RedisStatus};
use crate::engine::executor::{Outcome, Owner};
use crate::engine::hash::{revision_of, stamp};
use crate::engine::plan;
use crate::engine::plan::{Desired, Plan, Strategy};

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

/// The status a Redis should show. Pure: `previous` supplies the
/// conditions' transition times and the last ReplicaFailure when this step
/// did not act.
pub fn desired_status(
    redis: &Redis,
    plan: &Plan,
    outcome: Option<&Outcome>,
    now: Timestamp,
) -> RedisStatus {
    let replicas = redis.spec.replicas.max(0);
    let c = plan.counts;
    let previous = redis.status.clone().unwrap_or_default();
    let all_ready = c.ready == replicas && c.updated == replicas && c.replicas == replicas;
    let ready = Cond {
        type_: "Ready",
        status: all_ready,
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
            status: false,
            reason: "Complete",
            message: format!("{replicas} replicas on the current template"),
        }
    } else if plan.rolling {
        Cond {
            type_: "Progressing",
            status: true,
            reason: "RollingUpdate",
            message: format!("{} of {} replicas updated", c.updated, replicas),
        }
    } else {
        Cond {
            type_: "Progressing",
            status: true,
            reason: "Scaling",
            message: format!("{} replicas, want {}", c.replicas, replicas),
        }
    };
    let failure = match outcome {
        Some(Outcome {
            failure: Some(f), ..
        }) => Cond {
            type_: "ReplicaFailure",
            status: true,
            reason: f.reason,
            message: f.message.clone(),
        },
        Some(_) => Cond {
            type_: "ReplicaFailure",
            status: false,
            reason: "NoFailure",
            message: "the last Pod creates and deletes succeeded".into(),
        },
        None => match conditions::find(&previous.conditions, "ReplicaFailure") {
            Some(old) => Cond {
                type_: "ReplicaFailure",
                status: old.status == "True",
                reason: match old.reason.as_str() {
                    "FailedCreate" => "FailedCreate",
                    "FailedDelete" => "FailedDelete",
                    _ => "NoFailure",
                },
                message: old.message.clone(),
            },
            None => Cond {
                type_: "ReplicaFailure",
                status: false,
                reason: "NoFailure",
                message: "no Pod create or delete has failed".into(),
            },
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
            now,
        ),
    }
}

fn owner(redis: &Redis) -> Owner {
    Owner::of(redis, KIND)
}

/// Entry point for the controller.
#[instrument(skip_all, fields(namespace = %redis.namespace().unwrap_or_default(), name = %redis.name_any()))]
pub async fn reconcile(redis: Arc<Redis>, ctx: Arc<Context>) -> Result<Action, Error> {
    let started = Instant::now();
    let api: Api<Redis> =
        Api::namespaced(ctx.client.clone(), &redis.namespace().unwrap_or_default());
    let result = finalizer(&api, FINALIZER, redis.clone(), |event| async {
        match event {
            Finalizer::Apply(r) => apply(&r, &ctx).await,
            Finalizer::Cleanup(r) => cleanup(&r, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)));
    ctx.record(KIND, &*redis, started, &result);
    result
}

/// Requeue policy on error.
pub fn error_policy(redis: Arc<Redis>, error: &Error, ctx: Arc<Context>) -> Action {
    ctx.backoff(KIND, &*redis, error)
}

async fn apply(redis: &Redis, ctx: &Context) -> Result<Action, Error> {
    let template = pod_template(redis);
    let desired = Desired {
        replicas: redis.spec.replicas,
        revision: revision_of(&template),
        strategy: ROLLOUT,
        min_ready_seconds: 0,
        paused: false,
    };
    let owner = owner(redis);
    let now = Timestamp::now();
    let plan = plan(&desired, &ctx.observed(&owner), now);
    let outcome = ctx.act(&owner, &template, &plan).await;
    if outcome.is_none() {
        // Creates or deletes are still in flight: the status would describe
        // a state that the watch is about to replace, and the event that
        // completes them reconciles again. Writing it anyway doubled the
        // status writes while converging (see BENCHMARKS.md).
        return Ok(next_action(false, plan.recheck_after_seconds));
    }
    let status = desired_status(redis, &plan, outcome.as_ref(), now);
    let deferred = ctx
        .write_status(redis, redis.status.as_ref(), &status)
        .await?;
    Ok(match deferred {
        Some(wait) => Action::requeue(wait),
        None => next_action(outcome.is_some(), plan.recheck_after_seconds),
    })
}

/// Deletes every Pod, newest first; the finalizer goes only once none is
/// left, so the Redis disappears last.
async fn cleanup(redis: &Redis, ctx: &Context) -> Result<Action, Error> {
    ctx.delete_all_pods(&owner(redis)).await?;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crd::RedisSpec;
    use crate::crd::redis::PullPolicy;

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
        let s = desired_status(&r, &p, Some(&Outcome::default()), now);
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
            desired_status(
                &r2,
                &plan(&d, &pods, later),
                Some(&Outcome::default()),
                later
            ),
            s
        );
    }
}
