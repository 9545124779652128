//! Reliability: seeded chaos (with and without operator kills), an
//! apiserver restart, and concurrent user edits, each ending in the same
//! invariant:
//!
//! - every object has exactly its replicas, all Ready, all on its current
//!   image and one template, and its status says so for its generation;
//! - every Pod in the namespace belongs to a live object (no orphans, no
//!   leftovers of deleted objects, no duplicates);
//! - the operator never panicked, and (unless the test killed it) never
//!   exited.
//!
//! Chaos runs for `PODKEEPER_CHAOS_SECONDS` (default 45) with the seed from
//! `PODKEEPER_CHAOS_SEED` (default random); the seed is printed, and is in
//! every failure message, so a failure can be replayed. `just soak` runs it
//! longer.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use podkeeper::api::{Application, Redis};
use rand::rngs::StdRng;
use rand::{RngExt, SeedableRng};
use serde_json::{Value, json};

use crate::bounds::Recorder;
use crate::harness::{Operator, PodDelays, TestEnv, is_ready};
use crate::harness::{image, real_containers};
use crate::leader::{campaigning, election, leader_of, refs};

const REDIS_IMAGES: [&str; 3] = ["redis:7.4.2", "redis:7.4.1", "redis:7.2.5"];
const APP_IMAGES: [&str; 3] = ["nginx:1.26", "nginx:1.27", "nginx:1.25"];
const QUIET_TIMEOUT: Duration = Duration::from_secs(180);
/// Chaos Pods take a while to become Ready and to go, as with a kubelet, so
/// that faults land on rollouts that are waiting for readiness and on
/// Pods still terminating.
const CHAOS_DELAYS: PodDelays = PodDelays {
    ready: (Duration::from_millis(100), Duration::from_millis(1000)),
    delete: (Duration::from_millis(100), Duration::from_millis(1500)),
};

fn redis_object(name: &str, replicas: i64, image: &str) -> Redis {
    serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "image": image}
    }))
    .unwrap()
}

fn app_object(name: &str, replicas: i64, image: &str, service: bool) -> Application {
    let mut spec = json!({"deployment": {
        "replicas": replicas,
        "selector": {"matchLabels": {"app": name}},
        "template": {"metadata": {"labels": {"app": name}},
                     "spec": {"containers": [{"name": "web", "image": image}]}},
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}}
    }});
    if service {
        spec["service"] = json!({"ports": [{"port": 80}]});
    }
    serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "Application",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap()
}

/// The seed to use, from PODKEEPER_CHAOS_SEED or fresh; printed.
fn seed(test: &str) -> u64 {
    let seed = std::env::var("PODKEEPER_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("{test}: PODKEEPER_CHAOS_SEED={seed}");
    seed
}

fn chaos_duration() -> Duration {
    let secs = std::env::var("PODKEEPER_CHAOS_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(45);
    Duration::from_secs(secs)
}

fn image_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref()?.containers.first()?.image.as_deref()
}

fn controller_uid(p: &Pod) -> Option<&str> {
    p.metadata
        .owner_references
        .iter()
        .flatten()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
}

/// What an object should look like once things are quiet.
struct Expected {
    uid: String,
    generation: Option<i64>,
    replicas: i32,
    image: String,
    /// (replicas, ready, updated, observedGeneration) from its status.
    status: (i32, i32, i32, Option<i64>),
}

impl Expected {
    /// An object being deleted: it should be gone once things are quiet.
    fn terminating(uid: String) -> Self {
        Expected {
            uid,
            generation: None,
            replicas: -1,
            image: String::new(),
            status: (0, 0, 0, None),
        }
    }
}

/// Every way the namespace breaks the invariant right now.
async fn violations(env: &TestEnv) -> Vec<String> {
    let mut objects: BTreeMap<String, Expected> = BTreeMap::new();
    let redis: Api<Redis> = env.api();
    for r in redis.list(&ListParams::default()).await.unwrap().items {
        if r.metadata.deletion_timestamp.is_some() {
            objects.insert(
                format!("Redis {} (terminating)", r.name_any()),
                Expected::terminating(r.uid().unwrap()),
            );
            continue;
        }
        let s = r.status.clone().unwrap_or_default();
        objects.insert(
            format!("Redis {}", r.name_any()),
            Expected {
                uid: r.uid().unwrap(),
                generation: r.metadata.generation,
                replicas: r.spec.replicas,
                image: r.spec.image.clone(),
                status: (
                    s.replicas,
                    s.ready_replicas,
                    s.updated_replicas,
                    s.observed_generation,
                ),
            },
        );
    }
    let apps: Api<Application> = env.api();
    for a in apps.list(&ListParams::default()).await.unwrap().items {
        if a.metadata.deletion_timestamp.is_some() {
            objects.insert(
                format!("Application {} (terminating)", a.name_any()),
                Expected::terminating(a.uid().unwrap()),
            );
            continue;
        }
        let w = a
            .status
            .as_ref()
            .and_then(|s| s.workflow.clone())
            .unwrap_or_default();
        let image = a.spec.deployment.template.spec.as_ref().unwrap().containers[0]
            .image
            .clone()
            .unwrap_or_default();
        objects.insert(
            format!("Application {}", a.name_any()),
            Expected {
                uid: a.uid().unwrap(),
                generation: a.metadata.generation,
                replicas: a.spec.deployment.replicas.unwrap_or(1),
                image,
                status: (
                    w.replicas.unwrap_or(0),
                    w.ready_replicas.unwrap_or(0),
                    w.updated_replicas.unwrap_or(0),
                    w.observed_generation,
                ),
            },
        );
    }
    let pods: Api<Pod> = env.api();
    let pods = pods.list(&ListParams::default()).await.unwrap().items;
    let mut problems = Vec::new();
    let by_uid: BTreeMap<&str, &str> = objects
        .iter()
        .map(|(name, e)| (e.uid.as_str(), name.as_str()))
        .collect();
    for p in &pods {
        if p.metadata.deletion_timestamp.is_some() {
            problems.push(format!("Pod {} is still terminating", p.name_any()));
        }
        match controller_uid(p) {
            None => problems.push(format!("Pod {} has no owner", p.name_any())),
            Some(uid) if !by_uid.contains_key(uid) => problems.push(format!(
                "Pod {} belongs to a deleted object ({uid})",
                p.name_any()
            )),
            Some(_) => {}
        }
    }
    for (name, e) in &objects {
        if e.replicas < 0 {
            problems.push(format!("{name} is still there"));
            continue;
        }
        let own: Vec<&Pod> = pods
            .iter()
            .filter(|p| controller_uid(p) == Some(e.uid.as_str()))
            .collect();
        if own.len() != e.replicas as usize {
            problems.push(format!(
                "{name} has {} Pods, wants {}",
                own.len(),
                e.replicas
            ));
        }
        let hashes: BTreeSet<_> = own
            .iter()
            .map(|p| p.labels().get("podkeeper.dev/template-hash").cloned())
            .collect();
        if hashes.len() > 1 {
            problems.push(format!("{name}: Pods on {} templates", hashes.len()));
        }
        for p in &own {
            if image_of(p) != Some(e.image.as_str()) {
                problems.push(format!(
                    "{name}: Pod {} runs {:?}, wants {}",
                    p.name_any(),
                    image_of(p),
                    e.image
                ));
            }
            if !is_ready(p) {
                problems.push(format!("{name}: Pod {} is not Ready", p.name_any()));
            }
        }
        let want = (e.replicas, e.replicas, e.replicas, e.generation);
        if e.status != want {
            problems.push(format!(
                "{name}: status (replicas, ready, updated, observedGeneration) is {:?}, wants {want:?}",
                e.status
            ));
        }
    }
    problems
}

/// Waits until the invariant holds; panics with what still breaks it.
async fn assert_invariant(env: &TestEnv, context: &str) -> Duration {
    let start = Instant::now();
    let mut last = Vec::new();
    while start.elapsed() < QUIET_TIMEOUT {
        last = violations(env).await;
        if last.is_empty() {
            return start.elapsed();
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    panic!(
        "{context}: the invariant did not hold within {QUIET_TIMEOUT:?}:\n  {}",
        last.join("\n  ")
    );
}

fn assert_no_panic(op: &Operator, context: &str) {
    let log = op.log_text();
    assert!(
        !log.contains("panicked"),
        "{context}: the operator panicked:\n{log}"
    );
}

/// The state chaos keeps: which objects exist or were deleted.
struct Chaos {
    rng: StdRng,
    redis: Vec<String>,
    apps: Vec<String>,
    deleted: BTreeSet<String>,
    counts: BTreeMap<&'static str, u32>,
}

/// How many Redis and Applications chaos runs over, and the pause between
/// its faults (a range of milliseconds). kwok Pods cost nothing, so locally
/// chaos runs 20 Redis and 10 Applications with a fault every 20-200 ms. On
/// kind every Pod is a real container whose exec readiness probe runs every
/// 2 s: 68 of them on two cores kept the machine at a load of 100-150 and
/// every wait timed out, so there chaos runs a third of the objects at a
/// third of the pace (about 20 Pods).
fn chaos_scale() -> (usize, usize, std::ops::Range<u64>) {
    if real_containers() {
        (6, 3, 60..600)
    } else {
        (20, 10, 20..200)
    }
}

impl Chaos {
    fn new(seed: u64) -> Self {
        let (redis, apps, _) = chaos_scale();
        Chaos {
            rng: StdRng::seed_from_u64(seed),
            redis: (0..redis).map(|i| format!("redis-{i}")).collect(),
            apps: (0..apps).map(|i| format!("app-{i}")).collect(),
            deleted: BTreeSet::new(),
            counts: BTreeMap::new(),
        }
    }

    async fn create(&mut self, env: &TestEnv, name: &str) -> bool {
        let replicas = self.rng.random_range(0..=4);
        let result = if name.starts_with("redis") {
            let image = &image(REDIS_IMAGES[self.rng.random_range(0..REDIS_IMAGES.len())]);
            env.api::<Redis>()
                .create(&PostParams::default(), &redis_object(name, replicas, image))
                .await
                .map(|_| ())
        } else {
            let image = &image(APP_IMAGES[self.rng.random_range(0..APP_IMAGES.len())]);
            let service = self.rng.random_bool(0.5);
            env.api::<Application>()
                .create(
                    &PostParams::default(),
                    &app_object(name, replicas, image, service),
                )
                .await
                .map(|_| ())
        };
        match result {
            Ok(()) => true,
            // Still terminating from an earlier delete: try again later.
            Err(kube::Error::Api(s)) if s.code == 409 => false,
            Err(e) => panic!("creating {name}: {e}"),
        }
    }

    async fn setup(&mut self, env: &TestEnv) {
        let names: Vec<String> = self.redis.iter().chain(&self.apps).cloned().collect();
        for name in names {
            assert!(self.create(env, &name).await);
        }
    }

    /// An object that is not deleted; `None` when every one is.
    fn pick(&mut self) -> Option<String> {
        let all: Vec<&String> = self
            .redis
            .iter()
            .chain(&self.apps)
            .filter(|n| !self.deleted.contains(*n))
            .collect();
        (!all.is_empty()).then(|| all[self.rng.random_range(0..all.len())].clone())
    }

    /// Creates a deleted object again, unless its predecessor is still
    /// terminating.
    async fn recreate_one(&mut self, env: &TestEnv) {
        if let Some(name) = self.deleted.iter().next().cloned()
            && self.create(env, &name).await
        {
            self.deleted.remove(&name);
            *self.counts.entry("objects recreated").or_default() += 1;
        }
    }

    async fn patch(&self, env: &TestEnv, name: &str, patch: Value) {
        let params = PatchParams::default();
        let result = if name.starts_with("redis") {
            env.api::<Redis>()
                .patch(name, &params, &Patch::Merge(&patch))
                .await
                .map(|_| ())
        } else {
            env.api::<Application>()
                .patch(name, &params, &Patch::Merge(&patch))
                .await
                .map(|_| ())
        };
        match result {
            Ok(()) | Err(kube::Error::Api(_)) => {}
            Err(e) => panic!("patching {name}: {e}"),
        }
    }

    /// One random fault; the Pods it deletes are told to `recorder`.
    async fn step(&mut self, env: &TestEnv, recorder: &Recorder) {
        let action = self.rng.random_range(0..100);
        let Some(name) = self.pick() else {
            // Every object is deleted (a seed that deletes them all before
            // one could be made again): bring one back instead.
            self.recreate_one(env).await;
            return;
        };
        let redis = name.starts_with("redis");
        match action {
            0..40 => {
                let pods: Api<Pod> = env.api();
                let list = pods.list(&ListParams::default()).await.unwrap().items;
                if !list.is_empty() {
                    let victim = list[self.rng.random_range(0..list.len())].name_any();
                    recorder.deleted_by_test(&victim);
                    let _ = pods.delete(&victim, &DeleteParams::default()).await;
                    *self.counts.entry("Pods deleted").or_default() += 1;
                }
            }
            40..65 => {
                let replicas = self.rng.random_range(0..=4);
                let patch = if redis {
                    json!({"spec": {"replicas": replicas}})
                } else {
                    json!({"spec": {"deployment": {"replicas": replicas}}})
                };
                self.patch(env, &name, patch).await;
                *self.counts.entry("replica changes").or_default() += 1;
            }
            65..85 => {
                let patch = if redis {
                    let image = &image(REDIS_IMAGES[self.rng.random_range(0..REDIS_IMAGES.len())]);
                    json!({"spec": {"image": image}})
                } else {
                    let image = &image(APP_IMAGES[self.rng.random_range(0..APP_IMAGES.len())]);
                    json!({"spec": {"deployment": {"template": {"spec": {"containers": [{"name": "web", "image": image}]}}}}})
                };
                self.patch(env, &name, patch).await;
                *self.counts.entry("image changes").or_default() += 1;
            }
            85..93 => {
                let _ = if redis {
                    env.api::<Redis>()
                        .delete(&name, &DeleteParams::default())
                        .await
                        .map(|_| ())
                } else {
                    env.api::<Application>()
                        .delete(&name, &DeleteParams::default())
                        .await
                        .map(|_| ())
                };
                self.deleted.insert(name);
                *self.counts.entry("objects deleted").or_default() += 1;
            }
            _ => self.recreate_one(env).await,
        }
    }

    /// Recreates whatever is still deleted, so that every name ends up
    /// existing (waiting out the finalizers of their predecessors).
    async fn restore(&mut self, env: &TestEnv) {
        let start = Instant::now();
        while let Some(name) = self.deleted.iter().next().cloned() {
            assert!(start.elapsed() < QUIET_TIMEOUT, "{name} stayed terminating");
            if self.create(env, &name).await {
                self.deleted.remove(&name);
            } else {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

async fn chaos(test: &str, kill_operator: bool) {
    let seed = seed(test);
    let env = TestEnv::new(test).await;
    env.set_pod_delays(CHAOS_DELAYS).await;
    // Without kills, the operator runs as a leader with a standby beside it,
    // whose memory must stay flat (a killed leader's Lease would hold the
    // chaos up for a lease duration at every kill, so that run has none).
    let lease = format!("chaos-{}", env.namespace);
    let args = election(&lease, &[]);
    let (mut op, mut standby) = if kill_operator {
        (env.start_operator(), None)
    } else {
        let leader = Operator::start(&env.namespace, &refs(&args));
        leader_of(&leader).await;
        let standby = Operator::start(&env.namespace, &refs(&args));
        campaigning(&standby).await;
        (leader, Some(standby))
    };
    let mut chaos = Chaos::new(seed);
    chaos.setup(&env).await;
    let context = format!("{test} (PODKEEPER_CHAOS_SEED={seed})");
    assert_invariant(&env, &format!("{context}, before chaos")).await;
    let recorder = Recorder::start(&env).await;
    let standby_before = standby
        .as_ref()
        .map(|s| s.rss_kib().expect("the standby runs"));
    let mut standby_peak = standby_before.unwrap_or(0);

    let duration = chaos_duration();
    let start = Instant::now();
    let mut kills = 0;
    let mut next_kill = Duration::from_millis(chaos.rng.random_range(1000..4000));
    while start.elapsed() < duration {
        chaos.step(&env, &recorder).await;
        if kill_operator && start.elapsed() > next_kill {
            op.restart();
            kills += 1;
            next_kill = start.elapsed() + Duration::from_millis(chaos.rng.random_range(1000..4000));
        }
        if let Some(s) = &standby {
            standby_peak = standby_peak.max(s.rss_kib().unwrap_or(0));
        }
        // Pacing of the load, not a wait for anything.
        let pause = chaos.rng.random_range(chaos_scale().2);
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    chaos.restore(&env).await;
    let settled = assert_invariant(&env, &context).await;
    op.assert_running();
    assert_no_panic(&op, &context);
    // Every Pod event of the run, replayed: surge and availability bounds.
    let report = recorder.check();
    report.assert_held(&context);
    let busy =
        |f: fn(&crate::bounds::OwnerStats) -> bool| report.owners.values().filter(|s| f(s)).count();
    eprintln!(
        "{context}: {}s of chaos, {:?}, {kills} operator kills; invariant held {:.1}s after the last fault; \
         bounds held at all {} Pod events ({} owners saw unready Pods, {} saw terminating ones)",
        duration.as_secs(),
        chaos.counts,
        settled.as_secs_f64(),
        report.pod_events,
        busy(|s| s.most_unready > 0),
        busy(|s| s.most_terminating > 0),
    );
    if kill_operator {
        assert!(kills >= 5, "{context}: only {kills} kills");
    } else {
        assert_eq!(op.starts(), 1, "{context}: the operator restarted");
    }
    if let (Some(standby), Some(before)) = (standby.as_mut(), standby_before) {
        standby.assert_running();
        let after = standby.rss_kib().expect("the standby runs");
        standby_peak = standby_peak.max(after);
        eprintln!(
            "{context}: the standby's RSS went from {before} KiB to {after} KiB (peak {standby_peak} KiB) over the run"
        );
        assert!(
            standby.log_field("became the leader", "identity").is_none(),
            "{context}: the standby led while the leader lived"
        );
        assert!(
            standby_peak.saturating_sub(before) < 20 * 1024,
            "{context}: the standby grew from {before} KiB to {standby_peak} KiB"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[cfg_attr(
    feature = "kind-e2e",
    ignore = "local-only: it runs its own leader and standby operators (the standby's memory is measured); on kind the deployed operator reconciles the same namespace beside them. chaos_with_the_operator_killed_again_and_again_keeps_the_invariant runs on kind against the deployed operator"
)]
async fn chaos_across_20_redis_and_10_applications_keeps_the_invariant() {
    chaos("chaos", false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chaos_with_the_operator_killed_again_and_again_keeps_the_invariant() {
    chaos("chaos-kills", true).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_operator_rides_out_an_apiserver_restart_without_restarting() {
    use podkeeper_dev::localcluster::{ClusterOptions, LocalCluster};
    // A cluster of its own: the shared one must not lose its apiserver.
    let mut cluster = LocalCluster::start(ClusterOptions::default())
        .await
        .expect("a second local control plane");
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    cluster.write_kubeconfig(&kubeconfig).unwrap();
    let client = cluster.client().await.unwrap();
    podkeeper::operator::install_crds(&client).await.unwrap();
    let namespace = "restart".to_string();
    let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    ns.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": namespace}})).unwrap(),
    )
    .await
    .unwrap();
    let env = TestEnv {
        client,
        namespace,
        share: crate::harness::ClusterShare::none(),
    };
    let sa: Api<k8s_openapi::api::core::v1::ServiceAccount> = env.api();
    crate::harness::wait_for(
        "the default ServiceAccount",
        Duration::from_secs(60),
        || async { sa.get_opt("default").await.ok().flatten() },
    )
    .await;
    let mut op = Operator::start_on(&env.namespace, &kubeconfig);
    let redis: Api<Redis> = env.api();
    for i in 0..3 {
        redis
            .create(
                &PostParams::default(),
                &redis_object(&format!("r{i}"), 2, &image(REDIS_IMAGES[0])),
            )
            .await
            .unwrap();
    }
    assert_invariant(&env, "before the restart").await;

    // Restart in the middle of a scale-up.
    redis
        .patch(
            "r0",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 12}})),
        )
        .await
        .unwrap();
    cluster
        .restart_apiserver()
        .await
        .expect("the apiserver restarts");
    // Changes after it is back: a deleted Pod, a rollout, a deleted Redis.
    let pods: Api<Pod> = env.api();
    let victim = pods.list(&ListParams::default()).await.unwrap().items[0].name_any();
    pods.delete(&victim, &DeleteParams::default())
        .await
        .unwrap();
    redis
        .patch(
            "r1",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"image": image(REDIS_IMAGES[1])}})),
        )
        .await
        .unwrap();
    redis.delete("r2", &DeleteParams::default()).await.unwrap();
    assert_invariant(&env, "after the apiserver restart").await;
    assert_eq!(
        redis
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .len(),
        2
    );
    op.assert_running();
    assert_eq!(op.starts(), 1);
    assert_no_panic(&op, "apiserver restart");
    drop(op);
    cluster.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_user_edits_during_reconciles_are_never_lost() {
    let env = TestEnv::new("conflicts").await;
    let _op = env.start_operator();
    let redis: Api<Redis> = env.api();
    redis
        .create(
            &PostParams::default(),
            &redis_object("c", 1, &image(REDIS_IMAGES[0])),
        )
        .await
        .unwrap();
    const WRITERS: usize = 4;
    const EDITS: u32 = 12;
    // Each writer reads, edits and replaces with the resourceVersion it
    // read, retrying on 409, as kubectl edit does; writer 0 also changes
    // the replicas, so the operator is busy reconciling throughout.
    let writers = (0..WRITERS).map(|w| {
        let redis = redis.clone();
        tokio::spawn(async move {
            let mut conflicts = 0;
            for n in 1..=EDITS {
                loop {
                    let mut r = redis.get("c").await.unwrap();
                    r.annotations_mut()
                        .insert(format!("writer-{w}"), n.to_string());
                    if w == 0 {
                        r.spec.replicas = (n % 4 + 1) as i32;
                    }
                    match redis.replace("c", &PostParams::default(), &r).await {
                        Ok(_) => break,
                        Err(kube::Error::Api(s)) if s.code == 409 => conflicts += 1,
                        Err(e) => panic!("writer {w}: {e}"),
                    }
                }
            }
            conflicts
        })
    });
    let conflicts: u32 = futures::future::join_all(writers)
        .await
        .into_iter()
        .map(|r| r.unwrap())
        .sum();
    let r = redis.get("c").await.unwrap();
    for w in 0..WRITERS {
        assert_eq!(
            r.annotations()
                .get(&format!("writer-{w}"))
                .map(String::as_str),
            Some(EDITS.to_string().as_str()),
            "writer {w}'s last edit was lost"
        );
    }
    assert_eq!(
        r.spec.replicas,
        (EDITS % 4 + 1) as i32,
        "the last replicas edit was lost"
    );
    assert_invariant(&env, "after concurrent edits").await;
    eprintln!("conflicts: {WRITERS} writers x {EDITS} edits, {conflicts} conflicts retried");
}
