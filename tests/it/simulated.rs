//! A Redis on the local control plane, whose Pods kwok simulates (no
//! redis-server runs in them): its status says so, and how to get real
//! Pods, instead of a bare "no primary"; one Event says it too.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{ListParams, Patch, PatchParams};
use kube::{Api, ResourceExt};
use podkeeper::api::Redis;
use serde_json::json;

use crate::harness::{TestEnv, owned_by, wait_for};
use crate::redis::create;

const TIMEOUT: Duration = Duration::from_secs(90);

/// (status, reason, message) of the condition `type_`.
fn condition(r: &Redis, type_: &str) -> Option<(String, String, String)> {
    let c = r
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// The Events about Redis `name` with reason `Simulated`: (count of
/// objects, the highest series count, a note).
async fn simulated_events(env: &TestEnv, name: &str) -> (usize, i32, String) {
    let events: Api<Event> = env.api();
    let items: Vec<Event> = events
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some("Simulated")
                && e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
        })
        .collect();
    let series = items
        .iter()
        .map(|e| e.series.as_ref().map_or(1, |s| s.count))
        .max()
        .unwrap_or(0);
    let note = items
        .first()
        .and_then(|e| e.note.clone())
        .unwrap_or_default();
    (items.len(), series, note)
}

#[tokio::test]
#[cfg_attr(
    feature = "kind-e2e",
    ignore = "local-only: on kind the Pods run redis-server, and kind::replication_one_primary_linked_replicas_and_services_that_follow_roles checks that they serve"
)]
async fn a_redis_whose_pods_kwok_simulates_says_so_in_its_status_and_one_event() {
    let env = TestEnv::new("redis-simulated").await;
    let mut op = env.start_operator();
    let uid = create(&env, "sim", 3).await.uid().unwrap();
    let api: Api<Redis> = env.api();

    let r = wait_for(
        "Ready and Replicated to say the Pods are simulated",
        TIMEOUT,
        || async {
            let r = api.get("sim").await.ok()?;
            let ready = condition(&r, "Ready")?;
            let replicated = condition(&r, "Replicated")?;
            (ready.1 == "Simulated" && replicated.1 == "Simulated").then_some(r)
        },
    )
    .await;
    let s = r.status.as_ref().unwrap();
    assert_eq!(s.ready_replicas, 3, "kwok makes the Pods Ready");
    assert!(s.primary.is_none());
    let (status, _, message) = condition(&r, "Replicated").unwrap();
    assert_eq!(status, "False");
    assert!(
        message.contains("simulate Pods without running their containers")
            && message.contains("no redis-server answers")
            && message.contains("`cargo run -- dev --kind`"),
        "{message}"
    );
    let (status, _, ready_message) = condition(&r, "Ready").unwrap();
    assert_eq!(status, "False");
    assert!(
        ready_message.contains("3 of 3 Pods ready") && ready_message.contains(&message),
        "{ready_message}"
    );
    // The Pods carry the mark kwok's stages set.
    let pods: Api<Pod> = env.api();
    let owned: Vec<Pod> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| owned_by(p, &uid))
        .collect();
    assert_eq!(owned.len(), 3);
    for p in &owned {
        let mark = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "kwok.podkeeper.dev/Simulated"));
        assert_eq!(
            mark.map(|c| c.status.as_str()),
            Some("True"),
            "{}",
            p.name_any()
        );
    }
    // `kubectl get redis` says it in its Status column.
    let (ok, out, err) = env.kubectl(&["get", "redis", "sim"]);
    assert!(ok, "{err}");
    assert!(
        out.lines().next().unwrap_or_default().contains("STATUS") && out.contains("Simulated"),
        "{out}"
    );

    // One Event, however many reconciles follow: a scale-up (a new Pod,
    // Pending a moment, then simulated too) and an operator restart.
    let (events, series, note) = wait_for("the Simulated Event", TIMEOUT, || async {
        let e = simulated_events(&env, "sim").await;
        (e.0 > 0).then_some(e)
    })
    .await;
    assert_eq!((events, series), (1, 1), "{note}");
    assert_eq!(note, message);
    api.patch(
        "sim",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 4}})),
    )
    .await
    .unwrap();
    wait_for("4 simulated members", TIMEOUT, || async {
        let r = api.get("sim").await.ok()?;
        let s = r.status.as_ref()?;
        (s.ready_replicas == 4 && s.members.len() == 4 && condition(&r, "Ready")?.1 == "Simulated")
            .then_some(())
    })
    .await;
    op.restart();
    // The restarted operator reconciles the Redis at once (its first list).
    tokio::time::sleep(Duration::from_secs(5)).await;
    let r = api.get("sim").await.unwrap();
    assert_eq!(condition(&r, "Replicated").unwrap().1, "Simulated");
    assert_eq!(simulated_events(&env, "sim").await.0, 1, "still one Event");
    assert_eq!(simulated_events(&env, "sim").await.1, 1, "told once");
    op.assert_running();
}
