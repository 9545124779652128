//! A kind's Services, applied beside the reconcile rather than inside it.
//!
//! Creating a Service is the slowest write an owner needs: the apiserver
//! allocates its ClusterIP and the endpoint controllers react to it. Under
//! the benchmark's load one took about 200 ms at 9 in flight (a Pod create
//! 30 ms), and the apiserver created them at about 40 a second however many
//! were in flight. A reconcile that awaited its Services held one of the
//! controller's workers that long, so a new Redis's Pods waited for other
//! Redis's Services. Now a reconcile hands the Services that differ from
//! the cache to a task of their own and goes on with its Pods.
//!
//! - At most one task per owner; what it applied is not applied again while
//!   the Service cache has yet to show it.
//! - The task's end asks for a reconcile of the owner (`wake`), which reads
//!   the outcome: a refused apply is that reconcile's failure (a
//!   `FailedService` condition and Event, retried with backoff) until an
//!   apply succeeds or the cache shows the Service as wanted.
//! - A refused apply is not retried by the applier on a clock of its own:
//!   the reconcile the task's end wakes reports the refusal, the owner's one
//!   backoff ([`crate::runtime::backoff`]) schedules the next reconcile, and
//!   that one applies again (the refusal still reported while it runs). One
//!   count of failures per object, not two.
//! - At most as many applies are in flight per kind as reconciles run at
//!   once, as before: a create storm of owners does not put hundreds of
//!   Service writes on the apiserver at the same time.
//!
//! The decision is pure ([`Attempt::decide`]); [`ServiceApplier`] is the I/O
//! around it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::channel::mpsc::UnboundedSender;
use futures::future::join_all;
use k8s_openapi::api::core::v1::Service;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, Resource, ResourceExt};
use tokio::sync::Semaphore;

use crate::api::names::FIELD_MANAGER;
use crate::runtime::events::{EventRecorder, EventType};
use crate::runtime::failure::{Failure, api_message};
use crate::runtime::hash::content_hash;
use crate::runtime::owner::Owner;
use crate::runtime::services::{service_exists, service_in_sync};

/// How long a Service this operator applied is taken as done while the
/// cache does not show it yet; past that it is applied again.
pub const AWAIT_CACHE: Duration = Duration::from_secs(10);

/// A Service to apply: what is wanted, and whether the cache has one by
/// that name (for the Event: created or updated).
#[derive(Clone, Debug)]
pub struct Change {
    pub want: Service,
    pub cached: bool,
}

impl Change {
    fn name(&self) -> String {
        self.want.name_any()
    }
}

/// The Services of `wanted` that the cache (`owned`, the owner's Services
/// in it) does not show as wanted. Pure.
pub fn changes(wanted: Vec<Service>, owned: &[Arc<Service>]) -> Vec<Change> {
    wanted
        .into_iter()
        .filter_map(|want| {
            let live = owned.iter().find(|s| s.name_any() == want.name_any());
            if live.is_some_and(|l| service_in_sync(&want, l)) {
                return None;
            }
            Some(Change {
                want,
                cached: live.is_some(),
            })
        })
        .collect()
}

/// [`changes`], unless `in_sync` shows that nothing it depends on moved
/// since it last found none: what the owner's wanted Services are built
/// from (`inputs`) and the resourceVersions of its Services (`owned`).
/// Records the answer. Pure.
fn changes_since(
    in_sync: &mut HashMap<String, InSync>,
    uid: &str,
    inputs: Option<String>,
    owned: &[Arc<Service>],
    wanted: impl FnOnce() -> Vec<Service>,
) -> Vec<Change> {
    let now = InSync::of(inputs, owned);
    if now.is_some() && in_sync.get(uid) == now.as_ref() {
        return Vec::new();
    }
    let found = changes(wanted(), owned);
    match now {
        Some(now) if found.is_empty() => {
            in_sync.insert(uid.to_string(), now);
        }
        _ => {
            in_sync.remove(uid);
        }
    }
    found
}

/// What the applier remembers of one owner's Services.
#[derive(Debug, Default)]
pub struct Attempt {
    running: bool,
    failure: Option<Failure>,
    /// A refusal no reconcile has reported yet: the reconcile the task's
    /// end wakes reports it and starts nothing, so that the next apply
    /// waits for the owner's backoff.
    unreported: bool,
    /// Applied, and not yet shown by the cache: name -> (hash of what was
    /// applied, when).
    applied: HashMap<String, (String, Instant)>,
}

/// What a reconcile does about its Services.
#[derive(Debug, PartialEq)]
pub enum Decision {
    /// Start a task that applies these.
    Start(Vec<String>),
    /// Nothing to start now (in sync, a task running, or a refusal to report
    /// first);
    /// the step's failure so far, if any.
    Report(Option<Failure>),
    /// Nothing to start: what differs from the cache is what was just
    /// applied, which the cache does not show yet. Look again after this
    /// long, when it is applied again if the cache still differs (changed
    /// by someone else meanwhile, or deleted): no later event may come to
    /// ask for it. With the step's failure so far.
    Await(Duration, Option<Failure>),
}

impl Attempt {
    /// Decides, for the Services that differ from the cache (`changes`),
    /// at `now`. Pure.
    pub fn decide(&mut self, changes: &[Change], now: Instant) -> Decision {
        // What the cache shows as wanted needs no waiting any more.
        self.applied
            .retain(|name, _| changes.iter().any(|c| &c.name() == name));
        if self.running {
            return Decision::Report(self.failure.clone());
        }
        let due: Vec<String> = changes
            .iter()
            .filter(|c| {
                !self.applied.get(&c.name()).is_some_and(|(hash, at)| {
                    *hash == content_hash(&c.want)
                        && now.saturating_duration_since(*at) < AWAIT_CACHE
                })
            })
            .map(Change::name)
            .collect();
        if due.is_empty() {
            if changes.is_empty() {
                // In sync: whatever failed before is over.
                self.failure = None;
                self.unreported = false;
                return Decision::Report(self.failure.clone());
            }
            let left = changes
                .iter()
                .filter_map(|c| self.applied.get(&c.name()))
                .map(|(_, at)| AWAIT_CACHE.saturating_sub(now.saturating_duration_since(*at)))
                .min()
                .unwrap_or(AWAIT_CACHE);
            return Decision::Await(left, self.failure.clone());
        }
        if self.unreported {
            self.unreported = false;
            return Decision::Report(self.failure.clone());
        }
        self.running = true;
        Decision::Start(due)
    }

    /// Records the end of a task at `now`: the Services applied (name and
    /// hash), and the first refusal.
    pub fn finish(
        &mut self,
        applied: Vec<(String, String)>,
        failure: Option<Failure>,
        now: Instant,
    ) {
        self.running = false;
        for (name, hash) in applied {
            self.applied.insert(name, (hash, now));
        }
        self.unreported = failure.is_some();
        self.failure = failure;
    }

    fn idle(&self) -> bool {
        !self.running && self.failure.is_none() && self.applied.is_empty()
    }
}

/// Applies the Services of one kind's owners beside their reconciles.
pub struct ServiceApplier<K: Resource> {
    /// Makes the applies.
    client: Client,
    /// Records the Events.
    recorder: Arc<EventRecorder>,
    /// The Services podkeeper manages (label-selected watch cache).
    services: Store<Service>,
    /// Asks the kind's controller to reconcile an owner.
    wake: UnboundedSender<ObjectRef<K>>,
    attempts: Arc<Mutex<HashMap<String, Attempt>>>,
    in_flight: Arc<Semaphore>,
    /// Per owner uid, what its Services were when last found in sync.
    in_sync: Mutex<HashMap<String, InSync>>,
}

/// What an owner's wanted Services were built from and the
/// resourceVersions of its Services (name, resourceVersion) when the cache
/// showed them all as wanted.
#[derive(Debug, PartialEq)]
struct InSync {
    inputs: String,
    services: Vec<(String, String)>,
}

impl InSync {
    fn of(inputs: Option<String>, owned: &[Arc<Service>]) -> Option<Self> {
        let services = owned
            .iter()
            .map(|s| Some((s.name_any(), s.resource_version()?)))
            .collect::<Option<Vec<_>>>()?;
        Some(InSync {
            inputs: inputs?,
            services,
        })
    }
}

impl<K> ServiceApplier<K>
where
    K: Resource<DynamicType = ()> + 'static,
{
    pub fn new(
        client: Client,
        recorder: Arc<EventRecorder>,
        services: Store<Service>,
        wake: UnboundedSender<ObjectRef<K>>,
        in_flight: usize,
    ) -> Self {
        ServiceApplier {
            client,
            recorder,
            services,
            wake,
            attempts: Arc::default(),
            in_flight: Arc::new(Semaphore::new(in_flight.max(1))),
            in_sync: Mutex::default(),
        }
    }

    /// The Services of `wanted()` that the cache does not show as wanted
    /// ([`changes`]), `owned` being the owner's Services in the cache and
    /// `inputs` what `wanted` builds them from (the owner's generation, and
    /// for a Redis its primary). While those and the Services'
    /// resourceVersions stay as they were when all were last found in
    /// sync, nothing is
    /// built or compared again: the benchmark's scale-down spent a
    /// twelfth of the operator's CPU rebuilding and diffing Services that
    /// had not changed, on every Pod event.
    pub fn changes(
        &self,
        owner: &Owner,
        inputs: Option<String>,
        owned: &[Arc<Service>],
        wanted: impl FnOnce() -> Vec<Service>,
    ) -> Vec<Change> {
        let mut in_sync = self.in_sync.lock().unwrap_or_else(|e| e.into_inner());
        changes_since(&mut in_sync, &owner.reference.uid, inputs, owned, wanted)
    }

    /// The Service cache.
    pub fn services(&self) -> &Store<Service> {
        &self.services
    }

    /// One reconcile's Service step: starts applying what differs from
    /// the cache unless that is under way or awaited, and returns the
    /// step's failure so far (a refusal stands while its retry runs, so the
    /// owner's backoff keeps growing until an apply goes through).
    pub fn step(&self, owner: &Owner, changes: Vec<Change>) -> Option<Failure> {
        let uid = owner.reference.uid.clone();
        let (due, standing) = {
            let mut attempts = self.attempts.lock().unwrap_or_else(|e| e.into_inner());
            let attempt = attempts.entry(uid.clone()).or_default();
            let decision = attempt.decide(&changes, Instant::now());
            let standing = attempt.failure.clone();
            if attempt.idle() {
                attempts.remove(&uid);
            }
            match decision {
                Decision::Report(failure) => return failure,
                Decision::Await(after, failure) => {
                    let wake = self.wake.clone();
                    let owner_ref = ObjectRef::<K>::new(&owner.name).within(&owner.namespace);
                    tokio::spawn(async move {
                        tokio::time::sleep(after).await;
                        let _ = wake.unbounded_send(owner_ref);
                    });
                    return failure;
                }
                Decision::Start(due) => (due, standing),
            }
        };
        let changes: Vec<Change> = changes
            .into_iter()
            .filter(|c| due.contains(&c.name()))
            .collect();
        let task = Task {
            api: Api::namespaced(self.client.clone(), &owner.namespace),
            recorder: self.recorder.clone(),
            services: self.services.clone(),
            wake: self.wake.clone(),
            attempts: self.attempts.clone(),
            in_flight: self.in_flight.clone(),
            event_owner: owner.clone(),
            uid,
        };
        tokio::spawn(task.run(changes));
        standing
    }

    /// Forgets an owner that is gone.
    pub fn forget(&self, uid: &str) {
        self.attempts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
        self.in_sync
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
    }
}

/// One task's worth of Service applies for one owner.
struct Task<K: Resource> {
    api: Api<Service>,
    recorder: Arc<EventRecorder>,
    services: Store<Service>,
    wake: UnboundedSender<ObjectRef<K>>,
    attempts: Arc<Mutex<HashMap<String, Attempt>>>,
    in_flight: Arc<Semaphore>,
    event_owner: Owner,
    uid: String,
}

impl<K> Task<K>
where
    K: Resource<DynamicType = ()> + 'static,
{
    async fn run(self, changes: Vec<Change>) {
        // The semaphore is never closed.
        let permit = self.in_flight.clone().acquire_owned().await.ok();
        // The applies' state is allocated once they may start: a create
        // storm queues hundreds of tasks here, and each spawned with that
        // state inline took about 4.6 KiB waiting (3.2 MiB of tasks at the
        // peak of 1000 x 3, heaptrack).
        Box::pin(self.apply(changes, permit)).await;
    }

    async fn apply(self, changes: Vec<Change>, permit: Option<tokio::sync::OwnedSemaphorePermit>) {
        let params = PatchParams::apply(FIELD_MANAGER).force();
        let results = join_all(changes.iter().map(|c| {
            let (api, params, services) = (&self.api, &params, &self.services);
            async move {
                let name = c.name();
                // Asked before the apply, which makes it exist either way.
                let existed = service_exists(services, api, &name, c.cached).await;
                let applied = api.patch(&name, params, &Patch::Apply(&c.want)).await;
                (name, content_hash(&c.want), existed, applied)
            }
        }))
        .await;
        drop(permit);
        let (mut created, mut updated, mut applied) = (Vec::new(), Vec::new(), Vec::new());
        let mut failure = None;
        for (name, hash, existed, result) in results {
            match result {
                Ok(_) => {
                    if existed {
                        updated.push(name.clone());
                    } else {
                        created.push(name.clone());
                    }
                    applied.push((name, hash));
                }
                Err(e) => {
                    failure.get_or_insert_with(|| Failure {
                        reason: "FailedService",
                        message: format!("Error applying Service {name}: {}", api_message(&e)),
                    });
                }
            }
        }
        let owner = &self.event_owner;
        for (names, reason, verb) in [
            (created, "ServiceCreated", "Created"),
            (updated, "ServiceUpdated", "Updated"),
        ] {
            if !names.is_empty() {
                let what = crate::runtime::services::services_noun(names.len());
                self.recorder
                    .publish(
                        &owner.event_target,
                        EventType::Normal,
                        reason,
                        "ApplyService",
                        format!("{verb} {what} {}", names.join(" and ")),
                    )
                    .await;
            }
        }
        if let Some(f) = &failure {
            self.recorder
                .publish(
                    &owner.event_target,
                    EventType::Warning,
                    f.reason,
                    "ApplyService",
                    f.message.clone(),
                )
                .await;
        }
        {
            let mut attempts = self.attempts.lock().unwrap_or_else(|e| e.into_inner());
            // An owner forgotten meanwhile (deleted) is not brought back.
            let Some(attempt) = attempts.get_mut(&self.uid) else {
                return;
            };
            attempt.finish(applied, failure, Instant::now());
        }
        let owner_ref = ObjectRef::<K>::new(&owner.name).within(&owner.namespace);
        let _ = self.wake.unbounded_send(owner_ref);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn change(name: &str, port: i32) -> Change {
        Change {
            want: Service {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    ..Default::default()
                },
                spec: Some(k8s_openapi::api::core::v1::ServiceSpec {
                    ports: Some(vec![k8s_openapi::api::core::v1::ServicePort {
                        port,
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                status: None,
            },
            cached: false,
        }
    }

    fn refused() -> Failure {
        Failure {
            reason: "FailedService",
            message: "quota".into(),
        }
    }

    #[test]
    fn services_found_in_sync_are_compared_again_once_they_or_the_spec_change() {
        let live = |port: i32, rv: &str| {
            let mut s = change("r", port).want;
            s.metadata.resource_version = Some(rv.into());
            Arc::new(s)
        };
        let want = |port: i32| move || vec![change("r", port).want];
        let mut memo = HashMap::new();
        let generation = |g: i64| Some(g.to_string());
        let names = |c: Vec<Change>| c.iter().map(Change::name).collect::<Vec<_>>();
        // In sync: nothing to apply, and remembered.
        assert!(
            changes_since(
                &mut memo,
                "u",
                generation(1),
                &[live(6379, "5")],
                want(6379)
            )
            .is_empty()
        );
        // Same generation, same Service: not built again.
        let unbuilt = || -> Vec<Service> { panic!("built again") };
        assert!(
            changes_since(&mut memo, "u", generation(1), &[live(6379, "5")], unbuilt).is_empty()
        );
        // Someone edits the Service (a new resourceVersion): compared, and put right.
        assert_eq!(
            names(changes_since(
                &mut memo,
                "u",
                generation(1),
                &[live(7000, "6")],
                want(6379)
            )),
            ["r"]
        );
        // Deleted: compared, and put back.
        assert_eq!(
            names(changes_since(
                &mut memo,
                "u",
                generation(1),
                &[],
                want(6379)
            )),
            ["r"]
        );
        assert!(
            changes_since(
                &mut memo,
                "u",
                generation(1),
                &[live(6379, "7")],
                want(6379)
            )
            .is_empty()
        );
        // A new spec (generation): compared, and applied.
        assert_eq!(
            names(changes_since(
                &mut memo,
                "u",
                generation(2),
                &[live(6379, "7")],
                want(6380)
            )),
            ["r"]
        );
    }

    #[test]
    fn one_task_at_a_time_and_what_it_applied_is_awaited_not_applied_again() {
        let t0 = Instant::now();
        let mut a = Attempt::default();
        let wanted = [change("r", 6379), change("r-replicas", 6379)];
        assert_eq!(
            a.decide(&wanted, t0),
            Decision::Start(vec!["r".into(), "r-replicas".into()])
        );
        assert_eq!(a.decide(&wanted, t0), Decision::Report(None), "running");
        let hashes = wanted
            .iter()
            .map(|c| (c.name(), content_hash(&c.want)))
            .collect();
        a.finish(hashes, None, t0);
        // The cache has not shown them yet: nothing is applied twice, and
        // the owner is looked at again once the wait is over.
        let later = t0 + Duration::from_secs(1);
        assert_eq!(
            a.decide(&wanted, later),
            Decision::Await(AWAIT_CACHE - Duration::from_secs(1), None)
        );
        // A changed Service is applied, even while the old one is awaited.
        let changed = [change("r", 7000), change("r-replicas", 6379)];
        assert_eq!(a.decide(&changed, later), Decision::Start(vec!["r".into()]));
        a.finish(Vec::new(), None, later);
        // Once the cache shows them, nothing is remembered.
        assert_eq!(a.decide(&[], later), Decision::Report(None));
        assert!(a.idle());
        // Never shown within AWAIT_CACHE (deleted meanwhile): applied again.
        let mut b = Attempt::default();
        b.decide(&wanted[..1], t0);
        b.finish(vec![("r".into(), content_hash(&wanted[0].want))], None, t0);
        assert_eq!(
            b.decide(&wanted[..1], t0 + AWAIT_CACHE),
            Decision::Start(vec!["r".into()])
        );
    }

    #[test]
    fn a_refusal_is_reported_once_before_the_next_apply_and_stands_until_one_succeeds() {
        let t0 = Instant::now();
        let mut a = Attempt::default();
        let wanted = [change("r", 6379)];
        assert!(matches!(a.decide(&wanted, t0), Decision::Start(_)));
        a.finish(Vec::new(), Some(refused()), t0);
        // The reconcile the task's end wakes reports the refusal and starts
        // nothing: the next apply waits for the owner's backoff.
        assert_eq!(a.decide(&wanted, t0), Decision::Report(Some(refused())));
        // The reconcile after the backoff applies again, and while that
        // runs the refusal still stands.
        assert!(matches!(a.decide(&wanted, t0), Decision::Start(_)));
        assert_eq!(a.failure, Some(refused()));
        assert_eq!(a.decide(&wanted, t0), Decision::Report(Some(refused())));
        a.finish(Vec::new(), Some(refused()), t0);
        assert_eq!(a.decide(&wanted, t0), Decision::Report(Some(refused())));
        assert!(matches!(a.decide(&wanted, t0), Decision::Start(_)));
        a.finish(vec![("r".into(), content_hash(&wanted[0].want))], None, t0);
        assert_eq!(a.decide(&wanted, t0), Decision::Await(AWAIT_CACHE, None));
        assert!(!a.unreported);
    }

    #[test]
    fn a_service_put_right_by_someone_else_ends_the_failure() {
        let t0 = Instant::now();
        let mut a = Attempt::default();
        a.decide(&[change("r", 6379)], t0);
        a.finish(Vec::new(), Some(refused()), t0);
        assert_eq!(a.decide(&[], t0), Decision::Report(None));
        assert!(a.idle());
    }
}
