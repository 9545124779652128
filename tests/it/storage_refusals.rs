//! Redis with `spec.storage` when the API server says no, then yes: claims
//! refused by a ResourceQuota, budgets refused by a webhook that is down
//! (500), and claims that may be neither deleted nor let go at the Redis's
//! deletion. Each is said in a Warning Event (and the status while the
//! Redis lives), nothing else suffers, and each recovers with no other
//! change.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use kube::api::{DeleteParams, ListParams, PostParams};
use kube::{Api, ResourceExt};
use podkeeper::api::Redis;

use crate::harness::{TestEnv, wait_for};
use crate::redis::{converged, events_with_reasons, live_pods, notes};
use crate::storage::{Volumes, claims, claims_of, stored};
use crate::transients::{DownWebhook, Policy};

const TIMEOUT: Duration = Duration::from_secs(120);

/// The Redis's `ReplicaFailure` condition, when it is `True`: reason and
/// message.
fn failing(r: &Redis) -> Option<(String, String)> {
    r.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "ReplicaFailure" && c.status == "True")
        .map(|c| (c.reason.clone(), c.message.clone()))
}

async fn budgets(env: &TestEnv) -> BTreeSet<String> {
    let api: Api<PodDisruptionBudget> = env.api();
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|b| b.name_any())
        .collect()
}

#[tokio::test]
async fn claims_refused_by_a_quota_and_budgets_by_a_webhook_that_is_down_come_once_the_cause_goes()
{
    let env = TestEnv::new("storage-refused").await;
    let volumes = Volumes::make(&env, 3).await;
    let mut op = env.start_operator();
    env.cap("persistentvolumeclaims", 1).await;
    let webhook = DownWebhook::on_group(&env, "policy", "poddisruptionbudgets", "CREATE").await;

    let api: Api<Redis> = env.api();
    api.create(
        &PostParams::default(),
        &stored("capped", 3, volumes.class.as_deref(), "Retain"),
    )
    .await
    .unwrap();
    // One member, on the one claim the quota allows, serving; the other
    // two neither made without a claim nor given one another holds.
    let r = wait_for(
        "one Ready member and a refusal in the status",
        TIMEOUT,
        || async {
            let r = api.get("capped").await.ok()?;
            let ready = r.status.as_ref()?.ready_replicas == 1;
            (ready && failing(&r).is_some()).then_some(r)
        },
    )
    .await;
    events_with_reasons(&env, &["FailedCreateClaim", "FailedDisruptionBudget"]).await;
    let refused = notes(&env, "FailedCreateClaim").await;
    assert!(
        refused.iter().any(|n| n.contains("quota")),
        "the Event names the quota: {refused:?}"
    );
    let down = notes(&env, "FailedDisruptionBudget").await;
    assert!(
        down.iter().any(|n| n.contains("capped")),
        "the Event names the budget: {down:?}"
    );
    let (reason, message) = failing(&r).unwrap();
    assert!(
        ["FailedCreateClaim", "FailedDisruptionBudget"].contains(&reason.as_str()),
        "{reason}: {message}"
    );
    let pods = live_pods(&env, &r.uid().unwrap()).await;
    assert_eq!(pods.len(), 1, "only the member with a claim was made");
    let held: BTreeSet<String> = claims_of(&pods).into_values().collect();
    let made: BTreeSet<String> = claims(&env).await.into_keys().collect();
    assert_eq!(held, made, "the one claim is the member's");
    assert!(budgets(&env).await.is_empty());

    // The quota lifted and the webhook back are the only changes.
    env.uncap("persistentvolumeclaims").await;
    webhook.remove().await;
    let (_, pods) = converged(&env, "capped", 3).await;
    let held = claims_of(&pods);
    let distinct: BTreeSet<&String> = held.values().collect();
    assert_eq!(distinct.len(), 3, "a claim each: {held:?}");
    assert_eq!(claims(&env).await.len(), 3, "no claim beyond the members'");
    let want: BTreeSet<String> = ["capped".to_string(), "capped-primary".to_string()].into();
    wait_for("both budgets", TIMEOUT, || async {
        (budgets(&env).await == want).then_some(())
    })
    .await;
    wait_for("the refusal cleared from the status", TIMEOUT, || async {
        let r = api.get("capped").await.ok()?;
        failing(&r).is_none().then_some(())
    })
    .await;
    op.assert_running();
    drop(op);
    volumes.remove(&env).await;
}

#[tokio::test]
async fn claims_the_api_server_will_not_delete_or_let_go_hold_the_redis_until_it_will() {
    let env = TestEnv::new("storage-held").await;
    let volumes = Volumes::make(&env, 4).await;
    let mut op = env.start_operator();
    let api: Api<Redis> = env.api();
    let class = volumes.class.as_deref();
    for (name, retention) in [("dropped", "Delete"), ("kept", "Retain")] {
        api.create(&PostParams::default(), &stored(name, 2, class, retention))
            .await
            .unwrap();
    }
    let (dropped, _) = converged(&env, "dropped", 2).await;
    let (kept, _) = converged(&env, "kept", 2).await;
    let all = claims(&env).await;
    let of = |uid: String| -> BTreeSet<String> {
        all.iter()
            .filter(|(_, owners)| owners.contains(&uid))
            .map(|(name, _)| name.clone())
            .collect()
    };
    let dropped_claims = of(dropped.uid().unwrap());
    let kept_claims = of(kept.uid().unwrap());
    assert_eq!((dropped_claims.len(), kept_claims.len()), (2, 2));

    let policy = Policy::refuse_on(
        &env,
        "persistentvolumeclaims",
        &["DELETE", "UPDATE"],
        "false",
        "test policy refuses claim deletes and updates",
    )
    .await;
    let claims_api: Api<PersistentVolumeClaim> = env.api();
    let probe = kept_claims.iter().next().unwrap().clone();
    wait_for("the policy to refuse claim deletes", TIMEOUT, || async {
        let dry = DeleteParams::default().dry_run();
        match claims_api.delete(&probe, &dry).await {
            Err(kube::Error::Api(s)) if s.message.contains("test policy") => Some(()),
            _ => None,
        }
    })
    .await;

    for name in ["dropped", "kept"] {
        api.delete(name, &DeleteParams::default()).await.unwrap();
    }
    events_with_reasons(&env, &["FailedDeleteClaim", "FailedReleaseClaim"]).await;
    for reason in ["FailedDeleteClaim", "FailedReleaseClaim"] {
        let n = notes(&env, reason).await;
        assert!(
            n.iter().any(|n| n.contains("test policy")),
            "{reason} says why: {n:?}"
        );
    }
    // Held: both Redis still there, every Pod gone first, every claim
    // still owned (nothing half done).
    for (r, owned) in [(&dropped, &dropped_claims), (&kept, &kept_claims)] {
        let uid = r.uid().unwrap();
        let name = r.name_any();
        wait_for(&format!("{name}'s Pods gone"), TIMEOUT, || async {
            live_pods(&env, &uid).await.is_empty().then_some(())
        })
        .await;
        let now = api.get(&name).await.expect("held by its finalizer");
        assert!(now.metadata.deletion_timestamp.is_some());
        let still = claims(&env).await;
        for c in owned {
            assert_eq!(still.get(c), Some(&vec![uid.clone()]), "{c} untouched");
        }
    }

    policy.remove().await;
    for name in ["dropped", "kept"] {
        wait_for(&format!("{name} gone"), TIMEOUT, || async {
            api.get_opt(name).await.ok()?.is_none().then_some(())
        })
        .await;
    }
    wait_for(
        "the Delete claims gone, the Retain ones kept",
        TIMEOUT,
        || async {
            let now = claims(&env).await;
            let names: BTreeSet<String> = now.keys().cloned().collect();
            (names == kept_claims && now.values().all(|owners| owners.is_empty())).then_some(())
        },
    )
    .await;
    op.assert_running();
    drop(op);
    volumes.remove(&env).await;
}
