//! Redis's own order of a rollout, as edits of the engine's plan: the
//! replicas go first, then the primary is handed over (a switchover, in
//! [`crate::redis::hooks`]), and only then does the old primary go. Pure.

use crate::podset::ObservedPod;
use crate::podset::plan::{DeleteReason, Desired, Plan, Update, victim};
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
