//! `bench-redis --sentinel-failovers N`: the anchor for podkeeper's failover
//! figures, Redis Sentinel (Debian's `redis-sentinel`, in the same Redis
//! image) doing the same job in the same kind cluster and the same bench
//! namespace, measured the same way.
//!
//! - **The set**: bare Pods, no controller. 3 redis-server Pods with the
//!   redis-server command line a podkeeper member gets (podkeeper's own
//!   Pod template: no persistence, `repl-ping-replica-period 1`, the same
//!   probe, security context and spread over nodes), the first started as
//!   the master and the others with `--replicaof` it; and 3 Sentinel Pods
//!   (port 26379) monitoring it with quorum 2, `down-after-milliseconds`
//!   5000 (the lowest the Sentinel documentation uses in its examples: its
//!   quick tutorial's; its example configuration has 60000 and 10000),
//!   `failover-timeout` 60000 and `parallel-syncs` 1 as in that tutorial,
//!   each on a config file of its own it may rewrite (an emptyDir).
//! - **redis-server Pods never restart** (restartPolicy Never). Without
//!   persistence a restarted master comes back empty, and within 5 s
//!   Sentinel would not even see it down: the Redis replication
//!   documentation tells users to turn automatic restarts off in that case.
//!   So after each failover the bench does what such a user does: deletes
//!   the killed Pod, starts a new replica Pod of the new master, and sends
//!   `SENTINEL RESET` to every Sentinel so that they forget the dead
//!   address (as the Sentinel documentation says to when removing a
//!   replica for good). Every run thus starts from 3 live servers that
//!   have not been killed before and Sentinels that know exactly them.
//! - **The client** is the Service writer's Sentinel-aware variant
//!   ([`writer::sentinel_script`]): before each attempt it asks the
//!   Sentinels in turn for the master's address. Same log, same figures.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams, PostParams};
use serde::Serialize;
use serde_json::json;

use super::session::{self, CLIENT, Session, WAIT_TIMEOUT_MS, load_average};
use super::{Failovers, PORT, STEP_TIMEOUT, UnderWrites, other, progress, writer};

/// The name the Sentinels monitor the master under.
pub const MASTER: &str = "anchor";
pub const SENTINEL_PORT: u16 = 26379;
/// Sentinels that must agree that the master is down.
pub const QUORUM: u32 = 2;
pub const DOWN_AFTER_MS: u32 = 5000;
pub const FAILOVER_TIMEOUT_MS: u32 = 60000;
pub const PARALLEL_SYNCS: u32 = 1;
/// redis-server Pods (1 master, 2 replicas) and Sentinel Pods.
pub const MEMBERS: usize = 3;
pub const SENTINELS: usize = 3;

const NAME_LABEL: &str = "app.kubernetes.io/name";
const COMPONENT_LABEL: &str = "app.kubernetes.io/component";
const SET_NAME: &str = "sentinel-anchor";
/// Where a Sentinel's config file lives (an emptyDir it may rewrite).
const CONF_DIR: &str = "/conf";

/// How the Sentinel figures are made, in the JSON and above their table.
pub const METHOD: &str = "Redis Sentinel from Debian's redis-sentinel (7.0.15, the same image as podkeeper's members) in the same kind cluster and namespace: 3 bare redis-server Pods with a podkeeper member's redis-server command line (no persistence, repl-ping-replica-period 1), probe and spread over nodes, started as a master and two --replicaof replicas, and 3 Sentinel Pods (quorum 2, down-after-milliseconds 5000, the lowest value the Sentinel documentation uses in its examples, failover-timeout 60000, parallel-syncs 1). The redis-server Pods have restartPolicy Never (a master restarted empty without persistence, unseen by Sentinel, is what the Redis documentation warns against); after each run the bench deletes the killed Pod, starts a new replica of the new master and sends SENTINEL RESET to every Sentinel, then waits until all three report the master with 2 linked replicas and 2 other Sentinels. The client is the same writer, except that before each attempt it asks the Sentinels in turn SENTINEL get-master-addr-by-name (1 s at most each) and writes to the address the first one gives; an attempt to the dead master's address may wait out its 3 s.";

/// The Sentinel set's failovers and its settings, next to podkeeper's.
#[derive(Debug, Default, Serialize)]
pub struct SentinelFailovers {
    pub method: String,
    pub quorum: u32,
    pub down_after_ms: u32,
    pub failover_timeout_ms: u32,
    pub parallel_syncs: u32,
    #[serde(flatten)]
    pub failovers: Failovers,
}

impl SentinelFailovers {
    /// No figures yet, the settings, and the load averages now.
    pub fn new(runs: usize) -> SentinelFailovers {
        SentinelFailovers {
            method: METHOD.into(),
            quorum: QUORUM,
            down_after_ms: DOWN_AFTER_MS,
            failover_timeout_ms: FAILOVER_TIMEOUT_MS,
            parallel_syncs: PARALLEL_SYNCS,
            failovers: Failovers {
                runs,
                load: (load_average(), String::new()),
                ..Default::default()
            },
        }
    }
}

/// The labels of the set's Pods of one component (`redis`, `sentinel`).
fn labels(component: &str) -> BTreeMap<String, String> {
    [
        (NAME_LABEL.to_string(), SET_NAME.to_string()),
        (COMPONENT_LABEL.to_string(), component.to_string()),
    ]
    .into()
}

fn selector(component: &str) -> String {
    labels(component)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// A redis-server Pod of the set: podkeeper's member Pod for a Redis of
/// `image` on port 6379 (command line, probe, security context, emptyDir,
/// spread over nodes), with the set's own labels, restartPolicy Never, and
/// started as a replica of `replicaof` (an IP), or as a master without it.
/// Pure.
pub fn member_pod(name: &str, image: &str, replicaof: Option<&str>) -> Result<Pod, crate::Error> {
    let redis: podkeeper::api::Redis = serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
        "metadata": {"name": SET_NAME},
        "spec": {"replicas": MEMBERS, "port": PORT, "image": image},
    }))?;
    let template = podkeeper::redis::pod::pod_template(&redis).map_err(other)?;
    let mut spec = template
        .spec
        .ok_or_else(|| other("podkeeper's Pod template has no spec"))?;
    let container = spec
        .containers
        .first_mut()
        .ok_or_else(|| other("podkeeper's Pod template has no container"))?;
    let args = container.args.take().unwrap_or_default();
    container.args = Some(replica_args(args, replicaof)?);
    let member_labels = labels("redis");
    for c in spec.topology_spread_constraints.iter_mut().flatten() {
        if let Some(s) = c.label_selector.as_mut() {
            s.match_labels = Some(member_labels.clone());
        }
    }
    spec.restart_policy = Some("Never".into());
    Ok(Pod {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            labels: Some(member_labels),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    })
}

/// podkeeper's redis-server arguments with its start-up `--replicaof`
/// placeholder replaced by `--replicaof <ip> 6379`, or removed for a
/// master. Pure.
fn replica_args(args: Vec<String>, replicaof: Option<&str>) -> Result<Vec<String>, crate::Error> {
    let at = args
        .iter()
        .position(|a| a == "--replicaof")
        .filter(|i| i + 2 < args.len())
        .ok_or_else(|| other("no --replicaof in podkeeper's redis-server arguments"))?;
    let mut out = args[..at].to_vec();
    if let Some(ip) = replicaof {
        out.extend(["--replicaof".into(), ip.into(), PORT.to_string()]);
    }
    out.extend(args[at + 3..].iter().cloned());
    Ok(out)
}

/// A Sentinel's config file, monitoring the master at `master_ip`. Pure.
pub fn sentinel_conf(master_ip: &str) -> String {
    format!(
        "port {SENTINEL_PORT}\n\
         dir {CONF_DIR}\n\
         sentinel monitor {MASTER} {master_ip} {PORT} {QUORUM}\n\
         sentinel down-after-milliseconds {MASTER} {DOWN_AFTER_MS}\n\
         sentinel failover-timeout {MASTER} {FAILOVER_TIMEOUT_MS}\n\
         sentinel parallel-syncs {MASTER} {PARALLEL_SYNCS}\n"
    )
}

/// A Sentinel Pod: Debian's `redis-sentinel` on a config file in an
/// emptyDir, written on the container's first start only (a restarted
/// Sentinel keeps what it had rewritten), restartPolicy Always. Pure.
pub fn sentinel_pod(name: &str, image: &str, master_ip: &str) -> Result<Pod, crate::Error> {
    let conf = sentinel_conf(master_ip);
    let script = format!(
        "[ -e {CONF_DIR}/sentinel.conf ] || printf '%s' '{conf}' > {CONF_DIR}/sentinel.conf; \
         exec redis-sentinel {CONF_DIR}/sentinel.conf"
    );
    let sentinel_labels = labels("sentinel");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": sentinel_labels},
        "spec": {
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 1,
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "securityContext": {
                "runAsNonRoot": true, "runAsUser": 999, "runAsGroup": 999, "fsGroup": 999,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "topologySpreadConstraints": [{
                "labelSelector": {"matchLabels": sentinel_labels},
                "maxSkew": 1,
                "topologyKey": "kubernetes.io/hostname",
                "whenUnsatisfiable": "DoNotSchedule",
                "nodeTaintsPolicy": "Honor",
            }],
            "volumes": [{"name": "conf", "emptyDir": {}}],
            "containers": [{
                "name": "sentinel", "image": image,
                "imagePullPolicy": "IfNotPresent",
                "command": ["sh", "-c", script],
                "ports": [{"name": "sentinel", "containerPort": SENTINEL_PORT}],
                "readinessProbe": {
                    "exec": {"command": ["redis-cli", "-p", SENTINEL_PORT.to_string(), "ping"]},
                    "periodSeconds": 2, "timeoutSeconds": 2,
                },
                "securityContext": {
                    "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "runAsNonRoot": true,
                    "capabilities": {"drop": ["ALL"]},
                },
                "volumeMounts": [{"name": "conf", "mountPath": CONF_DIR}],
            }],
        },
    }))?;
    Ok(pod)
}

/// What one Sentinel says of the master and its replicas.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct View {
    pub master: BTreeMap<String, String>,
    pub replicas: Vec<BTreeMap<String, String>>,
}

/// The fields of a flattened `SENTINEL master` answer as redis-cli prints it
/// without a terminal (one string a line, name then value).
fn fields(lines: &[&str]) -> BTreeMap<String, String> {
    lines
        .chunks(2)
        .filter(|c| c.len() == 2)
        .map(|c| (c[0].to_string(), c[1].to_string()))
        .collect()
}

/// One entry per replica of a flattened `SENTINEL replicas` answer: each
/// starts with its `name` field.
fn entries(lines: &[&str]) -> Vec<BTreeMap<String, String>> {
    let mut out: Vec<BTreeMap<String, String>> = Vec::new();
    for c in lines.chunks(2).filter(|c| c.len() == 2) {
        if c[0] == "name" || out.is_empty() {
            out.push(BTreeMap::new());
        }
        if let Some(last) = out.last_mut() {
            last.insert(c[0].to_string(), c[1].to_string());
        }
    }
    out
}

/// The script that prints every Sentinel's view for [`parse_views`].
pub fn views_script(sentinels: &[String]) -> String {
    format!(
        "for h in {}; do echo \"== $h\"; timeout 5 redis-cli -h $h -p {SENTINEL_PORT} sentinel master {MASTER}; \
         echo '-- replicas'; timeout 5 redis-cli -h $h -p {SENTINEL_PORT} sentinel replicas {MASTER}; done 2>&1; true",
        sentinels.join(" ")
    )
}

/// Parses [`views_script`]'s output: each Sentinel's address and view.
pub fn parse_views(text: &str) -> Vec<(String, View)> {
    let mut out = Vec::new();
    let lines: Vec<&str> = text.lines().map(|l| l.trim_end_matches('\r')).collect();
    let mut i = 0;
    while i < lines.len() {
        let Some(host) = lines[i].strip_prefix("== ") else {
            i += 1;
            continue;
        };
        let end = lines[i + 1..]
            .iter()
            .position(|l| l.starts_with("== "))
            .map_or(lines.len(), |p| i + 1 + p);
        let section = &lines[i + 1..end];
        let split = section
            .iter()
            .position(|l| *l == "-- replicas")
            .unwrap_or(section.len());
        let replicas = section.get(split + 1..).unwrap_or(&[]);
        let replicas: Vec<&str> = replicas.iter().copied().filter(|l| !l.is_empty()).collect();
        out.push((
            host.to_string(),
            View {
                master: fields(&section[..split]),
                replicas: entries(&replicas),
            },
        ));
        i = end;
    }
    out
}

/// The master's IP if every one of `sentinels` (by address) reports the same
/// master, up and not failing over, with exactly `replicas` replicas, each
/// up with its link to that master ok, and knows the other Sentinels; else
/// why not. Pure.
pub fn settled(
    views: &[(String, View)],
    sentinels: &[String],
    replicas: usize,
) -> Result<String, String> {
    let mut master: Option<&str> = None;
    for s in sentinels {
        let Some((_, v)) = views.iter().find(|(h, _)| h == s) else {
            return Err(format!("no answer from Sentinel {s}"));
        };
        let get = |k: &str| v.master.get(k).map(String::as_str).unwrap_or("");
        let ip = get("ip");
        if ip.is_empty() {
            return Err(format!("Sentinel {s} names no master"));
        }
        if get("flags") != "master" {
            return Err(format!("Sentinel {s}: master {ip} flags {}", get("flags")));
        }
        if master.is_some_and(|m| m != ip) {
            return Err(format!(
                "Sentinels disagree: {} and {ip}",
                master.unwrap_or("")
            ));
        }
        master = Some(ip);
        let others = sentinels.len() - 1;
        if get("num-other-sentinels") != others.to_string() {
            return Err(format!(
                "Sentinel {s} knows {} other Sentinels, want {others}",
                get("num-other-sentinels")
            ));
        }
        let linked = v
            .replicas
            .iter()
            .filter(|r| {
                r.get("flags").map(String::as_str) == Some("slave")
                    && r.get("master-link-status").map(String::as_str) == Some("ok")
                    && r.get("master-host").map(String::as_str) == Some(ip)
            })
            .count();
        if linked != replicas || v.replicas.len() != replicas {
            return Err(format!(
                "Sentinel {s}: {linked} linked replicas of {ip} among {} listed, want {replicas}",
                v.replicas.len()
            ));
        }
    }
    master
        .map(str::to_string)
        .ok_or_else(|| "no Sentinels".to_string())
}

/// The script that prints each Sentinel's answer to
/// `SENTINEL get-master-addr-by-name`, one IP a line (empty if none).
fn masters_script(sentinels: &[String]) -> String {
    format!(
        "for h in {}; do timeout 5 redis-cli -h $h -p {SENTINEL_PORT} sentinel get-master-addr-by-name {MASTER} | head -n 1; echo; done 2>/dev/null; true",
        sentinels.join(" ")
    )
}

/// The one master every Sentinel names in [`masters_script`]'s output, if
/// they agree.
pub fn agreed_master(text: &str, sentinels: usize) -> Option<String> {
    let named: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    (named.len() == sentinels && named.iter().all(|m| *m == named[0])).then(|| named[0].to_string())
}

/// The Sentinel set in the session's namespace.
struct Set<'a> {
    session: &'a Session,
    image: String,
    sentinels: Vec<String>,
    /// The next redis-server Pod's number.
    next: usize,
}

fn pod_ip(p: &Pod) -> Option<String> {
    p.status.as_ref()?.pod_ip.clone()
}

impl<'a> Set<'a> {
    /// Creates `pod` and waits until it is Ready; a Pod that fails before
    /// (restartPolicy Never and a container that could not start on a loaded
    /// machine) is deleted and created again, twice at most.
    async fn create_ready(&self, pod: &Pod) -> Result<Pod, crate::Error> {
        let pods = self.session.api::<Pod>();
        let name = pod.name_any();
        for attempt in 1..=3 {
            pods.create(&PostParams::default(), pod).await?;
            let p = session::wait(
                &format!("Pod {name} to be Ready (or fail)"),
                Duration::from_secs(300),
                || async {
                    let p = pods.get(&name).await.ok()?;
                    let phase = p.status.as_ref().and_then(|s| s.phase.clone());
                    (podkeeper::podset::pods::pod_is_ready(&p)
                        || phase.as_deref() == Some("Failed"))
                    .then_some(p)
                },
            )
            .await?;
            if podkeeper::podset::pods::pod_is_ready(&p) {
                return Ok(p);
            }
            progress(&format!(
                "Pod {name} failed before Ready (attempt {attempt}); again"
            ));
            self.delete_pod(&name).await?;
        }
        Err(other(format!("Pod {name} failed to start 3 times")))
    }

    /// Deletes a Pod and waits until it is gone.
    async fn delete_pod(&self, name: &str) -> Result<(), crate::Error> {
        let pods = self.session.api::<Pod>();
        let _ = pods.delete(name, &DeleteParams::default()).await;
        session::wait(
            &format!("Pod {name} to go"),
            Duration::from_secs(120),
            || async { pods.get_opt(name).await.ok()?.is_none().then_some(()) },
        )
        .await
    }

    async fn add_member(&mut self, replicaof: Option<&str>) -> Result<Pod, crate::Error> {
        let name = format!("{SET_NAME}-redis-{}", self.next);
        self.next += 1;
        self.create_ready(&member_pod(&name, &self.image, replicaof)?)
            .await
    }

    /// The master, 2 replicas and the 3 Sentinels, settled.
    async fn create(session: &'a Session, image: &str) -> Result<Set<'a>, crate::Error> {
        let mut set = Set {
            session,
            image: image.into(),
            sentinels: Vec::new(),
            next: 0,
        };
        let master = set.add_member(None).await?;
        let ip = pod_ip(&master).ok_or_else(|| other("the master Pod has no IP"))?;
        for _ in 1..MEMBERS {
            set.add_member(Some(&ip)).await?;
        }
        for i in 0..SENTINELS {
            let name = format!("{SET_NAME}-sentinel-{i}");
            let p = set.create_ready(&sentinel_pod(&name, image, &ip)?).await?;
            set.sentinels
                .push(pod_ip(&p).ok_or_else(|| other(format!("{name} has no IP")))?);
        }
        set.settled().await?;
        Ok(set)
    }

    fn sentinel_pod(&self) -> String {
        format!("{SET_NAME}-sentinel-0")
    }

    /// Waits until every Sentinel reports the same master with 2 linked
    /// replicas and the 2 other Sentinels; returns the master's IP.
    async fn settled(&self) -> Result<String, crate::Error> {
        let script = views_script(&self.sentinels);
        let last = std::sync::Mutex::new(String::new());
        let got = session::wait(
            "the Sentinels to report the master with 2 linked replicas",
            STEP_TIMEOUT,
            || async {
                let text = self.session.sh(&self.sentinel_pod(), &script).ok()?;
                match settled(&parse_views(&text), &self.sentinels, MEMBERS - 1) {
                    Ok(ip) => Some(ip),
                    Err(why) => {
                        *last.lock().unwrap() = why;
                        None
                    }
                }
            },
        )
        .await;
        got.map_err(|e| other(format!("{e}; last: {}", last.lock().unwrap())))
    }

    /// Waits until every Sentinel names a master other than `old` (an IP):
    /// long enough for a second failover attempt (a Sentinel tries again
    /// after twice the failover timeout), then an error.
    async fn new_master(&self, old: &str) -> Result<String, crate::Error> {
        let script = masters_script(&self.sentinels);
        let deadline = Duration::from_millis(u64::from(2 * FAILOVER_TIMEOUT_MS + DOWN_AFTER_MS))
            + Duration::from_secs(60);
        session::wait("the Sentinels to name a new master", deadline, || async {
            let text = self.session.sh(&self.sentinel_pod(), &script).ok()?;
            agreed_master(&text, self.sentinels.len()).filter(|m| m != old)
        })
        .await
    }

    /// The live redis-server Pod at `ip`.
    async fn member_at(&self, ip: &str) -> Result<String, crate::Error> {
        let pods = self.session.api::<Pod>();
        let list = pods
            .list(&ListParams::default().labels(&selector("redis")))
            .await?;
        list.items
            .iter()
            .find(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.status.as_ref().and_then(|s| s.phase.as_deref()) != Some("Failed")
                    && pod_ip(p).as_deref() == Some(ip)
            })
            .map(|p| p.name_any())
            .ok_or_else(|| other(format!("no redis-server Pod at {ip}")))
    }

    /// What a Sentinel user does after a failover without automatic
    /// restarts: the killed Pod deleted, a new replica of `master` started,
    /// and every Sentinel told to forget the dead address.
    async fn replace(&mut self, killed: &str, master: &str) -> Result<(), crate::Error> {
        self.delete_pod(killed).await?;
        self.add_member(Some(master)).await?;
        let reset = format!(
            "for h in {}; do timeout 5 redis-cli -h $h -p {SENTINEL_PORT} sentinel reset {MASTER}; done",
            self.sentinels.join(" ")
        );
        self.session.sh(&self.sentinel_pod(), &reset)?;
        Ok(())
    }
}

/// Deletes every Pod of the set, without waiting.
async fn delete_set(session: &Session) {
    let _ = session
        .api::<Pod>()
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels(&format!("{NAME_LABEL}={SET_NAME}")),
        )
        .await;
}

/// `runs` kill -9 failovers of the Sentinel set under the Sentinel-aware
/// writer (in the session's client Pod); the set is deleted after.
pub async fn failovers(
    session: &Session,
    image: &str,
    runs: usize,
) -> Result<SentinelFailovers, crate::Error> {
    let mut out = SentinelFailovers::new(runs);
    // The image must have Debian's redis-sentinel (`kind up` rebuilds an
    // older one); the client Pod runs the same image.
    session
        .sh(CLIENT, "command -v redis-sentinel")
        .map_err(|e| {
            other(format!(
                "the Redis image has no redis-sentinel (run `podkeeper-dev kind up` to rebuild it): {e}"
            ))
        })?;
    let result = async {
        let mut set = Set::create(session, image).await?;
        measure(&mut set, runs, &mut out.failovers).await
    }
    .await;
    delete_set(session).await;
    result?;
    out.failovers.load.1 = load_average();
    Ok(out)
}

async fn measure(set: &mut Set<'_>, runs: usize, f: &mut Failovers) -> Result<(), crate::Error> {
    let session = set.session;
    let script = writer::sentinel_script(
        "w",
        &set.sentinels,
        SENTINEL_PORT,
        MASTER,
        1,
        WAIT_TIMEOUT_MS,
    );
    session.start_script_in(CLIENT, &script).await?;
    session.writes_accepted(20).await?;
    for run in 0..runs {
        let old_ip = set.settled().await?;
        let old = set.member_at(&old_ip).await?;
        let old_run_id = session.run_id(&old, PORT)?;
        session.writes_accepted(10).await?;
        let killed_at = session.kill_9_now(&old)?;
        let new_ip = set.new_master(&old_ip).await?;
        let new = set.member_at(&new_ip).await?;
        let new_run_id = session.run_id(&new, PORT)?;
        // Writes accepted from now on are the new master's.
        session.writes_accepted(5).await?;
        let (writes, _) = session.writes()?;
        let w = writer::failover(&writes, killed_at, &old_run_id, &new_run_id)
            .ok_or_else(|| other("no write accepted by the new master"))?;
        let refused: Vec<String> =
            writer::refusals(&writes, killed_at, killed_at + w.to_new_primary_s)
                .iter()
                .map(|(why, n)| format!("{n} {why}"))
                .collect();
        f.accepted_elsewhere += w.accepted_elsewhere;
        f.to_new_primary_s.push(w.to_new_primary_s);
        f.client_gap_s.push(w.client_gap_s);
        progress(&format!(
            "Sentinel failover {}/{runs}: {old} -> {new}: first write accepted {:.2} s after the kill, client gap {:.2} s, refused meanwhile: {}",
            run + 1,
            w.to_new_primary_s,
            w.client_gap_s,
            if refused.is_empty() {
                "none".into()
            } else {
                refused.join(", ")
            },
        ));
        set.replace(&old, &new_ip).await?;
    }
    let master = set.settled().await?;
    let writes = session.stop_writer().await?;
    let acked = writer::acknowledged(&writes, 1);
    f.writes = UnderWrites {
        acknowledged: acked.len(),
        acknowledged_lost: session.lost(&master, PORT, &acked)?.len(),
        client_overlaps: writer::overlapping_primaries(&writes).len(),
        ..Default::default()
    };
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(pod: &Pod) -> Vec<String> {
        pod.spec.as_ref().unwrap().containers[0]
            .args
            .clone()
            .unwrap()
    }

    #[test]
    fn members_run_podkeepers_command_line_as_master_or_replica_and_never_restart() {
        let master = member_pod("m", "img", None).unwrap();
        let replica = member_pod("r", "img", Some("10.244.1.9")).unwrap();
        let a = args(&master);
        assert!(!a.contains(&"--replicaof".to_string()));
        for (k, v) in [
            ("--port", "6379"),
            ("--repl-ping-replica-period", "1"),
            ("--appendonly", "no"),
            ("--save", ""),
            ("--protected-mode", "no"),
        ] {
            let i = a
                .iter()
                .position(|x| x == k)
                .unwrap_or_else(|| panic!("{k}"));
            assert_eq!(a[i + 1], v, "{k}");
        }
        let r = args(&replica);
        let i = r.iter().position(|x| x == "--replicaof").unwrap();
        assert_eq!(&r[i + 1..i + 3], ["10.244.1.9", "6379"]);
        assert_eq!(r.len(), a.len() + 3);
        let spec = replica.spec.as_ref().unwrap();
        assert_eq!(spec.restart_policy.as_deref(), Some("Never"));
        assert_eq!(spec.containers[0].image.as_deref(), Some("img"));
        assert!(spec.containers[0].readiness_probe.is_some());
        let spread = spec.topology_spread_constraints.as_ref().unwrap();
        assert!(!spread.is_empty());
        for c in spread {
            assert_eq!(
                c.label_selector.as_ref().unwrap().match_labels,
                Some(labels("redis"))
            );
        }
        // Not a podkeeper member: no podkeeper label for the operator to see.
        let l = replica.metadata.labels.as_ref().unwrap();
        assert!(l.keys().all(|k| !k.starts_with("podkeeper.dev/")));
        assert_eq!(l, &labels("redis"));
    }

    #[test]
    fn sentinels_monitor_the_master_as_the_tutorial_does() {
        let conf = sentinel_conf("10.244.2.3");
        assert_eq!(
            conf,
            "port 26379\ndir /conf\nsentinel monitor anchor 10.244.2.3 6379 2\n\
             sentinel down-after-milliseconds anchor 5000\nsentinel failover-timeout anchor 60000\n\
             sentinel parallel-syncs anchor 1\n"
        );
        let pod = sentinel_pod("s", "img", "10.244.2.3").unwrap();
        let c = &pod.spec.as_ref().unwrap().containers[0];
        let script = &c.command.as_ref().unwrap()[2];
        assert!(script.starts_with("[ -e /conf/sentinel.conf ] || printf"));
        assert!(
            script.contains(&conf) && script.ends_with("exec redis-sentinel /conf/sentinel.conf")
        );
        assert_eq!(
            pod.spec.as_ref().unwrap().restart_policy.as_deref(),
            Some("Always")
        );
    }

    fn replica(name: &str, flags: &str, link: &str, master: &str) -> Vec<String> {
        [
            "name",
            name,
            "ip",
            name,
            "port",
            "6379",
            "flags",
            flags,
            "master-link-status",
            link,
            "master-host",
            master,
            "master-port",
            "6379",
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }

    fn section(
        host: &str,
        master: &str,
        flags: &str,
        others: u32,
        replicas: &[Vec<String>],
    ) -> String {
        let mut s = format!(
            "== {host}\nname\nanchor\nip\n{master}\nport\n6379\nflags\n{flags}\nnum-other-sentinels\n{others}\n-- replicas\n"
        );
        for r in replicas {
            s.push_str(&r.join("\n"));
            s.push('\n');
        }
        s
    }

    #[test]
    fn the_set_is_settled_when_every_sentinel_sees_the_master_two_linked_replicas_and_the_others() {
        let hosts: Vec<String> = ["s1", "s2", "s3"].iter().map(|s| s.to_string()).collect();
        let good = [
            replica("10.0.0.2", "slave", "ok", "10.0.0.1"),
            replica("10.0.0.3", "slave", "ok", "10.0.0.1"),
        ];
        let all = |m: &str| -> String {
            hosts
                .iter()
                .map(|h| section(h, m, "master", 2, &good))
                .collect()
        };
        let views = parse_views(&all("10.0.0.1"));
        assert_eq!(views.len(), 3);
        assert_eq!(views[0].1.replicas.len(), 2);
        assert_eq!(views[0].1.replicas[1]["ip"], "10.0.0.3");
        assert_eq!(settled(&views, &hosts, 2), Ok("10.0.0.1".into()));
        // One Sentinel still on the old master.
        let text: String = hosts
            .iter()
            .map(|h| {
                let m = if h == "s3" { "10.0.0.9" } else { "10.0.0.1" };
                section(h, m, "master", 2, &good)
            })
            .collect();
        assert!(
            settled(&parse_views(&text), &hosts, 2)
                .unwrap_err()
                .contains("disagree")
        );
        // The dead master still listed after a failover, before the RESET.
        let mut stale = good.to_vec();
        stale.push(replica("10.0.0.9", "s_down,slave,disconnected", "err", "?"));
        let text: String = hosts
            .iter()
            .map(|h| section(h, "10.0.0.1", "master", 2, &stale))
            .collect();
        assert!(
            settled(&parse_views(&text), &hosts, 2)
                .unwrap_err()
                .contains("among 3 listed")
        );
        // Just reset: it has not heard the other Sentinels yet.
        let text: String = hosts
            .iter()
            .map(|h| section(h, "10.0.0.1", "master", 0, &good))
            .collect();
        assert!(
            settled(&parse_views(&text), &hosts, 2)
                .unwrap_err()
                .contains("knows 0 other")
        );
        // The master down, a replica's link down, a Sentinel not answering.
        let text: String = hosts
            .iter()
            .map(|h| section(h, "10.0.0.1", "s_down,master", 2, &good))
            .collect();
        assert!(settled(&parse_views(&text), &hosts, 2).is_err());
        let half = [
            good[0].clone(),
            replica("10.0.0.3", "slave", "err", "10.0.0.1"),
        ];
        let text: String = hosts
            .iter()
            .map(|h| section(h, "10.0.0.1", "master", 2, &half))
            .collect();
        assert!(
            settled(&parse_views(&text), &hosts, 2)
                .unwrap_err()
                .contains("1 linked")
        );
        let text =
            "== s1\nCould not connect to Redis at s1:26379: Connection refused\n-- replicas\n";
        assert!(
            settled(&parse_views(text), &hosts[..1], 2)
                .unwrap_err()
                .contains("names no master")
        );
        assert!(
            settled(&parse_views(""), &hosts, 2)
                .unwrap_err()
                .contains("no answer")
        );
    }

    #[test]
    fn a_new_master_is_the_one_every_sentinel_names() {
        assert_eq!(
            agreed_master("10.0.0.2\n\n10.0.0.2\n\n10.0.0.2\n\n", 3),
            Some("10.0.0.2".into())
        );
        assert_eq!(agreed_master("10.0.0.2\n\n10.0.0.1\n\n10.0.0.2\n", 3), None);
        assert_eq!(agreed_master("10.0.0.2\n\n\n10.0.0.2\n", 3), None);
        assert!(masters_script(&["a".into(), "b".into()]).contains("for h in a b;"));
    }
}
