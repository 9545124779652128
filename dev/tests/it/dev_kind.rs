//! `podkeeper dev --kind` as a user runs it: the operator here, against a
//! kind cluster whose Pods are real containers. (kind-only: these tests
//! need the Docker engine and the kind images that `just e2e` builds; the
//! module's name puts them in CI's `kind` selection.)

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};
use podkeeper::api::Redis;

use crate::DEV_BIN;
use crate::dev::{assert_created, endpoints, spawn_dev, stop};
use crate::harness::{cluster, exec_in, http_get, logs_dir, wait_for};

/// The cluster the first test creates for itself, and deletes.
const OWN_CLUSTER: &str = "podkeeper-dev-it";

/// A kind cluster is created (about a minute here) or reused.
const UP: Duration = Duration::from_secs(600);

/// The kind cluster the suite runs on: kind names its context
/// `kind-<cluster>`.
fn suite_cluster_name() -> String {
    let config = Kubeconfig::read_from(&cluster().kubeconfig_path).expect("the suite's kubeconfig");
    let context = config.current_context.expect("a current context");
    context
        .strip_prefix("kind-")
        .unwrap_or_else(|| panic!("not a kind context: {context}"))
        .to_string()
}

async fn client_for(kubeconfig: &Path) -> kube::Client {
    let config = Kubeconfig::read_from(kubeconfig).expect("dev's kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(config, &KubeConfigOptions::default())
        .await
        .expect("a client configuration");
    kube::Client::try_from(config).expect("a client")
}

fn kind_clusters() -> Vec<String> {
    let out = Command::new(DEV_BIN)
        .args(["kind", "bin"])
        .output()
        .expect("podkeeper kind bin");
    assert!(out.status.success(), "{out:?}");
    let kind = String::from_utf8_lossy(&out.stdout).trim().to_string();
    let out = Command::new(kind)
        .args(["get", "clusters"])
        .output()
        .expect("kind get clusters");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// Deletes the test's own cluster, whether the test passed or not: it
/// would otherwise hold a node's worth of CPU and memory for the rest of
/// the run.
struct DeleteOnDrop(&'static str);

impl Drop for DeleteOnDrop {
    fn drop(&mut self) {
        let _ = Command::new(DEV_BIN)
            .args(["kind", "down", "--name", self.0])
            .status();
    }
}

#[tokio::test]
async fn dev_kind_runs_the_operator_on_real_containers_where_redis_serves_and_replicates() {
    let _delete = DeleteOnDrop(OWN_CLUSTER);
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    let log = logs_dir().join("dev-kind.log");
    // One node (the control plane, untainted) keeps the cluster as small as
    // a kind cluster gets; a user's default is two workers besides.
    let (dev, stdin, mut rx) = spawn_dev(
        &[
            "dev",
            "--kind",
            "--kind-name",
            OWN_CLUSTER,
            "--kind-workers",
            "0",
            "--exit-on-stdin-eof",
            "--kubeconfig",
            kubeconfig.to_str().unwrap(),
        ],
        None,
        &log,
    );
    let (metrics, probes, printed) = endpoints(&mut rx, &log, UP).await;
    let said = |line: &str| printed.iter().any(|l| l.contains(line));
    assert!(said("podkeeper: ready"), "{printed:?}");
    assert!(
        said(&format!("export KUBECONFIG={}", kubeconfig.display())),
        "{printed:?}"
    );
    wait_for(
        "dev's /readyz to turn ready",
        Duration::from_secs(60),
        || async { http_get(probes, "/readyz").filter(|(code, _)| *code == 200) },
    )
    .await;

    // The sample, applied as the README says, in a namespace of its own.
    let client = client_for(&kubeconfig).await;
    let namespace = "dev-kind";
    let kubectl = |args: &[&str]| {
        let out = Command::new("kubectl")
            .env("KUBECONFIG", &kubeconfig)
            .args(args)
            .output()
            .expect("kubectl");
        assert!(out.status.success(), "kubectl {args:?}: {out:?}");
    };
    kubectl(&["create", "namespace", namespace]);
    let sample = crate::harness::repo_root().join("samples/redis-kind.yaml");
    kubectl(&[
        "--namespace",
        namespace,
        "apply",
        "-f",
        sample.to_str().expect("a UTF-8 path"),
    ]);
    let api: Api<Redis> = Api::namespaced(client.clone(), namespace);
    let redis = wait_for(
        "the sample Redis: Ready with a primary and 2 linked replicas",
        Duration::from_secs(180),
        || async {
            let r = api.get("redis-sample").await.ok()?;
            r.settled_with(3).then_some(r)
        },
    )
    .await;

    // Real redis-server processes: a write on the primary reaches a replica.
    let primary = redis.primary_pod().expect("a primary").to_string();
    let replica = redis
        .status
        .iter()
        .flat_map(|s| &s.members)
        .map(|m| m.pod.clone())
        .find(|p| *p != primary)
        .expect("a replica");
    let cli = |pod: &str, command: &[&str]| {
        let mut args = vec!["redis-cli", "-p", "6379"];
        args.extend_from_slice(command);
        exec_in(&kubeconfig, namespace, pod, &args)
    };
    let (ok, out) = cli(&primary, &["set", "greeting", "hello"]);
    assert!(ok && out.trim() == "OK", "SET on {primary}: {out}");
    wait_for(
        "the replica to serve the primary's write",
        Duration::from_secs(30),
        || async {
            let (ok, out) = cli(&replica, &["get", "greeting"]);
            (ok && out.trim() == "hello").then_some(())
        },
    )
    .await;
    assert_created(metrics, 3);

    // Stopping dev stops the operator and keeps the cluster, as it says.
    stop(dev, stdin, &log, Duration::from_secs(60)).await;
    assert!(kind_clusters().iter().any(|c| c == OWN_CLUSTER));
}

#[tokio::test]
async fn dev_kind_refuses_to_run_beside_the_deployed_operator() {
    let name = suite_cluster_name();
    let log = logs_dir().join("dev-kind-refused.log");
    let (mut dev, _stdin, _rx) = spawn_dev(&["dev", "--kind", "--kind-name", &name], None, &log);
    let status = wait_for("dev --kind to give up", UP, || {
        let status = dev.0.try_wait().ok().flatten();
        async move { status }
    })
    .await;
    let said = std::fs::read_to_string(&log).unwrap_or_default();
    assert!(!status.success(), "dev ran beside the deployed operator");
    assert!(
        said.contains(&format!(
            "kind cluster `{name}` runs the deployed operator (Deployment podkeeper-system/podkeeper"
        )) && said.contains("--kind-name"),
        "{said}"
    );
    // The deployed operator is untouched.
    let deployments: Api<Deployment> =
        Api::namespaced(crate::harness::admin_client().await, "podkeeper-system");
    let d = deployments.get("podkeeper").await.unwrap();
    let s = d.status.unwrap_or_default();
    assert_eq!(s.ready_replicas, d.spec.replicas, "{s:?}");
}
