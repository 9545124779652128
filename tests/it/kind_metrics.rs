//! The Redis metrics as Prometheus scrapes them from the deployed operator
//! (issue 32, point 1), on kind's real redis-server Pods under a client
//! writing the whole time: every member with its role, link, lag, memory
//! and keys, and a failover counted and timed.

use std::time::Duration;

use kube::Api;
use podkeeper::api::Redis;
use podkeeper_dev::bench::redis::session::InvariantWatch;
use podkeeper_dev::bench::redis::{self as bench};
use podkeeper_dev::kind::versions::REDIS_IMAGE;
use serde_json::json;

use crate::harness::{TestEnv, hold_deployed_operator, wait_for};
use crate::kind::{leader_pod, scrape};
use crate::kind_auth::fail_over;
use crate::kind_under_writes::{assert_nothing_lost, session};

const TIMEOUT: Duration = Duration::from_secs(300);

/// The values of the samples of `name` whose labels include all of
/// `labels` (OpenMetrics text: `name{k="v",...} value`).
fn samples(text: &str, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
    text.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?.strip_prefix('{')?;
            let (set, value) = rest.rsplit_once("} ")?;
            labels
                .iter()
                .all(|(k, v)| set.split(',').any(|kv| kv == format!("{k}=\"{v}\"")))
                .then(|| value.parse().ok())?
        })
        .collect()
}

/// The one sample of `name` with `labels`, if there is exactly one.
fn one(text: &str, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    match samples(text, name, labels)[..] {
        [v] => Some(v),
        _ => None,
    }
}

/// The metrics the alerting rules and the dashboard of
/// `manifests/monitoring/` read (those named podkeeper's, Redis's or
/// controller-runtime's).
fn monitored() -> std::collections::BTreeSet<String> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/monitoring");
    let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).unwrap();
    let rules: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(&read("prometheusrule.yaml")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&read("dashboard.json")).unwrap();
    let mut exprs: Vec<String> = rules["spec"]["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap())
        .map(|r| r["expr"].as_str().unwrap().to_string())
        .collect();
    for p in dashboard["panels"].as_array().unwrap() {
        for t in p["targets"].as_array().unwrap() {
            exprs.push(t["expr"].as_str().unwrap().to_string());
        }
    }
    exprs
        .iter()
        .flat_map(|e| e.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':')))
        .filter(|t| {
            ["redis_", "podkeeper_", "controller_runtime_"]
                .iter()
                .any(|p| t.starts_with(p))
        })
        .map(String::from)
        .collect()
}

#[tokio::test]
// Held for the whole test: the other tests' operator "kills" would start a
// fresh process with fresh counts.
#[allow(clippy::await_holding_lock)]
async fn the_operator_serves_every_members_state_and_counts_a_failover_under_writes() {
    let _undisturbed = hold_deployed_operator();
    let env = TestEnv::new("kind-metrics").await;
    let s = session(&env).await;
    let name = "watched";
    // A memory limit of 256 MiB: maxmemory is 75 % of it.
    s.create_redis_spec(
        name,
        json!({"replicas": 3, "port": 6379, "image": REDIS_IMAGE,
               "resources": {"limits": {"memory": "256Mi"}}}),
    )
    .await
    .unwrap();
    s.settled(name, 3, TIMEOUT).await.unwrap();
    let host = s.cluster_ip(name).await.unwrap();
    s.start_writer(&host, 6379, 1).await.unwrap();
    s.writes_accepted(200).await.unwrap();
    let watch = InvariantWatch::start(&s, name);
    let ns = env.namespace.as_str();
    let of = [("namespace", ns), ("redis", name)];
    let leader = wait_for("a leader", TIMEOUT, || async { leader_pod() }).await;

    // Every member, as the leader's observer last heard it.
    let text = wait_for("the three members in the metrics", TIMEOUT, || async {
        let text = scrape(&leader);
        let up = samples(&text, "redis_up", &of);
        let linked = samples(&text, "redis_master_link_up", &of);
        (up == [1.0; 3]
            && samples(
                &text,
                "redis_instance_info",
                &[of[0], of[1], ("role", "master")],
            )
            .len()
                == 1
            && samples(
                &text,
                "redis_instance_info",
                &[of[0], of[1], ("role", "slave")],
            )
            .len()
                == 2
            && linked == [1.0; 2]
            && samples(&text, "podkeeper_redis_replica_lag_bytes", &of).len() == 2
            && one(&text, "podkeeper_redis_writable_primary", &of) == Some(1.0))
        .then_some(text)
    })
    .await;
    assert_eq!(
        samples(&text, "redis_memory_max_bytes", &of),
        [(256u64 << 20) as f64 * 0.75; 3],
        "{text}"
    );
    for metric in [
        "redis_memory_used_bytes",
        "redis_connected_clients",
        "redis_commands_processed_total",
        "redis_db_keys",
    ] {
        let values = samples(&text, metric, &of);
        assert!(
            values.len() == 3 && values.iter().all(|v| *v > 0.0),
            "{metric}: {values:?}\n{text}"
        );
    }
    // A new Redis's first primary is no failover.
    assert_eq!(
        samples(&text, "podkeeper_redis_failovers_total", &of),
        Vec::<f64>::new()
    );

    // The primary's Pod deleted: it answers while it terminates, so it is
    // handed over (a switchover), unless it goes before the handover ends
    // (then the promotion that follows is a failover, cause
    // `primary_gone`). Either way one change, counted and timed.
    let count = |text: &str, name: &str| samples(text, name, &of).iter().sum::<f64>();
    fail_over(&env, name).await;
    let text = wait_for("the deleted primary in the metrics", TIMEOUT, || async {
        let text = scrape(&leader);
        (count(&text, "podkeeper_redis_switchover_duration_seconds_count")
            + count(&text, "podkeeper_redis_failover_duration_seconds_count")
            == 1.0
            && one(&text, "podkeeper_redis_writable_primary", &of) == Some(1.0))
        .then_some(text)
    })
    .await;
    let failovers = count(&text, "podkeeper_redis_failovers_total");
    let timed = count(&text, "podkeeper_redis_failover_duration_seconds_count");
    s.settled(name, 3, TIMEOUT).await.unwrap();
    s.writes_accepted(100).await.unwrap();

    // The new primary's redis-server killed: a failover, counted by cause
    // and timed.
    let redises: Api<Redis> = env.api();
    let primary = redises
        .get(name)
        .await
        .unwrap()
        .primary_pod()
        .unwrap()
        .to_string();
    s.kill_9(&primary).await.unwrap();
    let text = wait_for("the failover in the metrics", TIMEOUT, || async {
        let text = scrape(&leader);
        (count(&text, "podkeeper_redis_failovers_total") == failovers + 1.0
            && count(&text, "podkeeper_redis_failover_duration_seconds_count") == timed + 1.0
            && one(&text, "podkeeper_redis_writable_primary", &of) == Some(1.0))
        .then_some(text)
    })
    .await;
    // Every metric the alerts and the dashboard read is served.
    for metric in monitored() {
        assert!(
            text.lines().any(|l| l
                .strip_prefix(metric.as_str())
                .is_some_and(|r| r.starts_with(['{', ' ']))),
            "{metric}, read by manifests/monitoring/, is not served:\n{text}"
        );
    }
    let took = one(&text, "podkeeper_redis_failover_duration_seconds_sum", &of).unwrap();
    let without = one(
        &text,
        "podkeeper_redis_no_writable_primary_seconds_total",
        &of,
    )
    .unwrap();
    eprintln!(
        "failover: {took:.2} s without a writable primary (all told {without:.2} s); causes: {:?}",
        text.lines()
            .filter(|l| l.starts_with("podkeeper_redis_failovers_total{") && l.contains(ns))
            .collect::<Vec<_>>()
    );
    assert!(took > 0.0 && without >= took, "{took} {without}");

    let w = bench::wind_up(&s, &host, watch).await.unwrap();
    eprintln!("{w:?}");
    assert_nothing_lost(&w);

    // With the writes over, every member's key count in the metrics is
    // what the primary holds.
    let primary = redises
        .get(name)
        .await
        .unwrap()
        .primary_pod()
        .unwrap()
        .to_string();
    let keys: f64 = s
        .redis_cli(&primary, 6379, "dbsize")
        .unwrap()
        .parse()
        .unwrap();
    assert!(keys >= w.acknowledged as f64, "{keys} keys");
    wait_for("every member's keys in the metrics", TIMEOUT, || async {
        let text = scrape(&leader);
        let counts = samples(&text, "redis_db_keys", &[of[0], of[1], ("db", "db0")]);
        (counts == [keys; 3] && samples(&text, "redis_up", &of) == [1.0; 3]).then_some(())
    })
    .await;
}
