//! In-place updates of Redis Pods on the local control plane: an image
//! change patches the Pods (names and UIDs kept), replicas first and the
//! primary only after its handover; a resources change goes through the
//! `resize` subresource, and a resize the API server refuses falls back to
//! replacement. kwok runs no containers: its stages reflect a patched image
//! into the container statuses (see `src/localcluster/kwok-stages.yaml`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use podkeeper::api::{Redis, RedisSpec};
use serde_json::json;

use crate::bounds::Recorder;
use crate::harness::{PodDelays, TestEnv, image, wait_for};
use crate::redis::{converged, live_pods, notes};
use crate::transients::{Policy, image_changes_refused, replica_failure, wait_failure};

const TIMEOUT: Duration = Duration::from_secs(90);
const ROLE: &str = "podkeeper.dev/role";

fn image_of(p: &Pod) -> String {
    p.spec.as_ref().unwrap().containers[0]
        .image
        .clone()
        .unwrap_or_default()
}

fn uids(pods: &[Pod]) -> BTreeMap<String, String> {
    pods.iter()
        .map(|p| (p.name_any(), p.uid().unwrap()))
        .collect()
}

/// Records `pod` as the primary, as the operator does once a redis-server
/// answers (none does on kwok), and waits for its role label.
async fn record_primary(env: &TestEnv, name: &str, pod: &str) {
    let api: Api<Redis> = env.api();
    api.patch_status(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"primary": {"pod": pod, "runId": "r1"}}})),
    )
    .await
    .unwrap();
    // A Pod event wakes the Redis (status writes do not).
    poke(env, pod).await;
    let pods: Api<Pod> = env.api();
    wait_for(&format!("{pod} labelled primary"), TIMEOUT, || async {
        let p = pods.get(pod).await.ok()?;
        (p.labels().get(ROLE).map(String::as_str) == Some("primary")).then_some(())
    })
    .await;
}

/// The primary of a Redis of `names` (sorted Pod names), and a replica: on
/// kwok the test records the second Pod as primary, standing in for the
/// operator (see [`record_primary`]); with real redis-server Pods (on kind)
/// the operator chooses, and the test waits for its choice to be labelled.
async fn a_replica_and_the_primary(
    env: &TestEnv,
    name: &str,
    names: &[String],
) -> (String, String) {
    if !crate::harness::real_containers() {
        record_primary(env, name, &names[1]).await;
        return (names[0].clone(), names[1].clone());
    }
    let api: Api<Redis> = env.api();
    let pods: Api<Pod> = env.api();
    let primary = wait_for(&format!("{name}: a primary, labelled"), TIMEOUT, || async {
        let primary = api.get(name).await.ok()?.primary_pod()?.to_string();
        let p = pods.get(&primary).await.ok()?;
        (p.labels().get(ROLE).map(String::as_str) == Some("primary")).then_some(primary)
    })
    .await;
    let replica = names.iter().find(|n| **n != primary).unwrap().clone();
    (replica, primary)
}

async fn poke(env: &TestEnv, pod: &str) {
    let pods: Api<Pod> = env.api();
    let stamp = format!("{:?}", std::time::Instant::now());
    pods.patch(
        pod,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"annotations": {"test.podkeeper.dev/poke": stamp}}})),
    )
    .await
    .unwrap();
}

#[tokio::test]
#[cfg_attr(
    feature = "kind-e2e",
    ignore = "local-only: it stands in for redis-server (records the primary and holds the handover, as no redis-server answers on kwok); on kind the operator's real switchover runs, covered by kind::an_image_rollout_updates_pods_in_place_keeping_their_ips_and_the_replicas_resync"
)]
async fn an_image_change_updates_pods_in_place_replicas_first_and_the_primary_last() {
    let env = TestEnv::new("redis-in-place").await;
    // A restarted container takes a while to be Ready again, so "one at a
    // time" is really waited for.
    env.set_pod_delays(PodDelays {
        ready: (Duration::from_millis(400), Duration::from_millis(1000)),
        delete: (Duration::from_millis(400), Duration::from_millis(1000)),
    })
    .await;
    let mut op = env.start_operator();
    let r = crate::redis::create(&env, "ip", 3).await;
    let uid = r.uid().unwrap();
    let (_, pods) = converged(&env, "ip", 3).await;
    let before = uids(&pods);
    let names: Vec<String> = before.keys().cloned().collect();
    let primary = names[1].clone();
    record_primary(&env, "ip", &primary).await;

    let recorder = Recorder::start(&env).await;
    let new_image = image("redis:7.4.3");
    let api: Api<Redis> = env.api();
    api.patch(
        "ip",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"image": &new_image}})),
    )
    .await
    .unwrap();

    // The replicas go first; the primary is held back for its handover,
    // which on kwok finds no linked replica to go to, so it waits there.
    let held = wait_for(
        "both replicas on the new image, Ready, the primary held back",
        TIMEOUT,
        || async {
            let pods = live_pods(&env, &uid).await;
            let r = api.get("ip").await.ok()?;
            let s = r.status.as_ref()?;
            let replicas_done = pods
                .iter()
                .filter(|p| p.name_any() != primary)
                .all(|p| image_of(p) == new_image);
            (pods.len() == 3 && replicas_done && s.ready_replicas == 3 && s.updated_replicas == 2)
                .then_some(pods)
        },
    )
    .await;
    let p = held.iter().find(|p| p.name_any() == primary).unwrap();
    assert_eq!(image_of(p), image("redis:7.4.2"), "the primary goes last");
    assert_eq!(uids(&held), before, "no Pod was replaced");

    // Hand the role over as FAILOVER does (status.primary then names the
    // new primary): the old primary is updated in place too.
    record_primary(&env, "ip", &names[0]).await;
    let (r, pods) = converged(&env, "ip", 3).await;
    assert!(pods.iter().all(|p| image_of(p) == new_image));
    assert_eq!(uids(&pods), before, "every Pod kept its name and UID");
    assert_eq!(r.status.unwrap().updated_replicas, 3);

    let report = recorder.check();
    report.assert_held("Redis in-place rollout");
    let stats = report.owner("ip");
    eprintln!("Redis in-place rollout: {stats:?}");
    assert_eq!(stats.in_place_updates, 3, "{stats:?}");
    assert_eq!(stats.most_live, 3, "no surge Pod: {stats:?}");
    assert!(
        stats.fewest_ready == 2 && stats.most_unready == 1,
        "one Pod at a time was unavailable: {stats:?}"
    );
    let updated = notes(&env, "UpdatedInPlace").await;
    for name in &names {
        let want = format!(
            "Updated Pod {name} in place: image {} -> {new_image}",
            image("redis:7.4.2")
        );
        assert!(updated.contains(&want), "{want:?} not in {updated:?}");
    }
    op.assert_running();
}

#[tokio::test]
async fn a_resources_change_resizes_in_place_and_a_refused_resize_replaces_the_pods() {
    let env = TestEnv::new("redis-resize").await;
    let mut op = env.start_operator();
    let spec: RedisSpec = serde_json::from_value(json!({
        "replicas": 3,
        "image": image("redis:7.4.2"),
        "resources": {"requests": {"cpu": "100m"}},
    }))
    .unwrap();
    let api: Api<Redis> = env.api();
    let r = api
        .create(&PostParams::default(), &Redis::new("rs", spec))
        .await
        .unwrap();
    let uid = r.uid().unwrap();
    let (_, pods) = converged(&env, "rs", 3).await;
    let before = uids(&pods);
    let recorder = Recorder::start(&env).await;

    // More CPU: the resize subresource, every Pod kept.
    api.patch(
        "rs",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"resources": {"requests": {"cpu": "200m"}}}})),
    )
    .await
    .unwrap();
    let (_, pods) = converged(&env, "rs", 3).await;
    let cpu = |p: &Pod| {
        p.spec.as_ref().unwrap().containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get("cpu"))
            .map(|q| q.0.clone())
    };
    assert!(pods.iter().all(|p| cpu(p).as_deref() == Some("200m")));
    assert_eq!(
        uids(&pods),
        before,
        "resized in place; Events: {:?} {:?}",
        notes(&env, "ResizeRefused").await,
        notes(&env, "FailedUpdate").await
    );
    let resized = notes(&env, "UpdatedInPlace").await;
    assert_eq!(resized.len(), 3, "{resized:?}");
    assert!(
        resized
            .iter()
            .all(|n| n.contains("resources resized (redis: requests cpu=200m)")),
        "{resized:?}"
    );

    // No requests at all would change the Pods' QoS class, which a resize
    // may not: the API server refuses, and the Pods are replaced instead.
    api.patch(
        "rs",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"resources": null}})),
    )
    .await
    .unwrap();
    let (_, pods) = converged(&env, "rs", 3).await;
    assert!(pods.iter().all(|p| cpu(p).is_none()));
    let kept: BTreeSet<&String> = before.values().collect();
    assert!(
        pods.iter().all(|p| !kept.contains(&p.uid().unwrap())),
        "every Pod was replaced"
    );
    let refused = notes(&env, "ResizeRefused").await;
    assert!(
        refused
            .iter()
            .any(|n| n.contains("Cannot resize Pod") && n.contains("replacing it instead")),
        "{refused:?}"
    );
    let report = recorder.check();
    report.assert_held("Redis resize");
    let stats = report.owner("rs");
    eprintln!("Redis resize: {stats:?}");
    assert_eq!(live_pods(&env, &uid).await.len(), 3);
    op.assert_running();
}

/// An in-place image patch the API server refuses (a policy that rejects
/// image changes on Pods) is a FailedUpdate, retried: once the policy goes,
/// the same Pod is updated in place, and no Pod was replaced meanwhile.
#[tokio::test]
async fn a_refused_in_place_image_patch_is_retried_until_the_policy_goes() {
    let env = TestEnv::new("redis-in-place-refused").await;
    let mut op = env.start_operator();
    let r = crate::redis::create(&env, "ipr", 2).await;
    let uid = r.uid().unwrap();
    let (_, pods) = converged(&env, "ipr", 2).await;
    let before = uids(&pods);
    let names: Vec<String> = before.keys().cloned().collect();
    let (replica, _) = a_replica_and_the_primary(&env, "ipr", &names).await;

    let policy = Policy::refuse_unless(
        &env,
        "UPDATE",
        "object.spec.containers.all(c, oldObject.spec.containers.exists(o, o.name == c.name && o.image == c.image))",
        "test policy refuses image changes",
    )
    .await;
    image_changes_refused(&env, &replica, true).await;
    let recorder = Recorder::start(&env).await;
    let new_image = image("redis:7.4.3");
    let api: Api<Redis> = env.api();
    api.patch(
        "ipr",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"image": &new_image}})),
    )
    .await
    .unwrap();
    wait_failure(&env, "ipr", "FailedUpdate").await;
    let failed = notes(&env, "FailedUpdate").await;
    assert!(
        failed.iter().any(|n| n.contains(&replica)
            && n.contains("in place")
            && n.contains("test policy refuses image changes")),
        "{failed:?}"
    );
    let pods = live_pods(&env, &uid).await;
    assert_eq!(uids(&pods), before, "no Pod was replaced while refused");
    assert!(pods.iter().all(|p| image_of(p) == image("redis:7.4.2")));

    policy.remove().await;
    image_changes_refused(&env, &replica, false).await;
    wait_for("the replica updated in place", TIMEOUT, || async {
        let pods = live_pods(&env, &uid).await;
        let r = api.get("ipr").await.ok()?;
        let done = pods
            .iter()
            .any(|p| p.name_any() == replica && image_of(p) == new_image);
        let cleared = replica_failure(&r).is_none_or(|(status, _)| status == "False");
        (done && cleared).then_some(())
    })
    .await;
    assert_eq!(
        uids(&live_pods(&env, &uid).await),
        before,
        "the replica kept its name and UID"
    );
    let updated = notes(&env, "UpdatedInPlace").await;
    assert!(updated.iter().any(|n| n.contains(&replica)), "{updated:?}");
    // At every Pod event, refused or not: never a surge Pod, never more
    // than one Pod down.
    let report = recorder.check();
    report.assert_held("refused, then allowed, in-place rollout");
    let stats = report.owner("ipr");
    assert_eq!(stats.most_live, 2, "no surge Pod: {stats:?}");
    assert!(stats.fewest_ready >= 1, "{stats:?}");
    op.assert_running();
}
