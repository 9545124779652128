//! Redis as a [`PodSet`]: its Pod template ([`pod`]), Services
//! ([`services`]), rollout order ([`rollout`]), disruption budgets and
//! cordons ([`disruption`]) and status ([`status`]), all pure, and its I/O hooks ([`hooks`]); the generic reconciler in [`crate::podset::reconcile`] does the
//! rest. The Secrets of a Redis: its passwords ([`auth`]) and its TLS
//! certificate ([`tls`], checked and issued by [`certs`]).

pub mod auth;
pub mod certs;
pub mod credentials;
pub mod disruption;
pub mod hooks;
pub mod metrics;
pub mod network;
pub mod pod;
pub mod replication;
pub mod restore;
pub mod rollout;
pub mod services;
pub mod simulated;
pub mod status;
pub mod switchover;
pub mod tls;

use crate::api::{Redis, RedisStatus};
use crate::podset::plan::{Desired, InPlace, Strategy};
use crate::podset::reconcile::{PodSet, PodSetSpec, Report};
use crate::podset::revision::InPlaceKeys;
use crate::podset::revision::revision_of;
use crate::redis::hooks::{Replication, ReplicationExtras};
use crate::redis::pod::pod_template;
use crate::redis::status::desired_status;

pub const CONTROLLER: &str = "redis";
const KIND: &str = "Redis";

/// Redis rolls one Pod at a time and replaces a Pod only once its
/// successor is Ready.
const ROLLOUT: Strategy = Strategy::RollingUpdate {
    max_surge: 1,
    max_unavailable: 0,
};

/// With a claim per member (`spec.storage`), a Pod is replaced on its own
/// claim: it goes first (a primary after its handover), and its successor
/// takes the claim it left, with its data, as a StatefulSet's Pod would.
const ROLLOUT_ON_CLAIMS: Strategy = Strategy::RollingUpdate {
    max_surge: 0,
    max_unavailable: 1,
};

/// An image or resources change is applied in place, one Pod at a time:
/// the updating Pod (a replica, or the old primary after its handover) is
/// the one unavailable Pod. A single-Pod Redis has no replica to hand over
/// to, so it is always replaced (its successor syncs first).
const IN_PLACE_UNAVAILABLE: i32 = 1;

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
                strategy: if self.spec.storage.is_some() {
                    ROLLOUT_ON_CLAIMS
                } else {
                    ROLLOUT
                },
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

    /// The version of podkeeper's own passwords the members are started
    /// with (see [`crate::redis::credentials`]).
    fn template_inputs(&self) -> Option<&str> {
        self.status.as_ref()?.credentials_version.as_deref()
    }

    /// A switchover asked for (see [`crate::redis::switchover`]).
    fn requests(&self) -> Option<&str> {
        self.metadata
            .annotations
            .as_ref()?
            .get(crate::api::names::SWITCHOVER_ANNOTATION)
            .map(String::as_str)
    }

    fn replicas(&self) -> i32 {
        self.spec.replicas
    }

    fn claims(&self) -> Option<crate::podset::claims::ClaimTemplate> {
        crate::redis::pod::claim_template(self)
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

    use k8s_openapi::api::core::v1::PodTemplateSpec;

    use kube::ResourceExt;

    use crate::api::names::INSTANCE_LABEL;
    use crate::api::names::{MANAGED_BY_LABEL, POD_NAME_LABEL, ROLE_LABEL};

    use crate::api::Redis;
    use crate::podset::ObservedPod;
    use crate::runtime::owner::Owner;

    use crate::podset::plan::{DeleteReason, Desired, Plan};

    use crate::podset::reconcile::{PodSet, Report};
    use crate::podset::revision::revision_of;
    use crate::redis::hooks::Replication;

    use crate::runtime::conditions::{self};

    use crate::redis::rollout::*;
    use crate::redis::services::*;

    use crate::api::RedisSpec;
    use crate::api::redis::PrimaryStatus;
    use crate::api::redis::PullPolicy;
    use crate::podset::plan::plan;
    use crate::runtime::failure::Failure;
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
                tls: None,
                users: Vec::new(),
                default_user: Default::default(),
                network_policy: None,
                config: Default::default(),
                failover: Default::default(),
                storage: None,
                backup: None,
                restore: None,
                node_selector: Default::default(),
                tolerations: Vec::new(),
                affinity: None,
                topology_spread_constraints: None,
                priority_class_name: None,
                pod_metadata: Default::default(),
            },
        );
        r.metadata.namespace = Some("ns".into());
        r.metadata.generation = Some(2);
        r
    }

    /// The Secret and key an environment variable is read from.
    fn secret_ref(e: &k8s_openapi::api::core::v1::EnvVar) -> (&str, &str) {
        let r = e
            .value_from
            .as_ref()
            .unwrap()
            .secret_key_ref
            .as_ref()
            .unwrap();
        (r.name.as_str(), r.key.as_str())
    }

    fn tmpl(r: &Redis) -> PodTemplateSpec {
        pod_template(r).unwrap()
    }

    #[test]
    fn template_runs_redis_on_the_port_and_hash_follows_the_spec() {
        let t = tmpl(&redis(7000, "redis:7"));
        let c = &t.spec.as_ref().unwrap().containers[0];
        assert_eq!(c.command.as_ref().unwrap(), &["sh".to_string()]);
        assert_eq!(
            c.args.as_ref().unwrap()[3..5],
            ["--port".to_string(), "7000".to_string()]
        );
        let args = c.args.as_ref().unwrap().join(" ");
        assert!(args.contains("--replicaof 127.0.0.1 1"), "{args}");
        assert!(args.contains("--protected-mode no"), "{args}");
        assert!(args.contains("--bind * -::*"), "{args}");
        assert_eq!(c.ports.as_ref().unwrap()[0].container_port, 7000);
        let probe = c.readiness_probe.as_ref().unwrap().exec.as_ref().unwrap();
        let probe = probe.command.as_ref().unwrap().join(" ");
        // The probe logs in as the operator's user, whose password (from
        // podkeeper's Secret) is every member's, with or without spec.auth.
        assert!(
            probe.contains("redis-cli --user podkeeper -p 7000 info replication")
                && probe.contains("master_link_status:up")
                && probe.contains("REDISCLI_AUTH=\"$PODKEEPER_PASSWORD\""),
            "{probe}"
        );
        let env = c.env.as_ref().unwrap();
        assert_eq!(env.len(), 4, "no clients' password without spec.auth");
        assert_eq!(env[0].name, "PODKEEPER_PASSWORD");
        assert_eq!(secret_ref(&env[0]), ("cache-podkeeper", "password"));
        assert_eq!(env[1].name, "PODKEEPER_REPLICATION_PASSWORD");
        assert_eq!(secret_ref(&env[1]), ("cache-podkeeper", "replication"));
        assert_eq!(secret_ref(&env[2]), ("cache-podkeeper", "active-password"));
        assert_eq!(
            secret_ref(&env[3]),
            ("cache-podkeeper", "active-replication")
        );
        // A rotation of podkeeper's own passwords rolls the members; the
        // version's absence (no rotation yet) changes nothing.
        let mut rotated = redis(7000, "redis:7");
        rotated.status = Some(RedisStatus {
            credentials_version: Some("42".into()),
            ..RedisStatus::default()
        });
        let t2 = tmpl(&rotated);
        assert_ne!(revision_of(&t2), revision_of(&t));
        assert_eq!(
            t2.metadata.as_ref().unwrap().annotations.as_ref().unwrap()["podkeeper.dev/credentials-version"],
            "42"
        );
        let mut no_rotation = redis(7000, "redis:7");
        no_rotation.status = Some(RedisStatus::default());
        assert_eq!(revision_of(&tmpl(&no_rotation)), revision_of(&t));
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

    /// Redis's rollout of `replicas` Pods to `revision`, not in place.
    fn rolling(replicas: i32, revision: &str) -> Desired {
        Desired {
            replicas,
            revision: revision.into(),
            strategy: ROLLOUT,
            min_ready_seconds: 0,
            paused: false,
            in_place: None,
        }
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
        let d = rolling(1, "h1");
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

    /// The order as the hooks carry it out: replicas first, the primary
    /// held back and named retiring (for its handover), a new primary after
    /// a failover kept too, nothing deleted while a switchover runs.
    #[test]
    fn before_and_after_the_round_the_primary_goes_last() {
        let now = Timestamp::from_second(10_000).unwrap();
        let d = rolling(3, "h2");
        let pods = vec![
            observed("old-a", "h1", true, 30),
            observed("new-1", "h2", true, 1),
            observed("new-2", "h2", true, 1),
            observed("new-3", "h2", true, 1),
        ];
        // The recorded primary is the last old Pod: held back, retiring.
        let mut p = plan(&d, &pods, now);
        assert_eq!(victims(&p), [("old-a", DeleteReason::Outdated)]);
        let retiring = before_round(&mut p, &pods, &d, Some("old-a"));
        assert!(p.delete.is_empty());
        assert_eq!(retiring, ["old-a"]);
        // The round switches over: nothing goes while it runs.
        let mut p = plan(&d, &pods, now);
        after_round(&mut p, &pods, &d, Some("old-a"), Some("old-a"), true);
        assert!(p.delete.is_empty() && p.in_place.is_empty());
        // Handed over to new-1: the old primary, now a replica, goes.
        let mut p = plan(&d, &pods, now);
        after_round(&mut p, &pods, &d, Some("old-a"), Some("new-1"), false);
        assert_eq!(victims(&p), [("old-a", DeleteReason::Outdated)]);
        // Whatever the engine planned, the round's primary is never deleted
        // unless the Redis scales to zero.
        let zero = Desired {
            replicas: 0,
            ..d.clone()
        };
        let mut p = plan(&zero, &pods, now);
        after_round(&mut p, &pods, &zero, None, Some("new-1"), false);
        assert_eq!(p.delete.len(), 4);
    }

    #[test]
    fn rollout_replaces_replicas_first_and_holds_the_primary_back_last() {
        let now = Timestamp::from_second(10_000).unwrap();
        let d = rolling(3, "h2");
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
    fn services_select_the_primary_by_name_and_the_replicas_by_role_on_the_spec_port() {
        let mut r = redis(7000, "redis:7");
        r.metadata.uid = Some("uid-cache".into());
        let owner = Owner::of(&r, "Redis");
        let selected = |primary: Option<&str>| -> Vec<(String, String, i32)> {
            desired_services(&r, &owner, primary)
                .iter()
                .map(|s| {
                    let spec = s.spec.as_ref().unwrap();
                    let sel = spec.selector.as_ref().unwrap();
                    assert_eq!(sel[INSTANCE_LABEL], "cache");
                    assert_eq!(s.owner_references()[0].uid, "uid-cache");
                    let only: Vec<String> = sel
                        .iter()
                        .filter(|(k, _)| [ROLE_LABEL, POD_NAME_LABEL].contains(&k.as_str()))
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect();
                    (
                        s.name_any(),
                        only.join(","),
                        spec.ports.as_ref().unwrap()[0].port,
                    )
                })
                .collect()
        };
        // One Pod, by its name: moving the primary is one write.
        assert_eq!(
            selected(Some("cache-x1")),
            [
                (
                    "cache".into(),
                    "podkeeper.dev/pod-name=cache-x1".into(),
                    7000
                ),
                (
                    "cache-replicas".into(),
                    "podkeeper.dev/role=replica".into(),
                    7000
                )
            ]
        );
        // No primary known: the role label, which no Pod carries then.
        assert_eq!(
            selected(None)[0],
            ("cache".into(), "podkeeper.dev/role=primary".into(), 7000)
        );
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
        let env = &c.env.as_ref().unwrap()[4];
        assert_eq!(env.name, crate::redis::replication::config::PASSWORD_ENV);
        assert!(env.value.is_none(), "the password is not in the Pod spec");
        assert_eq!(secret_ref(env), ("pw", "password"));
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
        // Nothing in the template holds the password or a directive that
        // would carry it: redis-server reads requirepass and masterauth on
        // its standard input, the probe's redis-cli from REDISCLI_AUTH.
        let json = serde_json::to_string(&t).unwrap();
        assert!(!json.contains("\"value\":"), "no inline env value: {json}");
        for a in &c.args.as_ref().unwrap()[3..] {
            assert!(
                !a.contains("requirepass") && !a.contains("masterauth") && !a.contains('$'),
                "{a}"
            );
        }
        assert_eq!(
            c.args.as_ref().unwrap()[1],
            crate::redis::replication::config::AUTH_SCRIPT
        );
        let probe = c.readiness_probe.as_ref().unwrap().exec.as_ref().unwrap();
        let probe = probe.command.as_ref().unwrap().join(" ");
        assert!(
            probe.contains("REDISCLI_AUTH=") && !probe.contains(" -a "),
            "{probe}"
        );
        assert!(c.liveness_probe.is_none() && c.startup_probe.is_none());
        r.spec.config = [("replicaof".to_string(), "10.0.0.1 6379".to_string())].into();
        let err = r.pod_set().unwrap_err();
        assert!(err.contains("replicaof"), "{err}");
        r.spec.config = [(
            "maxmemory-policy".to_string(),
            "allkeys-lru --replicaof 10.0.0.9 6379".to_string(),
        )]
        .into();
        let err = r.pod_set().unwrap_err();
        assert!(err.starts_with("spec.config.maxmemory-policy: "), "{err}");
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
            condition: Some(("False", "NoPrimary", "no member answers".into())),
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
                term: 1,
                claim: None,
            }),
            condition: Some(("True", "Replicated", "a is primary".into())),
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
        // Replicated Unknown (the operator cut off from a primary its
        // replicas still hear from cannot tell): Ready says so too.
        let cut_off = Replication {
            condition: Some((
                "Unknown",
                "OperatorCutOff",
                "a does not answer the operator".into(),
            )),
            ..done.clone()
        };
        let s = desired_status(&r, &report(&p, None, &cut_off, now));
        for type_ in ["Ready", "Replicated"] {
            let c = conditions::find(&s.conditions, type_).unwrap();
            assert_eq!(
                (c.status.as_str(), c.reason.as_str()),
                ("Unknown", "OperatorCutOff"),
                "{type_}"
            );
        }
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
