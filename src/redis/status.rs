//! The status a Redis shows: counts, the primary, its members and their
//! links, and the conditions. Pure.

use kube::ResourceExt;

use crate::api::redis::{CERTIFICATE_CONDITION, CREDENTIALS_CONDITION, REPLICATED_CONDITION};
use crate::api::{Redis, RedisStatus};
use crate::podset::reconcile::Report;
use crate::redis::hooks::Replication;
use crate::redis::pod::selector_string;
use crate::redis::restore;
use crate::redis::simulated;
use crate::runtime::conditions::{self, Cond, truth};

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
        (None, Some((status, reason, message))) => Cond {
            type_: REPLICATED_CONDITION,
            status,
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
    let unknown = all_ready && services && replicated.status == "Unknown";
    let ready = Cond {
        type_: "Ready",
        status: if unknown {
            "Unknown"
        } else {
            truth(all_ready && serving && services)
        },
        reason: if !all_ready {
            "ReplicasNotReady"
        } else if unknown {
            replicated.reason
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
            [ready, progressing, failure, replicated]
                .into_iter()
                .chain(restore::condition(
                    redis,
                    repl.restore.as_ref(),
                    repl.primary.is_some(),
                ))
                .chain(certificate_condition(redis, &previous, repl))
                .chain(kept_or_new(
                    &previous,
                    CREDENTIALS_CONDITION,
                    repl.credentials.as_ref(),
                ))
                .collect(),
            redis.metadata.generation,
            report.now,
        ),
        primary: repl.primary.clone(),
        members: repl.members.clone(),
        credentials_version: repl
            .credentials_version
            .clone()
            .or(previous.credentials_version.clone()),
    }
}

/// `CertificateServed` (with `spec.tls`): this round's, else as it was
/// (a round that did not look at the members).
fn certificate_condition<'a>(
    redis: &Redis,
    previous: &'a RedisStatus,
    repl: &'a Replication,
) -> Option<Cond<'a>> {
    redis.spec.tls.as_ref()?;
    kept_or_new(previous, CERTIFICATE_CONDITION, repl.certificate.as_ref())
}

/// Condition `type_` as this round found it, else as it was (a round that
/// did not look).
fn kept_or_new<'a>(
    previous: &'a RedisStatus,
    type_: &'static str,
    found: Option<&'a (&'static str, &'static str, String)>,
) -> Option<Cond<'a>> {
    match found {
        Some((status, reason, message)) => Some(Cond {
            type_,
            status,
            reason,
            message: message.clone(),
        }),
        None => previous
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| Cond {
                type_,
                status: c.status.as_str(),
                reason: c.reason.as_str(),
                message: c.message.clone(),
            }),
    }
}
