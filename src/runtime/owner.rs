//! The object whose Pods and Services are managed, as every step names it:
//! its key, namespace and name, the controller reference its children
//! carry, and where its Events go.

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Resource;

/// Identifies an owner by kind, namespace and name.
pub type OwnerKey = (&'static str, String, String);

/// The object whose Pods are managed.
#[derive(Clone)]
pub struct Owner {
    pub key: OwnerKey,
    pub namespace: String,
    pub name: String,
    /// The controller reference every Pod carries.
    pub reference: OwnerReference,
    /// Where Events are recorded.
    pub event_target: ObjectReference,
}

impl Owner {
    /// The owner `obj`, whose kind is `kind`.
    pub fn of<K: Resource<DynamicType = ()>>(obj: &K, kind: &'static str) -> Self {
        let meta = obj.meta();
        let namespace = meta.namespace.clone().unwrap_or_default();
        let name = meta.name.clone().unwrap_or_default();
        Owner {
            key: (kind, namespace.clone(), name.clone()),
            reference: OwnerReference {
                api_version: K::api_version(&()).into_owned(),
                kind: K::kind(&()).into_owned(),
                name: name.clone(),
                uid: meta.uid.clone().unwrap_or_default(),
                controller: Some(true),
                // Foreground deletion of the owner waits for its Pods.
                block_owner_deletion: Some(true),
            },
            event_target: obj.object_ref(&()),
            namespace,
            name,
        }
    }
}
