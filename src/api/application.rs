//! `Application`: the API of the book sample (a DeploymentSpec and a
//! ServiceSpec, and their statuses), served on bare Pods plus a Service.

use k8s_openapi::api::apps::v1::{DeploymentSpec, DeploymentStatus};
use k8s_openapi::api::core::v1::{ServiceSpec, ServiceStatus};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, CustomResourceExt, KubeSchema};
use serde::{Deserialize, Serialize};

/// An application: Pods from a Deployment-shaped spec, with Deployment's
/// rollout semantics, and a Service. podkeeper runs the Pods directly; it
/// never creates a Deployment or a ReplicaSet.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "podkeeper.dev",
    version = "v1",
    kind = "Application",
    namespaced,
    status = "ApplicationStatus",
    shortname = "app",
    category = "podkeeper",
    printcolumn(name = "Desired", type_ = "integer", json_path = ".spec.deployment.replicas"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.workflow.readyReplicas"),
    printcolumn(name = "Up-to-date", type_ = "integer", json_path = ".status.workflow.updatedReplicas"),
    printcolumn(name = "Available", type_ = "integer", json_path = ".status.workflow.availableReplicas"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    scale(
        spec_replicas_path = ".spec.deployment.replicas",
        status_replicas_path = ".status.workflow.replicas",
        label_selector_path = ".status.selector"
    ),
    validation = Rule::new("size(self.metadata.name) <= 57").message("metadata.name must be at most 57 characters: Pods are named <name>-<5 characters> and must stay within 63"),
    validation = Rule::new("!has(self.spec.service) || self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')").message("metadata.name must be a DNS-1035 label (lower case letters, digits and '-', starting with a letter) when spec.service is set: the Service is named after the Application"),
    doc = "An application run on bare Pods with Deployment semantics, plus a Service"
)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationSpec {
    /// The Pods, as a Deployment would describe them: replicas, selector,
    /// template, strategy (RollingUpdate with maxSurge/maxUnavailable, or
    /// Recreate), minReadySeconds, paused and progressDeadlineSeconds.
    #[x_kube(validation = Rule::new("!has(self.replicas) || self.replicas >= 0").message("spec.deployment.replicas must be 0 or more"))]
    #[x_kube(validation = Rule::new("(has(self.selector.matchLabels) && size(self.selector.matchLabels) > 0) || (has(self.selector.matchExpressions) && size(self.selector.matchExpressions) > 0)").message("spec.deployment.selector must not be empty"))]
    #[x_kube(validation = Rule::new("!has(self.selector.matchLabels) || !has(self.template.metadata) || !has(self.template.metadata.labels) || self.selector.matchLabels.all(k, k in self.template.metadata.labels && self.template.metadata.labels[k] == self.selector.matchLabels[k])").message("spec.deployment.selector.matchLabels must match spec.deployment.template.metadata.labels"))]
    #[x_kube(validation = Rule::new("!has(self.strategy) || !has(self.strategy.type) || self.strategy.type in ['RollingUpdate', 'Recreate']").message("spec.deployment.strategy.type must be RollingUpdate or Recreate"))]
    #[x_kube(validation = Rule::new("!has(self.strategy) || !has(self.strategy.type) || self.strategy.type != 'Recreate' || !has(self.strategy.rollingUpdate)").message("spec.deployment.strategy.rollingUpdate may not be set when the strategy is Recreate"))]
    #[x_kube(validation = Rule::new("!has(self.strategy) || !has(self.strategy.rollingUpdate) || !has(self.strategy.rollingUpdate.maxSurge) || !has(self.strategy.rollingUpdate.maxUnavailable) || !(string(self.strategy.rollingUpdate.maxSurge) in ['0', '0%'] && string(self.strategy.rollingUpdate.maxUnavailable) in ['0', '0%'])").message("spec.deployment.strategy.rollingUpdate: maxSurge and maxUnavailable may not both be 0"))]
    #[x_kube(validation = Rule::new("!has(self.minReadySeconds) || self.minReadySeconds >= 0").message("spec.deployment.minReadySeconds must be 0 or more"))]
    #[x_kube(validation = Rule::new("!has(self.progressDeadlineSeconds) || (self.progressDeadlineSeconds > 0 && (!has(self.minReadySeconds) || self.progressDeadlineSeconds > self.minReadySeconds))").message("spec.deployment.progressDeadlineSeconds must be greater than minReadySeconds"))]
    #[x_kube(validation = Rule::new("has(self.template.spec) && size(self.template.spec.containers) > 0").message("spec.deployment.template.spec.containers must list at least one container"))]
    #[x_kube(validation = Rule::new("!has(self.template.spec.restartPolicy) || self.template.spec.restartPolicy == 'Always'").message("spec.deployment.template.spec.restartPolicy must be Always"))]
    pub deployment: DeploymentSpec,

    /// The Service in front of the Pods, named after the Application. Its
    /// selector defaults to the Pod selector's matchLabels. Without it, no
    /// Service is created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service: Option<ServiceSpec>,
}

/// Observed state of an Application.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ApplicationStatus {
    /// The Pods' counts, as a Deployment reports them (the conditions are in
    /// `status.conditions`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<DeploymentStatus>,
    /// The Service's status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network: Option<ServiceStatus>,
    /// Label selector of the Pods, in string form (for the scale subresource).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub selector: String,
    /// When the rollout last made progress (more updated, ready or
    /// available Pods, or fewer old ones); progressDeadlineSeconds counts
    /// from here.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_progress_time: Option<Time>,
    /// Available, Progressing and ReplicaFailure.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

/// Descriptions of fields below the embedded Kubernetes types are dropped,
/// as controller-gen's maxDescLen=0 does: with them the CRD is too large for
/// the last-applied-configuration annotation of a plain `kubectl apply`.
/// `spec.deployment`, `spec.service`, `status.workflow` and `status.network`
/// keep their own docs.
pub fn crd() -> CustomResourceDefinition {
    let crd = Application::crd();
    let mut value = serde_json::to_value(&crd).unwrap_or_default();
    if let Some(versions) = value
        .pointer_mut("/spec/versions")
        .and_then(|v| v.as_array_mut())
    {
        for version in versions {
            for (top, fields) in [
                ("spec", ["deployment", "service"]),
                ("status", ["workflow", "network"]),
            ] {
                for field in fields {
                    let path =
                        format!("/schema/openAPIV3Schema/properties/{top}/properties/{field}");
                    if let Some(schema) = version.pointer_mut(&path) {
                        strip_nested_descriptions(schema);
                    }
                }
            }
            // Bounds that let the API server's CEL cost estimator accept the
            // selector-versus-labels rule; the same limits Kubernetes applies
            // to label keys and values.
            let deployment =
                "/schema/openAPIV3Schema/properties/spec/properties/deployment/properties";
            for map in [
                "/selector/properties/matchLabels",
                "/template/properties/metadata/properties/labels",
            ] {
                if let Some(schema) = version.pointer_mut(&format!("{deployment}{map}")) {
                    bound_label_map(schema);
                }
            }
        }
    }
    serde_json::from_value(value).unwrap_or(crd)
}

/// At most 64 labels, values at most 63 characters, keys at most 317
/// (a 253-character prefix, a slash and a 63-character name).
fn bound_label_map(schema: &mut serde_json::Value) {
    if let Some(map) = schema.as_object_mut() {
        map.insert("maxProperties".into(), 64.into());
        if let Some(values) = map
            .get_mut("additionalProperties")
            .and_then(|v| v.as_object_mut())
        {
            values.insert("maxLength".into(), 63.into());
        }
        map.insert(
            "propertyNames".into(),
            serde_json::json!({ "maxLength": 317 }),
        );
    }
}

/// Removes `description` everywhere below `schema`, keeping its own.
fn strip_nested_descriptions(schema: &mut serde_json::Value) {
    fn strip(v: &mut serde_json::Value) {
        match v {
            serde_json::Value::Object(map) => {
                map.remove("description");
                map.values_mut().for_each(strip);
            }
            serde_json::Value::Array(items) => items.iter_mut().for_each(strip),
            _ => {}
        }
    }
    if let Some(map) = schema.as_object_mut() {
        for (key, child) in map.iter_mut() {
            if key != "description" {
                strip(child);
            }
        }
    }
}
