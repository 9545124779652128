//! The CRD types this module needs; `RedisSpec`/`RedisStatus`
//! (`src/crd/redis.rs`) use `AuthSpec`, `FailoverSpec`, `PrimaryStatus` and
//! `MemberStatus` from here.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// The type of the condition that says whether replication is complete.
pub const REPLICATED_CONDITION: &str = "Replicated";

/// The Service that selects the primary (read-write).
pub fn primary_service_name(redis: &str) -> String {
    redis.to_string()
}

/// The Service that selects the ready replicas (read-only).
pub fn replicas_service_name(redis: &str) -> String {
    format!("{redis}-replicas")
}

/// Proposed `spec` fields.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationSpec {
    /// The password clients and replicas use; none when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auth: Option<AuthSpec>,
    /// redis.conf directives (name to value), e.g. `maxmemory-policy:
    /// allkeys-lru`. Directives podkeeper owns (replicaof, port, bind,
    /// requirepass, dir, ...) are refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub config: BTreeMap<String, String>,
    /// When to fail over, and how long a planned switchover may take.
    #[serde(default)]
    pub failover: FailoverSpec,
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
}

impl Default for FailoverSpec {
    fn default() -> Self {
        FailoverSpec {
            after_seconds: default_after_seconds(),
            switchover_timeout_seconds: default_switchover_timeout(),
        }
    }
}

fn default_after_seconds() -> u32 {
    5
}
fn default_switchover_timeout() -> u32 {
    10
}

/// Proposed `status` fields.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ReplicationStatus {
    /// The primary the operator chose.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub primary: Option<PrimaryStatus>,
    /// Each member's role and replication state, by Pod name.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub members: Vec<MemberStatus>,
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

    #[test]
    fn defaults_and_camel_case() {
        let spec: ReplicationSpec =
            serde_json::from_value(serde_json::json!({"auth": {"secretName": "s"}})).unwrap();
        assert_eq!(spec.auth.as_ref().unwrap().key, "password");
        assert_eq!(spec.failover.after_seconds, 5);
        assert_eq!(spec.failover.switchover_timeout_seconds, 10);
        let status = ReplicationStatus {
            primary: Some(PrimaryStatus {
                pod: "r-abcde".into(),
                run_id: "x".into(),
            }),
            members: vec![],
        };
        assert_eq!(
            serde_json::to_value(&status).unwrap(),
            serde_json::json!({"primary": {"pod": "r-abcde", "runId": "x"}})
        );
        assert_eq!(replicas_service_name("r"), "r-replicas");
        assert_eq!(primary_service_name("r"), "r");
    }
}
