//! Replication under a client that writes the whole time (issue 13, points
//! 9 and 10), on kind's real redis-server Pods: the client Pod writes
//! sequential keys through the `<name>` Service, each `SET` followed by
//! `WAIT 1`, and the tests assert outcomes: no acknowledged write lost,
//! never two primaries (checked by the client and at every Pod and Redis
//! event), the exact Pod count. `podkeeper bench-redis` times the same
//! steps; nothing here asserts a duration.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams};
use kube::{Api, ResourceExt};
use podkeeper::api::Redis;
use podkeeper_dev::bench::redis::session::{InvariantWatch, Session};
use podkeeper_dev::bench::redis::{self as bench, writer};
use podkeeper_dev::kind::versions::{REDIS_IMAGE, REDIS_ROLLOUT_IMAGES};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::json;

use crate::harness::{TestEnv, cluster, hold_deployed_operator};

const PORT: u16 = 6379;
const OPERATOR_NS: &str = "podkeeper-system";

/// The bench's session (client Pod and all) in the test's namespace.
pub(crate) async fn session(env: &TestEnv) -> Session {
    Session::within(
        env.client.clone(),
        &cluster().kubeconfig_path,
        &env.namespace,
        REDIS_IMAGE,
    )
    .await
    .expect("the client Pod")
}

/// A Redis `name` of 3 members on port 6379, settled; its Service's
/// address.
pub(crate) async fn three_members(s: &Session, name: &str) -> String {
    s.create_redis_spec(
        name,
        json!({"replicas": 3, "port": 6379, "image": REDIS_IMAGE}),
    )
    .await
    .unwrap();
    s.settled(name, 3, Duration::from_secs(300)).await.unwrap();
    s.cluster_ip(name).await.unwrap()
}

/// The outcome every test under writes asserts: writes were acknowledged,
/// none of them lost, and never two primaries (to the client, or at any Pod
/// or Redis event).
pub(crate) fn assert_nothing_lost(w: &bench::UnderWrites) {
    assert!(w.acknowledged > 0, "no write was acknowledged");
    assert_eq!(w.acknowledged_lost, 0, "acknowledged writes lost");
    assert_eq!(w.client_overlaps, 0, "the client saw two primaries");
    assert_eq!(
        w.watch_violations,
        Vec::<String>::new(),
        "two primaries at an event"
    );
}

#[tokio::test]
async fn kill_9_failovers_under_writes_lose_no_acknowledged_write_and_never_show_two_primaries() {
    let env = TestEnv::new("kind-w-kill").await;
    let s = session(&env).await;
    let f = bench::failovers(&s, 3, 2).await.expect("two failovers");
    eprintln!("kill -9 failovers: {f:?}");
    assert_eq!(
        f.to_new_primary_s.len(),
        2,
        "a new primary took writes each time"
    );
    assert!(f.writes.acknowledged > 0);
    assert_eq!(f.writes.acknowledged_lost, 0, "acknowledged writes lost");
    assert_eq!(f.writes.client_overlaps, 0, "the client saw two primaries");
    assert!(f.writes.watch_events > 0);
    assert_eq!(
        f.writes.watch_violations,
        Vec::<String>::new(),
        "two primaries at an event"
    );
}

#[tokio::test]
async fn image_rollouts_under_writes_switch_over_and_lose_no_acknowledged_write() {
    let env = TestEnv::new("kind-w-rollout").await;
    let s = session(&env).await;
    let r = bench::rollouts(&s, 3, 2).await.expect("two rollouts");
    eprintln!("image rollouts: {r:?}");
    assert_eq!(r.switchovers, 2, "each rollout moved the primary");
    assert!(r.writes.acknowledged > 0);
    assert_eq!(r.writes.acknowledged_lost, 0, "acknowledged writes lost");
    assert!(
        r.success.iter().all(|&x| x > 0.0),
        "writes went through during every rollout"
    );
    assert_eq!(r.writes.client_overlaps, 0, "the client saw two primaries");
    assert_eq!(
        r.writes.watch_violations,
        Vec::<String>::new(),
        "two primaries at an event"
    );
    let (ok, out, _) = s.kubectl(&["events", "--for", "redis/rollout"]);
    assert!(ok && out.contains("SwitchingOver"), "{out}");
}

#[tokio::test]
async fn scale_5_to_1_under_writes_keeps_the_primary_and_every_key() {
    let env = TestEnv::new("kind-w-scale").await;
    let s = session(&env).await;
    let d = bench::scale_downs(&s, 1).await.expect("a scale-down");
    eprintln!("scale 5 to 1: {d:?}");
    assert!(d.accepted > 0);
    assert_eq!(d.accepted_lost, 0, "accepted writes lost");
    assert_eq!(d.primary_kept, 1, "the primary stayed");
    assert_eq!(
        d.watch_violations,
        Vec::<String>::new(),
        "two primaries at an event"
    );
}

/// One disruption of the chaos run.
#[derive(Clone, Copy, Debug)]
enum Fault {
    DeleteReplicaPod,
    DeletePrimaryPod,
    Kill9Primary,
    Kill9Replica,
    /// Force-delete the leading operator's Pod (the standby takes over).
    KillOperator,
    /// An image change: every Pod replaced, one switchover.
    Rollout,
    /// A rollout, and the operator killed while it runs.
    RolloutAndKillOperator,
    Scale,
}

const FAULTS: [Fault; 8] = [
    Fault::DeleteReplicaPod,
    Fault::DeletePrimaryPod,
    Fault::Kill9Primary,
    Fault::Kill9Replica,
    Fault::KillOperator,
    Fault::Rollout,
    Fault::RolloutAndKillOperator,
    Fault::Scale,
];

/// Force-deletes the leading operator's Pod (the standby takes over).
pub(crate) fn kill_operator() {
    let _guard = hold_deployed_operator();
    let (ok, out, _) = crate::harness::kubectl(&[
        "get",
        "lease",
        "podkeeper-leader",
        "-n",
        OPERATOR_NS,
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    let leader = out.trim().rsplit_once('-').map(|(p, _)| p.to_string());
    let Some(leader) = leader.filter(|_| ok) else {
        panic!("no operator leader: {out}");
    };
    let (ok, _, err) = crate::harness::kubectl(&[
        "delete",
        "pod",
        "-n",
        OPERATOR_NS,
        &leader,
        "--grace-period=0",
        "--force",
        "--wait=false",
    ]);
    assert!(ok, "{err}");
}

/// Seeded faults, one after another, on a Redis written to the whole time;
/// after each, once the Redis has settled: exactly spec.replicas Pods, one
/// master, every other Pod its linked replica, no acknowledged write lost.
/// Throughout: never two primaries at a Pod or Redis event, nor seen by the
/// client. `PODKEEPER_KIND_CHAOS_STEPS` (default 6) sets the length,
/// `PODKEEPER_KIND_CHAOS_SEED` replays a printed seed.
#[tokio::test]
async fn chaos_pod_primary_and_operator_kills_rollouts_and_scaling_keep_one_linked_primary_and_every_acknowledged_write()
 {
    let steps: usize = std::env::var("PODKEEPER_KIND_CHAOS_STEPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let seed: u64 = std::env::var("PODKEEPER_KIND_CHAOS_SEED")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("chaos: {steps} steps, PODKEEPER_KIND_CHAOS_SEED={seed}");
    let mut rng = StdRng::seed_from_u64(seed);
    let env = TestEnv::new("kind-w-chaos").await;
    let s = session(&env).await;
    let name = "chaos";
    let mut replicas = 3usize;
    s.create_redis(name, replicas as i32, REDIS_IMAGE)
        .await
        .unwrap();
    s.settled(name, replicas, Duration::from_secs(600))
        .await
        .unwrap();
    let host = s.cluster_ip(name).await.unwrap();
    s.start_writer(&host, PORT, 1).await.unwrap();
    s.writes_accepted(20).await.unwrap();
    let watch = InvariantWatch::start(&s, name);
    let redis: Api<Redis> = s.api();
    let pods: Api<Pod> = s.api();
    let images: Vec<&str> = std::iter::once(REDIS_IMAGE)
        .chain(REDIS_ROLLOUT_IMAGES)
        .collect();
    let mut image = 0;
    for step in 0..steps {
        let fault = FAULTS[rng.random_range(0..FAULTS.len())];
        let r = redis.get(name).await.unwrap();
        let primary = r.primary_pod().expect("a primary").to_string();
        let members: Vec<String> = pods
            .list(&ListParams::default().labels(&podkeeper::redis::pod::selector_string(name)))
            .await
            .unwrap()
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .map(|p| p.name_any())
            .collect();
        let replica = members
            .iter()
            .filter(|p| **p != primary)
            .nth(rng.random_range(0..members.len().max(2) - 1))
            .cloned();
        eprintln!("chaos step {step}: {fault:?} (primary {primary}, {replicas} members)");
        match fault {
            Fault::DeleteReplicaPod | Fault::Kill9Replica if replica.is_none() => {}
            Fault::DeleteReplicaPod => {
                pods.delete(replica.as_deref().unwrap(), &DeleteParams::default())
                    .await
                    .unwrap();
            }
            Fault::DeletePrimaryPod => {
                pods.delete(&primary, &DeleteParams::default())
                    .await
                    .unwrap();
            }
            Fault::Kill9Primary => {
                s.kill_9(&primary).await.unwrap();
            }
            Fault::Kill9Replica => {
                s.kill_9(replica.as_deref().unwrap()).await.unwrap();
            }
            Fault::KillOperator => kill_operator(),
            Fault::Rollout | Fault::RolloutAndKillOperator => {
                image = (image + 1) % images.len();
                s.patch_redis(name, serde_json::json!({"image": images[image]}))
                    .await
                    .unwrap();
                if matches!(fault, Fault::RolloutAndKillOperator) {
                    // Somewhere in the rollout: once a Pod is on the new
                    // image (an image-only change updates Pods in place;
                    // a new Pod would count too).
                    let want = images[image];
                    podkeeper_dev::bench::redis::session::wait(
                        "a Pod on the rollout's image",
                        Duration::from_secs(300),
                        || async {
                            let now = pods.list(&ListParams::default()).await.ok()?;
                            now.items
                                .iter()
                                .filter(|p| p.name_any() != "client")
                                .any(|p| {
                                    !members.contains(&p.name_any())
                                        || p.spec.as_ref().is_some_and(|s| {
                                            s.containers[0].image.as_deref() == Some(want)
                                        })
                                })
                                .then_some(())
                        },
                    )
                    .await
                    .unwrap();
                    kill_operator();
                }
            }
            Fault::Scale => {
                replicas = [2, 3, 4][rng.random_range(0..3)];
                s.patch_redis(name, serde_json::json!({"replicas": replicas}))
                    .await
                    .unwrap();
            }
        }
        if matches!(fault, Fault::Rollout | Fault::RolloutAndKillOperator) {
            let want = images[image];
            podkeeper_dev::bench::redis::session::wait(
                "the rollout",
                Duration::from_secs(600),
                || async {
                    let (_, live) = s
                        .settled(name, replicas, Duration::from_secs(600))
                        .await
                        .ok()?;
                    live.iter()
                        .all(|p| {
                            p.spec.as_ref().unwrap().containers[0].image.as_deref() == Some(want)
                        })
                        .then_some(())
                },
            )
            .await
            .unwrap();
        }
        if matches!(fault, Fault::DeletePrimaryPod | Fault::Kill9Primary) {
            podkeeper_dev::bench::redis::session::wait(
                "a new primary",
                Duration::from_secs(300),
                || async { (redis.get(name).await.ok()?.primary_pod()? != primary).then_some(()) },
            )
            .await
            .unwrap();
        }
        let wrong = s.at_rest(name, replicas, PORT).await.unwrap();
        assert_eq!(
            wrong,
            Vec::<String>::new(),
            "after step {step} ({fault:?}), seed {seed}"
        );
        s.writes_accepted(5).await.unwrap();
        let (writes, _) = s.writes().unwrap();
        let lost = s
            .lost(&host, PORT, &writer::acknowledged(&writes, 1))
            .unwrap();
        eprintln!(
            "chaos step {step}: {} acknowledged writes so far, {} lost",
            writer::acknowledged(&writes, 1).len(),
            lost.len()
        );
        assert_eq!(
            lost,
            Vec::<u64>::new(),
            "acknowledged writes lost after step {step} ({fault:?}), seed {seed}"
        );
        let overlaps = writer::overlapping_primaries(&writes);
        assert_eq!(
            overlaps,
            vec![],
            "the client saw two primaries, seed {seed}"
        );
        assert_eq!(watch.seen().violations, Vec::<String>::new(), "seed {seed}");
    }
    let writes = s.stop_writer().await.unwrap();
    let summary = writer::summarize(&writes, 1);
    eprintln!("chaos: {summary:?}, {} events checked", watch.seen().events);
    assert!(summary.acknowledged > 0);
}

/// Issue 28, point 5 (a): the primary's node cut off the cluster network
/// for 30 s (its packets dropped on the `kind` network), a client beside the old primary
/// writing straight to it and one writing through the Service, both with
/// `WAIT 1`, on a Redis of 3 with a member on each node (the control
/// plane's node untainted, the operator pinned there, both put back after).
/// No acknowledged write is lost, and the old primary accepts no write
/// once the new one has taken its first: the write fence stopped it first.
/// Runs alone: it cuts a node the other tests' Pods are on.
#[tokio::test]
async fn a_primary_cut_off_the_network_stops_taking_writes_before_its_successor_and_loses_no_acknowledged_write()
 {
    let env = TestEnv::exclusive("kind-w-partition").await;
    let s = session(&env).await;
    let p = bench::partition::partitions(&s, bench::partition::Kind::NodeCut, 1, 30)
        .await
        .expect("a partition");
    eprintln!("partition: {p:?}");
    let run = &p.runs[0];
    assert!(run.dropped_packets > 0, "the cut dropped packets");
    assert!(run.failover, "a replica was promoted");
    assert!(
        run.to_new_primary_s.is_some(),
        "the new primary took writes"
    );
    assert!(run.direct_acknowledged > 0 && p.writes.acknowledged > 0);
    assert_eq!(p.acknowledged_lost(), 0, "acknowledged writes lost");
    assert_eq!(
        run.old_accepted_after_new, 0,
        "writes the old primary accepted after the new one's first"
    );
    assert_eq!(
        run.client_overlaps + p.writes.client_overlaps,
        0,
        "the clients saw two primaries"
    );
    assert_eq!(p.endpoint_violations, Vec::<String>::new(), "two endpoints");
    // Never two Pods labelled primary, nor two primaries in status.members
    // (a round that fences the returning old primary reports the roles its
    // commands left, not the ones it observed before them).
    assert_eq!(
        p.writes.watch_violations,
        Vec::<String>::new(),
        "two primaries seen by the watch"
    );
}
