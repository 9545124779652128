//! Status writes: a replace of the status subresource, written only when it
//! changes, paced per object ([`Pace`]), and remembered until the watch
//! shows it, so that a reconcile that starts before then does not mistake
//! the older status for the current one.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use kube::api::PostParams;
use kube::{Api, Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::api::names::FIELD_MANAGER;
use crate::runtime::Error;
use crate::runtime::metadata_only;

/// Writes the status of every kind's objects.
pub struct StatusWriter {
    client: Client,
    /// The status last written per object uid, with the resourceVersion the
    /// write produced.
    written: Mutex<HashMap<String, Written>>,
}

/// A status write of ours.
#[derive(Clone)]
struct Written {
    resource_version: u64,
    /// The status as written, compact JSON: as a `serde_json::Value` it
    /// took about 7 KiB per Redis (heaptrack at 1000 x 3: 7 of the
    /// operator's 80 MiB of heap), and it is read back only when the cache
    /// lags behind the write ([`StatusWriter::freshest`]).
    status: Box<str>,
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
    /// A record that must be written before anything it describes is done
    /// (a Redis's new primary): never deferred.
    Now,
}

/// How long a status write after `last` waits, if it does: never for the
/// write that brings the object to rest, and for a new generation only while
/// just its terminating Pods are left, up to [`DRAIN_GRACE`].
fn deferred(last: &Written, generation: Option<i64>, pace: Pace) -> Option<Duration> {
    if pace == Pace::Now {
        return None;
    }
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

impl StatusWriter {
    pub fn new(client: Client) -> Self {
        StatusWriter {
            client,
            written: Mutex::new(HashMap::new()),
        }
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
        with_status(obj, serde_json::from_str(&status).ok()?)
    }

    /// Writes `status` to the status subresource unless it is already
    /// there in `current`: the status of the object as [`Self::freshest`]
    /// gives it (ours when the cache lags). The write replaces the status
    /// whole, so fields that no longer apply are removed (a merge patch of
    /// the struct would have kept them: its `None` fields are not sent).
    /// `pace` says what `status` describes; returns
    /// `Some(wait)` when the write is deferred by its pace ([`Pace`]): the
    /// caller requeues after `wait`.
    pub async fn write<K, S>(
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
                self.forget(&uid);
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
                        status: wanted.to_string().into(),
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
    pub fn forget(&self, uid: &str) {
        self.written
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let client = crate::runtime::mock_api::client(move |_, path, body| {
            assert!(path.ends_with("/redises/r/status"), "{path}");
            b.lock().unwrap().push(body);
            match a.lock().unwrap().remove(0) {
                (200, rv) => (
                    200,
                    serde_json::json!({"kind": "PartialObjectMetadata",
                        "apiVersion": "meta.k8s.io/v1",
                        "metadata": {"name": "r", "resourceVersion": rv}}),
                ),
                (code, _) => (code, crate::runtime::mock_api::status(code, "Conflict")),
            }
        });
        let status_writer = StatusWriter::new(client);
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
        let wrote = status_writer
            .write(&redis("5", 1), None, &status(1), Pace::AtRest)
            .await;
        assert_eq!(wrote.unwrap(), None);
        assert_eq!(rv_sent(0), "5");
        // Our next write replaces 7, ours, and conflicts: someone wrote 8.
        let wrote = status_writer
            .write(&redis("6", 2), Some(&status(1)), &status(2), Pace::AtRest)
            .await;
        assert_eq!(
            wrote.unwrap(),
            Some(CONFLICT_RETRY),
            "looked at again shortly"
        );
        assert_eq!(rv_sent(1), "7");
        // Looked at again: the cache now shows 8, and that is what is
        // replaced.
        let wrote = status_writer
            .write(&redis("8", 3), None, &status(3), Pace::AtRest)
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
            status: serde_json::to_string(&redis("7", 3).status).unwrap().into(),
            generation: None,
            at: std::time::Instant::now(),
            at_rest: false,
            held_since: None,
        };
        let stale = redis("5", 2);
        let written = &newer_write(Some(&ours), &stale).unwrap().status;
        let fresh = with_status(&stale, serde_json::from_str(written).unwrap()).unwrap();
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
            status: "null".into(),
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
        // A record that must precede what it describes (a Redis's new
        // primary) is never held back, even just after another write.
        assert_eq!(deferred(&last(true, now), Some(2), Pace::Now), None);
        assert_eq!(deferred(&last(false, now), Some(2), Pace::Now), None);
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
}
