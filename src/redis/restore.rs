//! `spec.restore`: a new Redis that starts with a backup's data.
//!
//! While a Redis is being restored (it has `spec.restore` and has never
//! had a primary), every member it creates starts with a `restore` init
//! container: the operator's own image running `podkeeper restore`
//! (`src/backup/restore.rs`), which downloads the object, checks its
//! SHA-256 and the RDB file's CRC-64, and puts it where redis-server loads
//! it. redis-server starts only after that, holding the data, as a replica
//! of the placeholder; the first primary is one of these members, so the
//! Services never send a client to an empty dataset. The init container is
//! added to the Pods created then, not to the template (nor its hash):
//! members created once the Redis has served come without it.
//!
//! A backup that cannot be found or is not complete creates no Pods; one
//! that cannot be read or does not check out leaves the init containers
//! failing and retried by the kubelet. Either is `Restored=False` with the
//! reason, and a Warning.
//!
//! Pure but for [`resolve`], which reads the `RedisBackup` and the
//! credentials' Secret.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Container, EnvVar, EnvVarSource, Pod, PodTemplateSpec, SecretKeySelector,
};
use kube::{Api, Client, ResourceExt};

use crate::api::Redis;
use crate::api::backup::{ObjectStoreSpec, RedisBackup, phase};
use crate::redis::replication::config::effective;
use crate::runtime::conditions::Cond;

/// The condition a Redis with `spec.restore` shows.
pub const CONDITION: &str = "Restored";
/// The init container's name.
pub const CONTAINER: &str = "restore";

/// The object a Redis is restored from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    pub store: ObjectStoreSpec,
    pub key: String,
    pub sha256: String,
}

/// Where a restore is, for the status.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum RestoreState {
    /// New members start with the init container; `failed`: why one of
    /// them failed, if one did.
    Restoring {
        from: Resolved,
        failed: Option<String>,
    },
    /// No member can start: the condition's reason and message.
    Blocked(&'static str, String),
}

/// Whether `redis` is being restored: it has `spec.restore` and no
/// primary was ever recorded.
pub fn restoring(redis: &Redis) -> bool {
    redis.spec.restore.is_some() && !restored(redis)
}

fn restored(redis: &Redis) -> bool {
    let status = redis.status.as_ref();
    status.is_some_and(|s| s.primary.is_some())
        || status.is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == CONDITION && c.status == "True")
        })
}

/// The object of `spec.restore`: the backup's (read from its status) or
/// the source's; and that its credentials' Secret has both keys. `Err`:
/// the condition's reason and message.
pub async fn resolve(redis: &Redis, client: &Client) -> Result<Resolved, (&'static str, String)> {
    let Some(restore) = &redis.spec.restore else {
        return Err(("NoRestore", "spec.restore is not set".into()));
    };
    let ns = redis.namespace().unwrap_or_default();
    let resolved = match (&restore.backup, &restore.source) {
        (Some(name), _) => {
            let backup = Api::<RedisBackup>::namespaced(client.clone(), &ns)
                .get_opt(name)
                .await
                .map_err(|e| {
                    (
                        "BackupUnreadable",
                        format!("reading RedisBackup {name}: {e}"),
                    )
                })?
                .ok_or_else(|| {
                    (
                        "BackupNotFound",
                        format!("RedisBackup {name} not found in namespace {ns}"),
                    )
                })?;
            from_backup(&backup)?
        }
        (None, Some(source)) => Resolved {
            store: source.store.clone(),
            key: source.key.clone(),
            sha256: source.sha256.clone(),
        },
        (None, None) => return Err(("InvalidSpec", "spec.restore names nothing".into())),
    };
    // The credentials as a backup's try reads them: the Secret and both
    // keys must be there.
    crate::backup::controller::location(client, &ns, &resolved.store)
        .await
        .map_err(|why| ("CredentialsNotFound", why))?;
    Ok(resolved)
}

/// The object a completed backup names. Pure.
pub fn from_backup(backup: &RedisBackup) -> Result<Resolved, (&'static str, String)> {
    let name = backup.name_any();
    let status = backup.status.clone().unwrap_or_default();
    match backup.phase() {
        phase::COMPLETED => {}
        phase::FAILED => {
            return Err((
                "BackupFailed",
                format!(
                    "RedisBackup {name} failed: {}",
                    status.message.unwrap_or_default()
                ),
            ));
        }
        other => {
            return Err((
                "BackupNotComplete",
                format!("RedisBackup {name} is {other}: the Redis starts when it completes"),
            ));
        }
    }
    match (status.key, status.sha256) {
        (Some(key), Some(sha256)) => Ok(Resolved {
            store: backup.spec.destination.clone(),
            key,
            sha256,
        }),
        _ => Err((
            "BackupNotComplete",
            format!("RedisBackup {name} is Completed but names no object and SHA-256"),
        )),
    }
}

/// Adds the `restore` init container to `template` (a Pod created while
/// the Redis is being restored): `image` is the operator's own. It runs
/// as the redis container does, on the same data volume, and writes where
/// the members' configuration loads from. Pure.
pub fn add_init_container(
    redis: &Redis,
    from: &Resolved,
    image: &str,
    template: &mut PodTemplateSpec,
) {
    let Some(spec) = template.spec.as_mut() else {
        return;
    };
    let Some(redis_container) = spec.containers.first() else {
        return;
    };
    let config = effective(&redis.spec.config, redis.spec.storage.is_some()).unwrap_or_default();
    let get = |name: &str, default: &str| {
        config
            .get(name)
            .map(|v| v.trim_matches('"').to_string())
            .unwrap_or_else(|| default.to_string())
    };
    let mut args = vec![
        "restore".to_string(),
        format!("--endpoint={}", from.store.endpoint),
        format!("--bucket={}", from.store.bucket),
        format!("--region={}", from.store.region),
        format!("--key={}", from.key),
        format!("--sha256={}", from.sha256),
        "--dir=/data".to_string(),
        format!("--dbfilename={}", get("dbfilename", "dump.rdb")),
        "--termination-log=/dev/termination-log".to_string(),
    ];
    if get("appendonly", "no").eq_ignore_ascii_case("yes") {
        args.push(format!(
            "--aof-dir={}",
            get("appenddirname", "appendonlydir")
        ));
        args.push(format!(
            "--aof-file={}",
            get("appendfilename", "appendonly.aof")
        ));
    }
    let c = &from.store.credentials;
    let secret_env = |name: &str, key: &str| EnvVar {
        name: name.into(),
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: c.secret_name.clone(),
                key: key.into(),
                optional: Some(false),
            }),
            ..Default::default()
        }),
        ..Default::default()
    };
    let container = Container {
        name: CONTAINER.into(),
        image: Some(image.into()),
        image_pull_policy: Some("IfNotPresent".into()),
        args: Some(args),
        env: Some(vec![
            secret_env("AWS_ACCESS_KEY_ID", &c.access_key_id_key),
            secret_env("AWS_SECRET_ACCESS_KEY", &c.secret_access_key_key),
        ]),
        resources: redis_container.resources.clone(),
        security_context: redis_container.security_context.clone(),
        volume_mounts: redis_container.volume_mounts.clone(),
        termination_message_policy: Some("FallbackToLogsOnError".into()),
        ..Default::default()
    };
    spec.init_containers
        .get_or_insert_with(Vec::new)
        .push(container);
}

/// Why a member's `restore` init container failed, if one did (its
/// termination message, or its exit code). Pure.
pub fn failure(pods: &[Arc<Pod>]) -> Option<String> {
    pods.iter().find_map(|p| {
        let statuses = p.status.as_ref()?.init_container_statuses.as_ref()?;
        let s = statuses.iter().find(|s| s.name == CONTAINER)?;
        [s.state.as_ref(), s.last_state.as_ref()]
            .into_iter()
            .flatten()
            .filter_map(|st| st.terminated.as_ref())
            .find(|t| t.exit_code != 0)
            .map(|t| {
                let why = t
                    .message
                    .as_deref()
                    .map(str::trim)
                    .filter(|m| !m.is_empty())
                    .map_or_else(|| format!("exit code {}", t.exit_code), str::to_string);
                format!("member {}: {why}", p.name_any())
            })
    })
}

/// The `Restored` condition, for a Redis with `spec.restore`. Pure.
pub fn condition<'a>(
    redis: &'a Redis,
    state: Option<&'a RestoreState>,
    primary: bool,
) -> Option<Cond<'a>> {
    redis.spec.restore.as_ref()?;
    let cond = |status, reason, message| Cond {
        type_: CONDITION,
        status,
        reason,
        message,
    };
    if restored(redis) || primary {
        let from = match state {
            Some(RestoreState::Restoring { from, .. }) => {
                format!(
                    " from {}/{} (SHA-256 {})",
                    from.store.bucket, from.key, from.sha256
                )
            }
            _ => String::new(),
        };
        let kept = redis.status.as_ref().and_then(|s| {
            s.conditions
                .iter()
                .find(|c| c.type_ == CONDITION && c.status == "True")
        });
        return Some(match kept {
            Some(c) => cond("True", "Restored", c.message.clone()),
            None => cond(
                "True",
                "Restored",
                format!("every first member loaded the backup{from} before any served"),
            ),
        });
    }
    Some(match state {
        Some(RestoreState::Blocked(reason, message)) => cond("False", reason, message.clone()),
        Some(RestoreState::Restoring {
            failed: Some(why), ..
        }) => cond("False", "RestoreFailed", why.clone()),
        Some(RestoreState::Restoring { from, .. }) => cond(
            "False",
            "Restoring",
            format!("members are loading {}/{}", from.store.bucket, from.key),
        ),
        None => cond("False", "Restoring", "the restore has not started".into()),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{
        ContainerState, ContainerStateTerminated, ContainerStatus, PodStatus,
    };

    fn redis(status: serde_json::Value) -> Redis {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
            "metadata": {"name": "copy", "namespace": "shop"},
            "spec": {"replicas": 2, "image": "redis", "port": 6379,
                     "storage": {"size": "1Gi"},
                     "restore": {"backup": "nightly"}},
            "status": status,
        }))
        .unwrap()
    }

    fn backup(phase: &str, key: Option<&str>) -> RedisBackup {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "podkeeper.dev/v1", "kind": "RedisBackup",
            "metadata": {"name": "nightly"},
            "spec": {"redis": "cache", "destination": {
                "endpoint": "http://s3:80", "bucket": "b", "credentials": {"secretName": "s3"}}},
            "status": {"phase": phase, "key": key, "sha256": key.map(|_| "ab".repeat(32)), "message": "boom"}
        }))
        .unwrap()
    }

    #[test]
    fn only_a_completed_backup_with_its_object_can_be_restored() {
        let done = from_backup(&backup(phase::COMPLETED, Some("k.rdb"))).unwrap();
        assert_eq!(
            (done.key.as_str(), done.store.bucket.as_str()),
            ("k.rdb", "b")
        );
        assert_eq!(
            from_backup(&backup(phase::RUNNING, None)).unwrap_err().0,
            "BackupNotComplete"
        );
        assert_eq!(
            from_backup(&backup(phase::COMPLETED, None)).unwrap_err().0,
            "BackupNotComplete"
        );
        let (reason, message) = from_backup(&backup(phase::FAILED, None)).unwrap_err();
        assert_eq!(reason, "BackupFailed");
        assert!(message.contains("boom"), "{message}");
    }

    #[test]
    fn a_redis_is_restored_once_it_has_had_a_primary_and_stays_so() {
        let new = redis(serde_json::json!({}));
        assert!(restoring(&new));
        let primary =
            redis(serde_json::json!({"primary": {"pod": "copy-a", "runId": "x", "term": 1}}));
        assert!(!restoring(&primary));
        let kept = redis(serde_json::json!({"conditions": [{
            "type": "Restored", "status": "True", "reason": "Restored", "message": "m",
            "lastTransitionTime": "2026-12-07T00:00:00Z"}]}));
        assert!(!restoring(&kept));
        let c = condition(&kept, None, false).unwrap();
        assert_eq!(
            (c.status, c.reason, c.message.as_str()),
            ("True", "Restored", "m")
        );
        let blocked = RestoreState::Blocked("BackupNotFound", "RedisBackup x not found".into());
        let c = condition(&new, Some(&blocked), false).unwrap();
        assert_eq!((c.status, c.reason), ("False", "BackupNotFound"));
        let from = from_backup(&backup(phase::COMPLETED, Some("k.rdb"))).unwrap();
        let loading = RestoreState::Restoring {
            from: from.clone(),
            failed: None,
        };
        assert_eq!(
            condition(&new, Some(&loading), false).unwrap().reason,
            "Restoring"
        );
        let failed = RestoreState::Restoring {
            from,
            failed: Some("member a: bad".into()),
        };
        assert_eq!(
            condition(&new, Some(&failed), false).unwrap().reason,
            "RestoreFailed"
        );
        let c = condition(&new, Some(&loading), true).unwrap();
        assert_eq!((c.status, c.reason), ("True", "Restored"));
        assert!(c.message.contains("b/k.rdb"), "{}", c.message);
    }

    #[test]
    fn the_init_container_writes_the_aof_base_with_storage_and_names_its_failure() {
        let r = redis(serde_json::json!({}));
        let from = from_backup(&backup(phase::COMPLETED, Some("k.rdb"))).unwrap();
        let mut t = crate::redis::pod::pod_template(&r).unwrap();
        let before = crate::podset::revision::revision_of(&t);
        add_init_container(&r, &from, "podkeeper:1", &mut t);
        assert_eq!(
            crate::podset::revision::revision_of(&t),
            before,
            "not in the hash"
        );
        let spec = t.spec.unwrap();
        let init = &spec.init_containers.unwrap()[0];
        let args = init.args.clone().unwrap();
        assert!(
            args.contains(&"--aof-dir=appendonlydir".to_string()),
            "{args:?}"
        );
        assert!(
            args.contains(&"--aof-file=appendonly.aof".to_string()),
            "{args:?}"
        );
        assert_eq!(init.security_context, spec.containers[0].security_context);

        let pod = |name: &str, exit: i32, message: Option<&str>| {
            Arc::new(Pod {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.into()),
                    ..Default::default()
                },
                status: Some(PodStatus {
                    init_container_statuses: Some(vec![ContainerStatus {
                        name: CONTAINER.into(),
                        last_state: Some(ContainerState {
                            terminated: Some(ContainerStateTerminated {
                                exit_code: exit,
                                message: message.map(str::to_string),
                                ..Default::default()
                            }),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }]),
                    ..Default::default()
                }),
                ..Default::default()
            })
        };
        assert_eq!(failure(&[pod("a", 0, None)]), None);
        assert_eq!(
            failure(&[pod("a", 0, None), pod("b", 1, Some("k.rdb has SHA-256 00"))]),
            Some("member b: k.rdb has SHA-256 00".into())
        );
        assert_eq!(
            failure(&[pod("c", 2, None)]),
            Some("member c: exit code 2".into())
        );
    }
}
