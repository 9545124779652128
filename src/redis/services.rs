//! A Redis's two Services: `<name>` for the primary, `<name>-replicas` for
//! the replicas. Pure.

use k8s_openapi::api::core::v1::{Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;

use crate::api::Redis;
use crate::api::names::{INSTANCE_LABEL, NAME_LABEL};
use crate::api::names::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, POD_NAME_LABEL, ROLE_LABEL};
use crate::api::redis::{primary_service_name, replicas_service_name};
use crate::redis::pod::{TLS_PORT_NAME, plaintext, selector_labels};
use crate::runtime::owner::Owner;

/// The names of a Redis's two Services, primary's first.
pub fn service_names(redis: &Redis) -> [String; 2] {
    let name = redis.name_any();
    [primary_service_name(&name), replicas_service_name(&name)]
}

/// The two Services of a Redis: `<name>` selects the primary (read-write),
/// `<name>-replicas` the replicas (read-only; Services send traffic to
/// ready Pods only). Owned by the Redis. Pure.
///
/// `<name>` selects the primary Pod by its name (`primary`, the member the
/// operator last made or found primary), not by the role label: moving the
/// primary is then one write (this selector), which the endpoint
/// controllers and kube-proxy take up as one change, the old Pod out and
/// the new one in. Moving it by role labels takes two writes (the old
/// Pod's label, then the new one's), and kube-proxy, which syncs at most
/// once a second, can apply the first alone: a second with no endpoint, in
/// which new connections are refused or lost. With no primary known it
/// selects by the role label (no Pod carries `primary` then).
pub fn desired_services(redis: &Redis, owner: &Owner, primary: Option<&str>) -> Vec<Service> {
    let name = redis.name_any();
    service_names(redis)
        .into_iter()
        .zip(["primary", "replica"])
        .map(|(service, role)| {
            let mut selector = selector_labels(&name);
            match primary.filter(|_| role == "primary") {
                Some(pod) => selector.insert(POD_NAME_LABEL.into(), pod.into()),
                None => selector.insert(ROLE_LABEL.into(), role.into()),
            };
            Service {
                metadata: ObjectMeta {
                    name: Some(service),
                    namespace: Some(owner.namespace.clone()),
                    labels: Some(
                        [
                            (MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string()),
                            (INSTANCE_LABEL.to_string(), name.clone()),
                            (NAME_LABEL.to_string(), "redis".to_string()),
                        ]
                        .into(),
                    ),
                    owner_references: Some(vec![owner.reference.clone()]),
                    ..Default::default()
                },
                spec: Some(ServiceSpec {
                    selector: Some(selector),
                    ports: Some(service_ports(redis)),
                    ..Default::default()
                }),
                status: None,
            }
        })
        .collect()
}

/// The ports both Services expose: `redis` (plaintext, unless `spec.tls`
/// turned it off) and `redis-tls` (with `spec.tls`).
fn service_ports(redis: &Redis) -> Vec<ServicePort> {
    [
        plaintext(redis).then_some(("redis", redis.spec.port)),
        redis.spec.tls.as_ref().map(|t| (TLS_PORT_NAME, t.port)),
    ]
    .into_iter()
    .flatten()
    .map(|(name, port)| ServicePort {
        name: Some(name.into()),
        port,
        target_port: Some(IntOrString::String(name.into())),
        protocol: Some("TCP".into()),
        ..Default::default()
    })
    .collect()
}
