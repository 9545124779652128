//! `podkeeper bench-redis`: failover, switchover, image rollout and
//! scale-down of a Redis on kind, measured by a client Pod that writes
//! through the `<name>` Service the whole time (see [`writer`]).
//!
//! `--sentinel-failovers` measures the anchor beside podkeeper's failovers:
//! the same kill -9 of a Redis Sentinel set's master (see [`sentinel`]).
//!
//! The cluster and the deployed operator are the caller's (`just
//! bench-redis` sets them up as `just e2e` does). Every figure is printed
//! with its method and the machine's load averages.

pub mod backup;
pub mod fleet;
pub mod partition;
pub mod sentinel;
pub mod session;
pub mod storage;
pub mod writer;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;
use k8s_openapi::api::core::v1::Pod;
use kube::api::DeleteParams;
use serde::Serialize;

use self::session::{InvariantWatch, Session, load_average, now};
use super::measure::{Percentiles, percentiles};
use crate::kind::versions::{REDIS_IMAGE, REDIS_ROLLOUT_IMAGES};
use podkeeper::podset::pods::PodIdentity;

const PORT: u16 = 6379;
/// How long one failover, rollout or scale-down may take before the run fails.
const STEP_TIMEOUT: Duration = Duration::from_secs(600);

#[derive(Debug, Args)]
pub struct BenchRedisArgs {
    /// Kubeconfig of the kind cluster, with the operator deployed.
    #[arg(long, env = "KUBECONFIG")]
    pub kubeconfig: PathBuf,
    /// Namespace the measurements run in (recreated).
    #[arg(long, default_value = "bench-redis")]
    pub namespace: String,
    /// Members of the Redis in the failover and rollout measurements.
    #[arg(long, default_value_t = 3)]
    pub members: i32,
    /// kill -9 runs.
    #[arg(long, default_value_t = 20)]
    pub failovers: usize,
    /// kill -9 runs of the anchor: a Redis Sentinel set (3 redis-server and
    /// 3 Sentinel Pods, no operator; see `sentinel`), measured the same way.
    #[arg(long, default_value_t = 0)]
    pub sentinel_failovers: usize,
    /// Image rollouts (each one switchover).
    #[arg(long, default_value_t = 20)]
    pub rollouts: usize,
    /// Scale-downs from 5 members to 1.
    #[arg(long, default_value_t = 1)]
    pub scale_downs: usize,
    /// Partitions: the primary's node cut off the cluster network (a Redis
    /// of 3, one member per node; see `partition`).
    #[arg(long, default_value_t = 0)]
    pub partitions: usize,
    /// How long each partition lasts, s.
    #[arg(long, default_value_t = 30)]
    pub partition_seconds: u64,
    /// The operator cut off from the primary (iptables), the replicas not.
    #[arg(long, default_value_t = 0)]
    pub operator_cutoffs: usize,
    /// How long each operator cut-off lasts, s.
    #[arg(long, default_value_t = 20)]
    pub cutoff_seconds: u64,
    /// Redis objects of the fleet measurement (one node cut off while
    /// another Redis fails over; see `fleet`); 0 skips it.
    #[arg(long, default_value_t = 0)]
    pub fleet: usize,
    /// Pairs of probe failovers (every node up, one node cut) in it.
    #[arg(long, default_value_t = 5)]
    pub fleet_runs: usize,
    /// Members of each Redis of the fleet but the probe (which has 3).
    #[arg(long, default_value_t = 2)]
    pub fleet_members: i32,
    /// Restart-all runs: every Pod of a Redis of 3 with spec.storage
    /// deleted at once under writes (see `storage`).
    #[arg(long, default_value_t = 0)]
    pub restarts: usize,
    /// Node-restart runs: the kind nodes under a Redis of 3 with
    /// spec.storage restarted at once under writes (see `storage`).
    #[arg(long, default_value_t = 0)]
    pub node_restarts: usize,
    /// Keys of 1 KiB loaded before the restart-all (and node-restart) runs
    /// and checked after each.
    #[arg(long, default_value_t = 10_000)]
    pub restart_keys: u64,
    /// Replica resync runs: the replica of a Redis of 2 with storage and of
    /// one without replaced, side by side.
    #[arg(long, default_value_t = 0)]
    pub resyncs: usize,
    /// Keys of 1 KiB (about 1 MB per 1,000) loaded into each Redis of the
    /// resync runs.
    #[arg(long, default_value_t = 100_000)]
    pub resync_keys: u64,
    /// `kubectl drain` runs of the primary's node of a Redis of 3 with
    /// storage under writes (each followed by `kubectl uncordon`).
    #[arg(long, default_value_t = 0)]
    pub drains: usize,
    /// Backup and restore runs: a RedisBackup and a Redis with
    /// spec.restore against redis-cli --rdb plus `podkeeper upload`, and
    /// `podkeeper restore` plus redis-server, by hand (see `backup`).
    #[arg(long, default_value_t = 0)]
    pub backups: usize,
    /// Keys of 1 KiB in the backup runs' Redis (1,000,000: about 1 GiB).
    #[arg(long, default_value_t = 1_000_000)]
    pub backup_keys: u64,
    /// Members of the backup runs' Redis: with 2, the one replica both
    /// serves the backup and answers the writer's `WAIT 1`; with 3, another
    /// replica can answer it.
    #[arg(long, default_value_t = 2)]
    pub backup_members: i32,
    /// The static podkeeper binary copied into the client Pod for the
    /// by-hand steps (default: the one `just static` builds).
    #[arg(long)]
    pub podkeeper_bin: Option<PathBuf>,
    /// Write the figures as JSON to this file too.
    #[arg(long)]
    pub json: Option<PathBuf>,
}

fn other(e: impl std::fmt::Display) -> crate::Error {
    crate::Error::Other(e.to_string())
}

/// The recorded primary's Pod.
pub fn primary(r: &podkeeper::api::Redis) -> Result<String, crate::Error> {
    r.primary_pod()
        .map(str::to_string)
        .ok_or_else(|| other("no primary"))
}

fn progress(m: &str) {
    eprintln!("bench-redis [{}]: {m}", load_average());
}

#[derive(Debug, Default, Serialize)]
pub struct Failovers {
    pub runs: usize,
    /// From the `kill -9` to the first write the new primary accepted, s.
    pub to_new_primary_s: Vec<f64>,
    /// From the old primary's last accepted write to the new one's first, s.
    pub client_gap_s: Vec<f64>,
    /// Writes accepted after the kill and before the new primary's first by
    /// a server that is neither the killed nor the new primary (say the
    /// restarted, empty old one).
    pub accepted_elsewhere: usize,
    #[serde(flatten)]
    pub writes: UnderWrites,
    pub load: (String, String),
}

/// What the client and the watch saw over a whole series of runs.
#[derive(Debug, Default, Serialize)]
pub struct UnderWrites {
    pub acknowledged: usize,
    pub acknowledged_lost: usize,
    /// Times the client saw a primary take writes after another had.
    pub client_overlaps: usize,
    pub watch_events: usize,
    pub watch_violations: Vec<String>,
}

/// Stops the writer and counts what it and the watch saw: acknowledged
/// writes (read back through `host`), those lost, two primaries.
pub async fn wind_up(
    session: &Session,
    host: &str,
    watch: InvariantWatch,
) -> Result<UnderWrites, crate::Error> {
    wind_up_in(session, session::CLIENT, host, watch).await
}

/// [`wind_up`] for the writer of client Pod `pod`.
pub(crate) async fn wind_up_in(
    session: &Session,
    pod: &str,
    host: &str,
    watch: InvariantWatch,
) -> Result<UnderWrites, crate::Error> {
    wind_up_on(session, pod, "w", host, PORT, watch).await
}

/// [`wind_up`] for the writer of keys `<prefix>N` in client Pod `pod`,
/// read back from `host:port`.
pub async fn wind_up_on(
    session: &Session,
    pod: &str,
    prefix: &str,
    host: &str,
    port: u16,
    watch: InvariantWatch,
) -> Result<UnderWrites, crate::Error> {
    let writes = session.stop_writer_in(pod).await?;
    let acked = writer::acknowledged(&writes, 1);
    let seen = watch.seen();
    Ok(UnderWrites {
        acknowledged: acked.len(),
        acknowledged_lost: session
            .lost_keyed_from(pod, prefix, host, port, &acked)?
            .len(),
        client_overlaps: writer::overlapping_primaries(&writes).len(),
        watch_events: seen.events,
        watch_violations: seen.violations,
    })
}

#[derive(Debug, Default, Serialize)]
pub struct Rollouts {
    pub runs: usize,
    pub switchovers: usize,
    /// Longest pause between accepted writes overlapping each rollout, s.
    pub pause_s: Vec<f64>,
    /// Accepted / attempted writes during each rollout.
    pub success: Vec<f64>,
    pub rollout_s: Vec<f64>,
    pub pods_before: usize,
    /// Pods still there after the rollout (same UID).
    pub pods_kept: usize,
    /// Pods whose IP a member still has after the rollout.
    pub pods_kept_ip: usize,
    #[serde(flatten)]
    pub writes: UnderWrites,
    pub load: (String, String),
}

#[derive(Debug, Default, Serialize)]
pub struct ScaleDowns {
    pub runs: usize,
    pub accepted: usize,
    pub accepted_lost: usize,
    pub acknowledged: usize,
    pub acknowledged_lost: usize,
    pub primary_kept: usize,
    pub watch_violations: Vec<String>,
    pub load: (String, String),
}

/// How the figures are made, in the JSON and above the tables.
pub const METHOD: &str = "A client Pod (our Redis image, bash; restartPolicy Always, its log on an emptyDir, so that a restarted container resumes writing after the last logged key) writes keys w1, w2, ... one at a time through the Redis's <name> Service ClusterIP, one TCP connection per write, pipelining SET, WAIT 1 1000, INFO server replication and QUIT; each attempt gives up after 3 s, a refused one is retried after 20 ms. A write is accepted when SET answers +OK and acknowledged when WAIT on the same connection counts at least 1 replica; acknowledged writes are read back through the Service at the end. Times are the client's (end of a write) against the bench's clock, both on this host. Two primaries are checked at every Pod and Redis watch event (two live Pods labelled primary, or two status members primary) and by the client (a primary term, run_id and master_replid, that accepts writes again after another term did). Percentiles are nearest-rank over the runs: with fewer than 100 runs p99 is the maximum. The Redis has no spec.auth.";

#[derive(Debug, Default, Serialize)]
pub struct Report {
    pub method: String,
    /// Cores of this machine (the kind nodes share them).
    pub cores: usize,
    pub members: i32,
    pub failovers: Failovers,
    /// The anchor: the same kill -9 failovers handled by Redis Sentinel.
    pub sentinel_failovers: sentinel::SentinelFailovers,
    /// podkeeper's failover times over Sentinel's, when both ran.
    pub podkeeper_over_sentinel: Option<Ratios>,
    pub rollouts: Rollouts,
    pub scale_downs: ScaleDowns,
    pub partitions: partition::Partitions,
    pub operator_cutoffs: partition::Partitions,
    pub fleet: fleet::Fleet,
    pub restarts: storage::Restarts,
    pub node_restarts: storage::Restarts,
    pub resyncs: storage::Resyncs,
    pub drains: storage::Drains,
    pub backups: backup::Backups,
    /// Times the client Pod's container was started again (a failed start
    /// counts); its writer resumed each time.
    pub client_restarts: i32,
}

pub async fn run(args: BenchRedisArgs) -> Result<(), crate::Error> {
    let session = Session::create(&args.kubeconfig, &args.namespace, REDIS_IMAGE).await?;
    let mut report = Report {
        method: METHOD.into(),
        cores: std::thread::available_parallelism().map_or(0, |n| n.get()),
        members: args.members,
        ..Default::default()
    };
    let result = measure(&session, &args, &mut report).await;
    report.podkeeper_over_sentinel =
        ratios(&report.failovers, &report.sentinel_failovers.failovers);
    report.client_restarts = session.client_restarts().await.unwrap_or_default();
    // What was measured is kept even if a later step failed.
    if let Some(path) = &args.json {
        std::fs::write(path, serde_json::to_string_pretty(&report)?).map_err(other)?;
    }
    print!("{}", markdown(&report));
    result
}

async fn measure(
    session: &Session,
    args: &BenchRedisArgs,
    report: &mut Report,
) -> Result<(), crate::Error> {
    if args.failovers > 0 {
        report.failovers = failovers(session, args.members, args.failovers).await?;
    }
    if args.sentinel_failovers > 0 {
        report.sentinel_failovers =
            sentinel::failovers(session, REDIS_IMAGE, args.sentinel_failovers).await?;
    }
    if args.rollouts > 0 {
        report.rollouts = rollouts(session, args.members, args.rollouts).await?;
    }
    if args.scale_downs > 0 {
        report.scale_downs = scale_downs(session, args.scale_downs).await?;
    }
    if args.partitions > 0 {
        report.partitions = partition::partitions(
            session,
            partition::Kind::NodeCut,
            args.partitions,
            args.partition_seconds,
        )
        .await?;
    }
    if args.operator_cutoffs > 0 {
        report.operator_cutoffs = partition::partitions(
            session,
            partition::Kind::OperatorCutOff,
            args.operator_cutoffs,
            args.cutoff_seconds,
        )
        .await?;
    }
    if args.fleet > 0 {
        report.fleet =
            fleet::fleet(session, args.fleet, args.fleet_members, args.fleet_runs).await?;
    }
    // These fill the report as they go: a failed run keeps what was seen.
    if args.restarts > 0 {
        storage::restarts(
            session,
            args.restarts,
            args.restart_keys,
            storage::AllAtOnce::PodsDeleted,
            &mut report.restarts,
        )
        .await?;
    }
    if args.node_restarts > 0 {
        storage::restarts(
            session,
            args.node_restarts,
            args.restart_keys,
            storage::AllAtOnce::NodesRestarted,
            &mut report.node_restarts,
        )
        .await?;
    }
    if args.resyncs > 0 {
        storage::resyncs(session, args.resyncs, args.resync_keys, &mut report.resyncs).await?;
    }
    if args.drains > 0 {
        storage::drains(session, args.drains, &mut report.drains).await?;
    }
    if args.backups > 0 {
        let binary = args
            .podkeeper_bin
            .clone()
            .unwrap_or_else(backup::default_binary);
        backup::backups(
            session,
            args.backups,
            args.backup_keys,
            args.backup_members,
            &binary,
            &mut report.backups,
        )
        .await?;
    }
    Ok(())
}

/// The Redis `name` with `n` members, settled, and the writer started on
/// its primary Service; returns the Service's ClusterIP.
pub async fn start(
    session: &Session,
    name: &str,
    n: i32,
    wait_replicas: u32,
) -> Result<String, crate::Error> {
    session.create_redis(name, n, REDIS_IMAGE).await?;
    session.settled(name, n as usize, STEP_TIMEOUT).await?;
    let host = session.cluster_ip(name).await?;
    session.start_writer(&host, PORT, wait_replicas).await?;
    session.writes_accepted(20).await?;
    Ok(host)
}

pub(crate) async fn delete_redis(session: &Session, name: &str) -> Result<(), crate::Error> {
    session
        .api::<podkeeper::api::Redis>()
        .delete(name, &Default::default())
        .await?;
    Ok(())
}

/// A failover slower than this has the writer's attempts from the kill
/// on printed, to tell where the time went.
const SLOW_FAILOVER_S: f64 = 1.0;

/// kill -9 of the primary's redis-server, `runs` times; each run waits for
/// the new primary and for the old Pod to rejoin (Ready, every member
/// linked) before the next.
pub async fn failovers(session: &Session, n: i32, runs: usize) -> Result<Failovers, crate::Error> {
    let name = "failover";
    let mut f = Failovers {
        runs,
        load: (load_average(), String::new()),
        ..Default::default()
    };
    let host = start(session, name, n, 1).await?;
    let watch = InvariantWatch::start(session, name);
    for run in 0..runs {
        let w = kill_primary(
            session,
            name,
            n,
            session::CLIENT,
            &format!("failover {}/{runs}", run + 1),
        )
        .await?;
        f.accepted_elsewhere += w.accepted_elsewhere;
        f.to_new_primary_s.push(w.to_new_primary_s);
        f.client_gap_s.push(w.client_gap_s);
    }
    f.writes = wind_up(session, &host, watch).await?;
    f.load.1 = load_average();
    delete_redis(session, name).await?;
    Ok(f)
}

/// One kill -9 of the primary of `name` (`n` members, settled) under the
/// writer of client Pod `client`: waits for the new primary and its first
/// accepted write, then deletes the killed Pod (its container would be
/// killed again a few runs later, and the kubelet's crash-loop back-off,
/// 10 s, 20 s, ... 5 min, would grow over the runs: every run kills a
/// container that has not crashed before). `label` names the run in the
/// progress lines.
pub(crate) async fn kill_primary(
    session: &Session,
    name: &str,
    n: i32,
    client: &str,
    label: &str,
) -> Result<writer::Failover, crate::Error> {
    let (r, _) = session.settled(name, n as usize, STEP_TIMEOUT).await?;
    let old = primary(&r)?;
    let old_run_id = session.run_id(&old, PORT)?;
    session.writes_accepted_in(client, 10).await?;
    let killed_at = session.kill_9(&old).await?;
    let redis = session.api::<podkeeper::api::Redis>();
    session::wait("a new primary", STEP_TIMEOUT, || async {
        let r = redis.get(name).await.ok()?;
        (r.primary_pod()? != old).then_some(())
    })
    .await?;
    let (r, _) = session.settled(name, n as usize, STEP_TIMEOUT).await?;
    let new = primary(&r)?;
    let new_run_id = session.run_id(&new, PORT)?;
    // The writer has written to the new primary since.
    session.writes_accepted_in(client, 5).await?;
    let (writes, _) = session.writes_in(client)?;
    let first = writer::first_accepted_after(&writes, killed_at, &[old_run_id.as_str()])
        .ok_or_else(|| other("no write accepted after the kill"))?;
    let w = writer::failover(&writes, killed_at, &old_run_id, &new_run_id)
        .ok_or_else(|| other("no write accepted by the new primary"))?;
    progress(&format!(
        "{label}: {old} -> {new}: first write accepted {:.2} s after the kill (by {}), client gap {:.2} s",
        w.to_new_primary_s,
        if first.run_id.as_deref() == Some(new_run_id.as_str()) {
            "the new primary"
        } else {
            "another server first"
        },
        w.client_gap_s,
    ));
    if w.to_new_primary_s > SLOW_FAILOVER_S {
        progress(&format!(
            "{label} was slow; the writer's attempts from the kill (at {killed_at:.3} s since the epoch): {}",
            writer::timeline(&writes, killed_at, killed_at + w.to_new_primary_s).join(", ")
        ));
    }
    session
        .api::<Pod>()
        .delete(&old, &DeleteParams::default())
        .await?;
    Ok(w)
}

/// `runs` image changes, cycling through the tags of our Redis image.
pub async fn rollouts(session: &Session, n: i32, runs: usize) -> Result<Rollouts, crate::Error> {
    let name = "rollout";
    let mut out = Rollouts {
        runs,
        load: (load_average(), String::new()),
        ..Default::default()
    };
    let host = start(session, name, n, 1).await?;
    let watch = InvariantWatch::start(session, name);
    let images: Vec<&str> = std::iter::once(REDIS_IMAGE)
        .chain(REDIS_ROLLOUT_IMAGES)
        .collect();
    for run in 0..runs {
        let (r, before) = session.settled(name, n as usize, STEP_TIMEOUT).await?;
        let old_primary = primary(&r)?;
        let before = PodIdentity::of_all(&before);
        let image = images[(run + 1) % images.len()];
        let started = now();
        session
            .patch_redis(name, serde_json::json!({ "image": image }))
            .await?;
        let (r, after) = session::wait("the rollout", STEP_TIMEOUT, || async {
            let (r, after) = session.settled(name, n as usize, STEP_TIMEOUT).await.ok()?;
            let all = after.iter().all(|p| {
                p.spec
                    .as_ref()
                    .is_some_and(|s| s.containers[0].image.as_deref() == Some(image))
            });
            all.then_some((r, after))
        })
        .await?;
        let ended = now();
        // One accepted write after the end closes the last pause.
        session.writes_accepted(1).await?;
        let (writes, _) = session.writes()?;
        let during: Vec<_> = writes
            .iter()
            .filter(|a| a.start >= started && a.end <= ended)
            .cloned()
            .collect();
        let s = writer::summarize(&during, 1);
        let longest = writer::longest_pause(&writes, started, ended);
        let pause = longest.map_or(0.0, |p| p.0);
        // What the client met in that pause, to tell a Service pointing at
        // a replica (READONLY) from no server answering (noreply).
        let met = longest.map_or_else(String::new, |(len, at)| {
            let why: Vec<String> = writer::refusals(&writes, at, at + len)
                .iter()
                .map(|(w, n)| format!("{n} {w}"))
                .collect();
            format!(
                " (from {:.1} s into the rollout; refused: {})",
                at - started,
                if why.is_empty() {
                    "none".into()
                } else {
                    why.join(", ")
                }
            )
        });
        let new_primary = r.primary_pod().unwrap_or_default().to_string();
        if new_primary != old_primary {
            out.switchovers += 1;
        }
        let after = PodIdentity::of_all(&after);
        let kept = before
            .iter()
            .filter(|b| after.iter().any(|a| a.uid == b.uid))
            .count();
        let kept_ip = before
            .iter()
            .filter(|b| !b.ip.is_empty() && after.iter().any(|a| a.ip == b.ip))
            .count();
        out.pods_before += before.len();
        out.pods_kept += kept;
        out.pods_kept_ip += kept_ip;
        out.pause_s.push(pause);
        out.success.push(s.success_ratio);
        out.rollout_s.push(ended - started);
        progress(&format!(
            "rollout {}/{runs} to {image}: {:.1} s, primary {old_primary} -> {new_primary}, longest write pause {pause:.2} s{met}, {}/{} writes accepted, {kept}/{} Pods kept (UID), {kept_ip} IPs kept",
            run + 1,
            ended - started,
            s.accepted,
            s.attempts,
            before.len()
        ));
    }
    out.writes = wind_up(session, &host, watch).await?;
    out.load.1 = load_average();
    delete_redis(session, name).await?;
    Ok(out)
}

/// 5 members to 1 under writes, `runs` times.
pub async fn scale_downs(session: &Session, runs: usize) -> Result<ScaleDowns, crate::Error> {
    let mut out = ScaleDowns {
        runs,
        load: (load_average(), String::new()),
        ..Default::default()
    };
    for run in 0..runs {
        let name = format!("scale-{run}");
        let host = start(session, &name, 5, 1).await?;
        let watch = InvariantWatch::start(session, &name);
        let (r, _) = session.settled(&name, 5, STEP_TIMEOUT).await?;
        let primary = r.primary_pod().map(str::to_string);
        session
            .patch_redis(&name, serde_json::json!({"replicas": 1}))
            .await?;
        let (r, _) = session.settled(&name, 1, STEP_TIMEOUT).await?;
        session.writes_accepted(3).await?;
        let writes = session.stop_writer().await?;
        let accepted: Vec<u64> = writes
            .iter()
            .filter(|a| a.accepted)
            .map(|a| a.key)
            .collect();
        let acked = writer::acknowledged(&writes, 1);
        let lost_accepted = session.lost(&host, PORT, &accepted)?;
        out.accepted += accepted.len();
        out.accepted_lost += lost_accepted.len();
        out.acknowledged += acked.len();
        out.acknowledged_lost += acked.iter().filter(|k| lost_accepted.contains(k)).count();
        out.primary_kept += usize::from(r.primary_pod() == primary.as_deref());
        out.watch_violations.extend(watch.seen().violations);
        progress(&format!(
            "scale-down {}/{runs}: {} accepted writes, {} lost",
            run + 1,
            accepted.len(),
            lost_accepted.len()
        ));
        delete_redis(session, &name).await?;
    }
    out.load.1 = load_average();
    Ok(out)
}

/// podkeeper's failover figures over Sentinel's (p50 over p50, p99 over
/// p99): below 1, podkeeper was faster.
#[derive(Debug, Default, Serialize, PartialEq)]
pub struct Ratios {
    pub to_new_primary_p50: f64,
    pub to_new_primary_p99: f64,
    pub client_gap_p50: f64,
    pub client_gap_p99: f64,
}

/// The ratios when both ran; NaN (null in the JSON) where Sentinel's
/// figure is 0.
pub fn ratios(podkeeper: &Failovers, sentinel: &Failovers) -> Option<Ratios> {
    if podkeeper.to_new_primary_s.is_empty() || sentinel.to_new_primary_s.is_empty() {
        return None;
    }
    let (pt, st) = (
        percentiles(&podkeeper.to_new_primary_s),
        percentiles(&sentinel.to_new_primary_s),
    );
    let (pg, sg) = (
        percentiles(&podkeeper.client_gap_s),
        percentiles(&sentinel.client_gap_s),
    );
    let over = |a: f64, b: f64| if b > 0.0 { a / b } else { f64::NAN };
    Some(Ratios {
        to_new_primary_p50: over(pt.p50, st.p50),
        to_new_primary_p99: over(pt.p99, st.p99),
        client_gap_p50: over(pg.p50, sg.p50),
        client_gap_p99: over(pg.p99, sg.p99),
    })
}

pub(crate) fn fmt_p(p: &Percentiles) -> String {
    format!("{:.2} / {:.2} / {:.2}", p.p50, p.p99, p.max)
}

/// The figures as Markdown, with their method.
pub fn markdown(r: &Report) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "Method: {}\n\nCores: {}.\n", r.method, r.cores);
    let f = &r.failovers;
    if f.runs > 0 {
        let _ = writeln!(
            s,
            "### Unplanned failover: kill -9 of the primary ({} runs, {} members)\n\nEach run kills the primary's redis-server from its node; the kubelet restarts the container at once (it had not crashed before: after each run the bench deletes the killed Pod and the operator replaces it). Load averages (1/5/15 min): {} at the start, {} at the end.\n",
            f.runs, r.members, f.load.0, f.load.1
        );
        let _ = writeln!(s, "| measure | p50 / p99 / max (s) |\n|---|---|");
        let _ = writeln!(
            s,
            "| `docker exec` of the `kill -9` started to the end of the first write accepted by the new primary | {} |",
            fmt_p(&percentiles(&f.to_new_primary_s))
        );
        let _ = writeln!(
            s,
            "| the client's outage: last write accepted by the old primary to the first by the new | {} |\n",
            fmt_p(&percentiles(&f.client_gap_s))
        );
        let _ = writeln!(
            s,
            "Acknowledged writes (WAIT 1) lost: {} of {}. Writes accepted after a kill, before the new primary's first, by neither the killed nor the new primary: {}. Two primaries: {} seen by the client, {} at {} Pod and Redis events.\n",
            f.writes.acknowledged_lost,
            f.writes.acknowledged,
            f.accepted_elsewhere,
            f.writes.client_overlaps,
            f.writes.watch_violations.len(),
            f.writes.watch_events
        );
    }
    sentinel_markdown(&mut s, r);
    let o = &r.rollouts;
    if o.runs > 0 {
        let _ = writeln!(
            s,
            "### Image rollouts with a planned switchover ({} rollouts, {} members; image-only, so Pods are updated in place)\n\nLoad averages (1/5/15 min): {} at the start, {} at the end.\n",
            o.runs, r.members, o.load.0, o.load.1
        );
        let _ = writeln!(s, "| measure | p50 / p99 / max |\n|---|---|");
        let _ = writeln!(
            s,
            "| longest pause between accepted writes, per rollout (s) | {} |",
            fmt_p(&percentiles(&o.pause_s))
        );
        let _ = writeln!(
            s,
            "| rollout duration (s) | {} |",
            fmt_p(&percentiles(&o.rollout_s))
        );
        let min_success = o.success.iter().copied().fold(f64::INFINITY, f64::min);
        let _ = writeln!(
            s,
            "| writes accepted per rollout (%) | p50 {:.1}, lowest {:.1} |\n",
            percentiles(&o.success).p50 * 100.0,
            min_success * 100.0
        );
        let _ = writeln!(
            s,
            "Switchovers: {} (the primary moved in {} of {} rollouts). Acknowledged writes (WAIT 1) lost: {} of {}. Pods still there after their rollout (same UID): {} of {}; whose IP a member still had: {} of {}. Two primaries: {} seen by the client, {} at {} Pod and Redis events.\n",
            o.switchovers,
            o.switchovers,
            o.runs,
            o.writes.acknowledged_lost,
            o.writes.acknowledged,
            o.pods_kept,
            o.pods_before,
            o.pods_kept_ip,
            o.pods_before,
            o.writes.client_overlaps,
            o.writes.watch_violations.len(),
            o.writes.watch_events
        );
    }
    let d = &r.scale_downs;
    if d.runs > 0 {
        let _ = writeln!(
            s,
            "### Scale 5 -> 1 under writes ({} runs)\n\nLoad averages: {} at the start, {} at the end.\n\nAccepted writes lost: {} of {}; acknowledged (WAIT 1) lost: {} of {}; the primary stayed in {} of {} runs; two primaries at Pod and Redis events: {}.\n",
            d.runs,
            d.load.0,
            d.load.1,
            d.accepted_lost,
            d.accepted,
            d.acknowledged_lost,
            d.acknowledged,
            d.primary_kept,
            d.runs,
            d.watch_violations.len()
        );
    }
    partition_markdown(
        &mut s,
        "The primary's node cut off the cluster network",
        &r.partitions,
        true,
    );
    partition_markdown(
        &mut s,
        "The operator cut off from the primary, the replicas not",
        &r.operator_cutoffs,
        false,
    );
    fleet_markdown(&mut s, &r.fleet);
    storage::markdown(&mut s, r);
    backup::markdown(&mut s, &r.backups);
    if r.client_restarts > 0 {
        let _ = writeln!(
            s,
            "The client Pod's container was started again {} time(s) (a failed start counts): its writer resumed its log each time, and a pause or gap around a restart includes the client's own.\n",
            r.client_restarts
        );
    }
    for v in f
        .writes
        .watch_violations
        .iter()
        .chain(&o.writes.watch_violations)
        .chain(&d.watch_violations)
    {
        let _ = writeln!(s, "- violation: {v}");
    }
    s
}

/// The Sentinel anchor's section, and podkeeper's figures next to it when
/// both ran.
fn sentinel_markdown(s: &mut String, r: &Report) {
    let a = &r.sentinel_failovers;
    let f = &a.failovers;
    if f.runs == 0 {
        return;
    }
    let _ = writeln!(
        s,
        "### Anchor: the same kill -9 failovers handled by Redis Sentinel ({} runs, {} redis-server and {} Sentinel Pods)\n\n{}\n\nLoad averages (1/5/15 min): {} at the start, {} at the end.\n",
        f.runs,
        sentinel::MEMBERS,
        sentinel::SENTINELS,
        a.method,
        f.load.0,
        f.load.1
    );
    let (pt, st) = (
        percentiles(&r.failovers.to_new_primary_s),
        percentiles(&f.to_new_primary_s),
    );
    let (pg, sg) = (
        percentiles(&r.failovers.client_gap_s),
        percentiles(&f.client_gap_s),
    );
    let rows = [
        (
            "`docker exec` of the `kill -9` started to the end of the first write accepted by the new primary",
            pt,
            st,
        ),
        (
            "the client's outage: last write accepted by the old primary to the first by the new",
            pg,
            sg,
        ),
    ];
    match &r.podkeeper_over_sentinel {
        Some(q) => {
            let _ = writeln!(
                s,
                "| measure | podkeeper p50 / p99 / max (s) | Sentinel p50 / p99 / max (s) | podkeeper / Sentinel, p50 and p99 |\n|---|---|---|---|"
            );
            for ((what, p, sen), (q50, q99)) in rows.iter().zip([
                (q.to_new_primary_p50, q.to_new_primary_p99),
                (q.client_gap_p50, q.client_gap_p99),
            ]) {
                let _ = writeln!(
                    s,
                    "| {what} | {} | {} | {q50:.2}, {q99:.2} |",
                    fmt_p(p),
                    fmt_p(sen)
                );
            }
        }
        None => {
            let _ = writeln!(s, "| measure | Sentinel p50 / p99 / max (s) |\n|---|---|");
            for (what, _, sen) in &rows {
                let _ = writeln!(s, "| {what} | {} |", fmt_p(sen));
            }
        }
    }
    let _ = writeln!(
        s,
        "\nSentinel: acknowledged writes (WAIT 1) lost: {} of {}. Writes accepted after a kill, before the new primary's first, by neither the killed nor the new primary: {}. Two primaries seen by the client: {}.\n",
        f.writes.acknowledged_lost,
        f.writes.acknowledged,
        f.accepted_elsewhere,
        f.writes.client_overlaps
    );
}

pub(crate) fn count_p(xs: &[f64]) -> String {
    if xs.is_empty() {
        "none".into()
    } else {
        format!("{} ({} runs)", fmt_p(&percentiles(xs)), xs.len())
    }
}

fn fleet_markdown(s: &mut String, f: &fleet::Fleet) {
    if f.baseline_s.is_empty() {
        return;
    }
    let _ = writeln!(
        s,
        "### A failover while another node is cut off ({} Redis of {} members and a probe Redis of 3, {} redis-server Pods; {} runs)\n\nEach run kills the probe Redis's primary twice: with every node up, and while {} (none of the probe's members) is cut off the network, once the operator shows it noticed (Redis objects with a member there: {:?}). Load averages (1/5/15 min): {} at the start, {} at the end.\n",
        f.redis - 1,
        f.members_each,
        f.pods,
        f.baseline_s.len(),
        f.cut_node,
        f.affected,
        f.load.0,
        f.load.1
    );
    let _ = writeln!(
        s,
        "| kill -9 to the first write on the new primary | p50 / p99 / max (s) |\n|---|---|"
    );
    let _ = writeln!(
        s,
        "| every node up | {} |",
        fmt_p(&percentiles(&f.baseline_s))
    );
    let _ = writeln!(
        s,
        "| a node cut off | {} |\n",
        fmt_p(&percentiles(&f.during_cut_s))
    );
    let _ = writeln!(
        s,
        "Acknowledged writes (WAIT 1) lost: {} of {}. Two primaries: {} seen by the client, {} at {} Pod and Redis events.\n",
        f.writes.acknowledged_lost,
        f.writes.acknowledged,
        f.writes.client_overlaps,
        f.writes.watch_violations.len(),
        f.writes.watch_events
    );
}

fn partition_markdown(s: &mut String, title: &str, p: &partition::Partitions, node_cut: bool) {
    if p.runs.is_empty() {
        return;
    }
    let n = p.runs.len();
    let sum = |f: fn(&partition::Run) -> usize| p.runs.iter().map(f).sum::<usize>();
    let vals =
        |f: fn(&partition::Run) -> Option<f64>| p.runs.iter().filter_map(f).collect::<Vec<f64>>();
    let _ = writeln!(
        s,
        "### {title} ({n} runs of {} s, 3 members on 3 nodes)\n\nLoad averages (1/5/15 min): {} at the start, {} at the end.\n",
        p.seconds, p.load.0, p.load.1
    );
    let _ = writeln!(s, "| measure | result |\n|---|---|");
    let _ = writeln!(
        s,
        "| acknowledged writes (WAIT 1) lost, both clients | {} of {} |",
        p.acknowledged_lost(),
        p.acknowledged()
    );
    let _ = writeln!(
        s,
        "| failovers (the primary changed) | {} of {n} |",
        p.runs.iter().filter(|r| r.failover).count()
    );
    if node_cut {
        let _ = writeln!(
            s,
            "| writes the old primary accepted after the new primary's first (acknowledged) | {} ({}) |",
            sum(|r| r.old_accepted_after_new),
            sum(|r| r.old_acknowledged_after_new)
        );
        let _ = writeln!(
            s,
            "| cut to status.primary naming the new primary (polled every 0.5 s), p50 / p99 / max (s) | {} |",
            count_p(&vals(|r| r.promoted_s))
        );
        let _ = writeln!(
            s,
            "| cut to the first write accepted by the new primary, p50 / p99 / max (s) | {} |",
            count_p(&vals(|r| r.to_new_primary_s))
        );
        let _ = writeln!(
            s,
            "| cut to the old primary's last accepted write, p50 / p99 / max (s) | {} |",
            count_p(&vals(|r| r.old_last_accept_s))
        );
    }
    let _ = writeln!(
        s,
        "| Service client: attempts refused or unanswered during the cuts | {} of {} |",
        sum(|r| r.service_refused),
        sum(|r| r.service_attempts)
    );
    let _ = writeln!(
        s,
        "| Service client: longest pause between accepted writes per run, p50 / p99 / max (s) | {} |",
        count_p(&vals(|r| Some(r.service_pause_s)))
    );
    let _ = writeln!(
        s,
        "| heal to Ready with 3 members, p50 / p99 / max (s) | {} |",
        count_p(&vals(|r| Some(r.ready_again_s)))
    );
    let _ = writeln!(
        s,
        "| two primaries: in the clients' logs / Service endpoints ({} events) / Pod and Redis events ({}) | {} / {} / {} |",
        p.endpoint_events,
        p.writes.watch_events,
        sum(|r| r.client_overlaps) + p.writes.client_overlaps,
        p.endpoint_violations.len(),
        p.writes.watch_violations.len()
    );
    let mut reasons: Vec<String> = p
        .runs
        .iter()
        .flat_map(|r| r.replicated_reasons.clone())
        .collect();
    reasons.sort();
    reasons.dedup();
    let _ = writeln!(
        s,
        "| Replicated reasons seen during the cuts | {} |",
        reasons.join(", ")
    );
    let _ = writeln!(
        s,
        "| runs whose iptables rules dropped packets | {} of {n} |",
        p.runs.iter().filter(|r| r.dropped_packets > 0).count()
    );
    let _ = writeln!(s);
    for v in p
        .endpoint_violations
        .iter()
        .chain(&p.writes.watch_violations)
    {
        let _ = writeln!(s, "- violation: {v}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failovers(to_new: &[f64], gap: &[f64]) -> Failovers {
        Failovers {
            runs: to_new.len(),
            to_new_primary_s: to_new.to_vec(),
            client_gap_s: gap.to_vec(),
            ..Default::default()
        }
    }

    #[test]
    fn podkeeper_and_sentinel_are_compared_by_p50_and_p99_when_both_ran() {
        let p = failovers(&[1.0, 2.0, 4.0], &[1.0, 1.0, 3.0]);
        let s = failovers(&[5.0, 8.0, 6.0], &[4.0, 6.0, 5.0]);
        assert_eq!(
            ratios(&p, &s),
            Some(Ratios {
                to_new_primary_p50: 2.0 / 6.0,
                to_new_primary_p99: 4.0 / 8.0,
                client_gap_p50: 1.0 / 5.0,
                client_gap_p99: 3.0 / 6.0,
            })
        );
        assert_eq!(ratios(&p, &Failovers::default()), None);
        assert_eq!(ratios(&Failovers::default(), &s), None);
        let mut r = Report {
            failovers: p,
            sentinel_failovers: sentinel::SentinelFailovers {
                failovers: s,
                ..sentinel::SentinelFailovers::new(3)
            },
            ..Default::default()
        };
        r.podkeeper_over_sentinel = ratios(&r.failovers, &r.sentinel_failovers.failovers);
        let md = markdown(&r);
        assert!(
            md.contains("### Anchor: the same kill -9 failovers handled by Redis Sentinel (3 runs")
        );
        assert!(md.contains("| podkeeper p50 / p99 / max (s) | Sentinel p50 / p99 / max (s) | podkeeper / Sentinel, p50 and p99 |"));
        assert!(md.contains("| 2.00 / 4.00 / 4.00 | 6.00 / 8.00 / 8.00 | 0.33, 0.50 |"));
        // Sentinel alone: its own figures, no ratios.
        r.failovers = Failovers::default();
        r.podkeeper_over_sentinel = None;
        let md = markdown(&r);
        assert!(md.contains("| measure | Sentinel p50 / p99 / max (s) |"));
        assert!(md.contains("| 6.00 / 8.00 / 8.00 |") && !md.contains("0.33"));
        let json = serde_json::to_value(&r).unwrap();
        assert_eq!(json["sentinel_failovers"]["down_after_ms"], 5000);
        assert_eq!(json["sentinel_failovers"]["to_new_primary_s"][1], 8.0);
        assert!(json["podkeeper_over_sentinel"].is_null());
    }
}
