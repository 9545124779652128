//! The Pod as the Pod watch decodes it: everything but managedFields.
//!
//! The cache never keeps managedFields, and decoding them was a third of
//! the cost of decoding a Pod (about 6 % of the operator's CPU in the
//! benchmark's scale-down, every Pod event being decoded once). A
//! [`LeanPod`] is read through a copy of `ObjectMeta`'s wire form that
//! leaves them out, so serde skips them unread; the watch then hands on
//! the plain `Pod` inside.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use serde::Deserialize;

/// A Pod decoded without its managedFields.
#[derive(Clone, Debug, Deserialize)]
#[serde(from = "Wire")]
pub struct LeanPod(pub Pod);

#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    metadata: WireMeta,
    spec: Option<PodSpec>,
    status: Option<PodStatus>,
}

/// `ObjectMeta` as the API server sends it, without `managedFields`.
#[derive(Default, Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireMeta {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    self_link: Option<String>,
    uid: Option<String>,
}

impl From<Wire> for LeanPod {
    fn from(wire: Wire) -> Self {
        let m = wire.metadata;
        LeanPod(Pod {
            metadata: ObjectMeta {
                annotations: m.annotations,
                creation_timestamp: m.creation_timestamp,
                deletion_grace_period_seconds: m.deletion_grace_period_seconds,
                deletion_timestamp: m.deletion_timestamp,
                finalizers: m.finalizers,
                generate_name: m.generate_name,
                generation: m.generation,
                labels: m.labels,
                managed_fields: None,
                name: m.name,
                namespace: m.namespace,
                owner_references: m.owner_references,
                resource_version: m.resource_version,
                self_link: m.self_link,
                uid: m.uid,
            },
            spec: wire.spec,
            status: wire.status,
        })
    }
}

/// The same resource as `Pod` (its URL, kind and version), for `Api`.
impl Resource for LeanPod {
    type DynamicType = ();
    type Scope = k8s_openapi::NamespaceResourceScope;

    fn kind(_: &()) -> Cow<'_, str> {
        Pod::kind(&())
    }
    fn group(_: &()) -> Cow<'_, str> {
        Pod::group(&())
    }
    fn version(_: &()) -> Cow<'_, str> {
        Pod::version(&())
    }
    fn plural(_: &()) -> Cow<'_, str> {
        Pod::plural(&())
    }
    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Pod as a watch event carries it, managedFields included.
    fn wire_pod() -> serde_json::Value {
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "r-abcde", "namespace": "ns", "uid": "u1",
                "resourceVersion": "42", "generation": 2,
                "creationTimestamp": "2026-12-05T10:00:00Z",
                "deletionTimestamp": "2026-12-05T10:01:00Z",
                "deletionGracePeriodSeconds": 30,
                "labels": {"app.kubernetes.io/managed-by": "podkeeper"},
                "annotations": {"podkeeper.dev/template-hash": "h1"},
                "finalizers": ["example.com/hold"],
                "generateName": "r-",
                "ownerReferences": [{
                    "apiVersion": "podkeeper.dev/v1", "kind": "Redis", "name": "r",
                    "uid": "o1", "controller": true
                }],
                "managedFields": [{
                    "manager": "podkeeper", "operation": "Update", "apiVersion": "v1",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:metadata": {"f:labels": {".": {}}}}
                }]
            },
            "spec": {"nodeName": "node-1", "containers": [{"name": "redis", "image": "redis:8"}]},
            "status": {"phase": "Running", "podIP": "10.244.0.7"}
        })
    }

    #[test]
    fn a_lean_pod_is_the_pod_without_its_managed_fields() {
        let LeanPod(lean) = serde_json::from_value(wire_pod()).unwrap();
        let mut full: Pod = serde_json::from_value(wire_pod()).unwrap();
        assert!(full.metadata.managed_fields.is_some());
        full.metadata.managed_fields = None;
        assert_eq!(lean, full);
    }

    #[test]
    fn a_lean_pod_is_watched_at_the_pods_url() {
        assert_eq!(
            LeanPod::url_path(&(), Some("ns")),
            Pod::url_path(&(), Some("ns"))
        );
        assert_eq!(LeanPod::api_version(&()), "v1");
    }
}
