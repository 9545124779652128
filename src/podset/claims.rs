//! A PersistentVolumeClaim per Pod, for kinds that keep data (a Redis with
//! `spec.storage`): which claim each new Pod takes, and which claims no
//! Pod needs any more. Pure: the claims and Pods as observed in, choices
//! out.
//!
//! A claim outlives its Pods. It is named after the Pod it was first made
//! for, and a Pod carries the name of the claim it runs on in
//! [`crate::api::names::CLAIM_LABEL`]. Unlike a StatefulSet's, a claim is
//! not tied to a Pod name: a new Pod takes any claim of its owner that no
//! Pod holds, the one `prefer` names first (Redis: its primary's), then the
//! oldest. A claim still held by a terminating Pod is waited for rather than
//! replaced by an empty one: two processes never share a data directory,
//! and a member never comes back empty while its data is on the way.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::PersistentVolumeClaimSpec;
use k8s_openapi::jiff::Timestamp;

use crate::podset::ObservedPod;

/// How a kind's Pods get their claims.
#[derive(Clone, Debug, PartialEq)]
pub struct ClaimTemplate {
    /// The template's volume that is the claim (its `claimName` is filled
    /// in per Pod).
    pub volume: String,
    pub spec: PersistentVolumeClaimSpec,
    /// Labels of every claim: the kind's selector labels.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Claims left free by a scale-down are deleted (else kept for a later
    /// scale-up).
    pub delete_when_scaled: bool,
    /// Claims of a deleted owner are deleted once its Pods are gone (else
    /// kept, without an owner, for an owner of the same name).
    pub delete_when_deleted: bool,
    /// The claim a new Pod takes first when it is free.
    pub prefer: Option<String>,
}

/// One of the owner's claims, as observed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ObservedClaim {
    pub name: String,
    pub uid: String,
    pub created: Timestamp,
    /// Has a deletionTimestamp.
    pub deleting: bool,
    /// Let go by a deleted owner with its primary's data
    /// ([`crate::api::names::LAST_PRIMARY_ANNOTATION`]).
    pub last_primary: bool,
}

/// The claim a Pod about to be created runs on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// A claim no Pod holds.
    Reuse(String),
    /// A new claim, named after the Pod.
    New,
}

/// What the Pods to create get.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Assignment {
    /// One per Pod to create now.
    pub choices: Vec<Choice>,
    /// Claims whose terminating Pods still hold them: as many Pods wait.
    pub waiting_for: Vec<String>,
}

/// Claims held by a Pod that has not finished (a finished Pod's containers
/// no longer write), and those held only by terminating ones.
fn holders(pods: &[ObservedPod]) -> (BTreeSet<&str>, BTreeSet<&str>) {
    let mut live = BTreeSet::new();
    let mut terminating = BTreeSet::new();
    for p in pods.iter().filter(|p| !p.is_finished()) {
        if let Some(c) = p.claim.as_deref() {
            if p.terminating {
                terminating.insert(c);
            } else {
                live.insert(c);
            }
        }
    }
    let releasing = terminating.difference(&live).copied().collect();
    (live, releasing)
}

/// Claims that no Pod holds, the preferred one first, then oldest first.
fn free<'a>(
    claims: &'a [ObservedClaim],
    pods: &[ObservedPod],
    prefer: Option<&str>,
) -> Vec<&'a ObservedClaim> {
    let (live, releasing) = holders(pods);
    let mut free: Vec<&ObservedClaim> = claims
        .iter()
        .filter(|c| !c.deleting)
        .filter(|c| !live.contains(c.name.as_str()) && !releasing.contains(c.name.as_str()))
        .collect();
    free.sort_by_key(|c| {
        (
            Some(c.name.as_str()) != prefer,
            !c.last_primary,
            c.created,
            c.name.clone(),
        )
    });
    free
}

/// The claims for `count` new Pods: free ones first; then, for each claim
/// a terminating Pod still holds, one Pod waits; the rest get new claims.
pub fn assign(
    count: usize,
    claims: &[ObservedClaim],
    pods: &[ObservedPod],
    prefer: Option<&str>,
) -> Assignment {
    let mut free = free(claims, pods, prefer).into_iter();
    let (_, releasing) = holders(pods);
    let releasing: Vec<&str> = releasing
        .into_iter()
        .filter(|r| claims.iter().any(|c| c.name == *r && !c.deleting))
        .collect();
    let mut releasing = releasing.into_iter();
    let mut out = Assignment::default();
    for _ in 0..count {
        if let Some(c) = free.next() {
            out.choices.push(Choice::Reuse(c.name.clone()));
        } else if let Some(r) = releasing.next() {
            out.waiting_for.push(r.to_string());
        } else {
            out.choices.push(Choice::New);
        }
    }
    out
}

/// Claims to delete after a scale-down with `whenScaled: Delete`: free
/// claims beyond `replicas`, newest first (the preferred one last). Only
/// when no Pod is to be created (a free claim is about to be taken
/// otherwise).
pub fn surplus<'a>(
    claims: &'a [ObservedClaim],
    pods: &[ObservedPod],
    replicas: i32,
    prefer: Option<&str>,
) -> Vec<&'a ObservedClaim> {
    let kept = claims.iter().filter(|c| !c.deleting).count();
    let over = kept.saturating_sub(usize::try_from(replicas.max(0)).unwrap_or(0));
    let mut free = free(claims, pods, prefer);
    free.reverse();
    free.truncate(over);
    free
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podset::pods::test_support::pod;

    fn claim(name: &str, created: i64) -> ObservedClaim {
        ObservedClaim {
            name: name.into(),
            uid: format!("uid-{name}"),
            created: Timestamp::from_second(created).unwrap(),
            deleting: false,
            last_primary: false,
        }
    }

    fn on(name: &str, claim: &str) -> ObservedPod {
        let mut p = pod(name, "r1", 1);
        p.claim = Some(claim.into());
        p
    }

    fn terminating(mut p: ObservedPod) -> ObservedPod {
        p.terminating = true;
        p
    }

    #[test]
    fn a_replacement_takes_the_claim_its_predecessor_left() {
        let claims = [claim("r-a", 1), claim("r-b", 2), claim("r-c", 3)];
        // r-b's Pod is gone; r-a and r-c are held.
        let pods = [on("r-x", "r-a"), on("r-y", "r-c")];
        let a = assign(1, &claims, &pods, None);
        assert_eq!(a.choices, [Choice::Reuse("r-b".into())]);
        assert!(a.waiting_for.is_empty());
    }

    #[test]
    fn every_member_deleted_at_once_comes_back_on_its_own_claims_primary_first() {
        let claims = [claim("r-a", 1), claim("r-b", 2), claim("r-c", 3)];
        let a = assign(3, &claims, &[], Some("r-c"));
        assert_eq!(
            a.choices,
            [
                Choice::Reuse("r-c".into()),
                Choice::Reuse("r-a".into()),
                Choice::Reuse("r-b".into())
            ]
        );
    }

    #[test]
    fn a_claim_kept_with_the_last_primarys_data_is_taken_first_by_an_adopter() {
        let mut kept = claim("r-c", 3);
        kept.last_primary = true;
        let claims = [claim("r-a", 1), claim("r-b", 2), kept];
        let a = assign(1, &claims, &[], None);
        assert_eq!(a.choices, [Choice::Reuse("r-c".into())]);
    }

    #[test]
    fn a_claim_a_terminating_pod_still_holds_is_waited_for_not_replaced() {
        let claims = [claim("r-a", 1), claim("r-b", 2)];
        let pods = [on("r-x", "r-a"), terminating(on("r-y", "r-b"))];
        let a = assign(1, &claims, &pods, None);
        assert!(a.choices.is_empty(), "no empty member beside r-b's data");
        assert_eq!(a.waiting_for, ["r-b"]);
        // A scale-up beyond it gets a new claim.
        let a = assign(2, &claims, &pods, None);
        assert_eq!(a.choices, [Choice::New]);
        assert_eq!(a.waiting_for, ["r-b"]);
    }

    #[test]
    fn a_finished_pod_holds_no_claim_and_a_deleting_claim_is_never_taken() {
        let mut done = on("r-x", "r-a");
        done.phase = crate::podset::pods::Phase::Failed;
        let mut gone = claim("r-b", 2);
        gone.deleting = true;
        let a = assign(2, &[claim("r-a", 1), gone], &[done], None);
        assert_eq!(a.choices, [Choice::Reuse("r-a".into()), Choice::New]);
    }

    #[test]
    fn a_new_set_gets_new_claims() {
        let a = assign(3, &[], &[], None);
        assert_eq!(a.choices, vec![Choice::New; 3]);
    }

    #[test]
    fn surplus_is_the_free_claims_beyond_replicas_newest_first_never_the_preferred() {
        let claims = [claim("r-a", 1), claim("r-b", 2), claim("r-c", 3)];
        let pods = [on("r-x", "r-b")];
        let names = |v: Vec<&ObservedClaim>| v.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
        assert_eq!(names(surplus(&claims, &pods, 1, None)), ["r-c", "r-a"]);
        assert_eq!(names(surplus(&claims, &pods, 2, None)), ["r-c"]);
        assert_eq!(names(surplus(&claims, &pods, 2, Some("r-c"))), ["r-a"]);
        assert!(surplus(&claims, &pods, 3, None).is_empty());
        // Held claims are never surplus, even above replicas.
        let held = [on("r-x", "r-a"), on("r-y", "r-b"), on("r-z", "r-c")];
        assert!(surplus(&claims, &held, 1, None).is_empty());
        // Nor is one a terminating Pod still holds.
        let leaving = [on("r-x", "r-a"), terminating(on("r-y", "r-b"))];
        assert_eq!(names(surplus(&claims, &leaving, 1, None)), ["r-c"]);
    }
}
