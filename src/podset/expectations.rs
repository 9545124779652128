//! Expectations, as the ReplicaSet controller keeps them: creates and
//! deletes that were sent but not yet seen in the watch cache.
//!
//! podkeeper names its Pods itself (`<owner>-<5 random characters>`), so it
//! records the exact name before each create and the uid before each delete.
//! The Pod watch stream marks them observed as its events arrive. While an
//! owner has unobserved expectations, its reconciles plan from a cache that
//! may not show those Pods yet, so they do not create or delete, and a stale
//! cache cannot cause duplicates. Entries expire after [`TTL`] in case an
//! event is never seen (the ReplicaSet controller uses the same five minutes).
//!
//! A restarted operator starts with no expectations and a fresh list, which
//! shows every Pod the previous process created.
//!
//! When the Pod watch has to list again (after the apiserver restarted, or
//! its watch expired), events in the gap are lost: a Pod created and then
//! deleted (say by the garbage collector) meanwhile is never seen. So each
//! create or delete the apiserver confirmed before that list began and that
//! the list did not settle is dropped ([`Expectations::relisted`]): the
//! list shows everything committed before it, so such a Pod is gone for
//! good. Without this an owner stalled until [`TTL`].

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::runtime::owner::OwnerKey;

pub const TTL: Duration = Duration::from_secs(300);

/// One create (by Pod name) or delete (by uid) sent and not yet seen.
#[derive(Clone, Copy)]
struct Sent {
    at: Instant,
    /// When the apiserver confirmed it (the call returned success).
    confirmed: Option<Instant>,
}

impl Sent {
    fn now() -> Self {
        Sent {
            at: Instant::now(),
            confirmed: None,
        }
    }

    fn live(&self) -> bool {
        self.at.elapsed() < TTL
    }
}

/// Creates and deletes sent for an owner and not yet seen
/// ([`Expectations::unseen`]).
#[derive(Debug, Default)]
pub struct Unseen {
    pub creates: usize,
    pub deletes: std::collections::HashSet<String>,
}

#[derive(Default)]
struct Pending {
    creates: HashMap<String, Sent>,
    deletes: HashMap<String, Sent>,
    /// In-place updates by uid: the resourceVersion the patch produced
    /// (once it returned) and the highest one seen of that Pod since.
    updates: HashMap<String, Update>,
}

#[derive(Clone, Copy)]
struct Update {
    sent: Sent,
    produced: Option<u64>,
    seen: u64,
}

impl Update {
    fn seen(&self) -> bool {
        self.produced.is_some_and(|rv| self.seen >= rv)
    }
}

/// Shared by reconciles and the Pod event stream.
#[derive(Default)]
pub struct Expectations {
    inner: Mutex<HashMap<OwnerKey, Pending>>,
}

impl Expectations {
    pub fn expect_create(&self, owner: &OwnerKey, pod_name: &str) {
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(owner.clone())
            .or_default()
            .creates
            .insert(pod_name.to_string(), Sent::now());
    }

    pub fn expect_delete(&self, owner: &OwnerKey, pod_uid: &str) {
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(owner.clone())
            .or_default()
            .deletes
            .insert(pod_uid.to_string(), Sent::now());
    }

    /// An in-place update of the Pod with this uid is about to be sent.
    pub fn expect_update(&self, owner: &OwnerKey, pod_uid: &str) {
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        map.entry(owner.clone()).or_default().updates.insert(
            pod_uid.to_string(),
            Update {
                sent: Sent::now(),
                produced: None,
                seen: 0,
            },
        );
    }

    /// The apiserver accepted the update; it produced `resource_version`
    /// (`None` if it is not a number: any later sighting then satisfies it).
    pub fn update_confirmed(&self, owner: &OwnerKey, pod_uid: &str, resource_version: Option<u64>) {
        self.update(owner, |p| {
            if let Some(u) = p.updates.get_mut(pod_uid) {
                u.sent.confirmed = Some(Instant::now());
                u.produced = Some(resource_version.unwrap_or(0));
                if u.seen() {
                    p.updates.remove(pod_uid);
                }
            }
        });
    }

    /// An update that failed will never be observed.
    pub fn update_failed(&self, owner: &OwnerKey, pod_uid: &str) {
        self.update(owner, |p| {
            p.updates.remove(pod_uid);
        });
    }

    /// A Pod event with this resourceVersion: satisfies an update it shows.
    pub fn observe_version(
        &self,
        owner: &OwnerKey,
        pod_uid: &str,
        resource_version: Option<u64>,
        gone: bool,
    ) {
        self.update(owner, |p| {
            if let Some(u) = p.updates.get_mut(pod_uid) {
                u.seen = u.seen.max(resource_version.unwrap_or(u64::MAX));
                if gone || u.seen() {
                    p.updates.remove(pod_uid);
                }
            }
        });
    }

    /// The apiserver accepted the create.
    pub fn create_confirmed(&self, owner: &OwnerKey, pod_name: &str) {
        self.update(owner, |p| {
            if let Some(sent) = p.creates.get_mut(pod_name) {
                sent.confirmed = Some(Instant::now());
            }
        });
    }

    /// The apiserver accepted the delete.
    pub fn delete_confirmed(&self, owner: &OwnerKey, pod_uid: &str) {
        self.update(owner, |p| {
            if let Some(sent) = p.deletes.get_mut(pod_uid) {
                sent.confirmed = Some(Instant::now());
            }
        });
    }

    /// A relist that began at `list_started` has been fully observed: what
    /// it did not settle and was confirmed before it began will never be
    /// seen. Returns how many entries were dropped.
    pub fn relisted(&self, list_started: Instant) -> usize {
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut dropped = 0;
        let before = |s: &Sent| s.confirmed.is_some_and(|c| c < list_started);
        for p in map.values_mut() {
            let n = p.creates.len() + p.deletes.len() + p.updates.len();
            p.creates.retain(|_, s| !before(s));
            p.deletes.retain(|_, s| !before(s));
            p.updates.retain(|_, u| !before(&u.sent));
            dropped += n - p.creates.len() - p.deletes.len() - p.updates.len();
        }
        dropped
    }

    /// A create that failed will never be observed.
    pub fn create_failed(&self, owner: &OwnerKey, pod_name: &str) {
        self.update(owner, |p| {
            p.creates.remove(pod_name);
        });
    }

    /// A delete that failed (or found the Pod already gone) will never be
    /// observed as such.
    pub fn delete_failed(&self, owner: &OwnerKey, pod_uid: &str) {
        self.update(owner, |p| {
            p.deletes.remove(pod_uid);
        });
    }

    /// Called for every Pod event: any sight of the name satisfies a create;
    /// a deletion, or a Pod seen terminating, satisfies a delete.
    pub fn observe(
        &self,
        owner: &OwnerKey,
        pod_name: &str,
        pod_uid: &str,
        gone_or_terminating: bool,
    ) {
        self.update(owner, |p| {
            p.creates.remove(pod_name);
            if gone_or_terminating {
                p.deletes.remove(pod_uid);
            }
        });
    }

    /// True when nothing sent for this owner is still unseen (expired
    /// entries are dropped).
    pub fn satisfied(&self, owner: &OwnerKey) -> bool {
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Some(p) = map.get_mut(owner) else {
            return true;
        };
        p.creates.retain(|_, s| s.live());
        p.deletes.retain(|_, s| s.live());
        p.updates.retain(|_, u| u.sent.live());
        let done = p.creates.is_empty() && p.deletes.is_empty() && p.updates.is_empty();
        if done {
            map.remove(owner);
        }
        done
    }

    /// What cleanup must not miss or repeat, read under one lock: how many
    /// creates are still unseen (a Pod may still appear) and the uids of
    /// Pods deleted but not yet seen terminating or gone (a second pass
    /// before the watch catches up must not delete them again).
    pub fn unseen(&self, owner: &OwnerKey) -> Unseen {
        let map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let Some(p) = map.get(owner) else {
            return Unseen::default();
        };
        Unseen {
            creates: p.creates.values().filter(|s| s.live()).count(),
            deletes: p
                .deletes
                .iter()
                .filter(|(_, s)| s.live())
                .map(|(uid, _)| uid.clone())
                .collect(),
        }
    }

    /// Forgets an owner once it is gone.
    pub fn forget(&self, owner: &OwnerKey) {
        self.inner
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(owner);
    }

    fn update(&self, owner: &OwnerKey, f: impl FnOnce(&mut Pending)) {
        let mut map = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = map.get_mut(owner) {
            f(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> OwnerKey {
        ("Redis", "ns".into(), "r".into())
    }

    #[test]
    fn creates_and_deletes_block_until_observed() {
        let e = Expectations::default();
        assert!(e.satisfied(&key()));
        e.expect_create(&key(), "r-abcde");
        e.expect_delete(&key(), "uid-1");
        assert!(!e.satisfied(&key()));
        assert_eq!(e.unseen(&key()).creates, 1);
        e.observe(&key(), "r-abcde", "uid-new", false);
        assert!(!e.satisfied(&key()), "the delete is still unseen");
        e.observe(&key(), "r-other", "uid-1", false);
        assert!(
            !e.satisfied(&key()),
            "a live sighting does not satisfy a delete"
        );
        e.observe(&key(), "r-other", "uid-1", true);
        assert!(e.satisfied(&key()));
    }

    #[test]
    fn unseen_deletes_name_what_the_watch_has_yet_to_show_terminating() {
        let e = Expectations::default();
        assert!(e.unseen(&key()).deletes.is_empty());
        e.expect_delete(&key(), "uid-1");
        e.expect_delete(&key(), "uid-2");
        e.delete_confirmed(&key(), "uid-1");
        e.observe(&key(), "r-b", "uid-2", true);
        assert_eq!(
            e.unseen(&key()).deletes,
            std::collections::HashSet::from(["uid-1".to_string()])
        );
        e.delete_failed(&key(), "uid-1");
        assert!(e.unseen(&key()).deletes.is_empty());
    }

    #[test]
    fn an_update_blocks_until_the_watch_shows_its_version() {
        let e = Expectations::default();
        e.expect_update(&key(), "u1");
        e.observe_version(&key(), "u1", Some(10), false);
        assert!(!e.satisfied(&key()), "the patch has not returned");
        e.update_confirmed(&key(), "u1", Some(12));
        assert!(!e.satisfied(&key()), "rv 10 is older than the patch");
        e.observe_version(&key(), "u1", Some(12), false);
        assert!(e.satisfied(&key()));
        // The watch was quicker than the patch's answer.
        e.expect_update(&key(), "u2");
        e.observe_version(&key(), "u2", Some(20), false);
        e.update_confirmed(&key(), "u2", Some(20));
        assert!(e.satisfied(&key()));
    }

    #[test]
    fn failures_release_expectations() {
        let e = Expectations::default();
        e.expect_create(&key(), "r-a");
        e.expect_delete(&key(), "u");
        e.create_failed(&key(), "r-a");
        e.delete_failed(&key(), "u");
        assert!(e.satisfied(&key()));
        let other: OwnerKey = ("Application", "ns".into(), "r".into());
        e.expect_create(&other, "x");
        assert!(e.satisfied(&key()));
        assert!(!e.satisfied(&other));
        e.forget(&other);
        assert!(e.satisfied(&other));
    }

    #[test]
    fn a_relist_drops_what_was_confirmed_before_it_and_not_seen() {
        let e = Expectations::default();
        // Confirmed, then the watch lost its events: the Pod was created
        // and deleted in the gap.
        e.expect_create(&key(), "r-lost");
        e.create_confirmed(&key(), "r-lost");
        e.expect_delete(&key(), "uid-gone");
        e.delete_confirmed(&key(), "uid-gone");
        // Still in flight when the list began: it may yet appear.
        e.expect_create(&key(), "r-in-flight");
        std::thread::sleep(std::time::Duration::from_millis(2));
        let list_started = Instant::now();
        // Confirmed after the list began: the watch will show it.
        e.expect_create(&key(), "r-late");
        e.create_confirmed(&key(), "r-late");
        assert_eq!(e.relisted(list_started), 2);
        assert!(!e.satisfied(&key()));
        e.observe(&key(), "r-late", "u1", false);
        assert!(!e.satisfied(&key()), "the in-flight create is still unseen");
        e.create_failed(&key(), "r-in-flight");
        assert!(e.satisfied(&key()));
    }
}
