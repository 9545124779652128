//! A switchover a person asks for: `kubectl annotate redis NAME
//! podkeeper.dev/switchover-to=POD` (that member) or `=any` (the replica a
//! rollout's switchover would pick). The planner carries it out as a
//! rollout's switchover ([`crate::redis::replication::topology`], rule 6:
//! `FAILOVER TO` a linked, caught-up, ready replica, writes paused at most
//! `spec.failover.switchoverTimeoutSeconds`), or refuses it with the
//! reason. Either way the request is answered once: an Event, and the
//! annotation removed (only if it still asks the same: a JSON patch that
//! tests the value first).
//!
//! A request is acted on at most once per object version: until the cache
//! shows the annotation gone, the version it was answered at is remembered
//! and not acted on again (`any` would otherwise move the primary a second
//! time).

use std::collections::HashMap;
use std::sync::Mutex;

use kube::api::{Patch, PatchParams};
use kube::{Api, ResourceExt};

use crate::api::Redis;
use crate::api::names::{FIELD_MANAGER, SWITCHOVER_ANNOTATION};
use crate::podset::Context;
use crate::redis::replication::topology::{Action, Plan, Requested, Waiting};
use crate::runtime::events::EventType;
use crate::runtime::owner::Owner;

/// The annotation's value that asks for the best replica.
pub const ANY: &str = "any";

/// What the Redis's annotation asks for, if anything.
pub fn requested(redis: &Redis) -> Option<Requested> {
    let value = redis.annotations().get(SWITCHOVER_ANNOTATION)?.trim();
    Some(match value {
        "" | ANY => Requested::Best,
        pod => Requested::To(pod.to_string()),
    })
}

/// How a round answers a request: Event type, reason, message.
#[derive(Debug, PartialEq, Eq)]
pub struct Answer {
    pub type_: EventType,
    pub reason: &'static str,
    pub note: String,
}

/// The answer to `requested` from a round's plan and the actions it
/// carried out; `None` while the request waits (something else is being
/// done first, or the last switchover cools down).
pub fn answer(requested: &Requested, plan: &Plan, done: &[Action]) -> Option<Answer> {
    let sent = done.iter().find_map(|a| match a {
        Action::Switchover { from, to, .. } => Some((from, to)),
        _ => None,
    });
    match (sent, &plan.waiting) {
        // A switchover a rollout sent answers only a request it meets.
        (Some((_, to)), _) if matches!(requested, Requested::To(p) if p != to) => None,
        (Some((from, to)), _) => Some(Answer {
            type_: EventType::Normal,
            reason: "SwitchoverRequested",
            note: format!("Handing the primary role from {from} over to {to}, as asked"),
        }),
        (None, Some(Waiting::SwitchoverRefused { reason })) => Some(Answer {
            type_: EventType::Warning,
            reason: "SwitchoverRefused",
            note: format!("The switchover asked for is refused: {reason}"),
        }),
        (None, Some(Waiting::SwitchoverNotNeeded { pod })) => Some(Answer {
            type_: EventType::Normal,
            reason: "SwitchoverNotNeeded",
            note: format!("{pod}, asked to be primary, already is"),
        }),
        _ => None,
    }
}

/// The object versions whose request was answered, per Redis uid.
#[derive(Debug, Default)]
pub struct Answered(Mutex<HashMap<String, String>>);

impl Answered {
    fn map(&self) -> std::sync::MutexGuard<'_, HashMap<String, String>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The request of this version of `redis`, unless it was answered.
    pub fn pending(&self, redis: &Redis) -> Option<Requested> {
        let uid = redis.uid()?;
        let request = requested(redis);
        let mut answered = self.map();
        match request {
            None => {
                answered.remove(&uid);
                None
            }
            Some(_) if answered.get(&uid) == redis.resource_version().as_ref() => None,
            r => r,
        }
    }

    /// Answers the request of `redis`: the Event, then the annotation
    /// removed if it still asks the same.
    pub async fn answer(&self, redis: &Redis, ctx: &Context, owner: &Owner, answer: Answer) {
        let (Some(uid), Some(version), Some(value)) = (
            redis.uid(),
            redis.resource_version(),
            redis.annotations().get(SWITCHOVER_ANNOTATION).cloned(),
        ) else {
            return;
        };
        self.map().insert(uid, version);
        ctx.executor
            .event(
                owner,
                answer.type_,
                answer.reason,
                "Switchover",
                answer.note,
            )
            .await;
        let path = format!(
            "/metadata/annotations/{}",
            SWITCHOVER_ANNOTATION.replace('~', "~0").replace('/', "~1")
        );
        let ops = serde_json::json!([
            {"op": "test", "path": path, "value": value},
            {"op": "remove", "path": path},
        ]);
        let api: Api<Redis> = Api::namespaced(ctx.client.clone(), &owner.namespace);
        let patch = match serde_json::from_value(ops) {
            Ok(p) => Patch::Json::<()>(p),
            Err(e) => return tracing::warn!(error = %e, "switchover request patch"),
        };
        let params = PatchParams {
            field_manager: Some(FIELD_MANAGER.into()),
            ..Default::default()
        };
        if let Err(e) = api.patch(&owner.name, &params, &patch).await {
            // Changed meanwhile (a new request), or refused: the new
            // request is answered on its own; a refused removal leaves
            // this version remembered as answered.
            tracing::info!(error = %e, "switchover request annotation not removed");
        }
    }

    pub fn forget(&self, uid: &str) {
        self.map().remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn redis() -> Redis {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
            "metadata": {"name": "cache", "namespace": "ns"},
            "spec": {"replicas": 3},
        }))
        .unwrap()
    }

    fn plan(waiting: Option<Waiting>) -> Plan {
        Plan {
            primary: Some("a".into()),
            record: None,
            actions: Vec::new(),
            cause: None,
            waiting,
            replicated: true,
            requeue_after: Duration::from_secs(1),
        }
    }

    fn switchover(to: &str) -> Action {
        Action::Switchover {
            from: "a".into(),
            from_ip: "10.0.0.1".into(),
            from_port: 6379,
            to: to.into(),
            to_ip: "10.0.0.2".into(),
            to_port: 6379,
            timeout: Duration::from_secs(5),
        }
    }

    #[test]
    fn the_annotation_names_a_member_or_asks_for_any() {
        let mut r = redis();
        assert_eq!(requested(&r), None);
        for (value, want) in [
            ("any", Requested::Best),
            ("", Requested::Best),
            (" cache-b ", Requested::To("cache-b".into())),
        ] {
            r.annotations_mut()
                .insert(SWITCHOVER_ANNOTATION.into(), value.into());
            assert_eq!(requested(&r), Some(want), "{value:?}");
        }
    }

    #[test]
    fn a_request_is_answered_when_sent_refused_or_not_needed_and_waits_otherwise() {
        let best = Requested::Best;
        let to_b = Requested::To("b".into());
        let sent = answer(&to_b, &plan(None), &[switchover("b")]).unwrap();
        assert_eq!(
            (sent.type_, sent.reason),
            (EventType::Normal, "SwitchoverRequested")
        );
        assert!(sent.note.contains("from a over to b"), "{}", sent.note);
        // A rollout's switchover elsewhere does not answer a named request.
        assert_eq!(answer(&to_b, &plan(None), &[switchover("c")]), None);
        assert!(answer(&best, &plan(None), &[switchover("c")]).is_some());
        let refused = answer(
            &to_b,
            &plan(Some(Waiting::SwitchoverRefused {
                reason: "b is not Ready".into(),
            })),
            &[],
        )
        .unwrap();
        assert_eq!(
            (refused.type_, refused.reason),
            (EventType::Warning, "SwitchoverRefused")
        );
        assert!(refused.note.contains("b is not Ready"));
        let needless = answer(
            &Requested::To("a".into()),
            &plan(Some(Waiting::SwitchoverNotNeeded { pod: "a".into() })),
            &[],
        )
        .unwrap();
        assert_eq!(needless.reason, "SwitchoverNotNeeded");
        // Busy (a FAILOVER under way, a cool-down): the request waits.
        assert_eq!(
            answer(&best, &plan(Some(Waiting::SwitchoverInProgress)), &[]),
            None
        );
    }

    #[test]
    fn a_version_answered_is_not_acted_on_again_but_a_new_request_is() {
        let answered = Answered::default();
        let mut r = redis();
        r.metadata.uid = Some("u".into());
        r.metadata.resource_version = Some("10".into());
        r.annotations_mut()
            .insert(SWITCHOVER_ANNOTATION.into(), ANY.into());
        assert_eq!(answered.pending(&r), Some(Requested::Best));
        answered
            .map()
            .insert("u".into(), r.resource_version().unwrap());
        // The cache still shows the version answered: nothing to do.
        assert_eq!(answered.pending(&r), None);
        // Asked again (a new version with the annotation).
        r.metadata.resource_version = Some("12".into());
        assert_eq!(answered.pending(&r), Some(Requested::Best));
        // Gone: nothing, and nothing remembered.
        r.annotations_mut().clear();
        assert_eq!(answered.pending(&r), None);
        assert!(answered.map().is_empty());
    }
}
