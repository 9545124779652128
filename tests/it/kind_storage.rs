//! Redis with `spec.storage` on kind's real redis-server Pods and real
//! volumes (the local-path provisioner), under a client that writes the
//! whole time: every member deleted at once loses no acknowledged write
//! and comes back Ready on its claims without help; `kubectl drain` of the
//! primary's node switches the primary over before its Pod is evicted and
//! loses nothing. `podkeeper bench-redis --restarts/--drains` times the
//! same steps; nothing here asserts a duration.

use podkeeper_dev::bench::redis::storage;

use crate::harness::TestEnv;
use crate::kind_under_writes::session;

#[tokio::test]
async fn every_member_deleted_at_once_comes_back_on_its_claims_with_every_acknowledged_write() {
    let env = TestEnv::new("kind-s-restart").await;
    let s = session(&env).await;
    let mut r = storage::Restarts::default();
    storage::restarts(&s, 2, 2_000, &mut r)
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
    assert!(r.writes.acknowledged > 0);
    assert_eq!(r.writes.acknowledged_lost, 0, "acknowledged writes lost");
    assert_eq!(r.writes.client_overlaps, 0, "the client saw two primaries");
    assert_eq!(
        r.writes.watch_violations,
        Vec::<String>::new(),
        "two primaries at an event"
    );
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
    assert!(d.writes.acknowledged > 0);
    assert_eq!(d.writes.acknowledged_lost, 0, "acknowledged writes lost");
    assert_eq!(d.writes.client_overlaps, 0, "the client saw two primaries");
    assert_eq!(
        d.writes.watch_violations,
        Vec::<String>::new(),
        "two primaries at an event"
    );
}
