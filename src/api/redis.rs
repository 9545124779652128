//! `Redis`: a number of redis-server Pods managed directly by podkeeper.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ResourceRequirements;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::core::{Message, Rule};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

use crate::api::names::{DNS_LABEL_MAX, POD_NAME_SUFFIX_LEN};
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
}

// Replication: auth, failover, and what the status says of the members.

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
