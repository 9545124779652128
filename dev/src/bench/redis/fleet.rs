//! Many Redis objects and one node cut off (issue 28, point 7): does a
//! failover of one Redis wait for the rounds of the others?
//!
//! `count - 1` Redis objects of `members` each (2 by default) spread over
//! the cluster's nodes, and a probe Redis of 3 kept off one worker (the worker is cordoned for
//! the whole series, so the probe's Pods, replaced after each kill, never
//! land there). Each run kills the probe's primary (kill -9) twice under a
//! client writing through its Service from the control plane's node: once
//! with every node on the network (the baseline), once while that worker
//! is cut off the `kind` network ([`NodeCut`]), after the operator has
//! noticed the cut (a Redis with a member there no longer shows
//! `Replicated`). The Redis objects with a member on the cut worker then
//! have silent members, whose rounds wait out the member deadline; the
//! probe has none, so any difference between its two failovers is the
//! operator's doing.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Pod;
use kube::api::ListParams;
use kube::{Api, ResourceExt};
use podkeeper::api::Redis;
use podkeeper::api::redis::REPLICATED_CONDITION;
use serde::Serialize;

use super::partition::{Arrangement, NodeCut};
use super::session::{self, InvariantWatch, Session, load_average};
use super::{PORT, STEP_TIMEOUT, UnderWrites, kill_primary, other, progress, wind_up_in};
use crate::kind::versions::REDIS_IMAGE;

/// The Redis whose failovers are timed.
const PROBE: &str = "probe";
/// Its members.
const PROBE_MEMBERS: i32 = 3;
/// The client Pod that writes through the probe's Service (on the control
/// plane's node, never cut).
const CLIENT: &str = "fleet-client";

#[derive(Debug, Default, Serialize)]
pub struct Fleet {
    /// Redis objects, the probe included, and their redis-server Pods.
    pub redis: usize,
    /// Members of each Redis but the probe.
    pub members_each: i32,
    pub pods: usize,
    /// The worker that is cut off.
    pub cut_node: String,
    /// kill -9 of the probe's primary to the first write its new primary
    /// accepted, s, with every node on the network.
    pub baseline_s: Vec<f64>,
    /// The same while `cut_node` is cut off.
    pub during_cut_s: Vec<f64>,
    /// Redis objects with a member on `cut_node`, at each cut.
    pub affected: Vec<usize>,
    /// The probe's writes over the series.
    #[serde(flatten)]
    pub writes: UnderWrites,
    pub load: (String, String),
}

fn fleet_name(i: usize) -> String {
    format!("fleet-{i}")
}

/// A node that takes no new Pods until dropped (`kubectl cordon`).
struct Cordon<'a> {
    a: &'a Arrangement,
    node: String,
}

impl<'a> Cordon<'a> {
    fn new(a: &'a Arrangement, node: &str) -> Result<Self, crate::Error> {
        a.kubectl(&["cordon", node])?;
        Ok(Cordon {
            a,
            node: node.into(),
        })
    }
}

impl Drop for Cordon<'_> {
    fn drop(&mut self) {
        if let Err(e) = self.a.kubectl(&["uncordon", &self.node]) {
            eprintln!("bench-redis: uncordoning {}: {e}", self.node);
        }
    }
}

/// `count` Redis objects (the probe among them) and `runs` pairs of probe
/// failovers, without and with a worker cut off.
pub async fn fleet(
    session: &Session,
    count: usize,
    members: i32,
    runs: usize,
) -> Result<Fleet, crate::Error> {
    let arrangement = Arrangement::make(session).await?;
    let result = series(session, &arrangement, count.max(2), members.max(1), runs).await;
    drop(arrangement);
    result
}

async fn series(
    session: &Session,
    a: &Arrangement,
    count: usize,
    members: i32,
    runs: usize,
) -> Result<Fleet, crate::Error> {
    let cut_node = a.workers[0].clone();
    let mut out = Fleet {
        redis: count,
        members_each: members,
        pods: (count - 1) * members as usize + PROBE_MEMBERS as usize,
        cut_node: cut_node.clone(),
        load: (load_average(), String::new()),
        ..Default::default()
    };
    let names: Vec<String> = (1..count).map(fleet_name).collect();
    for name in &names {
        session.create_redis(name, members, REDIS_IMAGE).await?;
    }
    for (i, name) in names.iter().enumerate() {
        session
            .settled(name, members as usize, STEP_TIMEOUT)
            .await?;
        if (i + 1) % 10 == 0 {
            progress(&format!(
                "fleet: {} of {} Redis settled",
                i + 1,
                names.len()
            ));
        }
    }
    let cordon = Cordon::new(a, &cut_node)?;
    let pods: Api<Pod> = session.api();
    if pods.get_opt(CLIENT).await?.is_none() {
        session
            .add_client(CLIENT, REDIS_IMAGE, Some(&a.control_plane))
            .await?;
    }
    session
        .create_redis(PROBE, PROBE_MEMBERS, REDIS_IMAGE)
        .await?;
    session
        .settled(PROBE, PROBE_MEMBERS as usize, STEP_TIMEOUT)
        .await?;
    let host = session.cluster_ip(PROBE).await?;
    session.start_writer_in(CLIENT, "w", &host, PORT, 1).await?;
    session.writes_accepted_in(CLIENT, 20).await?;
    let watch = InvariantWatch::start(session, PROBE);
    progress(&format!(
        "fleet: {count} Redis, {} redis-server Pods; the probe's kept off {cut_node}",
        out.pods
    ));
    for run in 0..runs {
        all_settled(session, &names, members).await?;
        let w = kill_primary(
            session,
            PROBE,
            PROBE_MEMBERS,
            CLIENT,
            &format!("fleet run {}/{runs}, every node up", run + 1),
        )
        .await?;
        out.baseline_s.push(w.to_new_primary_s);

        all_settled(session, &names, members).await?;
        session
            .settled(PROBE, PROBE_MEMBERS as usize, STEP_TIMEOUT)
            .await?;
        let affected = with_member_on(session, &cut_node).await?;
        let mut cut = NodeCut::cut(&cut_node)?;
        progress(&format!(
            "fleet run {}/{runs}: {cut_node} cut off; {} Redis have a member there",
            run + 1,
            affected.len()
        ));
        let noticed = noticed(session, &affected).await;
        let w = match noticed {
            Ok(()) => {
                kill_primary(
                    session,
                    PROBE,
                    PROBE_MEMBERS,
                    CLIENT,
                    &format!("fleet run {}/{runs}, {cut_node} cut off", run + 1),
                )
                .await
            }
            Err(e) => Err(e),
        };
        cut.heal()?;
        out.during_cut_s.push(w?.to_new_primary_s);
        out.affected.push(affected.len());
    }
    drop(cordon);
    out.writes = wind_up_in(session, CLIENT, &host, watch).await?;
    out.load.1 = load_average();
    let redis: Api<Redis> = session.api();
    for name in names.iter().map(String::as_str).chain([PROBE]) {
        redis.delete(name, &Default::default()).await?;
    }
    Ok(out)
}

/// Waits until every Redis of the fleet is settled again.
async fn all_settled(
    session: &Session,
    names: &[String],
    members: i32,
) -> Result<(), crate::Error> {
    for name in names {
        session
            .settled(name, members as usize, STEP_TIMEOUT)
            .await?;
    }
    Ok(())
}

/// The Redis (other than the probe) with a live member on `node`.
async fn with_member_on(session: &Session, node: &str) -> Result<BTreeSet<String>, crate::Error> {
    let pods: Api<Pod> = session.api();
    Ok(pods
        .list(&ListParams::default().labels("app.kubernetes.io/name=redis"))
        .await?
        .items
        .iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(node))
        .filter_map(|p| p.labels().get("app.kubernetes.io/instance").cloned())
        .filter(|r| r != PROBE)
        .collect())
}

/// Waits until the operator shows it has noticed the cut: a Redis of
/// `affected` no longer `Replicated`.
async fn noticed(session: &Session, affected: &BTreeSet<String>) -> Result<(), crate::Error> {
    if affected.is_empty() {
        return Err(other("no Redis of the fleet has a member on the cut node"));
    }
    let redis: Api<Redis> = session.api();
    session::wait("the operator to notice the cut", STEP_TIMEOUT, || async {
        for name in affected {
            let r = redis.get(name).await.ok()?;
            let replicated = r.status.as_ref().is_some_and(|s| {
                s.conditions
                    .iter()
                    .any(|c| c.type_ == REPLICATED_CONDITION && c.status == "True")
            });
            if !replicated {
                return Some(());
            }
        }
        None
    })
    .await
}
