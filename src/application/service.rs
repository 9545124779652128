//! The Application's Service: applied with server-side apply from
//! `spec.service`, put right when someone edits or deletes it, deleted when
//! `spec.service` is removed, and deleted first on cleanup. Refused steps
//! are returned as failures, so the reconcile retries them with backoff (a
//! nodePort that frees up is taken with no other change).

use std::sync::Arc;

use futures::FutureExt;

use k8s_openapi::api::core::v1::{Service, ServiceStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Preconditions};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};
use serde_json::Value;

use crate::api::Application;
use crate::podset::executor::{Failure, Owner, api_message};
use crate::podset::reconcile::Extras;
use crate::podset::revision::template_hash;
use crate::runtime::events::EventType;
use crate::runtime::service_applier::ServiceApplier;
use crate::runtime::{Context, Error, MANAGED_BY_LABEL, MANAGED_BY_VALUE};

const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// Hash of the Service podkeeper last applied, to notice fields removed
/// from `spec.service`.
const APPLIED_HASH_ANNOTATION: &str = "podkeeper.dev/applied-hash";

/// The Application's Service, applied beside the reconcile.
pub struct ServiceExtras {
    pub applier: ServiceApplier<Application>,
}

/// The Service to apply, if `spec.service` is set. Pure.
pub fn desired_service(app: &Application, owner: &Owner) -> Option<Service> {
    let mut spec = app.spec.service.clone()?;
    if spec.selector.as_ref().is_none_or(|s| s.is_empty()) {
        spec.selector = app.spec.deployment.selector.match_labels.clone();
    }
    for port in spec.ports.iter_mut().flatten() {
        port.protocol.get_or_insert_with(|| "TCP".into());
    }
    let mut service = Service {
        metadata: ObjectMeta {
            name: Some(owner.name.clone()),
            namespace: Some(owner.namespace.clone()),
            labels: Some(
                [
                    (MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string()),
                    (INSTANCE_LABEL.to_string(), owner.name.clone()),
                ]
                .into(),
            ),
            owner_references: Some(vec![owner.reference.clone()]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    };
    let hash = template_hash(&service);
    service.metadata.annotations = Some([(APPLIED_HASH_ANNOTATION.to_string(), hash)].into());
    Some(service)
}

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
enum Deleted {
    /// Deleted, and gone.
    Now,
    /// Deleted, and still there on someone's finalizer.
    Going,
    /// Not there (or another Service of the same name is).
    Absent,
}

async fn delete_service(api: &Api<Service>, svc: &Service) -> Result<Deleted, kube::Error> {
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
/// Services (`live`, as the cache has them) all at once, with one `Cleanup`
/// Event naming those it deleted. `Ok(true)` once none is left, as the
/// deletes answered, so the Pods go in the same reconcile; `Ok(false)`
/// while one stays on a finalizer. A refused delete is a `FailedService`
/// failure, retried with backoff.
pub async fn cleanup_services(
    ctx: &Context,
    owner: &Owner,
    live: &[Arc<Service>],
) -> Result<bool, Error> {
    let api: Api<Service> = Api::namespaced(ctx.client.clone(), &owner.namespace);
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
        ctx.executor
            .event(
                owner,
                EventType::Normal,
                "Cleanup",
                "Cleanup",
                format!("Deleted {what} {} before the Pods", deleted.join(", ")),
            )
            .await;
    }
    match refused {
        // Said where `kubectl describe` shows it: a deletion held up by a
        // refused Service delete is otherwise silent.
        Some(message) => {
            ctx.executor
                .event(
                    owner,
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

fn failure(message: String) -> Failure {
    Failure {
        reason: "FailedService",
        message,
    }
}

/// The Service's status as the Application shows it: `None` when there is
/// no Service.
pub type Network = Option<ServiceStatus>;

impl Extras<Application> for ServiceExtras {
    type Report = Network;
    type Steer = ();

    async fn apply(
        &self,
        app: &Application,
        ctx: &Context,
        owner: &Owner,
        _: (),
    ) -> (Network, Option<Failure>) {
        let api: Api<Service> = Api::namespaced(ctx.client.clone(), &owner.namespace);
        // The Service is named after the Application.
        let owned = owned_named(
            self.applier.services(),
            owner,
            std::slice::from_ref(&owner.name),
        );
        let live = owned.first().cloned();
        if app.spec.service.is_none() {
            // No Service wanted: nothing of an earlier apply stands.
            self.applier.forget(&owner.reference.uid);
        }
        match (app.spec.service.is_some(), live) {
            (true, live) => {
                // Applied beside the reconcile (see [`crate::runtime::service_applier`]); the
                // status shows the Service as the cache has it.
                let changes = self
                    .applier
                    .changes(owner, app.metadata.generation, &owned, || {
                        desired_service(app, owner).into_iter().collect()
                    });
                let failure = self.applier.step(owner, changes);
                let network = match live {
                    Some(live) => live.status.clone(),
                    None => self.kept(app),
                };
                (network, failure)
            }
            (false, Some(live)) => match delete_service(&api, &live).await {
                Ok(_) => {
                    ctx.executor
                        .event(
                            owner,
                            EventType::Normal,
                            "ServiceDeleted",
                            "DeleteService",
                            format!("Deleted Service {}: spec.service was removed", owner.name),
                        )
                        .await;
                    (None, None)
                }
                Err(e) => {
                    let message =
                        format!("Error deleting Service {}: {}", owner.name, api_message(&e));
                    ctx.executor
                        .event(
                            owner,
                            EventType::Warning,
                            "FailedService",
                            "DeleteService",
                            message.clone(),
                        )
                        .await;
                    (self.kept(app), Some(failure(message)))
                }
            },
            (false, None) => (None, None),
        }
    }

    fn kept(&self, app: &Application) -> Network {
        app.status.as_ref().and_then(|s| s.network.clone())
    }

    /// The Service first, to stop traffic: `Ok(true)` once it is gone.
    async fn cleanup(&self, _: &Application, ctx: &Context, owner: &Owner) -> Result<bool, Error> {
        let live = owned_services(self.applier.services(), owner);
        let gone = cleanup_services(ctx, owner, &live).await?;
        if gone {
            self.applier.forget(&owner.reference.uid);
        }
        Ok(gone)
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

    fn app(extra: Value) -> Application {
        let mut spec = json!({
            "deployment": {
                "replicas": 4,
                "selector": {"matchLabels": {"app": "nginx"}},
                "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.14.2"}]}}
            },
            "service": {"type": "NodePort", "ports": [{"port": 80, "targetPort": 80}]}
        });
        merge(&mut spec, extra);
        let mut a = Application::new("web", serde_json::from_value(spec).unwrap());
        a.metadata.namespace = Some("ns".into());
        a.metadata.uid = Some("uid-web".into());
        a.metadata.generation = Some(1);
        a
    }

    fn merge(a: &mut Value, b: Value) {
        match (a, b) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    fn owner(a: &Application) -> Owner {
        Owner::of(a, "Application")
    }

    #[test]
    fn service_defaults_its_selector_and_detects_drift_but_not_allocations() {
        let a = app(json!({}));
        let o = owner(&a);
        let want = desired_service(&a, &o).unwrap();
        let spec = want.spec.as_ref().unwrap();
        assert_eq!(spec.selector.as_ref().unwrap()["app"], "nginx");
        assert_eq!(
            spec.ports.as_ref().unwrap()[0].protocol.as_deref(),
            Some("TCP")
        );

        let mut live = want.clone();
        let live_spec = live.spec.as_mut().unwrap();
        live_spec.cluster_ip = Some("10.96.0.10".into());
        live_spec.ports.as_mut().unwrap()[0].node_port = Some(31234);
        assert!(
            service_in_sync(&want, &live),
            "allocated values are not drift"
        );
        live.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
        assert!(!service_in_sync(&want, &live), "an edited type is drift");

        let changed = app(json!({"service": {"ports": [{"port": 8080, "targetPort": 80}]}}));
        let want2 = desired_service(&changed, &o).unwrap();
        assert_ne!(want.metadata.annotations, want2.metadata.annotations);
        assert!(desired_service(&app(json!({"service": null})), &o).is_none());
    }

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
