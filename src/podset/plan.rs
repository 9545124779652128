//! The pure planner: `(desired, observed Pods, now)` in; what to create,
//! what to delete and what to report out. No I/O, no clock.
//!
//! Scaling follows the ReplicaSet controller, rollouts follow the Deployment
//! controller's arithmetic, with the Pods of the current template standing in
//! for the new ReplicaSet and all other Pods for the old ones:
//!
//! - RollingUpdate: total active Pods never exceed `replicas + maxSurge`, and
//!   deletions of available Pods never take availability below
//!   `replicas - maxUnavailable`. Unavailable old Pods go first.
//! - Recreate: every old Pod is deleted, and new ones are created only once no
//!   old Pod exists at all, terminating ones included.
//! - Paused: no Pod is replaced; scaling still applies (new Pods use the
//!   current template).
//!
//! Finished Pods (Succeeded or Failed) do not count and are replaced, but
//! not deleted: as with ReplicaSets they stay for the Pod garbage collector
//! (or the owner's deletion), so their status (an eviction's reason, say)
//! can still be read. Replacements back off when Pods keep finishing: a
//! Pod the kubelet rejects at once would otherwise be a tight create loop.

use k8s_openapi::jiff::Timestamp;

use crate::podset::ObservedPod;
use crate::podset::inplace::Change;
use crate::podset::rank::sort_for_deletion;
use crate::podset::revision::InPlaceKeys;

/// How outdated Pods are replaced. Numbers are absolute, already resolved
/// from percentages against `replicas`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Strategy {
    Recreate,
    RollingUpdate {
        max_surge: i32,
        max_unavailable: i32,
    },
}

/// What the owner asks for.
#[derive(Clone, Debug, PartialEq)]
pub struct Desired {
    pub replicas: i32,
    /// Template hash of the current template.
    pub revision: String,
    pub strategy: Strategy,
    pub min_ready_seconds: i64,
    pub paused: bool,
    /// In-place updates, for kinds that opt in (`None`: every outdated Pod
    /// is replaced).
    pub in_place: Option<InPlace>,
}

/// How a kind lets outdated Pods be updated in place (see
/// [`crate::podset::inplace`]). With a rolling update, an outdated Pod whose
/// template differs from the current one only in container images (or,
/// with `resize`, in images and resources) is updated where it runs
/// instead of replaced. An updating Pod is unavailable until it has
/// settled, so at most `max_unavailable` (or the strategy's maxUnavailable,
/// if higher) Pods are unavailable because of it.
#[derive(Clone, Debug, PartialEq)]
pub struct InPlace {
    /// The current template's in-place keys.
    pub keys: InPlaceKeys,
    pub max_unavailable: i32,
    /// Resources may change in place too (the `resize` subresource).
    pub resize: bool,
}

/// A Pod to update in place.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Update {
    pub name: String,
    pub uid: String,
    pub change: Change,
    /// The plan counted the Pod as not Ready, so updating it took nothing
    /// from the Pods available. A Pod that turned Ready between the plan
    /// and the update is left to the next round, which counts it (else it
    /// would be taken below the budget: seen by the chaos test).
    pub counted_unready: bool,
}

/// Why a Pod is to be deleted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeleteReason {
    /// More Pods than replicas.
    ScaleDown,
    /// Its template is outdated and a rollout replaces it.
    Outdated,
    /// Its owner is being deleted.
    Cleanup,
    /// It was updated in place, and its node cannot give it the resources
    /// asked for (the kubelet reported the resize infeasible).
    ResizeInfeasible,
    /// Its claim's volume is on a node it cannot run on (a kind's own
    /// decision, not the planner's: see `crate::redis::disruption`).
    ClaimStranded,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Victim {
    pub name: String,
    pub uid: String,
    pub reason: DeleteReason,
}

/// Counts for status, in the Deployment/ReplicaSet sense.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    /// Active Pods (neither terminating nor finished), any template.
    pub replicas: i32,
    /// Active Pods on the current template.
    pub updated: i32,
    pub ready: i32,
    /// Ready for at least minReadySeconds.
    pub available: i32,
    /// `replicas` wanted minus available, at least 0.
    pub unavailable: i32,
    /// Pods still terminating.
    pub terminating: i32,
}

/// The planner's output.
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// Pods to create from the current template.
    pub create: i32,
    /// Pods to delete, first to go first.
    pub delete: Vec<Victim>,
    /// Outdated Pods to update in place, first to go first.
    pub in_place: Vec<Update>,
    pub counts: Counts,
    /// Every Pod is on the current template, there are exactly `replicas`,
    /// all available, and none is terminating.
    pub complete: bool,
    /// Outdated Pods exist and the rollout is not paused.
    pub rolling: bool,
    /// Seconds until a ready Pod becomes available (minReadySeconds), when
    /// that will change the plan or the counts.
    pub recheck_after_seconds: Option<i64>,
}

/// Plans one step towards `desired`.
pub fn plan(desired: &Desired, pods: &[ObservedPod], now: Timestamp) -> Plan {
    let replicas = desired.replicas.max(0);
    let min_ready = desired.min_ready_seconds;
    let available = |p: &ObservedPod| p.is_available(min_ready, now);

    let active: Vec<&ObservedPod> = pods.iter().filter(|p| p.is_active()).collect();
    // A Pod whose in-place resize proved infeasible is outdated, whatever
    // its label says: it is replaced.
    let is_current = |p: &ObservedPod| {
        p.revision.as_deref() == Some(desired.revision.as_str()) && !p.resize_infeasible
    };
    let new: Vec<&ObservedPod> = active.iter().copied().filter(|p| is_current(p)).collect();
    let old: Vec<&ObservedPod> = active.iter().copied().filter(|p| !is_current(p)).collect();

    let mut delete: Vec<Victim> = Vec::new();
    let mut in_place: Vec<Update> = Vec::new();
    let mut create = 0;

    let total = active.len() as i32;
    if desired.paused || old.is_empty() {
        // Plain scaling of whatever is there.
        let group = if desired.paused { &active } else { &new };
        let diff = replicas - group.len() as i32;
        // Recreate: Pods of another template still terminating block new ones.
        let recreate_waiting = desired.strategy == Strategy::Recreate
            && !desired.paused
            && pods.iter().any(|p| p.terminating && !is_current(p));
        if diff > 0 && !recreate_waiting {
            create = diff;
        } else if diff < 0 {
            delete.extend(
                ranked(group)
                    .into_iter()
                    .take((-diff) as usize)
                    .map(|p| victim(p, DeleteReason::ScaleDown)),
            );
        }
    } else {
        match desired.strategy {
            Strategy::Recreate => {
                delete.extend(
                    ranked(&old)
                        .into_iter()
                        .map(|p| victim(p, DeleteReason::Outdated)),
                );
                let old_remaining = pods
                    .iter()
                    .any(|p| !is_current(p) && (p.terminating || p.is_active()));
                // Old Pods are being deleted in this very step, so none may
                // be created until the next one sees them gone.
                if !old_remaining && (new.len() as i32) < replicas {
                    create = replicas - new.len() as i32;
                }
            }
            Strategy::RollingUpdate {
                max_surge,
                max_unavailable,
            } => {
                let new_count = new.len() as i32;
                // Outdated Pods that can be updated in place will become
                // current without a new Pod; the best of them are kept for
                // that (as many as are still needed), the others replaced.
                let (mut updatable, mut replace): (Vec<&ObservedPod>, Vec<&ObservedPod>) =
                    (Vec::new(), Vec::new());
                for p in &old {
                    match in_place_change(desired, p) {
                        Some(_) => updatable.push(p),
                        None => replace.push(p),
                    }
                }
                let updatable = ranked(&updatable);
                let excess = updatable
                    .len()
                    .saturating_sub((replicas - new_count).max(0) as usize);
                replace.extend(updatable[..excess].iter().copied());
                let updatable = &updatable[excess..];
                let becoming = new_count + updatable.len() as i32;
                if becoming < replicas {
                    let room = replicas + max_surge.max(0) - total;
                    create = (replicas - becoming).min(room).max(0);
                } else if new_count > replicas {
                    delete.extend(
                        ranked(&new)
                            .into_iter()
                            .take((new_count - replicas) as usize)
                            .map(|p| victim(p, DeleteReason::ScaleDown)),
                    );
                }

                let min_available = replicas - max_unavailable.max(0);
                let available_count = active.iter().filter(|p| available(p)).count() as i32;
                let new_unavailable = new.iter().filter(|p| !available(p)).count() as i32;
                let mut budget = total - min_available - new_unavailable;
                let old_ranked = ranked(&replace);
                let outdated = |p: &ObservedPod| {
                    if p.resize_infeasible {
                        DeleteReason::ResizeInfeasible
                    } else {
                        DeleteReason::Outdated
                    }
                };
                // Old Pods that are not available can go without hurting
                // availability.
                for p in old_ranked.iter().filter(|p| !available(p)) {
                    if budget <= 0 {
                        break;
                    }
                    delete.push(victim(p, outdated(p)));
                    budget -= 1;
                }
                // Available old Pods go only as far as availability allows.
                let mut may_remove_available = available_count - min_available;
                let mut available_left = available_count;
                for p in old_ranked.iter().filter(|p| available(p)) {
                    if may_remove_available <= 0 {
                        break;
                    }
                    delete.push(victim(p, outdated(p)));
                    may_remove_available -= 1;
                    available_left -= 1;
                }
                // In place: unavailable Pods first (they cost nothing), then
                // available ones as far as the in-place bound allows.
                if let Some(ip) = &desired.in_place {
                    let floor = replicas - ip.max_unavailable.max(max_unavailable).max(0);
                    for p in updatable.iter().filter(|p| !available(p)) {
                        in_place.push(update(desired, p));
                    }
                    for p in updatable.iter().filter(|p| available(p)) {
                        if available_left - 1 < floor {
                            break;
                        }
                        in_place.push(update(desired, p));
                        available_left -= 1;
                    }
                }
            }
        }
    }

    let mut recheck_after_seconds = active
        .iter()
        .filter(|p| !available(p))
        .filter_map(|p| p.ready_since)
        .map(|since| (since.as_second() + min_ready - now.as_second()).max(1))
        .min();
    if create > 0
        && let Some(wait) = finished_backoff(pods, now)
    {
        create = 0;
        recheck_after_seconds = Some(recheck_after_seconds.map_or(wait, |r| r.min(wait)));
    }

    let available_count = active.iter().filter(|p| available(p)).count() as i32;
    let counts = Counts {
        replicas: total,
        updated: new.len() as i32,
        ready: active.iter().filter(|p| p.is_ready()).count() as i32,
        available: available_count,
        unavailable: (replicas - available_count).max(0),
        terminating: pods.iter().filter(|p| p.terminating).count() as i32,
    };
    let complete = old.is_empty()
        && new.len() as i32 == replicas
        && new.iter().all(|p| available(p))
        && counts.terminating == 0
        && delete.is_empty();

    Plan {
        create,
        delete,
        in_place,
        counts,
        complete,
        rolling: !old.is_empty() && !desired.paused,
        recheck_after_seconds,
    }
}

/// Finished Pods created this recently count towards the backoff.
pub const FINISHED_WINDOW_SECONDS: i64 = 600;
/// The longest wait before replacing Pods that keep finishing.
pub const FINISHED_BACKOFF_MAX_SECONDS: i64 = 300;

/// Seconds to wait before creating again, when Pods keep finishing: with
/// `k` finished Pods created in the last [`FINISHED_WINDOW_SECONDS`], the
/// first replacement goes at once, then 1, 2, 4, ... seconds (at most
/// [`FINISHED_BACKOFF_MAX_SECONDS`]) after the newest of them was created.
/// A Pod that ran for long and then failed is replaced at once.
pub fn finished_backoff(pods: &[ObservedPod], now: Timestamp) -> Option<i64> {
    let recent: Vec<i64> = pods
        .iter()
        .filter(|p| !p.terminating && p.is_finished())
        .map(|p| p.created.as_second())
        .filter(|c| now.as_second() - c < FINISHED_WINDOW_SECONDS)
        .collect();
    let k = recent.len() as u32;
    if k < 2 {
        return None;
    }
    let newest = recent.into_iter().max()?;
    let delay = (1i64 << (k - 2).min(16)).min(FINISHED_BACKOFF_MAX_SECONDS);
    let left = newest + delay - now.as_second();
    (left > 0).then_some(left)
}

/// How `p`, an outdated Pod, can be updated in place to `desired`, if it
/// can: the kind opted in, the Pod has in-place keys that match, and the
/// API server has not refused to resize it for this revision.
pub fn in_place_change(desired: &Desired, p: &ObservedPod) -> Option<Change> {
    let ip = desired.in_place.as_ref()?;
    if p.resize_infeasible || p.terminating {
        return None;
    }
    let change = p.in_place.as_ref()?.change_to(&ip.keys, ip.resize)?;
    if change == Change::Resources && p.resize_refused.as_deref() == Some(&desired.revision) {
        return None;
    }
    Some(change)
}

/// The in-place update of the outdated Pod `p` to `desired`.
pub fn update(desired: &Desired, p: &ObservedPod) -> Update {
    Update {
        name: p.name.clone(),
        uid: p.uid.clone(),
        change: in_place_change(desired, p).unwrap_or(Change::Images),
        counted_unready: !p.is_ready(),
    }
}

fn ranked<'a>(pods: &[&'a ObservedPod]) -> Vec<&'a ObservedPod> {
    let mut v = pods.to_vec();
    sort_for_deletion(&mut v);
    v
}

pub fn victim(p: &ObservedPod, reason: DeleteReason) -> Victim {
    Victim {
        name: p.name.clone(),
        uid: p.uid.clone(),
        reason,
    }
}

/// Resolves a Deployment-style `maxSurge`/`maxUnavailable` pair against
/// `replicas`: percentages round up for surge and down for unavailability,
/// and if both come to zero, unavailability becomes one (as Deployments do).
pub fn resolve_rolling(
    replicas: i32,
    max_surge: IntOrPercent,
    max_unavailable: IntOrPercent,
) -> Strategy {
    let surge = max_surge.resolve(replicas, true);
    let mut unavailable = max_unavailable.resolve(replicas, false);
    if surge == 0 && unavailable == 0 {
        unavailable = 1;
    }
    Strategy::RollingUpdate {
        max_surge: surge,
        max_unavailable: unavailable,
    }
}

/// An absolute number or a percentage of replicas.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IntOrPercent {
    Int(i32),
    Percent(i32),
}

impl IntOrPercent {
    /// Parses `"25%"` or `"3"`.
    pub fn parse(s: &str) -> Option<Self> {
        match s.strip_suffix('%') {
            Some(p) => p.trim().parse().ok().map(IntOrPercent::Percent),
            None => s.trim().parse().ok().map(IntOrPercent::Int),
        }
    }

    fn resolve(self, replicas: i32, round_up: bool) -> i32 {
        match self {
            IntOrPercent::Int(n) => n.max(0),
            IntOrPercent::Percent(p) => {
                let scaled = i64::from(replicas.max(0)) * i64::from(p.max(0));
                let v = if round_up {
                    (scaled + 99) / 100
                } else {
                    scaled / 100
                };
                v as i32
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podset::pods::Phase;
    use crate::podset::pods::test_support::{pending, pod};
    use proptest::prelude::{prop_assert, prop_assert_eq, proptest};

    fn now() -> Timestamp {
        Timestamp::from_second(10_000).unwrap()
    }

    fn desired(replicas: i32, rev: &str, strategy: Strategy) -> Desired {
        Desired {
            replicas,
            revision: rev.into(),
            strategy,
            min_ready_seconds: 0,
            paused: false,
            in_place: None,
        }
    }

    const ONE_AT_A_TIME: Strategy = Strategy::RollingUpdate {
        max_surge: 1,
        max_unavailable: 0,
    };

    fn names(v: &[Victim]) -> Vec<&str> {
        v.iter().map(|v| v.name.as_str()).collect()
    }

    #[test]
    fn scales_up_from_nothing_and_down_by_rank() {
        let p = plan(&desired(5, "h", ONE_AT_A_TIME), &[], now());
        assert_eq!(p.create, 5);
        assert!(p.delete.is_empty() && !p.complete);

        let pods: Vec<_> = (0..5).map(|i| pod(&format!("p{i}"), "h", i)).collect();
        let p = plan(&desired(2, "h", ONE_AT_A_TIME), &pods, now());
        assert_eq!(p.create, 0);
        // Newest first when everything else is equal.
        assert_eq!(names(&p.delete), ["p4", "p3", "p2"]);
        assert!(p.delete.iter().all(|v| v.reason == DeleteReason::ScaleDown));
    }

    #[test]
    fn negative_replicas_mean_zero() {
        let pods = vec![pod("a", "h", 1)];
        let p = plan(&desired(-3, "h", ONE_AT_A_TIME), &pods, now());
        assert_eq!(names(&p.delete), ["a"]);
        assert_eq!(p.counts.unavailable, 0);
    }

    #[test]
    fn terminating_and_finished_pods_do_not_count_and_finished_ones_stay() {
        let mut gone = pod("gone", "h", 1);
        gone.terminating = true;
        let mut failed = pod("failed", "h", 2);
        failed.phase = Phase::Failed;
        failed.ready_since = None;
        let ok = pod("ok", "h", 3);
        let p = plan(&desired(2, "h", ONE_AT_A_TIME), &[gone, failed, ok], now());
        assert_eq!(p.create, 1);
        assert!(p.delete.is_empty(), "finished Pods are left for PodGC");
        assert_eq!(p.counts.replicas, 1);
        assert_eq!(p.counts.terminating, 1);
    }

    #[test]
    fn pods_that_keep_finishing_are_replaced_with_backoff() {
        let t = now().as_second();
        let failed = |name: &str, created: i64| {
            let mut p = pod(name, "h", created);
            p.phase = Phase::Failed;
            p.ready_since = None;
            p
        };
        // One rejected Pod: replaced at once.
        let p = plan(
            &desired(1, "h", ONE_AT_A_TIME),
            &[failed("f1", t - 1)],
            now(),
        );
        assert_eq!(p.create, 1);
        // Four in a row, the newest a second old: wait 4 s from its creation.
        let pods: Vec<_> = (0..4)
            .map(|i| failed(&format!("f{i}"), t - 10 + 3 * i))
            .collect();
        let p = plan(&desired(1, "h", ONE_AT_A_TIME), &pods, now());
        assert_eq!(p.create, 0);
        assert_eq!(p.recheck_after_seconds, Some(3));
        let later = Timestamp::from_second(t + 3).unwrap();
        assert_eq!(
            plan(&desired(1, "h", ONE_AT_A_TIME), &pods, later).create,
            1
        );
        // Old failures do not hold anything back.
        let old: Vec<_> = (0..4)
            .map(|i| failed(&format!("o{i}"), t - 3600 + i))
            .collect();
        assert_eq!(plan(&desired(1, "h", ONE_AT_A_TIME), &old, now()).create, 1);
    }

    #[test]
    fn one_at_a_time_rollout_waits_for_the_replacement() {
        let d = desired(3, "new", ONE_AT_A_TIME);
        let mut pods: Vec<_> = (0..3).map(|i| pod(&format!("old{i}"), "old", i)).collect();
        let p = plan(&d, &pods, now());
        assert_eq!((p.create, p.delete.len()), (1, 0));
        assert!(p.rolling);

        pods.push(pending("new0", "new", 100));
        let p = plan(&d, &pods, now());
        assert_eq!(
            (p.create, p.delete.len()),
            (0, 0),
            "nothing until the replacement is ready"
        );

        *pods.last_mut().unwrap() = pod("new0", "new", 100);
        let p = plan(&d, &pods, now());
        assert_eq!(p.create, 0);
        assert_eq!(p.delete.len(), 1);
        assert_eq!(p.delete[0].reason, DeleteReason::Outdated);
    }

    #[test]
    fn unavailable_old_pods_go_first() {
        let d = desired(3, "new", ONE_AT_A_TIME);
        let mut broken = pod("old-broken", "old", 1);
        broken.ready_since = None;
        let mut pods = vec![broken, pod("old1", "old", 2), pod("old2", "old", 3)];
        let p = plan(&d, &pods, now());
        assert_eq!((p.create, p.delete.len()), (1, 0));
        pods.push(pod("new0", "new", 4));
        let p = plan(&d, &pods, now());
        assert_eq!(names(&p.delete), ["old-broken"]);
    }

    #[test]
    fn recreate_deletes_all_old_before_creating() {
        let d = desired(2, "new", Strategy::Recreate);
        let pods = vec![pod("a", "old", 1), pod("b", "old", 2)];
        let p = plan(&d, &pods, now());
        assert_eq!(p.create, 0);
        assert_eq!(p.delete.len(), 2);

        let mut terminating = pod("a", "old", 1);
        terminating.terminating = true;
        let p = plan(&d, &[terminating], now());
        assert_eq!(p.create, 0, "an old Pod still terminating blocks creation");

        let p = plan(&d, &[], now());
        assert_eq!(p.create, 2);
    }

    #[test]
    fn paused_scales_but_does_not_replace() {
        let mut d = desired(3, "new", ONE_AT_A_TIME);
        d.paused = true;
        let pods = vec![pod("a", "old", 1), pod("b", "old", 2)];
        let p = plan(&d, &pods, now());
        assert_eq!((p.create, p.delete.len()), (1, 0));
        assert!(!p.rolling && !p.complete);
        d.replicas = 1;
        let p = plan(&d, &pods, now());
        assert_eq!(names(&p.delete), ["b"]);
    }

    #[test]
    fn min_ready_seconds_governs_availability_and_recheck() {
        let mut d = desired(1, "h", ONE_AT_A_TIME);
        d.min_ready_seconds = 30;
        let mut p0 = pod("a", "h", 0);
        p0.ready_since = Some(Timestamp::from_second(now().as_second() - 10).unwrap());
        let p = plan(&d, &[p0], now());
        assert_eq!(p.counts.ready, 1);
        assert_eq!(p.counts.available, 0);
        assert_eq!(p.counts.unavailable, 1);
        assert_eq!(p.recheck_after_seconds, Some(20));
        assert!(!p.complete);
    }

    #[test]
    fn complete_only_when_all_current_and_available() {
        let d = desired(2, "h", ONE_AT_A_TIME);
        let p = plan(&d, &[pod("a", "h", 1), pod("b", "h", 2)], now());
        assert!(p.complete && p.create == 0 && p.delete.is_empty());
        assert_eq!(
            p.counts,
            Counts {
                replicas: 2,
                updated: 2,
                ready: 2,
                available: 2,
                unavailable: 0,
                terminating: 0
            }
        );
    }

    #[test]
    fn resolves_percentages_like_deployments() {
        let s = resolve_rolling(10, IntOrPercent::Percent(25), IntOrPercent::Percent(25));
        assert_eq!(
            s,
            Strategy::RollingUpdate {
                max_surge: 3,
                max_unavailable: 2
            }
        );
        let s = resolve_rolling(1, IntOrPercent::Percent(25), IntOrPercent::Percent(25));
        assert_eq!(
            s,
            Strategy::RollingUpdate {
                max_surge: 1,
                max_unavailable: 0
            }
        );
        let s = resolve_rolling(4, IntOrPercent::Int(0), IntOrPercent::Int(0));
        assert_eq!(
            s,
            Strategy::RollingUpdate {
                max_surge: 0,
                max_unavailable: 1
            }
        );
        assert_eq!(IntOrPercent::parse("30%"), Some(IntOrPercent::Percent(30)));
        assert_eq!(IntOrPercent::parse("2"), Some(IntOrPercent::Int(2)));
        assert_eq!(IntOrPercent::parse("x%"), None);
    }

    fn keys(k: &str) -> InPlaceKeys {
        InPlaceKeys {
            but_images: format!("{k}-i"),
            but_resources: format!("{k}-r"),
        }
    }

    fn in_place(replicas: i32, rev: &str, k: InPlaceKeys) -> Desired {
        Desired {
            in_place: Some(InPlace {
                keys: k,
                max_unavailable: 1,
                resize: true,
            }),
            ..desired(replicas, rev, ONE_AT_A_TIME)
        }
    }

    fn with_keys(mut p: ObservedPod, k: InPlaceKeys) -> ObservedPod {
        p.in_place = Some(k);
        p
    }

    #[test]
    fn image_only_changes_update_in_place_one_at_a_time() {
        let d = in_place(3, "new", keys("a"));
        let mut pods: Vec<_> = (0..3)
            .map(|i| with_keys(pod(&format!("old{i}"), "old", i), keys("a")))
            .collect();
        let p = plan(&d, &pods, now());
        assert_eq!((p.create, p.delete.len()), (0, 0), "no surge, no deletion");
        assert_eq!(p.in_place.len(), 1);
        assert_eq!(p.in_place[0].change, Change::Images);
        assert!(p.rolling && !p.complete);
        // The updated Pod is current but not Ready yet: nothing else goes.
        let name = p.in_place[0].name.clone();
        let i = pods.iter().position(|x| x.name == name).unwrap();
        pods[i].revision = Some("new".into());
        pods[i].ready_since = None;
        let p = plan(&d, &pods, now());
        assert!(p.in_place.is_empty() && p.create == 0 && p.delete.is_empty());
        assert_eq!(p.counts.updated, 1);
        // Ready again: the next one.
        pods[i].ready_since = Some(now());
        let next = plan(&d, &pods, now());
        assert_eq!(next.in_place.len(), 1);
        assert!(!next.in_place[0].counted_unready, "a Ready Pod counted");
        // Pods not Ready are updated as taking nothing from the available;
        // the executor leaves one that turned Ready since to the next round.
        for x in &mut pods {
            x.ready_since = None;
        }
        let p = plan(&d, &pods, now());
        assert!(
            p.in_place.iter().all(|u| u.counted_unready),
            "{:?}",
            p.in_place
        );
    }

    #[test]
    fn resources_go_through_resize_and_anything_else_is_replaced() {
        let d = in_place(
            2,
            "new",
            InPlaceKeys {
                but_images: "x".into(),
                ..keys("a")
            },
        );
        let pods = vec![
            with_keys(pod("a", "old", 1), keys("a")),
            with_keys(pod("b", "old", 2), keys("a")),
        ];
        let p = plan(&d, &pods, now());
        assert_eq!(p.in_place.len(), 1);
        assert_eq!(p.in_place[0].change, Change::Resources);
        // A refused resize for this revision: replaced (surge first).
        let mut refused = pods.clone();
        for x in &mut refused {
            x.resize_refused = Some("new".into());
        }
        let p = plan(&d, &refused, now());
        assert!(p.in_place.is_empty());
        assert_eq!(p.create, 1);
        // Other keys: replaced.
        let d = in_place(2, "new", keys("b"));
        let p = plan(&d, &pods, now());
        assert!(p.in_place.is_empty());
        assert_eq!(p.create, 1);
        // An infeasible resize makes a current Pod outdated.
        let mut stuck = with_keys(pod("c", "new", 3), keys("b"));
        stuck.resize_infeasible = true;
        let p = plan(&in_place(1, "new", keys("b")), &[stuck], now());
        assert_eq!(p.create, 1);
        assert_eq!(p.counts.updated, 0);
    }

    #[test]
    fn with_fewer_replicas_the_worst_updatable_pods_are_replaced_not_updated() {
        let d = Desired {
            strategy: Strategy::RollingUpdate {
                max_surge: 1,
                max_unavailable: 1,
            },
            ..in_place(2, "new", keys("a"))
        };
        let pods: Vec<_> = (0..3)
            .map(|i| with_keys(pod(&format!("old{i}"), "old", i), keys("a")))
            .collect();
        let p = plan(&d, &pods, now());
        assert_eq!(p.create, 0);
        // The newest goes (deletion order); of the two kept, one is updated
        // (2 replicas, 1 may be unavailable), the other waits.
        assert_eq!(names(&p.delete), ["old2"]);
        let updated: Vec<&str> = p.in_place.iter().map(|u| u.name.as_str()).collect();
        assert_eq!(updated, ["old1"]);
    }

    /// Simulates a rollout: each step applies the plan, created Pods become
    /// ready (and available) one step later, deleted Pods vanish at once.
    fn simulate(replicas: i32, surge: i32, unavailable: i32, start: i32) -> Vec<(i32, i32)> {
        let strategy = resolve_rolling(
            replicas,
            IntOrPercent::Int(surge),
            IntOrPercent::Int(unavailable),
        );
        let d = desired(replicas, "new", strategy);
        let mut pods: Vec<ObservedPod> = (0..start)
            .map(|i| pod(&format!("old{i}"), "old", i as i64))
            .collect();
        let mut seen = Vec::new();
        let mut n = 0;
        for _ in 0..200 {
            let p = plan(&d, &pods, now());
            if p.complete {
                break;
            }
            pods.retain(|x| !p.delete.iter().any(|v| v.uid == x.uid));
            for x in pods.iter_mut() {
                if x.ready_since.is_none() {
                    x.ready_since = Some(Timestamp::from_second(0).unwrap());
                    x.phase = Phase::Running;
                    x.node = Some("n".into());
                }
            }
            for _ in 0..p.create {
                n += 1;
                pods.push(pending(&format!("new{n}"), "new", 1000 + n));
            }
            let available = pods.iter().filter(|x| x.is_available(0, now())).count() as i32;
            seen.push((pods.len() as i32, available));
        }
        assert!(plan(&d, &pods, now()).complete, "rollout did not finish");
        seen
    }

    proptest! {
        /// A rolling update never exceeds replicas + maxSurge Pods and never
        /// drops below replicas - maxUnavailable available Pods, and it ends.
        #[test]
        fn rolling_update_respects_its_bounds(replicas in 1i32..12, surge in 0i32..4, unavailable in 0i32..4) {
            let strategy = resolve_rolling(replicas, IntOrPercent::Int(surge), IntOrPercent::Int(unavailable));
            let Strategy::RollingUpdate { max_surge, max_unavailable } = strategy else { unreachable!() };
            for (total, available) in simulate(replicas, surge, unavailable, replicas) {
                prop_assert!(total <= replicas + max_surge, "total {} > {} + {}", total, replicas, max_surge);
                prop_assert!(available >= replicas - max_unavailable, "available {} < {} - {}", available, replicas, max_unavailable);
            }
        }

        /// Scaling alone converges to exactly the replicas asked for.
        #[test]
        fn scaling_converges(start in 0usize..20, replicas in 0i32..20) {
            let d = desired(replicas, "h", ONE_AT_A_TIME);
            let mut pods: Vec<_> = (0..start).map(|i| pod(&format!("p{i}"), "h", i as i64)).collect();
            let p = plan(&d, &pods, now());
            pods.retain(|x| !p.delete.iter().any(|v| v.uid == x.uid));
            prop_assert_eq!(pods.len() as i32 + p.create, replicas);
        }
    }
}
