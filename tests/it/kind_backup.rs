//! Backups on kind's real redis-server Pods into the cluster's object store
//! (versitygw, `kind up --object-store`), under a client that writes the
//! whole time: a `RedisBackup` is taken from a replica, never the primary,
//! completes with the snapshot's size, SHA-256 and replication offset in
//! its status, and the object in the bucket is exactly that snapshot; the
//! writes lose nothing.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::Api;
use kube::api::{LogParams, PostParams};
use podkeeper::api::backup::{RedisBackup, phase};
use podkeeper_dev::bench::redis::session::InvariantWatch;
use podkeeper_dev::bench::redis::{self as bench};
use podkeeper_dev::kind::object_store as store;
use podkeeper_dev::kind::versions::{REDIS_IMAGE, local_path_helper_image};
use serde_json::json;

use crate::harness::{TestEnv, wait_for};
use crate::kind_under_writes::{assert_nothing_lost, session};

const TIMEOUT: Duration = Duration::from_secs(300);

/// The object store's keys, copied into the test's namespace as Secret
/// `s3` (a RedisBackup reads its credentials in its own namespace).
async fn store_credentials(env: &TestEnv) {
    let from: Api<Secret> = Api::namespaced(env.client.clone(), store::NAMESPACE);
    let secret = from
        .get(store::SECRET)
        .await
        .expect("the object store's Secret (kind up --object-store)");
    let copy = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some("s3".into()),
            ..Default::default()
        },
        data: secret.data,
        ..Default::default()
    };
    let to: Api<Secret> = env.api();
    to.create(&PostParams::default(), &copy).await.unwrap();
}

/// `sha256sum` and size of `key` in the bucket, read by a Pod that mounts
/// the store's claim (on its node: the claim's volume is local).
async fn object_digest(env: &TestEnv, key: &str) -> (String, u64) {
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), store::NAMESPACE);
    let name = format!("check-{}", env.namespace);
    let path = format!("/data/{}/{key}", store::BUCKET);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {
            // A start that fails on a loaded node (runc) is tried again.
            "restartPolicy": "OnFailure",
            "securityContext": {"runAsUser": 65532, "runAsGroup": 65532},
            "containers": [{
                "name": "check", "image": local_path_helper_image(),
                "imagePullPolicy": "Never",
                "command": ["sh", "-c", format!("sha256sum {path} && stat -c %s {path}")],
                "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": true}]
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": store::CLAIM, "readOnly": true}}]
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

#[tokio::test]
async fn a_backup_under_writes_comes_from_a_replica_and_is_the_object_in_the_bucket() {
    let env = TestEnv::new("kind-backup").await;
    let s = session(&env).await;
    let name = "cache";
    s.create_redis(name, 3, REDIS_IMAGE).await.unwrap();
    let (r, _) = s.settled(name, 3, TIMEOUT).await.unwrap();
    let primary = r.primary_pod().unwrap().to_string();
    let host = s.cluster_ip(name).await.unwrap();
    s.start_writer(&host, 6379, 1).await.unwrap();
    s.writes_accepted(500).await.unwrap();
    let watch = InvariantWatch::start(&s, name);
    store_credentials(&env).await;

    let backups: Api<RedisBackup> = env.api();
    let backup: RedisBackup = serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "RedisBackup",
        "metadata": {"name": "first"},
        "spec": {"redis": name, "destination": {
            "endpoint": store::endpoint(), "bucket": store::BUCKET,
            "prefix": "kind-tests", "credentials": {"secretName": "s3"}
        }}
    }))
    .unwrap();
    backups
        .create(&PostParams::default(), &backup)
        .await
        .unwrap();
    let done = wait_for("the backup to finish", TIMEOUT, || async {
        let b = backups.get("first").await.ok()?;
        b.finished().then_some(b)
    })
    .await;
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
