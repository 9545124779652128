//! `spec.networkPolicy` on the local control plane: the NetworkPolicy
//! `<name>` a Redis gets (its clients, its members and the operator, on the
//! members' ports), changed with the spec and deleted with the field; and
//! one the API server refuses (an admission policy), reported until the
//! refusal ends. That the cluster enforces it is its network plugin's:
//! see docs/redis.md.

use std::time::Duration;

use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::api::{Patch, PatchParams, PostParams};
use podkeeper::api::Redis;
use serde_json::json;

use crate::harness::{TestEnv, wait_for};
use crate::redis_wiring::create;
use crate::transients::Policy;

const TIMEOUT: Duration = Duration::from_secs(90);

/// The policy's client selector (`app` label) and ports, once it exists.
fn shape(p: &NetworkPolicy) -> (Option<String>, Vec<i32>) {
    let rule = &p.spec.as_ref().unwrap().ingress.as_ref().unwrap()[0];
    let app = rule.from.as_ref().unwrap()[0]
        .pod_selector
        .as_ref()
        .and_then(|s| s.match_labels.as_ref())
        .and_then(|l| l.get("app").cloned());
    let ports = rule
        .ports
        .iter()
        .flatten()
        .filter_map(|p| match p.port {
            Some(IntOrString::Int(n)) => Some(n),
            _ => None,
        })
        .collect();
    (app, ports)
}

#[tokio::test]
async fn a_redis_gets_its_network_policy_changed_with_the_spec_and_deleted_with_the_field() {
    let env = TestEnv::new("redis-netpol").await;
    let mut op = env.start_operator();
    let r = create(
        &env,
        "cache",
        json!({"replicas": 1, "tls": {"plaintext": true},
               "networkPolicy": {"clients": {"matchLabels": {"app": "web"}}}}),
    )
    .await
    .unwrap();
    let policies = env.api::<NetworkPolicy>();
    let p = wait_for("the NetworkPolicy", TIMEOUT, || async {
        policies.get_opt("cache").await.ok().flatten()
    })
    .await;
    assert_eq!(shape(&p), (Some("web".into()), vec![6379, 6380]));
    assert!(
        p.owner_references()
            .iter()
            .any(|o| o.uid == r.uid().unwrap()),
        "goes with the Redis"
    );
    let from = &p.spec.as_ref().unwrap().ingress.as_ref().unwrap()[0]
        .from
        .clone()
        .unwrap();
    assert_eq!(from.len(), 3, "clients, members, operator: {from:?}");

    let redises = env.api::<Redis>();
    redises
        .patch(
            "cache",
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"networkPolicy": {"clients": {"matchLabels": {"app": "api"}}}}}),
            ),
        )
        .await
        .unwrap();
    wait_for("the policy changed", TIMEOUT, || async {
        let p = policies.get_opt("cache").await.ok().flatten()?;
        (shape(&p).0.as_deref() == Some("api")).then_some(())
    })
    .await;
    redises
        .patch(
            "cache",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"networkPolicy": null}})),
        )
        .await
        .unwrap();
    wait_for("the policy deleted", TIMEOUT, || async {
        matches!(policies.get_opt("cache").await, Ok(None)).then_some(())
    })
    .await;
    op.assert_running();
}

#[tokio::test]
async fn a_network_policy_the_api_server_refuses_is_reported_and_applied_once_it_is_not() {
    let env = TestEnv::new("redis-netpol-refused").await;
    let policy = Policy::refuse_in_group(
        &env,
        "networking.k8s.io",
        "networkpolicies",
        &["CREATE", "UPDATE"],
        "false",
        "no network policies here",
    )
    .await;
    // Once admission enforces it (a dry-run create is refused).
    let probe: NetworkPolicy = serde_json::from_value(json!({
        "metadata": {"name": "probe"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"]},
    }))
    .unwrap();
    let policies = env.api::<NetworkPolicy>();
    let dry = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    wait_for("NetworkPolicy creates refused", TIMEOUT, || async {
        let r = policies.create(&dry, &probe).await;
        matches!(r, Err(kube::Error::Api(e)) if e.message.contains("no network policies"))
            .then_some(())
    })
    .await;
    let mut op = env.start_operator();
    create(
        &env,
        "refused",
        json!({"replicas": 1, "networkPolicy": {"clients": {}}}),
    )
    .await
    .unwrap();
    let redises = env.api::<Redis>();
    let message = wait_for("FailedNetworkPolicy", TIMEOUT, || async {
        let r = redises.get("refused").await.ok()?;
        let c = r
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "ReplicaFailure")?;
        (c.reason == "FailedNetworkPolicy").then_some(c.message)
    })
    .await;
    assert!(message.contains("no network policies here"), "{message}");
    policy.remove().await;
    wait_for("the policy applied", TIMEOUT, || async {
        policies.get_opt("refused").await.ok().flatten()
    })
    .await;
    wait_for("the failure cleared", TIMEOUT, || async {
        let r = redises.get("refused").await.ok()?;
        let c = r
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "ReplicaFailure")?;
        (c.reason != "FailedNetworkPolicy").then_some(())
    })
    .await;
    op.assert_running();
}
