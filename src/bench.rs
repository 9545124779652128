//! `podkeeper bench`: convergence side by side, in one run, on the local
//! control plane with its QPS limits raised:
//!
//! 1. podkeeper: N Redis objects with R replicas each;
//! 2. kube-controller-manager: N ReplicaSets with R replicas each;
//! 3. the ceiling: the same N×R Pods created directly by a tight client with
//!    bounded concurrency.
//!
//! For each: the time until every Pod exists, until every Pod is Ready, and
//! (for the two controllers) until every owner's status shows them ready.

use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Namespace, Pod, ServiceAccount};
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Client};
use serde::Serialize;
use serde_json::json;

use crate::cli::{BenchArgs, RunArgs};
use crate::crd::Redis;
use crate::localcluster::{ClusterOptions, LocalCluster};

#[derive(Clone, Debug, Default, Serialize)]
pub struct Stage {
    pub name: String,
    pub pods: usize,
    pub all_exist_s: f64,
    pub all_ready_s: f64,
    pub status_ready_s: Option<f64>,
}

#[derive(Debug, Serialize)]
pub struct Report {
    pub objects: usize,
    pub replicas: usize,
    pub kubernetes: &'static str,
    pub stages: Vec<Stage>,
}

fn is_ready(p: &Pod) -> bool {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn namespace(client: &Client, name: &str) -> Result<(), crate::Error> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    api.create(&PostParams::default(), &ns).await?;
    let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), name);
    while sa.get_opt("default").await?.is_none() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    Ok(())
}

/// Polls the namespace's Pods until `total` exist and are Ready; returns the
/// seconds since `start` at which each happened.
async fn wait_pods(
    client: &Client,
    ns: &str,
    total: usize,
    start: Instant,
) -> Result<(f64, f64), crate::Error> {
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let mut exist = None;
    let deadline = start + Duration::from_secs(1800);
    loop {
        let pods = api.list(&ListParams::default()).await?.items;
        let live: Vec<&Pod> = pods
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        if exist.is_none() && live.len() >= total {
            exist = Some(start.elapsed().as_secs_f64());
        }
        if live.iter().filter(|p| is_ready(p)).count() >= total {
            let ready = start.elapsed().as_secs_f64();
            return Ok((exist.unwrap_or(ready), ready));
        }
        if Instant::now() > deadline {
            return Err(crate::Error::Other(format!(
                "{ns}: Pods not ready after 30 minutes"
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn wait_status<F, Fut>(start: Instant, mut all_ready: F) -> Result<f64, crate::Error>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool, crate::Error>>,
{
    while !all_ready().await? {
        if start.elapsed() > Duration::from_secs(1800) {
            return Err(crate::Error::Other(
                "status not ready after 30 minutes".into(),
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(start.elapsed().as_secs_f64())
}

const CONCURRENCY: usize = 64;

/// Creates `count` objects made by `make`, `CONCURRENCY` requests in flight.
async fn create_all<K>(
    api: &Api<K>,
    count: usize,
    make: impl Fn(usize) -> serde_json::Value,
) -> Result<(), crate::Error>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + Serialize + std::fmt::Debug,
{
    stream::iter(0..count)
        .map(|i| {
            let object = serde_json::from_value::<K>(make(i));
            async move {
                api.create(&PostParams::default(), &object?).await?;
                Ok::<_, crate::Error>(())
            }
        })
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

async fn podkeeper_stage(client: &Client, n: usize, r: usize) -> Result<Stage, crate::Error> {
    let ns = "bench-podkeeper";
    let api: Api<Redis> = Api::namespaced(client.clone(), ns);
    let start = Instant::now();
    create_all(&api, n, |i| {
        json!({
            "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
            "metadata": {"name": format!("r{i}")}, "spec": {"replicas": r}
        })
    })
    .await?;
    let (exist, ready) = wait_pods(client, ns, n * r, start).await?;
    let status = wait_status(start, || async {
        let list = api.list(&ListParams::default()).await?;
        Ok(list.items.iter().all(|x| {
            x.status
                .as_ref()
                .is_some_and(|s| s.ready_replicas == r as i32)
        }))
    })
    .await?;
    Ok(Stage {
        name: "podkeeper (Redis)".into(),
        pods: n * r,
        all_exist_s: exist,
        all_ready_s: ready,
        status_ready_s: Some(status),
    })
}

async fn replicaset_stage(client: &Client, n: usize, r: usize) -> Result<Stage, crate::Error> {
    let ns = "bench-replicaset";
    namespace(client, ns).await?;
    let api: Api<ReplicaSet> = Api::namespaced(client.clone(), ns);
    let start = Instant::now();
    create_all(&api, n, |i| json!({
                "apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": format!("rs{i}")},
                "spec": {
                    "replicas": r,
                    "selector": {"matchLabels": {"bench": format!("rs{i}")}},
                    "template": {"metadata": {"labels": {"bench": format!("rs{i}")}},
                                 "spec": {"containers": [{"name": "redis", "image": crate::crd::redis::DEFAULT_IMAGE}]}}
                }
            })).await?;
    let (exist, ready) = wait_pods(client, ns, n * r, start).await?;
    let status = wait_status(start, || async {
        let list = api.list(&ListParams::default()).await?;
        Ok(list
            .items
            .iter()
            .all(|x| x.status.as_ref().and_then(|s| s.ready_replicas) == Some(r as i32)))
    })
    .await?;
    Ok(Stage {
        name: "kube-controller-manager (ReplicaSet)".into(),
        pods: n * r,
        all_exist_s: exist,
        all_ready_s: ready,
        status_ready_s: Some(status),
    })
}

async fn ceiling_stage(client: &Client, total: usize) -> Result<Stage, crate::Error> {
    let ns = "bench-ceiling";
    namespace(client, ns).await?;
    let api: Api<Pod> = Api::namespaced(client.clone(), ns);
    let start = Instant::now();
    create_all(&api, total, |i| {
        json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("p{i}")},
            "spec": {"containers": [{"name": "redis", "image": crate::crd::redis::DEFAULT_IMAGE}]}
        })
    })
    .await?;
    let (exist, ready) = wait_pods(client, ns, total, start).await?;
    Ok(Stage {
        name: format!("ceiling (direct creates, {CONCURRENCY} in flight)"),
        pods: total,
        all_exist_s: exist,
        all_ready_s: ready,
        status_ready_s: None,
    })
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "-".into()
    }
}

/// Renders the report as a Markdown table with the ratios.
pub fn markdown(report: &Report) -> String {
    let mut out = format!(
        "Convergence: {} objects x {} replicas = {} Pods, Kubernetes v{}, 3 kwok nodes, QPS limits raised.\n\n",
        report.objects,
        report.replicas,
        report.objects * report.replicas,
        report.kubernetes
    );
    out.push_str("| stage | all Pods exist (s) | all Pods Ready (s) | every status ready (s) |\n|---|---|---|---|\n");
    for s in &report.stages {
        out.push_str(&format!(
            "| {} | {:.2} | {:.2} | {} |\n",
            s.name,
            s.all_exist_s,
            s.all_ready_s,
            s.status_ready_s
                .map(|v| format!("{v:.2}"))
                .unwrap_or_else(|| "-".into())
        ));
    }
    if let [pk, rs, ceiling] = &report.stages[..] {
        out.push_str(&format!(
            "\nRatios (lower is faster for podkeeper): podkeeper/ReplicaSet: exist {}, ready {}, status {}; podkeeper/ceiling: exist {}, ready {}.\n",
            ratio(pk.all_exist_s, rs.all_exist_s),
            ratio(pk.all_ready_s, rs.all_ready_s),
            ratio(pk.status_ready_s.unwrap_or(0.0), rs.status_ready_s.unwrap_or(0.0)),
            ratio(pk.all_exist_s, ceiling.all_exist_s),
            ratio(pk.all_ready_s, ceiling.all_ready_s),
        ));
    }
    out
}

/// Runs the benchmark; returns the report after printing it.
pub async fn run(args: BenchArgs) -> Result<Report, crate::Error> {
    let (n, r) = if args.quick {
        (20, 3)
    } else {
        (args.objects, args.replicas)
    };
    eprintln!("podkeeper bench: starting the local control plane (QPS limits raised)");
    let cluster = LocalCluster::start(ClusterOptions {
        nodes: 3,
        raise_qps_limits: true,
    })
    .await?;
    let client = cluster.client().await?;
    crate::operator::install_crds(&client).await?;
    // Namespaces first, then a warm operator (watching all namespaces, as
    // deployed), proven warm by one Redis converging before timing starts;
    // kube-controller-manager's informers are warm too.
    for ns in ["bench-warmup", "bench-podkeeper"] {
        namespace(&client, ns).await?;
    }
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let operator = tokio::spawn(crate::operator::run(
        client.clone(),
        RunArgs {
            namespace: None,
            leader_elect: false,
            leader_election_namespace: None,
            leader_election_id: "podkeeper-leader".into(),
            leader_election_lease_duration: 15,
            metrics_bind_address: "0".into(),
            health_probe_bind_address: "0".into(),
        },
        async move {
            let _ = stop_rx.await;
        },
    ));
    let warm: Api<Redis> = Api::namespaced(client.clone(), "bench-warmup");
    warm.create(
        &PostParams::default(),
        &serde_json::from_value(json!({
            "apiVersion": "podkeeper.dev/v1", "kind": "Redis", "metadata": {"name": "warmup"}, "spec": {"replicas": 1}
        }))?,
    )
    .await?;
    wait_pods(&client, "bench-warmup", 1, Instant::now()).await?;
    let mut stages = Vec::new();
    eprintln!("podkeeper bench: podkeeper, {n} Redis x {r} replicas");
    stages.push(podkeeper_stage(&client, n, r).await?);
    eprintln!("podkeeper bench: kube-controller-manager, {n} ReplicaSets x {r} replicas");
    stages.push(replicaset_stage(&client, n, r).await?);
    eprintln!("podkeeper bench: ceiling, {} Pods created directly", n * r);
    stages.push(ceiling_stage(&client, n * r).await?);
    let _ = stop_tx.send(());
    let _ = operator.await;
    cluster.shutdown().await;

    let report = Report {
        objects: n,
        replicas: r,
        kubernetes: crate::localcluster::versions::KUBERNETES,
        stages,
    };
    println!("{}", markdown(&report));
    let dir = std::path::Path::new("target/bench");
    std::fs::create_dir_all(dir).map_err(|e| crate::Error::Other(e.to_string()))?;
    let json =
        serde_json::to_string_pretty(&report).map_err(|e| crate::Error::Other(e.to_string()))?;
    std::fs::write(dir.join("convergence.json"), json)
        .map_err(|e| crate::Error::Other(e.to_string()))?;
    Ok(report)
}
