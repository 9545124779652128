//! A kind cluster on the node image: kind's configuration (pure), creating
//! the cluster, and the Pod network, which is ours instead of kindnetd (whose
//! image cannot be pulled here): each node gets a CNI configuration for its
//! own Pod CIDR (ptp + host-local + portmap) and a route to every other
//! node's Pod CIDR through that node's address.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

use super::{Error, docker, versions as v};

/// kind's cluster configuration: one control plane, `workers` workers, no
/// default CNI, kubeadm pointed at the preloaded images, and the kubelet
/// allowed to run on cgroup v1 (kubelet 1.37 refuses it by default) and to
/// run up to 250 Pods (its /24 Pod CIDR has 254 addresses; the default is
/// 110, which the test suite's many small Pods reach), with kubeadm's
/// timeouts raised: on a loaded 2-core machine the API server can take more
/// than kubeadm's default minute to answer.
pub fn kind_config(workers: u32) -> String {
    let mut nodes = String::from("- role: control-plane\n");
    for _ in 0..workers {
        nodes.push_str("- role: worker\n");
    }
    format!(
        "kind: Cluster
apiVersion: kind.x-k8s.io/v1alpha4
networking:
  disableDefaultCNI: true
nodes:
{nodes}kubeadmConfigPatches:
- |
  kind: ClusterConfiguration
  imageRepository: {repo}
  etcd:
    local:
      imageTag: {etcd}
- |
  kind: KubeletConfiguration
  failCgroupV1: false
  maxPods: 250
- |
  kind: InitConfiguration
  nodeRegistration:
    imagePullPolicy: Never
  timeouts:
    controlPlaneComponentHealthCheck: 10m0s
    kubernetesAPICall: 5m0s
- |
  kind: JoinConfiguration
  nodeRegistration:
    imagePullPolicy: Never
  timeouts:
    kubernetesAPICall: 5m0s
    tlsBootstrap: 10m0s
",
        repo = v::CLUSTER_IMAGE_REPOSITORY,
        etcd = v::etcd_tag(),
    )
}

/// What the Pod network needs to know about a node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeAddress {
    pub name: String,
    pub ip: String,
    pub pod_cidr: String,
}

/// The nodes of a `kubectl get nodes -o json` answer (those with a Pod
/// CIDR and an InternalIP).
pub fn parse_nodes(json: &Value) -> Vec<NodeAddress> {
    json["items"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|node| {
            let name = node["metadata"]["name"].as_str()?.to_string();
            let pod_cidr = node["spec"]["podCIDR"].as_str()?.to_string();
            let ip = node["status"]["addresses"]
                .as_array()?
                .iter()
                .find(|a| a["type"] == "InternalIP")?["address"]
                .as_str()?
                .to_string();
            Some(NodeAddress { name, ip, pod_cidr })
        })
        .collect()
}

/// The CNI configuration of a node whose Pods get addresses from `pod_cidr`.
pub fn cni_config(pod_cidr: &str) -> String {
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "podkeeper",
        "plugins": [
            {
                "type": "ptp",
                "ipMasq": false,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{ "subnet": pod_cidr }]],
                    "routes": [{ "dst": "0.0.0.0/0" }]
                }
            },
            { "type": "portmap", "capabilities": { "portMappings": true } }
        ]
    })
    .to_string()
}

/// The shell run on `node`: its CNI configuration, and forwarding on with a
/// route to each other node's Pods, now and at every start of the node (a
/// systemd unit: a node container restarted gets a new network namespace,
/// without the routes, which kindnetd would otherwise have put back).
pub fn network_script(node: &NodeAddress, all: &[NodeAddress]) -> String {
    let mut routes = String::from("sysctl -qw net.ipv4.ip_forward=1\n");
    for other in all.iter().filter(|o| o.name != node.name) {
        routes.push_str(&format!(
            "ip route replace {} via {}\n",
            other.pod_cidr, other.ip
        ));
    }
    format!(
        "set -e\nmkdir -p /etc/cni/net.d /etc/podkeeper\ncat > /etc/cni/net.d/10-podkeeper.conflist.tmp <<'EOF'\n{}\nEOF\nmv /etc/cni/net.d/10-podkeeper.conflist.tmp /etc/cni/net.d/10-podkeeper.conflist\n\
         cat > /etc/podkeeper/routes.sh <<'EOF'\n{routes}EOF\n\
         cat > /etc/systemd/system/podkeeper-routes.service <<'EOF'\n{ROUTES_UNIT}EOF\n\
         systemctl daemon-reload\nsystemctl enable -q podkeeper-routes.service\nsh /etc/podkeeper/routes.sh\n",
        cni_config(&node.pod_cidr)
    )
}

/// The unit that puts a node's Pod routes back when it starts.
const ROUTES_UNIT: &str = "[Unit]\nDescription=podkeeper: routes to the other nodes' Pods\nBefore=kubelet.service\n\n[Service]\nType=oneshot\nExecStart=/bin/sh /etc/podkeeper/routes.sh\n\n[Install]\nWantedBy=multi-user.target\n";

/// CoreDNS's Corefile without its `forward` block: names outside the
/// cluster are not resolved. The nodes' resolver is Docker's 127.0.0.11,
/// which from a Pod's network namespace is CoreDNS itself (a loop CoreDNS
/// detects and exits on), and the cluster sends no traffic elsewhere.
pub fn corefile_without_forward(corefile: &str) -> String {
    let balance = |line: &str| line.matches('{').count() as i64 - line.matches('}').count() as i64;
    let mut out = String::new();
    // Open braces of the forward block being skipped.
    let mut skipping: i64 = 0;
    for line in corefile.lines() {
        if skipping > 0 {
            skipping += balance(line);
            continue;
        }
        if line.trim_start().starts_with("forward ") {
            skipping = balance(line);
            continue;
        }
        out.push_str(line);
        out.push('\n');
    }
    out
}

/// Options of [`up`].
#[derive(Clone, Debug)]
pub struct UpOptions {
    pub name: String,
    pub workers: u32,
    /// Deploy the object store too ([`super::object_store`]).
    pub object_store: bool,
    /// Enforce NetworkPolicies ([`super::network_policies`]).
    pub network_policies: bool,
}

fn kind(kind: &Path) -> Command {
    let mut cmd = Command::new(kind);
    // kind finds docker on PATH; nothing else to set.
    cmd.env("KIND_EXPERIMENTAL_PROVIDER", "docker");
    cmd
}

/// The names of existing kind clusters.
pub fn clusters(kind_bin: &Path) -> Result<Vec<String>, Error> {
    let out = kind(kind_bin)
        .args(["get", "clusters"])
        .output()
        .map_err(|e| Error::io("running kind".into(), e))?;
    Ok(String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect())
}

/// Why an existing cluster cannot be reused, if it cannot: its nodes run
/// another node image (built from other sources), or its API server does not
/// answer within a minute (say, its containers came back after the Docker
/// engine restarted and the control plane did not), or a node came back on
/// another address.
fn unusable(name: &str, node_image: &str) -> Option<String> {
    let node = control_plane(name);
    let image = docker::output(&["inspect", "-f", "{{.Config.Image}}", &node])
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    if image != node_image {
        return Some(format!("its node runs image {image:?}, not {node_image}"));
    }
    if network_is_ours() == Some(false) {
        return Some(format!(
            "the Docker network {DOCKER_NETWORK} has no subnet of podkeeper's (a restarted node could not keep its address)"
        ));
    }
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        match control_plane_kubectl(name, &["get", "--raw", "/readyz"]) {
            Ok(_) => return moved_nodes_of(name),
            Err(e) if std::time::Instant::now() > deadline => {
                return Some(format!("its API server did not answer in 60 s: {e}"));
            }
            // A control plane whose containers just restarted takes a few
            // seconds to serve; ask again shortly.
            Err(_) => std::thread::sleep(std::time::Duration::from_secs(1)),
        }
    }
}

/// Why the cluster's nodes cannot talk, if they cannot: the Docker engine
/// hands out container addresses again when it restarts, and a node that
/// came back on another address still registers (and is routed to) at its
/// old one.
fn moved_nodes_of(name: &str) -> Option<String> {
    let json = match control_plane_kubectl(name, &["get", "nodes", "-o", "json"]) {
        Ok(json) => json,
        Err(e) => return Some(format!("its nodes could not be listed: {e}")),
    };
    let nodes = parse_nodes(&serde_json::from_str(&json).unwrap_or(Value::Null));
    let addresses: Vec<(String, String)> = nodes
        .iter()
        .map(|n| {
            let ip = docker::output(&[
                "inspect",
                "-f",
                "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}",
                &n.name,
            ])
            .map(|s| s.trim().to_string())
            .unwrap_or_default();
            (n.name.clone(), ip)
        })
        .collect();
    let moved = moved_nodes(&nodes, &addresses);
    (!moved.is_empty()).then(|| format!("nodes on new addresses: {}", moved.join(", ")))
}

/// The nodes whose container address (`addresses`: node name, address) is
/// not the InternalIP the node registered with, as "name old -> new".
pub fn moved_nodes(nodes: &[NodeAddress], addresses: &[(String, String)]) -> Vec<String> {
    nodes
        .iter()
        .filter_map(|n| {
            let (_, now) = addresses.iter().find(|(name, _)| *name == n.name)?;
            (*now != n.ip).then(|| format!("{} {} -> {now}", n.name, n.ip))
        })
        .collect()
}

/// The Docker network kind puts its nodes on.
const DOCKER_NETWORK: &str = "kind";
/// The label on the `kind` network podkeeper made.
const NETWORK_LABEL: &str = "podkeeper.dev/kind-network";

/// Whether the `kind` network is podkeeper's: made with an IPv4 subnet of
/// its own, so a node restarted (`bench-redis --node-restarts`, the
/// kind_storage node-restart test) can be put back at its address (Docker
/// refuses `network connect --ip` on a network whose subnet it chose, as
/// the one kind makes itself). `None`: there is no such network.
fn network_is_ours() -> Option<bool> {
    let label = docker::output(&[
        "network",
        "inspect",
        "-f",
        &format!("{{{{index .Labels \"{NETWORK_LABEL}\"}}}}"),
        DOCKER_NETWORK,
    ])
    .ok()?;
    Some(label.trim() == "true")
}

/// Makes the `kind` network with a subnet of podkeeper's choosing (the
/// first /16 of 172.18-172.31 no other network holds), replacing one
/// without it that no container is on. One that containers are on is
/// left: its clusters would have to go first.
fn ensure_network() -> Result<(), Error> {
    match network_is_ours() {
        Some(true) => return Ok(()),
        Some(false) => {
            let attached = docker::output(&[
                "network",
                "inspect",
                "-f",
                "{{len .Containers}}",
                DOCKER_NETWORK,
            ])?;
            if attached.trim() != "0" {
                super::progress(&format!(
                    "the Docker network {DOCKER_NETWORK} has containers and no subnet of podkeeper's: node restarts cannot keep a node's address (delete the kind clusters on it to have it remade)"
                ));
                return Ok(());
            }
            docker::output(&["network", "rm", DOCKER_NETWORK])?;
        }
        None => {}
    }
    let mut refused = String::new();
    for second in 18..=31 {
        let subnet = format!("172.{second}.0.0/16");
        let gateway = format!("172.{second}.0.1");
        match docker::output(&[
            "network",
            "create",
            "--driver",
            "bridge",
            "--subnet",
            &subnet,
            "--gateway",
            &gateway,
            "--opt",
            "com.docker.network.bridge.enable_ip_masquerade=true",
            "--label",
            &format!("{NETWORK_LABEL}=true"),
            DOCKER_NETWORK,
        ]) {
            Ok(_) => {
                super::progress(&format!("Docker network {DOCKER_NETWORK}: {subnet}"));
                return Ok(());
            }
            Err(e) => refused = e.to_string(),
        }
    }
    Err(Error::Step {
        what: format!("creating the Docker network {DOCKER_NETWORK}"),
        detail: format!("no /16 of 172.18-172.31 was free: {refused}"),
    })
}

/// Creates the cluster on `node_image` unless a usable one exists (one that
/// is not is deleted first), then sets up the Pod network and waits for every
/// node to be Ready.
pub fn create(kind_bin: &Path, node_image: &str, opts: &UpOptions) -> Result<(), Error> {
    let mut exists = clusters(kind_bin)?.contains(&opts.name);
    if exists {
        if let Some(why) = unusable(&opts.name, node_image) {
            super::progress(&format!(
                "kind cluster {} cannot be reused ({why}): deleting it",
                opts.name
            ));
            delete(kind_bin, &opts.name)?;
            exists = false;
        } else {
            super::progress(&format!("reusing kind cluster {}", opts.name));
        }
    }
    if !exists {
        ensure_network()?;
        super::progress(&format!(
            "kind create cluster --name {} (1 control plane, {} workers)",
            opts.name, opts.workers
        ));
        let config = tempfile::NamedTempFile::new()
            .map_err(|e| Error::io("writing the kind config".into(), e))?;
        std::fs::write(config.path(), kind_config(opts.workers))
            .map_err(|e| Error::io("writing the kind config".into(), e))?;
        // kind would also merge its kubeconfig into ~/.kube/config (and
        // switch the current context); it goes to a scratch file instead,
        // and `up` writes the one to use.
        let scratch_kubeconfig = config.path().with_extension("kubeconfig");
        let status = kind(kind_bin)
            .args([
                "create", "cluster", "--name", &opts.name, "--image", node_image,
            ])
            .arg("--config")
            .arg(config.path())
            .arg("--kubeconfig")
            .arg(&scratch_kubeconfig)
            .status()
            .map_err(|e| Error::io("running kind create cluster".into(), e))?;
        let _ = std::fs::remove_file(&scratch_kubeconfig);
        if !status.success() {
            return Err(Error::Step {
                what: "kind create cluster".into(),
                detail: format!(
                    "exit {status}; see the output above (`kind export logs --name {}` keeps the node logs)",
                    opts.name
                ),
            });
        }
    }
    network(&opts.name, 1 + opts.workers as usize)?;
    super::progress("waiting for every node to be Ready");
    control_plane_kubectl(
        &opts.name,
        &[
            "wait",
            "--for=condition=Ready",
            "nodes",
            "--all",
            "--timeout=300s",
        ],
    )?;
    cluster_dns(&opts.name)?;
    Ok(())
}

fn control_plane(name: &str) -> String {
    format!("{name}-control-plane")
}

/// kubectl inside the control-plane node, with its admin kubeconfig.
pub fn control_plane_kubectl(name: &str, args: &[&str]) -> Result<String, Error> {
    let node = control_plane(name);
    let mut all = vec![
        "exec",
        node.as_str(),
        "kubectl",
        "--kubeconfig=/etc/kubernetes/admin.conf",
    ];
    all.extend_from_slice(args);
    docker::output(&all)
}

/// kubectl inside the control-plane node, as [`control_plane_kubectl`], with
/// `input` on its stdin (`apply -f -`).
pub fn control_plane_kubectl_input(
    name: &str,
    args: &[&str],
    input: &str,
) -> Result<String, Error> {
    let node = control_plane(name);
    let mut all = vec![
        "exec",
        "-i",
        node.as_str(),
        "kubectl",
        "--kubeconfig=/etc/kubernetes/admin.conf",
    ];
    all.extend_from_slice(args);
    docker::output_with_input(&all, input)
}

/// Server-side applies `manifest` in cluster `name` as podkeeper-dev
/// (taking over fields another manager set): idempotent, and a Secret's
/// data is not copied into an annotation.
pub fn apply(name: &str, manifest: &str) -> Result<String, Error> {
    control_plane_kubectl_input(
        name,
        &[
            "apply",
            "--server-side",
            "--field-manager=podkeeper-dev",
            "--force-conflicts",
            "-f",
            "-",
        ],
        manifest,
    )
}

/// Writes each node's CNI configuration and routes (idempotent), once all
/// `expected` nodes have a Pod CIDR.
fn network(name: &str, expected: usize) -> Result<(), Error> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let nodes = loop {
        let json = control_plane_kubectl(name, &["get", "nodes", "-o", "json"])?;
        let value: Value = serde_json::from_str(&json).map_err(|e| Error::Step {
            what: "reading the node list".into(),
            detail: e.to_string(),
        })?;
        let nodes = parse_nodes(&value);
        if nodes.len() >= expected {
            break nodes;
        }
        if std::time::Instant::now() > deadline {
            return Err(Error::Step {
                what: "waiting for the nodes' Pod CIDRs".into(),
                detail: format!("{} of {expected} nodes have one after 120 s", nodes.len()),
            });
        }
        // Pod CIDRs are assigned by the controller manager right after a node
        // registers; poll the list again shortly.
        std::thread::sleep(std::time::Duration::from_millis(500));
    };
    super::progress(&format!(
        "Pod network: {}",
        nodes
            .iter()
            .map(|n| format!("{} {} {}", n.name, n.ip, n.pod_cidr))
            .collect::<Vec<_>>()
            .join(", ")
    ));
    for node in &nodes {
        docker::output(&[
            "exec",
            &node.name,
            "sh",
            "-c",
            &network_script(node, &nodes),
        ])?;
    }
    Ok(())
}

/// CoreDNS for cluster names only (see [`corefile_without_forward`]), then
/// waits for it.
fn cluster_dns(name: &str) -> Result<(), Error> {
    let corefile = control_plane_kubectl(
        name,
        &[
            "-n",
            "kube-system",
            "get",
            "configmap",
            "coredns",
            "-o",
            "jsonpath={.data.Corefile}",
        ],
    )?;
    let wanted = corefile_without_forward(&corefile);
    if wanted.trim() != corefile.trim() {
        super::progress("CoreDNS: cluster names only (no forwarding)");
        let patch = serde_json::json!({"data": {"Corefile": wanted}}).to_string();
        control_plane_kubectl(
            name,
            &[
                "-n",
                "kube-system",
                "patch",
                "configmap",
                "coredns",
                "--type=merge",
                "-p",
                &patch,
            ],
        )?;
        control_plane_kubectl(
            name,
            &[
                "-n",
                "kube-system",
                "rollout",
                "restart",
                "deployment/coredns",
            ],
        )?;
    }
    control_plane_kubectl(
        name,
        &[
            "-n",
            "kube-system",
            "rollout",
            "status",
            "deployment/coredns",
            "--timeout=300s",
        ],
    )?;
    Ok(())
}

/// `kind load docker-image` of `images` into the cluster.
pub fn load(kind_bin: &Path, name: &str, images: &[String]) -> Result<(), Error> {
    super::progress(&format!("loading {} into kind", images.join(", ")));
    super::run_quiet(
        kind(kind_bin)
            .args(["load", "docker-image", "--name", name])
            .args(images),
        "kind load docker-image",
    )
}

/// The workload images tests and `dev --kind` use.
pub fn workload_image_names() -> Vec<String> {
    vec![v::REDIS_IMAGE.into(), v::HTTPD_IMAGE.into()]
}

/// The admin kubeconfig of the cluster, as kind exports it.
pub fn kubeconfig(kind_bin: &Path, name: &str) -> Result<String, Error> {
    let out = kind(kind_bin)
        .args(["get", "kubeconfig", "--name", name])
        .output()
        .map_err(|e| Error::io("running kind get kubeconfig".into(), e))?;
    if !out.status.success() {
        return Err(Error::Step {
            what: "kind get kubeconfig".into(),
            detail: String::from_utf8_lossy(&out.stderr).into_owned(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Deletes the cluster.
pub fn delete(kind_bin: &Path, name: &str) -> Result<(), Error> {
    super::run_quiet(
        kind(kind_bin).args(["delete", "cluster", "--name", name]),
        "kind delete cluster",
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nodes() -> Vec<NodeAddress> {
        ["a", "b", "c"]
            .iter()
            .enumerate()
            .map(|(i, n)| NodeAddress {
                name: n.to_string(),
                ip: format!("172.18.0.{}", i + 2),
                pod_cidr: format!("10.244.{i}.0/24"),
            })
            .collect()
    }

    #[test]
    fn each_node_routes_to_every_other_node_pods_and_not_its_own() {
        let all = nodes();
        let script = network_script(&all[1], &all);
        assert!(script.contains("ip route replace 10.244.0.0/24 via 172.18.0.2\n"));
        assert!(script.contains("ip route replace 10.244.2.0/24 via 172.18.0.4\n"));
        assert!(!script.contains("10.244.1.0/24 via"));
        // The routes come back when the node starts again.
        assert!(script.contains("systemctl enable -q podkeeper-routes.service\n"));
        assert!(ROUTES_UNIT.contains("ExecStart=/bin/sh /etc/podkeeper/routes.sh"));
        assert!(script.contains("\"subnet\":\"10.244.1.0/24\""));
    }

    #[test]
    fn a_node_on_a_new_address_makes_the_cluster_unusable() {
        let nodes = nodes();
        let same: Vec<(String, String)> = nodes
            .iter()
            .map(|n| (n.name.clone(), n.ip.clone()))
            .collect();
        assert!(moved_nodes(&nodes, &same).is_empty());
        let mut moved = same.clone();
        moved[1].1 = "172.18.0.9".into();
        assert_eq!(
            moved_nodes(&nodes, &moved),
            vec![format!("{} {} -> 172.18.0.9", nodes[1].name, nodes[1].ip)]
        );
    }

    #[test]
    fn nodes_are_read_from_kubectl_json() {
        let json = serde_json::json!({"items": [
            {"metadata": {"name": "n1"}, "spec": {"podCIDR": "10.244.0.0/24"},
             "status": {"addresses": [{"type": "Hostname", "address": "n1"}, {"type": "InternalIP", "address": "172.18.0.2"}]}},
            {"metadata": {"name": "n2"}, "spec": {},
             "status": {"addresses": [{"type": "InternalIP", "address": "172.18.0.3"}]}}
        ]});
        assert_eq!(
            parse_nodes(&json),
            vec![NodeAddress {
                name: "n1".into(),
                ip: "172.18.0.2".into(),
                pod_cidr: "10.244.0.0/24".into()
            }]
        );
    }

    #[test]
    fn corefile_loses_only_its_forward_block() {
        let corefile = ".:53 {\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n    }\n    forward . /etc/resolv.conf {\n       max_concurrent 1000\n    }\n    cache 30\n    loop\n}\n";
        assert_eq!(
            corefile_without_forward(corefile),
            ".:53 {\n    errors\n    kubernetes cluster.local in-addr.arpa ip6.arpa {\n       pods insecure\n    }\n    cache 30\n    loop\n}\n"
        );
        let one_line = ".:53 {\n    forward . /etc/resolv.conf\n    loop\n}\n";
        assert_eq!(corefile_without_forward(one_line), ".:53 {\n    loop\n}\n");
    }

    #[test]
    fn config_has_the_workers_and_the_kubeadm_patches() {
        let config = kind_config(2);
        assert_eq!(config.matches("- role: worker").count(), 2);
        assert!(config.contains("imageRepository: podkeeper.dev/kind"));
        assert!(config.contains("failCgroupV1: false"));
        assert!(config.contains("disableDefaultCNI: true"));
    }
}
