//! Redis with `spec.storage` on kind (issue 29, point 8), three measurements:
//!
//! - **restart-all** ([`restarts`]): every Pod of a Redis of 3 with storage
//!   deleted at once (one delete call per Pod, sent concurrently) under the
//!   writer; the time until writes are accepted again, whether the Redis
//!   comes back Ready by itself, acknowledged writes lost, and a dataset
//!   loaded before the runs checked key by key after each.
//! - **replica resync** ([`resyncs`]): two Redis of 2, one with storage and
//!   one without, each loaded with the same dataset; each run deletes the
//!   replica's Pod of both, one after the other, and times the replacement
//!   until it is linked and caught up, with what its primary counted (full
//!   or partial resynchronisation) and the bytes it received.
//! - **drain** ([`drains`]): `kubectl drain` of the primary's node of a
//!   Redis of 3 with storage under the writer; the longest write pause,
//!   acknowledged writes lost, how long the drain took and whether the
//!   primary moved before its Pod was evicted; then `kubectl uncordon` and
//!   the Redis Ready with 3 members again.
//!
//! The datasets are written by Lua scripts on the primary (`DEBUG
//! POPULATE` is off: Redis 7's `enable-debug-command` defaults to `no` and
//! `spec.config` may not set it): key `d<i>` holds 26 `redis.sha1hex`
//! digests of `<seed><i>:<j>` (1,040 bytes of hex, which the RDB's LZF does
//! not shrink), so a second script can check every key's value.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::{Event, Node, Pod};
use kube::api::{DeleteParams, ListParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, ResourceExt};
use serde::Serialize;

use super::session::{self, InvariantWatch, Session, load_average, now};
use super::{PORT, STEP_TIMEOUT, UnderWrites, fmt_p, other, progress, writer};
use crate::bench::measure::percentiles;
use crate::kind::versions::REDIS_IMAGE;
use podkeeper::api::Redis;
use podkeeper::podset::pods::pod_is_ready;

/// Keys per Lua script when loading or checking a dataset (5,000 keys of
/// 1 KiB: well under a second of the server's time each).
const CHUNK: u64 = 5_000;
/// Size of each member's claim.
const CLAIM_SIZE: &str = "1Gi";
/// How long a Redis may take to come back Ready by itself.
const READY_TIMEOUT: Duration = Duration::from_secs(300);

/// The Lua script that writes keys `d<from>` ..= `d<to>` (ARGV 1, 2) with
/// the values of seed ARGV 3.
const LOAD_LUA: &str = r#"for i=tonumber(ARGV[1]),tonumber(ARGV[2]) do local v={} for j=1,26 do v[j]=redis.sha1hex(ARGV[3]..i..":"..j) end redis.call("SET","d"..i,table.concat(v)) end return 1"#;
/// The Lua script that counts the keys of that range missing or wrong.
const CHECK_LUA: &str = r#"local bad=0 for i=tonumber(ARGV[1]),tonumber(ARGV[2]) do local v={} for j=1,26 do v[j]=redis.sha1hex(ARGV[3]..i..":"..j) end if redis.call("GET","d"..i)~=table.concat(v) then bad=bad+1 end end return bad"#;
const SEED: &str = "pk";

/// The spec of a Redis of `n` members, with storage (the default class) or
/// without.
fn redis_spec(n: i32, storage: bool) -> serde_json::Value {
    let mut spec = serde_json::json!({"replicas": n, "port": PORT, "image": REDIS_IMAGE});
    if storage {
        spec["storage"] = serde_json::json!({
            "size": CLAIM_SIZE,
            "retention": {"whenScaled": "Delete", "whenDeleted": "Delete"},
        });
    }
    spec
}

/// The value of `key` in INFO output.
pub fn info_field(info: &str, key: &str) -> Option<String> {
    info.lines()
        .find_map(|l| l.trim_end_matches('\r').strip_prefix(&format!("{key}:")))
        .map(|v| v.trim().to_string())
}

fn info_u64(info: &str, key: &str) -> u64 {
    info_field(info, key)
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

/// Writes keys `d1` ..= `d<keys>` through the primary of `name`, printing
/// progress every 20,000 keys.
pub async fn load_dataset(session: &Session, name: &str, keys: u64) -> Result<(), crate::Error> {
    let started = now();
    let mut from = 1;
    while from <= keys {
        let r = session.api::<Redis>().get(name).await?;
        let primary = super::primary(&r)?;
        let to = (from + CHUNK - 1).min(keys);
        let out = session.redis_cli(
            &primary,
            PORT,
            &format!("EVAL '{LOAD_LUA}' 0 {from} {to} {SEED}"),
        )?;
        if out.trim() != "1" {
            return Err(other(format!("loading d{from}..d{to} on {primary}: {out}")));
        }
        if to.is_multiple_of(20_000) || to == keys {
            progress(&format!(
                "{name}: dataset {to}/{keys} keys of 1 KiB written ({:.0} s)",
                now() - started
            ));
        }
        from = to + 1;
    }
    Ok(())
}

/// Keys of `d1` ..= `d<keys>` missing or wrong on the primary of `name`.
async fn check_dataset(session: &Session, name: &str, keys: u64) -> Result<u64, crate::Error> {
    let r = session.api::<Redis>().get(name).await?;
    let primary = super::primary(&r)?;
    let mut bad = 0;
    let mut from = 1;
    while from <= keys {
        let to = (from + CHUNK - 1).min(keys);
        let out = session.redis_cli(
            &primary,
            PORT,
            &format!("EVAL '{CHECK_LUA}' 0 {from} {to} {SEED}"),
        )?;
        bad += out
            .trim()
            .parse::<u64>()
            .map_err(|_| other(format!("checking d{from}..d{to} on {primary}: {out}")))?;
        from = to + 1;
    }
    Ok(bad)
}

/// The Redis's status and its recent Events, for a report of what went
/// wrong.
async fn status_and_events(session: &Session, name: &str) -> String {
    let status = match session.api::<Redis>().get(name).await {
        Ok(r) => serde_json::to_string(&r.status).unwrap_or_default(),
        Err(e) => format!("(no Redis: {e})"),
    };
    let events: Vec<String> = redis_events(session, name)
        .await
        .unwrap_or_default()
        .into_iter()
        .map(|e| format!("{:.3} {} {}", e.at, e.reason, e.message))
        .collect();
    let (_, pods, _) = session.kubectl(&["get", "pods,pvc", "-o", "wide"]);
    format!(
        "status: {status}\nevents:\n  {}\npods and claims:\n{pods}",
        events.join("\n  ")
    )
}

/// One Event of a Redis.
#[derive(Clone, Debug, Serialize)]
pub struct RedisEvent {
    /// When it last happened, seconds since the epoch (the operator's
    /// clock: the same host).
    pub at: f64,
    pub reason: String,
    pub message: String,
}

/// The Events recorded for the Redis `name`, oldest first.
async fn redis_events(session: &Session, name: &str) -> Result<Vec<RedisEvent>, crate::Error> {
    let list = session
        .api::<Event>()
        .list(&ListParams::default().fields(&format!(
            "involvedObject.name={name},involvedObject.kind=Redis"
        )))
        .await?;
    let mut out: Vec<RedisEvent> = list
        .items
        .into_iter()
        .map(|e| {
            let micro = e
                .series
                .as_ref()
                .and_then(|s| s.last_observed_time.as_ref())
                .map(|t| t.0.as_microsecond())
                .or_else(|| e.event_time.as_ref().map(|t| t.0.as_microsecond()))
                .or_else(|| e.last_timestamp.as_ref().map(|t| t.0.as_microsecond()))
                .unwrap_or(0);
            RedisEvent {
                at: micro as f64 / 1e6,
                reason: e.reason.unwrap_or_default(),
                message: e.message.unwrap_or_default(),
            }
        })
        .collect();
    out.sort_by(|a, b| a.at.total_cmp(&b.at));
    Ok(out)
}

// ---------------------------------------------------------------- methods

pub const RESTART_METHOD: &str = "A Redis of 3 members with spec.storage (1Gi claims of the default StorageClass, local-path on kind; AOF everysec, the operator's default with storage) is loaded with a dataset of 1 KiB keys d1..dN (Lua on the primary: 26 SHA-1 hex digests per value, so every value can be checked), then the writer writes through the <name> Service the whole time. Each run deletes every Pod of the Redis at once (one delete call per Pod, default grace period, sent concurrently) and measures, from the first call: the end of the first write accepted by a redis-server process that had accepted none before the deletion (writes accepted again), and Ready with 3 new Pods, every member in the status (came back Ready without help, 300 s at most). Once Ready, every write acknowledged (WAIT 1) before the deletion is read back through the Service, and a Lua script on the primary checks every dataset key's value. Acknowledged writes over the whole series are read back at the end.";

pub const NODE_RESTART_METHOD: &str = "The same Redis, dataset and checks as restart-all, but each run restarts the kind nodes (Docker containers) that run the Redis's Pods at once: docker kill of them all (every process on the node killed with no shutdown: like a power cut, except that writes a process had handed to the kernel are kept in the host's page cache), then docker start of them all, each at its address on the kind network (the node's systemd, containerd and kubelet start again, and podkeeper's kind set-up puts the Pod routes back). The Pods are the same objects; the kubelets start their containers again with new IPs. The writer runs in a client Pod on the control plane's node, which is not restarted, so its own downtime is not counted; the operator runs wherever the cluster put it (on a worker, it is restarted too). Writes accepted again and Ready are measured from the restart command, Ready meaning every member's container started after the restart (or a new Pod) and Ready, and the status naming every member.";

pub const RESYNC_METHOD: &str = "Two Redis of 2 members side by side, one with spec.storage (1Gi claim, AOF everysec) and one without, each loaded with the same dataset of 1 KiB keys (Lua on the primary: 26 SHA-1 hex digests per value, which the RDB's LZF compression does not shrink). Each run deletes the replica's Pod of each Redis in turn (which goes first alternates) and measures, from the delete call, until the replacement (with storage: on the same claim, loading its AOF first) reports master_link_status:up towards the primary, and until, linked, its slave_repl_offset equals the primary's master_repl_offset (both polled every 0.1 s with redis-cli from the client Pod; the times are the client's, the same host clock). No writes run. The primary's sync_full, sync_partial_ok and sync_partial_err counters (INFO stats) tell a full resynchronisation from a partial one; the bytes are the replacement's total_net_repl_input_bytes (a new process: everything it received from its primary) and the primary's total_net_repl_output_bytes over the run.";

pub const DRAIN_METHOD: &str = "A Redis of 3 members with spec.storage (local-path: a claim's volume stays on its node) on kind's 2 workers, the writer writing through the <name> Service the whole time. Each run runs kubectl drain of the primary's node with --ignore-daemonsets --delete-emptydir-data --timeout=300s and --pod-selector for the Redis's Pods (the cluster is shared: the drain evicts no one else's Pods; the node is cordoned whole), through the eviction API as a user's drain does, so a PodDisruptionBudget is honoured. It measures the drain's duration, the longest pause between accepted writes overlapping it, when status.primary named another Pod and when the old primary's Pod began terminating (both from watches), the Redis's Events in that time (SwitchingOver, Promoted: their eventTime, µs), how the writer's attempts in the longest pause were refused, and whether a write is accepted within 60 s after the drain while the node stays cordoned (members evicted from it cannot start elsewhere: their volumes are on it). Then kubectl uncordon and Ready with 3 members before the next run. Acknowledged writes over the whole series are read back at the end.";

// ---------------------------------------------------------------- restarts

#[derive(Debug, Default, Serialize)]
pub struct Restarts {
    pub method: String,
    pub runs: usize,
    pub members: i32,
    /// Keys of the dataset loaded before the runs (1 KiB each).
    pub dataset_keys: u64,
    /// Per run: dataset keys missing or wrong once the Redis was Ready again.
    pub dataset_missing: Vec<u64>,
    /// Per run: acknowledged writes made before the deletion (since the
    /// writer started: earlier runs' too), and those of them missing once
    /// the Redis was Ready again.
    pub acknowledged_before: Vec<usize>,
    pub acknowledged_before_lost: Vec<usize>,
    /// Per run: from the first delete call to the end of the first write
    /// accepted by a new redis-server process, s.
    pub to_writes_s: Vec<f64>,
    /// Per run: from the first delete call to Ready with every member new.
    pub to_ready_s: Vec<f64>,
    /// Runs where the Redis came back Ready by itself within 300 s.
    pub ready_unaided: usize,
    /// Runs whose new primary runs on the claim the old primary ran on.
    pub primary_claim_kept: usize,
    /// What was seen when a run failed (status, Events, Pods and claims).
    pub failures: Vec<String>,
    #[serde(flatten)]
    pub writes: UnderWrites,
    pub load: (String, String),
}

fn primary_claim(r: &Redis) -> Option<String> {
    r.status.as_ref()?.primary.as_ref()?.claim.clone()
}

/// How every member goes at once.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AllAtOnce {
    /// One delete call per Pod, sent concurrently.
    PodsDeleted,
    /// The kind nodes that run the members killed and started again, all
    /// at once.
    NodesRestarted,
}

/// The client Pod of the node-restart runs: on the control plane's node,
/// which they do not restart.
const NODE_CLIENT: &str = "client-cp";

/// Restart-all, `runs` times, into `out` (kept as far as it got on error).
pub async fn restarts(
    session: &Session,
    runs: usize,
    keys: u64,
    how: AllAtOnce,
    out: &mut Restarts,
) -> Result<(), crate::Error> {
    let (name, method, client) = match how {
        AllAtOnce::PodsDeleted => ("restart", RESTART_METHOD, session::CLIENT),
        AllAtOnce::NodesRestarted => ("reboot", NODE_RESTART_METHOD, NODE_CLIENT),
    };
    let event = match how {
        AllAtOnce::PodsDeleted => "deletion",
        AllAtOnce::NodesRestarted => "restart",
    };
    let n = 3;
    *out = Restarts {
        method: method.into(),
        runs,
        members: n,
        dataset_keys: keys,
        load: (load_average(), String::new()),
        ..Default::default()
    };
    if how == AllAtOnce::NodesRestarted {
        let node = control_plane_node(session).await?;
        let pods: Api<Pod> = session.api();
        if pods.get_opt(client).await?.is_none() {
            session.add_client(client, REDIS_IMAGE, Some(&node)).await?;
        }
    }
    session.create_redis_spec(name, redis_spec(n, true)).await?;
    session.settled(name, n as usize, STEP_TIMEOUT).await?;
    load_dataset(session, name, keys).await?;
    let host = session.cluster_ip(name).await?;
    session.start_writer_in(client, "w", &host, PORT, 1).await?;
    session.writes_accepted_in(client, 20).await?;
    let watch = InvariantWatch::start(session, name);
    let pods: Api<Pod> = session.api();
    for run in 0..runs {
        let label = format!("{name} {}/{runs}", run + 1);
        let (r, before) = session.settled(name, n as usize, STEP_TIMEOUT).await?;
        let old_claim = primary_claim(&r);
        session.writes_accepted_in(client, 10).await?;
        let old_uids: BTreeSet<String> = before.iter().filter_map(|p| p.uid()).collect();
        let deleted_at = now();
        match how {
            AllAtOnce::PodsDeleted => {
                let deletes = before.iter().map(|p| {
                    let pods = pods.clone();
                    let pod = p.name_any();
                    async move { pods.delete(&pod, &DeleteParams::default()).await }
                });
                for d in futures::future::join_all(deletes).await {
                    d?;
                }
                progress(&format!(
                    "{label}: {} Pods deleted at once; waiting for Ready",
                    before.len()
                ));
            }
            AllAtOnce::NodesRestarted => {
                let nodes: BTreeSet<String> = before
                    .iter()
                    .filter_map(|p| p.spec.as_ref()?.node_name.clone())
                    .collect();
                restart_nodes(&nodes)?;
                progress(&format!(
                    "{label}: nodes {nodes:?} restarted at once; waiting for Ready"
                ));
            }
        }
        // Back: every member a new Pod, or (nodes restarted) the same Pod
        // whose container started after the restart; all Ready.
        let after = deleted_at.floor() as i64;
        let new_members = session::wait("every member back", READY_TIMEOUT, || async {
            let live = session::member_pods(&pods, name).await?;
            (live.len() == n as usize
                && live.iter().all(|p| {
                    let new = p.uid().is_some_and(|u| !old_uids.contains(&u))
                        || started_at(p).is_some_and(|t| t >= after);
                    new && pod_is_ready(p)
                }))
            .then_some(())
        })
        .await;
        let settled = match new_members {
            Ok(()) => session.settled(name, n as usize, READY_TIMEOUT).await,
            Err(e) => Err(e),
        };
        let r = match settled {
            Ok((r, _)) => r,
            Err(e) => {
                let seen = status_and_events(session, name).await;
                progress(&format!("{label}: not Ready by itself ({e}):\n{seen}"));
                out.failures.push(format!("{label}: {e}\n{seen}"));
                return Err(other(format!("{label}: the Redis did not come back Ready")));
            }
        };
        let ready_s = now() - deleted_at;
        out.ready_unaided += 1;
        out.to_ready_s.push(ready_s);
        if old_claim.is_some() && primary_claim(&r) == old_claim {
            out.primary_claim_kept += 1;
        }
        session.writes_accepted_in(client, 5).await?;
        let (writes, _) = session.writes_in(client)?;
        let old_runs: BTreeSet<&str> = writes
            .iter()
            .filter(|a| a.accepted && a.end < deleted_at)
            .filter_map(|a| a.run_id.as_deref())
            .collect();
        let old_runs: Vec<&str> = old_runs.into_iter().collect();
        let first = writer::first_accepted_after(&writes, deleted_at, &old_runs)
            .ok_or_else(|| other(format!("{label}: no write accepted by a new process")))?;
        let to_writes = first.end - deleted_at;
        out.to_writes_s.push(to_writes);
        let before_acked: Vec<u64> = writes
            .iter()
            .filter(|a| a.end < deleted_at && a.accepted && a.acks.is_some_and(|n| n >= 1))
            .map(|a| a.key)
            .collect();
        let lost = session.lost_keyed_from(client, "w", &host, PORT, &before_acked)?;
        let missing = check_dataset(session, name, keys).await?;
        out.acknowledged_before.push(before_acked.len());
        out.acknowledged_before_lost.push(lost.len());
        out.dataset_missing.push(missing);
        let pause = writer::longest_pause(&writes, deleted_at, first.end).map_or(0.0, |p| p.0);
        progress(&format!(
            "{label}: writes accepted again {to_writes:.2} s after the {event} (longest pause {pause:.2} s), Ready {ready_s:.1} s after; primary {} on claim {} (before: {}); acknowledged before the {event} lost: {} of {}; dataset keys missing: {missing} of {keys}",
            r.primary_pod().unwrap_or("-"),
            primary_claim(&r).unwrap_or_else(|| "-".into()),
            old_claim.as_deref().unwrap_or("-"),
            lost.len(),
            before_acked.len(),
        ));
        if !lost.is_empty() || missing > 0 {
            let seen = status_and_events(session, name).await;
            out.failures.push(format!(
                "{label}: lost acknowledged keys {:?}, {missing} dataset keys missing\n{seen}",
                &lost[..lost.len().min(20)]
            ));
        }
    }
    out.writes = super::wind_up_in(session, client, &host, watch).await?;
    out.load.1 = load_average();
    super::delete_redis(session, name).await?;
    Ok(())
}

/// When the Pod's first container started (its current run), s since the
/// epoch.
fn started_at(p: &Pod) -> Option<i64> {
    let s = p.status.as_ref()?.container_statuses.as_ref()?.first()?;
    Some(
        s.state
            .as_ref()?
            .running
            .as_ref()?
            .started_at
            .as_ref()?
            .0
            .as_second(),
    )
}

/// The control plane's node.
async fn control_plane_node(session: &Session) -> Result<String, crate::Error> {
    let nodes: Api<Node> = Api::all(session.client.clone());
    nodes
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .find(|n| {
            n.labels()
                .contains_key("node-role.kubernetes.io/control-plane")
        })
        .map(|n| n.name_any())
        .ok_or_else(|| other("no control-plane node"))
}

/// Restarts the kind nodes (their Docker containers) at once, killing
/// every process on them: `docker kill` of all, then `docker start` of all.
/// Each is reattached to the kind network at its address in between:
/// Docker hands addresses out afresh at a start, and a kind node's kubelet
/// keeps the address it was made with.
fn restart_nodes(nodes: &BTreeSet<String>) -> Result<(), crate::Error> {
    let docker = |args: &[&str]| -> Result<String, crate::Error> {
        let out = Command::new("docker").args(args).output().map_err(other)?;
        if !out.status.success() {
            return Err(other(format!(
                "docker {}: {}",
                args.join(" "),
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let template = "{{(index .NetworkSettings.Networks \"kind\").IPAddress}}";
    let addresses: Vec<(String, String)> = nodes
        .iter()
        .map(|n| Ok((n.clone(), docker(&["inspect", "-f", template, n])?)))
        .collect::<Result<_, crate::Error>>()?;
    let all: Vec<&str> = nodes.iter().map(String::as_str).collect();
    docker(&[&["kill"], &all[..]].concat())?;
    for (node, ip) in &addresses {
        docker(&["network", "disconnect", "kind", node])?;
        docker(&["network", "connect", "--ip", ip, "kind", node])?;
    }
    docker(&[&["start"], &all[..]].concat())?;
    Ok(())
}

// ----------------------------------------------------------------- resyncs

/// One replica replacement.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Resync {
    /// From the delete call to the replacement's link up, s.
    pub to_link_s: f64,
    /// From the delete call to the replacement linked with its offset equal
    /// to the primary's, s.
    pub to_caught_up_s: f64,
    /// The primary's `sync_full`, `sync_partial_ok` and `sync_partial_err`
    /// counted during the run.
    pub sync_full: u64,
    pub sync_partial_ok: u64,
    pub sync_partial_err: u64,
    /// Bytes the replacement received from its primary
    /// (`total_net_repl_input_bytes`, a new process: all of it).
    pub received_bytes: u64,
    /// Bytes the primary sent to replicas during the run
    /// (`total_net_repl_output_bytes`).
    pub primary_sent_bytes: u64,
    /// The replacement has AOF on (`aof_enabled`): with storage, it loaded
    /// its claim's AOF before syncing, which is in the times above.
    pub aof_enabled: bool,
}

#[derive(Debug, Default, Serialize)]
pub struct Side {
    pub storage: bool,
    pub runs: Vec<Resync>,
    /// The primary's `used_memory_dataset` before the runs, bytes.
    pub dataset_bytes: u64,
    /// `repl-diskless-sync` on the primary.
    pub diskless_sync: String,
}

#[derive(Debug, Default, Serialize)]
pub struct Resyncs {
    pub method: String,
    pub runs: usize,
    pub dataset_keys: u64,
    pub with_storage: Side,
    pub without_storage: Side,
    pub failures: Vec<String>,
    pub load: (String, String),
}

/// The script, for the client Pod, that polls the replacement at
/// `replica` and its primary at `primary` every 0.1 s and prints `up <t>`
/// when the replacement's link to that primary is first up and `caught
/// <t>` when, linked, its offset equals the primary's (`timeout` after
/// 600 s).
fn catch_up_script(replica: &str, primary: &str) -> String {
    format!(
        r#"end=$((SECONDS+600)); up=
while [ $SECONDS -lt $end ]; do
  r=$(redis-cli -h {replica} -p {PORT} info replication 2>/dev/null | tr -d '\r')
  p=$(redis-cli -h {primary} -p {PORT} info replication 2>/dev/null | tr -d '\r')
  t=$EPOCHREALTIME
  case $r in *master_host:{primary}*master_link_status:up*) [ -n "$up" ] || {{ up=$t; echo "up $t"; }};; esac
  ro=$(sed -n 's/^slave_repl_offset://p' <<<"$r"); po=$(sed -n 's/^master_repl_offset://p' <<<"$p")
  if [ -n "$up" ] && [ -n "$ro" ] && [ "$ro" = "$po" ]; then echo "caught $t"; exit 0; fi
  sleep 0.1
done
echo timeout"#
    )
}

/// The times `up` and `caught` printed by [`catch_up_script`].
fn parse_catch_up(out: &str) -> Option<(f64, f64)> {
    let at = |w: &str| {
        out.lines()
            .find_map(|l| l.strip_prefix(w)?.trim().parse::<f64>().ok())
    };
    Some((at("up ")?, at("caught ")?))
}

/// Replica resyncs, with storage against without, `runs` times each, into
/// `out` (kept as far as it got on error).
pub async fn resyncs(
    session: &Session,
    runs: usize,
    keys: u64,
    out: &mut Resyncs,
) -> Result<(), crate::Error> {
    *out = Resyncs {
        method: RESYNC_METHOD.into(),
        runs,
        dataset_keys: keys,
        load: (load_average(), String::new()),
        ..Default::default()
    };
    let sides = [("resync-disk", true), ("resync-mem", false)];
    for (name, storage) in sides {
        session
            .create_redis_spec(name, redis_spec(2, storage))
            .await?;
    }
    for (name, storage) in sides {
        session.settled(name, 2, STEP_TIMEOUT).await?;
        load_dataset(session, name, keys).await?;
        let r = session.api::<Redis>().get(name).await?;
        let primary = super::primary(&r)?;
        let memory = session.redis_cli(&primary, PORT, "info memory")?;
        let diskless = session.redis_cli(&primary, PORT, "config get repl-diskless-sync")?;
        let side = Side {
            storage,
            dataset_bytes: info_u64(&memory, "used_memory_dataset"),
            diskless_sync: diskless.lines().nth(1).unwrap_or("").trim().to_string(),
            ..Default::default()
        };
        if storage {
            out.with_storage = side;
        } else {
            out.without_storage = side;
        }
    }
    for run in 0..runs {
        // Alternate which goes first.
        let order: Vec<(&str, bool)> = if run % 2 == 0 {
            sides.to_vec()
        } else {
            sides.iter().rev().copied().collect()
        };
        for (name, storage) in order {
            let label = format!(
                "resync {}/{runs}, {}",
                run + 1,
                if storage {
                    "with storage"
                } else {
                    "without storage"
                }
            );
            match resync_once(session, name, &label).await {
                Ok(r) => {
                    if storage {
                        out.with_storage.runs.push(r);
                    } else {
                        out.without_storage.runs.push(r);
                    }
                }
                Err(e) => {
                    let seen = status_and_events(session, name).await;
                    out.failures.push(format!("{label}: {e}\n{seen}"));
                    return Err(other(format!("{label}: {e}")));
                }
            }
        }
    }
    out.load.1 = load_average();
    for (name, _) in sides {
        super::delete_redis(session, name).await?;
    }
    Ok(())
}

async fn resync_once(session: &Session, name: &str, label: &str) -> Result<Resync, crate::Error> {
    let (r, pods) = session.settled(name, 2, STEP_TIMEOUT).await?;
    let primary = super::primary(&r)?;
    let primary_ip = pods
        .iter()
        .find(|p| p.name_any() == primary)
        .and_then(|p| p.status.as_ref()?.pod_ip.clone())
        .ok_or_else(|| other(format!("no IP for {primary}")))?;
    let replica = pods
        .iter()
        .find(|p| p.name_any() != primary)
        .ok_or_else(|| other("no replica"))?;
    let (replica, replica_uid) = (replica.name_any(), replica.uid().unwrap_or_default());
    let stats_before = session.redis_cli(&primary, PORT, "info stats")?;
    let pods_api: Api<Pod> = session.api();
    let deleted_at = now();
    pods_api.delete(&replica, &DeleteParams::default()).await?;
    let (new_pod, new_ip) = session::wait("the replacement's IP", STEP_TIMEOUT, || async {
        let live = session::member_pods(&pods_api, name).await?;
        live.iter().find_map(|p| {
            (p.uid().as_deref() != Some(replica_uid.as_str()) && p.name_any() != primary)
                .then(|| Some((p.name_any(), p.status.as_ref()?.pod_ip.clone()?)))?
        })
    })
    .await?;
    progress(&format!(
        "{label}: {replica} deleted; {new_pod} at {new_ip}, waiting for it to catch up"
    ));
    let polled = session.sh(session::CLIENT, &catch_up_script(&new_ip, &primary_ip))?;
    let (up, caught) = parse_catch_up(&polled).ok_or_else(|| {
        other(format!(
            "{new_pod} did not catch up with {primary}: {polled}"
        ))
    })?;
    let stats_after = session.redis_cli(&primary, PORT, "info stats")?;
    let replica_stats = session.redis_cli(&new_pod, PORT, "info stats")?;
    let persistence = session.redis_cli(&new_pod, PORT, "info persistence")?;
    let delta = |k: &str| info_u64(&stats_after, k).saturating_sub(info_u64(&stats_before, k));
    let r = Resync {
        to_link_s: up - deleted_at,
        to_caught_up_s: caught - deleted_at,
        sync_full: delta("sync_full"),
        sync_partial_ok: delta("sync_partial_ok"),
        sync_partial_err: delta("sync_partial_err"),
        received_bytes: info_u64(&replica_stats, "total_net_repl_input_bytes"),
        primary_sent_bytes: delta("total_net_repl_output_bytes"),
        aof_enabled: info_u64(&persistence, "aof_enabled") == 1,
    };
    let now_primary = session.api::<Redis>().get(name).await?;
    if now_primary.primary_pod() != Some(primary.as_str()) {
        return Err(other(format!(
            "the primary moved from {primary} to {:?} during the run",
            now_primary.primary_pod()
        )));
    }
    progress(&format!(
        "{label}: linked {:.2} s, caught up {:.2} s after the deletion; primary counted {} full, {} partial ok, {} partial refused; the replacement received {:.1} MB (the primary sent {:.1} MB); AOF {}",
        r.to_link_s,
        r.to_caught_up_s,
        r.sync_full,
        r.sync_partial_ok,
        r.sync_partial_err,
        r.received_bytes as f64 / 1e6,
        r.primary_sent_bytes as f64 / 1e6,
        if r.aof_enabled { "on" } else { "off" },
    ));
    session.settled(name, 2, STEP_TIMEOUT).await?;
    Ok(r)
}

// ------------------------------------------------------------------ drains

/// One drain.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Drain {
    pub node: String,
    /// Members on the drained node when it started (the primary among them).
    pub members_on_node: usize,
    pub drain_succeeded: bool,
    /// `kubectl drain`'s duration, s.
    pub drain_s: f64,
    /// Eviction attempts refused by a PodDisruptionBudget (drain's retries).
    pub evictions_refused: usize,
    /// From the start of the drain: status.primary naming another Pod, and
    /// the old primary's Pod terminating (both seen by watches), s.
    pub primary_moved_s: Option<f64>,
    pub primary_evicted_s: Option<f64>,
    /// From the start of the drain to the first `SwitchingOver` Event's
    /// time (the operator's clock, µs), s.
    pub switchover_event_s: Option<f64>,
    /// The primary moved (status.primary) before its Pod was evicted.
    pub switched_before_eviction: bool,
    /// The Redis's Events from the start of the drain to the uncordon,
    /// `<seconds from the start> <reason>`.
    pub events: Vec<String>,
    /// Longest pause between accepted writes overlapping the drain, s.
    pub pause_s: f64,
    /// How the writer's attempts in that pause were refused, with counts.
    pub pause_refusals: Vec<(String, usize)>,
    /// A write was accepted after the drain ended and before the uncordon
    /// (within 60 s of the drain's end).
    pub writable_while_drained: bool,
    /// From the uncordon to Ready with every member again, s.
    pub ready_after_uncordon_s: f64,
}

#[derive(Debug, Default, Serialize)]
pub struct Drains {
    pub method: String,
    pub runs: Vec<Drain>,
    pub members: i32,
    /// The exact command (the node's name aside).
    pub command: String,
    pub failures: Vec<String>,
    #[serde(flatten)]
    pub writes: UnderWrites,
    pub load: (String, String),
}

/// Uncordons the node when dropped (also on error).
struct Cordon {
    kubeconfig: std::path::PathBuf,
    node: String,
    done: bool,
}

impl Cordon {
    fn uncordon(&mut self) -> Result<(), crate::Error> {
        let out = Command::new("kubectl")
            .env("KUBECONFIG", &self.kubeconfig)
            .args(["uncordon", &self.node])
            .output()
            .map_err(other)?;
        if !out.status.success() {
            return Err(other(format!(
                "kubectl uncordon {}: {}",
                self.node,
                String::from_utf8_lossy(&out.stderr)
            )));
        }
        self.done = true;
        Ok(())
    }
}

impl Drop for Cordon {
    fn drop(&mut self) {
        if !self.done {
            let _ = self.uncordon();
        }
    }
}

/// The drain's flags after the node's name. `--pod-selector` keeps it to
/// the Redis's Pods: the cluster is shared (CoreDNS, the provisioner, other
/// tests' Pods), and a bare client Pod would make drain refuse.
fn drain_args(selector: &str) -> Vec<String> {
    vec![
        "--ignore-daemonsets".into(),
        "--delete-emptydir-data".into(),
        format!("--pod-selector={selector}"),
        "--timeout=300s".into(),
    ]
}

/// `kubectl drain` of the primary's node, `runs` times, into `out`.
pub async fn drains(session: &Session, runs: usize, out: &mut Drains) -> Result<(), crate::Error> {
    let name = "drain";
    let n = 3;
    let selector = podkeeper::redis::pod::selector_string(name);
    *out = Drains {
        method: DRAIN_METHOD.into(),
        members: n,
        command: format!("kubectl drain <node> {}", drain_args(&selector).join(" ")),
        load: (load_average(), String::new()),
        ..Default::default()
    };
    let cordoned = unschedulable_nodes(session).await?;
    if !cordoned.is_empty() {
        return Err(other(format!(
            "nodes already cordoned: {cordoned:?}; the drains would not be measured alone"
        )));
    }
    session.create_redis_spec(name, redis_spec(n, true)).await?;
    session.settled(name, n as usize, STEP_TIMEOUT).await?;
    let host = session.cluster_ip(name).await?;
    session.start_writer(&host, PORT, 1).await?;
    session.writes_accepted(20).await?;
    let watch = InvariantWatch::start(session, name);
    for run in 0..runs {
        let label = format!("drain {}/{runs}", run + 1);
        match drain_once(session, name, &selector, &label).await {
            Ok(d) => out.runs.push(d),
            Err(e) => {
                let seen = status_and_events(session, name).await;
                out.failures.push(format!("{label}: {e}\n{seen}"));
                progress(&format!("{label} failed: {e}\n{seen}"));
                return Err(other(format!("{label}: {e}")));
            }
        }
    }
    out.writes = super::wind_up(session, &host, watch).await?;
    out.load.1 = load_average();
    super::delete_redis(session, name).await?;
    Ok(())
}

async fn drain_once(
    session: &Session,
    name: &str,
    selector: &str,
    label: &str,
) -> Result<Drain, crate::Error> {
    let (r, pods) = session.settled(name, 3, STEP_TIMEOUT).await?;
    let primary = super::primary(&r)?;
    let node_of = |p: &Pod| p.spec.as_ref().and_then(|s| s.node_name.clone());
    let node = pods
        .iter()
        .find(|p| p.name_any() == primary)
        .and_then(node_of)
        .ok_or_else(|| other(format!("no node for {primary}")))?;
    let members_on_node = pods
        .iter()
        .filter(|p| node_of(p).as_deref() == Some(node.as_str()))
        .count();
    session.writes_accepted(10).await?;
    let mut cordon = Cordon {
        kubeconfig: session.kubeconfig.clone(),
        node: node.clone(),
        done: false,
    };
    // Watches status.primary and the old primary's Pod: when each changed.
    let started = now();
    let moved = first_seen(session.api::<Redis>(), name, {
        let primary = primary.clone();
        move |r: &Redis| r.primary_pod().is_some_and(|p| p != primary)
    });
    let evicted = first_seen(session.api::<Pod>(), &primary, |p: &Pod| {
        p.metadata.deletion_timestamp.is_some()
    });
    // Both watches have listed before the drain starts.
    session::wait("the watches", Duration::from_secs(60), || async {
        (moved.ready() && evicted.ready()).then_some(())
    })
    .await?;
    progress(&format!(
        "{label}: draining {node} ({members_on_node} of 3 members there, the primary {primary} among them)"
    ));
    let drain = {
        let kubeconfig = session.kubeconfig.clone();
        let mut args = vec!["drain".to_string(), node.clone()];
        args.extend(drain_args(selector));
        tokio::task::spawn_blocking(move || {
            Command::new("kubectl")
                .env("KUBECONFIG", kubeconfig)
                .args(&args)
                .output()
        })
        .await
        .map_err(other)?
        .map_err(other)?
    };
    let drained_at = now();
    let stderr = String::from_utf8_lossy(&drain.stderr).into_owned();
    let evictions_refused = stderr
        .lines()
        .filter(|l| l.contains("disruption budget"))
        .count();
    progress(&format!(
        "{label}: drain {} after {:.1} s ({evictions_refused} evictions refused by a disruption budget)",
        if drain.status.success() {
            "done"
        } else {
            "FAILED"
        },
        drained_at - started
    ));
    if !drain.status.success() {
        progress(&format!("{label}: kubectl drain said: {stderr}"));
    }
    // Whether the Redis takes writes while the node stays drained.
    let writable = session::wait(
        "a write accepted after the drain",
        Duration::from_secs(60),
        || async {
            let (w, _) = session.writes().ok()?;
            w.iter()
                .any(|a| a.accepted && a.end > drained_at)
                .then_some(())
        },
    )
    .await
    .is_ok();
    let (moved, evicted) = (
        moved.at().map(|t| t - started),
        evicted.at().map(|t| t - started),
    );
    let recorded: Vec<RedisEvent> = redis_events(session, name)
        .await?
        .into_iter()
        .filter(|e| e.at >= started - 1.0)
        .collect();
    let switchover_event = recorded
        .iter()
        .find(|e| e.reason == "SwitchingOver")
        .map(|e| e.at - started);
    let events: Vec<String> = recorded
        .iter()
        .map(|e| format!("{:+.2} {}: {}", e.at - started, e.reason, e.message))
        .collect();
    let uncordoned_at = now();
    cordon.uncordon()?;
    session.settled(name, 3, STEP_TIMEOUT).await?;
    let ready_after = now() - uncordoned_at;
    session.writes_accepted(5).await?;
    let (writes, _) = session.writes()?;
    let longest = writer::longest_pause(&writes, started, drained_at);
    let pause = longest.map_or(0.0, |p| p.0);
    let pause_refusals = longest.map_or_else(Vec::new, |(len, at)| {
        writer::refusals(&writes, at, at + len)
    });
    let d = Drain {
        node,
        members_on_node,
        drain_succeeded: drain.status.success(),
        drain_s: drained_at - started,
        evictions_refused,
        primary_moved_s: moved,
        primary_evicted_s: evicted,
        switchover_event_s: switchover_event,
        switched_before_eviction: matches!((moved, evicted), (Some(m), Some(e)) if m < e)
            || (moved.is_some() && evicted.is_none()),
        events,
        pause_s: pause,
        pause_refusals,
        writable_while_drained: writable,
        ready_after_uncordon_s: ready_after,
    };
    progress(&format!(
        "{label}: primary moved {} s, its Pod evicted {} s after the start ({}); longest write pause {pause:.2} s (refused: {}); writable while drained: {writable}; Ready {ready_after:.1} s after the uncordon; Events: {}",
        d.primary_moved_s
            .map_or("never".into(), |s| format!("{s:.2}")),
        d.primary_evicted_s
            .map_or("never".into(), |s| format!("{s:.2}")),
        if d.switched_before_eviction {
            "switched over first"
        } else {
            "NOT switched over first"
        },
        d.pause_refusals
            .iter()
            .map(|(w, n)| format!("{n} {w}"))
            .collect::<Vec<_>>()
            .join(", "),
        d.events.join("; "),
    ));
    Ok(d)
}

/// When a watched object first met a condition (this host's clock).
struct FirstSeen {
    at: Arc<Mutex<Option<f64>>>,
    listed: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl FirstSeen {
    fn ready(&self) -> bool {
        self.listed.load(Ordering::Relaxed)
    }

    fn at(&self) -> Option<f64> {
        *self.at.lock().unwrap()
    }
}

impl Drop for FirstSeen {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Watches the object `name` of `api` and notes when `condition` first
/// held, or when it was deleted.
fn first_seen<K>(
    api: Api<K>,
    name: &str,
    condition: impl Fn(&K) -> bool + Send + 'static,
) -> FirstSeen
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
    K::DynamicType: Default,
{
    let at = Arc::new(Mutex::new(None));
    let listed = Arc::new(AtomicBool::new(false));
    let config = watcher::Config::default().fields(&format!("metadata.name={name}"));
    let task = {
        let (at, listed) = (at.clone(), listed.clone());
        tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher(api, config).default_backoff());
            while let Some(event) = events.next().await {
                let hit = match event {
                    Ok(watcher::Event::InitDone) => {
                        listed.store(true, Ordering::Relaxed);
                        false
                    }
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => condition(&o),
                    Ok(watcher::Event::Delete(_)) => true,
                    _ => false,
                };
                let mut first = at.lock().unwrap();
                if hit && first.is_none() {
                    *first = Some(now());
                }
            }
        })
    };
    FirstSeen { at, listed, task }
}

/// The nodes cordoned now.
async fn unschedulable_nodes(session: &Session) -> Result<Vec<String>, crate::Error> {
    let nodes: Api<Node> = Api::all(session.client.clone());
    Ok(nodes
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|n| n.spec.as_ref().and_then(|s| s.unschedulable) == Some(true))
        .map(|n| n.name_any())
        .collect())
}

// ---------------------------------------------------------------- markdown

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

/// The three sections, for those that ran.
pub fn markdown(s: &mut String, r: &super::Report) {
    restarts_markdown(s, &r.restarts, "every Pod deleted at once", "deletion");
    restarts_markdown(
        s,
        &r.node_restarts,
        "every node under it restarted at once",
        "restart",
    );
    resyncs_markdown(s, &r.resyncs);
    drains_markdown(s, &r.drains);
}

fn failures(s: &mut String, failures: &[String]) {
    for f in failures {
        let _ = writeln!(s, "- failure: {f}\n");
    }
}

fn restarts_markdown(s: &mut String, r: &Restarts, what: &str, event: &str) {
    if r.runs == 0 {
        return;
    }
    let done = r.to_ready_s.len();
    let _ = writeln!(
        s,
        "### Restart-all with storage: {what} ({done} of {} runs, {} members, {} dataset keys of 1 KiB)\n\n{}\n\nLoad averages (1/5/15 min): {} at the start, {} at the end.\n",
        r.runs, r.members, r.dataset_keys, r.method, r.load.0, r.load.1
    );
    let _ = writeln!(s, "| measure | result |\n|---|---|");
    let _ = writeln!(
        s,
        "| came back Ready without help (300 s at most) | {} of {} |",
        r.ready_unaided, r.runs
    );
    let _ = writeln!(
        s,
        "| {event} to writes accepted again, p50 / p99 / max (s) | {} |",
        fmt_p(&percentiles(&r.to_writes_s))
    );
    let _ = writeln!(
        s,
        "| {event} to Ready with every member back, p50 / p99 / max (s) | {} |",
        fmt_p(&percentiles(&r.to_ready_s))
    );
    let _ = writeln!(
        s,
        "| acknowledged (WAIT 1) writes made before the {event} missing after it (each run reads back every write acknowledged before it: {} at most) | {} |",
        r.acknowledged_before.iter().max().unwrap_or(&0),
        r.acknowledged_before_lost.iter().sum::<usize>(),
    );
    let _ = writeln!(
        s,
        "| dataset keys missing or wrong after a run | {} of {} |",
        r.dataset_missing.iter().sum::<u64>(),
        r.dataset_keys * r.dataset_missing.len() as u64
    );
    let _ = writeln!(
        s,
        "| the new primary on the old primary's claim | {} of {done} |",
        r.primary_claim_kept
    );
    let _ = writeln!(
        s,
        "| acknowledged writes lost over the series / two primaries (client; Pod and Redis events) | {} of {} / {}; {} of {} |\n",
        r.writes.acknowledged_lost,
        r.writes.acknowledged,
        r.writes.client_overlaps,
        r.writes.watch_violations.len(),
        r.writes.watch_events
    );
    failures(s, &r.failures);
}

fn side_row(s: &mut String, side: &Side) {
    let runs = &side.runs;
    let link: Vec<f64> = runs.iter().map(|r| r.to_link_s).collect();
    let caught: Vec<f64> = runs.iter().map(|r| r.to_caught_up_s).collect();
    let received: Vec<u64> = runs.iter().map(|r| r.received_bytes).collect();
    let full: Vec<u64> = runs.iter().map(|r| r.sync_full).collect();
    let partial: Vec<u64> = runs.iter().map(|r| r.sync_partial_ok).collect();
    let refused: Vec<u64> = runs.iter().map(|r| r.sync_partial_err).collect();
    let n = runs.len().max(1) as f64;
    let _ = writeln!(
        s,
        "| {} | {} | {} | {} | {} / {} / {} | {:.1} |",
        if side.storage {
            "with storage"
        } else {
            "without"
        },
        runs.len(),
        fmt_p(&percentiles(&link)),
        fmt_p(&percentiles(&caught)),
        full.iter().sum::<u64>(),
        partial.iter().sum::<u64>(),
        refused.iter().sum::<u64>(),
        mb(received.iter().sum::<u64>()) / n,
    );
}

fn resyncs_markdown(s: &mut String, r: &Resyncs) {
    if r.runs == 0 {
        return;
    }
    let _ = writeln!(
        s,
        "### A replaced replica's resync, with storage against without ({} runs each, 2 members, {} keys of 1 KiB: used_memory_dataset {:.1} / {:.1} MB, repl-diskless-sync {} / {})\n\n{}\n\nLoad averages (1/5/15 min): {} at the start, {} at the end.\n",
        r.runs,
        r.dataset_keys,
        mb(r.with_storage.dataset_bytes),
        mb(r.without_storage.dataset_bytes),
        r.with_storage.diskless_sync,
        r.without_storage.diskless_sync,
        r.method,
        r.load.0,
        r.load.1
    );
    let _ = writeln!(
        s,
        "| Redis | runs | deletion to link up, p50 / p99 / max (s) | deletion to caught up, p50 / p99 / max (s) | primary's syncs: full / partial ok / partial refused | MB received by the replacement, mean |\n|---|---|---|---|---|---|"
    );
    side_row(s, &r.with_storage);
    side_row(s, &r.without_storage);
    let _ = writeln!(s);
    failures(s, &r.failures);
}

fn drains_markdown(s: &mut String, d: &Drains) {
    if d.runs.is_empty() && d.failures.is_empty() {
        return;
    }
    let n = d.runs.len();
    let vals = |f: fn(&Drain) -> Option<f64>| d.runs.iter().filter_map(f).collect::<Vec<f64>>();
    let _ = writeln!(
        s,
        "### kubectl drain of the primary's node with storage ({n} runs, {} members)\n\n{}\n\nCommand: `{}`. Load averages (1/5/15 min): {} at the start, {} at the end.\n",
        d.members, d.method, d.command, d.load.0, d.load.1
    );
    let _ = writeln!(s, "| measure | result |\n|---|---|");
    let _ = writeln!(
        s,
        "| drains that succeeded | {} of {n} |",
        d.runs.iter().filter(|r| r.drain_succeeded).count()
    );
    let _ = writeln!(
        s,
        "| drain duration, p50 / p99 / max (s) | {} |",
        fmt_p(&percentiles(&vals(|r| Some(r.drain_s))))
    );
    let _ = writeln!(
        s,
        "| longest pause between accepted writes overlapping the drain, p50 / p99 / max (s) | {} |",
        fmt_p(&percentiles(&vals(|r| Some(r.pause_s))))
    );
    let _ = writeln!(
        s,
        "| the primary moved before its Pod was evicted | {} of {n} |",
        d.runs.iter().filter(|r| r.switched_before_eviction).count()
    );
    let _ = writeln!(
        s,
        "| drain start to the primary moved (status.primary), p50 / max (s) | {} |",
        super::count_p(&vals(|r| r.primary_moved_s))
    );
    let _ = writeln!(
        s,
        "| drain start to the old primary's Pod terminating, p50 / max (s) | {} |",
        super::count_p(&vals(|r| r.primary_evicted_s))
    );
    let _ = writeln!(
        s,
        "| drain start to the operator's SwitchingOver Event, p50 / max (s) | {} |",
        super::count_p(&vals(|r| r.switchover_event_s))
    );
    let _ = writeln!(
        s,
        "| evictions refused by a disruption budget (drain's retries) | {} |",
        d.runs.iter().map(|r| r.evictions_refused).sum::<usize>()
    );
    let _ = writeln!(
        s,
        "| writable within 60 s after the drain, the node still cordoned | {} of {n} |",
        d.runs.iter().filter(|r| r.writable_while_drained).count()
    );
    let _ = writeln!(
        s,
        "| uncordon to Ready with 3 members, p50 / p99 / max (s) | {} |",
        fmt_p(&percentiles(&vals(|r| Some(r.ready_after_uncordon_s))))
    );
    let _ = writeln!(
        s,
        "| acknowledged writes lost over the series / two primaries (client; Pod and Redis events) | {} of {} / {}; {} of {} |\n",
        d.writes.acknowledged_lost,
        d.writes.acknowledged,
        d.writes.client_overlaps,
        d.writes.watch_violations.len(),
        d.writes.watch_events
    );
    for (i, r) in d.runs.iter().enumerate() {
        let _ = writeln!(
            s,
            "- drain {} of {} ({} members there): longest pause {:.2} s, refused {:?}; Events {}",
            i + 1,
            r.node,
            r.members_on_node,
            r.pause_s,
            r.pause_refusals,
            if r.events.is_empty() {
                "none".into()
            } else {
                r.events.join("; ")
            }
        );
    }
    let _ = writeln!(s);
    failures(s, &d.failures);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_catch_up_poll_prints_link_and_caught_up_times() {
        let s = catch_up_script("10.244.1.5", "10.244.2.6");
        assert!(s.contains("redis-cli -h 10.244.1.5 -p 6379 info replication"));
        assert!(s.contains("*master_host:10.244.2.6*master_link_status:up*"));
        assert_eq!(
            parse_catch_up("up 100.5\ncaught 101.25\n"),
            Some((100.5, 101.25))
        );
        assert_eq!(parse_catch_up("up 100.5\ntimeout\n"), None);
    }

    #[test]
    fn info_fields_parse() {
        let info = "# Stats\r\nsync_full:3\r\nsync_partial_ok:0\r\n";
        assert_eq!(info_u64(info, "sync_full"), 3);
        assert_eq!(info_u64(info, "sync_partial_err"), 0);
        assert_eq!(info_field(info, "sync_partial_ok").as_deref(), Some("0"));
    }

    #[test]
    fn the_lua_scripts_have_no_single_quote_for_the_shell() {
        assert!(!LOAD_LUA.contains('\'') && !CHECK_LUA.contains('\''));
        let spec = redis_spec(3, true);
        assert_eq!(spec["storage"]["size"], CLAIM_SIZE);
        assert!(redis_spec(2, false).get("storage").is_none());
    }
}
