//! Redis's own order of a rollout (or scale-down, or deletion of members),
//! stated and owned here, as pure edits of the engine's plan around the
//! replication round that [`crate::redis::hooks`] carries out:
//!
//! 1. **Replicas first.** Before the round ([`before_round`]), the recorded
//!    primary is kept out of the engine's deletions and in-place updates;
//!    another outdated Pod goes in its place ([`spare_primary`],
//!    [`spare_primary_in_place`]).
//! 2. **Then the switchover.** When the primary is the one Pod left to go,
//!    it is held back and named *retiring*: the round hands its role over
//!    (`FAILOVER TO` a caught-up replica) before anything else happens to it.
//! 3. **Then the old primary goes.** After the round ([`after_round`]), the
//!    round's primary (the same, or a new one after a failover) is kept out
//!    of the plan; while a `FAILOVER` is under way nothing is deleted or
//!    updated. Once the old primary is a replica, the next reconcile's plan
//!    takes it like any other.
//!
//! Scaling to zero deletes the primary with the others.

use crate::podset::ObservedPod;
use crate::podset::plan::{DeleteReason, Desired, Plan, victim};
use crate::podset::rank::sort_for_deletion;

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
                DeleteReason::Outdated
                | DeleteReason::ResizeInfeasible
                | DeleteReason::ClaimStranded => !current,
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
            plan.in_place[i] = crate::podset::plan::update(desired, c);
            false
        }
        None => {
            plan.in_place.remove(i);
            true
        }
    }
}

/// Step 1 and 2: spares the recorded primary (`recorded`) and returns the
/// Pods about to leave (deleted, updated in place, and the primary when it
/// is held back for its handover): the round never chooses them as primary
/// and hands the role over from them. Pure.
pub fn before_round(
    plan: &mut Plan,
    observed: &[ObservedPod],
    desired: &Desired,
    recorded: Option<&str>,
) -> Vec<String> {
    let held_back = recorded.is_some_and(|pod| spare(plan, observed, desired, pod));
    let mut retiring: Vec<String> = plan
        .delete
        .iter()
        .map(|v| v.name.clone())
        .chain(plan.in_place.iter().map(|u| u.name.clone()))
        .collect();
    if held_back && let Some(pod) = recorded {
        retiring.push(pod.to_string());
    }
    retiring
}

/// Step 3: keeps the round's `primary` out of the plan (spared like the
/// recorded one when it is new, after a failover), and empties the plan
/// while a switchover is under way. The primary is never deleted unless
/// the Redis scales to zero. Pure.
pub fn after_round(
    plan: &mut Plan,
    observed: &[ObservedPod],
    desired: &Desired,
    recorded: Option<&str>,
    primary: Option<&str>,
    switching_over: bool,
) {
    if let Some(p) = primary
        && recorded != Some(p)
    {
        spare(plan, observed, desired, p);
    }
    if switching_over {
        plan.delete.clear();
        plan.in_place.clear();
    }
    if let Some(p) = primary {
        if desired.replicas > 0 {
            plan.delete.retain(|v| v.name != p);
        }
        plan.in_place.retain(|u| u.name != p);
    }
}

/// Keeps `pod` out of the engine's deletions and in-place updates; `true`
/// when it is held back (the one left to go).
fn spare(plan: &mut Plan, observed: &[ObservedPod], desired: &Desired, pod: &str) -> bool {
    let deleted = spare_primary(plan, observed, pod, &desired.revision);
    let updated = spare_primary_in_place(plan, observed, pod, desired);
    deleted || updated
}
