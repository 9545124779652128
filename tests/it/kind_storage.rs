//! Redis with `spec.storage` on kind's real redis-server Pods and real
//! volumes (the local-path provisioner), under a client that writes the
//! whole time: every member deleted at once loses no acknowledged write
//! and comes back Ready on its claims without help; `kubectl drain` of the
//! primary's node switches the primary over before its Pod is evicted and
//! loses nothing; every node under the Redis restarted at once loses
//! nothing either; a member whose volume is on a node that is going away
//! gets a new claim elsewhere. `podkeeper bench-redis
//! --restarts/--node-restarts/--drains` times the same steps; nothing here
//! asserts a duration.

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, Pod};
use kube::api::DeleteParams;
use kube::{Api, ResourceExt};
use podkeeper_dev::bench::redis::session::{InvariantWatch, Session};
use podkeeper_dev::bench::redis::{self as bench, storage};
use podkeeper_dev::kind::versions::REDIS_IMAGE;
use serde_json::json;

use crate::harness::{TestEnv, wait_for};
use crate::kind_under_writes::{assert_nothing_lost, session};

const TIMEOUT: Duration = Duration::from_secs(300);

#[tokio::test]
async fn every_member_deleted_at_once_comes_back_on_its_claims_with_every_acknowledged_write() {
    let env = TestEnv::new("kind-s-restart").await;
    let s = session(&env).await;
    let mut r = storage::Restarts::default();
    storage::restarts(&s, 2, 2_000, storage::AllAtOnce::PodsDeleted, &mut r)
        .await
        .expect("two restarts of every member");
    eprintln!("restarts: {r:?}");
    assert_eq!(r.ready_unaided, 2, "Ready again without help each time");
    assert_eq!(
        r.primary_claim_kept, 2,
        "the member on the primary's claim led"
    );
    assert!(
        r.dataset_missing.iter().all(|&m| m == 0),
        "dataset keys lost: {:?}",
        r.dataset_missing
    );
    assert!(
        r.acknowledged_before_lost.iter().all(|&m| m == 0),
        "writes acknowledged before a restart lost: {:?}",
        r.acknowledged_before_lost
    );
    assert_nothing_lost(&r.writes);
}

#[tokio::test]
async fn draining_the_primarys_node_switches_over_first_and_loses_no_acknowledged_write() {
    // The drain cordons a node: no other test may place Pods meanwhile.
    let env = TestEnv::exclusive("kind-s-drain").await;
    let s = session(&env).await;
    let mut d = storage::Drains::default();
    storage::drains(&s, 1, &mut d).await.expect("one drain");
    eprintln!("drains: {d:?}");
    let run = &d.runs[0];
    assert!(run.drain_succeeded, "the drain completed: {run:?}");
    assert!(
        run.switched_before_eviction,
        "the primary moved before its Pod was evicted: {run:?}"
    );
    assert_nothing_lost(&d.writes);
}

#[tokio::test]
async fn every_node_under_the_redis_restarted_at_once_loses_no_acknowledged_write() {
    // Restarting nodes restarts every Pod on them: no other test meanwhile.
    let env = TestEnv::exclusive("kind-s-reboot").await;
    let s = session(&env).await;
    let mut r = storage::Restarts::default();
    storage::restarts(&s, 1, 2_000, storage::AllAtOnce::NodesRestarted, &mut r)
        .await
        .expect("one restart of every node under the Redis");
    eprintln!("node restarts: {r:?}");
    assert_eq!(r.ready_unaided, 1, "Ready again without help");
    assert_eq!(r.dataset_missing, [0], "dataset keys lost");
    assert_eq!(
        r.acknowledged_before_lost,
        [0],
        "writes acknowledged before the restart lost"
    );
    assert_nothing_lost(&r.writes);
}

/// Uncordons a node when dropped (a failed test leaves the cluster usable).
struct Cordoned<'a>(&'a Session, String);

impl Drop for Cordoned<'_> {
    fn drop(&mut self) {
        let (ok, _, err) = self.0.kubectl(&["uncordon", &self.1]);
        if !ok {
            eprintln!("uncordon {}: {err}", self.1);
        }
    }
}

fn node_of(p: &Pod) -> String {
    p.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

/// A node about to go for good is cordoned and its Pods deleted; a member's
/// local volume there cannot follow. While the primary answers, the member
/// gets a new claim on another node (the old one deleted, a
/// `ReplacingClaim` Warning) and resyncs; no acknowledged write is lost.
#[tokio::test]
async fn a_member_whose_volume_is_on_a_cordoned_node_gets_a_new_claim_and_loses_no_write() {
    // The test cordons a node: no other test may place Pods meanwhile.
    let env = TestEnv::exclusive("kind-s-strand").await;
    let s = session(&env).await;
    let name = "strand";
    s.create_redis_spec(
        name,
        json!({"replicas": 3, "port": 6379, "image": REDIS_IMAGE, "storage": {"size": "1Gi"}}),
    )
    .await
    .unwrap();
    let (r, pods) = s.settled(name, 3, TIMEOUT).await.unwrap();
    let host = s.cluster_ip(name).await.unwrap();
    s.start_writer(&host, 6379, 1).await.unwrap();
    s.writes_accepted(20).await.unwrap();
    let watch = InvariantWatch::start(&s, name);

    let primary = r.primary_pod().unwrap().to_string();
    let primary_node = node_of(pods.iter().find(|p| p.name_any() == primary).unwrap());
    let victim = pods
        .iter()
        .find(|p| node_of(p) != primary_node)
        .expect("a member on another node than the primary's (the default spread)");
    let node = node_of(victim);
    let claim = victim.labels()["podkeeper.dev/claim"].clone();
    let (ok, _, err) = s.kubectl(&["cordon", &node]);
    assert!(ok, "cordon {node}: {err}");
    let cordon = Cordoned(&s, node.clone());
    let pod_api: Api<Pod> = s.api();
    pod_api
        .delete(&victim.name_any(), &DeleteParams::default())
        .await
        .unwrap();

    crate::redis::events_with_reasons(&env, &["ReplacingClaim"]).await;
    let claims: Api<PersistentVolumeClaim> = s.api();
    wait_for(&format!("claim {claim} gone"), TIMEOUT, || async {
        claims.get_opt(&claim).await.ok()?.is_none().then_some(())
    })
    .await;
    let old: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
    let (_, pods) = s.settled(name, 3, TIMEOUT).await.unwrap();
    let successor = pods
        .iter()
        .find(|p| !old.contains(&p.name_any()))
        .expect("a successor");
    assert_ne!(node_of(successor), node, "the successor runs elsewhere");
    for p in &pods {
        assert_ne!(p.labels()["podkeeper.dev/claim"], claim, "{}", p.name_any());
    }
    s.writes_accepted(20).await.unwrap();
    drop(cordon);
    let w = bench::wind_up(&s, &host, watch).await.unwrap();
    assert_nothing_lost(&w);
}
