//! `Redis`: a number of redis-server Pods managed directly by podkeeper.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Affinity, ResourceRequirements, Toleration, TopologySpreadConstraint,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::core::{Message, Rule};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::api::backup::{BackupScheduleSpec, RestoreSpec};
use crate::api::names::{DNS_LABEL_MAX, POD_NAME_SUFFIX_LEN};
use crate::api::names::{INSTANCE_LABEL, MANAGED_BY_LABEL, NAME_LABEL};
use crate::api::redis_config::{refused_names_rule, value_rules};

/// What the replicas' Service adds to a Redis's name.
pub const REPLICAS_SERVICE_SUFFIX: &str = "-replicas";

/// The longest suffix podkeeper adds to a Redis's name for an object it
/// derives: its Pods (`<name>-xxxxx`) and its Services (`<name>`,
/// `<name>-replicas`). The name itself is also a label value.
pub const LONGEST_DERIVED_SUFFIX: usize = if POD_NAME_SUFFIX_LEN > REPLICAS_SERVICE_SUFFIX.len() {
    POD_NAME_SUFFIX_LEN
} else {
    REPLICAS_SERVICE_SUFFIX.len()
};

/// Longest Redis name: every object derived from it must stay a DNS-1035
/// label of at most 63 characters.
pub const MAX_NAME_LENGTH: usize = DNS_LABEL_MAX - LONGEST_DERIVED_SUFFIX;

/// The CRD's rule on a Redis's name length ([`MAX_NAME_LENGTH`]).
pub fn name_length_rule() -> Rule {
    Rule::new(format!("size(self.metadata.name) <= {MAX_NAME_LENGTH}")).message(Message::Message(format!(
        "metadata.name must be at most {MAX_NAME_LENGTH} characters: the Service <name>{REPLICAS_SERVICE_SUFFIX} and the Pods <name>-xxxxx must stay within {DNS_LABEL_MAX}"
    )))
}

/// The CRD's rule that a Redis's name is a DNS-1035 label, as its
/// Services' names must be.
pub fn name_label_rule() -> Rule {
    Rule::new("self.metadata.name.matches('^[a-z]([-a-z0-9]*[a-z0-9])?$')").message(
        "metadata.name must be a DNS-1035 label (a lower-case letter first, then lower-case letters, digits and '-', ending in a letter or digit): it names the Redis's Services",
    )
}
/// The most replicas one Redis may ask for.
pub const MAX_REPLICAS: i32 = 1000;
pub const DEFAULT_IMAGE: &str = "redis:7.4.2";

/// A primary redis-server and its replicas on bare Pods, created, healed,
/// scaled and rolled by podkeeper directly (no Deployment, ReplicaSet or
/// StatefulSet, no Sentinel). Deleting a Redis deletes its Services and Pods
/// first; the Redis disappears last.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "podkeeper.dev",
    version = "v1",
    kind = "Redis",
    plural = "redises",
    namespaced,
    status = "RedisStatus",
    shortname = "rds",
    category = "podkeeper",
    printcolumn(name = "Desired", type_ = "integer", json_path = ".spec.replicas"),
    printcolumn(name = "Ready", type_ = "integer", json_path = ".status.readyReplicas"),
    printcolumn(name = "Primary", type_ = "string", json_path = ".status.primary.pod"),
    printcolumn(name = "Status", type_ = "string", description = "The reason of the Ready condition: Replicated when serving; else why not (ReplicasNotReady, NotReplicated, Simulated, ...)", json_path = ".status.conditions[?(@.type==\"Ready\")].reason"),
    printcolumn(name = "Image", type_ = "string", json_path = ".spec.image"),
    printcolumn(name = "Port", type_ = "integer", json_path = ".spec.port"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    scale(
        spec_replicas_path = ".spec.replicas",
        status_replicas_path = ".status.replicas",
        label_selector_path = ".status.selector"
    ),
    validation = name_length_rule(),
    validation = name_label_rule(),
    validation = Rule::new("!has(oldSelf.spec.storage) || has(self.spec.storage)").message("spec.storage cannot be removed: the members' data is on their claims"),
    validation = Rule::new("!has(self.spec.tls) || self.spec.tls.port != self.spec.port").message("spec.tls.port must differ from spec.port (the plaintext port)"),
    validation = Rule::new("has(oldSelf.spec.tls) || !has(self.spec.tls) || self.spec.tls.plaintext").message("spec.tls must be added to a running Redis with plaintext: true (members started with TLS replicate over it and old ones without cannot: move the clients to TLS, then set plaintext: false)"),
    validation = Rule::new("!has(oldSelf.spec.tls) || has(self.spec.tls) || oldSelf.spec.tls.plaintext").message("spec.tls can be removed only while plaintext is true (set plaintext: true first and move the clients to the plaintext port)"),
    validation = Rule::new("has(self.spec.restore) == has(oldSelf.spec.restore) && (!has(self.spec.restore) || self.spec.restore == oldSelf.spec.restore)").message("spec.restore is set when a Redis is created and cannot change"),
    doc = "A set of redis-server Pods managed directly by podkeeper"
)]
#[serde(rename_all = "camelCase")]
pub struct RedisSpec {
    /// Number of redis-server Pods. 0 keeps the Redis but runs no Pods.
    #[serde(default = "default_replicas")]
    #[schemars(range(min = 0, max = 1000))]
    pub replicas: i32,

    /// Container image that provides redis-server.
    #[serde(default = "default_image")]
    #[schemars(length(min = 1, max = 512))]
    #[x_kube(validation = Rule::new("!self.contains(' ') && self.trim() == self").message("image must not contain spaces"))]
    pub image: String,

    /// TCP port redis-server listens on (passed as --port), from 1234 to 54321.
    #[serde(default = "default_port")]
    #[schemars(range(min = 1234, max = 54321))]
    pub port: i32,

    /// Compute resources of the redis container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,

    /// When the kubelet pulls the image: Always, IfNotPresent or Never.
    #[serde(default)]
    pub image_pull_policy: PullPolicy,

    /// The password of every member (clients and replicas use it): a key of
    /// a Secret in this namespace, created with a generated password when
    /// it does not exist. Without it, redis-server asks for none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("size(self.secretName) <= 253 && self.secretName.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("spec.auth.secretName must be a Secret name (a DNS subdomain)"))]
    #[x_kube(validation = Rule::new("size(self.key) >= 1 && size(self.key) <= 253 && self.key.matches('^[-._a-zA-Z0-9]+$')").message("spec.auth.key must be a Secret key (letters, digits, '-', '_', '.')"))]
    pub auth: Option<AuthSpec>,

    /// TLS for clients and replication: a Secret with `tls.crt`, `tls.key`
    /// and `ca.crt` (cert-manager's layout) or, without `secretName`, a CA
    /// and a certificate podkeeper issues and renews itself. Certificates
    /// renewed in the Secret are taken up by every member without a
    /// restart.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsSpec>,

    /// A NetworkPolicy `<name>` that admits to the members only the client
    /// Pods `clients` selects (in this namespace, or in the namespaces
    /// `namespaceSelector` picks), the members themselves and the
    /// operator. Enforced only where the cluster's network plugin enforces
    /// NetworkPolicies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub network_policy: Option<NetworkPolicySpec>,

    /// Application users (Redis ACL users), each with its password from a
    /// Secret and its permissions. Whatever the permissions say, an
    /// application user cannot run administrative commands (`-@admin`:
    /// REPLICAOF, FAILOVER, CONFIG, ACL, SHUTDOWN, MONITOR, ...), DEBUG or
    /// MODULE. Brought to the running members without a restart.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 32))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub users: Vec<UserSpec>,

    /// Whether clients may log in as Redis's `default` user (with the
    /// `spec.auth` password, or without one). `Disabled`: only
    /// `spec.users` may log in. The `default` user cannot run
    /// administrative commands either.
    #[serde(default)]
    pub default_user: DefaultUser,

    /// redis.conf directives, name to value (`maxmemory-policy:
    /// allkeys-lru`, `save: 3600 1 300 100`); a value is split on spaces into
    /// the directive's arguments. Refused: the directives podkeeper sets
    /// itself (replicaof, port, bind, requirepass, masterauth, dir, ...) or
    /// that break what it relies on (rename-command, replica-read-only,
    /// user, ...), and values redis-server could read as more than one
    /// directive (a word starting with `--`, a lone `-`, control
    /// characters, quotes). `maxmemory` defaults to 75 % of the memory
    /// limit; persistence is off unless set.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "config_schema")]
    #[x_kube(validation = refused_names_rule())]
    #[x_kube(validation = Rule::new("self.all(k, k.matches('^[A-Za-z0-9][-A-Za-z0-9]*$'))").message("spec.config: directive names are letters, digits and '-'"))]
    #[x_kube(validation = value_rules()[0].clone())]
    #[x_kube(validation = value_rules()[1].clone())]
    #[x_kube(validation = value_rules()[2].clone())]
    pub config: BTreeMap<String, String>,

    /// When to fail over, how long a planned switchover may pause writes,
    /// and when a primary cut off from its replicas stops taking writes.
    #[serde(default)]
    #[x_kube(validation = Rule::new(WRITE_FENCE_RULE).message(WRITE_FENCE_MESSAGE))]
    pub failover: FailoverSpec,

    /// A PersistentVolumeClaim per member, mounted at the data directory,
    /// with persistence on (`appendonly yes`, `appendfsync everysec`, unless
    /// `spec.config` says otherwise). A member replaced after its Pod is
    /// deleted, evicted or lost comes back on its own claim. Without it the
    /// data lives in an `emptyDir` and persistence is off. Can be added to a
    /// running Redis (its members move onto claims one at a time) but not
    /// removed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("quantity(self.size).compareTo(quantity(oldSelf.size)) >= 0").message("spec.storage.size cannot shrink: a PersistentVolumeClaim can only grow"))]
    #[x_kube(validation = Rule::new("has(self.storageClassName) == has(oldSelf.storageClassName) && (!has(self.storageClassName) || self.storageClassName == oldSelf.storageClassName)").message("spec.storage.storageClassName cannot change: a claim's class is fixed"))]
    pub storage: Option<StorageSpec>,

    /// Backups on a schedule into S3-compatible object storage, taken from
    /// a caught-up replica (`RedisBackup` objects labelled
    /// `podkeeper.dev/backup-schedule: <name>`), the old ones pruned by
    /// `retention`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub backup: Option<BackupScheduleSpec>,

    /// The data a new Redis starts with: a backup, downloaded and checked
    /// against its SHA-256 and its RDB checksum into every member before
    /// any member serves. Set at creation only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore: Option<RestoreSpec>,

    /// Labels a node must carry for the members to run on it (the Pods'
    /// `nodeSelector`).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "node_selector_schema")]
    pub node_selector: BTreeMap<String, String>,

    /// Taints the members tolerate (the Pods' `tolerations`), at most 64.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "tolerations_schema")]
    pub tolerations: Vec<Toleration>,

    /// Node affinity and Pod (anti-)affinity of the members (the Pods'
    /// `affinity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "affinity_schema")]
    pub affinity: Option<Affinity>,

    /// How the members spread over nodes and zones (the Pods'
    /// `topologySpreadConstraints`), at most 16. Unset: at most one member
    /// more on any node than on another (DoNotSchedule), and over zones as
    /// far as the scheduler can (ScheduleAnyway). Set, they replace that
    /// default (an empty list: no spreading). A constraint without a
    /// `labelSelector` counts this Redis's members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "spread_schema")]
    pub topology_spread_constraints: Option<Vec<TopologySpreadConstraint>>,

    /// PriorityClass of the members' Pods (a DNS subdomain naming an
    /// existing PriorityClass; the API server refuses the Pods otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "priority_class_schema")]
    pub priority_class_name: Option<String>,

    /// Labels and annotations added to every member Pod. Keys podkeeper
    /// sets itself (`app.kubernetes.io/name`, `app.kubernetes.io/instance`,
    /// `app.kubernetes.io/managed-by`, and any under `podkeeper.dev/` or a
    /// subdomain of it) are refused.
    #[serde(default, skip_serializing_if = "PodMetadata::is_empty")]
    pub pod_metadata: PodMetadata,
}

/// `spec.podMetadata`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
pub struct PodMetadata {
    /// Labels added to every member Pod (at most 64; valid Kubernetes label
    /// keys and values).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "pod_labels_schema")]
    pub labels: BTreeMap<String, String>,
    /// Annotations added to every member Pod (at most 64; keys are
    /// qualified names, as label keys).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(schema_with = "pod_annotations_schema")]
    pub annotations: BTreeMap<String, String>,
}

impl PodMetadata {
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty() && self.annotations.is_empty()
    }
}

// Scheduling and Pod metadata: the schemas of the Kubernetes types, with
// bounds (so that the CEL rules' cost is bounded), enums and rules that
// refuse at admission what the API server would refuse on the Pods.

/// The labels podkeeper sets on every Pod outside its own prefix.
pub const OWN_LABELS: [&str; 3] = [NAME_LABEL, INSTANCE_LABEL, MANAGED_BY_LABEL];

/// Whether a label or annotation key is podkeeper's own: one of
/// [`OWN_LABELS`], or under `podkeeper.dev/` or a subdomain of it. The CRD's
/// rule ([`own_key_cel`]) says the same.
pub fn is_own_key(key: &str) -> bool {
    if OWN_LABELS.contains(&key) {
        return true;
    }
    let Some((prefix, _)) = key.split_once('/') else {
        return false;
    };
    prefix == crate::api::GROUP || prefix.ends_with(&format!(".{}", crate::api::GROUP))
}

/// A CEL expression on `k` that is true for podkeeper's own keys.
pub fn own_key_cel(k: &str) -> String {
    let names: Vec<String> = OWN_LABELS.iter().map(|l| format!("'{l}'")).collect();
    let group = crate::api::GROUP.replace('.', "[.]");
    format!(
        "{k} in [{}] || {k}.matches('^([^/]*[.])?{group}/')",
        names.join(", ")
    )
}

/// A qualified name (a label or annotation key): an optional DNS-subdomain
/// prefix and `/`, then at most 63 letters, digits, `-`, `_` and `.`,
/// starting and ending with a letter or digit.
pub const QUALIFIED_NAME_RE: &str = "^([a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?$";

/// A label value: empty, or at most 63 letters, digits, `-`, `_` and `.`,
/// starting and ending with a letter or digit.
pub const LABEL_VALUE_RE: &str = "^(([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9])?$";

/// A DNS subdomain (of at most 253 characters, bounded by the schema).
pub const DNS_SUBDOMAIN_RE: &str =
    "^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$";

/// A CEL expression on the string `k` that is true when it is a qualified
/// name (with a prefix of at most 253 characters).
fn qualified_name_cel(k: &str) -> String {
    format!("{k}.matches('{QUALIFIED_NAME_RE}') && (!{k}.contains('/') || {k}.indexOf('/') <= 253)")
}

/// Most entries of the maps and lists below.
pub const MAX_POD_LABELS: usize = 64;
pub const MAX_TOLERATIONS: usize = 64;
pub const MAX_SPREAD_CONSTRAINTS: usize = 16;

/// A rule on every key of a map at `field` that must be a qualified name.
fn keys_rule(field: &str) -> serde_json::Value {
    let bad = format!("!({})", qualified_name_cel("k"));
    serde_json::json!({
        "rule": format!("self.all(k, {})", qualified_name_cel("k")),
        "message": format!("{field}: keys must be qualified names (an optional DNS subdomain and '/', then at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit)"),
        "messageExpression": format!("'{field}: ' + self.filter(k, {bad})[0] + ': not a qualified name (an optional DNS subdomain and \\'/\\', then at most 63 letters, digits, \\'-\\', \\'_\\' and \\'.\\', starting and ending with a letter or digit)'"),
    })
}

/// A rule on every value of a map at `field` that must be a label value.
fn label_values_rule(field: &str) -> serde_json::Value {
    serde_json::json!({
        "rule": format!("self.all(k, self[k].matches('{LABEL_VALUE_RE}'))"),
        "message": format!("{field}: values must be label values (at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit, or empty)"),
    })
}

/// The rule that refuses podkeeper's own keys in a map at `field`.
fn own_keys_rule(field: &str) -> serde_json::Value {
    serde_json::json!({
        "rule": format!("!self.exists(k, {})", own_key_cel("k")),
        "message": format!("{field}: app.kubernetes.io/name, app.kubernetes.io/instance, app.kubernetes.io/managed-by and keys under podkeeper.dev/ are podkeeper's own"),
        "messageExpression": format!("'{field}: ' + self.filter(k, {})[0] + ' cannot be set: app.kubernetes.io/name, app.kubernetes.io/instance, app.kubernetes.io/managed-by and keys under podkeeper.dev/ are podkeeper\\'s own'", own_key_cel("k")),
    })
}

/// A map of label keys to label values.
fn label_map_schema(field: &str, own_refused: bool) -> schemars::Schema {
    let mut rules = vec![keys_rule(field), label_values_rule(field)];
    if own_refused {
        rules.push(own_keys_rule(field));
    }
    schemars::json_schema!({
        "type": "object",
        "maxProperties": MAX_POD_LABELS,
        "additionalProperties": {"type": "string", "maxLength": 63},
        "x-kubernetes-validations": rules,
    })
}

fn node_selector_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    label_map_schema("spec.nodeSelector", false)
}

fn pod_labels_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    label_map_schema("spec.podMetadata.labels", true)
}

fn pod_annotations_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let field = "spec.podMetadata.annotations";
    schemars::json_schema!({
        "type": "object",
        "maxProperties": MAX_POD_LABELS,
        "additionalProperties": {"type": "string"},
        "x-kubernetes-validations": [keys_rule(field), own_keys_rule(field)],
    })
}

fn priority_class_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "maxLength": 253,
        "x-kubernetes-validations": [{
            "rule": format!("self.matches('{DNS_SUBDOMAIN_RE}')"),
            "message": "spec.priorityClassName must be a PriorityClass name (a DNS subdomain: lower-case letters, digits, '-' and '.')",
        }],
    })
}

/// Sets `key` of the object at `pointer` in `schema`, if it is there.
fn set(schema: &mut schemars::Schema, pointer: &str, key: &str, value: serde_json::Value) {
    if let Some(object) = schema.pointer_mut(pointer).and_then(|v| v.as_object_mut()) {
        object.insert(key.into(), value);
    }
}

/// Operators of a node selector requirement (node affinity).
const NODE_OPERATORS: [&str; 6] = ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"];
/// Operators of a label selector requirement.
const LABEL_OPERATORS: [&str; 4] = ["In", "NotIn", "Exists", "DoesNotExist"];

/// Gives every `operator` of a selector requirement below `schema` its
/// enum: node operators under `nodeAffinity`, label operators elsewhere.
fn selector_operator_enums(schema: &mut serde_json::Value, node: bool) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    if let Some(props) = object.get_mut("properties").and_then(|p| p.as_object_mut()) {
        let requirement = props.contains_key("key") && props.contains_key("values");
        if let Some(op) = props.get_mut("operator").and_then(|o| o.as_object_mut())
            && requirement
        {
            let values = if node {
                &NODE_OPERATORS[..]
            } else {
                &LABEL_OPERATORS[..]
            };
            op.insert("enum".into(), serde_json::json!(values));
        }
        for (name, child) in props.iter_mut() {
            selector_operator_enums(child, node || name == "nodeAffinity");
        }
    }
    if let Some(items) = object.get_mut("items") {
        selector_operator_enums(items, node);
    }
}

fn affinity_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<Affinity>().to_value();
    selector_operator_enums(&mut schema, false);
    schema
        .as_object()
        .cloned()
        .map(schemars::Schema::from)
        .unwrap_or_default()
}

fn tolerations_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<Vec<Toleration>>();
    schema.insert("maxItems".into(), MAX_TOLERATIONS.into());
    let item = "/items/properties";
    set(
        &mut schema,
        &format!("{item}/operator"),
        "enum",
        serde_json::json!(["", "Equal", "Exists"]),
    );
    set(&mut schema, &format!("{item}/operator"), "description", "Operator represents a key's relationship to the value: Equal (the default) or Exists. Exists is equivalent to wildcard for value, so that a pod can tolerate all taints of a particular category. (Lt and Gt, behind the alpha feature gate TaintTolerationComparisonOperators, are not accepted.)".into());
    set(
        &mut schema,
        &format!("{item}/effect"),
        "enum",
        serde_json::json!(["", "NoSchedule", "PreferNoSchedule", "NoExecute"]),
    );
    set(&mut schema, &format!("{item}/key"), "maxLength", 317.into());
    set(
        &mut schema,
        &format!("{item}/value"),
        "maxLength",
        63.into(),
    );
    let key = qualified_name_cel("self.key");
    set(
        &mut schema,
        "/items",
        "x-kubernetes-validations",
        serde_json::json!([
            {"rule": format!("!has(self.key) || self.key == '' || ({key})"),
             "message": "spec.tolerations: key must be a qualified name (a label key)"},
            {"rule": "(has(self.key) && self.key != '') || (has(self.operator) && self.operator == 'Exists')",
             "message": "spec.tolerations: a toleration without a key must have operator Exists (it then tolerates every taint)"},
            {"rule": "!has(self.operator) || self.operator != 'Exists' || !has(self.value) || self.value == ''",
             "message": "spec.tolerations: a toleration with operator Exists must have no value"},
            {"rule": format!("!has(self.value) || self.value.matches('{LABEL_VALUE_RE}')"),
             "message": "spec.tolerations: value must be a label value (at most 63 letters, digits, '-', '_' and '.', starting and ending with a letter or digit)"},
            {"rule": "!has(self.tolerationSeconds) || (has(self.effect) && self.effect == 'NoExecute')",
             "message": "spec.tolerations: tolerationSeconds is only for effect NoExecute"},
        ]),
    );
    schema
}

fn spread_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let mut schema = generator.subschema_for::<Vec<TopologySpreadConstraint>>();
    schema.insert("maxItems".into(), MAX_SPREAD_CONSTRAINTS.into());
    schema.insert("x-kubernetes-validations".into(), serde_json::json!([
        {"rule": "self.all(a, self.exists_one(b, b.topologyKey == a.topologyKey && b.whenUnsatisfiable == a.whenUnsatisfiable))",
         "message": "spec.topologySpreadConstraints: each pair of topologyKey and whenUnsatisfiable may appear once"},
    ]));
    let item = "/items/properties";
    set(&mut schema, &format!("{item}/maxSkew"), "minimum", 1.into());
    set(
        &mut schema,
        &format!("{item}/minDomains"),
        "minimum",
        1.into(),
    );
    set(
        &mut schema,
        &format!("{item}/whenUnsatisfiable"),
        "enum",
        serde_json::json!(["DoNotSchedule", "ScheduleAnyway"]),
    );
    for policy in ["nodeAffinityPolicy", "nodeTaintsPolicy"] {
        set(
            &mut schema,
            &format!("{item}/{policy}"),
            "enum",
            serde_json::json!(["Honor", "Ignore"]),
        );
    }
    set(
        &mut schema,
        &format!("{item}/topologyKey"),
        "maxLength",
        317.into(),
    );
    set(
        &mut schema,
        &format!("{item}/matchLabelKeys"),
        "maxItems",
        16.into(),
    );
    let key = qualified_name_cel("self.topologyKey");
    set(
        &mut schema,
        "/items",
        "x-kubernetes-validations",
        serde_json::json!([
            {"rule": key,
             "message": "spec.topologySpreadConstraints: topologyKey must be a qualified name (a node label key)"},
            {"rule": "!has(self.minDomains) || self.whenUnsatisfiable == 'DoNotSchedule'",
             "message": "spec.topologySpreadConstraints: minDomains may only be set with whenUnsatisfiable DoNotSchedule"},
        ]),
    );
    let mut value = schema.to_value();
    if let Some(items) = value.get_mut("items") {
        selector_operator_enums(items, false);
    }
    value
        .as_object()
        .cloned()
        .map(schemars::Schema::from)
        .unwrap_or_default()
}

/// A primary cut off from its replicas must stop taking writes before a
/// replica is promoted in its place: it refuses them once no replica has
/// acknowledged for `minReplicasMaxLagSeconds` (plus up to 2 s: Redis counts
/// whole seconds and refreshes the count once a second), and podkeeper
/// promotes no sooner than `afterSeconds` after it lost sight of it.
pub const WRITE_FENCE_RULE: &str =
    "self.minReplicasToWrite == 0 || self.afterSeconds >= self.minReplicasMaxLagSeconds + 3";
pub const WRITE_FENCE_MESSAGE: &str = "spec.failover.afterSeconds must be at least minReplicasMaxLagSeconds + 3 (or minReplicasToWrite 0): a cut-off primary must stop taking writes before a replica is promoted in its place";

/// At most 64 directives of at most 1024 characters each (keeps the CEL
/// rules' cost bounded).
fn config_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "maxProperties": 64,
        "additionalProperties": {"type": "string", "maxLength": 1024}
    })
}

/// Image pull policy of the redis container.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum PullPolicy {
    Always,
    #[default]
    IfNotPresent,
    Never,
}

impl PullPolicy {
    pub fn as_str(self) -> &'static str {
        match self {
            PullPolicy::Always => "Always",
            PullPolicy::IfNotPresent => "IfNotPresent",
            PullPolicy::Never => "Never",
        }
    }
}

fn default_replicas() -> i32 {
    1
}
fn default_image() -> String {
    DEFAULT_IMAGE.to_string()
}
fn default_port() -> i32 {
    6379
}

impl Redis {
    /// The Pod `status.primary` names.
    pub fn primary_pod(&self) -> Option<&str> {
        Some(self.status.as_ref()?.primary.as_ref()?.pod.as_str())
    }

    /// At rest with `n` members: its status describes the current
    /// generation, it is Ready (a primary accepting writes, every replica
    /// linked and caught up), and all `n` members are on the current
    /// template.
    pub fn settled_with(&self, n: usize) -> bool {
        let Some(s) = &self.status else {
            return false;
        };
        let ready = s
            .conditions
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        ready
            && s.primary.is_some()
            && s.members.len() == n
            && usize::try_from(s.updated_replicas) == Ok(n)
            && s.observed_generation == self.metadata.generation
    }
}

/// Observed state of a Redis.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedisStatus {
    /// Pods that are neither terminating nor finished, on any template.
    #[serde(default)]
    pub replicas: i32,
    /// Pods whose Ready condition is True.
    #[serde(default)]
    pub ready_replicas: i32,
    /// Pods on the current template (image, port, resources).
    #[serde(default)]
    pub updated_replicas: i32,
    /// The metadata.generation this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// Label selector of the Pods, in string form (for the scale subresource).
    #[serde(default)]
    pub selector: String,
    /// Ready, Progressing, ReplicaFailure and Replicated.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
    /// The primary podkeeper chose: its Pod and its redis-server run_id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<PrimaryStatus>,
    /// Each member's role and replication state, by Pod name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<MemberStatus>,
    /// The resourceVersion of Secret `<name>-podkeeper` whose passwords
    /// the members are started with, set when a change of the operator's
    /// or replication's password is seen: the members roll to it (see
    /// docs/redis.md, "Rotating podkeeper's own passwords").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_version: Option<String>,
}

// Replication: auth, failover, and what the status says of the members.

/// The condition that says whether every member serves the certificate
/// of the TLS Secret (`spec.tls`).
pub const CERTIFICATE_CONDITION: &str = "CertificateServed";

/// The condition that says whether every member accepts only the
/// operator's and replication's current passwords.
pub const CREDENTIALS_CONDITION: &str = "CredentialsCurrent";

/// The type of the condition that says whether replication is complete.
pub const REPLICATED_CONDITION: &str = "Replicated";

/// The Service that selects the primary (read-write).
pub fn primary_service_name(redis: &str) -> String {
    redis.to_string()
}

/// The Service that selects the ready replicas (read-only).
pub fn replicas_service_name(redis: &str) -> String {
    format!("{redis}{REPLICAS_SERVICE_SUFFIX}")
}

/// `spec.auth`: a key of a Secret in the Redis' namespace.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct AuthSpec {
    /// Name of the Secret.
    pub secret_name: String,
    /// Key in the Secret whose value is the password.
    #[serde(default = "default_auth_key")]
    pub key: String,
}

/// `spec.networkPolicy`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NetworkPolicySpec {
    /// The client Pods that may connect (an empty selector: every Pod of
    /// the namespaces allowed).
    pub clients: LabelSelector,
    /// The namespaces the clients may be in (absent: this namespace only).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
}

/// One of `spec.users`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct UserSpec {
    /// The user's name (not `default`, `podkeeper` or `replication`).
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new("self.matches('^[A-Za-z0-9][-._A-Za-z0-9]{0,63}$')").message("spec.users[].name: 1-64 letters, digits, '-', '_', '.'"))]
    #[x_kube(validation = Rule::new("!(self in ['default', 'podkeeper', 'replication'])").message("spec.users[].name: default, podkeeper and replication are Redis's and podkeeper's own users"))]
    pub name: String,
    /// The Secret in this namespace with the user's password.
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("size(self) <= 253 && self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("spec.users[].secretName must be a Secret name (a DNS subdomain)"))]
    pub secret_name: String,
    /// The key of the password in the Secret.
    #[serde(default = "default_auth_key")]
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[-._a-zA-Z0-9]{1,253}$')").message("spec.users[].key must be a Secret key (letters, digits, '-', '_', '.')"))]
    pub key: String,
    /// The user's permissions, as Redis ACL rules separated by spaces:
    /// commands (`+get`, `-@dangerous`, `+@read`), keys (`~app:*`,
    /// `%R~cache:*`, `allkeys`) and channels (`&news`, `allchannels`).
    /// Passwords, `on`/`off` and `reset` are podkeeper's.
    #[serde(default = "default_user_rules")]
    #[x_kube(validation = Rule::new("self.matches('^( *([+-]@?[a-z][-a-z|_]*|~[^ ]+|%R?W?~[^ ]+|&[^ ]+|allkeys|resetkeys|allchannels|resetchannels|allcommands|nocommands)( |$))* *$')").message("spec.users[].rules: ACL permissions only (+command, -command, +@category, ~pattern, %R~pattern, &channel, allkeys, resetkeys, allchannels, resetchannels): passwords come from the Secret"))]
    #[schemars(length(max = 1024))]
    pub rules: String,
}

fn default_user_rules() -> String {
    "~* &* +@read +@write".to_string()
}

/// `spec.defaultUser`.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum DefaultUser {
    #[default]
    Enabled,
    Disabled,
}

/// `spec.tls`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TlsSpec {
    /// A Secret in this namespace with `tls.crt` (the members' certificate,
    /// its chain after it), `tls.key` and `ca.crt` (what the operator and
    /// the members trust), as cert-manager writes it. The certificate must
    /// name `<name>.<namespace>.svc`: the operator verifies the members
    /// against it. Without it, podkeeper keeps its own CA in `<name>-ca`
    /// and issues `<name>-tls` from it, renewed a month before it expires.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("size(self) <= 253 && self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("spec.tls.secretName must be a Secret name (a DNS subdomain)"))]
    pub secret_name: Option<String>,
    /// The TLS port of every member (`tls-port`), from 1234 to 54321.
    #[serde(default = "default_tls_port")]
    #[schemars(range(min = 1234, max = 54321))]
    pub port: i32,
    /// Whether members also serve plaintext on `spec.port`. While they do,
    /// replication stays on plaintext; with `false` it goes over TLS too.
    #[serde(default)]
    pub plaintext: bool,
}

fn default_tls_port() -> i32 {
    6380
}

fn default_auth_key() -> String {
    "password".to_string()
}

/// `spec.failover`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct FailoverSpec {
    /// Seconds the primary may be unreachable before a replica is promoted.
    /// A primary whose Pod is gone, whose process restarted empty, or whose
    /// container the kubelet reports not running, is replaced at once.
    #[serde(default = "default_after_seconds")]
    #[schemars(range(min = 1, max = 3600))]
    pub after_seconds: u32,
    /// Longest write pause of a planned switchover (`FAILOVER ... TIMEOUT`);
    /// past it the switchover aborts and the primary stays.
    #[serde(default = "default_switchover_timeout")]
    #[schemars(range(min = 1, max = 600))]
    pub switchover_timeout_seconds: u32,
    /// The primary refuses writes while fewer replicas than this have
    /// acknowledged within `minReplicasMaxLagSeconds` (redis-server's
    /// `min-replicas-to-write`, set by podkeeper on every member, capped at
    /// the number of replicas), and its Pod turns NotReady so that the
    /// `<name>` Service stops sending it clients. So a primary cut off from
    /// the rest stops taking writes that a failover would discard. The cost:
    /// while every replica is down (or, with 2 members, while the one
    /// replica is replaced) writes are refused. 0 turns it off.
    #[serde(default = "default_min_replicas_to_write")]
    #[schemars(range(min = 0, max = 999))]
    pub min_replicas_to_write: u32,
    /// Seconds since a replica's last acknowledgement (replicas acknowledge
    /// every second) after which it no longer counts for
    /// `minReplicasToWrite` (`min-replicas-max-lag`).
    #[serde(default = "default_min_replicas_max_lag")]
    #[schemars(range(min = 1, max = 3600))]
    pub min_replicas_max_lag_seconds: u32,
}

impl Default for FailoverSpec {
    fn default() -> Self {
        FailoverSpec {
            after_seconds: default_after_seconds(),
            switchover_timeout_seconds: default_switchover_timeout(),
            min_replicas_to_write: default_min_replicas_to_write(),
            min_replicas_max_lag_seconds: default_min_replicas_max_lag(),
        }
    }
}

fn default_min_replicas_to_write() -> u32 {
    1
}
fn default_min_replicas_max_lag() -> u32 {
    2
}

fn default_after_seconds() -> u32 {
    5
}
fn default_switchover_timeout() -> u32 {
    10
}

/// `spec.storage`: each member's PersistentVolumeClaim.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StorageSpec {
    /// Requested size of each member's claim (`10Gi`). May grow (claims are
    /// expanded in place where the StorageClass allows), never shrink.
    #[schemars(schema_with = "quantity_schema")]
    pub size: k8s_openapi::apimachinery::pkg::api::resource::Quantity,
    /// StorageClass of the claims; the cluster's default class when unset.
    /// Fixed once set: a claim's class cannot change.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub storage_class_name: Option<String>,
    /// What happens to the claims of members removed by a scale-down and
    /// of a deleted Redis (as a StatefulSet's
    /// `persistentVolumeClaimRetentionPolicy`).
    #[serde(default)]
    pub retention: RetentionSpec,
}

/// The quantity of `spec.storage.size`: a string the API server parses as a
/// resource quantity of at least 1 Mi.
fn quantity_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "string",
        "maxLength": 32,
        "x-kubernetes-validations": [
            {"rule": "isQuantity(self)", "message": "spec.storage.size must be a quantity such as 10Gi"},
            {"rule": "!isQuantity(self) || quantity(self).compareTo(quantity('1Mi')) >= 0", "message": "spec.storage.size must be at least 1Mi"}
        ]
    })
}

/// `spec.storage.retention`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RetentionSpec {
    /// Claims of members removed by a scale-down: `Retain` (the default:
    /// a later scale-up takes them back) or `Delete`.
    #[serde(default)]
    pub when_scaled: Retention,
    /// Claims of a deleted Redis, once its Pods are gone: `Retain` (the
    /// default: a Redis of the same name created later takes them back) or
    /// `Delete`.
    #[serde(default)]
    pub when_deleted: Retention,
}

/// Keep or delete a claim no member needs any more.
#[derive(
    Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, schemars::JsonSchema,
)]
pub enum Retention {
    #[default]
    Retain,
    Delete,
}

/// `status.primary`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PrimaryStatus {
    /// The primary's Pod.
    pub pod: String,
    /// The `run_id` of its redis-server process when it was chosen; a
    /// different run_id means the process restarted and lost its data.
    pub run_id: String,
    /// Goes up by one with every new primary. A promotion is recorded here
    /// (a write that fails if anyone wrote the status since it was read)
    /// before it is carried out, so no later round, restarted operator or
    /// new leader can take an older primary for the current one.
    #[serde(default)]
    pub term: u64,
    /// The PersistentVolumeClaim the primary runs on (with `spec.storage`):
    /// when every member restarts at once, the member on this claim holds
    /// the newest data and is chosen first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claim: Option<String>,
}

/// One entry of `status.members`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct MemberStatus {
    pub pod: String,
    /// `primary`, `replica`, or `unknown` when the Pod does not answer.
    pub role: String,
    /// Replicas: `up`, `down` or `syncing`; the primary: `primary`;
    /// `unreachable` when the Pod does not answer. (No replication offsets:
    /// an idle primary's moves 14 bytes every 10 s, and a status that
    /// carried it was rewritten on every resync of every Redis.)
    pub link_status: String,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redis(ready: &str, members: usize, updated: i32, observed: i64) -> Redis {
        let members: Vec<_> = (0..members)
            .map(|i| serde_json::json!({"pod": format!("r-{i}"), "role": "replica", "linkStatus": "up"}))
            .collect();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
            "metadata": {"name": "r", "generation": 2},
            "spec": {"replicas": 3, "image": "redis", "port": 6379},
            "status": {
                "observedGeneration": observed,
                "updatedReplicas": updated,
                "primary": {"pod": "r-0", "runId": "x"},
                "members": members,
                "conditions": [{"type": "Ready", "status": ready, "reason": "R",
                    "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            },
        }))
        .unwrap()
    }

    #[test]
    fn settled_means_ready_for_this_generation_with_every_member_updated() {
        assert!(redis("True", 3, 3, 2).settled_with(3));
        assert_eq!(redis("True", 3, 3, 2).primary_pod(), Some("r-0"));
        assert!(!redis("False", 3, 3, 2).settled_with(3), "not Ready");
        assert!(!redis("True", 2, 3, 2).settled_with(3), "a member short");
        assert!(!redis("True", 3, 2, 2).settled_with(3), "one not updated");
        assert!(
            !redis("True", 3, 3, 1).settled_with(3),
            "an older generation"
        );
    }

    #[test]
    fn replication_fields_default_and_serialize_in_camel_case() {
        let auth: AuthSpec =
            serde_json::from_value(serde_json::json!({"secretName": "s"})).unwrap();
        assert_eq!(auth.key, "password");
        let failover = FailoverSpec::default();
        assert_eq!(failover.after_seconds, 5);
        assert_eq!(failover.switchover_timeout_seconds, 10);
        assert_eq!(failover.min_replicas_to_write, 1);
        assert_eq!(failover.min_replicas_max_lag_seconds, 2);
        let primary = PrimaryStatus {
            pod: "r-abcde".into(),
            run_id: "x".into(),
            term: 3,
            claim: None,
        };
        assert_eq!(
            serde_json::to_value(&primary).unwrap(),
            serde_json::json!({"pod": "r-abcde", "runId": "x", "term": 3})
        );
        // Recorded before terms existed: term 0.
        let old: PrimaryStatus =
            serde_json::from_value(serde_json::json!({"pod": "p", "runId": "x"})).unwrap();
        assert_eq!(old.term, 0);
        assert_eq!(replicas_service_name("r"), "r-replicas");
        assert_eq!(primary_service_name("r"), "r");
    }

    /// Every name podkeeper derives from a Redis of the longest name the
    /// CRD admits is a valid DNS-1035 label; one character more and one is
    /// not. The CRD's rule carries that limit.
    #[test]
    fn the_name_limit_follows_the_longest_derived_name() {
        let derived = |name: &str| {
            vec![
                crate::podset::executor::pod_name(name),
                primary_service_name(name),
                replicas_service_name(name),
                name.to_string(),
            ]
        };
        let longest = "r".repeat(MAX_NAME_LENGTH);
        for n in derived(&longest) {
            assert!(n.len() <= DNS_LABEL_MAX, "{n}");
        }
        let over = "r".repeat(MAX_NAME_LENGTH + 1);
        assert!(derived(&over).iter().any(|n| n.len() > DNS_LABEL_MAX));
        assert_eq!(MAX_NAME_LENGTH, 54);
        let rule = name_length_rule();
        assert_eq!(
            rule.rule,
            format!("size(self.metadata.name) <= {MAX_NAME_LENGTH}")
        );
        let crd = serde_json::to_string(&<Redis as kube::CustomResourceExt>::crd()).unwrap();
        assert!(crd.contains(&rule.rule) && crd.contains(&name_label_rule().rule));
    }
}
