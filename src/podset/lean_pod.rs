//! The Pod as the Pod watch decodes it: the metadata without managedFields,
//! and of spec and status only what the operator reads.
//!
//! The cache never keeps managedFields, and decoding them was a third of
//! the cost of decoding a Pod (about 6 % of the operator's CPU in the
//! benchmark's scale-down, every Pod event being decoded once). A
//! [`LeanPod`] is read through copies of the wire forms that leave out
//! what no reader of the cache uses, so serde skips it unread; the watch
//! then hands on the plain `Pod` inside. The cache held about 14 KiB per
//! Pod of the benchmark's template whole (volumes, probes, spreading,
//! security context, env; heaptrack: 43.7 of the operator's 80 MiB of heap
//! at 1000 x 3).
//!
//! What is kept is what the cache's readers use: the planner
//! ([`crate::podset::ObservedPod::from_pod`]), in-place updates
//! ([`crate::podset::inplace`]: containers' names, images and resources,
//! their statuses, `observedGeneration`), and Redis replication (Pod IP,
//! phase, conditions, container states; init containers' states for a
//! restore; the redis container's ports, which say whether a member serves
//! TLS). A new reader of another field
//! must add it here.

use std::borrow::Cow;
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, ContainerState, ContainerStatus, Pod, PodCondition, PodSpec,
    PodStatus, ResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use kube::Resource;
use serde::Deserialize;

/// A Pod decoded without its managedFields, and with only the parts of its
/// spec and status that the operator reads.
#[derive(Clone, Debug, Deserialize)]
#[serde(from = "Wire")]
pub struct LeanPod(pub Pod);

#[derive(Deserialize)]
struct Wire {
    #[serde(default)]
    metadata: WireMeta,
    spec: Option<WireSpec>,
    status: Option<WireStatus>,
}

/// `PodSpec`: its containers (as [`WireContainer`]) and node.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireSpec {
    #[serde(default)]
    containers: Vec<WireContainer>,
    node_name: Option<String>,
}

/// `Container`: what an in-place update compares, and its ports (a Redis
/// member's plaintext and TLS ports).
#[derive(Deserialize)]
struct WireContainer {
    name: String,
    image: Option<String>,
    resources: Option<ResourceRequirements>,
    ports: Option<Vec<ContainerPort>>,
}

/// `PodStatus`, without host IPs, QoS class, start time, resource claims
/// and the like.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireStatus {
    conditions: Option<Vec<PodCondition>>,
    container_statuses: Option<Vec<WireContainerStatus>>,
    init_container_statuses: Option<Vec<WireInitStatus>>,
    observed_generation: Option<i64>,
    phase: Option<String>,
    #[serde(rename = "podIP")]
    pod_ip: Option<String>,
}

/// `ContainerStatus`, without its last state, image ID, volume mounts,
/// resources and user.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireContainerStatus {
    #[serde(rename = "containerID")]
    container_id: Option<String>,
    #[serde(default)]
    image: String,
    name: String,
    #[serde(default)]
    ready: bool,
    #[serde(default)]
    restart_count: i32,
    state: Option<ContainerState>,
}

/// An init container's `ContainerStatus`: its name and states (a Redis
/// being restored reads why its `restore` init container failed).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireInitStatus {
    name: String,
    state: Option<ContainerState>,
    last_state: Option<ContainerState>,
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
            spec: wire.spec.map(|s| PodSpec {
                containers: s
                    .containers
                    .into_iter()
                    .map(|c| Container {
                        name: c.name,
                        image: c.image,
                        resources: c.resources,
                        ports: c.ports,
                        ..Default::default()
                    })
                    .collect(),
                node_name: s.node_name,
                ..Default::default()
            }),
            status: wire.status.map(|s| PodStatus {
                conditions: s.conditions,
                container_statuses: s.container_statuses.map(|cs| {
                    cs.into_iter()
                        .map(|c| ContainerStatus {
                            container_id: c.container_id,
                            image: c.image,
                            name: c.name,
                            ready: c.ready,
                            restart_count: c.restart_count,
                            state: c.state,
                            ..Default::default()
                        })
                        .collect()
                }),
                init_container_statuses: s.init_container_statuses.map(|cs| {
                    cs.into_iter()
                        .map(|c| ContainerStatus {
                            name: c.name,
                            state: c.state,
                            last_state: c.last_state,
                            ..Default::default()
                        })
                        .collect()
                }),
                observed_generation: s.observed_generation,
                phase: s.phase,
                pod_ip: s.pod_ip,
                ..Default::default()
            }),
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

    /// What no reader of the cache uses is left out; what they read is
    /// decoded as `Pod` decodes it.
    #[test]
    fn a_lean_pod_keeps_only_what_the_operator_reads() {
        let mut wire = wire_pod();
        wire["spec"] = serde_json::json!({
            "nodeName": "node-1",
            "volumes": [{"name": "data", "emptyDir": {}}],
            "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                "whenUnsatisfiable": "ScheduleAnyway"}],
            "containers": [{
                "name": "redis", "image": "redis:8",
                "resources": {"requests": {"cpu": "100m"}},
                "env": [{"name": "A", "value": "b"}],
                "readinessProbe": {"exec": {"command": ["true"]}}
            }]
        });
        wire["status"] = serde_json::json!({
            "phase": "Running", "podIP": "10.244.0.7", "hostIP": "172.18.0.2",
            "observedGeneration": 2, "qosClass": "Burstable",
            "conditions": [{"type": "Ready", "status": "True",
                "lastTransitionTime": "2026-12-05T10:00:05Z"}],
            "containerStatuses": [{
                "name": "redis", "image": "redis:8", "imageID": "sha256:abc",
                "containerID": "containerd://1", "ready": true, "restartCount": 2,
                "state": {"running": {"startedAt": "2026-12-05T10:00:04Z"}},
                "lastState": {"terminated": {"exitCode": 1}}
            }]
        });
        let LeanPod(lean) = serde_json::from_value(wire.clone()).unwrap();
        let full: Pod = serde_json::from_value(wire).unwrap();
        let (spec, full_spec) = (lean.spec.unwrap(), full.spec.unwrap());
        assert_eq!(spec.node_name, full_spec.node_name);
        assert_eq!(spec.volumes, None);
        assert_eq!(spec.topology_spread_constraints, None);
        let (c, full_c) = (&spec.containers[0], &full_spec.containers[0]);
        assert_eq!(
            (&c.name, &c.image, &c.resources),
            (&full_c.name, &full_c.image, &full_c.resources)
        );
        assert_eq!((&c.env, &c.readiness_probe), (&None, &None));
        let (status, full_status) = (lean.status.unwrap(), full.status.unwrap());
        assert_eq!(status.phase, full_status.phase);
        assert_eq!(status.pod_ip, full_status.pod_ip);
        assert_eq!(status.observed_generation, Some(2));
        assert_eq!(status.conditions, full_status.conditions);
        assert_eq!((&status.host_ip, &status.qos_class), (&None, &None));
        let (s, full_s) = (
            &status.container_statuses.as_ref().unwrap()[0],
            &full_status.container_statuses.as_ref().unwrap()[0],
        );
        assert_eq!(
            (
                &s.name,
                &s.image,
                &s.container_id,
                s.ready,
                s.restart_count,
                &s.state
            ),
            (
                &full_s.name,
                &full_s.image,
                &full_s.container_id,
                full_s.ready,
                full_s.restart_count,
                &full_s.state
            )
        );
        assert_eq!((&s.last_state, s.image_id.as_str()), (&None, ""));
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
