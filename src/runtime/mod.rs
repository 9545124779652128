//! Plumbing every kind shares and none knows: the context, the error type
//! with its metric labels, per-object backoff, paced status writes, Events,
//! conditions and the Service applier.

pub mod conditions;
pub mod events;
pub mod service_applier;
pub mod services;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Pod;
use kube::api::PostParams;
use kube::runtime::controller::Action;
use kube::{Api, Client, Resource};
use rand::RngExt;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::api::names::FIELD_MANAGER;
use crate::podset::ObservedPod;
use crate::podset::executor::{Executor, Failure, Owner, summary};
use crate::podset::metadata_only;
use crate::podset::plan::{DeleteReason, victim};

/// A reconcile failed, or must come back soon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    #[error("waiting for {remaining} pods to be deleted")]
    CleanupPending { remaining: usize },
    /// A step was refused (a Pod create or delete, the Service): retried
    /// with backoff until it succeeds.
    #[error("{}", .0.message)]
    Step(Failure),
    #[error("serializing: {0}")]
    Serialize(#[from] serde_json::Error),
}

impl Error {
    /// A short, fixed label for metrics (never the error text).
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Finalizer(inner) => match inner.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.metric_label(),
                _ => "finalizer",
            },
            Error::CleanupPending { .. } => "cleanup_pending",
            Error::Step(f) => match f.reason {
                "FailedCreate" => "create",
                "FailedDelete" => "delete",
                "FailedService" => "service",
                _ => "step",
            },
            Error::Serialize(_) => "serialize",
        }
    }

    /// Waiting, not failing: cleanup that is still deleting Pods.
    pub fn is_waiting(&self) -> bool {
        self.metric_label() == "cleanup_pending"
    }
}

/// Shared by every reconcile.
pub struct Context {
    pub client: Client,
    pub executor: Executor,
    /// Every Pod podkeeper manages (label-selected, managedFields stripped).
    pub pods: crate::podset::watch::PodCache,
    failures: Mutex<HashMap<(&'static str, String, String), u32>>,
    /// The status last written per object uid, with the resourceVersion the
    /// write produced: a reconcile may start before the watch shows that
    /// write, and must not mistake the older status for the current one.
    written: Mutex<HashMap<String, Written>>,
}

/// A status write of ours.
#[derive(Clone)]
struct Written {
    resource_version: u64,
    status: serde_json::Value,
    generation: Option<i64>,
    at: std::time::Instant,
    /// Whether it described the object at rest.
    at_rest: bool,
    /// When a newer generation's status was first held back because only
    /// terminating Pods were left ([`DRAIN_GRACE`]), and for which.
    held_since: Option<(Option<i64>, std::time::Instant)>,
}

/// How an object's status may be paced: what the status about to be
/// written describes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Pace {
    /// Pods are being created, made Ready or replaced: at most one write
    /// per [`STATUS_INTERVAL`].
    Changing,
    /// Everything is as asked except Pods still terminating (the tail of a
    /// scale-down or rollout): only their count would change, so at most
    /// one write per [`DRAIN_INTERVAL`]; the status of their end comes at
    /// once ([`Pace::AtRest`]).
    Draining,
    /// At rest: the write that brings the object here is never deferred;
    /// changes at rest (replication flapping) are paced again.
    AtRest,
}

/// How long a status write after `last` waits, if it does: never for the
/// write that brings the object to rest, and for a new generation only while
/// just its terminating Pods are left, up to [`DRAIN_GRACE`].
fn deferred(last: &Written, generation: Option<i64>, pace: Pace) -> Option<Duration> {
    if last.generation != generation {
        return match (pace, last.held_since) {
            (Pace::Draining, Some((held, since))) if held == generation => DRAIN_GRACE
                .checked_sub(since.elapsed())
                .filter(|d| !d.is_zero()),
            _ => None,
        };
    }
    if pace == Pace::AtRest && !last.at_rest {
        return None;
    }
    let interval = if pace == Pace::Draining {
        DRAIN_INTERVAL
    } else {
        STATUS_INTERVAL
    };
    interval
        .checked_sub(last.at.elapsed())
        .filter(|d| !d.is_zero())
}

/// Our last status write, when the object at hand predates it.
fn newer_write<'a, K: Resource>(last: Option<&'a Written>, obj: &K) -> Option<&'a Written> {
    let seen_rv = obj
        .meta()
        .resource_version
        .as_deref()
        .and_then(|v| v.parse::<u64>().ok())
        .unwrap_or(0);
    last.filter(|w| w.resource_version > seen_rv)
}

/// `obj` with `status` in place of its own.
fn with_status<K: Serialize + DeserializeOwned>(obj: &K, status: serde_json::Value) -> Option<K> {
    let mut value = serde_json::to_value(obj).ok()?;
    value["status"] = status;
    serde_json::from_value(value).ok()
}

/// At most one status write per object per interval while its spec stays
/// the same: Pods turning Ready one after another then cost one write, not
/// one each (the benchmark counted 4 status writes per 3-replica Redis
/// without this). A new generation is acknowledged at once, and so is the
/// status that brings the object to rest (the last Pod Ready, the last
/// terminating Pod gone): deferring it would only make `kubectl wait` and
/// `kubectl rollout`-style clients wait out the interval (the benchmark saw
/// scale-downs finish 1 s late for most objects).
pub const STATUS_INTERVAL: Duration = Duration::from_secs(1);

/// How soon an object whose status write conflicted is looked at again
/// (the cache has yet to show someone else's write).
pub const CONFLICT_RETRY: Duration = Duration::from_millis(200);

/// The pace of status writes while only terminating Pods are left: each
/// custom-resource write costs the API server more than a built-in one, and
/// the benchmark's scale-down wrote one per object for each Pod that went.
pub const DRAIN_INTERVAL: Duration = Duration::from_secs(5);

/// How long the status of a new generation waits when all that is left to
/// do is Pods terminating (a scale-down, once its deletes are made). Their
/// end is written at once, so a scale-down whose Pods go within this costs
/// one status write per object, not two (one showing them terminating, one
/// showing them gone): the benchmark's scale-down of 200 Redis wrote 199
/// statuses instead of 397, and the API server serves kwok's removals of
/// the Pods sooner. Pods that take longer are shown terminating once it is
/// over, and then paced as [`DRAIN_INTERVAL`] says.
pub const DRAIN_GRACE: Duration = DRAIN_INTERVAL;

impl Context {
    pub fn new(
        client: Client,
        executor: Executor,
        pods: crate::podset::watch::PodCache,
    ) -> Arc<Self> {
        Arc::new(Self {
            client,
            executor,
            pods,
            failures: Mutex::new(HashMap::new()),
            written: Mutex::new(HashMap::new()),
        })
    }

    /// Pods in `namespace` whose controller owner has `owner_uid`.
    pub fn owned_pods(&self, namespace: &str, owner_uid: &str) -> Vec<Arc<Pod>> {
        self.pods
            .owned_by(owner_uid)
            .into_iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(namespace))
            .collect()
    }

    /// Observed Pods of an owner.
    pub fn observed(&self, owner: &Owner) -> Vec<ObservedPod> {
        self.owned_pods(&owner.namespace, &owner.reference.uid)
            .iter()
            .filter_map(|p| ObservedPod::from_pod(p))
            .collect()
    }

    /// Cleanup of an owner's Pods: deletes those not yet terminating, newest
    /// first, and succeeds only when none is left (not even terminating) and
    /// no create is still unseen. Writes no Event when all goes through (it
    /// logs); a refused delete is a `FailedDelete` Warning and an error,
    /// retried with backoff.
    pub async fn delete_all_pods(&self, owner: &Owner) -> Result<(), Error> {
        // Expectations before the snapshot: a create seen after it is
        // still counted as unseen, never missed; a Pod whose delete was
        // sent but is not yet seen terminating is not deleted again (the
        // pass that the Service's deletion or a Pod event starts came
        // within ms of the first: a third of the Pods got two deletes).
        let unseen = self.executor.expectations.unseen(&owner.key);
        let mut pods = self.observed(owner);
        if pods.is_empty() && unseen.creates == 0 {
            // A deletion that goes through writes no Event, as the
            // ReplicaSet controller's does not: the owner is about to be gone,
            // and three Events per object cost a deletion three waits on the
            // API server. Refusals are Warning Events (FailedDelete,
            // FailedService); the log says what happened.
            tracing::info!(
                kind = owner.reference.kind,
                namespace = owner.namespace,
                name = owner.name,
                "all Pods are gone; removing the finalizer"
            );
            self.forget(owner);
            return Ok(());
        }
        pods.sort_by(|a, b| b.created.cmp(&a.created).then_with(|| a.name.cmp(&b.name)));
        let to_delete: Vec<_> = pods
            .iter()
            .filter(|p| !p.terminating && !unseen.deletes.contains(&p.uid))
            .map(|p| victim(p, DeleteReason::Cleanup))
            .collect();
        if !to_delete.is_empty() {
            let names: Vec<String> = to_delete.iter().map(|v| v.name.clone()).collect();
            tracing::info!(
                kind = owner.reference.kind,
                namespace = owner.namespace,
                name = owner.name,
                "{} before the {} is removed ({} already being deleted)",
                summary("Deleting", &names),
                owner.reference.kind,
                pods.len() - to_delete.len()
            );
            let api: Api<Pod> = Api::namespaced(self.client.clone(), &owner.namespace);
            let mut failure = None;
            for v in &to_delete {
                // Newest first, one after the other, as the order promises.
                if let Err(f) = self.executor.delete_one(&api, owner, v).await {
                    failure.get_or_insert(f);
                }
            }
            if let Some(f) = failure {
                return Err(Error::Step(f));
            }
        }
        Err(Error::CleanupPending {
            remaining: pods.len().max(unseen.creates),
        })
    }

    /// Forgets everything kept about an owner that is gone.
    pub fn forget(&self, owner: &Owner) {
        self.executor.expectations.forget(&owner.key);
        self.forget_status(&owner.reference.uid);
        self.succeeded(owner.key.0, &owner.namespace, &owner.name);
    }

    /// The object with the status this operator last wrote, when the cache
    /// still holds a version older than that write; `None` when the cached
    /// object is current. A status derived from the older one would move a
    /// condition's lastTransitionTime back and then forth again: one write
    /// more per change, landing after the status had already settled.
    pub fn freshest<K>(&self, obj: &K) -> Option<K>
    where
        K: Resource + Serialize + DeserializeOwned,
    {
        let status = {
            let written = self.written.lock().unwrap_or_else(|e| e.into_inner());
            newer_write(written.get(obj.meta().uid.as_deref()?), obj)?
                .status
                .clone()
        };
        with_status(obj, status)
    }

    /// Writes `status` to the status subresource unless it is already
    /// there in `current`: the status of the object as [`Self::freshest`]
    /// gives it (ours when the cache lags). The write replaces the status
    /// whole, so fields that no longer apply are removed (a merge patch of
    /// the struct would have kept them: its `None` fields are not sent).
    /// `pace` says what `status` describes; returns
    /// `Some(wait)` when the write is deferred by its pace ([`Pace`]): the
    /// caller requeues after `wait`.
    pub async fn write_status<K, S>(
        &self,
        obj: &K,
        current: Option<&S>,
        status: &S,
        pace: Pace,
    ) -> Result<Option<Duration>, Error>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + Clone
            + DeserializeOwned
            + std::fmt::Debug,
        S: Serialize + PartialEq,
    {
        let meta = obj.meta();
        let uid = meta.uid.clone().unwrap_or_default();
        let wanted = serde_json::to_value(status)?;
        if serde_json::to_value(current)? == wanted {
            return Ok(None);
        }
        let last = {
            let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
            let mut last = written.get_mut(&uid);
            if let Some(w) = last.as_deref_mut().filter(|w| {
                pace == Pace::Draining
                    && w.generation != meta.generation
                    && w.held_since.is_none_or(|(g, _)| g != meta.generation)
            }) {
                w.held_since = Some((meta.generation, std::time::Instant::now()));
            }
            last.cloned()
        };
        if let Some(wait) = last
            .as_ref()
            .and_then(|w| deferred(w, meta.generation, pace))
        {
            return Ok(Some(wait));
        }
        tracing::debug!(object = ?meta.name, status = %wanted, "writing status");
        let api: Api<K> = Api::namespaced(
            self.client.clone(),
            meta.namespace.as_deref().unwrap_or_default(),
        );
        let name = meta.name.as_deref().unwrap_or_default();
        // A replace of the status subresource, as the ReplicaSet controller
        // does (and controller-runtime's `Status().Update`): for a custom
        // resource the API server's merge-patch path re-encodes the stored
        // object, merges and decodes it again, which made a status patch
        // cost it 2.4x a ReplicaSet status update (its CPU profile over the
        // benchmark's scale-down). The body is the status alone with the
        // resourceVersion it replaces (the API server keeps spec and
        // metadata); fields it leaves out are removed. Someone else's write
        // in between is a conflict: looked at again shortly, from the cache.
        let resource_version = newer_write(last.as_ref(), obj)
            .map(|w| w.resource_version.to_string())
            .or_else(|| meta.resource_version.clone());
        let body = serde_json::json!({
            "apiVersion": K::api_version(&()),
            "kind": K::kind(&()),
            "metadata": {
                "name": name,
                "namespace": meta.namespace,
                "resourceVersion": resource_version,
            },
            "status": wanted,
        });
        let written_at = metadata_only::replace_status(
            &api,
            name,
            &PostParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            },
            &body,
        )
        .await;
        let updated = match written_at {
            Ok(updated) => updated,
            Err(kube::Error::Api(s)) if s.code == 409 => {
                tracing::debug!(object = ?meta.name, "status write conflicted; looking again");
                self.forget_status(&uid);
                return Ok(Some(CONFLICT_RETRY));
            }
            Err(e) => return Err(e.into()),
        };
        let rv = updated
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok());
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        match rv {
            Some(rv) => {
                written.insert(
                    uid,
                    Written {
                        resource_version: rv,
                        status: wanted,
                        generation: meta.generation,
                        at: std::time::Instant::now(),
                        at_rest: pace == Pace::AtRest,
                        held_since: None,
                    },
                );
            }
            None => {
                written.remove(&uid);
            }
        }
        Ok(None)
    }

    /// Forgets what was written for an object that is gone.
    pub fn forget_status(&self, uid: &str) {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
    }

    /// The error policy of every controller: logs real failures, then
    /// backs off per object (kube-runtime has none): [`backoff_delay`];
    /// cleanup that is only waiting for Pods retries every second.
    pub fn backoff<K: Resource>(&self, kind: &'static str, obj: &K, error: &Error) -> Action {
        if error.is_waiting() {
            return Action::requeue(Duration::from_secs(1));
        }
        let meta = obj.meta();
        let namespace = meta.namespace.clone().unwrap_or_default();
        let name = meta.name.clone().unwrap_or_default();
        tracing::warn!(%namespace, %name, %error, "reconcile failed");
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = failures.entry((kind, namespace, name)).or_insert(0);
        *n = n.saturating_add(1);
        let jitter = rand::rng().random_range(0.8..1.2);
        Action::requeue(backoff_delay(*n, jitter))
    }

    /// Records a finished reconcile: metrics by result, and the failure
    /// count reset on success.
    pub fn record<K: Resource>(
        &self,
        kind: &'static str,
        obj: &K,
        started: std::time::Instant,
        result: &Result<Action, Error>,
    ) {
        let metrics = &self.executor.metrics;
        let controller = self.executor.controller;
        let elapsed = started.elapsed().as_secs_f64();
        tracing::debug!(
            elapsed_ms = (elapsed * 1000.0) as u64,
            ok = result.is_ok(),
            "reconciled"
        );
        match result {
            Ok(_) => {
                let meta = obj.meta();
                self.succeeded(
                    kind,
                    meta.namespace.as_deref().unwrap_or_default(),
                    meta.name.as_deref().unwrap_or_default(),
                );
                metrics.reconciled(controller, "success", elapsed);
            }
            Err(e) if e.is_waiting() => metrics.reconciled(controller, "requeue", elapsed),
            Err(e) => {
                metrics.reconciled(controller, "error", elapsed);
                metrics.reconcile_error(controller, e.metric_label());
            }
        }
    }

    /// Forgets the failure count after a successful reconcile.
    pub fn succeeded(&self, kind: &'static str, namespace: &str, name: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.remove(&(kind, namespace.to_string(), name.to_string()));
    }
}

/// The first retry after a failure.
pub const BACKOFF_MIN: Duration = Duration::from_millis(500);
/// The longest wait between retries.
pub const BACKOFF_MAX: Duration = Duration::from_secs(60);

/// The wait before retry number `failures` (1 for the first): 0.5 s
/// doubling up to 60 s, times `jitter` (0.8 to 1.2, so that objects that
/// failed together do not retry together), never over 60 s.
pub fn backoff_delay(failures: u32, jitter: f64) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    let base = BACKOFF_MIN.saturating_mul(1u32 << exp).min(BACKOFF_MAX);
    base.mul_f64(jitter.clamp(0.5, 1.5)).min(BACKOFF_MAX)
}

/// How long to wait before reconciling again after a successful step.
pub fn next_action(settled: bool, recheck_after_seconds: Option<i64>) -> Action {
    match (settled, recheck_after_seconds) {
        // Expectations unseen: their events trigger the next reconcile;
        // this is only the safety net should one be lost.
        (false, _) => Action::requeue(Duration::from_secs(30)),
        (true, Some(s)) => Action::requeue(Duration::from_secs(s.max(1) as u64)),
        (true, None) => Action::await_change(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A context on `client` (see `engine::mock_api`) with no Pods.
    fn test_context(client: Client) -> Arc<Context> {
        Context::new(
            client.clone(),
            Executor::for_tests(client),
            crate::podset::watch::PodCache::empty(),
        )
    }

    /// A failure lengthens the object's backoff; a success resets it, so
    /// the next failure waits the shortest time again.
    #[tokio::test]
    async fn a_success_resets_the_backoff_of_its_object() {
        let ctx = test_context(crate::podset::mock_api::client(|_, path, _| {
            panic!("no request expected, got {path}")
        }));
        let redis: crate::api::Redis = serde_json::from_value(serde_json::json!({
            "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
            "metadata": {"name": "r", "namespace": "ns"}, "spec": {"replicas": 1},
        }))
        .unwrap();
        let failed = || {
            Error::Step(crate::podset::executor::Failure {
                reason: "FailedCreate",
                message: "refused".into(),
            })
        };
        let count = || {
            ctx.failures
                .lock()
                .unwrap()
                .get(&("Redis", "ns".to_string(), "r".to_string()))
                .copied()
        };
        let started = std::time::Instant::now();
        for n in 1..=3 {
            ctx.backoff("Redis", &redis, &failed());
            ctx.record("Redis", &redis, started, &Err(failed()));
            assert_eq!(count(), Some(n), "failure {n} counted");
        }
        ctx.record("Redis", &redis, started, &Ok(Action::await_change()));
        assert_eq!(count(), None, "reset by the success");
        ctx.backoff("Redis", &redis, &failed());
        assert_eq!(count(), Some(1), "the next failure starts over");
    }

    /// A status write that conflicts (someone else wrote in between) is not
    /// a failure: the object is looked at again shortly, and that write
    /// replaces the object as the cache then shows it.
    #[tokio::test]
    async fn a_conflicting_status_write_is_retried_from_the_cached_object() {
        use crate::api::redis::{Redis, RedisStatus};
        use std::sync::{Arc, Mutex};

        // The API server: answers each status write with the next of
        // `answers` (code, resourceVersion) and keeps the bodies it got.
        let answers = Arc::new(Mutex::new(vec![(200u16, "7"), (409, ""), (200, "9")]));
        let bodies = Arc::new(Mutex::new(Vec::<serde_json::Value>::new()));
        let (a, b) = (answers.clone(), bodies.clone());
        let client = crate::podset::mock_api::client(move |_, path, body| {
            assert!(path.ends_with("/redises/r/status"), "{path}");
            b.lock().unwrap().push(body);
            match a.lock().unwrap().remove(0) {
                (200, rv) => (
                    200,
                    serde_json::json!({"kind": "PartialObjectMetadata",
                        "apiVersion": "meta.k8s.io/v1",
                        "metadata": {"name": "r", "resourceVersion": rv}}),
                ),
                (code, _) => (code, crate::podset::mock_api::status(code, "Conflict")),
            }
        });
        let ctx = test_context(client);
        // (Each write is of a new generation, so none waits for its pace.)
        let redis = |rv: &str, generation: i64| -> Redis {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
                "metadata": {"name": "r", "namespace": "ns", "uid": "u",
                    "resourceVersion": rv, "generation": generation},
                "spec": {"replicas": 3},
            }))
            .unwrap()
        };
        let status = |generation: i64| RedisStatus {
            observed_generation: Some(generation),
            ..Default::default()
        };
        let rv_sent = |i: usize| bodies.lock().unwrap()[i]["metadata"]["resourceVersion"].clone();

        // Written at rv 5, giving 7; the cache still shows 5.
        let wrote = ctx
            .write_status(&redis("5", 1), None, &status(1), Pace::AtRest)
            .await;
        assert_eq!(wrote.unwrap(), None);
        assert_eq!(rv_sent(0), "5");
        // Our next write replaces 7, ours, and conflicts: someone wrote 8.
        let wrote = ctx
            .write_status(&redis("6", 2), Some(&status(1)), &status(2), Pace::AtRest)
            .await;
        assert_eq!(
            wrote.unwrap(),
            Some(CONFLICT_RETRY),
            "looked at again shortly"
        );
        assert_eq!(rv_sent(1), "7");
        // Looked at again: the cache now shows 8, and that is what is
        // replaced.
        let wrote = ctx
            .write_status(&redis("8", 3), None, &status(3), Pace::AtRest)
            .await;
        assert_eq!(wrote.unwrap(), None);
        assert_eq!(rv_sent(2), "8");
        assert!(answers.lock().unwrap().is_empty());
    }

    #[test]
    fn the_status_we_wrote_stands_in_for_an_older_cached_one() {
        use crate::api::redis::Redis;
        let redis = |rv: &str, ready: i32| -> Redis {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
                "metadata": {"name": "r", "namespace": "ns", "uid": "u", "resourceVersion": rv},
                "spec": {"replicas": 3},
                "status": {"replicas": 3, "readyReplicas": ready, "selector": "a=b"}
            }))
            .unwrap()
        };
        let ours = Written {
            resource_version: 7,
            status: serde_json::to_value(redis("7", 3).status).unwrap(),
            generation: None,
            at: std::time::Instant::now(),
            at_rest: false,
            held_since: None,
        };
        let stale = redis("5", 2);
        let fresh = with_status(
            &stale,
            newer_write(Some(&ours), &stale).unwrap().status.clone(),
        )
        .unwrap();
        assert_eq!(fresh.status.unwrap().ready_replicas, 3);
        assert_eq!(fresh.metadata.resource_version.as_deref(), Some("5"));
        for current in ["7", "9"] {
            assert!(newer_write(Some(&ours), &redis(current, 3)).is_none());
        }
    }

    #[test]
    fn status_writes_wait_out_the_interval_except_a_new_generation_or_coming_to_rest() {
        let last = |at_rest: bool, ago: Duration| Written {
            resource_version: 1,
            status: serde_json::Value::Null,
            generation: Some(2),
            at: std::time::Instant::now() - ago,
            at_rest,
            held_since: None,
        };
        let now = Duration::ZERO;
        let waits = |d: Option<Duration>, at_least: Duration| d.is_some_and(|d| d > at_least);
        // Changing, then changing again: one write per interval.
        assert!(waits(
            deferred(&last(false, now), Some(2), Pace::Changing),
            STATUS_INTERVAL / 2
        ));
        // The write that brings the object to rest goes at once.
        assert_eq!(deferred(&last(false, now), Some(2), Pace::AtRest), None);
        // At rest, changes (replication flapping, say) are paced again.
        assert!(deferred(&last(true, now), Some(2), Pace::AtRest).is_some());
        assert!(deferred(&last(true, now), Some(2), Pace::Changing).is_some());
        // A new generation is acknowledged at once.
        assert_eq!(deferred(&last(false, now), Some(3), Pace::Changing), None);
        // Once the interval is over, nothing waits...
        assert_eq!(
            deferred(&last(true, STATUS_INTERVAL), Some(2), Pace::Changing),
            None
        );
        // ...but Pods going one by one after a scale-down wait longer.
        assert!(waits(
            deferred(&last(false, STATUS_INTERVAL), Some(2), Pace::Draining),
            Duration::from_secs(3)
        ));
        assert_eq!(
            deferred(&last(false, DRAIN_INTERVAL), Some(2), Pace::Draining),
            None
        );
        // A scale-down's new generation waits for its terminating Pods from
        // the moment it was first held back, up to the grace...
        let held = |ago: Duration| Written {
            held_since: Some((Some(3), std::time::Instant::now() - ago)),
            ..last(true, DRAIN_INTERVAL)
        };
        assert!(waits(
            deferred(&held(now), Some(3), Pace::Draining),
            DRAIN_GRACE / 2
        ));
        assert_eq!(deferred(&held(DRAIN_GRACE), Some(3), Pace::Draining), None);
        // ...their end is written at once, and so is any other change.
        assert_eq!(deferred(&held(now), Some(3), Pace::AtRest), None);
        assert_eq!(deferred(&held(now), Some(3), Pace::Changing), None);
        // An older generation's hold does not count for a newer one
        // (`write_status` starts the newer one's).
        assert_eq!(deferred(&held(now), Some(4), Pace::Draining), None);
    }

    #[test]
    fn backoff_doubles_from_half_a_second_to_a_minute() {
        let secs = |n| backoff_delay(n, 1.0).as_secs_f64();
        assert_eq!([secs(1), secs(2), secs(3), secs(4)], [0.5, 1.0, 2.0, 4.0]);
        assert_eq!(secs(8), 60.0);
        assert_eq!(secs(1000), 60.0);
        assert_eq!(backoff_delay(1, 0.8), Duration::from_millis(400));
        assert_eq!(
            backoff_delay(100, 1.2),
            BACKOFF_MAX,
            "jitter stays under the cap"
        );
    }
}
