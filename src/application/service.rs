//! The Application's Service: applied with server-side apply from
//! `spec.service`, put right when someone edits or deletes it, deleted when
//! `spec.service` is removed, and deleted first on cleanup. Refused steps
//! are returned as failures, so the reconcile retries them with backoff (a
//! nodePort that frees up is taken with no other change).

use k8s_openapi::api::core::v1::{Service, ServiceStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;

use crate::api::Application;
use crate::api::names::{APPLIED_HASH_ANNOTATION, INSTANCE_LABEL};
use crate::api::names::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use crate::podset::Context;
use crate::podset::reconcile::Extras;
use crate::runtime::Error;
use crate::runtime::events::EventType;
use crate::runtime::failure::{Failure, api_message};
use crate::runtime::hash::content_hash;
use crate::runtime::owner::Owner;
use crate::runtime::service_applier::ServiceApplier;
use crate::runtime::services::{
    cleanup_services, delete_service, failure, owned_named, owned_services,
};

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
    let hash = content_hash(&service);
    service.metadata.annotations = Some([(APPLIED_HASH_ANNOTATION.to_string(), hash)].into());
    Some(service)
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
                let changes = self.applier.changes(
                    owner,
                    app.metadata.generation.map(|g| g.to_string()),
                    &owned,
                    || desired_service(app, owner).into_iter().collect(),
                );
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
        let gone = cleanup_services(&ctx.client, &ctx.executor.recorder, owner, &live).await?;
        if gone {
            self.applier.forget(&owner.reference.uid);
        }
        Ok(gone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::services::service_in_sync;
    use serde_json::Value;
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
}
