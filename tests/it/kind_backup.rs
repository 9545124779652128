//! Backups on kind's real redis-server Pods into the cluster's object store
//! (versitygw, `kind up --object-store`), under a client that writes the
//! whole time: a `RedisBackup` is taken from a replica, never the primary,
//! completes with the snapshot's size, SHA-256 and replication offset in
//! its status, and the object in the bucket is exactly that snapshot; the
//! writes lose nothing.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use podkeeper::api::Redis;
use podkeeper::api::backup::{RedisBackup, phase};
use podkeeper::api::names::{ROLE_LABEL, SCHEDULE_LABEL};
use podkeeper::backup::controller::MAX_ATTEMPTS;
use podkeeper_dev::bench::redis::session::{InvariantWatch, Session};
use podkeeper_dev::bench::redis::{self as bench, backup, writer};
use podkeeper_dev::kind::object_store as store;
use podkeeper_dev::kind::versions::{REDIS_IMAGE, local_path_helper_image};
use serde_json::json;

use crate::harness::{PodCheck, TestEnv, wait_for};
use crate::kind_under_writes::{assert_nothing_lost, session};
use crate::transients::DownWebhook;

const TIMEOUT: Duration = Duration::from_secs(300);

/// `sha256sum` and size of `key` in the bucket.
async fn object_digest(env: &TestEnv, key: &str) -> (String, u64) {
    object_digest_in(env, store::BUCKET, key).await
}

/// `sha256sum` and size of `key` in `bucket`.
async fn object_digest_in(env: &TestEnv, bucket: &str, key: &str) -> (String, u64) {
    let path = format!("/data/{bucket}/{key}");
    let log = in_store(env, &format!("sha256sum {path} && stat -c %s {path}")).await;
    let mut lines = log.lines();
    let sha = lines
        .next()
        .unwrap()
        .split_whitespace()
        .next()
        .unwrap()
        .to_string();
    let size = lines.next().unwrap().trim().parse().unwrap();
    (sha, size)
}

/// The keys of the objects under `dir` in the bucket (versitygw keeps an
/// object as a file at its key).
async fn objects_under(env: &TestEnv, dir: &str) -> BTreeSet<String> {
    let root = format!("/data/{}/", store::BUCKET);
    let log = in_store(
        env,
        &format!("find {root}{dir} -type f -name '*.rdb' 2>/dev/null; true"),
    )
    .await;
    log.lines()
        .filter_map(|l| l.trim().strip_prefix(&root).map(str::to_string))
        .collect()
}

/// The output of `script`, run by a Pod that mounts the store's claim
/// read-only (on its node: the claim's volume is local).
async fn in_store(env: &TestEnv, script: &str) -> String {
    in_store_mounted(env, script, true).await
}

/// The same, with the claim writable unless `read_only`.
async fn in_store_mounted(env: &TestEnv, script: &str, read_only: bool) -> String {
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), store::NAMESPACE);
    let name = format!("check-{}-{}", env.namespace, rand::random::<u16>());
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            // A start that fails on a loaded node (runc) is tried again.
            "restartPolicy": "OnFailure",
            "securityContext": {"runAsUser": 65532, "runAsGroup": 65532},
            "containers": [{
                "name": "check", "image": local_path_helper_image(),
                "imagePullPolicy": "Never",
                "command": ["sh", "-c", script],
                "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": read_only}]
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": store::CLAIM, "readOnly": read_only}}]
        }
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let phase = wait_for("the check Pod to finish", TIMEOUT, || async {
        let p = pods.get(&name).await.ok()?;
        let phase = p.status?.phase?;
        matches!(phase.as_str(), "Succeeded" | "Failed").then_some(phase)
    })
    .await;
    let log = pods.logs(&name, &LogParams::default()).await.unwrap();
    let _ = pods.delete(&name, &Default::default()).await;
    assert_eq!(phase, "Succeeded", "{log}");
    log
}

/// A Redis `name` of `members` members, settled, with the client writing
/// through its Service (500 writes accepted) and watched at every event;
/// the object store's credentials copied in as Secret `s3`. Returns the
/// Redis, the Service's address, the watch and the credentials.
async fn under_writes(
    s: &Session,
    name: &str,
    members: i32,
) -> (Redis, String, InvariantWatch, (String, String)) {
    s.create_redis(name, members, REDIS_IMAGE).await.unwrap();
    let (r, _) = s.settled(name, members as usize, TIMEOUT).await.unwrap();
    let host = s.cluster_ip(name).await.unwrap();
    s.start_writer(&host, 6379, 1).await.unwrap();
    s.writes_accepted(500).await.unwrap();
    let watch = InvariantWatch::start(s, name);
    let credentials = backup::copy_store_credentials(s, "s3").await.unwrap();
    (r, host, watch, credentials)
}

#[tokio::test]
async fn a_backup_under_writes_comes_from_a_replica_and_is_the_object_in_the_bucket() {
    let env = TestEnv::new("kind-backup").await;
    let s = session(&env).await;
    let name = "cache";
    let (r, host, watch, _) = under_writes(&s, name, 3).await;
    let primary = r.primary_pod().unwrap().to_string();

    create_backup(&env, "first", name, "kind-tests").await;
    let done = finished(&env, "first", TIMEOUT).await;
    let status = done.status.clone().unwrap();
    assert_eq!(done.phase(), phase::COMPLETED, "{status:?}");
    assert_eq!(status.attempts, 1, "{status:?}");
    let member = status.member.clone().unwrap();
    assert_ne!(member, primary, "taken from a replica, not the primary");
    let key = status.key.clone().unwrap();
    assert!(
        key.starts_with(&format!("kind-tests/{}/{name}/first-", env.namespace)),
        "{key}"
    );
    assert!(status.repl_offset.unwrap() > 0);
    assert_eq!(status.repl_id.as_ref().map(String::len), Some(40));
    crate::redis::events_with_reasons(&env, &["Started", "Completed"]).await;

    let (sha, size) = object_digest(&env, &key).await;
    assert_eq!(Some(sha), status.sha256, "the object is the snapshot");
    assert_eq!(Some(size as i64), status.size);

    s.writes_accepted(20).await.unwrap();
    let w = bench::wind_up(&s, &host, watch).await.unwrap();
    assert_nothing_lost(&w);
}

#[tokio::test]
async fn scheduled_backups_under_writes_are_taken_and_pruned_with_their_objects() {
    let env = TestEnv::new("kind-backup-schedule").await;
    let s = session(&env).await;
    let name = "cache";
    let (_, host, watch, _) = under_writes(&s, name, 2).await;

    let redises: Api<Redis> = env.api();
    redises
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"backup": {
                "schedule": "*/20 * * * * *",
                "destination": {
                    "endpoint": store::endpoint(), "bucket": store::BUCKET,
                    "prefix": "kind-schedule", "credentials": {"secretName": "s3"}
                },
                "retention": {"keepLast": 2},
            }}})),
        )
        .await
        .unwrap();

    // Until four backups have been made and the oldest pruned: at every
    // look, at most one unfinished and at most three completed.
    let backups: Api<RedisBackup> = env.api();
    let selector = ListParams::default().labels(&format!("{SCHEDULE_LABEL}={name}"));
    let seen = std::sync::Mutex::new(BTreeSet::new());
    let kept = wait_for(
        "four scheduled backups, the oldest pruned",
        TIMEOUT,
        || async {
            let now = backups.list(&selector).await.ok()?.items;
            let unfinished = now.iter().filter(|b| !b.finished()).count();
            let completed: Vec<&RedisBackup> = now
                .iter()
                .filter(|b| b.phase() == phase::COMPLETED)
                .collect();
            assert!(unfinished <= 1, "one at a time: {now:?}");
            // keepLast 2, and the one just completed until the schedule prunes.
            assert!(completed.len() <= 3, "keepLast 2: {now:?}");
            assert!(
                now.iter().all(|b| b.phase() != phase::FAILED),
                "a scheduled backup failed: {now:?}"
            );
            let mut seen = seen.lock().unwrap();
            seen.extend(now.iter().filter_map(|b| b.metadata.name.clone()));
            (seen.len() >= 4 && completed.len() == 2 && now.len() == 2).then_some(now)
        },
    )
    .await;
    let keys: BTreeSet<String> = kept
        .iter()
        .map(|b| b.status.as_ref().unwrap().key.clone().unwrap())
        .collect();
    let objects = objects_under(&env, &format!("kind-schedule/{}/{name}", env.namespace)).await;
    assert_eq!(
        objects, keys,
        "the bucket holds the kept backups' objects and no other"
    );
    for b in &kept {
        let st = b.status.as_ref().unwrap();
        let (sha, _) = object_digest(&env, st.key.as_ref().unwrap()).await;
        assert_eq!(Some(sha), st.sha256);
    }
    crate::redis::events_with_reasons(&env, &["BackupScheduled", "BackupPruned"]).await;

    s.writes_accepted(20).await.unwrap();
    let w = bench::wind_up(&s, &host, watch).await.unwrap();
    assert_nothing_lost(&w);
}

/// A RedisBackup of `redis` named `name`, completed.
async fn completed_backup(env: &TestEnv, name: &str, redis: &str) -> RedisBackup {
    create_backup(env, name, redis, "kind-restore").await;
    let done = finished(env, name, TIMEOUT).await;
    assert_eq!(done.phase(), phase::COMPLETED, "{:?}", done.status);
    done
}

/// Creates RedisBackup `name` of `redis` into the cluster's object store,
/// under `prefix`.
async fn create_backup(env: &TestEnv, name: &str, redis: &str, prefix: &str) {
    create_backup_to(env, name, redis, destination(prefix)).await;
}

/// The cluster's object store, under `prefix`, with the credentials of
/// Secret `s3`.
fn destination(prefix: &str) -> serde_json::Value {
    json!({
        "endpoint": store::endpoint(), "bucket": store::BUCKET,
        "prefix": prefix, "credentials": {"secretName": "s3"}
    })
}

/// Creates RedisBackup `name` of `redis` to `destination`.
async fn create_backup_to(env: &TestEnv, name: &str, redis: &str, destination: serde_json::Value) {
    let backup: RedisBackup = serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "RedisBackup",
        "metadata": {"name": name},
        "spec": {"redis": redis, "destination": destination}
    }))
    .unwrap();
    let backups: Api<RedisBackup> = env.api();
    backups
        .create(&PostParams::default(), &backup)
        .await
        .unwrap();
}

/// Backup `name` once it is Completed or Failed.
async fn finished(env: &TestEnv, name: &str, timeout: Duration) -> RedisBackup {
    let backups: Api<RedisBackup> = env.api();
    wait_for(&format!("backup {name} to finish"), timeout, || async {
        let b = backups.get(name).await.ok()?;
        b.finished().then_some(b)
    })
    .await
}

fn condition(r: &Redis, type_: &str) -> Option<(String, String)> {
    r.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

#[tokio::test]
async fn a_redis_restored_from_a_backup_holds_every_acknowledged_write_and_a_missing_one_starts_nothing()
 {
    let env = TestEnv::new("kind-restore").await;
    let s = session(&env).await;
    s.create_redis("source", 2, REDIS_IMAGE).await.unwrap();
    s.settled("source", 2, TIMEOUT).await.unwrap();
    let host = s.cluster_ip("source").await.unwrap();
    s.start_writer(&host, 6379, 1).await.unwrap();
    s.writes_accepted(300).await.unwrap();
    // Every write acknowledged by the replica too (WAIT 1): all of them
    // are on the replica the backup is taken from.
    let writes = s.stop_writer().await.unwrap();
    let acked = writer::acknowledged(&writes, 1);
    assert!(acked.len() >= 300);
    backup::copy_store_credentials(&s, "s3").await.unwrap();
    let backup = completed_backup(&env, "snap", "source").await;

    // A backup that does not exist: no Pods, and the condition says why.
    let redises: Api<Redis> = env.api();
    s.create_redis_spec(
        "nothing",
        json!({"replicas": 2, "port": 6379, "image": REDIS_IMAGE, "restore": {"backup": "absent"}}),
    )
    .await
    .unwrap();
    wait_for("Restored=False BackupNotFound", TIMEOUT, || async {
        let r = redises.get("nothing").await.ok()?;
        (condition(&r, "Restored") == Some(("False".into(), "BackupNotFound".into()))).then_some(())
    })
    .await;
    let pods: Api<Pod> = env.api();
    let of_nothing = pods
        .list(&ListParams::default().labels("app.kubernetes.io/instance=nothing"))
        .await
        .unwrap();
    assert!(of_nothing.items.is_empty(), "no member without its data");

    // From the backup, with storage (the backup becomes the AOF's base).
    // At every event of its Pods: each has the restore step, and none is
    // labelled primary (sent clients) before that step ended well.
    let restored_first = PodCheck::start(&env, "app.kubernetes.io/instance=copy", |p| {
        let spec = p.spec.as_ref()?;
        let step = |name: &str| name == "restore";
        if !spec.init_containers.iter().flatten().any(|c| step(&c.name)) {
            return Some("a member without the restore step".into());
        }
        let primary = p.labels().get(ROLE_LABEL).map(String::as_str) == Some("primary");
        let restored = p
            .status
            .as_ref()
            .and_then(|s| s.init_container_statuses.as_ref())
            .is_some_and(|all| {
                all.iter().any(|c| {
                    step(&c.name)
                        && c.state
                            .as_ref()
                            .and_then(|s| s.terminated.as_ref())
                            .is_some_and(|t| t.exit_code == 0)
                })
            });
        (primary && !restored).then(|| "primary before its restore step ended well".into())
    });
    s.create_redis_spec(
        "copy",
        json!({
            "replicas": 2, "port": 6379, "image": REDIS_IMAGE,
            "storage": {"size": "256Mi"},
            "restore": {"backup": "snap"},
        }),
    )
    .await
    .unwrap();
    let (r, members) = s.settled("copy", 2, TIMEOUT).await.unwrap();
    assert_eq!(
        condition(&r, "Restored"),
        Some(("True".into(), "Restored".into()))
    );
    for p in &members {
        let init = p
            .spec
            .as_ref()
            .unwrap()
            .init_containers
            .clone()
            .unwrap_or_default();
        assert_eq!(
            init.iter().map(|c| c.name.as_str()).collect::<Vec<_>>(),
            ["restore"],
            "every first member loaded the backup"
        );
    }
    assert!(
        restored_first.end() >= 4,
        "the members' events were watched"
    );
    let copy_host = s.cluster_ip("copy").await.unwrap();
    let lost = s.lost_keyed("w", &copy_host, 6379, &acked).unwrap();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes missing from the restored Redis (backup {:?})",
        lost.len(),
        acked.len(),
        backup.status
    );

    // A source whose checksum is not the object's: the members' restore
    // step fails and says why, and no member serves in its place.
    let key = backup.status.as_ref().unwrap().key.clone().unwrap();
    s.create_redis_spec(
        "corrupt",
        json!({
            "replicas": 1, "port": 6379, "image": REDIS_IMAGE,
            "restore": {"source": {
                "store": {"endpoint": store::endpoint(), "bucket": store::BUCKET, "credentials": {"secretName": "s3"}},
                "key": key, "sha256": "0".repeat(64),
            }},
        }),
    )
    .await
    .unwrap();
    let message = wait_for("Restored=False RestoreFailed", TIMEOUT, || async {
        let r = redises.get("corrupt").await.ok()?;
        let c = r
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Restored")?;
        (c.reason == "RestoreFailed").then_some(c.message)
    })
    .await;
    assert!(message.contains("SHA-256"), "{message}");
    let r = redises.get("corrupt").await.unwrap();
    assert!(
        r.status.and_then(|s| s.primary).is_none(),
        "no member serves in its place"
    );
    crate::redis::events_with_reasons(&env, &["BackupNotFound", "RestoreFailed"]).await;
}

/// How a backup in flight is interrupted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cut {
    /// The member it is taken from is deleted.
    Member,
    /// The object store's Pod is deleted (its Deployment starts another on
    /// the same volume).
    Store,
    /// The primary is deleted: a failover while the snapshot streams.
    Failover,
}

#[tokio::test]
async fn backups_cut_by_a_deleted_member_a_restarted_store_or_a_failover_end_whole_and_lose_no_write()
 {
    // It restarts the cluster's object store: no other test runs beside it.
    let env = TestEnv::exclusive("kind-backup-cut").await;
    let s = session(&env).await;
    let name = "cache";
    s.create_redis(name, 3, REDIS_IMAGE).await.unwrap();
    s.settled(name, 3, TIMEOUT).await.unwrap();
    // ~300 MB: a snapshot streams for seconds, long enough to cut.
    podkeeper_dev::bench::redis::storage::load_dataset(&s, name, 300_000)
        .await
        .unwrap();
    s.settled(name, 3, TIMEOUT).await.unwrap();
    let host = s.cluster_ip(name).await.unwrap();
    s.start_writer(&host, 6379, 1).await.unwrap();
    s.writes_accepted(200).await.unwrap();
    let watch = InvariantWatch::start(&s, name);
    backup::copy_store_credentials(&s, "s3").await.unwrap();
    let backups: Api<RedisBackup> = env.api();
    let pods: Api<Pod> = env.api();
    let store_pods: Api<Pod> = Api::namespaced(env.client.clone(), store::NAMESPACE);

    for (i, cut) in [Cut::Member, Cut::Store, Cut::Failover]
        .into_iter()
        .enumerate()
    {
        let backup_name = format!("cut-{i}");
        create_backup(&env, &backup_name, name, "kind-cut").await;
        let member = wait_for("the backup's first try to run", TIMEOUT, || async {
            let b = backups.get(&backup_name).await.ok()?;
            let st = b.status?;
            (st.phase.as_deref() == Some(phase::RUNNING)).then_some(st.member?)
        })
        .await;
        match cut {
            Cut::Member => {
                pods.delete(&member, &Default::default()).await.unwrap();
            }
            Cut::Store => {
                store_pods
                    .delete_collection(
                        &Default::default(),
                        &ListParams::default().labels("app.kubernetes.io/name=object-store"),
                    )
                    .await
                    .unwrap();
            }
            Cut::Failover => {
                let r = env.api::<Redis>().get(name).await.unwrap();
                pods.delete(r.primary_pod().unwrap(), &Default::default())
                    .await
                    .unwrap();
            }
        }
        let done = finished(&env, &backup_name, TIMEOUT * 2).await;
        let st = done.status.clone().unwrap();
        assert_eq!(done.phase(), phase::COMPLETED, "{cut:?}: {st:?}");
        if cut == Cut::Member {
            assert!(
                st.attempts >= 2 && st.member.as_deref() != Some(member.as_str()),
                "the cut try failed and a later one came from another member: {st:?}"
            );
        }
        // Whatever the cut did, the object is the snapshot checked whole.
        let (sha, size) = object_digest(&env, st.key.as_ref().unwrap()).await;
        assert_eq!(Some(sha), st.sha256, "{cut:?}");
        assert_eq!(Some(size as i64), st.size, "{cut:?}");
        s.settled(name, 3, TIMEOUT * 2).await.unwrap();
    }
    // Only the three backups' objects: no partial one beside them.
    let objects = objects_under(&env, &format!("kind-cut/{}/{name}", env.namespace)).await;
    assert_eq!(objects.len(), 3, "{objects:?}");
    crate::redis::events_with_reasons(&env, &["TryFailed", "Completed"]).await;

    s.writes_accepted(20).await.unwrap();
    let w = bench::wind_up(&s, &host, watch).await.unwrap();
    assert_nothing_lost(&w);
}

/// Backup `name` once a try of it failed and it waits for the next,
/// its message naming `cause`.
async fn retrying(env: &TestEnv, name: &str, cause: &str) -> RedisBackup {
    let backups: Api<RedisBackup> = env.api();
    wait_for(
        &format!("backup {name}'s try to fail with {cause}"),
        TIMEOUT,
        || async {
            let b = backups.get(name).await.ok()?;
            let st = b.status.as_ref()?;
            let waiting = st.attempts >= 1 && b.phase() == phase::PENDING;
            (waiting && st.message.as_deref()?.contains(cause)).then_some(b)
        },
    )
    .await
}

#[tokio::test]
async fn backups_that_cannot_reach_their_store_say_why_and_complete_once_it_is_fixed_or_fail_after_five_tries()
 {
    let env = TestEnv::new("kind-backup-retry").await;
    let s = session(&env).await;
    let name = "cache";
    let (_, host, watch, (access_key, secret_key)) = under_writes(&s, name, 2).await;

    // Wrong credentials: the store's key id with a wrong secret.
    let secrets: Api<Secret> = env.api();
    let wrong: Secret = serde_json::from_value(json!({
        "metadata": {"name": "s3-wrong"},
        "stringData": {store::ACCESS_KEY_ID: access_key, store::SECRET_ACCESS_KEY: "not-the-secret"}
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &wrong)
        .await
        .unwrap();
    let mut with_wrong = destination("kind-retry");
    with_wrong["credentials"]["secretName"] = json!("s3-wrong");
    create_backup_to(&env, "wrong-credentials", name, with_wrong).await;
    // A bucket that is made only later.
    let later = format!("later-{}", env.namespace);
    let mut to_later = destination("kind-retry");
    to_later["bucket"] = json!(later);
    create_backup_to(&env, "no-bucket", name, to_later).await;
    // An endpoint nothing listens on, for good.
    let mut to_nowhere = destination("kind-retry");
    to_nowhere["endpoint"] = json!("http://127.0.0.1:9");
    create_backup_to(&env, "nowhere", name, to_nowhere).await;

    // Each try fails, the status says why, and the backup waits its turn.
    retrying(&env, "wrong-credentials", "SignatureDoesNotMatch").await;
    retrying(&env, "no-bucket", "NoSuchBucket").await;
    retrying(&env, "nowhere", "error sending request").await;

    // The causes go: the right secret, the bucket made (versitygw keeps a
    // bucket as a directory). The next tries complete.
    secrets
        .patch(
            "s3-wrong",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {store::SECRET_ACCESS_KEY: secret_key}})),
        )
        .await
        .unwrap();
    in_store_mounted(&env, &format!("mkdir /data/{later}"), false).await;
    for (backup_name, bucket) in [("wrong-credentials", store::BUCKET), ("no-bucket", &later)] {
        let done = finished(&env, backup_name, TIMEOUT).await;
        let st = done.status.clone().unwrap();
        assert_eq!(done.phase(), phase::COMPLETED, "{backup_name}: {st:?}");
        assert!(
            (2..MAX_ATTEMPTS).contains(&st.attempts),
            "{backup_name}: failed first, then completed: {st:?}"
        );
        let (sha, size) = object_digest_in(&env, bucket, st.key.as_ref().unwrap()).await;
        assert_eq!(Some(sha), st.sha256, "{backup_name}");
        assert_eq!(Some(size as i64), st.size, "{backup_name}");
    }
    // The one whose cause stays: Failed after its five tries, saying why.
    let failed = finished(&env, "nowhere", TIMEOUT).await;
    let st = failed.status.clone().unwrap();
    assert_eq!(failed.phase(), phase::FAILED, "{st:?}");
    assert_eq!(st.attempts, MAX_ATTEMPTS, "{st:?}");
    assert!(
        st.message
            .as_deref()
            .is_some_and(|m| m.contains("127.0.0.1:9") && m.contains("error sending request")),
        "{st:?}"
    );
    crate::redis::events_with_reasons(&env, &["TryFailed", "Failed", "Completed"]).await;
    // Only the completed backup's object under the prefix in the bucket.
    let objects = objects_under(&env, &format!("kind-retry/{}/{name}", env.namespace)).await;
    assert_eq!(objects.len(), 1, "{objects:?}");

    s.writes_accepted(20).await.unwrap();
    let w = bench::wind_up(&s, &host, watch).await.unwrap();
    assert_nothing_lost(&w);
}

#[tokio::test]
async fn a_backup_whose_status_writes_are_refused_is_taken_once_and_one_deleted_mid_try_leaves_no_object()
 {
    let env = TestEnv::new("kind-backup-refused").await;
    let s = session(&env).await;
    let name = "cache";
    let (r, host, watch, _) = under_writes(&s, name, 2).await;
    // The replica waits 30 s before it sends a snapshot (its diskless
    // delay): each try below is surely running while the test acts.
    let replica = r
        .status
        .as_ref()
        .unwrap()
        .members
        .iter()
        .find(|m| m.role == "replica")
        .unwrap()
        .pod
        .clone();
    s.redis_cli(&replica, 6379, "config set repl-diskless-sync-delay 30")
        .unwrap();
    let backups: Api<RedisBackup> = env.api();
    let running = |backup_name: &'static str| {
        let backups = backups.clone();
        async move {
            wait_for(&format!("{backup_name}'s try to run"), TIMEOUT, || async {
                let b = backups.get(backup_name).await.ok()?;
                (b.phase() == phase::RUNNING).then_some(b)
            })
            .await
        }
    };

    // Status writes answered 500 (a webhook that is down) from the try's
    // start until after its object is complete.
    create_backup(&env, "refused", name, "kind-refused").await;
    let b = running("refused").await;
    let key = b.status.as_ref().unwrap().key.clone().unwrap();
    let hook = DownWebhook::on_group(&env, "podkeeper.dev", "redisbackups/status", "UPDATE").await;
    let dry = PatchParams {
        dry_run: true,
        ..PatchParams::default()
    };
    wait_for(
        "RedisBackup status writes answered 500",
        TIMEOUT,
        || async {
            let r = backups
                .patch_status("refused", &dry, &Patch::Merge(json!({"status": {}})))
                .await;
            matches!(r, Err(kube::Error::Api(e)) if e.code == 500).then_some(())
        },
    )
    .await;
    let dir = key.rsplit_once('/').unwrap().0.to_string();
    wait_for("the object in the bucket", TIMEOUT, || async {
        objects_under(&env, &dir).await.contains(&key).then_some(())
    })
    .await;
    let still = backups.get("refused").await.unwrap();
    let st = still.status.clone().unwrap();
    assert_eq!(still.phase(), phase::RUNNING, "not recorded yet: {st:?}");
    hook.remove().await;
    let done = finished(&env, "refused", TIMEOUT).await;
    let st = done.status.clone().unwrap();
    assert_eq!(done.phase(), phase::COMPLETED, "{st:?}");
    assert_eq!(st.attempts, 1, "recorded, not taken again: {st:?}");
    let (sha, size) = object_digest(&env, &key).await;
    assert_eq!(Some(sha), st.sha256);
    assert_eq!(Some(size as i64), st.size);

    // A backup deleted during its try: its upload is aborted.
    create_backup(&env, "deleted", name, "kind-deleted").await;
    let b = running("deleted").await;
    let key = b.status.as_ref().unwrap().key.clone().unwrap();
    backups
        .delete("deleted", &Default::default())
        .await
        .unwrap();
    crate::redis::events_with_reasons(&env, &["Abandoned"]).await;
    let left = objects_under(&env, &format!("kind-deleted/{}", env.namespace)).await;
    assert!(left.is_empty(), "no object for {key}: {left:?}");

    s.writes_accepted(20).await.unwrap();
    let w = bench::wind_up(&s, &host, watch).await.unwrap();
    assert_nothing_lost(&w);
}
