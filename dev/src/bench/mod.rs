//! `podkeeper bench`: podkeeper side by side with kube-controller-manager's
//! ReplicaSet controller and with the apiserver's own ceiling, in one run on
//! the local control plane (kwok nodes, apiserver in-flight limits off,
//! controller-manager and scheduler at 5000 QPS).
//!
//! The operator runs as its own process (the same binary, `podkeeper run`,
//! with leader election on, as deployed) so that its CPU and memory are its
//! own, and with its own client identity and User-Agent so that the
//! apiserver's audit log tells its requests apart.
//!
//! Each contender gets a clean cluster in turn and goes through its whole
//! life: converge N×R Pods, heal K deleted Pods one at a time, (podkeeper
//! only) sit idle, scale down to one replica, and delete everything. Then
//! the ceiling (the same Pods created directly) and the ReplicaSet
//! controller once more at its default QPS.

mod clock;
pub mod measure;
pub mod redis;
pub mod report;

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::apps::v1::ReplicaSet;
use k8s_openapi::api::core::v1::{Namespace, Pod, Service};
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use serde_json::json;

use self::clock::{Clock, State, controller_uid};
use self::measure::{ProcSample, count_requests, is_write};
use self::report::{Convergence, Healing, Idle, Phases, Role, Teardown};
pub use self::report::{Markdown, Report};
use crate::cli::BenchArgs;
use crate::localcluster::{ClusterOptions, LocalCluster, versions};
use podkeeper::api::Redis;
use podkeeper::podset::pods::pod_is_ready;

/// Requests in flight when the driver creates, scales or deletes objects.
const CONCURRENCY: usize = 64;
/// How long any one wait may take before the run fails.
const TIMEOUT: Duration = Duration::from_secs(1800);
const PODKEEPER_AGENT: &str = podkeeper::operator::USER_AGENT;
const REPLICASET_AGENT: &str = "replicaset-controller";

fn other(e: impl std::fmt::Display) -> crate::Error {
    crate::Error::Other(e.to_string())
}

fn pod_bound(p: &Pod) -> bool {
    p.spec.as_ref().is_some_and(|s| s.node_name.is_some())
}

fn never(_: &impl Resource) -> bool {
    false
}

/// Status of a Redis shows `replicas` Pods, all ready, for its generation.
fn redis_settled(r: &Redis, replicas: usize) -> bool {
    r.status.as_ref().is_some_and(|s| {
        s.replicas == replicas as i32
            && s.ready_replicas == replicas as i32
            && s.observed_generation == r.metadata.generation
            // status.members and Progressing count terminating Pods until
            // they are gone.
            && s.members.len() == replicas
            && s
                .conditions
                .iter()
                .any(|c| c.type_ == "Progressing" && c.reason == "Complete")
    })
}

fn replicaset_settled(r: &ReplicaSet, replicas: usize) -> bool {
    r.status.as_ref().is_some_and(|s| {
        s.replicas == replicas as i32
            && s.ready_replicas == Some(replicas as i32)
            && s.observed_generation == r.metadata.generation
            // As for a Redis: the status has seen its terminating Pods go
            // (`terminatingReplicas`, on by default since Kubernetes 1.35).
            && s.terminating_replicas.unwrap_or(0) == 0
    })
}

/// The operator under test, as a child process.
struct OperatorProcess {
    child: tokio::process::Child,
    pid: u32,
    /// Started under PODKEEPER_BENCH_OPERATOR_WRAPPER.
    wrapped: bool,
    log: PathBuf,
    _kubeconfig: tempfile::NamedTempFile,
}

impl OperatorProcess {
    fn start(cluster: &LocalCluster, log: &Path) -> Result<Self, crate::Error> {
        let kubeconfig = tempfile::NamedTempFile::new().map_err(other)?;
        let yaml = serde_yaml_ng::to_string(cluster.operator_kubeconfig()).map_err(other)?;
        std::fs::write(kubeconfig.path(), yaml).map_err(other)?;
        let out = std::fs::File::create(log).map_err(other)?;
        let err = out.try_clone().map_err(other)?;
        let exe = std::env::current_exe().map_err(other)?;
        // PODKEEPER_BENCH_OPERATOR_WRAPPER prefixes the operator's command
        // (say `heaptrack -o /tmp/hp`, with a build whose allocator it sees:
        // `--features glibc-malloc`); RSS and CPU are then the operator's,
        // a child of the wrapper, which gets a SIGTERM at the end.
        let wrapper: Vec<String> = std::env::var("PODKEEPER_BENCH_OPERATOR_WRAPPER")
            .unwrap_or_default()
            .split_whitespace()
            .map(String::from)
            .collect();
        let mut cmd = if Path::new("/usr/bin/setpriv").exists() {
            let mut c = tokio::process::Command::new("/usr/bin/setpriv");
            c.args(["--pdeathsig", "KILL", "--"])
                .args(&wrapper)
                .arg(&exe);
            c
        } else if let Some((first, rest)) = wrapper.split_first() {
            let mut c = tokio::process::Command::new(first);
            c.args(rest).arg(&exe);
            c
        } else {
            tokio::process::Command::new(&exe)
        };
        let child = cmd
            .args([
                "run",
                "--leader-elect",
                "--leader-election-namespace",
                "podkeeper-system",
                "--metrics-bind-address",
                "0",
                "--health-probe-bind-address",
                "0",
            ])
            .env("KUBECONFIG", kubeconfig.path())
            // As manifests/manager/deployment.yaml runs it.
            .env("MIMALLOC_PURGE_DELAY", "0")
            .env_remove("WATCH_NAMESPACE")
            // PODKEEPER_BENCH_OPERATOR_LOG sets the operator's RUST_LOG (say
            // `warn,podkeeper=debug` for each reconcile's timings in
            // target/bench/operator.log).
            .env(
                "RUST_LOG",
                std::env::var("PODKEEPER_BENCH_OPERATOR_LOG").unwrap_or_else(|_| "warn".into()),
            )
            .stdin(Stdio::null())
            .stdout(out)
            .stderr(err)
            .kill_on_drop(true)
            .spawn()
            .map_err(other)?;
        // With setpriv, setpriv execs the operator (or the wrapper): same
        // pid.
        let mut pid = child.id().ok_or_else(|| other("operator exited at once"))?;
        if !wrapper.is_empty() {
            pid = descendant_running(pid, &exe)
                .ok_or_else(|| other("no operator under PODKEEPER_BENCH_OPERATOR_WRAPPER"))?;
        }
        Ok(OperatorProcess {
            child,
            pid,
            wrapped: !wrapper.is_empty(),
            log: log.to_path_buf(),
            _kubeconfig: kubeconfig,
        })
    }

    /// Ends the operator: a wrapped one with SIGTERM, waiting for the
    /// wrapper (a profiler writing its data) to exit; else by dropping it
    /// (SIGKILL).
    async fn stop(mut self) {
        if !self.wrapped {
            return;
        }
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status();
        let _ = tokio::time::timeout(Duration::from_secs(300), self.child.wait()).await;
    }

    fn sample(&mut self, ticks: f64) -> Result<ProcSample, crate::Error> {
        if let Ok(Some(status)) = self.child.try_wait() {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            return Err(other(format!(
                "the operator exited ({status}) during the benchmark:\n{log}"
            )));
        }
        measure::proc_sample(self.pid, ticks).ok_or_else(|| other("reading /proc of the operator"))
    }
}

/// The first process under `root` (itself included) that runs `exe`, within
/// 10 s.
fn descendant_running(root: u32, exe: &Path) -> Option<u32> {
    let parent = |pid: &str| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        stat[stat.rfind(')')? + 2..]
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    let under_root = |mut pid: u32| loop {
        if pid == root {
            return true;
        }
        match parent(&pid.to_string()) {
            Some(p) if p > 1 => pid = p,
            _ => return false,
        }
    };
    for _ in 0..100 {
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            let runs = std::fs::read_link(entry.path().join("exe")).is_ok_and(|e| e == exe);
            if runs && under_root(pid) {
                return Some(pid);
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    None
}

/// Everything a stage needs.
struct Bench {
    client: Client,
    pods: Clock<Pod>,
    redis: Clock<Redis>,
    replicasets: Clock<ReplicaSet>,
    services: Clock<Service>,
    audit: PathBuf,
    objects: usize,
    replicas: usize,
}

/// What an owner kind (Redis, ReplicaSet) must be for the stages.
trait Owner:
    Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
    + Clone
    + DeserializeOwned
    + serde::Serialize
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
}

impl<K> Owner for K where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>
        + Clone
        + DeserializeOwned
        + serde::Serialize
        + std::fmt::Debug
        + Send
        + Sync
        + 'static
{
}

/// How each contender's owner objects are made and judged.
struct Contender<K> {
    name: &'static str,
    role: Role,
    namespace: String,
    agent: &'static str,
    make: fn(usize, usize) -> serde_json::Value,
    settled: fn(&K, usize) -> bool,
    delete: DeleteParams,
    /// Services the bench itself creates with object `i` and deletes with
    /// it, so that both contenders' stages carry the same Services (a
    /// Redis brings its two; a ReplicaSet gets the same two from the bench).
    services: fn(usize) -> Vec<serde_json::Value>,
}

/// The two Services of Redis `r{i}` as podkeeper makes them (`<name>` for
/// the primary, `<name>-replicas`), over the ReplicaSet's Pods. Their
/// selectors name the role label, which no Pod on kwok gets (no
/// redis-server answers there): as for podkeeper's, their endpoints stay
/// empty, and the endpoints controllers do the same work for both.
/// The Pod template podkeeper gives the Redis `r<i>` with `r` replicas
/// (container, probes, volumes, security context, spreading), with the
/// ReplicaSet's label in place of podkeeper's but the same role label, so
/// that its `r<i>-replicas` Service selects its Pods as the Redis's selects
/// podkeeper's: both controllers then manage the same Pods, which cost the
/// apiserver, the endpoint controllers, the scheduler and kwok the same.
fn redis_pod_template(i: usize, r: usize) -> serde_json::Value {
    use podkeeper::podset::reconcile::PodSet;
    let mut redis: Redis = serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
        "metadata": {"name": format!("r{i}"), "namespace": "bench"},
        "spec": {"replicas": r}
    }))
    .expect("a valid Redis");
    redis.metadata.uid = Some(format!("bench-{i}"));
    let mut template = redis
        .pod_set()
        .expect("the default Redis is valid")
        .template;
    let selector = std::collections::BTreeMap::from([("bench".to_string(), format!("r{i}"))]);
    let meta = template.metadata.get_or_insert_with(Default::default);
    let role = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(podkeeper::api::names::ROLE_LABEL))
        .cloned();
    let mut labels = selector.clone();
    labels.extend(role.map(|r| (podkeeper::api::names::ROLE_LABEL.to_string(), r)));
    meta.labels = Some(labels);
    // Spread by the ReplicaSet's label, as podkeeper spreads by its own.
    for c in template
        .spec
        .iter_mut()
        .flat_map(|s| s.topology_spread_constraints.iter_mut().flatten())
    {
        c.label_selector = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                match_labels: Some(selector.clone()),
                ..Default::default()
            },
        );
    }
    serde_json::to_value(template).expect("a template serializes")
}

/// A Redis's Services (`<name>`, `<name>-replicas`), which the bench gives
/// each ReplicaSet too.
const SERVICES_PER_OBJECT: usize = 2;

fn replicaset_services(i: usize) -> Vec<serde_json::Value> {
    [("", "primary"), ("-replicas", "replica")]
        .into_iter()
        .map(|(suffix, role)| {
            json!({
                "apiVersion": "v1", "kind": "Service",
                "metadata": {"name": format!("r{i}{suffix}")},
                "spec": {
                    "selector": {"bench": format!("r{i}"), podkeeper::api::names::ROLE_LABEL: role},
                    "ports": [{"name": "redis", "port": 6379, "targetPort": 6379}],
                }
            })
        })
        .collect()
}

fn redis_contender(namespace: String) -> Contender<Redis> {
    Contender {
        name: "podkeeper (Redis)",
        role: Role::Podkeeper,
        namespace,
        agent: PODKEEPER_AGENT,
        make: |i, r| {
            json!({
                "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
                "metadata": {"name": format!("r{i}")}, "spec": {"replicas": r}
            })
        },
        settled: redis_settled,
        delete: DeleteParams::default(),
        services: |_| Vec::new(),
    }
}

fn replicaset_contender(
    namespace: String,
    name: &'static str,
    role: Role,
) -> Contender<ReplicaSet> {
    Contender {
        name,
        role,
        namespace,
        agent: REPLICASET_AGENT,
        make: |i, r| {
            json!({
                "apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {"name": format!("r{i}")},
                "spec": {
                    "replicas": r,
                    "selector": {"matchLabels": {"bench": format!("r{i}")}},
                    "template": redis_pod_template(i, r),
                }
            })
        },
        settled: replicaset_settled,
        // Foreground: the ReplicaSet stays until its Pods are gone, the
        // guarantee podkeeper's finalizer gives.
        delete: DeleteParams::foreground(),
        services: replicaset_services,
    }
}

async fn create_namespace(client: &Client, name: &str) -> Result<(), crate::Error> {
    let api: Api<Namespace> = Api::all(client.clone());
    let ns = Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    api.create(&PostParams::default(), &ns).await?;
    Ok(())
}

/// Runs `request(i)` for every i in 0..count, `CONCURRENCY` in flight.
async fn for_all<F, Fut>(count: usize, request: F) -> Result<(), crate::Error>
where
    F: Fn(usize) -> Fut,
    Fut: Future<Output = Result<(), crate::Error>>,
{
    stream::iter(0..count)
        .map(request)
        .buffer_unordered(CONCURRENCY)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Seconds from `start` until `count` Pods in `ns` exist, and until they are
/// all Ready, as the watch saw them.
async fn pods_converged(
    pods: &Clock<Pod>,
    ns: &str,
    count: usize,
    start: Instant,
) -> Result<(f64, f64, Phases), crate::Error> {
    let since = |t: Instant| t.saturating_duration_since(start).as_secs_f64();
    let exist = pods
        .until(&format!("{count} Pods in {ns}"), TIMEOUT, |st| {
            let active: Vec<_> = st.active(ns).collect();
            (active.len() >= count).then(|| active.iter().map(|e| e.seen).max().unwrap_or(start))
        })
        .await?;
    let ready = pods
        .until(&format!("{count} Ready Pods in {ns}"), TIMEOUT, |st| {
            let ready: Vec<Instant> = st.active(ns).filter_map(|e| e.ready_at).collect();
            (ready.len() >= count).then(|| ready.iter().copied().max().unwrap_or(start))
        })
        .await?;
    let phases = pods.with(|st| {
        let (mut bind, mut start_up) = (Vec::new(), Vec::new());
        for e in st.active(ns) {
            if let (Some(placed), Some(ready)) = (e.placed_at, e.ready_at) {
                bind.push(placed.saturating_duration_since(e.seen).as_secs_f64());
                start_up.push(ready.saturating_duration_since(placed).as_secs_f64());
            }
        }
        Phases {
            created_to_bound: measure::percentiles(&bind),
            bound_to_ready: measure::percentiles(&start_up),
        }
    });
    Ok((since(exist), since(ready), phases))
}

/// Waits until `ns` holds exactly `count` owners, all `settled`.
async fn owners_settled<K: Owner>(
    owners: &Clock<K>,
    ns: &str,
    count: usize,
    settled: impl Fn(&K) -> bool,
) -> Result<Instant, crate::Error> {
    owners
        .until(
            &format!("{count} settled owners in {ns}"),
            TIMEOUT,
            |st: &State<K>| {
                let all: Vec<_> = st.in_namespace(ns).collect();
                (all.len() == count && all.iter().all(|e| settled(&e.object))).then(Instant::now)
            },
        )
        .await
}

impl Bench {
    fn audit_count(&self, mark: u64, agent: &str) -> std::collections::BTreeMap<String, u64> {
        count_requests(&measure::audit_since(&self.audit, mark), agent)
    }

    async fn converge<K>(
        &self,
        owners: &Clock<K>,
        c: &Contender<K>,
        round: u32,
    ) -> Result<Convergence, crate::Error>
    where
        K: Owner,
    {
        let (n, r) = (self.objects, self.replicas);
        eprintln!("podkeeper bench: {}: converging {n} x {r}", c.name);
        let api: Api<K> = Api::namespaced(self.client.clone(), &c.namespace);
        let mark = measure::audit_mark(&self.audit);
        let start = Instant::now();
        let services: Api<Service> = Api::namespaced(self.client.clone(), &c.namespace);
        for_all(n, |i| {
            let api = api.clone();
            let services = services.clone();
            let object = serde_json::from_value::<K>((c.make)(i, r));
            async move {
                api.create(&PostParams::default(), &object?).await?;
                for s in (c.services)(i) {
                    services
                        .create(&PostParams::default(), &serde_json::from_value(s)?)
                        .await?;
                }
                Ok(())
            }
        })
        .await?;
        let (exist, ready, phases) = pods_converged(&self.pods, &c.namespace, n * r, start).await?;
        let status = owners_settled(owners, &c.namespace, n, |o| (c.settled)(o, r)).await?;
        // The stage ends once the Services exist too, so that no contender's
        // Service writes run on into the next stage (they did: podkeeper's
        // applies of rounds 2 and 3 overlapped its scale-down).
        let ns = c.namespace.as_str();
        let want = n * SERVICES_PER_OBJECT;
        let services = self
            .services
            .until(&format!("{want} Services in {ns}"), TIMEOUT, |st| {
                (st.in_namespace(ns).count() == want).then(Instant::now)
            })
            .await?;
        Ok(Convergence {
            name: c.name.into(),
            role: c.role,
            round,
            pods: n * r,
            all_exist_s: exist,
            all_ready_s: ready,
            status_ready_s: Some(status.duration_since(start).as_secs_f64()),
            services_s: Some(services.duration_since(start).as_secs_f64()),
            requests: self.audit_count(mark, c.agent),
            phases,
        })
    }

    /// Deletes `samples` Pods of `ns`, one at a time, each once the previous
    /// replacement is Ready.
    async fn heal(&self, name: &str, ns: &str, samples: usize) -> Result<Healing, crate::Error> {
        eprintln!("podkeeper bench: {name}: healing {samples} deleted Pods, one at a time");
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let (mut exists, mut ready) = (Vec::new(), Vec::new());
        for i in 0..samples {
            if i > 0 && i % 50 == 0 {
                eprintln!("podkeeper bench: {name}: {i}/{samples}");
            }
            let (victim, owner, before) = self.pods.with(|st| {
                let active: Vec<_> = st.active(ns).collect();
                let victim = &active[rand::random_range(0..active.len())].object;
                let before: std::collections::HashSet<String> =
                    active.iter().filter_map(|e| e.object.uid()).collect();
                (victim.name_any(), controller_uid(victim), before)
            });
            api.delete(&victim, &DeleteParams::default()).await?;
            let t0 = Instant::now();
            let (seen, ready_at) = self
                .pods
                .until(&format!("a replacement for {ns}/{victim}"), TIMEOUT, |st| {
                    st.active(ns)
                        .find(|e| {
                            controller_uid(&e.object) == owner
                                && !e.object.uid().is_some_and(|u| before.contains(&u))
                        })
                        .and_then(|e| e.ready_at.map(|r| (e.seen, r)))
                })
                .await?;
            exists.push(seen.saturating_duration_since(t0).as_secs_f64());
            ready.push(ready_at.saturating_duration_since(t0).as_secs_f64());
        }
        Ok(Healing {
            name: name.into(),
            samples,
            exists: measure::percentiles(&exists),
            ready: measure::percentiles(&ready),
        })
    }

    /// Scales every owner down to one replica, then deletes them all, and
    /// checks the order of deletions.
    async fn teardown<K>(
        &self,
        owners: &Clock<K>,
        c: &Contender<K>,
        round: u32,
    ) -> Result<Teardown, crate::Error>
    where
        K: Owner,
    {
        let n = self.objects;
        eprintln!(
            "podkeeper bench: {}: scaling {n} down to 1, then deleting",
            c.name
        );
        let api: Api<K> = Api::namespaced(self.client.clone(), &c.namespace);
        let mark = measure::audit_mark(&self.audit);
        let start = Instant::now();
        for_all(n, |i| {
            let api = api.clone();
            async move {
                let patch = json!({"spec": {"replicas": 1}});
                api.patch(
                    &format!("r{i}"),
                    &PatchParams::default(),
                    &Patch::Merge(&patch),
                )
                .await?;
                Ok(())
            }
        })
        .await?;
        let ns = c.namespace.as_str();
        self.pods
            .until(&format!("{n} Pods left in {ns}"), TIMEOUT, |st| {
                (st.in_namespace(ns).count() == n).then_some(())
            })
            .await?;
        owners_settled(owners, ns, n, |o| (c.settled)(o, 1)).await?;
        let scale_down_s = start.elapsed().as_secs_f64();
        let (to_terminating, to_gone) = self.pods.with(|st| {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for g in st.gone.iter().filter(|g| g.namespace == ns) {
                if let (Some(t), Some(at)) = (g.terminating_at, g.at)
                    && t >= start
                {
                    a.push(t.saturating_duration_since(start).as_secs_f64());
                    b.push(at.saturating_duration_since(t).as_secs_f64());
                }
            }
            (measure::percentiles(&a), measure::percentiles(&b))
        });
        let scale_down_requests = self.audit_count(mark, c.agent);

        let mark = measure::audit_mark(&self.audit);
        let start = Instant::now();
        let services: Api<Service> = Api::namespaced(self.client.clone(), &c.namespace);
        for_all(n, |i| {
            let api = api.clone();
            let services = services.clone();
            async move {
                for s in (c.services)(i) {
                    let name = s["metadata"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    services.delete(&name, &DeleteParams::default()).await?;
                }
                api.delete(&format!("r{i}"), &c.delete).await?;
                Ok(())
            }
        })
        .await?;
        owners
            .until(&format!("every owner gone from {ns}"), TIMEOUT, |st| {
                (st.in_namespace(ns).count() == 0).then_some(())
            })
            .await?;
        self.pods
            .until(&format!("every Pod gone from {ns}"), TIMEOUT, |st| {
                (st.in_namespace(ns).count() == 0).then_some(())
            })
            .await?;
        let delete_s = start.elapsed().as_secs_f64();
        let delete_requests = self.audit_count(mark, c.agent);
        let gone_owners: Vec<_> = owners.with(|st| {
            st.gone
                .iter()
                .filter(|g| g.namespace == ns)
                .cloned()
                .collect()
        });
        let gone_pods: Vec<_> = self.pods.with(|st| {
            st.gone
                .iter()
                .filter(|g| g.namespace == ns)
                .cloned()
                .collect()
        });
        let (order_checked, order_violations) = measure::deletion_order(&gone_owners, &gone_pods);
        Ok(Teardown {
            name: c.name.into(),
            role: c.role,
            round,
            scale_down_s,
            delete_s,
            order_checked,
            order_violations,
            scale_down_requests,
            delete_requests,
            scale_down_to_terminating: to_terminating,
            terminating_to_gone: to_gone,
        })
    }

    /// The same Pods created directly, then deleted with one request.
    async fn ceiling(&self) -> Result<Convergence, crate::Error> {
        let ns = "bench-ceiling";
        let total = self.objects * self.replicas;
        eprintln!("podkeeper bench: ceiling: creating {total} Pods directly");
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let start = Instant::now();
        for_all(total, |i| {
            let api = api.clone();
            async move {
                let pod: Pod = serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("p{i}")},
                    "spec": {"containers": [{"name": "redis", "image": podkeeper::api::redis::DEFAULT_IMAGE}]}
                }))?;
                api.create(&PostParams::default(), &pod).await?;
                Ok(())
            }
        })
        .await?;
        let (exist, ready, phases) = pods_converged(&self.pods, ns, total, start).await?;
        api.delete_collection(&DeleteParams::default(), &ListParams::default())
            .await?;
        self.pods
            .until(&format!("every Pod gone from {ns}"), TIMEOUT, |st| {
                (st.in_namespace(ns).count() == 0).then_some(())
            })
            .await?;
        Ok(Convergence {
            name: format!("ceiling (direct creates, {CONCURRENCY} in flight)"),
            role: Role::Ceiling,
            round: 1,
            pods: total,
            all_exist_s: exist,
            all_ready_s: ready,
            status_ready_s: None,
            services_s: None,
            requests: Default::default(),
            phases,
        })
    }
}

/// Runs the benchmark, prints the Markdown report and writes
/// `target/bench/report.json`.
pub async fn run(args: BenchArgs) -> Result<Report, crate::Error> {
    let (objects, replicas, heal, idle) = if args.quick {
        (20, 3, 10, 5)
    } else {
        (args.objects, args.replicas, args.heal, args.idle_seconds)
    };
    let (rounds, head_to_head) = (args.rounds.max(1), args.head_to_head);
    let out_dir = Path::new("target/bench");
    std::fs::create_dir_all(out_dir).map_err(other)?;
    eprintln!(
        "podkeeper bench: starting the local control plane (QPS limits raised, audit log on)"
    );
    let mut cluster = LocalCluster::start(ClusterOptions {
        nodes: 3,
        raise_qps_limits: true,
        audit_log: true,
        ..Default::default()
    })
    .await?;
    let client = cluster.client().await?;
    podkeeper::operator::install_crds(&client).await?;
    for ns in [
        "podkeeper-system",
        "bench-warmup",
        "bench-podkeeper",
        "bench-replicaset",
        "bench-replicaset-default",
        "bench-ceiling",
    ] {
        create_namespace(&client, ns).await?;
    }
    let b = Bench {
        pods: Clock::start(Api::all(client.clone()), pod_bound, pod_is_ready).await?,
        redis: Clock::start(Api::all(client.clone()), never, never).await?,
        replicasets: Clock::start(Api::all(client.clone()), never, never).await?,
        services: Clock::start(Api::all(client.clone()), never, never).await?,
        audit: cluster
            .audit_log_path()
            .ok_or_else(|| other("the audit log is off"))?,
        client,
        objects,
        replicas,
    };
    let ticks = measure::clock_ticks();
    let mut operator = OperatorProcess::start(&cluster, &out_dir.join("operator.log"))?;
    let mut report = Report {
        objects,
        replicas,
        rounds,
        kubernetes: versions::KUBERNETES.into(),
        etcd: versions::ETCD.into(),
        kwok: versions::KWOK.into(),
        ..Default::default()
    };

    // Warm: the operator holds the Lease and has converged one Redis, and
    // the controller-manager one ReplicaSet, before any clock starts.
    warm_up(&b, &redis_contender(String::new()), &b.redis, "warm-redis").await?;
    let warm_rs = replicaset_contender(String::new(), "", Role::ReplicaSet);
    warm_up(&b, &warm_rs, &b.replicasets, "warm-rs").await?;

    for round in 1..=rounds {
        let namespace = |base: &str| match round {
            1 => base.to_string(),
            n => format!("{base}-{n}"),
        };
        if round > 1 {
            for ns in ["bench-podkeeper", "bench-replicaset"] {
                create_namespace(&b.client, &namespace(ns)).await?;
            }
        }
        let redis = redis_contender(namespace("bench-podkeeper"));
        let rs = replicaset_contender(
            namespace("bench-replicaset"),
            "kube-controller-manager (ReplicaSet)",
            Role::ReplicaSet,
        );
        // The order alternates, so that a machine that gets busier or
        // quieter over a run favours neither.
        if round % 2 == 0 {
            replicaset_life(&b, &rs, round, heal, &mut report).await?;
        }
        // podkeeper: converge, heal, idle (first round), tear down.
        let before = operator.sample(ticks)?;
        measure::reset_peak(operator.pid);
        report
            .convergence
            .push(b.converge(&b.redis, &redis, round).await?);
        let after = operator.sample(ticks)?;
        if round == 1 {
            report.operator.convergence_cpu_s = after.cpu_s - before.cpu_s;
            report.operator.convergence_peak_rss_mib = after.peak_rss_mib;
            report
                .healing
                .push(b.heal(redis.name, &redis.namespace, heal).await?);
            idle_stage(&b, &mut operator, ticks, &redis, idle, &mut report).await?;
        }
        report
            .teardown
            .push(b.teardown(&b.redis, &redis, round).await?);
        operator.sample(ticks)?;
        if round % 2 == 1 {
            replicaset_life(&b, &rs, round, heal, &mut report).await?;
        }
    }

    if !head_to_head {
        // The ceiling.
        report.convergence.push(b.ceiling().await?);

        // kube-controller-manager at its default QPS (20, burst 30).
        eprintln!("podkeeper bench: restarting kube-controller-manager at its default QPS");
        cluster.set_controller_manager_qps(false).await?;
        warm_up(&b, &warm_rs, &b.replicasets, "warm-rs-default").await?;
        let slow = replicaset_contender(
            "bench-replicaset-default".into(),
            "kube-controller-manager (ReplicaSet), default QPS",
            Role::ReplicaSetDefaultQps,
        );
        report
            .convergence
            .push(b.converge(&b.replicasets, &slow, 1).await?);
    }

    if std::env::var_os("PODKEEPER_BENCH_KEEP_AUDIT").is_some() {
        let _ = std::fs::copy(&b.audit, out_dir.join("audit.log"));
    }
    operator.stop().await;
    drop(b);
    cluster.shutdown().await;
    println!("{}", Markdown(&report));
    let json = serde_json::to_string_pretty(&report)?;
    std::fs::write(out_dir.join("report.json"), json).map_err(other)?;
    eprintln!(
        "podkeeper bench: wrote {}",
        out_dir.join("report.json").display()
    );
    Ok(report)
}

/// The ReplicaSet controller's life: converge, heal (first round), tear
/// down.
async fn replicaset_life(
    b: &Bench,
    rs: &Contender<ReplicaSet>,
    round: u32,
    heal: usize,
    report: &mut Report,
) -> Result<(), crate::Error> {
    report
        .convergence
        .push(b.converge(&b.replicasets, rs, round).await?);
    if round == 1 {
        report
            .healing
            .push(b.heal(rs.name, &rs.namespace, heal).await?);
    }
    report
        .teardown
        .push(b.teardown(&b.replicasets, rs, round).await?);
    Ok(())
}

/// podkeeper's requests while nothing changes, once every status has
/// caught up with the last heal.
async fn idle_stage(
    b: &Bench,
    operator: &mut OperatorProcess,
    ticks: f64,
    redis: &Contender<Redis>,
    idle: u64,
    report: &mut Report,
) -> Result<(), crate::Error> {
    let (replicas, count) = (b.replicas, b.objects);
    // Idle starts once every status is settled and names exactly its
    // owner's live Pods, both read from one snapshot: a status checked
    // alone may still be the one from before the last heal, and a status
    // written while the healed Pod is still terminating names the right
    // members but is still Progressing; either would be rewritten inside
    // the window.
    b.redis
        .until(
            "every status settled and naming its live Pods",
            TIMEOUT,
            |st| {
                let live = |uid: &str| -> std::collections::BTreeSet<String> {
                    b.pods.with(|pods| {
                        pods.active(&redis.namespace)
                            .filter(|p| controller_uid(&p.object).as_deref() == Some(uid))
                            .map(|p| p.object.name_any())
                            .collect()
                    })
                };
                let all: Vec<_> = st.in_namespace(&redis.namespace).collect();
                let settled = all.len() == count
                    && all.iter().all(|e| {
                        let members: std::collections::BTreeSet<String> = e
                            .object
                            .status
                            .iter()
                            .flat_map(|s| s.members.iter().map(|m| m.pod.clone()))
                            .collect();
                        redis_settled(&e.object, replicas)
                            && e.object
                                .metadata
                                .uid
                                .as_deref()
                                .is_some_and(|u| live(u) == members)
                    });
                settled.then_some(())
            },
        )
        .await?;
    // A write of the convergence may still be on its way when its result
    // is already in view (a status write paced by `STATUS_INTERVAL`, one
    // retried after a conflict): idle begins once the operator has written
    // nothing for `QUIET`, judged from the audit log. An operator that
    // never stops writing gets its window after `QUIET_TRIES` and is
    // caught there.
    const QUIET: Duration = Duration::from_secs(2);
    const QUIET_TRIES: usize = 15;
    for _ in 0..QUIET_TRIES {
        let mark = measure::audit_mark(&b.audit);
        tokio::time::sleep(QUIET).await;
        let late = measure::object_writes(&measure::audit_since(&b.audit, mark), PODKEEPER_AGENT);
        if late.is_empty() {
            break;
        }
        eprintln!(
            "podkeeper bench: podkeeper: {} write(s) after convergence, waiting for {}s without one: {}",
            late.len(),
            QUIET.as_secs(),
            late.join("; ")
        );
    }
    eprintln!("podkeeper bench: podkeeper: idle for {idle}s, counting its requests");
    let mark = measure::audit_mark(&b.audit);
    let before = operator.sample(ticks)?;
    tokio::time::sleep(Duration::from_secs(idle)).await;
    let after = operator.sample(ticks)?;
    let logged = measure::audit_since(&b.audit, mark);
    let requests = measure::count_requests(&logged, PODKEEPER_AGENT);
    report.operator.idle_cpu_s = after.cpu_s - before.cpu_s;
    report.operator.idle_rss_mib = after.rss_mib;
    report.idle = Idle {
        window_s: idle as f64,
        object_writes: requests
            .iter()
            .filter(|(k, _)| is_write(k) && !k.ends_with(" leases"))
            .map(|(_, v)| v)
            .sum(),
        lease_writes: requests
            .iter()
            .filter(|(k, _)| is_write(k) && k.ends_with(" leases"))
            .map(|(_, v)| v)
            .sum(),
        writes: measure::object_writes(&logged, PODKEEPER_AGENT),
        requests,
    };
    Ok(())
}

/// One owner with one replica in `bench-warmup`, converged.
async fn warm_up<K>(
    b: &Bench,
    c: &Contender<K>,
    owners: &Clock<K>,
    name: &str,
) -> Result<(), crate::Error>
where
    K: Owner,
{
    let ns = "bench-warmup";
    let api: Api<K> = Api::namespaced(b.client.clone(), ns);
    // Named (and, for ReplicaSets, labelled) `name` instead of "r0".
    let object = (c.make)(0, 1)
        .to_string()
        .replace("\"r0\"", &format!("{name:?}"));
    api.create(&PostParams::default(), &serde_json::from_str(&object)?)
        .await?;
    owners
        .until(
            &format!("{ns}/{name} to converge"),
            Duration::from_secs(120),
            |st| {
                st.in_namespace(ns)
                    .any(|e| e.object.name_any() == name && (c.settled)(&e.object, 1))
                    .then_some(())
            },
        )
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_replicaset_runs_the_pods_podkeeper_runs_under_its_own_label() {
        let rs = (replicaset_contender("ns".into(), "rs", Role::ReplicaSet).make)(7, 3);
        let template = &rs["spec"]["template"];
        assert_eq!(
            template["metadata"]["labels"],
            json!({"bench": "r7", podkeeper::api::names::ROLE_LABEL: "replica"}),
            "its r7-replicas Service selects its Pods, as podkeeper's selects podkeeper's"
        );
        assert_eq!(
            rs["spec"]["selector"]["matchLabels"],
            json!({"bench": "r7"})
        );
        let redis: Redis =
            serde_json::from_value((redis_contender("ns".into()).make)(7, 3)).unwrap();
        let ours = serde_json::to_value(
            podkeeper::podset::reconcile::PodSet::pod_set(&redis)
                .unwrap()
                .template
                .spec,
        )
        .unwrap();
        for field in ["containers", "volumes", "securityContext"] {
            assert_eq!(template["spec"][field], ours[field], "{field}");
        }
        for c in template["spec"]["topologySpreadConstraints"]
            .as_array()
            .unwrap()
        {
            assert_eq!(c["labelSelector"], json!({"matchLabels": {"bench": "r7"}}));
        }
        let owner = podkeeper::runtime::owner::Owner::of(&redis, "Redis");
        assert_eq!(
            podkeeper::redis::services::desired_services(&redis, &owner, None).len(),
            SERVICES_PER_OBJECT
        );
        assert_eq!(replicaset_services(7).len(), SERVICES_PER_OBJECT);
    }
}
