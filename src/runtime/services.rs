//! Services every kind owns: whether a live Service still says what was
//! applied, finding an owner's Services in the one Service cache, and
//! deleting them first on cleanup.

use std::sync::Arc;

use futures::FutureExt;
use k8s_openapi::api::core::v1::Service;
use kube::api::{DeleteParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, Client, ResourceExt};
use serde_json::Value;

use crate::runtime::Error;
use crate::runtime::events::{EventRecorder, EventType};
use crate::runtime::failure::{Failure, api_message};
use crate::runtime::owner::Owner;

/// Whether every field set in `want` has the same value in `have` (lists
/// element by element). Allocated fields that `want` leaves out, such as
/// clusterIP or an unspecified nodePort, do not count.
pub fn is_subset(want: &Value, have: &Value) -> bool {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => w
            .iter()
            .all(|(k, v)| v.is_null() || h.get(k).is_some_and(|hv| is_subset(v, hv))),
        (Value::Array(w), Value::Array(h)) => {
            w.len() == h.len() && w.iter().zip(h).all(|(a, b)| is_subset(a, b))
        }
        _ => want == have,
    }
}

/// The live Service still says what podkeeper applied.
pub fn service_in_sync(want: &Service, live: &Service) -> bool {
    let (Ok(w), Ok(h)) = (serde_json::to_value(want), serde_json::to_value(live)) else {
        return false;
    };
    [
        "/metadata/labels",
        "/metadata/annotations",
        "/metadata/ownerReferences",
        "/spec",
    ]
    .iter()
    .all(|p| match (w.pointer(p), h.pointer(p)) {
        (Some(wv), Some(hv)) => is_subset(wv, hv),
        (Some(_), None) => false,
        _ => true,
    })
}

/// Whether a Service podkeeper is about to apply exists already. The cache
/// answers once it has had its first list; before that (a new leader's
/// first reconciles) a GET does, so the Event says what really happened.
/// The cache is not awaited: the controller stops reading the Service
/// stream, which fills it, while every reconcile slot is busy.
pub async fn service_exists(
    services: &Store<Service>,
    api: &Api<Service>,
    name: &str,
    cached: bool,
) -> bool {
    cached
        || (services.wait_until_ready().now_or_never().is_none()
            && matches!(api.get_opt(name).await, Ok(Some(_))))
}

/// The Services in the cache that `owner` controls (one scan of the cache).
pub fn owned_services(services: &Store<Service>, owner: &Owner) -> Vec<Arc<Service>> {
    services
        .state()
        .into_iter()
        .filter(|s| {
            s.metadata.namespace.as_deref() == Some(owner.namespace.as_str())
                && controlled_by(s, owner)
        })
        .collect()
}

/// The Services named `names` in the owner's namespace that `owner`
/// controls, from the cache (a lookup per name, where
/// [`owned_services`] scans every Service).
pub fn owned_named(
    services: &Store<Service>,
    owner: &Owner,
    names: &[String],
) -> Vec<Arc<Service>> {
    names
        .iter()
        .filter_map(|name| services.get(&ObjectRef::new(name).within(&owner.namespace)))
        .filter(|s| controlled_by(s, owner))
        .collect()
}

/// Whether `owner` is the Service's controller.
fn controlled_by(service: &Service, owner: &Owner) -> bool {
    service
        .owner_references()
        .iter()
        .any(|r| r.uid == owner.reference.uid && r.controller == Some(true))
}

/// What a Service delete found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Deleted {
    /// Deleted, and gone.
    Now,
    /// Deleted, and still there on someone's finalizer.
    Going,
    /// Not there (or another Service of the same name is).
    Absent,
}

pub async fn delete_service(api: &Api<Service>, svc: &Service) -> Result<Deleted, kube::Error> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: svc.uid(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&svc.name_any(), &params).await {
        // The API server answers with a Status or the deleted object once
        // it is gone, and with the object, finalizers and all, while one
        // holds it.
        Ok(answer) => match answer.left() {
            Some(svc) if !svc.finalizers().is_empty() => Ok(Deleted::Going),
            _ => Ok(Deleted::Now),
        },
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(Deleted::Absent),
        Err(e) => Err(e),
    }
}

/// Cleanup's first step, for every kind with Services: deletes the owner's
/// Services (`live`, as the cache has them) all at once (logged; no Event,
/// as no Pod delete of a cleanup writes one). `Ok(true)` once none is left, as the
/// deletes answered, so the Pods go in the same reconcile; `Ok(false)`
/// while one stays on a finalizer. A refused delete is a `FailedService`
/// failure, retried with backoff (and a Warning Event by `recorder`).
pub async fn cleanup_services(
    client: &Client,
    recorder: &EventRecorder,
    owner: &Owner,
    live: &[Arc<Service>],
) -> Result<bool, Error> {
    let api: Api<Service> = Api::namespaced(client.clone(), &owner.namespace);
    let (going, to_delete): (Vec<&Arc<Service>>, Vec<&Arc<Service>>) = live
        .iter()
        .partition(|s| s.metadata.deletion_timestamp.is_some());
    let results =
        futures::future::join_all(to_delete.iter().map(|s| delete_service(&api, s))).await;
    let mut deleted = Vec::new();
    let mut gone = going.is_empty();
    let mut refused = None;
    for (svc, result) in to_delete.iter().zip(results) {
        match result {
            Ok(Deleted::Now) => deleted.push(svc.name_any()),
            Ok(Deleted::Going) => {
                deleted.push(svc.name_any());
                gone = false;
            }
            Ok(Deleted::Absent) => {}
            Err(e) => {
                gone = false;
                refused.get_or_insert_with(|| {
                    format!(
                        "Error deleting Service {}: {}",
                        svc.name_any(),
                        api_message(&e)
                    )
                });
            }
        }
    }
    if !deleted.is_empty() {
        deleted.sort();
        let what = services_noun(deleted.len());
        tracing::info!(
            kind = owner.reference.kind,
            namespace = owner.namespace,
            name = owner.name,
            "deleted {what} {} before the Pods",
            deleted.join(", ")
        );
    }
    match refused {
        // Said where `kubectl describe` shows it: a deletion held up by a
        // refused Service delete is otherwise silent.
        Some(message) => {
            recorder
                .publish(
                    &owner.event_target,
                    EventType::Warning,
                    "FailedService",
                    "Cleanup",
                    message.clone(),
                )
                .await;
            Err(Error::Step(failure(message)))
        }
        None => Ok(gone),
    }
}

pub fn failure(message: String) -> Failure {
    Failure {
        reason: "FailedService",
        message,
    }
}

/// "Service" or "Services", for an Event naming `n` of them.
pub fn services_noun(n: usize) -> &'static str {
    if n == 1 { "Service" } else { "Services" }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn subset_ignores_extra_fields_but_not_changed_ones() {
        assert!(is_subset(
            &json!({"a": 1, "l": [{"x": 1}]}),
            &json!({"a": 1, "b": 2, "l": [{"x": 1, "y": 2}]})
        ));
        assert!(!is_subset(&json!({"a": 1}), &json!({"a": 2})));
        assert!(!is_subset(
            &json!({"l": [{"x": 1}]}),
            &json!({"l": [{"x": 1}, {"x": 2}]})
        ));
    }
}
