//! `podkeeper dev --kind` as a user runs it: the operator here, against a
//! kind cluster whose Pods are real containers, and the cluster's default
//! StorageClass, a real provisioner. (kind-only: these tests
//! need the Docker engine and the kind images that `just e2e` builds; the
//! module's name puts them in CI's `kind` selection.)

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::Api;
use kube::api::{DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use podkeeper::api::Redis;
use podkeeper_dev::kind::{storage, versions};

use crate::DEV_BIN;
use crate::dev::{assert_created, endpoints, spawn_dev, stop};
use crate::harness::{TestEnv, admin_client, cluster, exec_in, http_get, logs_dir, wait_for};

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

/// A Pod of the Redis image (which has a shell) that mounts claim `claim` at
/// /data and sleeps; it stops at once when deleted.
fn pod_on_claim(name: &str, claim: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{
                "name": "main",
                "image": versions::REDIS_IMAGE,
                "imagePullPolicy": "Never",
                "command": ["sleep", "3600"],
                "volumeMounts": [{"name": "data", "mountPath": "/data"}]
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]
        }
    }))
    .expect("a Pod")
}

async fn running_pod(pods: &Api<Pod>, name: &str) -> Pod {
    wait_for(
        &format!("Pod {name} to be Ready"),
        Duration::from_secs(120),
        || async {
            let pod = pods.get(name).await.ok()?;
            let ready = pod
                .status
                .as_ref()?
                .conditions
                .as_ref()?
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True");
            ready.then_some(pod)
        },
    )
    .await
}

async fn delete_and_wait<K>(api: &Api<K>, name: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.delete(name, &DeleteParams::default())
        .await
        .expect("delete");
    wait_for(
        &format!("{name} to be gone"),
        Duration::from_secs(120),
        || async { api.get_opt(name).await.ok().filter(Option::is_none) },
    )
    .await;
}

/// `kind up` gives every cluster a dynamic provisioner behind its default
/// StorageClass (local-path-provisioner, `dev/src/kind/storage.rs`): a claim
/// with no class binds to a directory on the node of the first Pod that uses
/// it, what that Pod writes there it reads back once deleted and created
/// again on the same claim, and deleting the claim removes the directory from
/// the node (the provisioner's helper Pod ran).
#[tokio::test]
async fn a_claim_without_a_class_binds_and_keeps_a_file_across_pods() {
    let env = TestEnv::new("dev-kind-claim").await;
    let kubeconfig = &cluster().kubeconfig_path;
    let claims: Api<PersistentVolumeClaim> = env.api();
    let pods: Api<Pod> = env.api();
    let claim: PersistentVolumeClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "data"},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "100Mi"}}
        }
    }))
    .expect("a claim");
    let claim = claims
        .create(&PostParams::default(), &claim)
        .await
        .expect("create the claim");
    // The default class is filled in at admission.
    let class = claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone());
    assert_eq!(class.as_deref(), Some(storage::STORAGE_CLASS));

    pods.create(&PostParams::default(), &pod_on_claim("writer", "data"))
        .await
        .expect("create the Pod");
    let first = running_pod(&pods, "writer").await;
    let node = first
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .expect("a node");
    let volume = claims
        .get("data")
        .await
        .expect("the claim")
        .spec
        .and_then(|s| s.volume_name)
        .expect("the claim is bound");
    let pv = Api::<PersistentVolume>::all(admin_client().await)
        .get(&volume)
        .await
        .expect("its volume");
    let pv_spec = pv.spec.expect("a volume spec");
    assert_eq!(
        pv_spec.storage_class_name.as_deref(),
        Some(storage::STORAGE_CLASS)
    );
    let path = pv_spec.host_path.expect("a hostPath volume").path;
    assert!(
        path.starts_with(&format!("{}/", storage::NODE_PATH)),
        "{path}"
    );

    let token = format!("written by the first writer {}", rand::random::<u64>());
    let (ok, out) = exec_in(
        kubeconfig,
        &env.namespace,
        "writer",
        &[
            "sh",
            "-c",
            &format!("echo '{token}' > /data/note.txt && cat /data/note.txt"),
        ],
    );
    assert!(ok && out.trim() == token, "write in the Pod: {out}");
    // The file is in the volume's directory on the node.
    let on_node = Command::new("docker")
        .args(["exec", &node, "cat", &format!("{path}/note.txt")])
        .output()
        .expect("docker exec");
    assert_eq!(
        String::from_utf8_lossy(&on_node.stdout).trim(),
        token,
        "{on_node:?}"
    );

    // The Pod deleted and created again on the same claim reads it back.
    delete_and_wait(&pods, "writer").await;
    pods.create(&PostParams::default(), &pod_on_claim("writer", "data"))
        .await
        .expect("create the Pod again");
    let second = running_pod(&pods, "writer").await;
    assert_ne!(second.metadata.uid, first.metadata.uid);
    assert_eq!(
        second.spec.and_then(|s| s.node_name).as_deref(),
        Some(node.as_str()),
        "the volume's node affinity keeps its Pods on its node"
    );
    let (ok, out) = exec_in(
        kubeconfig,
        &env.namespace,
        "writer",
        &["cat", "/data/note.txt"],
    );
    assert!(ok && out.trim() == token, "read in the new Pod: {out}");

    // Reclaim policy Delete: the volume and its directory go with the claim.
    delete_and_wait(&pods, "writer").await;
    delete_and_wait(&claims, "data").await;
    let volumes = Api::<PersistentVolume>::all(admin_client().await);
    wait_for(
        "the claim's volume to be deleted",
        Duration::from_secs(120),
        || async { volumes.get_opt(&volume).await.ok().filter(Option::is_none) },
    )
    .await;
    let exists = Command::new("docker")
        .args(["exec", &node, "test", "-e", &path])
        .status()
        .expect("docker exec");
    assert!(!exists.success(), "{path} is still on {node}");
}
