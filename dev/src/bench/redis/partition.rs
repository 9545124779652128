//! Real partitions on kind (issue 28, point 5), measured under writes:
//!
//! - **node cut**: every packet in or out of the primary's node container
//!   on the `kind` Docker network is dropped for a fixed time (iptables and
//!   ip6tables in the node's network namespace, [`NodeCut`]), then let
//!   through again. A client Pod on that node writes straight to the old
//!   primary's Pod IP the whole time, another on the control plane's node
//!   writes through the `<name>` Service; both follow every `SET` with
//!   `WAIT 1`.
//! - **operator cut off**: iptables on every node drops the traffic
//!   between the operator's Pods and the primary's Pod, while the replicas
//!   still reach the primary.
//!
//! For both, the cluster is arranged first and put back after (also on
//! error or panic, by [`Arrangement`]'s drop): the control plane's node
//! loses its `NoSchedule` taint, so that the Redis of 3 has one member on
//! each of the 3 nodes, and the operator's Deployment is pinned to the
//! control plane's node, which is never cut.

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{DeleteParams, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde::Serialize;

use super::session::{self, InvariantWatch, Session, load_average, now};
use super::writer::{self, Attempt};
use super::{PORT, STEP_TIMEOUT, UnderWrites, other, progress};
use crate::kind::versions::REDIS_IMAGE;

const OPERATOR_NS: &str = "podkeeper-system";
const OPERATOR: &str = "podkeeper";
const CONTROL_PLANE_TAINT: &str = "node-role.kubernetes.io/control-plane";
/// The Docker network of kind's nodes.
pub const KIND_NETWORK: &str = "kind";
/// The client Pod that writes through the Service (on the control plane's
/// node, never cut).
const SERVICE_CLIENT: &str = "svc-client";

fn run(cmd: &str, args: &[&str]) -> Result<String, crate::Error> {
    checked(cmd, args, Command::new(cmd).args(args))
}

/// Runs `command` (`cmd args`), its stdout, or an error with its stderr.
fn checked(cmd: &str, args: &[&str], command: &mut Command) -> Result<String, crate::Error> {
    let out = command.output().map_err(other)?;
    if !out.status.success() {
        return Err(other(format!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        )));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// The cluster as the partitions need it, put back when dropped.
pub struct Arrangement {
    kubeconfig: std::path::PathBuf,
    pub control_plane: String,
    pub workers: Vec<String>,
    untainted: bool,
    operator_pinned: bool,
}

impl Arrangement {
    /// Merge-patches the operator's Deployment and waits for its rollout.
    fn roll_operator(&self, patch: &str) -> Result<(), crate::Error> {
        let deploy = ["-n", OPERATOR_NS];
        self.kubectl(
            &[
                &deploy[..],
                &["patch", "deploy", OPERATOR, "--type", "merge", "-p", patch],
            ]
            .concat(),
        )?;
        self.kubectl(
            &[
                &deploy[..],
                &["rollout", "status", "deploy", OPERATOR, "--timeout=300s"],
            ]
            .concat(),
        )?;
        Ok(())
    }

    pub(crate) fn kubectl(&self, args: &[&str]) -> Result<String, crate::Error> {
        checked(
            "kubectl",
            args,
            Command::new("kubectl")
                .env("KUBECONFIG", &self.kubeconfig)
                .args(args),
        )
    }

    /// Untaints the control plane's node and pins the operator there.
    pub async fn make(session: &Session) -> Result<Arrangement, crate::Error> {
        let nodes: Api<Node> = Api::all(session.client.clone());
        let mut control_plane = None;
        let mut workers = Vec::new();
        for n in nodes.list(&ListParams::default()).await?.items {
            if n.labels().contains_key(CONTROL_PLANE_TAINT) {
                control_plane = Some(n.name_any());
            } else {
                workers.push(n.name_any());
            }
        }
        let control_plane = control_plane.ok_or_else(|| other("no control-plane node"))?;
        if workers.len() < 2 {
            return Err(other(format!(
                "the partitions need 2 workers besides the control plane, found {workers:?}"
            )));
        }
        let mut a = Arrangement {
            kubeconfig: session.kubeconfig.clone(),
            control_plane,
            workers,
            untainted: false,
            operator_pinned: false,
        };
        let taints = a.kubectl(&[
            "get",
            "node",
            &a.control_plane,
            "-o",
            "jsonpath={.spec.taints[*].key}",
        ])?;
        if taints.split_whitespace().any(|t| t == CONTROL_PLANE_TAINT) {
            a.kubectl(&[
                "taint",
                "node",
                &a.control_plane,
                &format!("{CONTROL_PLANE_TAINT}:NoSchedule-"),
            ])?;
            a.untainted = true;
        }
        let pin = serde_json::json!({"spec": {"template": {"spec": {
            "nodeSelector": {"kubernetes.io/hostname": a.control_plane},
            "tolerations": [{"key": CONTROL_PLANE_TAINT, "operator": "Exists", "effect": "NoSchedule"}],
        }}}});
        a.operator_pinned = true;
        a.roll_operator(&pin.to_string())?;
        let nodes = operator_pods(session)
            .await?
            .into_iter()
            .map(|(_, _, node)| node)
            .collect::<BTreeSet<_>>();
        if nodes.iter().any(|n| *n != a.control_plane) {
            return Err(other(format!(
                "operator Pods on {nodes:?}, not only {}",
                a.control_plane
            )));
        }
        progress(&format!(
            "arranged: {} untainted, the operator pinned to it; workers {:?}",
            a.control_plane, a.workers
        ));
        Ok(a)
    }

    fn put_back(&mut self) -> Result<(), crate::Error> {
        if self.operator_pinned {
            let unpin =
                r#"{"spec":{"template":{"spec":{"nodeSelector":null,"tolerations":null}}}}"#;
            self.roll_operator(unpin)?;
            self.operator_pinned = false;
        }
        if self.untainted {
            self.kubectl(&[
                "taint",
                "node",
                &self.control_plane,
                &format!("{CONTROL_PLANE_TAINT}:NoSchedule"),
                "--overwrite",
            ])?;
            self.untainted = false;
        }
        Ok(())
    }
}

impl Drop for Arrangement {
    fn drop(&mut self) {
        if let Err(e) = self.put_back() {
            eprintln!("bench-redis: putting the cluster back: {e}");
        }
    }
}

/// The operator's Pods: (name, IP, node).
async fn operator_pods(session: &Session) -> Result<Vec<(String, String, String)>, crate::Error> {
    let pods: Api<Pod> = Api::namespaced(session.client.clone(), OPERATOR_NS);
    Ok(pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=podkeeper"))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let ip = p
                .status
                .as_ref()
                .and_then(|s| s.pod_ip.clone())
                .unwrap_or_default();
            let node = p
                .spec
                .as_ref()
                .and_then(|s| s.node_name.clone())
                .unwrap_or_default();
            (p.name_any(), ip, node)
        })
        .collect())
}

/// A node container cut off the `kind` network: rules in its network
/// namespace drop every packet in or out of its interface on that network
/// (the kubelet's and kube-proxy's traffic with the API server, its Pods'
/// traffic with other nodes), as a switch port that stops forwarding would;
/// removed by [`NodeCut::heal`] or when dropped. (Disconnecting the
/// container from the Docker network instead cannot be undone with the same
/// IPv4 address when Docker chose the network's IPv4 subnet: `docker network
/// connect --ip` is refused there, and a node with a new address is another
/// node to its cluster.)
pub struct NodeCut {
    node: String,
    /// The node's interface on the `kind` network.
    interface: String,
    /// The rules in place, as `(tool, chain, direction flag)`.
    rules: Vec<(&'static str, &'static str, &'static str)>,
}

/// What a cut drops: everything in and out of the interface, for IPv4 and
/// IPv6, whether for the node itself or forwarded to and from its Pods.
const CUT_RULES: [(&str, &str); 4] = [
    ("INPUT", "-i"),
    ("OUTPUT", "-o"),
    ("FORWARD", "-i"),
    ("FORWARD", "-o"),
];

impl NodeCut {
    pub fn cut(node: &str) -> Result<NodeCut, crate::Error> {
        let template =
            format!("{{{{(index .NetworkSettings.Networks \"{KIND_NETWORK}\").IPAddress}}}}");
        let ipv4 = run("docker", &["inspect", "-f", &template, node])?
            .trim()
            .to_string();
        if ipv4.is_empty() {
            return Err(other(format!("{node} has no address on {KIND_NETWORK}")));
        }
        // `2: eth0    inet 172.19.0.3/16 ...`
        let interface = run("docker", &["exec", node, "ip", "-4", "-o", "addr", "show"])?
            .lines()
            .find_map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f.len() >= 4 && f[3].split('/').next() == Some(ipv4.as_str()))
                    .then(|| f[1].to_string())
            })
            .ok_or_else(|| other(format!("{node}: no interface holds {ipv4}")))?;
        let mut c = NodeCut {
            node: node.into(),
            interface,
            rules: Vec::new(),
        };
        for tool in ["iptables", "ip6tables"] {
            for (chain, flag) in CUT_RULES {
                run(
                    "docker",
                    &[
                        "exec",
                        node,
                        tool,
                        "-I",
                        chain,
                        "1",
                        flag,
                        &c.interface,
                        "-j",
                        "DROP",
                    ],
                )?;
                c.rules.push((tool, chain, flag));
            }
        }
        Ok(c)
    }

    /// Packets the cut dropped so far (IPv4 and IPv6, every chain).
    pub fn dropped(&self) -> u64 {
        ["iptables", "ip6tables"]
            .iter()
            .flat_map(|tool| {
                run("docker", &["exec", &self.node, tool, "-nvxL"])
                    .unwrap_or_default()
                    .lines()
                    .filter(|l| l.contains("DROP") && l.contains(self.interface.as_str()))
                    .filter_map(|l| l.split_whitespace().next()?.parse::<u64>().ok())
                    .collect::<Vec<u64>>()
            })
            .sum()
    }

    /// Removes the rules: the node is back on the network with the same
    /// address, its routes untouched.
    pub fn heal(&mut self) -> Result<(), crate::Error> {
        while let Some((tool, chain, flag)) = self.rules.pop() {
            let removed = run(
                "docker",
                &[
                    "exec",
                    &self.node,
                    tool,
                    "-D",
                    chain,
                    flag,
                    &self.interface,
                    "-j",
                    "DROP",
                ],
            );
            if let Err(e) = removed {
                self.rules.push((tool, chain, flag));
                return Err(e);
            }
        }
        Ok(())
    }
}

impl Drop for NodeCut {
    fn drop(&mut self) {
        if let Err(e) = self.heal() {
            eprintln!("bench-redis: reconnecting {}: {e}", self.node);
        }
    }
}

/// iptables rules on every node that drop the traffic between the
/// operator's Pods and one Pod; removed when dropped (or by
/// [`OperatorCut::heal`]).
pub struct OperatorCut {
    nodes: Vec<String>,
    /// (source, destination) pairs dropped in FORWARD.
    pairs: Vec<(String, String)>,
    inserted: Vec<(String, (String, String))>,
}

impl OperatorCut {
    pub fn cut(nodes: &[String], operators: &[String], target: &str) -> Result<Self, crate::Error> {
        let mut c = OperatorCut {
            nodes: nodes.to_vec(),
            pairs: operators
                .iter()
                .flat_map(|o| [(o.clone(), target.into()), (target.into(), o.clone())])
                .collect(),
            inserted: Vec::new(),
        };
        for node in &c.nodes.clone() {
            for (s, d) in &c.pairs.clone() {
                run(
                    "docker",
                    &[
                        "exec", node, "iptables", "-I", "FORWARD", "1", "-s", s, "-d", d, "-j",
                        "DROP",
                    ],
                )?;
                c.inserted.push((node.clone(), (s.clone(), d.clone())));
            }
        }
        Ok(c)
    }

    /// Packets the rules dropped so far, over every node.
    pub fn dropped(&self) -> u64 {
        let mut total = 0;
        for node in &self.nodes {
            let Ok(out) = run("docker", &["exec", node, "iptables", "-nvxL", "FORWARD"]) else {
                continue;
            };
            for l in out.lines() {
                let f: Vec<&str> = l.split_whitespace().collect();
                // pkts bytes target prot opt in out source destination
                if f.len() >= 9
                    && f[2] == "DROP"
                    && self
                        .pairs
                        .iter()
                        .any(|(s, d)| f[7] == s.as_str() && f[8] == d.as_str())
                {
                    total += f[0].parse::<u64>().unwrap_or(0);
                }
            }
        }
        total
    }

    pub fn heal(&mut self) -> Result<(), crate::Error> {
        let mut first_error = None;
        for (node, (s, d)) in std::mem::take(&mut self.inserted) {
            if let Err(e) = run(
                "docker",
                &[
                    "exec", &node, "iptables", "-D", "FORWARD", "-s", &s, "-d", &d, "-j", "DROP",
                ],
            ) {
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

impl Drop for OperatorCut {
    fn drop(&mut self) {
        if let Err(e) = self.heal() {
            eprintln!("bench-redis: removing the iptables rules: {e}");
        }
    }
}

/// Watches the EndpointSlices of Service `name` and records every time
/// they name more than one ready endpoint.
pub struct EndpointWatch {
    seen: Arc<Mutex<(usize, Vec<String>)>>,
    task: tokio::task::JoinHandle<()>,
}

impl EndpointWatch {
    pub fn start(session: &Session, service: &str) -> EndpointWatch {
        let seen = Arc::new(Mutex::new((0, Vec::new())));
        let slices: Api<EndpointSlice> = session.api();
        let labels = format!("kubernetes.io/service-name={service}");
        let record = seen.clone();
        let task = tokio::spawn(async move {
            let mut by_slice: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
            let config = watcher::Config::default().labels(&labels);
            let mut events = std::pin::pin!(watcher(slices, config).default_backoff());
            while let Some(event) = events.next().await {
                let Ok(event) = event else { continue };
                match event {
                    watcher::Event::Init => by_slice.clear(),
                    watcher::Event::InitApply(s) | watcher::Event::Apply(s) => {
                        let ready = s
                            .endpoints
                            .iter()
                            .flatten()
                            .filter(|e| e.conditions.as_ref().and_then(|c| c.ready) != Some(false))
                            .flat_map(|e| e.addresses.iter().cloned())
                            .collect();
                        by_slice.insert(s.name_any(), ready);
                    }
                    watcher::Event::Delete(s) => {
                        by_slice.remove(&s.name_any());
                    }
                    watcher::Event::InitDone => {}
                }
                let all: BTreeSet<&String> = by_slice.values().flatten().collect();
                let mut r = record.lock().unwrap();
                r.0 += 1;
                if all.len() > 1 {
                    r.1.push(format!("{:.3}: ready endpoints {all:?}", now()));
                }
            }
        });
        EndpointWatch { seen, task }
    }

    /// (events, times two or more ready endpoints were named).
    pub fn seen(&self) -> (usize, Vec<String>) {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for EndpointWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Which partition.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Kind {
    /// The primary's node cut off the cluster network.
    NodeCut,
    /// The operator cut off from the primary, the replicas not.
    OperatorCutOff,
}

/// One run.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Run {
    pub old_primary: String,
    pub new_primary: String,
    /// The primary changed (status.primary.term went up).
    pub failover: bool,
    /// From the cut to the first poll (every 0.5 s) at which status.primary
    /// named another Pod.
    pub promoted_s: Option<f64>,
    /// From the cut to the end of the first write the new primary accepted.
    pub to_new_primary_s: Option<f64>,
    /// From the cut to the end of the last write the old primary accepted
    /// (either client) before it was made a replica.
    pub old_last_accept_s: Option<f64>,
    /// Writes the old primary accepted (either client) that ended after
    /// the new primary's first accepted write began.
    pub old_accepted_after_new: usize,
    /// Of those, acknowledged by `WAIT 1`.
    pub old_acknowledged_after_new: usize,
    /// The Service client's attempts refused or unanswered from the cut to
    /// the heal.
    pub service_refused: usize,
    pub service_attempts: usize,
    /// The Service client's longest pause between accepted writes around
    /// the cut, s.
    pub service_pause_s: f64,
    /// The direct client's acknowledged writes, and those lost.
    pub direct_acknowledged: usize,
    pub direct_acknowledged_lost: usize,
    /// Two primaries in the merged log of both clients: a term accepting
    /// writes again after another term did.
    pub client_overlaps: usize,
    /// From the heal to the Redis Ready with every member again, s.
    pub ready_again_s: f64,
    /// Reasons of the Replicated condition seen during the cut.
    pub replicated_reasons: Vec<String>,
    /// Packets the iptables rules dropped (operator cut-off only).
    pub dropped_packets: u64,
}

/// A series of runs of one kind.
#[derive(Debug, Default, Serialize)]
pub struct Partitions {
    pub runs: Vec<Run>,
    pub seconds: u64,
    /// The Service's EndpointSlices: events seen, and times they named two
    /// ready endpoints or more.
    pub endpoint_events: usize,
    pub endpoint_violations: Vec<String>,
    /// The Service client, over the whole series.
    #[serde(flatten)]
    pub writes: UnderWrites,
    pub load: (String, String),
}

impl Partitions {
    pub fn acknowledged_lost(&self) -> usize {
        self.writes.acknowledged_lost
            + self
                .runs
                .iter()
                .map(|r| r.direct_acknowledged_lost)
                .sum::<usize>()
    }
    pub fn acknowledged(&self) -> usize {
        self.writes.acknowledged
            + self
                .runs
                .iter()
                .map(|r| r.direct_acknowledged)
                .sum::<usize>()
    }
}

fn node_of(pods: &[Pod], pod: &str) -> Option<String> {
    pods.iter()
        .find(|p| p.name_any() == pod)
        .and_then(|p| p.spec.as_ref()?.node_name.clone())
}

fn ip_of(pods: &[Pod], pod: &str) -> Option<String> {
    pods.iter()
        .find(|p| p.name_any() == pod)
        .and_then(|p| p.status.as_ref()?.pod_ip.clone())
}

fn direct_client(node: &str) -> String {
    format!("direct-{node}")
}

/// Settles the Redis with its primary on a worker (not the control
/// plane's node): a primary on the control plane is handed over by
/// deleting its Pod, as often as needed.
async fn primary_on_a_worker(
    session: &Session,
    a: &Arrangement,
    name: &str,
) -> Result<(podkeeper::api::Redis, Vec<Pod>), crate::Error> {
    for _ in 0..6 {
        let (r, pods) = session.settled(name, 3, STEP_TIMEOUT).await?;
        let nodes: BTreeSet<String> = pods
            .iter()
            .filter_map(|p| p.spec.as_ref()?.node_name.clone())
            .collect();
        if nodes.len() != 3 {
            return Err(other(format!(
                "the 3 members are on {nodes:?}, not on 3 nodes"
            )));
        }
        let primary = super::primary(&r)?;
        if node_of(&pods, &primary).as_deref() != Some(a.control_plane.as_str()) {
            return Ok((r, pods));
        }
        progress(&format!(
            "{primary} is on the control plane's node: deleting it for a switchover"
        ));
        session
            .api::<Pod>()
            .delete(&primary, &DeleteParams::default())
            .await?;
        let redis = session.api::<podkeeper::api::Redis>();
        session::wait("the switchover", STEP_TIMEOUT, || async {
            (redis.get(name).await.ok()?.primary_pod()? != primary).then_some(())
        })
        .await?;
    }
    Err(other("the primary stayed on the control plane's node"))
}

/// Polls the Redis during a cut: the Replicated reasons seen.
async fn watch_during(
    session: &Session,
    name: &str,
    seconds: u64,
    cut: f64,
    run: &mut Run,
) -> Result<(), crate::Error> {
    let redis = session.api::<podkeeper::api::Redis>();
    let reasons = &mut run.replicated_reasons;
    let until = now() + seconds as f64;
    while now() < until {
        if let Ok(r) = redis.get(name).await {
            if run.promoted_s.is_none() && r.primary_pod() != Some(run.old_primary.as_str()) {
                run.promoted_s = Some(now() - cut);
            }
            for c in r.status.iter().flat_map(|s| s.conditions.iter()) {
                if c.type_ == "Replicated" && !reasons.contains(&c.reason) {
                    reasons.push(c.reason.clone());
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    Ok(())
}

fn term(r: &podkeeper::api::Redis) -> u64 {
    r.status
        .as_ref()
        .and_then(|s| s.primary.as_ref())
        .map_or(0, |p| p.term)
}

/// What both clients' logs say about one run.
fn figures(
    run: &mut Run,
    service: &[Attempt],
    direct: &[Attempt],
    cut: f64,
    healed: f64,
    old: &str,
    new: Option<&str>,
) {
    let first_new = new.and_then(|new| {
        service
            .iter()
            .chain(direct)
            .filter(|a| a.accepted && a.end > cut && a.run_id.as_deref() == Some(new))
            .min_by(|a, b| a.end.total_cmp(&b.end))
    });
    run.to_new_primary_s = first_new.map(|a| a.end - cut);
    let old_accepts = || {
        service
            .iter()
            .chain(direct)
            .filter(move |a| a.accepted && a.run_id.as_deref() == Some(old))
    };
    run.old_last_accept_s = old_accepts()
        .map(|a| a.end)
        .max_by(f64::total_cmp)
        .map(|e| e - cut);
    if let Some(f) = first_new {
        run.old_accepted_after_new = old_accepts().filter(|a| a.end > f.start).count();
        run.old_acknowledged_after_new = old_accepts()
            .filter(|a| a.end > f.start && a.acks.is_some_and(|n| n >= 1))
            .count();
    }
    let window: Vec<&Attempt> = service
        .iter()
        .filter(|a| a.end >= cut && a.start <= healed)
        .collect();
    run.service_attempts = window.len();
    run.service_refused = window.iter().filter(|a| !a.accepted).count();
    run.service_pause_s = writer::longest_pause(service, cut, healed).map_or(0.0, |p| p.0);
    let mut merged: Vec<Attempt> = service
        .iter()
        .filter(|a| a.end >= cut - 5.0)
        .chain(direct)
        .cloned()
        .collect();
    merged.sort_by(|a, b| a.end.total_cmp(&b.end));
    run.client_overlaps = writer::overlapping_primaries(&merged).len();
}

/// `runs` partitions of `kind`, each `seconds` long, on a Redis of 3 with a
/// member on each node, under the Service client's writes (and, for a
/// node cut, the direct client's).
pub async fn partitions(
    session: &Session,
    kind: Kind,
    runs: usize,
    seconds: u64,
) -> Result<Partitions, crate::Error> {
    let arrangement = Arrangement::make(session).await?;
    let result = series(session, &arrangement, kind, runs, seconds).await;
    drop(arrangement);
    result
}

async fn series(
    session: &Session,
    a: &Arrangement,
    kind: Kind,
    runs: usize,
    seconds: u64,
) -> Result<Partitions, crate::Error> {
    let name = match kind {
        Kind::NodeCut => "partition",
        Kind::OperatorCutOff => "cutoff",
    };
    let mut out = Partitions {
        seconds,
        load: (load_average(), String::new()),
        ..Default::default()
    };
    let pods: Api<Pod> = session.api();
    if pods.get_opt(SERVICE_CLIENT).await?.is_none() {
        session
            .add_client(SERVICE_CLIENT, REDIS_IMAGE, Some(&a.control_plane))
            .await?;
    }
    if kind == Kind::NodeCut {
        for w in &a.workers {
            if pods.get_opt(&direct_client(w)).await?.is_none() {
                session
                    .add_client(&direct_client(w), REDIS_IMAGE, Some(w))
                    .await?;
            }
        }
    }
    session.create_redis(name, 3, REDIS_IMAGE).await?;
    session.settled(name, 3, STEP_TIMEOUT).await?;
    let host = session.cluster_ip(name).await?;
    session
        .start_writer_in(SERVICE_CLIENT, "w", &host, PORT, 1)
        .await?;
    session.writes_accepted_in(SERVICE_CLIENT, 20).await?;
    let watch = InvariantWatch::start(session, name);
    let endpoints = EndpointWatch::start(session, name);
    for i in 0..runs {
        let (r, members) = primary_on_a_worker(session, a, name).await?;
        let old = super::primary(&r)?;
        let old_term = term(&r);
        let old_node = node_of(&members, &old).unwrap_or_default();
        let old_ip = ip_of(&members, &old).ok_or_else(|| other("no Pod IP"))?;
        let old_run_id = session.run_id(&old, PORT)?;
        let mut run = Run {
            old_primary: old.clone(),
            ..Default::default()
        };
        let prefix = format!("p{i}d");
        let direct = direct_client(&old_node);
        if kind == Kind::NodeCut {
            session
                .start_writer_in(&direct, &prefix, &old_ip, PORT, 1)
                .await?;
            session.writes_accepted_in(&direct, 10).await?;
        }
        session.writes_accepted_in(SERVICE_CLIENT, 10).await?;
        let cut_at = now();
        let healed_at;
        match kind {
            Kind::NodeCut => {
                let mut cut = NodeCut::cut(&old_node)?;
                progress(&format!(
                    "partition {}/{runs}: {old_node} (primary {old} at {old_ip}) cut off the {KIND_NETWORK} network for {seconds} s",
                    i + 1
                ));
                watch_during(session, name, seconds, cut_at, &mut run).await?;
                run.dropped_packets = cut.dropped();
                healed_at = now();
                cut.heal()?;
            }
            Kind::OperatorCutOff => {
                let operators: Vec<String> = operator_pods(session)
                    .await?
                    .into_iter()
                    .map(|(_, ip, _)| ip)
                    .filter(|ip| !ip.is_empty())
                    .collect();
                let mut nodes = a.workers.clone();
                nodes.push(a.control_plane.clone());
                let mut cut = OperatorCut::cut(&nodes, &operators, &old_ip)?;
                progress(&format!(
                    "operator cut-off {}/{runs}: {operators:?} <-> primary {old} at {old_ip} dropped on every node for {seconds} s",
                    i + 1
                ));
                watch_during(session, name, seconds, cut_at, &mut run).await?;
                run.dropped_packets = cut.dropped();
                healed_at = now();
                cut.heal()?;
            }
        }
        let (r, _) = session.settled(name, 3, STEP_TIMEOUT).await?;
        run.ready_again_s = now() - healed_at;
        let new = super::primary(&r)?;
        run.failover = term(&r) != old_term || new != old;
        run.new_primary = new.clone();
        let new_run_id = session.run_id(&new, PORT)?;
        session.writes_accepted_in(SERVICE_CLIENT, 5).await?;
        let (service, _) = session.writes_in(SERVICE_CLIENT)?;
        let direct_writes = if kind == Kind::NodeCut {
            session.stop_writer_in(&direct).await?
        } else {
            Vec::new()
        };
        let acked = writer::acknowledged(&direct_writes, 1);
        run.direct_acknowledged = acked.len();
        run.direct_acknowledged_lost = session
            .lost_keyed_from(SERVICE_CLIENT, &prefix, &host, PORT, &acked)?
            .len();
        figures(
            &mut run,
            &service,
            &direct_writes,
            cut_at,
            healed_at,
            &old_run_id,
            (new_run_id != old_run_id).then_some(new_run_id.as_str()),
        );
        progress(&format!(
            "run {}/{runs}: {old} -> {new}; promoted {}; first write on the new primary {}; old primary's last accepted write {}; old accepted after the new one's first: {} ({} acknowledged); Service client: {}/{} refused, longest pause {:.2} s; direct client: {} acknowledged, {} lost; two primaries in the logs: {}; Ready again {:.1} s after the heal; Replicated reasons {:?}; dropped packets {}",
            i + 1,
            run.promoted_s
                .map_or("never".into(), |s| format!("{s:.1} s after the cut")),
            run.to_new_primary_s
                .map_or("none".into(), |s| format!("{s:.2} s after the cut")),
            run.old_last_accept_s
                .map_or("none".into(), |s| format!("{s:.2} s after the cut")),
            run.old_accepted_after_new,
            run.old_acknowledged_after_new,
            run.service_refused,
            run.service_attempts,
            run.service_pause_s,
            run.direct_acknowledged,
            run.direct_acknowledged_lost,
            run.client_overlaps,
            run.ready_again_s,
            run.replicated_reasons,
            run.dropped_packets,
        ));
        out.runs.push(run);
    }
    let (events, violations) = endpoints.seen();
    out.endpoint_events = events;
    out.endpoint_violations = violations;
    out.writes = super::wind_up_in(session, SERVICE_CLIENT, &host, watch).await?;
    out.load.1 = load_average();
    super::delete_redis(session, name).await?;
    Ok(out)
}
