//! The I/O of the Redis measurements on kind: one namespace with a Redis, a
//! client Pod running the [`writer`](super::writer) script, `kubectl exec`,
//! `kill -9` from the node, and a watch that checks the one-primary
//! invariant at every Pod and Redis event. The `kind-e2e` tests use the same
//! pieces.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;

use super::writer;
use podkeeper::api::Redis;
use podkeeper::api::names::ROLE_LABEL;
use podkeeper::podset::pods::pod_is_ready;

fn other(e: impl std::fmt::Display) -> crate::Error {
    crate::Error::Other(e.to_string())
}

/// Seconds since the epoch, as the writer's log has them.
pub fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs_f64()
}

/// The machine's load averages (`/proc/loadavg`), to print next to figures.
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// Whether `kubectl exec` failed because the container is not running: it
/// died or failed to start and the kubelet has not started it again yet.
/// The kubelet says "container not found", containerd "CONTAINER_EXITED"
/// or "cannot exec in a stopped state".
pub fn container_restarting(stderr: &str) -> bool {
    [
        "container not found",
        "CONTAINER_EXITED",
        "cannot exec in a stopped state",
    ]
    .iter()
    .any(|s| stderr.contains(s))
}

/// A namespace on the cluster of `kubeconfig`, with a client Pod.
pub struct Session {
    pub client: Client,
    pub kubeconfig: PathBuf,
    pub namespace: String,
}

/// The client Pod's name.
pub const CLIENT: &str = "client";
/// The writer's `WAIT` timeout, ms.
pub const WAIT_TIMEOUT_MS: u32 = 1000;

impl Session {
    /// Creates `namespace` (deleting a leftover of the same name first) and
    /// the client Pod (our Redis image, for redis-cli and bash).
    pub async fn create(
        kubeconfig: &Path,
        namespace: &str,
        client_image: &str,
    ) -> Result<Session, crate::Error> {
        let config = kube::Config::from_custom_kubeconfig(
            kube::config::Kubeconfig::read_from(kubeconfig).map_err(other)?,
            &Default::default(),
        )
        .await
        .map_err(other)?;
        let client = Client::try_from(config)?;
        let namespaces: Api<Namespace> = Api::all(client.clone());
        if namespaces.get_opt(namespace).await?.is_some() {
            let _ = namespaces.delete(namespace, &DeleteParams::default()).await;
            wait(
                &format!("the old namespace {namespace} to go"),
                Duration::from_secs(300),
                || async {
                    namespaces
                        .get_opt(namespace)
                        .await
                        .ok()?
                        .is_none()
                        .then_some(())
                },
            )
            .await?;
        }
        let ns = Namespace {
            metadata: ObjectMeta {
                name: Some(namespace.into()),
                ..Default::default()
            },
            ..Default::default()
        };
        namespaces.create(&PostParams::default(), &ns).await?;
        Session::within(client, kubeconfig, namespace, client_image).await
    }

    /// The client Pod in an existing namespace.
    pub async fn within(
        client: Client,
        kubeconfig: &Path,
        namespace: &str,
        client_image: &str,
    ) -> Result<Session, crate::Error> {
        let session = Session {
            client,
            kubeconfig: kubeconfig.to_path_buf(),
            namespace: namespace.into(),
        };
        session.add_client(CLIENT, client_image, None).await?;
        Ok(session)
    }

    /// A client Pod `name` running the writer's container command, on
    /// `node` if given (then it tolerates every taint: the control plane's
    /// node too).
    pub async fn add_client(
        &self,
        name: &str,
        image: &str,
        node: Option<&str>,
    ) -> Result<(), crate::Error> {
        // restartPolicy Always, as a user's Pod's would be: a container
        // that fails to start on a loaded machine (`runc create failed: ...
        // unable to freeze`) or dies is started again, and the writer with
        // it (see `writer::client_command`); the writer's log is on the
        // emptyDir, which outlives the container.
        let mut pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "restartPolicy": "Always",
                "terminationGracePeriodSeconds": 1,
                "volumes": [{"name": "ledger", "emptyDir": {}}],
                "containers": [{
                    "name": "client", "image": image,
                    "imagePullPolicy": "IfNotPresent",
                    "command": ["bash", "-c", writer::client_command()],
                    "volumeMounts": [{"name": "ledger", "mountPath": writer::DIR}],
                }],
            },
        }))?;
        if let (Some(node), Some(spec)) = (node, pod.spec.as_mut()) {
            spec.node_name = Some(node.to_string());
            spec.tolerations = Some(vec![serde_json::from_value(json!({"operator": "Exists"}))?]);
        }
        let pods: Api<Pod> = self.api();
        pods.create(&PostParams::default(), &pod).await?;
        wait(
            &format!("the client Pod {name}"),
            Duration::from_secs(300),
            || async { pods.get(name).await.ok().filter(pod_is_ready).map(|_| ()) },
        )
        .await
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug,
        K::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// `kubectl` in the namespace: (success, stdout, stderr).
    pub fn kubectl(&self, args: &[&str]) -> (bool, String, String) {
        let out = Command::new("kubectl")
            .env("KUBECONFIG", &self.kubeconfig)
            .arg("-n")
            .arg(&self.namespace)
            .args(args)
            .output();
        match out {
            Ok(o) => (
                o.status.success(),
                String::from_utf8_lossy(&o.stdout).into_owned(),
                String::from_utf8_lossy(&o.stderr).into_owned(),
            ),
            Err(e) => (false, String::new(), format!("kubectl: {e}")),
        }
    }

    /// `kubectl exec` of `bash -c script` in `pod`; the exec stream over the
    /// API server sometimes closes early on a loaded machine, so that
    /// transport error is retried, and so, for up to a minute, is an exec
    /// into a container that is not running while the kubelet starts it
    /// again (callers only run repeatable scripts).
    pub fn sh(&self, pod: &str, script: &str) -> Result<String, crate::Error> {
        let restarted_by = Instant::now() + Duration::from_secs(60);
        let mut attempts = 0;
        loop {
            let (ok, out, err) = self.kubectl(&["exec", pod, "--", "bash", "-c", script]);
            if ok {
                return Ok(out);
            }
            if container_restarting(&err) && Instant::now() < restarted_by {
                std::thread::sleep(Duration::from_secs(1));
                continue;
            }
            attempts += 1;
            if attempts == 4
                || !(err.contains("closed all streams") || err.contains("error dialing backend"))
            {
                return Err(other(format!("exec in {pod}: {out}{err}")));
            }
        }
    }

    /// How many times the client Pod's container was started again (a
    /// failed start counts). Its writer resumed each time; a pause or gap
    /// around a restart includes the client's own.
    pub async fn client_restarts(&self) -> Result<i32, crate::Error> {
        let p = self.api::<Pod>().get(CLIENT).await?;
        Ok(p.status
            .and_then(|s| s.container_statuses)
            .and_then(|c| c.first().map(|c| c.restart_count))
            .unwrap_or(0))
    }

    /// Starts the writer in the client Pod, detached from the exec, and
    /// returns once it has started a new log (a previous writer is stopped
    /// and its log removed first, so that counts start from zero). The
    /// script is kept in the Pod's emptyDir, for a restarted container to
    /// start it again (see [`writer::client_command`]); it is renamed into
    /// place, as a running bash keeps reading the file it opened.
    pub async fn start_writer(
        &self,
        host: &str,
        port: u16,
        replicas: u32,
    ) -> Result<(), crate::Error> {
        self.start_writer_in(CLIENT, "w", host, port, replicas)
            .await
    }

    /// [`Session::start_writer`] in the client Pod `pod`, with keys
    /// `<prefix>1`, `<prefix>2`, ...
    pub async fn start_writer_in(
        &self,
        pod: &str,
        prefix: &str,
        host: &str,
        port: u16,
        replicas: u32,
    ) -> Result<(), crate::Error> {
        let script = writer::keyed_script(prefix, host, port, replicas, WAIT_TIMEOUT_MS);
        self.start_script_in(pod, &script).await
    }

    /// Starts a writer `script` (one of [`writer`]'s, whose log format the
    /// rest of the session reads) in the client Pod `pod`, as
    /// [`Session::start_writer`] does.
    pub async fn start_script_in(&self, pod: &str, script: &str) -> Result<(), crate::Error> {
        let quoted = script.replace('\'', r"'\''");
        self.sh(
            pod,
            &format!(
                "touch {stop}; flock -w 30 {lock} true || exit 1; rm -f {log} {stop}; \
                 printf '%s\n' '{quoted}' > {file}.new && mv {file}.new {file} && \
                 {{ setsid bash {file} >/dev/null 2>&1 </dev/null & }}",
                log = writer::LOG,
                stop = writer::STOP,
                lock = writer::LOCK,
                file = writer::SCRIPT,
            ),
        )?;
        let started = format!("test -e {}", writer::LOG);
        wait("the writer's log", Duration::from_secs(60), || async {
            self.sh(pod, &started).ok().map(|_| ())
        })
        .await
    }

    /// The writer's log so far, parsed.
    pub fn writes(&self) -> Result<(Vec<writer::Attempt>, bool), crate::Error> {
        self.writes_in(CLIENT)
    }

    /// The log of the writer in the client Pod `pod` so far, parsed.
    pub fn writes_in(&self, pod: &str) -> Result<(Vec<writer::Attempt>, bool), crate::Error> {
        let log = self.sh(pod, &format!("cat {}", writer::LOG))?;
        Ok((writer::parse(&log), writer::finished(&log)))
    }

    /// Stops the writer and returns its whole log.
    pub async fn stop_writer(&self) -> Result<Vec<writer::Attempt>, crate::Error> {
        self.stop_writer_in(CLIENT).await
    }

    /// Stops the writer in the client Pod `pod` and returns its whole log.
    pub async fn stop_writer_in(&self, pod: &str) -> Result<Vec<writer::Attempt>, crate::Error> {
        self.sh(pod, &format!("touch {}", writer::STOP))?;
        let last = format!("tail -n 1 {}", writer::LOG);
        wait("the writer to stop", Duration::from_secs(60), || async {
            (self.sh(pod, &last).ok()?.trim() == "done").then_some(())
        })
        .await?;
        let (writes, finished) = self.writes_in(pod)?;
        debug_assert!(finished);
        Ok(writes)
    }

    /// How many writes the writer has had accepted so far (counted in the
    /// client Pod: the log itself grows to megabytes).
    fn accepted_count(&self, pod: &str) -> Result<usize, crate::Error> {
        let out = self.sh(
            pod,
            &format!("grep -c '^[^ ]* [^ ]* [^ ]* 1 ' {} || true", writer::LOG),
        )?;
        out.trim()
            .parse()
            .map_err(|_| other(format!("counting accepted writes: {out}")))
    }

    /// Waits until the writer has had `n` more writes accepted.
    pub async fn writes_accepted(&self, n: usize) -> Result<(), crate::Error> {
        self.writes_accepted_in(CLIENT, n).await
    }

    /// Waits until the writer in `pod` has had `n` more writes accepted.
    pub async fn writes_accepted_in(&self, pod: &str, n: usize) -> Result<(), crate::Error> {
        let base = self.accepted_count(pod)?;
        wait("accepted writes", Duration::from_secs(120), || async {
            (self.accepted_count(pod).ok()? >= base + n).then_some(())
        })
        .await
    }

    /// Acknowledged keys of `attempts` missing (or wrong) on `host` now.
    pub fn lost(
        &self,
        host: &str,
        port: u16,
        acknowledged: &[u64],
    ) -> Result<Vec<u64>, crate::Error> {
        self.lost_keyed("w", host, port, acknowledged)
    }

    /// [`Session::lost`] for the keys `<prefix>N` (read from the client Pod).
    pub fn lost_keyed(
        &self,
        prefix: &str,
        host: &str,
        port: u16,
        acknowledged: &[u64],
    ) -> Result<Vec<u64>, crate::Error> {
        self.lost_keyed_from(CLIENT, prefix, host, port, acknowledged)
    }

    /// [`Session::lost_keyed`], read from the client Pod `pod`. A read-back
    /// that is not one value per key (a refused connection, a server
    /// answering `LOADING`) is tried again for up to a minute, then is an
    /// error: it must not count as keys lost.
    pub fn lost_keyed_from(
        &self,
        pod: &str,
        prefix: &str,
        host: &str,
        port: u16,
        acknowledged: &[u64],
    ) -> Result<Vec<u64>, crate::Error> {
        let Some(&max) = acknowledged.iter().max() else {
            return Ok(Vec::new());
        };
        let script = writer::keyed_read_back_script(prefix, host, port, max);
        let until = Instant::now() + Duration::from_secs(60);
        loop {
            let read = self.sh(pod, &script)?;
            let lines = read.lines().count() as u64;
            let errors = read.lines().find(|l| {
                l.starts_with("Could not") || l.contains("ERR") || l.starts_with("LOADING")
            });
            if lines == max && errors.is_none() {
                return Ok(writer::lost(acknowledged, &read));
            }
            if Instant::now() > until {
                return Err(other(format!(
                    "reading back {max} keys {prefix}N from {host} in {pod}: {lines} lines, {}",
                    errors.unwrap_or("")
                )));
            }
            std::thread::sleep(Duration::from_secs(2));
        }
    }

    /// redis-cli in `pod` against its own server, with the member's
    /// password if spec.auth gave it one.
    pub fn redis_cli(&self, pod: &str, port: u16, command: &str) -> Result<String, crate::Error> {
        let pw = podkeeper::redis::replication::config::PASSWORD_ENV;
        Ok(self
            .sh(
                pod,
                &format!("[ -z \"${pw}\" ] || export REDISCLI_AUTH=\"${pw}\"; redis-cli -p {port} {command}"),
            )?
            .trim()
            .to_string())
    }

    /// The run id of the redis-server in `pod`.
    pub fn run_id(&self, pod: &str, port: u16) -> Result<String, crate::Error> {
        let info = self.redis_cli(pod, port, "info server")?;
        info.lines()
            .find_map(|l| l.strip_prefix("run_id:"))
            .map(|r| r.trim().to_string())
            .ok_or_else(|| other(format!("no run_id from {pod}")))
    }

    /// The ClusterIP of a Service.
    pub async fn cluster_ip(&self, service: &str) -> Result<String, crate::Error> {
        let services: Api<Service> = self.api();
        wait(
            &format!("Service {service}"),
            Duration::from_secs(120),
            || async { services.get(service).await.ok()?.spec?.cluster_ip },
        )
        .await
    }

    /// SIGKILL of the redis-server of `pod`'s first container, from its node
    /// (kind nodes are Docker containers; in the Pod it is pid 1, which
    /// ignores signals sent from its own namespace). Returns, once the
    /// container has restarted, when the `docker exec` that sent the kill
    /// started (seconds since the epoch).
    pub async fn kill_9(&self, pod: &str) -> Result<f64, crate::Error> {
        let pods: Api<Pod> = self.api();
        let restarts = |p: &Pod| {
            p.status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .and_then(|c| c.first())
                .map_or(0, |c| c.restart_count)
        };
        let before = restarts(&pods.get(pod).await?);
        let sent = self.kill_9_now(pod)?;
        // The kubelet's crash-loop back-off (10 s, doubling up to 5 min)
        // delays the restart of a container killed again and again.
        wait(
            &format!("{pod}'s container to restart"),
            Duration::from_secs(400),
            || async { (restarts(&pods.get(pod).await.ok()?) > before).then_some(()) },
        )
        .await?;
        Ok(sent)
    }

    /// SIGKILL of the redis-server of `pod`'s first container, as
    /// [`Session::kill_9`] sends it, without waiting for a restart (for Pods
    /// whose restartPolicy is Never). Returns when the `docker exec` that
    /// sent it started (seconds since the epoch).
    pub fn kill_9_now(&self, pod: &str) -> Result<f64, crate::Error> {
        let (ok, out, err) = self.kubectl(&[
            "get",
            "pod",
            pod,
            "-o",
            "jsonpath={.spec.nodeName} {.status.containerStatuses[0].containerID}",
        ]);
        if !ok {
            return Err(other(err));
        }
        let (node, id) = out
            .trim()
            .split_once(' ')
            .ok_or_else(|| other(format!("no node/container for {pod}: {out}")))?;
        let id = id.trim_start_matches("containerd://");
        let script = format!(
            "kill -9 $(crictl inspect --output go-template --template '{{{{.info.pid}}}}' {id})"
        );
        let sent = now();
        let status = Command::new("docker")
            .args(["exec", node, "sh", "-c", &script])
            .output()
            .map_err(other)?;
        if !status.status.success() {
            return Err(other(format!(
                "kill -9 in {pod} on {node}: {}",
                String::from_utf8_lossy(&status.stderr)
            )));
        }
        Ok(sent)
    }

    /// Creates a Redis.
    pub async fn create_redis(
        &self,
        name: &str,
        replicas: i32,
        image: &str,
    ) -> Result<(), crate::Error> {
        let redis: Redis = serde_json::from_value(json!({
            "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
            "metadata": {"name": name},
            "spec": {"replicas": replicas, "port": 6379, "image": image},
        }))?;
        self.api::<Redis>()
            .create(&PostParams::default(), &redis)
            .await?;
        Ok(())
    }

    /// Creates a Redis `name` with `spec` as given (say with `storage`).
    pub async fn create_redis_spec(
        &self,
        name: &str,
        spec: serde_json::Value,
    ) -> Result<(), crate::Error> {
        let redis: Redis = serde_json::from_value(json!({
            "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
            "metadata": {"name": name},
            "spec": spec,
        }))?;
        self.api::<Redis>()
            .create(&PostParams::default(), &redis)
            .await?;
        Ok(())
    }

    pub async fn patch_redis(
        &self,
        name: &str,
        spec: serde_json::Value,
    ) -> Result<(), crate::Error> {
        self.api::<Redis>()
            .patch(
                name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "spec": spec })),
            )
            .await?;
        Ok(())
    }

    /// Waits until the Redis is Ready for its generation with `n` members,
    /// all updated, and exactly `n` live Pods; returns it and its Pods.
    pub async fn settled(
        &self,
        name: &str,
        n: usize,
        timeout: Duration,
    ) -> Result<(Redis, Vec<Pod>), crate::Error> {
        let redis: Api<Redis> = self.api();
        let pods: Api<Pod> = self.api();
        wait(
            &format!("{name}: Ready with {n} members"),
            timeout,
            || async {
                let r = redis.get(name).await.ok()?;
                if !r.settled_with(n) {
                    return None;
                }
                let s = r.status.as_ref()?;
                let live = member_pods(&pods, name).await?;
                let mut names: Vec<String> = live.iter().map(|p| p.name_any()).collect();
                let mut members: Vec<String> = s.members.iter().map(|m| m.pod.clone()).collect();
                names.sort();
                members.sort();
                (names == members && live.iter().all(pod_is_ready)).then_some((r, live))
            },
        )
        .await
    }
}

impl Session {
    /// The invariant at rest, asked of every redis-server itself once the
    /// Redis has settled with `n` members: exactly `n` live Pods, one of them
    /// a master (the status's primary), and every other one its replica with
    /// the link up. Returns what is wrong, empty if nothing.
    pub async fn at_rest(
        &self,
        name: &str,
        n: usize,
        port: u16,
    ) -> Result<Vec<String>, crate::Error> {
        // Statuses lag the Pods by a reconcile: what is wrong must stay so.
        let start = Instant::now();
        loop {
            let wrong = self.at_rest_once(name, n, port).await?;
            if wrong.is_empty() || start.elapsed() > Duration::from_secs(120) {
                return Ok(wrong);
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    async fn at_rest_once(
        &self,
        name: &str,
        n: usize,
        port: u16,
    ) -> Result<Vec<String>, crate::Error> {
        let (r, pods) = self.settled(name, n, Duration::from_secs(600)).await?;
        let primary = r.primary_pod().unwrap_or_default().to_string();
        let primary_ip = pods
            .iter()
            .find(|p| p.name_any() == primary)
            .and_then(|p| p.status.as_ref()?.pod_ip.clone())
            .unwrap_or_default();
        let mut wrong = Vec::new();
        if pods.len() != n {
            wrong.push(format!("{} live Pods, want {n}", pods.len()));
        }
        for p in &pods {
            let pod = p.name_any();
            let info = self.redis_cli(&pod, port, "info replication")?;
            let field = |k: &str| {
                info.lines()
                    .find_map(|l| l.strip_prefix(&format!("{k}:")))
                    .map(|v| v.trim().to_string())
                    .unwrap_or_default()
            };
            let role = field("role");
            if pod == primary {
                if role != "master" {
                    wrong.push(format!(
                        "{pod} is the status's primary but its role is {role}"
                    ));
                }
            } else if role != "slave" {
                wrong.push(format!("{pod} is a second {role} (primary {primary})"));
            } else if field("master_host") != primary_ip || field("master_link_status") != "up" {
                wrong.push(format!(
                    "{pod} replicates {}:{} (link {}), not {primary} at {primary_ip}",
                    field("master_host"),
                    field("master_port"),
                    field("master_link_status")
                ));
            }
        }
        Ok(wrong)
    }
}

/// The live (not terminating) Pods of Redis `name`.
pub async fn member_pods(pods: &Api<Pod>, name: &str) -> Option<Vec<Pod>> {
    let selector = podkeeper::redis::pod::selector_string(name);
    Some(
        pods.list(&ListParams::default().labels(&selector))
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect(),
    )
}

/// Polls `f` every 200 ms until it gives a value, for at most `timeout`.
pub async fn wait<T, F, Fut>(what: &str, timeout: Duration, mut f: F) -> Result<T, crate::Error>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = f().await {
            return Ok(v);
        }
        if start.elapsed() > timeout {
            return Err(other(format!(
                "timed out after {timeout:?} waiting for {what}"
            )));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// What the invariant watch saw.
#[derive(Clone, Debug, Default)]
pub struct Invariants {
    /// Pod and Redis events checked.
    pub events: usize,
    /// Each time more than one Pod carried the primary label, or the status
    /// named more than one primary member.
    pub violations: Vec<String>,
}

/// Watches the Pods and the Redis `name` and, at every event, checks that at
/// most one live Pod carries `podkeeper.dev/role=primary` and that the
/// status lists at most one member as primary.
pub struct InvariantWatch {
    seen: Arc<Mutex<Invariants>>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl InvariantWatch {
    pub fn start(session: &Session, name: &str) -> InvariantWatch {
        let seen = Arc::new(Mutex::new(Invariants::default()));
        let pods: Api<Pod> = session.api();
        let selector = podkeeper::redis::pod::selector_string(name);
        let pod_seen = seen.clone();
        let pod_task = tokio::spawn(async move {
            let mut live: std::collections::BTreeMap<String, bool> = Default::default();
            let config = watcher::Config::default().labels(&selector);
            let mut events = std::pin::pin!(watcher(pods, config).default_backoff());
            while let Some(event) = events.next().await {
                let Ok(event) = event else { continue };
                match event {
                    watcher::Event::Init => live.clear(),
                    watcher::Event::InitApply(p) | watcher::Event::Apply(p) => {
                        let primary = p.labels().get(ROLE_LABEL).map(String::as_str)
                            == Some("primary")
                            && p.metadata.deletion_timestamp.is_none();
                        live.insert(p.name_any(), primary);
                    }
                    watcher::Event::Delete(p) => {
                        live.remove(&p.name_any());
                    }
                    watcher::Event::InitDone => {}
                }
                let primaries: Vec<&String> =
                    live.iter().filter(|(_, p)| **p).map(|(n, _)| n).collect();
                let mut s = pod_seen.lock().unwrap();
                s.events += 1;
                if primaries.len() > 1 {
                    s.violations.push(format!(
                        "{:.3}: Pods labelled primary: {primaries:?}",
                        now()
                    ));
                }
            }
        });
        let redis: Api<Redis> = session.api();
        let field = format!("metadata.name={name}");
        let redis_seen = seen.clone();
        let redis_task = tokio::spawn(async move {
            let config = watcher::Config::default().fields(&field);
            let mut events = std::pin::pin!(watcher(redis, config).default_backoff());
            while let Some(event) = events.next().await {
                let Ok(watcher::Event::Apply(r) | watcher::Event::InitApply(r)) = event else {
                    continue;
                };
                let primaries: Vec<String> = r
                    .status
                    .iter()
                    .flat_map(|s| s.members.iter())
                    .filter(|m| m.role == "primary")
                    .map(|m| m.pod.clone())
                    .collect();
                let mut s = redis_seen.lock().unwrap();
                s.events += 1;
                if primaries.len() > 1 {
                    s.violations.push(format!(
                        "{:.3}: status members primary: {primaries:?}",
                        now()
                    ));
                }
            }
        });
        InvariantWatch {
            seen,
            tasks: vec![pod_task, redis_task],
        }
    }

    pub fn seen(&self) -> Invariants {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for InvariantWatch {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}
