//! Leader election as a user of two replicas sees it: how fast a stopping
//! leader hands over, that a leader cut off from the API server stops
//! before a standby takes over, and that a standby costs nothing while the
//! leader works.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{DeleteParams, ListParams, PostParams};
use podkeeper::api::Redis;
use serde_json::json;

use crate::harness::{Operator, TestEnv, wait_for};
use crate::proxy::{TcpProxy, apiserver_address};

const TIMEOUT: Duration = Duration::from_secs(90);
const LEASE_NAMESPACE: &str = "podkeeper-system";

/// `--leader-elect` flags for a Lease of this test's own, plus `timing`.
pub(crate) fn election(lease: &str, timing: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--leader-elect",
        "--leader-election-namespace",
        LEASE_NAMESPACE,
        "--leader-election-id",
        lease,
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(timing.iter().map(|s| s.to_string()));
    args
}

pub(crate) fn refs(args: &[String]) -> Vec<&str> {
    args.iter().map(String::as_str).collect()
}

pub(crate) async fn leader_of(op: &Operator) -> String {
    wait_for("the operator to lead", TIMEOUT, || async {
        op.log_field("became the leader", "identity")
    })
    .await
}

pub(crate) async fn campaigning(op: &Operator) -> String {
    wait_for("the operator to campaign", TIMEOUT, || async {
        op.log_field("campaigning for leadership", "identity")
    })
    .await
}

async fn holder(leases: &Api<Lease>, name: &str) -> Option<String> {
    leases
        .get_opt(name)
        .await
        .ok()
        .flatten()?
        .spec?
        .holder_identity
}

/// Waits until `identity` holds the Lease; returns when that was seen.
async fn held_by(env: &TestEnv, lease: &str, identity: &str, timeout: Duration) -> Instant {
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), LEASE_NAMESPACE);
    wait_for(
        &format!("{identity} to hold the Lease"),
        timeout,
        || async { (holder(&leases, lease).await.as_deref() == Some(identity)).then(Instant::now) },
    )
    .await
}

async fn create_redis(env: &TestEnv, name: &str, replicas: i32) {
    let api: Api<Redis> = env.api();
    let redis = serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
        "metadata": {"name": name}, "spec": {"replicas": replicas}
    }))
    .unwrap();
    api.create(&PostParams::default(), &redis).await.unwrap();
}

fn converged(r: &Redis, n: i32) -> bool {
    r.status.as_ref().is_some_and(|s| {
        s.ready_replicas == n && s.replicas == n && s.observed_generation == r.metadata.generation
    })
}

async fn redis_ready(env: &TestEnv, name: &str, n: i32, timeout: Duration) {
    let api: Api<Redis> = env.api();
    wait_for(
        &format!("{name} to have {n} ready Pods"),
        timeout,
        || async { converged(&api.get(name).await.ok()?, n).then_some(()) },
    )
    .await;
}

#[tokio::test]
#[cfg_attr(
    feature = "kind-e2e",
    ignore = "local-only: it runs its own operator processes (leader election between them); on kind the deployed operator reconciles the same namespace beside them. The deployed operator's own handover is kind::the_deployed_operator_is_ready_serves_metrics_logs_and_fails_over"
)]
async fn a_stopping_leader_hands_over_in_well_under_the_lease_duration() {
    let env = TestEnv::new("leader-handover").await;
    let lease = format!("handover-{}", env.namespace);
    // The defaults: 15 s lease, 10 s renew deadline, 2 s retry period.
    let lease_duration = Duration::from_secs(15);
    let args = election(&lease, &[]);
    let mut first = Operator::start(&env.namespace, &refs(&args));
    let first_id = leader_of(&first).await;
    let second = Operator::start(&env.namespace, &refs(&args));
    let second_id = campaigning(&second).await;
    create_redis(&env, "handover", 1).await;
    redis_ready(&env, "handover", 1, TIMEOUT).await;
    held_by(&env, &lease, &first_id, TIMEOUT).await;

    let sigterm = Instant::now();
    assert!(first.terminate(), "the leader exits cleanly on SIGTERM");
    let exited = sigterm.elapsed();
    let taken = held_by(&env, &lease, &second_id, lease_duration).await - sigterm;
    crate::redis::scale(&env, "handover", 2).await;
    redis_ready(&env, "handover", 2, TIMEOUT).await;
    let converged = sigterm.elapsed();
    println!(
        "handover: leader exited {exited:.2?} after SIGTERM; the standby held the Lease after \
         {taken:.2?} and converged a scale-up after {converged:.2?} (lease duration {lease_duration:?})"
    );
    assert!(
        taken < lease_duration / 3,
        "the standby took {taken:?} to take over a released Lease"
    );
    assert!(
        converged < lease_duration,
        "the standby took {converged:?} to converge a change after the handover"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    feature = "kind-e2e",
    ignore = "local-only: it runs its own operator processes (leader election between them); on kind the deployed operator reconciles the same namespace beside them. The deployed operator's own handover is kind::the_deployed_operator_is_ready_serves_metrics_logs_and_fails_over"
)]
async fn a_leader_cut_off_from_the_api_server_stops_within_its_renew_deadline() {
    let env = TestEnv::new("leader-cut").await;
    let lease = format!("cut-{}", env.namespace);
    let renew_deadline = Duration::from_secs(4);
    let args = election(
        &lease,
        &[
            "--leader-election-lease-duration",
            "8",
            "--leader-election-renew-deadline",
            "4s",
            "--leader-election-retry-period",
            "1s",
        ],
    );
    let proxy = TcpProxy::start(apiserver_address()).await;
    let mut leader = Operator::start_with(
        &env.namespace,
        &refs(&args),
        Some(proxy.operator_kubeconfig()),
    );
    leader_of(&leader).await;
    let mut standby = Operator::start(&env.namespace, &refs(&args));
    let standby_id = campaigning(&standby).await;
    create_redis(&env, "cut", 1).await;
    redis_ready(&env, "cut", 1, TIMEOUT).await;

    proxy.cut();
    let cut = Instant::now();
    let status = wait_for("the cut-off leader to exit", TIMEOUT, || {
        let status = leader.try_exit_status();
        async move { status }
    })
    .await;
    let stopped = cut.elapsed();
    let log = leader.log_text();
    assert!(!status.success(), "a lost Lease is an error exit");
    assert!(
        log.contains("could not renew the leader Lease within the renew deadline"),
        "{log}"
    );
    // It renewed at most one retry period before the cut, so its deadline
    // came at most `renew_deadline` after it; one second for the exit.
    assert!(
        stopped < renew_deadline + Duration::from_secs(1),
        "the cut-off leader stopped only after {stopped:?}"
    );

    let taken = held_by(&env, &lease, &standby_id, TIMEOUT).await - cut;
    assert!(
        taken > stopped,
        "the standby led ({taken:?}) before the old leader stopped ({stopped:?})"
    );
    crate::redis::scale(&env, "cut", 2).await;
    redis_ready(&env, "cut", 2, TIMEOUT).await;
    standby.assert_running();
    println!(
        "renew deadline: the cut-off leader exited {stopped:.2?} after the cut (deadline \
         {renew_deadline:?}); the standby held the Lease after {taken:.2?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    feature = "kind-e2e",
    ignore = "local-only: it runs its own operator processes (leader election between them); on kind the deployed operator reconciles the same namespace beside them. The deployed operator's own handover is kind::the_deployed_operator_is_ready_serves_metrics_logs_and_fails_over"
)]
async fn a_standby_holds_no_pod_watch_and_stays_flat_while_the_leader_works() {
    const OWNERS: i32 = 100;
    const REPLICAS: i32 = 5;
    let env = TestEnv::new("leader-standby").await;
    let lease = format!("standby-{}", env.namespace);
    let args = election(&lease, &[]);
    let leader = Operator::start(&env.namespace, &refs(&args));
    leader_of(&leader).await;
    // The standby reaches the API server through a proxy that counts what
    // it receives.
    let proxy = TcpProxy::start(apiserver_address()).await;
    let mut standby = Operator::start_with(
        &env.namespace,
        &refs(&args),
        Some(proxy.operator_kubeconfig()),
    );
    campaigning(&standby).await;
    wait_for("the standby's first look at the Lease", TIMEOUT, || async {
        (proxy.bytes_to_client() > 0).then_some(())
    })
    .await;
    let rss_before = standby.rss_kib().expect("the standby runs");
    let bytes_before = proxy.bytes_to_client();
    let started = Instant::now();

    let mut peak = rss_before;
    let mut sample = |standby: &Operator| {
        peak = peak.max(standby.rss_kib().unwrap_or(0));
    };
    for i in 0..OWNERS {
        create_redis(&env, &format!("r{i}"), REPLICAS).await;
    }
    let redis: Api<Redis> = env.api();
    wait_for("every Redis to be ready", Duration::from_secs(300), || {
        sample(&standby);
        let redis = redis.clone();
        async move {
            let list = redis.list(&ListParams::default()).await.ok()?;
            (list.items.len() == OWNERS as usize
                && list.items.iter().all(|r| converged(r, REPLICAS)))
            .then_some(())
        }
    })
    .await;
    redis
        .delete_collection(&DeleteParams::default(), &ListParams::default())
        .await
        .unwrap();
    let pods: Api<Pod> = env.api();
    wait_for(
        "every Redis and Pod to be gone",
        Duration::from_secs(300),
        || {
            sample(&standby);
            let (redis, pods) = (redis.clone(), pods.clone());
            async move {
                let left = redis.list(&ListParams::default()).await.ok()?.items.len()
                    + pods.list(&ListParams::default()).await.ok()?.items.len();
                (left == 0).then_some(())
            }
        },
    )
    .await;
    sample(&standby);
    let rss_after = standby.rss_kib().expect("the standby runs");
    let received = proxy.bytes_to_client() - bytes_before;
    println!(
        "standby over {:.0?} while the leader created and deleted {} Pods: RSS {} KiB -> {} KiB \
         (peak {} KiB); received {} bytes from the API server",
        started.elapsed(),
        OWNERS * REPLICAS,
        rss_before,
        rss_after,
        peak,
        received
    );
    standby.assert_running();
    assert!(
        standby.log_field("became the leader", "identity").is_none(),
        "the standby led while the leader lived"
    );
    assert!(
        peak.saturating_sub(rss_before) < 20 * 1024,
        "the standby grew from {rss_before} KiB to {peak} KiB"
    );
    // Looking at one Lease every retry period is a few hundred bytes a
    // time; a watch on these Pods would have brought megabytes.
    assert!(
        received < 256 * 1024,
        "the standby received {received} bytes while the leader worked"
    );
}

#[tokio::test]
async fn a_leader_that_finds_another_holder_stops_at_its_next_renewal() {
    let env = TestEnv::new("leader-taken").await;
    let lease = format!("taken-{}", env.namespace);
    let args = election(&lease, &["--leader-election-retry-period", "1s"]);
    let mut leader = Operator::start(&env.namespace, &refs(&args));
    let id = leader_of(&leader).await;
    held_by(&env, &lease, &id, TIMEOUT).await;
    // Someone else writes the Lease (another candidate with a skewed view,
    // or a human): the leader must not go on acting beside it.
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), LEASE_NAMESPACE);
    let mut taken = leases.get(&lease).await.unwrap();
    let spec = taken.spec.as_mut().unwrap();
    spec.holder_identity = Some("someone-else".into());
    spec.renew_time = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime(
        k8s_openapi::jiff::Timestamp::now(),
    ));
    leases
        .replace(&lease, &PostParams::default(), &taken)
        .await
        .unwrap();
    let written = Instant::now();
    let status = wait_for("the leader to exit", TIMEOUT, || {
        let status = leader.try_exit_status();
        async move { status }
    })
    .await;
    let stopped = written.elapsed();
    assert!(!status.success(), "a lost Lease is an error exit");
    let log = leader.log_text();
    assert!(
        log.contains("another candidate holds the leader Lease"),
        "{log}"
    );
    // The next renewal comes within a retry period (1 s).
    assert!(
        stopped < Duration::from_secs(3),
        "stopped after {stopped:?}"
    );
    assert_eq!(
        holder(&leases, &lease).await.as_deref(),
        Some("someone-else"),
        "a leader that lost does not write the Lease again"
    );
}
