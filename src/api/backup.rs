//! `RedisBackup`: one RDB snapshot of a Redis, taken from a caught-up
//! replica and kept in an S3-compatible bucket. A record: its spec does not
//! change, and deleting a Redis leaves its backups (they are for
//! disasters).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// One snapshot of the Redis `spec.redis`, uploaded to
/// `spec.destination`. `kubectl get redisbackups` shows its phase, size
/// and member; the status records the object's key, its SHA-256 and the
/// replication id and offset it covers.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "podkeeper.dev",
    version = "v1",
    kind = "RedisBackup",
    plural = "redisbackups",
    namespaced,
    status = "RedisBackupStatus",
    shortname = "rbk",
    category = "podkeeper",
    printcolumn(name = "Redis", type_ = "string", json_path = ".spec.redis"),
    printcolumn(name = "Phase", type_ = "string", json_path = ".status.phase"),
    printcolumn(name = "Member", type_ = "string", json_path = ".status.member"),
    printcolumn(name = "Size", type_ = "integer", json_path = ".status.size"),
    printcolumn(name = "Completed", type_ = "date", json_path = ".status.completedAt"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp"),
    validation = Rule::new("self.spec == oldSelf.spec").message("a RedisBackup's spec cannot change: create another"),
    doc = "One RDB snapshot of a Redis in an S3-compatible bucket"
)]
#[serde(rename_all = "camelCase")]
pub struct RedisBackupSpec {
    /// The Redis (in this namespace) to back up.
    #[schemars(length(min = 1, max = 63))]
    pub redis: String,
    /// Where the snapshot goes.
    pub destination: ObjectStoreSpec,
}

/// An S3-compatible bucket and the Secret with its credentials.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.endpoint.matches('^https?://[^/?#]+/?$')").message("endpoint must be http(s)://host[:port], without a path"))]
#[x_kube(validation = Rule::new("self.bucket.matches('^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$')").message("bucket must be an S3 bucket name: 3-63 lower-case letters, digits, '.' and '-'"))]
pub struct ObjectStoreSpec {
    /// `https://host[:port]` (or `http://` for a store on a trusted network).
    #[schemars(length(max = 253))]
    pub endpoint: String,
    #[schemars(length(max = 63))]
    pub bucket: String,
    /// Keys start with it (`<prefix>/<namespace>/<redis>/...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 256),
        regex(pattern = r"^[A-Za-z0-9!_.*'()/-]*[A-Za-z0-9!_.*'()-]$")
    )]
    pub prefix: Option<String>,
    /// The bucket's region (signatures name it; most stores accept the
    /// default).
    #[serde(default = "default_region")]
    #[schemars(length(min = 1, max = 64))]
    pub region: String,
    /// A Secret in the namespace with the access key id and secret.
    pub credentials: S3Credentials,
}

/// Keys of a Secret holding S3 credentials.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct S3Credentials {
    #[schemars(length(min = 1, max = 253))]
    pub secret_name: String,
    #[serde(default = "default_access_key_id_key")]
    pub access_key_id_key: String,
    #[serde(default = "default_secret_access_key_key")]
    pub secret_access_key_key: String,
}

fn default_region() -> String {
    "us-east-1".into()
}
fn default_access_key_id_key() -> String {
    "AWS_ACCESS_KEY_ID".into()
}
fn default_secret_access_key_key() -> String {
    "AWS_SECRET_ACCESS_KEY".into()
}

/// `spec.backup` of a Redis: backups taken on a cron schedule into one
/// destination, the old ones pruned (objects first, then their
/// `RedisBackup`). The `RedisBackup` objects it makes carry the label
/// `podkeeper.dev/backup-schedule: <redis>` and are not owned by the Redis:
/// deleting the Redis leaves them and their objects.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BackupScheduleSpec {
    /// A cron expression in UTC: five fields (minute hour day-of-month
    /// month day-of-week) or six with seconds first, as CloudNativePG's
    /// `ScheduledBackup`. `0 3 * * *` is every day at 03:00.
    #[schemars(length(min = 1, max = 128))]
    #[x_kube(validation = Rule::new("self.matches('^\\\\S+( +\\\\S+){4,5}$')").message("spec.backup.schedule must be a cron expression of five fields (or six, seconds first)"))]
    pub schedule: String,
    /// No new backups while true; pruning goes on.
    #[serde(default)]
    pub suspend: bool,
    /// Where the scheduled backups go.
    pub destination: ObjectStoreSpec,
    /// Which completed backups to keep; without it every backup is kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retention: Option<BackupRetention>,
}

/// How many scheduled backups to keep: a backup goes once neither rule
/// keeps it (the newest completed backup always stays, and one not yet
/// finished is never pruned).
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.keepLast) || has(self.keepFor)").message("spec.backup.retention needs keepLast, keepFor or both"))]
pub struct BackupRetention {
    /// Keep the newest N completed backups (and any failed one newer than
    /// the oldest of them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 10000))]
    pub keep_last: Option<u32>,
    /// Keep every backup scheduled within this long: a whole number of
    /// hours, days or weeks (`36h`, `30d`, `8w`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(regex(pattern = r"^[1-9][0-9]{0,4}[hdw]$"))]
    pub keep_for: Option<String>,
}

/// `spec.restore` of a Redis: the data it starts with, from a completed
/// `RedisBackup` in its namespace or from an object named directly. Set
/// when the Redis is created; it cannot change afterwards.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("has(self.backup) != has(self.source)").message("spec.restore takes a backup or a source, one of them"))]
pub struct RestoreSpec {
    /// A `RedisBackup` in this namespace; its status names the object and
    /// its SHA-256.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 253))]
    pub backup: Option<String>,
    /// An object in a bucket, with the SHA-256 it must have (a backup of
    /// another cluster, or one whose `RedisBackup` is gone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<RestoreSource>,
}

/// An RDB object to restore from.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RestoreSource {
    /// The store and bucket (`prefix` is not used: `key` is the whole
    /// key).
    pub store: ObjectStoreSpec,
    #[schemars(length(min = 1, max = 1024))]
    pub key: String,
    /// Lower-case hex SHA-256 of the object (a `RedisBackup`'s
    /// `status.sha256`).
    #[schemars(regex(pattern = r"^[0-9a-f]{64}$"))]
    pub sha256: String,
}

/// The phases a backup goes through.
pub mod phase {
    /// Waiting for a member to take it from (or for a retry).
    pub const PENDING: &str = "Pending";
    pub const RUNNING: &str = "Running";
    pub const COMPLETED: &str = "Completed";
    pub const FAILED: &str = "Failed";
}

#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, schemars::JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RedisBackupStatus {
    /// `Pending`, `Running`, `Completed` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// Why it is pending or failed, or what the last try met.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Tries so far (a failed try is retried with backoff, up to a limit).
    #[serde(default)]
    pub attempts: i32,
    /// The member the snapshot was taken from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub member: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at: Option<Time>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<Time>,
    /// The object's key in the bucket.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key: Option<String>,
    /// Bytes of the RDB file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<i64>,
    /// SHA-256 of the RDB file, lower-case hex.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    /// The replication id and offset the snapshot covers (its `repl-id`
    /// and `repl-offset`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repl_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub repl_offset: Option<i64>,
    /// The redis-server version that wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub redis_version: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<Condition>,
}

impl RedisBackup {
    pub fn phase(&self) -> &str {
        self.status
            .as_ref()
            .and_then(|s| s.phase.as_deref())
            .unwrap_or(phase::PENDING)
    }

    pub fn finished(&self) -> bool {
        matches!(self.phase(), phase::COMPLETED | phase::FAILED)
    }
}
