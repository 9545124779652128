//! A Redis on the local control plane, whose Pods kwok simulates (no
//! redis-server runs in them): its status says so, and how to get real
//! Pods, instead of a bare "no primary".

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
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

#[tokio::test]
#[cfg_attr(
    feature = "kind-e2e",
    ignore = "local-only: on kind the Pods run redis-server, and kind::replication_one_primary_linked_replicas_and_services_that_follow_roles checks that they serve"
)]
async fn a_redis_whose_pods_kwok_simulates_says_so_in_its_status_and_its_column() {
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

    // A new member (Pending a moment, then simulated too) keeps it so.
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
    op.assert_running();
}
