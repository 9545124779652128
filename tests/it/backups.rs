//! Backup schedules on the local control plane (kwok members: the backups
//! themselves cannot be taken here, which these tests use: every try
//! fails, so a backup stays unfinished while it is retried). What is
//! refused at admission, what the schedule makes and when, and that a
//! Redis's deletion leaves its backups. Taking, pruning and the bucket are
//! tested on kind (`kind_backup::`).

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use podkeeper::api::Redis;
use podkeeper::api::backup::RedisBackup;
use podkeeper::api::names::{SCHEDULE_LABEL, SCHEDULED_AT_ANNOTATION};
use serde_json::json;

use crate::harness::{Operator, PodCheck, TestEnv, image, wait_for};
use crate::transients::{Policy, creates_refused, replica_failure};

const TIMEOUT: Duration = Duration::from_secs(120);

fn scheduled(name: &str, schedule: &str, retention: serde_json::Value) -> Redis {
    serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1, "image": image("redis:7.4.2"),
            "backup": {
                "schedule": schedule,
                // Nothing listens there: every try fails and is retried.
                "destination": {
                    "endpoint": "http://127.0.0.1:9", "bucket": "backups",
                    "credentials": {"secretName": "s3"}
                },
                "retention": retention,
            }
        }
    }))
    .unwrap()
}

async fn refused(api: &Api<Redis>, redis: Redis) -> String {
    match api.create(&PostParams::default(), &redis).await {
        Err(kube::Error::Api(s)) => s.message,
        Ok(_) => panic!("admitted: {redis:?}"),
        Err(e) => panic!("{e}"),
    }
}

async fn made(env: &TestEnv, redis: &str) -> Vec<RedisBackup> {
    let api: Api<RedisBackup> = env.api();
    api.list(&ListParams::default().labels(&format!("{SCHEDULE_LABEL}={redis}")))
        .await
        .unwrap()
        .items
}

async fn reasons(env: &TestEnv, object: &str) -> BTreeSet<String> {
    crate::redis::events(env)
        .await
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(object))
        .filter_map(|e| e.reason)
        .collect()
}

#[tokio::test]
async fn schedules_and_retentions_that_cannot_work_are_refused_at_admission() {
    let env = TestEnv::new("backup-admission").await;
    let api: Api<Redis> = env.api();
    let m = refused(&api, scheduled("a", "daily", json!({"keepLast": 3}))).await;
    assert!(m.contains("cron expression of five fields"), "{m}");
    let m = refused(
        &api,
        scheduled("a", "0 3 * * * * * *", json!({"keepLast": 3})),
    )
    .await;
    assert!(m.contains("cron expression of five fields"), "{m}");
    let m = refused(&api, scheduled("a", "0 3 * * *", json!({}))).await;
    assert!(m.contains("needs keepLast, keepFor or both"), "{m}");
    let m = refused(&api, scheduled("a", "0 3 * * *", json!({"keepFor": "3m"}))).await;
    assert!(m.contains("keepFor"), "{m}");
    let m = refused(&api, scheduled("a", "0 3 * * *", json!({"keepLast": 0}))).await;
    assert!(m.contains("keepLast"), "{m}");
    // Both rules together, and six fields with seconds, are fine.
    api.create(
        &PostParams::default(),
        &scheduled("b", "0 0 3 * * *", json!({"keepLast": 7, "keepFor": "30d"})),
    )
    .await
    .unwrap();
}

#[tokio::test]
async fn a_schedule_makes_one_backup_per_occurrence_one_at_a_time_and_outlives_its_redis() {
    let env = TestEnv::new("backup-schedule").await;
    let _op = env.start_operator();
    let api: Api<Redis> = env.api();
    // Every two seconds; the first backup's tries fail for minutes, so it
    // stays unfinished and no second one may be made meanwhile.
    api.create(
        &PostParams::default(),
        &scheduled("cache", "*/2 * * * * *", json!({"keepLast": 2})),
    )
    .await
    .unwrap();
    let first = wait_for("the first scheduled backup", TIMEOUT, || async {
        made(&env, "cache").await.into_iter().next()
    })
    .await;
    let name = first.metadata.name.clone().unwrap();
    let at = first
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(SCHEDULED_AT_ANNOTATION))
        .cloned()
        .unwrap();
    let at: k8s_openapi::jiff::Timestamp = at.parse().unwrap();
    assert_eq!(at.as_second() % 2, 0, "made for an occurrence: {at}");
    assert_eq!(name, format!("cache-{}", at.strftime("%Y%m%d%H%M%S")));
    assert_eq!(first.spec.redis, "cache");
    assert_eq!(first.spec.destination.bucket, "backups");
    assert!(
        first.metadata.owner_references.is_none(),
        "a scheduled backup is not owned by its Redis"
    );
    // Three occurrences later, with its first try failed: still the only one.
    let backups: Api<RedisBackup> = env.api();
    wait_for(
        "the first backup's failed try, six seconds on",
        TIMEOUT,
        || async {
            let b = backups.get(&name).await.ok()?;
            let tried = b.status.as_ref().is_some_and(|s| s.attempts >= 1);
            let later = k8s_openapi::jiff::Timestamp::now().as_second() >= at.as_second() + 6;
            (tried && later).then_some(())
        },
    )
    .await;
    let all = made(&env, "cache").await;
    assert_eq!(all.len(), 1, "one scheduled backup at a time: {all:?}");
    assert!(reasons(&env, "cache").await.contains("BackupScheduled"));

    // Deleting the Redis leaves its backups.
    api.delete("cache", &DeleteParams::default()).await.unwrap();
    wait_for("the Redis to be gone", TIMEOUT, || async {
        api.get_opt("cache").await.ok()?.is_none().then_some(())
    })
    .await;
    assert!(backups.get_opt(&name).await.unwrap().is_some());
}

#[tokio::test]
async fn a_schedule_redis_cannot_parse_is_a_warning_and_makes_nothing_until_fixed() {
    let env = TestEnv::new("backup-bad-schedule").await;
    let _op = env.start_operator();
    let api: Api<Redis> = env.api();
    // Five fields, so admitted; but there is no minute 61.
    api.create(
        &PostParams::default(),
        &scheduled("cache", "61 * * * *", json!({"keepLast": 2})),
    )
    .await
    .unwrap();
    wait_for("the InvalidBackupSchedule Warning", TIMEOUT, || async {
        reasons(&env, "cache")
            .await
            .contains("InvalidBackupSchedule")
            .then_some(())
    })
    .await;
    assert!(made(&env, "cache").await.is_empty());
    api.patch(
        "cache",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"backup": {"schedule": "* * * * * *"}}})),
    )
    .await
    .unwrap();
    wait_for("a backup once the schedule is fixed", TIMEOUT, || async {
        made(&env, "cache").await.into_iter().next()
    })
    .await;
}

fn restored(name: &str, restore: serde_json::Value) -> Redis {
    serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
        "metadata": {"name": name},
        "spec": {"replicas": 2, "image": image("redis:7.4.2"), "restore": restore}
    }))
    .unwrap()
}

fn restored_condition(r: &Redis) -> Option<(String, String, String)> {
    r.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "Restored")
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// Secret `s3` with object store credentials (that no store takes).
async fn s3_secret(env: &TestEnv) {
    let secrets: Api<Secret> = env.api();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "s3"},
        "stringData": {"AWS_ACCESS_KEY_ID": "id", "AWS_SECRET_ACCESS_KEY": "secret"}
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
}

async fn members(env: &TestEnv, redis: &str) -> Vec<Pod> {
    let pods: Api<Pod> = env.api();
    pods.list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={redis}")))
        .await
        .unwrap()
        .items
}

#[tokio::test]
async fn a_restore_starts_no_member_without_its_backup_and_every_member_with_the_restore_step() {
    let env = TestEnv::new("restore").await;
    let _op = Operator::start(&env.namespace, &["--restore-image", "podkeeper:local-test"]);
    let api: Api<Redis> = env.api();
    s3_secret(&env).await;
    let store = json!({"endpoint": "http://127.0.0.1:9", "bucket": "backups", "credentials": {"secretName": "s3"}});
    let sha = "ab".repeat(32);

    // Admission: one of backup and source.
    let m = refused(
        &api,
        restored(
            "both",
            json!({"backup": "b", "source": {"store": store, "key": "k", "sha256": sha}}),
        ),
    )
    .await;
    assert!(m.contains("one of them"), "{m}");
    let m = refused(
        &api,
        restored(
            "badsha",
            json!({"source": {"store": store, "key": "k", "sha256": "xyz"}}),
        ),
    )
    .await;
    assert!(m.contains("sha256"), "{m}");

    let wait_reason = |name: &'static str, reason: &'static str| {
        let api = api.clone();
        async move {
            wait_for(
                &format!("{name}: Restored False {reason}"),
                TIMEOUT,
                || async {
                    let r = api.get(name).await.ok()?;
                    let (status, why, message) = restored_condition(&r)?;
                    (status == "False" && why == reason).then_some(message)
                },
            )
            .await
        }
    };
    // A backup that does not exist, one not complete, credentials missing:
    // no member starts, and the condition says why.
    api.create(
        &PostParams::default(),
        &restored("missing", json!({"backup": "absent"})),
    )
    .await
    .unwrap();
    let m = wait_reason("missing", "BackupNotFound").await;
    assert!(m.contains("absent"), "{m}");
    let backups: Api<RedisBackup> = env.api();
    let pending: RedisBackup = serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "RedisBackup",
        "metadata": {"name": "pending"},
        "spec": {"redis": "nowhere", "destination": store}
    }))
    .unwrap();
    backups
        .create(&PostParams::default(), &pending)
        .await
        .unwrap();
    api.create(
        &PostParams::default(),
        &restored("early", json!({"backup": "pending"})),
    )
    .await
    .unwrap();
    wait_reason("early", "BackupNotComplete").await;
    let mut nocreds = store.clone();
    nocreds["credentials"]["secretName"] = json!("nope");
    api.create(
        &PostParams::default(),
        &restored(
            "nocreds",
            json!({"source": {"store": nocreds, "key": "k.rdb", "sha256": sha}}),
        ),
    )
    .await
    .unwrap();
    let m = wait_reason("nocreds", "CredentialsNotFound").await;
    assert!(m.contains("nope"), "{m}");
    for name in ["missing", "early", "nocreds"] {
        assert!(
            members(&env, name).await.is_empty(),
            "{name} has members without their data"
        );
    }

    // From an object: every member starts with the restore step, the
    // credentials by secretKeyRef, the checksum asked for.
    api.create(
        &PostParams::default(),
        &restored(
            "copy",
            json!({"source": {"store": store, "key": "prod/cache/a.rdb", "sha256": sha}}),
        ),
    )
    .await
    .unwrap();
    let pods = wait_for("two members of copy", TIMEOUT, || async {
        let pods = members(&env, "copy").await;
        (pods.len() == 2).then_some(pods)
    })
    .await;
    for p in &pods {
        let spec = p.spec.as_ref().unwrap();
        let init = spec.init_containers.as_ref().expect("an init container");
        assert_eq!(init.len(), 1);
        let c = &init[0];
        assert_eq!(c.name, "restore");
        assert_eq!(c.image.as_deref(), Some("podkeeper:local-test"));
        let args = c.args.clone().unwrap();
        assert_eq!(args[0], "restore");
        for want in [
            "--key=prod/cache/a.rdb".to_string(),
            format!("--sha256={sha}"),
            "--dbfilename=dump.rdb".into(),
        ] {
            assert!(args.contains(&want), "{want} in {args:?}");
        }
        assert!(
            !args.iter().any(|a| a.starts_with("--aof-dir")),
            "AOF is off without storage"
        );
        let env_vars = c.env.clone().unwrap();
        assert!(env_vars.iter().all(|e| {
            e.value.is_none()
                && e.value_from
                    .as_ref()
                    .and_then(|v| v.secret_key_ref.as_ref())
                    .is_some_and(|r| r.name == "s3")
        }));
        assert_eq!(c.volume_mounts, spec.containers[0].volume_mounts);
    }
    wait_reason("copy", "Restoring").await;
    // spec.restore cannot change once the Redis exists.
    let e = api
        .patch(
            "copy",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"restore": {"source": {"key": "other.rdb"}}}})),
        )
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("spec.restore is set when a Redis is created"),
        "{e}"
    );
}

#[tokio::test]
async fn a_scheduled_backup_refused_at_admission_is_a_warning_and_is_made_once_it_is_not() {
    let env = TestEnv::new("backup-refused").await;
    let _op = env.start_operator();
    // No RedisBackup may be made in the namespace (a policy of the
    // cluster's, as a quota or an admission webhook would).
    let policy = Policy::refuse_in_group(
        &env,
        "podkeeper.dev",
        "redisbackups",
        &["CREATE"],
        "false",
        "no backups in this namespace",
    )
    .await;
    let backups: Api<RedisBackup> = env.api();
    let probe: RedisBackup = serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "RedisBackup",
        "metadata": {"name": "probe"},
        "spec": {"redis": "cache", "destination": {
            "endpoint": "http://127.0.0.1:9", "bucket": "backups", "credentials": {"secretName": "s3"}
        }}
    }))
    .unwrap();
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    wait_for("RedisBackup creates refused", TIMEOUT, || async {
        let r = backups.create(&dry, &probe).await;
        matches!(r, Err(kube::Error::Api(e)) if e.message.contains("no backups")).then_some(())
    })
    .await;
    let api: Api<Redis> = env.api();
    api.create(
        &PostParams::default(),
        &scheduled("cache", "*/2 * * * * *", json!({"keepLast": 2})),
    )
    .await
    .unwrap();
    let note = wait_for("a FailedCreateBackup Warning", TIMEOUT, || async {
        crate::redis::events(&env).await.into_iter().find_map(|e| {
            let on_cache = e.regarding.as_ref()?.name.as_deref() == Some("cache");
            (on_cache && e.reason.as_deref() == Some("FailedCreateBackup")).then_some(e.note?)
        })
    })
    .await;
    assert!(note.contains("no backups in this namespace"), "{note}");
    assert!(made(&env, "cache").await.is_empty());

    // Lifted: the schedule's latest occurrence is made.
    policy.remove().await;
    let b = wait_for(
        "a scheduled backup once the policy is gone",
        TIMEOUT,
        || async { made(&env, "cache").await.into_iter().next() },
    )
    .await;
    assert!(
        b.metadata
            .annotations
            .unwrap()
            .contains_key(SCHEDULED_AT_ANNOTATION)
    );
    // The Event follows the create it reports.
    wait_for("a BackupScheduled Event", TIMEOUT, || async {
        reasons(&env, "cache")
            .await
            .contains("BackupScheduled")
            .then_some(())
    })
    .await;
}

#[tokio::test]
async fn a_restore_whose_pod_creates_are_refused_says_so_and_starts_every_member_with_its_restore_step_once_they_are_not()
 {
    let env = TestEnv::new("restore-refused").await;
    let _op = Operator::start(&env.namespace, &["--restore-image", "podkeeper:local-test"]);
    s3_secret(&env).await;
    let policy =
        Policy::refuse_unless(&env, "CREATE", "false", "test policy refuses Pod CREATE").await;
    creates_refused(&env, true).await;
    // At every event of its Pods: each has the restore step.
    let check = PodCheck::start(&env, "app.kubernetes.io/instance=copy", |p| {
        let init = p.spec.as_ref()?.init_containers.as_ref();
        (!init.is_some_and(|i| i.iter().any(|c| c.name == "restore")))
            .then(|| "a member without the restore step".into())
    });
    let store = json!({"endpoint": "http://127.0.0.1:9", "bucket": "backups", "credentials": {"secretName": "s3"}});
    let api: Api<Redis> = env.api();
    api.create(
        &PostParams::default(),
        &restored(
            "copy",
            json!({"source": {"store": store, "key": "a.rdb", "sha256": "ab".repeat(32)}}),
        ),
    )
    .await
    .unwrap();
    let r = wait_for("ReplicaFailure FailedCreate", TIMEOUT, || async {
        let r = api.get("copy").await.ok()?;
        (replica_failure(&r) == Some(("True".into(), "FailedCreate".into()))).then_some(r)
    })
    .await;
    assert_eq!(
        restored_condition(&r).map(|(s, why, _)| (s, why)),
        Some(("False".into(), "Restoring".into())),
        "still restoring, not restored"
    );
    assert!(members(&env, "copy").await.is_empty());

    policy.remove().await;
    creates_refused(&env, false).await;
    wait_for("two members of copy", TIMEOUT, || async {
        (members(&env, "copy").await.len() == 2).then_some(())
    })
    .await;
    assert!(check.end() >= 2);
    let r = api.get("copy").await.unwrap();
    assert_ne!(
        restored_condition(&r).map(|(s, _, _)| s).as_deref(),
        Some("True"),
        "no member restored here (kwok): {:?}",
        r.status
    );
}
