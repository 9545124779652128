//! Redis with `spec.storage` against the real control plane: a claim per
//! member, bound by the PersistentVolume controller (locally: PersistentVolumes
//! made here, of a StorageClass without a provisioner; on kind: the
//! cluster's default class and its provisioner), kept across Pod
//! replacements, rollouts and scale-downs, deleted or kept by the
//! retention policy in the finalizer's order, adopted by a Redis of the
//! same name; and the admission rules on `spec.storage`.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent};
use kube::{Api, ResourceExt};
use podkeeper::api::Redis;
use serde_json::json;

use crate::harness::{
    PodDelays, TestEnv, current_rv, image, real_containers, wait_for, watch_from,
};
use crate::redis::{converged, live_pods, scale};

const TIMEOUT: Duration = Duration::from_secs(120);
const CLAIM_LABEL: &str = "podkeeper.dev/claim";

/// The StorageClass the test's claims ask for: locally one without a
/// provisioner, with `count` PersistentVolumes of it for the PersistentVolume
/// controller to bind (named after the namespace, removed with
/// [`Volumes::remove`]); on kind none (the cluster's default class and its
/// provisioner).
pub(crate) struct Volumes {
    pub(crate) class: Option<String>,
}

impl Volumes {
    pub(crate) async fn make(env: &TestEnv, count: usize) -> Volumes {
        Volumes::of_class(env, count, false).await
    }

    /// The same with a class that allows volume expansion (on kind: one of
    /// the local-path provisioner's, which says so).
    pub(crate) async fn expanding(env: &TestEnv, count: usize) -> Volumes {
        Volumes::of_class(env, count, true).await
    }

    async fn of_class(env: &TestEnv, count: usize, expansion: bool) -> Volumes {
        if real_containers() && !expansion {
            return Volumes { class: None };
        }
        let class = env.namespace.clone();
        let classes: Api<StorageClass> = Api::all(env.client.clone());
        let (provisioner, binding) = if real_containers() {
            ("rancher.io/local-path", "WaitForFirstConsumer")
        } else {
            ("kubernetes.io/no-provisioner", "Immediate")
        };
        let sc: StorageClass = serde_json::from_value(json!({
            "metadata": {"name": class},
            "provisioner": provisioner,
            "volumeBindingMode": binding,
            "allowVolumeExpansion": expansion,
        }))
        .unwrap();
        classes.create(&PostParams::default(), &sc).await.unwrap();
        if real_containers() {
            return Volumes { class: Some(class) };
        }
        let pvs: Api<PersistentVolume> = Api::all(env.client.clone());
        for i in 0..count {
            let pv: PersistentVolume = serde_json::from_value(json!({
                "metadata": {"name": format!("{class}-{i}"), "labels": {"test": class}},
                "spec": {
                    "capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": class,
                    "persistentVolumeReclaimPolicy": "Retain",
                    "hostPath": {"path": format!("/tmp/{class}-{i}"), "type": "DirectoryOrCreate"},
                }
            }))
            .unwrap();
            pvs.create(&PostParams::default(), &pv).await.unwrap();
        }
        Volumes { class: Some(class) }
    }

    pub(crate) async fn remove(&self, env: &TestEnv) {
        let Some(class) = &self.class else { return };
        let pvs: Api<PersistentVolume> = Api::all(env.client.clone());
        let _ = pvs
            .delete_collection(
                &DeleteParams::default(),
                &ListParams::default().labels(&format!("test={class}")),
            )
            .await;
        let classes: Api<StorageClass> = Api::all(env.client.clone());
        let _ = classes.delete(class, &DeleteParams::default()).await;
    }
}

pub(crate) fn stored(name: &str, replicas: i32, class: Option<&str>, retention: &str) -> Redis {
    let mut storage = json!({
        "size": "100Mi",
        "retention": {"whenScaled": retention, "whenDeleted": retention},
    });
    if let Some(c) = class {
        storage["storageClassName"] = json!(c);
    }
    serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "image": image("redis:7.4.2"), "storage": storage},
    }))
    .unwrap()
}

/// The claims in the namespace: name to the uids of their owners.
pub(crate) async fn claims(env: &TestEnv) -> BTreeMap<String, Vec<String>> {
    let api: Api<PersistentVolumeClaim> = env.api();
    api.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|c| c.metadata.deletion_timestamp.is_none())
        .map(|c| {
            let owners = c.owner_references().iter().map(|r| r.uid.clone()).collect();
            (c.name_any(), owners)
        })
        .collect()
}

/// Each live Pod's claim, from its label, checked against the volume it
/// mounts.
pub(crate) fn claims_of(pods: &[Pod]) -> BTreeMap<String, String> {
    pods.iter()
        .map(|p| {
            let claim = p.labels().get(CLAIM_LABEL).cloned().expect("a claim label");
            let mounted = p
                .spec
                .as_ref()
                .and_then(|s| s.volumes.as_ref())
                .and_then(|v| v.iter().find(|v| v.name == "data"))
                .and_then(|v| v.persistent_volume_claim.as_ref())
                .map(|c| c.claim_name.clone());
            assert_eq!(mounted.as_deref(), Some(claim.as_str()), "{}", p.name_any());
            (p.name_any(), claim)
        })
        .collect()
}

/// Runs `change`, then follows every Pod event until the Redis `name` has
/// converged to `n` members, asserting at each that no two Pods that have
/// not finished (terminating ones included) are on the same claim: two
/// redis-server processes never share a data directory.
async fn never_sharing_a_claim(
    env: &TestEnv,
    name: &str,
    n: usize,
    change: impl Future<Output = ()>,
) {
    let pods: Api<Pod> = env.api();
    let rv = current_rv(&pods).await;
    let mut stream = watch_from(&pods, &rv).await;
    let mut state: BTreeMap<String, Pod> = pods
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| (p.name_any(), p))
        .collect();
    change.await;
    let settled = async {
        converged(env, name, n).await;
    };
    tokio::pin!(settled);
    loop {
        tokio::select! {
            _ = &mut settled => break,
            ev = stream.try_next() => {
                match ev.expect("watch").expect("watch open") {
                    WatchEvent::Added(p) | WatchEvent::Modified(p) => {
                        state.insert(p.name_any(), p);
                    }
                    WatchEvent::Deleted(p) => {
                        state.remove(&p.name_any());
                    }
                    _ => continue,
                }
                let mut holders: BTreeMap<String, Vec<String>> = BTreeMap::new();
                for p in state.values() {
                    let finished = matches!(
                        p.status.as_ref().and_then(|s| s.phase.as_deref()),
                        Some("Succeeded" | "Failed")
                    );
                    if let Some(c) = p.labels().get(CLAIM_LABEL).filter(|_| !finished) {
                        holders.entry(c.clone()).or_default().push(p.name_any());
                    }
                }
                for (claim, pods) in holders {
                    assert!(pods.len() <= 1, "{claim} held by {pods:?} at once");
                }
            }
        }
    }
}

#[tokio::test]
async fn members_keep_their_claims_across_deletion_rollout_and_scaling_and_a_kept_claim_comes_back()
{
    let env = TestEnv::new("storage-keep").await;
    let volumes = Volumes::make(&env, 3).await;
    let mut op = env.start_operator();
    let api: Api<Redis> = env.api();
    api.create(
        &PostParams::default(),
        &stored("keep", 3, volumes.class.as_deref(), "Retain"),
    )
    .await
    .unwrap();
    let (r, pods) = converged(&env, "keep", 3).await;
    let uid = r.uid().unwrap();
    let first = claims(&env).await;
    assert_eq!(first.len(), 3, "one claim per member: {first:?}");
    for owners in first.values() {
        assert_eq!(owners, std::slice::from_ref(&uid), "owned by the Redis");
    }
    let on: BTreeSet<String> = claims_of(&pods).into_values().collect();
    assert_eq!(
        on,
        first.keys().cloned().collect(),
        "each member on its own claim"
    );
    let args = pods[0].spec.as_ref().unwrap().containers[0]
        .args
        .clone()
        .unwrap();
    assert!(
        args.windows(2).any(|w| w == ["--appendonly", "yes"])
            && args.windows(2).any(|w| w == ["--appendfsync", "everysec"]),
        "persistence on: {args:?}"
    );

    // A deleted member comes back on its own claim.
    let victim = &pods[0];
    let victim_claim = victim.labels()[CLAIM_LABEL].clone();
    let pod_api: Api<Pod> = env.api();
    never_sharing_a_claim(&env, "keep", 3, async {
        pod_api
            .delete(&victim.name_any(), &DeleteParams::default())
            .await
            .unwrap();
    })
    .await;
    let pods = live_pods(&env, &uid).await;
    let now = claims_of(&pods);
    assert!(!now.contains_key(&victim.name_any()), "replaced");
    assert!(
        now.values().any(|c| *c == victim_claim),
        "the replacement took {victim_claim}"
    );
    assert_eq!(claims(&env).await, first, "no claim made or lost");

    // A rollout replaces each member on its own claim.
    never_sharing_a_claim(&env, "keep", 3, async {
        api.patch(
            "keep",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"config": {"maxmemory-policy": "allkeys-lru"}}})),
        )
        .await
        .unwrap();
    })
    .await;
    let pods = live_pods(&env, &uid).await;
    assert!(
        pods.iter().all(|p| !now.contains_key(&p.name_any())),
        "every member replaced"
    );
    let on: BTreeSet<String> = claims_of(&pods).into_values().collect();
    assert_eq!(on, first.keys().cloned().collect(), "on the same claims");
    assert_eq!(claims(&env).await, first);

    // Scaled down, the claims stay (whenScaled: Retain); scaled up, they
    // are taken back.
    never_sharing_a_claim(&env, "keep", 1, scale(&env, "keep", 1)).await;
    assert_eq!(claims(&env).await, first, "kept on scale-down");
    never_sharing_a_claim(&env, "keep", 3, scale(&env, "keep", 3)).await;
    assert_eq!(claims(&env).await, first, "taken back on scale-up");

    // Deleted with whenDeleted: Retain, the claims stay, without an owner;
    // a Redis of the same name takes them back.
    api.delete("keep", &DeleteParams::default()).await.unwrap();
    wait_for("the Redis gone", TIMEOUT, || async {
        api.get_opt("keep").await.ok()?.is_none().then_some(())
    })
    .await;
    let kept = claims(&env).await;
    assert_eq!(
        kept.keys().collect::<Vec<_>>(),
        first.keys().collect::<Vec<_>>()
    );
    assert!(kept.values().all(Vec::is_empty), "let go: {kept:?}");
    api.create(
        &PostParams::default(),
        &stored("keep", 2, volumes.class.as_deref(), "Retain"),
    )
    .await
    .unwrap();
    let (r, pods) = converged(&env, "keep", 2).await;
    let adopted = claims(&env).await;
    assert_eq!(adopted.len(), 3, "no new claim: {adopted:?}");
    assert!(
        adopted.values().all(|o| o == &[r.uid().unwrap()]),
        "adopted: {adopted:?}"
    );
    let on: BTreeSet<String> = claims_of(&pods).into_values().collect();
    assert!(on.is_subset(&first.keys().cloned().collect()));
    crate::redis::events_with_reasons(&env, &["KeptClaims", "AdoptedClaims"]).await;
    op.assert_running();
    drop(op);
    volumes.remove(&env).await;
}

#[tokio::test]
async fn with_retention_delete_claims_go_on_scale_down_and_after_every_pod_on_deletion() {
    let env = TestEnv::new("storage-delete").await;
    let volumes = Volumes::make(&env, 3).await;
    let mut op = env.start_operator();
    let api: Api<Redis> = env.api();
    api.create(
        &PostParams::default(),
        &stored("drop", 3, volumes.class.as_deref(), "Delete"),
    )
    .await
    .unwrap();
    let (r, _) = converged(&env, "drop", 3).await;
    let uid = r.uid().unwrap();
    assert_eq!(claims(&env).await.len(), 3);

    scale(&env, "drop", 1).await;
    let (_, pods) = converged(&env, "drop", 1).await;
    let held: BTreeSet<String> = claims_of(&pods).into_values().collect();
    let claims_api: Api<PersistentVolumeClaim> = env.api();
    let left = wait_for("the two free claims deleted", TIMEOUT, || async {
        let c = claims(&env).await;
        // Gone, not only deleting: their last events precede the watch below.
        let all = claims_api.list(&ListParams::default()).await.ok()?.items;
        (c.len() == 1 && all.len() == 1).then_some(c)
    })
    .await;
    assert_eq!(
        left.keys().cloned().collect::<BTreeSet<_>>(),
        held,
        "the held claim stays"
    );

    // Growing the claims on a class that does not allow expansion (both
    // here: the test's class and kind's local-path): refused by the API
    // server, said in an Event and the status, the claim unchanged.
    api.patch(
        "drop",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"storage": {"size": "200Mi"}}})),
    )
    .await
    .unwrap();
    crate::redis::events_with_reasons(&env, &["ClaimNotExpandable"]).await;
    let failed = wait_for("ReplicaFailure ClaimNotExpandable", TIMEOUT, || async {
        let r = api.get("drop").await.ok()?;
        let c = r
            .status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "ReplicaFailure" && c.status == "True")?;
        (c.reason == "ClaimNotExpandable").then_some(c.message)
    })
    .await;
    assert!(failed.contains(held.iter().next().unwrap()), "{failed}");
    let still: PersistentVolumeClaim = claims_api.get(held.iter().next().unwrap()).await.unwrap();
    let asked = still.spec.unwrap().resources.unwrap().requests.unwrap()["storage"]
        .0
        .clone();
    assert_eq!(asked, "100Mi", "the claim unchanged");

    // Deletion: every Pod goes before any claim.
    let pods_api: Api<Pod> = env.api();
    let rv = current_rv(&pods_api).await;
    let mut pod_stream = watch_from(&pods_api, &rv).await;
    let mut claim_stream = watch_from(&claims_api, &rv).await;
    api.delete("drop", &DeleteParams::default()).await.unwrap();
    let first_claim_deleting: u64 = loop {
        let ev = tokio::time::timeout(TIMEOUT, claim_stream.try_next())
            .await
            .expect("a claim deleted in time")
            .unwrap()
            .unwrap();
        match ev {
            WatchEvent::Modified(c) | WatchEvent::Deleted(c)
                if c.metadata.deletion_timestamp.is_some() =>
            {
                break c.resource_version().unwrap().parse().unwrap();
            }
            _ => continue,
        }
    };
    let mut last_pod_gone = 0u64;
    while let Ok(Ok(Some(ev))) =
        tokio::time::timeout(Duration::from_millis(500), pod_stream.try_next()).await
    {
        if let WatchEvent::Deleted(p) = ev
            && crate::harness::owned_by(&p, &uid)
        {
            last_pod_gone = last_pod_gone.max(p.resource_version().unwrap().parse().unwrap());
        }
    }
    assert!(last_pod_gone > 0, "the Pod was deleted");
    assert!(
        last_pod_gone < first_claim_deleting,
        "the Pod was gone (rv {last_pod_gone}) before a claim was deleted (rv {first_claim_deleting})"
    );
    wait_for("every claim gone", TIMEOUT, || async {
        claims(&env).await.is_empty().then_some(())
    })
    .await;
    op.assert_running();
    drop(op);
    volumes.remove(&env).await;
}

/// Raising `size` on a class that allows expansion patches every claim in
/// place (same claim, same Pods); the volume's resize is the storage
/// driver's (none here finishes one: the claims' `status.capacity` stays).
#[tokio::test]
async fn raising_the_size_grows_every_claim_in_place_where_the_class_allows_it() {
    let env = TestEnv::new("storage-grow").await;
    let volumes = Volumes::expanding(&env, 2).await;
    let mut op = env.start_operator();
    let api: Api<Redis> = env.api();
    api.create(
        &PostParams::default(),
        &stored("grow", 2, volumes.class.as_deref(), "Retain"),
    )
    .await
    .unwrap();
    let (_, pods) = converged(&env, "grow", 2).await;
    let claims_api: Api<PersistentVolumeClaim> = env.api();
    let uids = |list: Vec<PersistentVolumeClaim>| -> BTreeMap<String, String> {
        list.into_iter()
            .map(|c| (c.name_any(), c.uid().unwrap()))
            .collect()
    };
    let before = uids(claims_api.list(&ListParams::default()).await.unwrap().items);
    assert_eq!(before.len(), 2);

    api.patch(
        "grow",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"storage": {"size": "200Mi"}}})),
    )
    .await
    .unwrap();
    let grown = wait_for("every claim asking for 200Mi", TIMEOUT, || async {
        let list = claims_api.list(&ListParams::default()).await.ok()?.items;
        list.iter()
            .all(|c| {
                c.spec
                    .as_ref()
                    .and_then(|s| s.resources.as_ref())
                    .and_then(|r| r.requests.as_ref())
                    .is_some_and(|r| r["storage"].0 == "200Mi")
            })
            .then_some(list)
    })
    .await;
    assert_eq!(uids(grown), before, "the same claims, grown in place");
    crate::redis::events_with_reasons(&env, &["ExpandingClaim"]).await;
    let (r, after) = converged(&env, "grow", 2).await;
    let names = |p: &[Pod]| p.iter().map(|p| p.uid().unwrap()).collect::<BTreeSet<_>>();
    assert_eq!(names(&after), names(&pods), "no member replaced");
    let failure = r
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "ReplicaFailure" && c.status == "True");
    assert_eq!(failure, None);
    op.assert_running();
    drop(op);
    volumes.remove(&env).await;
}

#[tokio::test]
async fn storage_that_would_lose_data_or_cannot_work_is_refused_at_admission() {
    let env = TestEnv::new("storage-admission").await;
    let api: Api<Redis> = env.api();
    api.create(
        &PostParams::default(),
        &stored("adm", 0, Some("fast"), "Retain"),
    )
    .await
    .unwrap();
    let refused = |patch: serde_json::Value| {
        let api = api.clone();
        async move {
            match api
                .patch("adm", &PatchParams::default(), &Patch::Merge(patch))
                .await
            {
                Err(kube::Error::Api(s)) => s.message,
                Ok(_) => panic!("admitted"),
                Err(e) => panic!("{e}"),
            }
        }
    };
    let m = refused(json!({"spec": {"storage": {"size": "50Mi"}}})).await;
    assert!(m.contains("cannot shrink"), "{m}");
    let m = refused(json!({"spec": {"storage": {"storageClassName": "slow"}}})).await;
    assert!(m.contains("storageClassName cannot change"), "{m}");
    let m = refused(json!({"spec": {"storage": null}})).await;
    assert!(m.contains("spec.storage cannot be removed"), "{m}");
    let m = refused(json!({"spec": {"storage": {"size": "lots"}}})).await;
    assert!(m.contains("must be a quantity"), "{m}");
    // Growing is fine.
    api.patch(
        "adm",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"storage": {"size": "1Gi"}}})),
    )
    .await
    .unwrap();
    let bad: Result<Redis, _> = serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
        "metadata": {"name": "tiny"},
        "spec": {"storage": {"size": "1Ki"}},
    }));
    match api.create(&PostParams::default(), &bad.unwrap()).await {
        Err(kube::Error::Api(s)) => assert!(s.message.contains("at least 1Mi"), "{}", s.message),
        other => panic!("admitted: {other:?}"),
    }
}

/// Evicts `pod` through the eviction API, once (what `kubectl drain` does
/// each time it tries; kube's client would retry a refusal): `Ok` when
/// evicted, `Err` with the refusal otherwise.
fn evict(env: &TestEnv, pod: &str) -> Result<(), String> {
    let body = tempfile::NamedTempFile::new().unwrap();
    let eviction = json!({
        "apiVersion": "policy/v1", "kind": "Eviction",
        "metadata": {"name": pod, "namespace": env.namespace},
    });
    std::fs::write(body.path(), eviction.to_string()).unwrap();
    let path = format!("/api/v1/namespaces/{}/pods/{pod}/eviction", env.namespace);
    let file = body.path().to_string_lossy().to_string();
    let (ok, _, err) = env.kubectl(&["create", "--raw", &path, "-f", &file]);
    if ok { Ok(()) } else { Err(err) }
}

#[tokio::test]
async fn a_disruption_budget_lets_one_member_go_at_a_time_and_the_primary_budget_follows_the_size()
{
    use k8s_openapi::api::policy::v1::PodDisruptionBudget;
    let env = TestEnv::new("storage-budget").await;
    let mut op = env.start_operator();
    crate::redis::create(&env, "pace", 3).await;
    let (_, pods) = converged(&env, "pace", 3).await;
    let budgets: Api<PodDisruptionBudget> = env.api();
    let min_available = |b: &PodDisruptionBudget| {
        serde_json::to_value(&b.spec.as_ref().unwrap().min_available).unwrap()
    };
    let both = wait_for(
        "both budgets, counted by the disruption controller",
        TIMEOUT,
        || async {
            let b = budgets.list(&ListParams::default()).await.ok()?.items;
            let all = b.iter().find(|b| b.name_any() == "pace")?;
            let counted = all.status.as_ref()?.expected_pods == Some(3)
                && all.status.as_ref()?.disruptions_allowed == Some(1);
            (b.len() == 2 && counted).then_some(b)
        },
    )
    .await;
    for b in &both {
        match b.name_any().as_str() {
            // kwok runs no redis-server: no primary, every member a replica.
            "pace" => assert_eq!(min_available(b), json!(2)),
            "pace-primary" => assert_eq!(min_available(b), json!(1)),
            other => panic!("unexpected budget {other}"),
        }
    }
    // A drain takes one member; the next eviction is refused until its
    // successor is Ready (kwok makes new Pods Ready only after 8 s here).
    env.set_pod_delays(PodDelays {
        ready: (Duration::from_secs(8), Duration::from_secs(8)),
        delete: (Duration::ZERO, Duration::ZERO),
    })
    .await;
    assert_eq!(evict(&env, &pods[0].name_any()), Ok(()));
    let refused = evict(&env, &pods[1].name_any()).expect_err("a second member at once");
    assert!(refused.contains("disruption budget"), "{refused}");
    converged(&env, "pace", 3).await;
    wait_for("the budget to allow one again", TIMEOUT, || async {
        let b = budgets.get("pace").await.ok()?;
        (b.status?.disruptions_allowed == Some(1)).then_some(())
    })
    .await;
    assert_eq!(evict(&env, &pods[1].name_any()), Ok(()));

    // One member has no one to hand over to: no primary budget.
    scale(&env, "pace", 1).await;
    converged(&env, "pace", 1).await;
    wait_for("the primary's budget gone", TIMEOUT, || async {
        budgets
            .get_opt("pace-primary")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    // A budget deleted by hand comes back.
    budgets
        .delete("pace", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the budget back", TIMEOUT, || async {
        budgets.get_opt("pace").await.ok()?.map(|_| ())
    })
    .await;
    op.assert_running();
}
