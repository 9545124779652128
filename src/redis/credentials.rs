//! Rotating podkeeper's own passwords: the operator's user's and the
//! replication user's, in Secret `<name>-podkeeper` (keys `password` and
//! `replication`), without locking the operator out or breaking
//! replication. Beside them podkeeper keeps the passwords every member
//! accepts (`active-password`, `active-replication`); a person rotates by
//! changing `password` and/or `replication`:
//!
//! 1. the operator logs in with the new password or the active one, and
//!    gives every member the new ones beside the old
//!    ([`crate::redis::replication::users`]);
//! 2. it records the Secret's resourceVersion in `status.credentialsVersion`,
//!    which the Pod template carries, so the members roll (replicas first,
//!    the primary handed over, then replaced): each is started again with
//!    the new passwords (and the old, [`crate::redis::replication::config::AUTH_SCRIPT`]),
//!    and its readiness probe with the new one;
//! 3. once every member runs on that version, the new passwords become the
//!    active ones in the Secret (a write that fails if the Secret changed
//!    since it was read), and each member keeps the new ones alone.
//!
//! A change made during a rotation starts it over at step 2 with the newer
//! version. The decision is [`step`] (pure); [`activate`] is the write.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;

use crate::api::names::CREDENTIALS_VERSION_ANNOTATION;
use crate::podset::Context;
use crate::redis::auth::{OwnPasswords, post_params};
use crate::redis::replication::config::{
    OPERATOR_ACTIVE_KEY, REPLICATION_ACTIVE_KEY, operator_secret_name,
};
use crate::runtime::events::EventType;
use crate::runtime::failure::api_message;
use crate::runtime::owner::Owner;

/// Where a rotation is.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// None under way.
    Settled,
    /// A change just seen: the members are to roll to this version.
    Start(String),
    /// The members rolling: `updated` of `total` run on the new passwords.
    Rolling { updated: usize, total: usize },
    /// Every member runs on the new passwords: they become the active ones.
    Finish,
    /// The Secret's new passwords cannot be used (why); nothing changes.
    Refused(String),
}

/// Where the rotation is (`rotating`: the Secret's passwords differ from
/// the active ones; `version`: its resourceVersion; `recorded`:
/// `status.credentialsVersion`; `pods`: the version each member that is not
/// terminating was started at). Pure.
pub fn step(rotating: bool, version: &str, recorded: Option<&str>, pods: &[Option<&str>]) -> Step {
    if !rotating {
        return Step::Settled;
    }
    if recorded != Some(version) {
        return Step::Start(version.to_string());
    }
    let updated = pods.iter().filter(|v| **v == Some(version)).count();
    if updated == pods.len() {
        Step::Finish
    } else {
        Step::Rolling {
            updated,
            total: pods.len(),
        }
    }
}

/// The version a member's Pod was started at (see [`step`]).
pub fn pod_version(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(CREDENTIALS_VERSION_ANNOTATION)
        .map(String::as_str)
}

/// The `CredentialsCurrent` condition for `step` (`alone`: every member
/// that answers keeps only the current passwords); `None`: as it was.
pub fn condition(
    step: &Step,
    alone: bool,
    redis: &str,
) -> Option<(&'static str, &'static str, String)> {
    let secret = operator_secret_name(redis);
    match step {
        Step::Settled if alone => Some((
            "True",
            "Current",
            format!("every member accepts only the passwords of Secret {secret}"),
        )),
        Step::Settled => None,
        Step::Start(_) => Some((
            "False",
            "Rotating",
            format!(
                "Secret {secret} changed: the members get its passwords beside the old ones and are started again with them"
            ),
        )),
        Step::Rolling { updated, total } => Some((
            "False",
            "Rotating",
            format!(
                "{updated} of {total} members started again with the passwords of Secret {secret}; the old ones are accepted until all are"
            ),
        )),
        Step::Refused(why) => Some(("False", "InvalidPassword", why.clone())),
        Step::Finish => Some((
            "False",
            "Rotating",
            format!(
                "every member runs on the passwords of Secret {secret}; the old ones are being removed"
            ),
        )),
    }
}

/// This round's step of the rotation (`recorded`:
/// `status.credentialsVersion`; `pods`: the Redis's Pods), with its
/// Events; at [`Step::Finish`], [`activate`].
pub async fn advance(
    ctx: &Context,
    owner: &Owner,
    own: &OwnPasswords,
    recorded: Option<&str>,
    pods: &[Arc<Pod>],
) -> Step {
    let versions: Vec<Option<&str>> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| pod_version(p))
        .collect();
    let secret = operator_secret_name(&owner.name);
    if let Some(why) = &own.invalid {
        ctx.executor
            .event(
                owner,
                EventType::Warning,
                "InvalidCredentials",
                "RotateCredentials",
                why.clone(),
            )
            .await;
        return Step::Refused(why.clone());
    }
    let step = step(own.rotating(), own.version(), recorded, &versions);
    let event = match &step {
        Step::Start(_) => Some((
            EventType::Normal,
            "CredentialsRotating",
            format!(
                "Secret {secret} changed: every member gets its passwords beside the old ones, then the members are started again with them (replicas first, the primary handed over)"
            ),
        )),
        Step::Finish => Some(match activate(ctx, owner, own).await {
            Ok(()) => (
                EventType::Normal,
                "CredentialsRotated",
                format!(
                    "Every member runs on the passwords of Secret {secret}; the old ones are removed from the members"
                ),
            ),
            Err(e) => (EventType::Warning, "CredentialsNotActivated", e),
        }),
        Step::Settled | Step::Rolling { .. } | Step::Refused(_) => None,
    };
    if let Some((type_, reason, note)) = event {
        ctx.executor
            .event(owner, type_, reason, "RotateCredentials", note)
            .await;
    }
    step
}

/// Makes the Secret's passwords the active ones: a replace at the
/// resourceVersion read, so a change made since is not overwritten (it is
/// seen next round).
pub async fn activate(ctx: &Context, owner: &Owner, own: &OwnPasswords) -> Result<(), String> {
    let mut secret: Secret = own.secret.clone();
    let data = secret.string_data.get_or_insert_default();
    data.insert(OPERATOR_ACTIVE_KEY.into(), own.operator.clone());
    if let Ok(r) = &own.replication {
        data.insert(REPLICATION_ACTIVE_KEY.into(), r.clone());
    }
    let name = operator_secret_name(&owner.name);
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    api.replace(&name, &post_params(), &secret)
        .await
        .map(|_| ())
        .map_err(|e| format!("cannot update Secret {name}: {}", api_message(&e)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rotation_starts_rolls_and_finishes_only_once_every_member_runs_on_its_version() {
        // Nothing to do while the passwords are the active ones, whatever
        // the members run on.
        assert_eq!(
            step(false, "7", Some("3"), &[None, Some("3")]),
            Step::Settled
        );
        // A change: the members are to roll to the Secret's version.
        assert_eq!(
            step(true, "7", None, &[None, None]),
            Step::Start("7".into())
        );
        assert_eq!(
            step(true, "7", Some("3"), &[Some("3"), Some("3")]),
            Step::Start("7".into())
        );
        // Rolling: the members on another version (or none) wait.
        assert_eq!(
            step(true, "7", Some("7"), &[Some("7"), None, Some("3")]),
            Step::Rolling {
                updated: 1,
                total: 3
            }
        );
        // All on it.
        assert_eq!(
            step(true, "7", Some("7"), &[Some("7"), Some("7")]),
            Step::Finish
        );
        // Changed again mid-rotation: started over at the newer version.
        assert_eq!(
            step(true, "9", Some("7"), &[Some("7"), Some("7")]),
            Step::Start("9".into())
        );
    }

    #[test]
    fn the_condition_is_current_only_once_the_old_passwords_are_gone() {
        let c = |s: &Step, alone| condition(s, alone, "cache").map(|(s, r, _)| (s, r));
        assert_eq!(c(&Step::Settled, true), Some(("True", "Current")));
        assert_eq!(c(&Step::Settled, false), None, "kept as it was");
        for s in [
            Step::Start("1".into()),
            Step::Rolling {
                updated: 0,
                total: 3,
            },
            Step::Finish,
        ] {
            assert_eq!(c(&s, true), Some(("False", "Rotating")), "{s:?}");
        }
        let (_, _, m) = condition(
            &Step::Rolling {
                updated: 1,
                total: 3,
            },
            false,
            "cache",
        )
        .unwrap();
        assert!(
            m.starts_with("1 of 3 members") && m.contains("cache-podkeeper"),
            "{m}"
        );
    }
}
