//! The backup scheduler: for each Redis with `spec.backup`, makes a
//! `RedisBackup` when the schedule says one is due (the backup controller
//! takes it from there) and prunes the finished ones its retention lets
//! go, the object in the bucket first and then the `RedisBackup`. What is
//! due and what goes is decided in `schedule.rs`.
//!
//! One scheduled backup at a time: while one is not finished, the next is
//! not made (it is made when that one finishes, if its occurrence is still
//! the latest).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use kube::{Api, Client, Resource, ResourceExt};
use tracing::{info, warn};

use super::controller::location;
use super::schedule::{self, Made};
use super::store;
use crate::api::backup::{BackupScheduleSpec, RedisBackup, RedisBackupSpec};
use crate::api::names::{
    MANAGED_BY_LABEL, MANAGED_BY_VALUE, SCHEDULE_LABEL, SCHEDULED_AT_ANNOTATION,
};
use crate::api::redis::Redis;
use crate::runtime::Error;
use crate::runtime::events::{EventRecorder, EventType};

pub struct ScheduleCtx {
    pub client: Client,
    pub recorder: Arc<EventRecorder>,
    /// The operator's cache of `RedisBackup`s (shared with their
    /// controller).
    backups: Store<RedisBackup>,
    /// When this process first saw each Redis's schedule (by uid): the
    /// first backup is the first occurrence after it.
    first_seen: Mutex<HashMap<String, Timestamp>>,
}

impl ScheduleCtx {
    pub fn new(
        client: Client,
        recorder: Arc<EventRecorder>,
        backups: Store<RedisBackup>,
    ) -> Arc<Self> {
        Arc::new(ScheduleCtx {
            client,
            recorder,
            backups,
            first_seen: Mutex::new(HashMap::new()),
        })
    }

    fn first_seen(&self, uid: &str, now: Timestamp) -> Timestamp {
        *self
            .first_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(uid.to_string())
            .or_insert(now)
    }

    fn forget(&self, uid: &str) {
        self.first_seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
    }
}

/// The occurrence a scheduled backup was made for (its annotation; its
/// creation time if the annotation was edited away).
fn occurrence(b: &RedisBackup) -> Timestamp {
    b.annotations()
        .get(SCHEDULED_AT_ANNOTATION)
        .and_then(|s| s.parse().ok())
        .or_else(|| b.creation_timestamp().map(|t| t.0))
        .unwrap_or(Timestamp::UNIX_EPOCH)
}

pub async fn reconcile(redis: Arc<Redis>, ctx: Arc<ScheduleCtx>) -> Result<Action, Error> {
    let uid = redis.uid().unwrap_or_default();
    let Some(spec) = &redis.spec.backup else {
        ctx.forget(&uid);
        return Ok(Action::await_change());
    };
    if redis.meta().deletion_timestamp.is_some() {
        return Ok(Action::await_change());
    }
    let regarding = redis.object_ref(&());
    let cron = match schedule::parse(&spec.schedule) {
        Ok(c) => c,
        Err(why) => {
            ctx.recorder
                .publish(
                    &regarding,
                    EventType::Warning,
                    "InvalidBackupSchedule",
                    "Backup",
                    why,
                )
                .await;
            return Ok(Action::await_change());
        }
    };
    // From the cache: one a create or a delete of this round is not in it
    // yet is made again (409: left as it is) or deleted again (404).
    let (ns, name) = (redis.namespace(), Some(redis.name_any()));
    let made: Vec<Arc<RedisBackup>> = ctx
        .backups
        .state()
        .into_iter()
        .filter(|b| b.namespace() == ns && b.labels().get(SCHEDULE_LABEL) == name.as_ref())
        .collect();
    let now = Timestamp::now();

    if let Some(retention) = &spec.retention {
        let summary: Vec<Made> = made
            .iter()
            .map(|b| Made {
                name: b.name_any(),
                at: occurrence(b),
                phase: b.phase().to_string(),
            })
            .collect();
        match schedule::prune(&summary, retention, now) {
            Ok(names) => {
                for b in made.iter().filter(|b| names.contains(&b.name_any())) {
                    prune_one(&ctx, &redis, b).await?;
                }
            }
            Err(why) => {
                ctx.recorder
                    .publish(
                        &regarding,
                        EventType::Warning,
                        "InvalidBackupRetention",
                        "Backup",
                        why,
                    )
                    .await;
            }
        }
    }

    if !spec.suspend && made.iter().all(|b| b.finished()) {
        let after = made
            .iter()
            .map(|b| occurrence(b))
            .max()
            .unwrap_or_else(|| ctx.first_seen(&uid, now));
        if let Some(at) = schedule::due(&cron, after, now) {
            make(&ctx, &redis, spec, at).await?;
        }
    }
    Ok(match schedule::next(&cron, now) {
        Some(at) => Action::requeue(
            Duration::try_from(at.duration_since(now))
                .unwrap_or_default()
                .max(Duration::from_secs(1)),
        ),
        None => Action::await_change(),
    })
}

/// Makes the `RedisBackup` for the occurrence `at`; one made before (by
/// this process or another) is left as it is.
async fn make(
    ctx: &ScheduleCtx,
    redis: &Redis,
    spec: &BackupScheduleSpec,
    at: Timestamp,
) -> Result<(), Error> {
    let (ns, name) = (redis.namespace().unwrap_or_default(), redis.name_any());
    let backup_name = schedule::backup_name(&name, at);
    let backup = RedisBackup {
        metadata: ObjectMeta {
            name: Some(backup_name.clone()),
            namespace: Some(ns.clone()),
            labels: Some(BTreeMap::from([
                (SCHEDULE_LABEL.to_string(), name.clone()),
                (MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string()),
            ])),
            annotations: Some(BTreeMap::from([(
                SCHEDULED_AT_ANNOTATION.to_string(),
                at.to_string(),
            )])),
            ..ObjectMeta::default()
        },
        spec: RedisBackupSpec {
            redis: name.clone(),
            destination: spec.destination.clone(),
        },
        status: None,
    };
    let api: Api<RedisBackup> = Api::namespaced(ctx.client.clone(), &ns);
    match api.create(&PostParams::default(), &backup).await {
        Ok(_) => {
            info!(redis = %name, backup = %backup_name, "scheduled backup made");
            ctx.recorder
                .publish(
                    &redis.object_ref(&()),
                    EventType::Normal,
                    "BackupScheduled",
                    "Backup",
                    format!("Made RedisBackup {backup_name} for the schedule's {at}"),
                )
                .await;
            Ok(())
        }
        Err(kube::Error::Api(e)) if e.code == 409 => Ok(()),
        Err(e) => {
            // Refused (a quota, an admission policy, the API server down):
            // said on the Redis, and tried again by the error policy while
            // the occurrence is still the latest.
            warn!(redis = %name, backup = %backup_name, error = %e, "making a scheduled backup failed");
            ctx.recorder
                .publish(
                    &redis.object_ref(&()),
                    EventType::Warning,
                    "FailedCreateBackup",
                    "Backup",
                    format!("Making RedisBackup {backup_name} for the schedule's {at} failed: {e}"),
                )
                .await;
            Err(e.into())
        }
    }
}

/// Prunes one finished backup: its object in the bucket (where it has
/// one), then the `RedisBackup`. An object that cannot be deleted keeps
/// its `RedisBackup`, with a Warning, for the next round.
async fn prune_one(ctx: &ScheduleCtx, redis: &Redis, b: &RedisBackup) -> Result<(), Error> {
    let ns = b.namespace().unwrap_or_default();
    let regarding = redis.object_ref(&());
    if let Some(key) = b.status.as_ref().and_then(|s| s.key.as_deref()) {
        let deleted = match location(&ctx.client, &ns, &b.spec.destination).await {
            Ok(at) => store::delete(&at, key)
                .await
                .map_err(|e| store::describe(&e)),
            Err(why) => Err(why),
        };
        if let Err(why) = deleted {
            warn!(backup = %b.name_any(), %why, "pruning a backup's object failed");
            ctx.recorder
                .publish(
                    &regarding,
                    EventType::Warning,
                    "BackupPruneFailed",
                    "Backup",
                    format!(
                        "Kept RedisBackup {}: deleting {key} failed: {why}",
                        b.name_any()
                    ),
                )
                .await;
            return Ok(());
        }
    }
    let api: Api<RedisBackup> = Api::namespaced(ctx.client.clone(), &ns);
    match api.delete(&b.name_any(), &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    ctx.recorder
        .publish(
            &regarding,
            EventType::Normal,
            "BackupPruned",
            "Backup",
            format!(
                "Pruned RedisBackup {} ({}) by spec.backup.retention",
                b.name_any(),
                b.phase()
            ),
        )
        .await;
    Ok(())
}

pub fn error_policy(_: Arc<Redis>, e: &Error, _: Arc<ScheduleCtx>) -> Action {
    warn!(error = %e, "backup schedule reconcile failed");
    Action::requeue(Duration::from_secs(15))
}
