//! Starting and stopping the local control plane.
//!
//! Every component is a child process. Each is started through
//! `setpriv --pdeathsig KILL` where available, so that the kernel kills it
//! even if podkeeper itself is killed with SIGKILL; otherwise (and in any
//! case on drop) podkeeper kills them itself. The state directory (PKI, etcd
//! data, logs) is temporary and removed on shutdown.

use std::net::{Ipv4Addr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use base64::Engine;
use k8s_openapi::api::core::v1::Node;
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Client, Config};
use tokio::process::{Child, Command};

use super::pki::{self, Pki};
use super::{Error, ensure_binaries};

/// How to start the local cluster.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    /// Number of simulated nodes.
    pub nodes: u32,
    /// Raise the client QPS limits of the controller-manager and scheduler
    /// and remove the apiserver's in-flight limits (for benchmarks).
    pub raise_qps_limits: bool,
    /// Write an audit log of every request at Metadata level (for
    /// benchmarks that count requests by user agent); see
    /// [`LocalCluster::audit_log_path`].
    pub audit_log: bool,
    /// Where the state directory (PKI, etcd data, logs) is made: the
    /// system's temporary directory unless set.
    pub state_parent: Option<PathBuf>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        Self {
            nodes: 3,
            raise_qps_limits: false,
            audit_log: false,
            state_parent: None,
        }
    }
}

struct Component {
    name: &'static str,
    binary: PathBuf,
    args: Vec<String>,
    child: Child,
    log: PathBuf,
}

/// A running local control plane. Dropping it kills every component and
/// removes its state directory; [`LocalCluster::shutdown`] does the same and
/// waits for the processes to exit.
pub struct LocalCluster {
    components: Vec<Component>,
    kubeconfig: Kubeconfig,
    kubeconfig_path: PathBuf,
    apiserver_url: String,
    operator_kubeconfig: Kubeconfig,
    options: ClusterOptions,
    pki: Pki,
    state: Option<tempfile::TempDir>,
}

const NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";

/// The requests of the two controllers a benchmark compares, once each when
/// the response starts (watches) or completes, without bodies; nothing of
/// the rest (scheduler, kwok, the benchmark's driver), whose volume would
/// only slow the apiserver down.
fn audit_policy() -> String {
    format!(
        "apiVersion: audit.k8s.io/v1
kind: Policy
omitStages: [RequestReceived]
rules:
# The operator's writes to its own objects with their bodies, so that the
# benchmark can say what an idle operator wrote; they are few.
- level: Request
  users: [{:?}]
  verbs: [create, update, patch]
  resources:
  - group: podkeeper.dev
- level: Metadata
  users: [{:?}, {:?}]
- level: None
",
        pki::OPERATOR_USER,
        pki::OPERATOR_USER,
        pki::CONTROLLER_MANAGER_USER
    )
}

impl LocalCluster {
    /// Builds what is missing, starts every component and waits until the
    /// apiserver is ready and all nodes report Ready.
    pub async fn start(options: ClusterOptions) -> Result<Self, Error> {
        let binaries = tokio::task::spawn_blocking(ensure_binaries)
            .await
            .map_err(|e| Error::Startup {
                component: "build".into(),
                detail: e.to_string(),
            })??;
        let started = Instant::now();
        let state = tempfile::Builder::new()
            .prefix("podkeeper-cluster-")
            .tempdir_in(
                options
                    .state_parent
                    .clone()
                    .unwrap_or_else(std::env::temp_dir),
            )
            .map_err(|e| Error::io("creating the cluster state directory".into(), e))?;
        let dir = state.path().to_path_buf();
        let pki = pki::generate(&dir)?;
        if options.audit_log {
            std::fs::write(dir.join("audit-policy.yaml"), audit_policy())
                .map_err(|e| Error::io("writing the audit policy".into(), e))?;
        }

        let etcd_client = free_port()?;
        let etcd_peer = free_port()?;
        let apiserver_port = free_port()?;
        let apiserver_url = format!("https://127.0.0.1:{apiserver_port}");
        let kubeconfig = client_kubeconfig(
            &pki.ca_cert,
            &pki.admin_cert,
            &pki.admin_key,
            &apiserver_url,
        )?;
        let operator_kubeconfig = client_kubeconfig(
            &pki.ca_cert,
            &pki.operator_cert,
            &pki.operator_key,
            &apiserver_url,
        )?;
        let kubeconfig_path = dir.join("kubeconfig");
        write_kubeconfig(&kubeconfig, &kubeconfig_path)?;

        let mut cluster = LocalCluster {
            components: Vec::new(),
            kubeconfig,
            kubeconfig_path,
            apiserver_url,
            operator_kubeconfig,
            options: options.clone(),
            pki: pki.clone(),
            state: Some(state),
        };

        progress!(
            "podkeeper: starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kwok"
        );
        cluster.spawn(
            "etcd",
            &binaries.etcd,
            etcd_args(&dir, etcd_client, etcd_peer),
        )?;
        cluster.spawn(
            "kube-apiserver",
            &binaries.kube_apiserver,
            apiserver_args(&dir, &pki, etcd_client, apiserver_port, &options),
        )?;
        let client = cluster.client().await?;
        cluster.wait_apiserver_ready(&client).await?;
        install_delay_policy(&client).await?;

        let kc = cluster.kubeconfig_path.display().to_string();
        let kcm_kubeconfig = dir.join("controller-manager.kubeconfig");
        write_kubeconfig(
            &client_kubeconfig(
                &pki.ca_cert,
                &pki.controller_manager_cert,
                &pki.controller_manager_key,
                &cluster.apiserver_url,
            )?,
            &kcm_kubeconfig,
        )?;
        cluster.spawn(
            "kube-controller-manager",
            &binaries.kube_controller_manager,
            controller_manager_args(
                &kcm_kubeconfig.display().to_string(),
                &pki,
                options.raise_qps_limits,
            ),
        )?;
        cluster.spawn(
            "kube-scheduler",
            &binaries.kube_scheduler,
            scheduler_args(&kc, &options),
        )?;
        let stages = dir.join("kwok-stages.yaml");
        std::fs::write(&stages, include_str!("kwok-stages.yaml"))
            .map_err(|e| Error::io("writing kwok stages".into(), e))?;
        cluster.spawn("kwok", &binaries.kwok, kwok_args(&kc, &stages))?;
        keep_pod_traffic_local();

        create_nodes(&client, options.nodes).await?;
        cluster.wait_nodes_ready(&client, options.nodes).await?;
        progress!(
            "podkeeper: local cluster ready at {} with {} kwok nodes in {:.1}s",
            cluster.apiserver_url,
            options.nodes,
            started.elapsed().as_secs_f64()
        );
        Ok(cluster)
    }

    /// The admin kubeconfig (client certificate in `system:masters`).
    pub fn kubeconfig(&self) -> &Kubeconfig {
        &self.kubeconfig
    }

    /// Where the admin kubeconfig is written inside the state directory.
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    /// Writes the admin kubeconfig, with certificates inline, to `path`.
    pub fn write_kubeconfig(&self, path: &Path) -> Result<(), Error> {
        write_kubeconfig(&self.kubeconfig, path)
    }

    /// The apiserver's URL.
    pub fn apiserver_url(&self) -> &str {
        &self.apiserver_url
    }

    /// A second client identity, `podkeeper-operator` in `system:masters`,
    /// so that an operator's requests can be told apart from a driver's.
    pub fn operator_kubeconfig(&self) -> &Kubeconfig {
        &self.operator_kubeconfig
    }

    /// The apiserver's audit log (JSON lines), when
    /// [`ClusterOptions::audit_log`] is on.
    pub fn audit_log_path(&self) -> Option<PathBuf> {
        let dir = self.state.as_ref()?.path();
        self.options.audit_log.then(|| dir.join("audit.log"))
    }

    /// Stops kube-apiserver and starts it again on the same port with the
    /// same flags; etcd and its data are untouched. Returns once it is
    /// ready again.
    pub async fn restart_apiserver(&mut self) -> Result<(), Error> {
        self.restart("kube-apiserver", None).await?;
        let client = self.client().await?;
        self.wait_apiserver_ready(&client).await
    }

    /// Restarts kube-controller-manager with its client QPS limits raised
    /// (5000/10000) or at the defaults.
    pub async fn set_controller_manager_qps(&mut self, raised: bool) -> Result<(), Error> {
        let dir = self
            .state
            .as_ref()
            .map(|s| s.path().to_path_buf())
            .unwrap_or_default();
        let kc = dir
            .join("controller-manager.kubeconfig")
            .display()
            .to_string();
        let args = controller_manager_args(&kc, &self.pki, raised);
        self.restart("kube-controller-manager", Some(args)).await
    }

    /// Kills one component, waits for it to exit and starts it again, with
    /// new flags if given.
    async fn restart(&mut self, name: &str, args: Option<Vec<String>>) -> Result<(), Error> {
        let index = self
            .components
            .iter()
            .position(|c| c.name == name)
            .ok_or_else(|| Error::Startup {
                component: name.into(),
                detail: "no such component".into(),
            })?;
        let mut old = self.components.remove(index);
        let _ = old.child.start_kill();
        let _ = old.child.wait().await;
        let args = args.unwrap_or(old.args);
        self.spawn(old.name, &old.binary, args)?;
        // Keep the start order, which shutdown reverses.
        let restarted = self.components.pop().expect("just spawned");
        self.components.insert(index, restarted);
        Ok(())
    }

    /// An admin client for this cluster.
    pub async fn client(&self) -> Result<Client, Error> {
        let config =
            Config::from_custom_kubeconfig(self.kubeconfig.clone(), &KubeConfigOptions::default())
                .await
                .map_err(|e| Error::Startup {
                    component: "kubeconfig".into(),
                    detail: e.to_string(),
                })?;
        Ok(Client::try_from(config)?)
    }

    /// Resolves when any component exits, naming it and the tail of its log.
    pub async fn wait_for_component_exit(&mut self) -> Error {
        let waits = self.components.iter_mut().map(|c| {
            Box::pin(async move {
                let status = c.child.wait().await;
                (c.name, c.log.clone(), status)
            })
        });
        let ((name, log, status), _, _) = futures::future::select_all(waits).await;
        Error::Startup {
            component: name.into(),
            detail: format!(
                "exited unexpectedly ({status:?}); last log lines:\n{}",
                log_tail(&log)
            ),
        }
    }

    /// Stops every component (in reverse order of start), waits for them to
    /// exit and removes the state directory.
    pub async fn shutdown(mut self) {
        while let Some(mut c) = self.components.pop() {
            let _ = c.child.start_kill();
            let _ = c.child.wait().await;
        }
        if let Some(state) = self.state.take() {
            let _ = state.close();
        }
    }

    fn spawn(&mut self, name: &'static str, binary: &Path, args: Vec<String>) -> Result<(), Error> {
        let dir = self
            .state
            .as_ref()
            .map(|s| s.path().to_path_buf())
            .unwrap_or_default();
        let log = dir.join(format!("{name}.log"));
        let log_file = std::fs::File::options()
            .create(true)
            .append(true)
            .open(&log)
            .map_err(|e| Error::io(format!("creating {}", log.display()), e))?;
        let log_err = log_file
            .try_clone()
            .map_err(|e| Error::io("cloning log handle".into(), e))?;
        let mut cmd = match setpriv() {
            Some(setpriv) => {
                let mut cmd = Command::new(setpriv);
                cmd.args(["--pdeathsig", "KILL", "--"]).arg(binary);
                cmd
            }
            None => Command::new(binary),
        };
        cmd.args(&args)
            .current_dir(&dir)
            .stdin(Stdio::null())
            .stdout(log_file)
            .stderr(log_err)
            .kill_on_drop(true);
        let child = cmd.spawn().map_err(|e| Error::Startup {
            component: name.into(),
            detail: format!("{}: {e}", binary.display()),
        })?;
        self.components.push(Component {
            name,
            binary: binary.to_path_buf(),
            args,
            child,
            log,
        });
        Ok(())
    }

    /// Fails fast, with the component's log, if one has already died.
    fn check_alive(&mut self) -> Result<(), Error> {
        for c in &mut self.components {
            if let Ok(Some(status)) = c.child.try_wait() {
                return Err(Error::Startup {
                    component: c.name.into(),
                    detail: format!(
                        "exited during start-up ({status}); last log lines:\n{}",
                        log_tail(&c.log)
                    ),
                });
            }
        }
        Ok(())
    }

    async fn wait_apiserver_ready(&mut self, client: &Client) -> Result<(), Error> {
        let deadline = Instant::now() + Duration::from_secs(120);
        let port = self
            .apiserver_url
            .rsplit(':')
            .next()
            .and_then(|p| p.parse::<u16>().ok())
            .unwrap_or(0);
        // Wait for the port first, so that the client does not log every
        // refused connection.
        while tokio::net::TcpStream::connect((Ipv4Addr::LOCALHOST, port))
            .await
            .is_err()
        {
            self.check_alive()?;
            if Instant::now() > deadline {
                return Err(Error::Startup {
                    component: "kube-apiserver".into(),
                    detail: "did not open its port within 120s".into(),
                });
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        loop {
            self.check_alive()?;
            let req = http::Request::get("/readyz")
                .body(Vec::new())
                .expect("static request");
            match client.request_text(req).await {
                Ok(body) if body.trim() == "ok" => return Ok(()),
                Ok(_) | Err(_) if Instant::now() < deadline => {
                    tokio::time::sleep(Duration::from_millis(200)).await
                }
                Ok(body) => {
                    return Err(Error::Startup {
                        component: "kube-apiserver".into(),
                        detail: format!("not ready after 120s: {body}"),
                    });
                }
                Err(e) => {
                    return Err(Error::Startup {
                        component: "kube-apiserver".into(),
                        detail: format!("not ready after 120s: {e}"),
                    });
                }
            }
        }
    }

    async fn wait_nodes_ready(&mut self, client: &Client, nodes: u32) -> Result<(), Error> {
        let api: Api<Node> = Api::all(client.clone());
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            self.check_alive()?;
            let list = api.list(&ListParams::default()).await?;
            let ready = list.items.iter().filter(|n| node_is_ready(n)).count();
            if ready >= nodes as usize {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::Startup {
                    component: "kwok".into(),
                    detail: format!("only {ready} of {nodes} nodes Ready after 60s"),
                });
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        for c in self.components.iter_mut().rev() {
            let _ = c.child.start_kill();
        }
    }
}

fn node_is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

async fn create_nodes(client: &Client, nodes: u32) -> Result<(), Error> {
    let api: Api<Node> = Api::all(client.clone());
    for i in 0..nodes {
        let node = Node {
            metadata: ObjectMeta {
                name: Some(format!("kwok-node-{i}")),
                annotations: Some([(NODE_ANNOTATION.to_string(), "fake".to_string())].into()),
                labels: Some(
                    [
                        (
                            "kubernetes.io/hostname".to_string(),
                            format!("kwok-node-{i}"),
                        ),
                        ("kubernetes.io/os".to_string(), "linux".to_string()),
                        ("kubernetes.io/arch".to_string(), "amd64".to_string()),
                        ("type".to_string(), "kwok".to_string()),
                    ]
                    .into(),
                ),
                ..Default::default()
            },
            ..Default::default()
        };
        api.create(&PostParams::default(), &node).await?;
    }
    Ok(())
}

/// Installs the MutatingAdmissionPolicy that gives Pods the delay
/// annotations of their namespace's `kwok-delays` ConfigMap (see
/// `kwok-delays.yaml`).
async fn install_delay_policy(client: &Client) -> Result<(), Error> {
    use k8s_openapi::api::admissionregistration::v1::{
        MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding,
    };
    use serde::Deserialize;
    let invalid = |e: serde_yaml_ng::Error| Error::Startup {
        component: "kwok-delays.yaml".into(),
        detail: e.to_string(),
    };
    let mut docs = serde_yaml_ng::Deserializer::from_str(include_str!("kwok-delays.yaml"));
    let policy = docs.next().map(MutatingAdmissionPolicy::deserialize);
    let binding = docs.next().map(MutatingAdmissionPolicyBinding::deserialize);
    let (Some(policy), Some(binding)) = (policy, binding) else {
        return Err(Error::Startup {
            component: "kwok-delays.yaml".into(),
            detail: "expected a policy and its binding".into(),
        });
    };
    let params = PostParams::default();
    Api::<MutatingAdmissionPolicy>::all(client.clone())
        .create(&params, &policy.map_err(invalid)?)
        .await?;
    Api::<MutatingAdmissionPolicyBinding>::all(client.clone())
        .create(&params, &binding.map_err(invalid)?)
        .await?;
    Ok(())
}

fn setpriv() -> Option<PathBuf> {
    ["/usr/bin/setpriv", "/bin/setpriv"]
        .iter()
        .map(PathBuf::from)
        .find(|p| p.exists())
}

fn free_port() -> Result<u16, Error> {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .map_err(|e| Error::io("finding a free port".into(), e))?;
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| Error::io("finding a free port".into(), e))
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(25)..].join("\n")
}

fn etcd_args(dir: &Path, client: u16, peer: u16) -> Vec<String> {
    let client_url = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    vec![
        "--name=podkeeper".into(),
        format!("--data-dir={}", dir.join("etcd").display()),
        format!("--listen-client-urls={client_url}"),
        format!("--advertise-client-urls={client_url}"),
        format!("--listen-peer-urls={peer_url}"),
        format!("--initial-advertise-peer-urls={peer_url}"),
        format!("--initial-cluster=podkeeper={peer_url}"),
        // A throwaway cluster: durability is not worth the fsync latency.
        "--unsafe-no-fsync=true".into(),
        "--quota-backend-bytes=8589934592".into(),
        "--log-level=warn".into(),
    ]
}

fn apiserver_args(
    dir: &Path,
    pki: &Pki,
    etcd: u16,
    port: u16,
    options: &ClusterOptions,
) -> Vec<String> {
    let p = |p: &Path| p.display().to_string();
    let mut args = vec![
        format!("--etcd-servers=http://127.0.0.1:{etcd}"),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        // The endpoint reconciler refuses loopback addresses; nothing here
        // needs the kubernetes Service endpoints.
        "--endpoint-reconciler-type=none".into(),
        format!("--secure-port={port}"),
        format!("--cert-dir={}", dir.join("apiserver-certs").display()),
        format!("--tls-cert-file={}", p(&pki.serving_cert)),
        format!("--tls-private-key-file={}", p(&pki.serving_key)),
        format!("--client-ca-file={}", p(&pki.ca_cert)),
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local".into(),
        format!("--service-account-key-file={}", p(&pki.service_account_pub)),
        format!(
            "--service-account-signing-key-file={}",
            p(&pki.service_account_key)
        ),
        "--service-cluster-ip-range=10.96.0.0/16".into(),
        "--authorization-mode=Node,RBAC".into(),
        "--allow-privileged=true".into(),
        // `kubectl get --raw '/debug/pprof/profile?seconds=7'` gives the API
        // server's CPU profile (how BENCHMARKS.md compares what each
        // controller's requests cost it); idle until asked.
        "--profiling=true".into(),
        "--v=1".into(),
    ];
    if options.audit_log {
        args.push(format!(
            "--audit-policy-file={}",
            dir.join("audit-policy.yaml").display()
        ));
        args.push(format!(
            "--audit-log-path={}",
            dir.join("audit.log").display()
        ));
        args.push("--audit-log-format=json".into());
        // Buffered, so that requests do not wait on the log file.
        args.push("--audit-log-mode=batch".into());
        args.push("--audit-log-maxsize=0".into());
    }
    if options.raise_qps_limits {
        args.push("--max-requests-inflight=0".into());
        args.push("--max-mutating-requests-inflight=0".into());
        args.push("--enable-priority-and-fairness=false".into());
    }
    args
}

fn controller_manager_args(kubeconfig: &str, pki: &Pki, raise_qps_limits: bool) -> Vec<String> {
    let mut args = vec![
        format!("--kubeconfig={kubeconfig}"),
        "--leader-elect=false".into(),
        "--bind-address=127.0.0.1".into(),
        "--secure-port=0".into(),
        format!("--root-ca-file={}", pki.ca_cert.display()),
        format!(
            "--service-account-private-key-file={}",
            pki.service_account_key.display()
        ),
        // Every default controller, the garbage collector included.
        "--controllers=*".into(),
        "--v=1".into(),
    ];
    if raise_qps_limits {
        args.push("--kube-api-qps=5000".into());
        args.push("--kube-api-burst=10000".into());
    }
    args
}

fn scheduler_args(kubeconfig: &str, options: &ClusterOptions) -> Vec<String> {
    let mut args = vec![
        format!("--kubeconfig={kubeconfig}"),
        "--leader-elect=false".into(),
        "--bind-address=127.0.0.1".into(),
        "--secure-port=0".into(),
        "--v=1".into(),
    ];
    if options.raise_qps_limits {
        args.push("--kube-api-qps=5000".into());
        args.push("--kube-api-burst=10000".into());
    }
    args
}

/// The first two octets of the /16 kwok gives Pod IPs from; both
/// [`POD_CIDR`] and kwok's `--cidr` (the range's first address) come from it.
macro_rules! pod_network {
    () => {
        "10.244"
    };
}
/// The range kwok gives Pod IPs from: nothing answers there, and nothing
/// sent there should leave the machine.
pub const POD_CIDR: &str = concat!(pod_network!(), ".0.0/16");

/// Nothing listens at a kwok Pod's IP, but the operator connects to its
/// Redis members there. Without a route of their own, those connections
/// follow the default route off the machine (seen here: a proxy answering
/// `HTTP/1.1 400` to every connect, 10 ms each, which also cost the operator
/// CPU in every benchmark stage). An `unreachable` route for the range makes
/// each connect fail at once, on this machine. It needs root (CI runs as
/// root); without it the run goes on and says so. The route is left in
/// place: other local clusters use the same range, and more specific routes
/// (a kind cluster's per-node ones) still win over it.
fn keep_pod_traffic_local() {
    let failed = match std::process::Command::new("ip")
        .args(["route", "add", "unreachable", POD_CIDR])
        .output()
    {
        Ok(o) if o.status.success() => {
            progress!(
                "podkeeper: added route `unreachable {POD_CIDR}`: connections to kwok Pod IPs stay on this machine"
            );
            return;
        }
        Ok(o) => String::from_utf8_lossy(&o.stderr).trim().to_string(),
        Err(e) => e.to_string(),
    };
    if !failed.contains("File exists") {
        progress!(
            "podkeeper: warning: cannot add route `unreachable {POD_CIDR}` ({failed}): connections to kwok Pod IPs (the operator's Redis rounds) follow the default route"
        );
    }
}

fn kwok_args(kubeconfig: &str, stages: &Path) -> Vec<String> {
    vec![
        format!("--kubeconfig={kubeconfig}"),
        format!("--config={}", stages.display()),
        format!("--manage-nodes-with-annotation-selector={NODE_ANNOTATION}=fake"),
        // kwok renews each node's Lease, which the node lifecycle controller
        // takes as the heartbeat, so nodes never turn NotReady.
        "--node-lease-duration-seconds=40".into(),
        concat!("--cidr=", pod_network!(), ".0.1/16").into(),
        "--node-ip=10.0.0.1".into(),
    ]
}

fn client_kubeconfig(
    ca: &Path,
    cert: &Path,
    key: &Path,
    server: &str,
) -> Result<Kubeconfig, Error> {
    let b64 = |path: &Path| -> Result<String, Error> {
        let bytes =
            std::fs::read(path).map_err(|e| Error::io(format!("reading {}", path.display()), e))?;
        Ok(base64::engine::general_purpose::STANDARD.encode(bytes))
    };
    let yaml = format!(
        r#"apiVersion: v1
kind: Config
clusters:
- name: podkeeper-local
  cluster:
    server: {server}
    certificate-authority-data: {ca}
users:
- name: podkeeper-admin
  user:
    client-certificate-data: {cert}
    client-key-data: {key}
contexts:
- name: podkeeper-local
  context:
    cluster: podkeeper-local
    user: podkeeper-admin
    namespace: default
current-context: podkeeper-local
"#,
        ca = b64(ca)?,
        cert = b64(cert)?,
        key = b64(key)?,
    );
    Kubeconfig::from_yaml(&yaml).map_err(|e| Error::Startup {
        component: "kubeconfig".into(),
        detail: e.to_string(),
    })
}

fn write_kubeconfig(kubeconfig: &Kubeconfig, path: &Path) -> Result<(), Error> {
    let yaml = serde_yaml_ng::to_string(kubeconfig).map_err(|e| Error::Startup {
        component: "kubeconfig".into(),
        detail: e.to_string(),
    })?;
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| Error::io(format!("creating {}", parent.display()), e))?;
    }
    std::fs::write(path, yaml).map_err(|e| Error::io(format!("writing {}", path.display()), e))
}
