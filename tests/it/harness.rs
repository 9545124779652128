//! The integration-test harness: one real cluster per test binary, a
//! namespace per test, and operator processes per test.
//!
//! With `PODKEEPER_TEST_KUBECONFIG` set, tests use that cluster (this is how
//! `just e2e` runs the suite on kind). Otherwise the harness starts the local
//! control plane with `podkeeper dev --cluster-only`, building it first if
//! this machine has not yet. If it cannot be built or started, every test
//! fails with the reason: nothing here skips.

#![allow(dead_code)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Event, Namespace, Pod, ResourceQuota, ServiceAccount};
use kube::api::{ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};

/// The operator binary under test (`podkeeper run`). Only the operator
/// package's tests have it; the dev tools' tests, which share this harness,
/// start no operator of their own.
pub const BIN: &str = match option_env!("CARGO_BIN_EXE_podkeeper") {
    Some(bin) => bin,
    None => "podkeeper",
};

/// The repository's top folder (manifests/, samples/), for the tests of
/// either crate.
pub fn repo_root() -> &'static Path {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    if manifest.join("manifests").is_dir() {
        manifest
    } else {
        manifest.parent().expect("the workspace folder")
    }
}

/// The cluster every test of this binary shares.
pub struct SharedCluster {
    /// Admin credentials.
    pub kubeconfig_path: PathBuf,
    /// The operator's credentials: a token of the `podkeeper` ServiceAccount
    /// bound only to `manifests/rbac`, so a missing permission fails tests.
    pub operator_kubeconfig_path: Option<PathBuf>,
}

static CLUSTER: OnceLock<Result<SharedCluster, String>> = OnceLock::new();

pub fn logs_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("it-logs");
    std::fs::create_dir_all(&dir).expect("create log dir");
    dir
}

/// Starts (once) or returns the shared cluster. Panics with the reason if it
/// cannot be had.
pub fn cluster() -> &'static SharedCluster {
    let result = CLUSTER.get_or_init(|| {
        if let Some(path) = std::env::var_os("PODKEEPER_TEST_KUBECONFIG") {
            return Ok(SharedCluster {
                kubeconfig_path: PathBuf::from(path),
                operator_kubeconfig_path: None,
            });
        }
        let mut cluster = start_local_cluster()?;
        cluster.operator_kubeconfig_path = Some(operator_credentials(&cluster.kubeconfig_path)?);
        Ok(cluster)
    });
    match result {
        Ok(c) => c,
        Err(e) => panic!("the local control plane could not be started: {e}"),
    }
}

/// Starts the local control plane on a thread of its own that lives as long
/// as this test binary: its components are started from that thread with
/// `setpriv --pdeathsig KILL`, so they die with the process, however it ends.
/// Their state goes under the target directory, one folder a process, and
/// the folders of processes that are gone are removed here.
fn start_local_cluster() -> Result<SharedCluster, String> {
    use podkeeper_dev::localcluster::{ClusterOptions, LocalCluster};
    let states = logs_dir().join("clusters");
    sweep_dead_states(&states);
    let state_parent = states.join(std::process::id().to_string());
    std::fs::create_dir_all(&state_parent).map_err(|e| e.to_string())?;
    let kubeconfig_path = logs_dir().join(format!("kubeconfig-{}", std::process::id()));
    let path = kubeconfig_path.clone();
    let (ready, started) = std::sync::mpsc::channel::<Result<(), String>>();
    std::thread::Builder::new()
        .name("local-cluster".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
            {
                Ok(runtime) => runtime,
                Err(e) => return drop(ready.send(Err(e.to_string()))),
            };
            runtime.block_on(async move {
                let options = ClusterOptions {
                    nodes: 3,
                    state_parent: Some(state_parent),
                    ..Default::default()
                };
                let started = async {
                    let cluster = LocalCluster::start(options)
                        .await
                        .map_err(|e| e.to_string())?;
                    cluster.write_kubeconfig(&path).map_err(|e| e.to_string())?;
                    let client = cluster.client().await.map_err(|e| e.to_string())?;
                    podkeeper::operator::install_crds(&client)
                        .await
                        .map_err(|e| e.to_string())?;
                    Ok::<_, String>(cluster)
                }
                .await;
                match started {
                    Ok(cluster) => {
                        let _ = ready.send(Ok(()));
                        // Kept until the process exits.
                        std::future::pending::<()>().await;
                        drop(cluster);
                    }
                    Err(e) => drop(ready.send(Err(e))),
                }
            })
        })
        .map_err(|e| format!("spawning the cluster thread: {e}"))?;
    started
        .recv()
        .map_err(|_| "the cluster thread ended before the cluster was ready".to_string())??;
    Ok(SharedCluster {
        kubeconfig_path,
        operator_kubeconfig_path: None,
    })
}

/// Removes the state folders (named by process id) of test processes that
/// have exited.
fn sweep_dead_states(states: &Path) {
    let Ok(entries) = std::fs::read_dir(states) else {
        return;
    };
    for entry in entries.flatten() {
        let pid = entry.file_name();
        if !Path::new("/proc").join(&pid).exists() {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

fn kubectl_admin(kubeconfig: &Path, args: &[&str]) -> Result<String, String> {
    let out = Command::new("kubectl")
        .env("KUBECONFIG", kubeconfig)
        .args(args)
        .output()
        .map_err(|e| format!("kubectl: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "kubectl {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Installs `manifests/rbac` (and the namespace it lives in) and returns a
/// kubeconfig holding a token of the operator's ServiceAccount.
fn operator_credentials(admin: &Path) -> Result<PathBuf, String> {
    let manifests = repo_root().join("manifests");
    kubectl_admin(
        admin,
        &[
            "apply",
            "-f",
            manifests.join("manager/namespace.yaml").to_str().unwrap(),
        ],
    )?;
    kubectl_admin(
        admin,
        &["apply", "-k", manifests.join("rbac").to_str().unwrap()],
    )?;
    let token = kubectl_admin(
        admin,
        &[
            "create",
            "token",
            "podkeeper",
            "--namespace",
            "podkeeper-system",
            "--duration",
            "4h",
        ],
    )?;
    let mut kc = Kubeconfig::read_from(admin).map_err(|e| e.to_string())?;
    for user in &mut kc.auth_infos {
        user.auth_info = Some(kube::config::AuthInfo {
            token: Some(token.trim().to_string().into()),
            ..Default::default()
        });
    }
    let path = admin.with_extension("operator");
    let yaml = serde_yaml_ng::to_string(&kc).map_err(|e| e.to_string())?;
    std::fs::write(&path, yaml).map_err(|e| e.to_string())?;
    Ok(path)
}

pub fn kubeconfig() -> Kubeconfig {
    Kubeconfig::read_from(&cluster().kubeconfig_path).expect("readable kubeconfig")
}

/// An admin client (bound to the calling test's runtime).
pub async fn admin_client() -> Client {
    let config = Config::from_custom_kubeconfig(kubeconfig(), &KubeConfigOptions::default())
        .await
        .expect("valid kubeconfig");
    Client::try_from(config).expect("client")
}

/// Whether Pods run real containers (on kind, `PODKEEPER_TEST_IMAGES=kind`):
/// then redis-server answers, and the operator chooses a primary itself.
pub fn real_containers() -> bool {
    std::env::var("PODKEEPER_TEST_IMAGES").as_deref() == Ok("kind")
}

/// How long to wait for what takes `local` on the local control plane. Real
/// containers (on kind) are slower than kwok's Pods: images are unpacked,
/// probes run, processes start and stop, so waits there are three times as
/// long.
pub fn patience(local: Duration) -> Duration {
    if real_containers() { local * 3 } else { local }
}

/// Serialises what disrupts the deployed operator (see
/// [`hold_deployed_operator`]).
static DEPLOYED_OPERATOR: Mutex<()> = Mutex::new(());

/// Held by a test that needs the deployed operator's Pods undisturbed (the
/// failover test follows one leader's Pod): while it is held, "killing" the
/// deployed operator waits.
pub fn hold_deployed_operator() -> std::sync::MutexGuard<'static, ()> {
    DEPLOYED_OPERATOR
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Polls `check` every 100 ms until it returns `Some`, or panics after
/// `timeout` (see [`patience`]) with `what`.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let timeout = patience(timeout);
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if Instant::now() > deadline {
            panic!("timed out after {timeout:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A test's own namespace and client.
pub struct TestEnv {
    pub client: Client,
    pub namespace: String,
    /// This test's share of the cluster (see [`ClusterShare`]).
    pub share: ClusterShare,
}

/// Tests that change the cluster itself (a node cut off the network, the
/// control plane untainted, the deployed operator moved) run alone: every
/// [`TestEnv::new`] holds a shared share of the cluster for the test's
/// life, and [`TestEnv::exclusive`] waits until no other test holds one,
/// then keeps new ones waiting until it is done. A test that waits for the
/// exclusive share may be overtaken by the other test thread's next tests;
/// it then runs once they leave a gap.
static CLUSTER_SHARES: Mutex<(usize, bool)> = Mutex::new((0, false));
static CLUSTER_CHANGED: Condvar = Condvar::new();

/// A test's hold on the cluster: shared, exclusive, or none.
pub struct ClusterShare(Option<bool>);

impl ClusterShare {
    pub fn none() -> Self {
        ClusterShare(None)
    }

    fn take(exclusive: bool) -> Self {
        let mut s = CLUSTER_SHARES
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if exclusive {
            while s.1 || s.0 > 0 {
                s = CLUSTER_CHANGED
                    .wait(s)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
            }
            s.1 = true;
        } else {
            while s.1 {
                s = CLUSTER_CHANGED
                    .wait(s)
                    .unwrap_or_else(|poisoned| poisoned.into_inner());
            }
            s.0 += 1;
        }
        ClusterShare(Some(exclusive))
    }
}

impl Drop for ClusterShare {
    fn drop(&mut self) {
        let Some(exclusive) = self.0 else { return };
        let mut s = CLUSTER_SHARES
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if exclusive {
            s.1 = false;
        } else {
            s.0 -= 1;
        }
        CLUSTER_CHANGED.notify_all();
    }
}

impl TestEnv {
    /// Creates a fresh namespace named after the test, and waits for its
    /// default ServiceAccount (Pods cannot be created before it exists).
    pub async fn new(name: &str) -> Self {
        Self::with_share(name, ClusterShare::take(false)).await
    }

    /// A test that changes the cluster itself: it runs alone (see
    /// [`ClusterShare`]).
    pub async fn exclusive(name: &str) -> Self {
        Self::with_share(name, ClusterShare::take(true)).await
    }

    async fn with_share(name: &str, share: ClusterShare) -> Self {
        let client = admin_client().await;
        let suffix: u32 = rand::random::<u32>() % 100_000;
        let namespace = format!("{name}-{suffix}");
        let ns_api: Api<Namespace> = Api::all(client.clone());
        ns_api
            .create(
                &PostParams::default(),
                &Namespace {
                    metadata: ObjectMeta {
                        name: Some(namespace.clone()),
                        ..Default::default()
                    },
                    ..Default::default()
                },
            )
            .await
            .expect("create namespace");
        let sa: Api<ServiceAccount> = Api::namespaced(client.clone(), &namespace);
        wait_for(
            "the default ServiceAccount",
            Duration::from_secs(60),
            || async { sa.get_opt("default").await.ok().flatten() },
        )
        .await;
        TestEnv {
            client,
            namespace,
            share,
        }
    }

    pub fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
    {
        Api::namespaced(self.client.clone(), &self.namespace)
    }

    /// Runs kubectl against the test cluster, in this namespace; returns
    /// (success, stdout, stderr).
    pub fn kubectl(&self, args: &[&str]) -> (bool, String, String) {
        let mut all = vec!["--namespace", self.namespace.as_str()];
        all.extend_from_slice(args);
        kubectl(&all)
    }
}

/// Transients for the Pods of one namespace, played by the local cluster's
/// kwok stages (`src/localcluster/kwok-stages.yaml`): each Pod is Running
/// but not Ready for a time drawn from `ready`, and stays Terminating for a
/// time drawn from `delete` once deleted (uniformly from `[min, max)`).
#[derive(Clone, Copy, Debug)]
pub struct PodDelays {
    pub ready: (Duration, Duration),
    pub delete: (Duration, Duration),
}

impl PodDelays {
    /// The annotations (and `kwok-delays` ConfigMap keys) that say so.
    pub fn entries(&self) -> Vec<(String, String)> {
        let ms = |d: Duration| format!("{}ms", d.as_millis());
        [
            ("ready-delay", self.ready.0),
            ("ready-delay-max", self.ready.1),
            ("delete-delay", self.delete.0),
            ("delete-delay-max", self.delete.1),
        ]
        .into_iter()
        .map(|(k, d)| (k.to_string(), ms(d)))
        .collect()
    }
}

pub const DELAY_POLICY: &str = "podkeeper-kwok-delays";

impl TestEnv {
    /// Caps `resource` (a ResourceQuota's key: pods, services, secrets) at
    /// `n` in this namespace with a quota of that name, and returns once
    /// admission enforces it (its usage has been computed).
    pub async fn cap(&self, resource: &str, n: u32) {
        let quotas: Api<ResourceQuota> = self.api();
        let quota: ResourceQuota = serde_json::from_value(serde_json::json!({
            "metadata": {"name": resource},
            "spec": {"hard": {resource: n.to_string()}}
        }))
        .unwrap();
        quotas.create(&PostParams::default(), &quota).await.unwrap();
        wait_for(
            &format!("the {resource} quota's usage"),
            Duration::from_secs(60),
            || async {
                let q = quotas.get(resource).await.ok()?;
                q.status?.used?.contains_key(resource).then_some(())
            },
        )
        .await;
    }

    /// Lifts the cap of [`TestEnv::cap`].
    pub async fn uncap(&self, resource: &str) {
        let quotas: Api<ResourceQuota> = self.api();
        quotas
            .delete(resource, &kube::api::DeleteParams::default())
            .await
            .unwrap();
    }

    /// Gives every Pod created in this namespace from now on these delays
    /// (the `kwok-delays` ConfigMap that the local cluster's admission
    /// policy reads), and returns once the policy applies them.
    pub async fn set_pod_delays(&self, delays: PodDelays) {
        use k8s_openapi::api::admissionregistration::v1::MutatingAdmissionPolicy;
        use k8s_openapi::api::core::v1::{ConfigMap, Pod};
        let policies: Api<MutatingAdmissionPolicy> = Api::all(self.client.clone());
        if policies
            .get_opt(DELAY_POLICY)
            .await
            .expect("get policy")
            .is_none()
        {
            // Not the local cluster (`PODKEEPER_TEST_KUBECONFIG`): its
            // kubelets make their own transients.
            eprintln!(
                "{}: no {DELAY_POLICY} policy; Pods keep this cluster's own timing",
                self.namespace
            );
            return;
        }
        let data: std::collections::BTreeMap<String, String> =
            delays.entries().into_iter().collect();
        // Applied, so a test can change the delays for the Pods it creates
        // next.
        let cm = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "kwok-delays"},
            "data": data,
        });
        self.api::<ConfigMap>()
            .patch(
                "kwok-delays",
                &kube::api::PatchParams::apply("podkeeper-tests").force(),
                &kube::api::Patch::Apply(&cm),
            )
            .await
            .expect("apply the kwok-delays ConfigMap");
        // The policy's parameter cache sees the ConfigMap a moment later: a
        // server-side dry run shows when.
        let probe: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"generateName": "delay-probe-"},
            "spec": {"containers": [{"name": "c", "image": "probe"}]}
        }))
        .expect("probe Pod");
        let pods: Api<Pod> = self.api();
        let dry_run = PostParams {
            dry_run: true,
            ..Default::default()
        };
        wait_for(
            "the delay policy to apply",
            Duration::from_secs(30),
            || async {
                let p = pods.create(&dry_run, &probe).await.ok()?;
                let got = p.metadata.annotations?;
                data.iter()
                    .all(|(k, v)| got.get(&format!("kwok.podkeeper.dev/{k}")) == Some(v))
                    .then_some(())
            },
        )
        .await;
    }
}

/// Runs kubectl against the test cluster as admin; returns (success,
/// stdout, stderr).
pub fn kubectl(args: &[&str]) -> (bool, String, String) {
    {
        let out = Command::new("kubectl")
            .env("KUBECONFIG", &cluster().kubeconfig_path)
            .args(args)
            .output()
            .expect("kubectl on PATH");
        (
            out.status.success(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }
}

/// `kubectl exec` in a Pod of the cluster that `kubeconfig` points at;
/// returns (success, stdout), or on failure (false, stdout + stderr).
/// kubectl's exec stream over the API server sometimes closes before the
/// output arrives on this loaded machine ("closed all streams"); the
/// commands the tests run are all safe to repeat, so that transport error
/// is retried. So, for up to a minute, is an exec into a container that is
/// not running (see [`container_restarting`]): the kubelet starts it again
/// (restartPolicy Always), as it would a user's.
pub fn exec_in(kubeconfig: &Path, namespace: &str, pod: &str, command: &[&str]) -> (bool, String) {
    let mut attempts = 0;
    let restarted_by = Instant::now() + Duration::from_secs(60);
    loop {
        let out = Command::new("kubectl")
            .env("KUBECONFIG", kubeconfig)
            .args(["--namespace", namespace, "exec", pod, "--"])
            .args(command)
            .output()
            .expect("kubectl on PATH");
        let (stdout, stderr) = (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        );
        if out.status.success() {
            // kubectl's own warnings (websocket stream noise) go to stderr:
            // a command that succeeded answers with its stdout alone.
            return (true, stdout);
        }
        if podkeeper_dev::bench::redis::session::container_restarting(&stderr)
            && Instant::now() < restarted_by
        {
            std::thread::sleep(Duration::from_secs(1));
            continue;
        }
        attempts += 1;
        if !stderr.contains("closed all streams") || attempts == 3 {
            return (false, format!("{stdout}{stderr}"));
        }
    }
}

/// On a cluster that outlives the test binary (kind), a test that passed
/// removes its namespace, so that Pods do not pile up across runs (a failed
/// test's stays, to be looked at). The local cluster dies with the binary.
impl Drop for TestEnv {
    fn drop(&mut self) {
        if cluster().operator_kubeconfig_path.is_none() && !std::thread::panicking() {
            let _ = kubectl(&["delete", "namespace", &self.namespace, "--wait=false"]);
        }
    }
}

impl TestEnv {
    /// Starts an operator process watching only this namespace, with the
    /// ServiceAccount's credentials.
    pub fn start_operator(&self) -> Operator {
        Operator::start(&self.namespace, &[])
    }
}

/// A `podkeeper run` process scoped to one namespace. Killed on drop.
pub struct Operator {
    child: Option<Child>,
    namespace: String,
    extra_args: Vec<String>,
    /// Started without extra flags.
    plain: bool,
    pub log: PathBuf,
    starts: u32,
    /// Credentials other than the shared cluster's operator ones.
    kubeconfig: Option<PathBuf>,
}

impl Operator {
    /// Starts `podkeeper run --namespace NS EXTRA...`; metrics and probes
    /// are off unless `extra` turns them on.
    pub fn start(namespace: &str, extra: &[&str]) -> Self {
        Self::start_with(namespace, extra, None)
    }

    /// Like [`Operator::start`], against the cluster of `kubeconfig`.
    pub fn start_on(namespace: &str, kubeconfig: &Path) -> Self {
        Self::start_with(namespace, &[], Some(kubeconfig.to_path_buf()))
    }

    /// Starts `podkeeper run --namespace NS EXTRA...` with the credentials
    /// of `kubeconfig` (default: the shared cluster's operator ones).
    pub fn start_with(namespace: &str, extra: &[&str], kubeconfig: Option<PathBuf>) -> Self {
        let n = rand::random::<u16>();
        let mut op = Operator {
            child: None,
            namespace: namespace.to_string(),
            plain: extra.is_empty(),
            extra_args: {
                let mut args: Vec<String> = extra.iter().map(|s| s.to_string()).collect();
                for flag in ["--metrics-bind-address", "--health-probe-bind-address"] {
                    if !extra.contains(&flag) {
                        args.extend([flag.to_string(), "0".to_string()]);
                    }
                }
                args
            },
            log: logs_dir().join(format!("operator-{namespace}-{n}.log")),
            starts: 0,
            kubeconfig,
        };
        op.spawn();
        op
    }

    /// `just e2e` sets PODKEEPER_TEST_OPERATOR=deployed: the operator runs
    /// in the cluster (deployed with manifests/), and tests that start a
    /// plain operator use that one instead.
    fn deployed(&self) -> bool {
        self.plain
            && self.kubeconfig.is_none()
            && std::env::var("PODKEEPER_TEST_OPERATOR").as_deref() == Ok("deployed")
    }

    fn spawn(&mut self) {
        if self.deployed() {
            self.starts += 1;
            return;
        }
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("operator log");
        let err = log.try_clone().expect("log handle");
        let c = cluster();
        let kubeconfig = self.kubeconfig.as_ref().unwrap_or(
            c.operator_kubeconfig_path
                .as_ref()
                .unwrap_or(&c.kubeconfig_path),
        );
        // setpriv --pdeathsig: the operator dies with the test thread that
        // started it, even if this test binary is killed.
        let mut cmd = if Path::new("/usr/bin/setpriv").exists() {
            let mut c = Command::new("/usr/bin/setpriv");
            c.args(["--pdeathsig", "KILL", "--", BIN]);
            c
        } else {
            Command::new(BIN)
        };
        let child = cmd
            .args(["run", "--namespace", &self.namespace])
            .args(&self.extra_args)
            .env("KUBECONFIG", kubeconfig)
            .env_remove("POD_NAMESPACE")
            .env("RUST_LOG", "info,podkeeper=trace,kube=warn")
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(err)
            .spawn()
            .expect("spawn podkeeper run");
        self.child = Some(child);
        self.starts += 1;
    }

    /// How many times this operator was started (1 unless restarted).
    pub fn starts(&self) -> u32 {
        self.starts
    }

    /// The process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.id())
    }

    /// Sends SIGTERM and waits for the process to exit; returns whether it
    /// exited successfully.
    pub fn terminate(&mut self) -> bool {
        let Some(mut c) = self.child.take() else {
            return false;
        };
        let _ = Command::new("kill")
            .args(["-TERM", &c.id().to_string()])
            .status();
        c.wait().map(|s| s.success()).unwrap_or(false)
    }

    /// Whether the process has exited, and how.
    pub fn try_exit_status(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    /// SIGKILL, as a crash would (for a deployed operator: force-deleting
    /// its Pods).
    pub fn kill(&mut self) {
        if self.deployed() {
            drop(hold_deployed_operator());
            let (ok, out, err) = kubectl(&[
                "delete",
                "pod",
                "-n",
                "podkeeper-system",
                "-l",
                "app.kubernetes.io/name=podkeeper",
                "--grace-period=0",
                "--force",
            ]);
            assert!(ok, "deleting the deployed operator: {out}{err}");
            return;
        }
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Panics if the process has exited (crashed) on its own (for a
    /// deployed operator: if a container restarted for another reason than
    /// a failed start, see [`crashes`]).
    pub fn assert_running(&mut self) {
        if self.deployed() {
            let (ok, out, err) = kubectl(&[
                "get",
                "pod",
                "-n",
                "podkeeper-system",
                "-l",
                "app.kubernetes.io/name=podkeeper",
                "-o",
                "json",
            ]);
            assert!(ok, "{err}");
            let pods: Vec<Pod> = items(&out);
            let (ok, out, err) = kubectl(&[
                "get",
                "events",
                "-n",
                "podkeeper-system",
                "--field-selector",
                "reason=Failed,involvedObject.kind=Pod",
                "-o",
                "json",
            ]);
            assert!(ok, "{err}");
            let events: Vec<Event> = items(&out);
            let crashed = crashes(&pods, &events);
            assert!(
                crashed.is_empty(),
                "the deployed operator restarted: {}",
                crashed.join("; ")
            );
            return;
        }
        if let Some(c) = self.child.as_mut()
            && let Ok(Some(status)) = c.try_wait()
        {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            panic!("the operator exited on its own ({status}); log:\n{log}");
        }
    }

    /// The operator's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The value of `field` on the first log line containing `message`
    /// (text log format: `message field=value ...`).
    pub fn log_field(&self, message: &str, field: &str) -> Option<String> {
        let log = self.log_text();
        let line = log.lines().find(|l| l.contains(message))?;
        let key = format!("{field}=");
        let start = line.find(&key)? + key.len();
        Some(
            line[start..]
                .split_whitespace()
                .next()?
                .trim_matches('"')
                .to_string(),
        )
    }

    /// The resident set size in KiB (`VmRSS` of /proc/PID/status), while
    /// running.
    pub fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()?)).ok()?;
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))?
            .trim()
            .trim_end_matches("kB")
            .trim()
            .parse()
            .ok()
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        self.kill();
    }
}

/// The items of `kubectl get -o json` (a `List`, which k8s-openapi's typed
/// lists refuse).
fn items<T: serde::de::DeserializeOwned>(json: &str) -> Vec<T> {
    let mut list: serde_json::Value = serde_json::from_str(json).expect("kubectl's JSON");
    serde_json::from_value(list["items"].take()).expect("a list's items")
}

/// The deployed operator's restarts that were not failed starts, one line
/// per Pod. On a loaded machine a container can fail to start (`runc create
/// failed: ... unable to freeze`); the kubelet starts it again as it would
/// a crashed one and counts a restart. What it records tells them apart:
/// containerd ends a failed start with reason `StartError` (exit code 128)
/// and the kubelet writes a `Failed` Event for each (`count` adds up
/// repeats), where a crash of the operator leaves its own exit (`Error`,
/// `OOMKilled`) and no such Event. A Pod's restarts are all failed starts
/// only if every restarted container's last termination was one and its
/// `failed` Events count at least as many as its restarts; a crash before
/// a failed start is caught by the count. Pure.
fn crashes(pods: &[Pod], failed: &[Event]) -> Vec<String> {
    pods.iter()
        .filter_map(|p| {
            let name = p.metadata.name.as_deref().unwrap_or_default();
            let statuses = p.status.as_ref()?.container_statuses.as_ref()?;
            let restarted: Vec<_> = statuses.iter().filter(|c| c.restart_count > 0).collect();
            let restarts: i32 = restarted.iter().map(|c| c.restart_count).sum();
            if restarts == 0 {
                return None;
            }
            let failed_starts: i32 = failed
                .iter()
                .filter(|e| e.reason.as_deref() == Some("Failed"))
                .filter(|e| {
                    e.involved_object.name.as_deref() == Some(name)
                        && e.involved_object.uid == p.metadata.uid
                })
                .map(|e| e.count.unwrap_or(1).max(1))
                .sum();
            let last: Vec<String> = restarted
                .iter()
                .map(|c| {
                    let t = c.last_state.as_ref().and_then(|s| s.terminated.as_ref());
                    format!(
                        "{} last ended {} (exit code {}): {}",
                        c.name,
                        t.and_then(|t| t.reason.as_deref()).unwrap_or("unknown"),
                        t.map_or("-".to_string(), |t| t.exit_code.to_string()),
                        t.and_then(|t| t.message.as_deref()).unwrap_or_default()
                    )
                })
                .collect();
            let start_errors = restarted.iter().all(|c| {
                c.last_state
                    .as_ref()
                    .and_then(|s| s.terminated.as_ref())
                    .is_some_and(|t| t.reason.as_deref() == Some("StartError"))
            });
            (!start_errors || failed_starts < restarts).then(|| {
                format!(
                    "{name}: {restarts} restart(s), {failed_starts} failed start(s); {}",
                    last.join(", ")
                )
            })
        })
        .collect()
}

/// The image to run where a test names an upstream image. kwok runs no
/// containers, so locally the name is all that matters and is kept. On kind
/// (`just e2e` sets PODKEEPER_TEST_IMAGES=kind) nothing can be pulled: each
/// upstream Redis or nginx image maps to a tag of podkeeper's own Redis or
/// httpd image loaded there, a different tag for each different upstream
/// image, so that image changes still roll out.
pub fn image(upstream: &str) -> String {
    if !real_containers() {
        return upstream.to_string();
    }
    use podkeeper_dev::kind::versions::{
        HTTPD_IMAGE, HTTPD_ROLLOUT_IMAGES, REDIS_IMAGE, REDIS_ROLLOUT_IMAGES,
    };
    let (first, rest, order): (&str, [&str; 3], [&str; 4]) = if upstream.starts_with("redis") {
        (
            REDIS_IMAGE,
            REDIS_ROLLOUT_IMAGES,
            ["redis:7.4.2", "redis:7.4.3", "redis:7.4.1", "redis:7.2.5"],
        )
    } else if upstream.starts_with("nginx") {
        (
            HTTPD_IMAGE,
            HTTPD_ROLLOUT_IMAGES,
            ["nginx:1.14.2", "nginx:1.26", "nginx:1.27", "nginx:1.25"],
        )
    } else {
        panic!("no image on kind stands in for {upstream}");
    };
    match order.iter().position(|o| *o == upstream) {
        Some(0) => first.to_string(),
        Some(i) => rest[i - 1].to_string(),
        None if !upstream.contains(':') => first.to_string(),
        None => panic!("no image on kind stands in for {upstream}"),
    }
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A plain HTTP/1.0 GET; returns (status code, body), or None if nothing
/// listens yet.
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    write!(stream, "GET {path} HTTP/1.0\r\nHost: localhost\r\n\r\n").ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Some((code, body))
}

/// The collection's current resourceVersion, to watch from.
pub async fn current_rv<K>(api: &Api<K>) -> String
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    api.list(&kube::api::ListParams::default().limit(1))
        .await
        .expect("list")
        .metadata
        .resource_version
        .expect("a resourceVersion")
}

/// A raw watch from `rv`, so every event after it is seen.
pub async fn watch_from<K>(
    api: &Api<K>,
    rv: &str,
) -> futures::stream::BoxStream<'static, kube::Result<kube::api::WatchEvent<K>>>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    use futures::StreamExt;
    api.watch(&kube::api::WatchParams::default(), rv)
        .await
        .expect("watch")
        .boxed()
}

pub use podkeeper::podset::pods::pod_is_ready as is_ready;

/// The Pod's controller owner has `uid`.
pub fn owned_by(p: &k8s_openapi::api::core::v1::Pod, uid: &str) -> bool {
    p.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.uid == uid && r.controller == Some(true))
}

/// Runs `start`, then follows every event of the live Pods owned by `uid`
/// (from the moment before `start`), calling `check` after each, until
/// `until` holds; panics if that takes longer than 90 s.
pub async fn follow_owned_pods(
    env: &TestEnv,
    uid: &str,
    until: impl Fn(&std::collections::BTreeMap<String, k8s_openapi::api::core::v1::Pod>) -> bool,
    mut check: impl FnMut(&std::collections::BTreeMap<String, k8s_openapi::api::core::v1::Pod>),
    start: impl Future<Output = ()>,
) {
    use futures::TryStreamExt;
    use k8s_openapi::api::core::v1::Pod;
    use kube::ResourceExt;
    use kube::api::WatchEvent;
    let pods: Api<Pod> = env.api();
    let list = pods
        .list(&kube::api::ListParams::default())
        .await
        .expect("list pods");
    let rv = list
        .metadata
        .resource_version
        .clone()
        .expect("a resourceVersion");
    let mut state: std::collections::BTreeMap<String, Pod> = list
        .items
        .into_iter()
        .filter(|p| owned_by(p, uid) && p.metadata.deletion_timestamp.is_none())
        .map(|p| (p.name_any(), p))
        .collect();
    let mut stream = watch_from(&pods, &rv).await;
    start.await;
    let deadline = tokio::time::Instant::now() + patience(Duration::from_secs(90));
    while !until(&state) {
        let ev = tokio::time::timeout_at(deadline, stream.try_next())
            .await
            .expect("the Pods reached the expected state in time")
            .expect("watch event")
            .expect("watch open");
        match ev {
            WatchEvent::Added(p) | WatchEvent::Modified(p) if owned_by(&p, uid) => {
                if p.metadata.deletion_timestamp.is_some() {
                    state.remove(&p.name_any());
                } else {
                    state.insert(p.name_any(), p);
                }
            }
            WatchEvent::Deleted(p) => {
                state.remove(&p.name_any());
            }
            _ => continue,
        }
        check(&state);
    }
}

/// Checks every version of the namespace's Pods matching a label
/// `selector` as the API server sends it, from now until [`PodCheck::end`]:
/// an invariant held at every event, not only once things settle.
pub struct PodCheck {
    task: tokio::task::JoinHandle<()>,
    /// (Pod versions seen, what `check` found wrong).
    found: std::sync::Arc<Mutex<(usize, Vec<String>)>>,
}

impl PodCheck {
    /// `check` says what is wrong with a Pod version, if anything.
    pub fn start(
        env: &TestEnv,
        selector: &str,
        check: impl Fn(&Pod) -> Option<String> + Send + 'static,
    ) -> PodCheck {
        use futures::StreamExt;
        use kube::runtime::{WatchStreamExt, watcher};
        let pods: Api<Pod> = env.api();
        let found = std::sync::Arc::new(Mutex::new((0, Vec::new())));
        let config = watcher::Config::default().labels(selector);
        let task = {
            let found = found.clone();
            tokio::spawn(async move {
                let mut events =
                    std::pin::pin!(watcher(pods, config).default_backoff().applied_objects());
                while let Some(event) = events.next().await {
                    let Ok(pod) = event else { continue };
                    let wrong = check(&pod);
                    let mut found = found.lock().unwrap();
                    found.0 += 1;
                    if let Some(w) = wrong {
                        found
                            .1
                            .push(format!("{}: {w}", pod.metadata.name.unwrap_or_default()));
                    }
                }
            })
        };
        PodCheck { task, found }
    }

    /// Stops watching; panics with what was wrong, if anything, and
    /// returns how many Pod versions were checked.
    pub fn end(self) -> usize {
        self.task.abort();
        let (seen, wrong) = self.found.lock().unwrap().clone();
        assert!(
            wrong.is_empty(),
            "at {} of {seen} Pod versions: {wrong:#?}",
            wrong.len()
        );
        seen
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Pod whose one container restarted `restarts` times, its last
    /// termination `reason`.
    fn pod(restarts: i32, reason: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "podkeeper-1", "uid": "u1"},
            "status": {"containerStatuses": [{
                "name": "manager", "image": "podkeeper:dev", "imageID": "", "ready": true,
                "restartCount": restarts,
                "lastState": {"terminated": {
                    "reason": reason, "exitCode": if reason == "StartError" { 128 } else { 101 },
                    "message": "runc create failed: unable to freeze"}},
            }]},
        }))
        .unwrap()
    }

    fn failed(count: i32) -> Event {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "podkeeper-1.1"},
            "reason": "Failed",
            "count": count,
            "involvedObject": {"kind": "Pod", "name": "podkeeper-1", "uid": "u1"},
        }))
        .unwrap()
    }

    #[test]
    fn a_restart_after_a_failed_start_is_no_crash_of_the_deployed_operator() {
        let listed = serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {},
            "items": [serde_json::to_value(pod(1, "StartError")).unwrap()]});
        assert_eq!(
            items::<Pod>(&listed.to_string()),
            vec![pod(1, "StartError")]
        );
        assert!(crashes(&[pod(0, "Error")], &[]).is_empty());
        assert!(crashes(&[pod(1, "StartError")], &[failed(1)]).is_empty());
        assert!(crashes(&[pod(2, "StartError")], &[failed(1), failed(1)]).is_empty());
        // A crash: the operator's own exit.
        assert_eq!(crashes(&[pod(1, "Error")], &[]).len(), 1);
        assert_eq!(crashes(&[pod(1, "Error")], &[failed(1)]).len(), 1);
        // A crash, then a failed start: one restart is not accounted for.
        assert_eq!(crashes(&[pod(2, "StartError")], &[failed(1)]).len(), 1);
        // Another Pod's failed start.
        let mut other = failed(1);
        other.involved_object.uid = Some("u2".into());
        assert_eq!(crashes(&[pod(1, "StartError")], &[other]).len(), 1);
    }
}
