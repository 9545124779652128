//! Shipping concerns: the manifests, leader election, metrics and probes.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use kube::Api;
use kube::api::{Patch, PatchParams, PostParams};
use podkeeper::api::Redis;
use serde_json::json;

use crate::harness::image;
use crate::harness::{Operator, TestEnv, free_port, http_get, wait_for};

const TIMEOUT: Duration = Duration::from_secs(90);

#[tokio::test]
async fn the_manifests_apply_with_server_side_dry_run() {
    let (ok, out, err) = crate::harness::kubectl(&[
        "apply",
        "--dry-run=server",
        "-k",
        concat!(env!("CARGO_MANIFEST_DIR"), "/manifests"),
    ]);
    assert!(ok, "{out}{err}");
    assert!(out.contains("deployment.apps/podkeeper"), "{out}");
    assert!(
        out.contains("clusterrole.rbac.authorization.k8s.io/podkeeper"),
        "{out}"
    );
}

async fn redis_ready(env: &TestEnv, name: &str, n: i32) {
    let api: Api<Redis> = env.api();
    wait_for(
        &format!("{name} to have {n} ready Pods"),
        TIMEOUT,
        || async {
            let r = api.get(name).await.ok()?;
            let s = r.status?;
            (s.ready_replicas == n
                && s.replicas == n
                && s.observed_generation == r.metadata.generation)
                .then_some(())
        },
    )
    .await;
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

fn identity_in(log: &str) -> Option<String> {
    let line = log.lines().find(|l| l.contains("became the leader"))?;
    let start = line.find("identity=")? + "identity=".len();
    Some(
        line[start..]
            .split_whitespace()
            .next()?
            .trim_matches('"')
            .to_string(),
    )
}

#[tokio::test]
#[cfg_attr(
    feature = "kind-e2e",
    ignore = "local-only: it runs its own operator processes (leader election between them); on kind the deployed operator reconciles the same namespace beside them. The deployed operator's own handover is kind::the_deployed_operator_is_ready_serves_metrics_logs_and_fails_over"
)]
async fn a_standby_takes_over_when_the_leader_dies_and_a_stopping_leader_hands_over() {
    let env = TestEnv::new("ship-leader").await;
    let lease_name = format!("leader-{}", env.namespace);
    let duration = 4;
    let args = [
        "--leader-elect",
        "--leader-election-namespace",
        "podkeeper-system",
        "--leader-election-id",
        &lease_name,
        "--leader-election-lease-duration",
        "4",
        "--leader-election-renew-deadline",
        "3s",
        "--leader-election-retry-period",
        "1s",
    ];
    let mut first = Operator::start(&env.namespace, &args);
    let leader_id = wait_for("a leader", TIMEOUT, || async {
        identity_in(&first.log_text())
    })
    .await;
    let mut second = Operator::start(&env.namespace, &args);
    let api: Api<Redis> = env.api();
    api.create(&PostParams::default(), &serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "Redis", "metadata": {"name": "ha"}, "spec": {"replicas": 2, "image": image("redis:7.4.2")}
    })).unwrap())
    .await
    .unwrap();
    redis_ready(&env, "ha", 2).await;
    assert!(
        identity_in(&second.log_text()).is_none(),
        "the standby must not lead while the leader lives"
    );

    let leases: Api<Lease> = Api::namespaced(env.client.clone(), "podkeeper-system");
    assert_eq!(
        holder(&leases, &lease_name).await.as_deref(),
        Some(leader_id.as_str())
    );
    first.kill();
    // Within the lease duration (counted from when the standby last saw the
    // Lease renewed) plus one retry period with its jitter.
    let took_over = wait_for(
        "the standby to take over",
        Duration::from_secs(duration + 6),
        || async { identity_in(&second.log_text()) },
    )
    .await;
    assert_ne!(took_over, leader_id);
    api.patch(
        "ha",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"replicas": 3}})),
    )
    .await
    .unwrap();
    redis_ready(&env, "ha", 3).await;

    // A leader that stops (SIGTERM) releases the Lease before it exits.
    let mut third = Operator::start(&env.namespace, &args);
    assert!(second.terminate(), "the leader exits cleanly on SIGTERM");
    let after = holder(&leases, &lease_name).await;
    assert_ne!(
        after.as_deref(),
        Some(took_over.as_str()),
        "the Lease was released"
    );
    wait_for("the third to lead", TIMEOUT, || async {
        identity_in(&third.log_text())
    })
    .await;
    third.assert_running();
}

#[tokio::test]
#[cfg_attr(
    feature = "kind-e2e",
    ignore = "local-only: it counts the Pods its own operator process creates, and on kind the deployed operator reconciles the same namespace"
)]
async fn metrics_and_probes_are_served() {
    let env = TestEnv::new("ship-metrics").await;
    let (metrics_port, probe_port) = (free_port(), free_port());
    let metrics_addr = format!("127.0.0.1:{metrics_port}");
    let probe_addr = format!("127.0.0.1:{probe_port}");
    let mut op = Operator::start(
        &env.namespace,
        &[
            "--metrics-bind-address",
            &metrics_addr,
            "--health-probe-bind-address",
            &probe_addr,
        ],
    );
    wait_for("/readyz to turn ready", TIMEOUT, || async {
        http_get(probe_port, "/readyz").filter(|(code, _)| *code == 200)
    })
    .await;
    assert_eq!(http_get(probe_port, "/livez").map(|r| r.0), Some(200));

    let api: Api<Redis> = env.api();
    api.create(&PostParams::default(), &serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "Redis", "metadata": {"name": "m"}, "spec": {"replicas": 2, "image": image("redis:7.4.2")}
    })).unwrap())
    .await
    .unwrap();
    redis_ready(&env, "m", 2).await;
    let (code, body) = http_get(metrics_port, "/metrics").expect("metrics served");
    assert_eq!(code, 200);
    assert!(
        body.contains(r#"controller_runtime_reconcile_total{controller="redis",result="success"}"#),
        "{body}"
    );
    assert!(
        body.contains(r#"podkeeper_pods_created_total{controller="redis"} 2"#),
        "{body}"
    );
    assert!(
        body.contains("controller_runtime_reconcile_time_seconds_bucket"),
        "{body}"
    );
    op.assert_running();
}
