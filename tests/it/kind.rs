//! What only real containers show, on the kind cluster of `just e2e`
//! (compiled with `--features kind-e2e`; the local control plane's kwok
//! nodes run no containers). The operator is the one deployed with
//! `manifests/`; the workload images are podkeeper's own, built from Debian
//! packages and loaded into kind by `podkeeper kind up`.

use std::collections::BTreeSet;
use std::time::Duration;

use futures::TryStreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use podkeeper::api::{Application, Redis};
use podkeeper::podset::pods::PodIdentity;
use podkeeper_dev::kind::versions::{HTTPD_IMAGE, REDIS_IMAGE};
use serde_json::json;

use crate::harness::{
    TestEnv, cluster, exec_in, hold_deployed_operator, is_ready, kubectl, owned_by, wait_for,
    watch_from,
};

/// Stretched threefold on kind by the harness (see `harness::patience`).
const TIMEOUT: Duration = Duration::from_secs(60);
const OPERATOR_NS: &str = "podkeeper-system";

async fn create_redis(env: &TestEnv, name: &str, replicas: i32, port: i32) -> Redis {
    let redis: Redis = serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1",
        "kind": "Redis",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "port": port, "image": REDIS_IMAGE},
    }))
    .unwrap();
    env.api::<Redis>()
        .create(&PostParams::default(), &redis)
        .await
        .unwrap()
}

/// Waits until the Redis reports `n` ready replicas and has `n` ready Pods.
async fn ready_pods(env: &TestEnv, name: &str, n: usize) -> Vec<Pod> {
    let redis: Api<Redis> = env.api();
    let pods: Api<Pod> = env.api();
    wait_for(&format!("{name}: {n} Ready Pods"), TIMEOUT, || async {
        let r = redis.get(name).await.ok()?;
        if r.status.as_ref()?.ready_replicas != n as i32 {
            return None;
        }
        let uid = r.uid()?;
        let live: Vec<Pod> = pods
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|p| owned_by(p, &uid) && p.metadata.deletion_timestamp.is_none())
            .collect();
        (live.len() == n && live.iter().all(is_ready)).then_some(live)
    })
    .await
}

/// `kubectl exec` in the Pod (see [`exec_in`]).
fn exec(env: &TestEnv, pod: &str, command: &[&str]) -> (bool, String) {
    exec_in(&cluster().kubeconfig_path, &env.namespace, pod, command)
}

fn redis_cli(env: &TestEnv, pod: &str, port: i32, command: &[&str]) -> String {
    let port = port.to_string();
    let mut args = vec!["redis-cli", "-p", port.as_str()];
    args.extend_from_slice(command);
    let (ok, out) = exec(env, pod, &args);
    assert!(ok, "redis-cli {command:?} in {pod}: {out}");
    out.trim().to_string()
}

/// A client Pod's emptyDir: it lives as long as the Pod, through any
/// number of container restarts (the container's own /tmp is new at each
/// start), so what a writer records there is kept.
const LEDGER: &str = "/ledger";

/// Creates the client Pod (our Redis image: bash, redis-cli) and waits
/// until it is Ready. Its restartPolicy is Always, as a user's Pod's would
/// be: a container that fails to start on a loaded machine (`runc create
/// failed: ... unable to freeze`) or dies is started again, where with
/// Never the Pod stays Failed for good. Its command starts again a writer
/// that was started in it ([`LEDGER`]`/writer.sh`) and not stopped, so that
/// a restart does not end the writes a test counts.
async fn start_client(env: &TestEnv) {
    let command = format!(
        "if [ -e {LEDGER}/writer.sh ] && [ ! -e {LEDGER}/total ]; then \
         setsid bash {LEDGER}/writer.sh >/dev/null 2>&1 </dev/null & fi; exec sleep infinity"
    );
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "client"},
        "spec": {
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 1,
            "volumes": [{"name": "ledger", "emptyDir": {}}],
            "containers": [{
                "name": "client",
                "image": REDIS_IMAGE,
                "imagePullPolicy": "IfNotPresent",
                "command": ["bash", "-c", command],
                "volumeMounts": [{"name": "ledger", "mountPath": LEDGER}],
            }],
        },
    }))
    .unwrap();
    let pods: Api<Pod> = env.api();
    pods.create(&PostParams::default(), &pod)
        .await
        .expect("the client Pod");
    wait_for("the client Pod", TIMEOUT, || async {
        pods.get("client").await.ok().filter(is_ready)
    })
    .await;
}

/// Restarts of the first container of `p` so far (a failed start counts).
fn restarts(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|c| c.first())
        .map_or(0, |c| c.restart_count)
}

fn ready_condition(r: &Redis) -> (String, String, String) {
    let c = r
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == "Ready"))
        .expect("a Ready condition");
    (c.status.clone(), c.reason.clone(), c.message.clone())
}

#[tokio::test]
async fn redis_answers_ping_on_spec_port_and_replicates_over_the_pod_network() {
    let env = TestEnv::new("kind-redis-ping").await;
    create_redis(&env, "cache", 2, 7001).await;
    let primary = primary_of(&settled(&env, "cache", 2).await);
    let pods = ready_pods(&env, "cache", 2).await;
    for pod in &pods {
        let name = pod.name_any();
        assert_eq!(redis_cli(&env, &name, 7001, &["ping"]), "PONG");
        // Nothing listens on the default port: the operator passed spec.port.
        let (ok, out) = exec(&env, &name, &["redis-cli", "-p", "6379", "ping"]);
        assert!(
            !ok || out.contains("Connection refused"),
            "6379 should be closed: {out}"
        );
    }
    // The replica reaches the primary over the Pod network and has what
    // was written there.
    assert_eq!(
        redis_cli(&env, &primary, 7001, &["set", "greeting", &primary]),
        "OK"
    );
    assert_eq!(redis_cli(&env, &primary, 7001, &["wait", "1", "5000"]), "1");
    let replica = pods
        .iter()
        .map(|p| p.name_any())
        .find(|n| *n != primary)
        .unwrap();
    assert_eq!(
        redis_cli(&env, &replica, 7001, &["get", "greeting"]),
        primary
    );
}

#[tokio::test]
async fn a_pod_whose_redis_stops_serving_turns_not_ready_and_the_status_says_so() {
    let env = TestEnv::new("kind-redis-readiness").await;
    create_redis(&env, "probe", 1, 6380).await;
    settled(&env, "probe", 1).await;
    let pods = ready_pods(&env, "probe", 1).await;
    let pod = pods[0].name_any();
    // A start that failed on a loaded machine counts as a restart too: what
    // is checked below is that closing the listener adds none.
    let restarted = restarts(&pods[0]);
    let redis: Api<Redis> = env.api();
    assert_eq!(
        ready_condition(&redis.get("probe").await.unwrap()).0,
        "True"
    );

    // redis-server closes its listening socket on spec.port while the
    // process (and so the container) keeps running: only the readiness
    // probe (redis-cli on spec.port) can notice.
    assert_eq!(
        redis_cli(&env, &pod, 6380, &["config", "set", "port", "0"]),
        "OK"
    );

    let pods_api: Api<Pod> = env.api();
    wait_for("the Pod to turn NotReady", TIMEOUT, || async {
        let p = pods_api.get(&pod).await.ok()?;
        (!is_ready(&p)).then_some(())
    })
    .await;
    let r = wait_for("the Redis status to report it", TIMEOUT, || async {
        let r = redis.get("probe").await.ok()?;
        let s = r.status.as_ref()?;
        (s.ready_replicas == 0 && s.replicas == 1 && ready_condition(&r).0 == "False").then_some(r)
    })
    .await;
    let (_, reason, message) = ready_condition(&r);
    assert!(!reason.is_empty(), "a reason for Ready=False");
    assert!(
        message.contains('0'),
        "the message counts ready Pods: {message}"
    );
    // The container was not restarted: the process is alive, only unready.
    let p = pods_api.get(&pod).await.unwrap();
    let status = &p.status.unwrap().container_statuses.unwrap()[0];
    assert_eq!(status.restart_count, restarted);
    assert!(status.state.as_ref().unwrap().running.is_some());
}

#[tokio::test]
async fn redis_runs_under_restricted_pod_security_with_a_read_only_root_and_writable_data() {
    let env = TestEnv::new("kind-redis-restricted").await;
    let ns: Api<Namespace> = Api::all(env.client.clone());
    ns.patch(
        &env.namespace,
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {
            "pod-security.kubernetes.io/enforce": "restricted",
            "pod-security.kubernetes.io/enforce-version": "latest",
        }}})),
    )
    .await
    .unwrap();
    // The namespace really enforces it: a root Pod is refused.
    let (ok, _, err) = env.kubectl(&[
        "run",
        "rooty",
        "--image",
        REDIS_IMAGE,
        "--restart=Never",
        "--overrides",
        r#"{"spec":{"securityContext":{"runAsUser":0}}}"#,
    ]);
    assert!(
        !ok && err.contains("restricted"),
        "a root Pod was admitted: {err}"
    );

    create_redis(&env, "locked", 1, 6379).await;
    settled(&env, "locked", 1).await;
    let pods = ready_pods(&env, "locked", 1).await;
    let pod = pods[0].name_any();
    let (ok, out) = exec(&env, &pod, &["touch", "/etc/podkeeper-was-here"]);
    assert!(
        !ok && out.contains("Read-only file system"),
        "root fs writable: {out}"
    );
    assert_eq!(redis_cli(&env, &pod, 6379, &["set", "k", "v"]), "OK");
    assert_eq!(redis_cli(&env, &pod, 6379, &["save"]), "OK");
    let (ok, out) = exec(&env, &pod, &["ls", "-ln", "/data/dump.rdb"]);
    assert!(ok, "no dump in /data: {out}");
    assert!(out.contains(" 999 "), "the dump belongs to uid 999: {out}");
    let (ok, out) = exec(&env, &pod, &["id", "-u"]);
    assert!(ok && out.trim() == "999", "runs as uid 999: {out}");
}

pub(crate) fn leader_pod() -> Option<String> {
    let (ok, out, _) = kubectl(&[
        "get",
        "lease",
        "podkeeper-leader",
        "-n",
        OPERATOR_NS,
        "-o",
        "jsonpath={.spec.holderIdentity}",
    ]);
    // The identity is `<Pod name>-<6 hex digits>`.
    let holder = out.trim();
    (ok && !holder.is_empty()).then(|| holder.rsplit_once('-').map(|(p, _)| p.to_string()))?
}

async fn operator_pods(client: &kube::Client) -> Vec<Pod> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NS);
    pods.list(&ListParams::default().labels("app.kubernetes.io/name=podkeeper"))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .collect()
}

#[tokio::test]
// The guard is held for the whole test on purpose; the other tests' "kills"
// wait for it on their own threads (each test has its own runtime).
#[allow(clippy::await_holding_lock)]
async fn the_deployed_operator_is_ready_serves_metrics_logs_and_fails_over() {
    // Other tests "kill" the deployed operator by deleting its Pods; not
    // while this one follows its leader.
    let _undisturbed = hold_deployed_operator();
    let env = TestEnv::new("kind-operator").await;
    let client = env.client.clone();

    // Two replicas, as deployed (a run stopped mid-test may have left one).
    let (ok, _, err) = kubectl(&[
        "scale",
        "deployment/podkeeper",
        "-n",
        OPERATOR_NS,
        "--replicas=2",
    ]);
    assert!(ok, "{err}");
    // Both replicas Ready: their readiness probe is /readyz.
    let pods = wait_for("two Ready operator Pods", TIMEOUT, || async {
        let pods = operator_pods(&client).await;
        (pods.len() == 2 && pods.iter().all(is_ready)).then_some(pods)
    })
    .await;
    // Spread over the workers (the Deployment's topology spread by
    // hostname), so that one node going away leaves a replica running.
    let nodes: BTreeSet<_> = pods
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    assert_eq!(
        nodes.len(),
        2,
        "both operator replicas on one node: {nodes:?}"
    );
    for p in &pods {
        let probe = p.spec.as_ref().unwrap().containers[0]
            .readiness_probe
            .clone()
            .unwrap();
        assert_eq!(probe.http_get.unwrap().path.as_deref(), Some("/readyz"));
        // /metrics answers on every replica (scraped from the Pod through
        // the API server's proxy); the leader's counts are checked below.
        let metrics = scrape(&p.name_any());
        assert!(
            metrics.ends_with("# EOF\n"),
            "not OpenMetrics text:\n{metrics}"
        );
        // kubectl logs reads the JSON log.
        let (ok, out, err) = kubectl(&["logs", "-n", OPERATOR_NS, &p.name_any()]);
        assert!(
            ok && out.contains("campaigning for leadership"),
            "logs: {out}{err}"
        );
    }

    let leader = wait_for("a leader", TIMEOUT, || async { leader_pod() }).await;
    assert!(
        pods.iter().any(|p| p.name_any() == leader),
        "{leader} leads"
    );
    let standby = pods
        .iter()
        .map(|p| p.name_any())
        .find(|n| *n != leader)
        .unwrap();

    // Delete the leader's Pod so that no replacement races the standby for
    // the Lease: the Deployment scales to one replica, and the lowest
    // pod-deletion-cost makes the leader's Pod the one removed.
    let lease: Api<Lease> = Api::namespaced(client.clone(), OPERATOR_NS);
    assert!(lease.get("podkeeper-leader").await.is_ok());
    for (pod, cost) in [(&leader, "-100"), (&standby, "100")] {
        let (ok, _, err) = kubectl(&[
            "annotate",
            "pod",
            "-n",
            OPERATOR_NS,
            pod,
            "--overwrite",
            &format!("controller.kubernetes.io/pod-deletion-cost={cost}"),
        ]);
        assert!(ok, "{err}");
    }
    let scale = |replicas: &str| {
        let (ok, _, err) = kubectl(&[
            "scale",
            "deployment/podkeeper",
            "-n",
            OPERATOR_NS,
            &format!("--replicas={replicas}"),
        ]);
        assert!(ok, "{err}");
    };
    scale("1");
    let pods_api: Api<Pod> = Api::namespaced(client.clone(), OPERATOR_NS);
    wait_for("the leader's Pod to go", TIMEOUT, || async {
        pods_api
            .get_opt(&leader)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let new_leader = wait_for("the standby to lead", TIMEOUT, || async {
        leader_pod().filter(|l| *l != leader)
    })
    .await;
    assert_eq!(new_leader, standby, "the standby took over");

    // The new leader converges a change made after the failover.
    create_redis(&env, "after-failover", 1, 6379).await;
    let pods = ready_pods(&env, "after-failover", 1).await;
    assert_eq!(
        redis_cli(&env, &pods[0].name_any(), 6379, &["ping"]),
        "PONG"
    );
    let (ok, out, _) = kubectl(&["logs", "-n", OPERATOR_NS, &standby]);
    assert!(
        ok && out.contains("became the leader"),
        "standby log: {out}"
    );
    scale("2");
    let metrics = scrape(&standby);
    assert!(
        metrics.contains(
            "controller_runtime_reconcile_total{controller=\"redis\",result=\"success\"}"
        ),
        "the new leader's metrics count its reconciles:\n{metrics}"
    );
}

/// The operator Pod's /metrics, through the API server's Pod proxy.
pub(crate) fn scrape(pod: &str) -> String {
    let path = format!("/api/v1/namespaces/{OPERATOR_NS}/pods/{pod}:8080/proxy/metrics");
    let (ok, out, err) = kubectl(&["get", "--raw", &path]);
    assert!(ok, "scraping {path}: {err}");
    out
}

#[tokio::test]
async fn the_application_sample_serves_http_through_its_service() {
    let env = TestEnv::new("kind-app").await;
    let app: Application = serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1",
        "kind": "Application",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "deployment": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {
                    "metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{
                        "name": "httpd",
                        "image": HTTPD_IMAGE,
                        "ports": [{"containerPort": 80}]
                    }]}
                }
            },
            "service": {"ports": [{"port": 8000, "targetPort": 80}]}
        }
    }))
    .unwrap();
    let apps: Api<Application> = env.api();
    apps.create(&PostParams::default(), &app).await.unwrap();
    let pods: Api<Pod> = env.api();
    wait_for("two Ready httpd Pods", TIMEOUT, || async {
        let list = pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .ok()?;
        (list.items.len() == 2 && list.items.iter().all(is_ready)).then_some(())
    })
    .await;

    // A client Pod in the cluster fetches the page by the Service's DNS
    // name (CoreDNS, then kube-proxy to one of the Pods). The client is the
    // Redis image, whose bash speaks TCP through /dev/tcp; busybox's static
    // wget cannot resolve names.
    start_client(&env).await;
    let host = format!("web.{}.svc.cluster.local", env.namespace);
    let script = format!(
        "exec 3<>/dev/tcp/{host}/8000 && printf 'GET / HTTP/1.0\\r\\nHost: {host}\\r\\n\\r\\n' >&3 && cat <&3"
    );
    let response = wait_for("the page through the Service", TIMEOUT, || async {
        let (ok, out) = exec(&env, "client", &["bash", "-c", &script]);
        ok.then_some(out)
    })
    .await;
    assert!(response.starts_with("HTTP/1.1 200"), "response: {response}");
    assert!(
        response.contains("podkeeper.dev/httpd"),
        "response: {response}"
    );
}

// ---- Replication (issue 13), on real redis-server Pods ----

/// A Redis with `replicas` members, a client Pod running the same image
/// (it has redis-cli; see [`start_client`]), and the primary Service's DNS
/// name.
async fn replicated(env: &TestEnv, name: &str, replicas: i32) -> String {
    create_redis(env, name, replicas, 6379).await;
    start_client(env).await;
    settled(env, name, replicas as usize).await;
    let host = format!("{name}.{}.svc.cluster.local", env.namespace);
    // Since the write fence, the primary turns Ready only once a replica
    // has linked, so the same moment as the Redis does, and the client's
    // node may not have the Service's endpoint yet (kube-proxy follows the
    // EndpointSlice within a second or two on a loaded machine; a connect
    // meanwhile is refused). Users see the same lag after any Pod turns
    // Ready; the tests wait for the Service to answer.
    wait_for("the primary Service to answer", TIMEOUT, || async {
        let (ok, out) = cli(env, &host, &["ping"]);
        (ok && out.trim() == "PONG").then_some(())
    })
    .await;
    host
}

/// Waits until the Redis is Ready (a primary accepting writes, every
/// replica linked) with `n` members; returns it.
async fn settled(env: &TestEnv, name: &str, n: usize) -> Redis {
    let redis: Api<Redis> = env.api();
    wait_for(
        &format!("{name}: Ready with {n} members"),
        TIMEOUT,
        || async {
            let r = redis.get(name).await.ok()?;
            r.settled_with(n).then_some(r)
        },
    )
    .await
}

fn primary_of(r: &Redis) -> String {
    r.primary_pod().expect("a primary").to_string()
}

/// redis-cli in the client Pod against `host`.
fn cli(env: &TestEnv, host: &str, command: &[&str]) -> (bool, String) {
    let mut args = vec!["redis-cli", "-h", host, "-p", "6379"];
    args.extend_from_slice(command);
    exec(env, "client", &args)
}

/// Distinct keys the client's writer has recorded as acknowledged so far
/// (see the rollout test); `None` if the client could not be asked.
fn acknowledged(env: &TestEnv) -> Option<usize> {
    let count = format!("sort -u {LEDGER}/acked 2>/dev/null | wc -l");
    let (ok, out) = exec(env, "client", &["sh", "-c", &count]);
    if !ok {
        return None;
    }
    out.trim().parse().ok()
}

fn role_of(env: &TestEnv, pod: &str) -> String {
    let out = redis_cli(env, pod, 6379, &["role"]);
    out.lines().next().unwrap_or_default().to_string()
}

/// An idle replicated Redis writes no status: its primary's replication
/// offset moves every 10 s (its PINGs to the replicas) and the operator
/// looks at the members every 10 s, yet nothing users read changes.
#[tokio::test]
async fn an_idle_replicated_redis_rewrites_no_status() {
    let env = TestEnv::new("kind-idle").await;
    create_redis(&env, "idle", 2, 6379).await;
    let r = settled(&env, "idle", 2).await;
    let primary = primary_of(&r);
    let redis: Api<Redis> = env.api();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let record = seen.clone();
    let follow = tokio::spawn(
        watch_from(&redis, &r.resource_version().unwrap())
            .await
            .try_for_each(move |e| {
                if let kube::api::WatchEvent::Modified(r) = e {
                    record.lock().unwrap().push(r.status);
                }
                futures::future::ready(Ok(()))
            }),
    );
    let offset = || {
        let out = redis_cli(&env, &primary, 6379, &["info", "replication"]);
        out.lines()
            .find_map(|l| l.trim().strip_prefix("master_repl_offset:"))
            .and_then(|v| v.parse::<i64>().ok())
            .expect("master_repl_offset")
    };
    let start = offset();
    // Two of the primary's PINGs, and the operator's looks between them.
    wait_for(
        "the idle primary's offset to move twice",
        TIMEOUT,
        || async { (offset() >= start + 28).then_some(()) },
    )
    .await;
    follow.abort();
    let seen = seen.lock().unwrap();
    assert!(
        seen.is_empty(),
        "the idle Redis's status was written {} time(s): {seen:#?}",
        seen.len()
    );
}

#[tokio::test]
async fn replication_one_primary_linked_replicas_and_services_that_follow_roles() {
    let env = TestEnv::new("kind-repl").await;
    let host = replicated(&env, "kv", 3).await;
    let redis: Api<Redis> = env.api();
    let r = redis.get("kv").await.unwrap();
    let primary = primary_of(&r);
    let s = r.status.as_ref().unwrap();
    for m in &s.members {
        if m.pod == primary {
            assert_eq!(
                (m.role.as_str(), m.link_status.as_str()),
                ("primary", "primary")
            );
        } else {
            assert_eq!((m.role.as_str(), m.link_status.as_str()), ("replica", "up"));
        }
    }
    assert_eq!(role_of(&env, &primary), "master");
    // Writes through the primary Service reach every replica.
    let (ok, out) = cli(&env, &host, &["set", "greeting", "hello"]);
    assert!(ok && out.trim() == "OK", "{out}");
    let (_, out) = cli(&env, &host, &["wait", "2", "5000"]);
    assert_eq!(out.trim(), "2", "both replicas acknowledged");
    // The replicas Service has endpoints once the replicas' readiness
    // probes have passed (linked, as the status already says) and
    // kube-proxy has programmed them; until then it refuses connections.
    let replicas_host = format!("kv-replicas.{}.svc.cluster.local", env.namespace);
    let out = wait_for("the replicas Service to serve reads", TIMEOUT, || async {
        let (ok, out) = cli(&env, &replicas_host, &["get", "greeting"]);
        ok.then_some(out)
    })
    .await;
    assert_eq!(out.trim(), "hello", "{out}");
    let (_, out) = cli(&env, &replicas_host, &["set", "x", "1"]);
    assert!(out.contains("READONLY"), "replicas refuse writes: {out}");
    // Spread: two workers, three Pods, no node with all of them.
    let pods = ready_pods(&env, "kv", 3).await;
    let mut nodes: Vec<String> = pods
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    nodes.sort();
    nodes.dedup();
    assert_eq!(nodes.len(), 2, "spread over both workers");
}

#[tokio::test]
async fn kill_9_of_the_primary_promotes_a_replica_and_writes_go_through_the_service() {
    let env = TestEnv::new("kind-repl-kill").await;
    let host = replicated(&env, "kv", 3).await;
    let redis: Api<Redis> = env.api();
    let old = primary_of(&redis.get("kv").await.unwrap());
    let (ok, out) = cli(&env, &host, &["set", "before", "1"]);
    assert!(ok && out.trim() == "OK", "{out}");
    let (_, out) = cli(&env, &host, &["wait", "1", "5000"]);
    assert_ne!(out.trim(), "0", "acknowledged by a replica");
    kill_9(&env, &old);
    let started = std::time::Instant::now();
    let elapsed = wait_for("writes accepted through the Service", TIMEOUT, || async {
        let (ok, out) = cli(&env, &host, &["set", "after", "2"]);
        (ok && out.trim() == "OK").then(|| started.elapsed())
    })
    .await;
    let new = primary_of(&settled(&env, "kv", 3).await);
    eprintln!("kill -9 -> writes accepted after {elapsed:?}; new primary {new}");
    let (_, out) = cli(&env, &host, &["get", "before"]);
    assert_eq!(out.trim(), "1", "the acknowledged write survived");
    // The old Pod (its container restarted empty) rejoined as a replica,
    // or the new primary is another Pod.
    let r = settled(&env, "kv", 3).await;
    let primaries: Vec<_> = r
        .status
        .as_ref()
        .unwrap()
        .members
        .iter()
        .filter(|m| m.role == "primary")
        .collect();
    assert_eq!(primaries.len(), 1, "one primary");
}

/// SIGKILL of the Pod's redis-server, from its node (inside the container
/// it is pid 1, which ignores signals sent from its own namespace).
fn kill_9(env: &TestEnv, pod: &str) {
    let (ok, out, err) = env.kubectl(&[
        "get",
        "pod",
        pod,
        "-o",
        "jsonpath={.spec.nodeName} {.status.containerStatuses[0].containerID}",
    ]);
    assert!(ok, "{err}");
    let (node, id) = out.trim().split_once(' ').unwrap();
    let id = id.trim_start_matches("containerd://");
    let pid = std::process::Command::new("docker")
        .args([
            "exec",
            node,
            "crictl",
            "inspect",
            "--output",
            "go-template",
            "--template",
            "{{.info.pid}}",
            id,
        ])
        .output()
        .unwrap();
    let pid = String::from_utf8_lossy(&pid.stdout).trim().to_string();
    assert!(!pid.is_empty(), "no pid for {pod}");
    let status = std::process::Command::new("docker")
        .args(["exec", node, "kill", "-9", &pid])
        .status()
        .unwrap();
    assert!(status.success(), "kill -9 {pid} on {node}");
}

#[tokio::test]
async fn a_deleted_primary_pod_fails_over_and_its_successor_rejoins_as_a_replica() {
    let env = TestEnv::new("kind-repl-delete").await;
    let host = replicated(&env, "kv", 3).await;
    let redis: Api<Redis> = env.api();
    let old = primary_of(&redis.get("kv").await.unwrap());
    let (ok, _) = cli(&env, &host, &["set", "k", "v"]);
    assert!(ok);
    let (_, out) = cli(&env, &host, &["wait", "2", "5000"]);
    assert_eq!(out.trim(), "2");
    let (ok, out, err) = env.kubectl(&["delete", "pod", &old, "--wait=false"]);
    assert!(ok, "{out}{err}");
    let r = wait_for("a new primary, 3 members again", TIMEOUT, || async {
        let r = settled(&env, "kv", 3).await;
        (primary_of(&r) != old && r.status.as_ref()?.members.iter().all(|m| m.pod != old))
            .then_some(r)
    })
    .await;
    let new = primary_of(&r);
    assert_eq!(role_of(&env, &new), "master");
    let (_, out) = cli(&env, &host, &["get", "k"]);
    assert_eq!(out.trim(), "v");
    for m in &r.status.as_ref().unwrap().members {
        if m.pod != new {
            assert_eq!(
                role_of(&env, &m.pod),
                "slave",
                "{} rejoined as a replica",
                m.pod
            );
            assert_eq!(redis_cli(&env, &m.pod, 6379, &["get", "k"]), "v");
        }
    }
}

#[tokio::test]
async fn scale_3_to_1_keeps_the_primary_and_its_keys() {
    let env = TestEnv::new("kind-repl-scale").await;
    let host = replicated(&env, "kv", 3).await;
    let redis: Api<Redis> = env.api();
    let primary = primary_of(&redis.get("kv").await.unwrap());
    for i in 0..100 {
        let k = format!("k{i}");
        let (ok, _) = cli(&env, &host, &["set", &k, &k]);
        assert!(ok);
    }
    redis
        .patch(
            "kv",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    let pods = ready_pods(&env, "kv", 1).await;
    assert_eq!(pods[0].name_any(), primary, "the primary stayed");
    let r = settled(&env, "kv", 1).await;
    assert_eq!(primary_of(&r), primary);
    let (_, out) = cli(&env, &host, &["dbsize"]);
    assert_eq!(out.trim(), "100", "every key kept");
}

#[tokio::test]
async fn a_rollout_switches_over_before_the_primary_goes_and_loses_no_acknowledged_write() {
    let env = TestEnv::new("kind-repl-rollout").await;
    let host = replicated(&env, "kv", 3).await;
    let redis: Api<Redis> = env.api();
    let r = redis.get("kv").await.unwrap();
    let old_primary = primary_of(&r);
    let old_pods: Vec<String> = ready_pods(&env, "kv", 3)
        .await
        .iter()
        .map(|p| p.name_any())
        .collect();
    // A writer in the client Pod: SET then WAIT 1, pipelined with QUIT on
    // one TCP connection (bash's /dev/tcp) per key; a key is acknowledged
    // only when SET answered +OK and WAIT a count of 1 or more, in that
    // order on that connection. (redis-cli reading both from a pipe sends a
    // command after a failed one on a new connection, which the Service may
    // route to another server: the WAIT would not be about the SET. And
    // matching "OK" then any digit counted a SET whose server was made a
    // replica before the WAIT: that WAIT's error reply names "Redis 4.0".)
    // What it records is on the Pod's emptyDir ([`LEDGER`]), and a
    // restarted client container starts it again (see [`start_client`]): it
    // resumes after the last key it tried, so every key it recorded as
    // acknowledged is checked, however often the client restarted. It runs until `stop` exists, then writes `total`; the lock
    // keeps it to one writer at a time.
    let script = format!(
        "d={LEDGER}; exec 9>>$d/lock; flock -n 9 || exit 0; \
         i=$(tail -n 1 $d/tried 2>/dev/null); case $i in ''|*[!0-9]*) i=0;; esac; \
         while [ ! -e $d/stop ]; do i=$((i+1)); echo $i >> $d/tried; \
         out=$(timeout 5 bash -c 'exec 3<>/dev/tcp/{host}/6379 || exit 1; \
         printf \"SET w%d %d\\r\\nWAIT 1 2000\\r\\nQUIT\\r\\n\" $0 $0 >&3; cat <&3' $i 2>/dev/null | tr -d '\\r'); \
         case \"$out\" in \"+OK\"$'\\n'':'[1-9]*) echo w$i >> $d/acked;; esac; done; echo $i > $d/total"
    );
    // Renamed into place: a running bash keeps reading the file it opened.
    let start = format!(
        "cat > {LEDGER}/writer.new <<'EOF'\n{script}\nEOF\nmv {LEDGER}/writer.new {LEDGER}/writer.sh && \
         {{ setsid bash {LEDGER}/writer.sh >/dev/null 2>&1 </dev/null & }}"
    );
    let (ok, out) = exec(&env, "client", &["bash", "-c", &start]);
    assert!(ok, "starting the writer: {out}");
    wait_for("acknowledged writes", TIMEOUT, || async {
        (acknowledged(&env)? >= 20).then_some(())
    })
    .await;
    // A template change (a config directive) rolls every Pod.
    redis
        .patch(
            "kv",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"config": {"maxmemory-policy": "allkeys-lru"}}})),
        )
        .await
        .unwrap();
    let r = wait_for(
        "the rollout to finish",
        Duration::from_secs(300),
        || async {
            let r = settled(&env, "kv", 3).await;
            let s = r.status.as_ref()?;
            let pods = ready_pods(&env, "kv", 3).await;
            (s.updated_replicas == 3 && pods.iter().all(|p| !old_pods.contains(&p.name_any())))
                .then_some(r)
        },
    )
    .await;
    assert_ne!(primary_of(&r), old_primary);
    // The writer still writes, and its writes are acknowledged after the
    // rollout too.
    let so_far = acknowledged(&env).expect("the acknowledged writes");
    wait_for("acknowledged writes after the rollout", TIMEOUT, || async {
        (acknowledged(&env)? >= so_far + 5).then_some(())
    })
    .await;
    let (ok, out) = exec(&env, "client", &["touch", &format!("{LEDGER}/stop")]);
    assert!(ok, "{out}");
    let total = wait_for("the writer to stop", TIMEOUT, || async {
        let (ok, out) = exec(&env, "client", &["cat", &format!("{LEDGER}/total")]);
        ok.then(|| out.trim().to_string())
    })
    .await;
    let acked = acknowledged(&env).expect("the acknowledged writes");
    assert!(acked >= so_far + 5, "{acked} acknowledged writes recorded");
    let check = format!(
        "n=0; for k in $(sort -u {LEDGER}/acked); do v=$(redis-cli -h {host} -p 6379 get $k); \
         [ \"$v\" = \"${{k#w}}\" ] || n=$((n+1)); done; echo $n"
    );
    let (ok, lost) = exec(&env, "client", &["sh", "-c", &check]);
    assert!(ok, "{lost}");
    let client = env.api::<Pod>().get("client").await.unwrap();
    eprintln!(
        "rollout: {acked} acknowledged of {total} writes, lost {}; the client's container restarted {} time(s)",
        lost.trim(),
        restarts(&client)
    );
    assert_eq!(lost.trim(), "0", "acknowledged writes lost");
    let (ok, out, _) = env.kubectl(&["events", "--for", "redis/kv"]);
    assert!(ok && out.contains("SwitchingOver"), "{out}");
}

#[tokio::test]
async fn an_image_rollout_updates_pods_in_place_keeping_their_ips_and_the_replicas_resync() {
    use podkeeper_dev::kind::versions::REDIS_ROLLOUT_IMAGES;
    let env = TestEnv::new("kind-in-place").await;
    let host = replicated(&env, "kv", 3).await;
    let redis: Api<Redis> = env.api();
    let old_primary = primary_of(&redis.get("kv").await.unwrap());
    // 100 keys, on both replicas before the rollout starts.
    let (ok, out) = cli(
        &env,
        &host,
        &[
            "eval",
            "for i=1,100 do redis.call('set','k'..i,i) end return 1",
            "0",
        ],
    );
    assert!(ok, "{out}");
    let (ok, out) = cli(&env, &host, &["wait", "2", "5000"]);
    assert!(ok && out.trim() == "2", "WAIT 2: {out}");
    let before = PodIdentity::of_all(&ready_pods(&env, "kv", 3).await);

    let new_image = REDIS_ROLLOUT_IMAGES[0];
    redis
        .patch(
            "kv",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"image": new_image}})),
        )
        .await
        .unwrap();
    let pods: Api<Pod> = env.api();
    let (r, after) = wait_for(
        "every Pod running the new image, the Redis Ready",
        Duration::from_secs(300),
        || async {
            let r = redis.get("kv").await.ok()?;
            if !r.settled_with(3) {
                return None;
            }
            let uid = r.uid()?;
            let live: Vec<Pod> = pods
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter(|p| owned_by(p, &uid) && p.metadata.deletion_timestamp.is_none())
                .collect();
            let on_new = live.iter().all(|p| {
                p.status
                    .as_ref()
                    .and_then(|s| s.container_statuses.as_ref())
                    .is_some_and(|cs| {
                        cs.iter().all(|c| {
                            c.ready && podkeeper::podset::inplace::same_image(&c.image, new_image)
                        })
                    })
            });
            (live.len() == 3 && on_new).then_some((r, live))
        },
    )
    .await;
    assert_eq!(
        PodIdentity::of_all(&after),
        before,
        "every Pod kept its name, UID, IP and node"
    );
    for p in &after {
        let restarts: i32 = p
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .map(|cs| cs.iter().map(|c| c.restart_count).sum())
            .unwrap_or(0);
        assert!(
            restarts >= 1,
            "{}: its container restarted on the new image",
            p.name_any()
        );
    }
    // The old primary handed its role over before it was updated.
    assert_ne!(primary_of(&r), old_primary, "a switchover happened");
    let mut masters = 0;
    for p in &after {
        let name = p.name_any();
        if role_of(&env, &name) == "master" {
            masters += 1;
        }
        // Every member resynchronised from the primary: all keys there.
        assert_eq!(redis_cli(&env, &name, 6379, &["dbsize"]), "100", "{name}");
    }
    assert_eq!(masters, 1, "one primary");
    let (ok, out, _) = env.kubectl(&["events", "--for", "redis/kv"]);
    assert!(ok && out.contains("SwitchingOver"), "{out}");
    for PodIdentity { name, .. } in &before {
        assert!(
            out.contains(&format!(
                "Updated Pod {name} in place: image {REDIS_IMAGE} -> {new_image}"
            )),
            "{name}: {out}"
        );
    }
}

#[tokio::test]
async fn a_generated_password_guards_every_member_and_replication_uses_it() {
    let env = TestEnv::new("kind-repl-auth").await;
    let redis: Redis = serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1",
        "kind": "Redis",
        "metadata": {"name": "locked"},
        "spec": {"replicas": 2, "image": REDIS_IMAGE, "auth": {"secretName": "locked-auth"}},
    }))
    .unwrap();
    env.api::<Redis>()
        .create(&PostParams::default(), &redis)
        .await
        .unwrap();
    // Ready: the replica is linked, so it logged in to the primary with
    // the generated password.
    let r = settled(&env, "locked", 2).await;
    let secret = env
        .api::<k8s_openapi::api::core::v1::Secret>()
        .get("locked-auth")
        .await
        .unwrap();
    let password = String::from_utf8(secret.data.as_ref().unwrap()["password"].0.clone()).unwrap();
    assert_eq!(password.len(), 32);
    let primary = primary_of(&r);
    let replica = r
        .status
        .as_ref()
        .unwrap()
        .members
        .iter()
        .find(|m| m.pod != primary)
        .unwrap()
        .pod
        .clone();
    // redis-cli takes the member's password variable from REDISCLI_AUTH,
    // as the readiness probe does: it is on no command line.
    let authed = |pod: &str, command: &[&str]| {
        let script = format!(
            "REDISCLI_AUTH=\"${}\" exec redis-cli -p 6379 {}",
            podkeeper::redis::replication::config::PASSWORD_ENV,
            command.join(" ")
        );
        exec(&env, pod, &["sh", "-c", &script])
    };
    for pod in [&primary, &replica] {
        let (ok, cmdline) = exec(&env, pod, &["cat", "/proc/1/cmdline"]);
        assert!(ok && !cmdline.contains(&password), "{pod}: {cmdline:?}");
    }
    let (_, out) = exec(
        &env,
        &primary,
        &["redis-cli", "-p", "6379", "set", "k", "v"],
    );
    assert!(
        out.contains("NOAUTH"),
        "a client without the password: {out}"
    );
    let (ok, out) = authed(&primary, &["set", "k", "v"]);
    assert!(ok && out.trim() == "OK", "{out}");
    let (_, out) = authed(&primary, &["wait", "1", "5000"]);
    assert_eq!(out.trim(), "1", "the replica acknowledged");
    let (ok, out) = authed(&replica, &["get", "k"]);
    assert!(ok && out.trim() == "v", "{out}");
}

/// A quota of no Services: the Pods come up and replicate, but a client
/// cannot reach the Redis yet, so it is not Ready (`ServicesPending`, naming
/// both Services). Lifting the quota is the only change: both Services come
/// and the Redis turns Ready, so `kubectl wait --for=condition=Ready` means a
/// client can connect.
#[tokio::test]
async fn a_redis_is_not_ready_until_its_services_exist() {
    use k8s_openapi::api::core::v1::Service;
    let env = TestEnv::new("kind-svc-pending").await;
    let recorder = crate::bounds::Recorder::start(&env).await;
    env.cap("services", 0).await;

    create_redis(&env, "kv", 2, 6379).await;
    let redis: Api<Redis> = env.api();
    let (status, _, message) = wait_for("Ready False: ServicesPending", TIMEOUT, || async {
        let r = redis.get("kv").await.ok()?;
        let replicated = r
            .status
            .as_ref()?
            .conditions
            .iter()
            .any(|c| c.type_ == "Replicated" && c.status == "True");
        let ready = ready_condition(&r);
        (replicated && ready.1 == "ServicesPending").then_some(ready)
    })
    .await;
    assert_eq!(status, "False");
    assert!(
        message.contains("kv") && message.contains("kv-replicas"),
        "{message}"
    );
    let services: Api<Service> = env.api();
    assert!(services.get_opt("kv").await.unwrap().is_none());

    env.uncap("services").await;
    let (ok, out, err) = env.kubectl(&[
        "wait",
        "redis/kv",
        "--for=condition=Ready",
        "--timeout=180s",
    ]);
    assert!(ok, "kubectl wait: {out}{err}");
    for name in ["kv", "kv-replicas"] {
        assert!(
            services.get_opt(name).await.unwrap().is_some(),
            "Service {name} exists once the Redis is Ready"
        );
    }
    let r = redis.get("kv").await.unwrap();
    assert_eq!(ready_condition(&r).1, "Replicated");
    // At every Pod event, refused or not: never more live Pods than asked.
    recorder
        .check()
        .assert_held("Services refused by a quota, then lifted");
}
