//! The I/O around the planner: observe every member concurrently, carry out
//! a [`Plan`], and say what to record in status.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::jiff::Timestamp;

use crate::api::redis::{MemberStatus, PrimaryStatus};
use crate::redis::replication::client::{Access, Node};
use crate::redis::replication::clients::{self, Ledger};
use crate::redis::replication::error::{ActionError, ClientError};
use crate::redis::replication::info::{ReplicationInfo, Role};
use crate::redis::replication::observer::Observer;
use crate::redis::replication::topology::{
    self, Action, LastSeen, Member, Observed, Plan, RecordedPrimary, Settings, Waiting, Why,
};
use crate::redis::replication::{tls, users};

/// A member Pod as the Pod cache shows it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodRef {
    pub pod: String,
    pub ip: Option<String>,
    pub port: u16,
    pub ready: bool,
    pub deleting: bool,
    pub retiring: bool,
    /// The kubelet reports its container not running (exited, or waiting
    /// to restart): its redis-server and its memory are gone.
    pub stopped: bool,
    /// Its claim ([`crate::api::names::CLAIM_LABEL`]).
    pub claim: Option<String>,
}

/// What the operator remembers about one Redis between reconciles: since
/// when each member has been silent and what it said when it last answered,
/// when a switchover was last sent from each primary, and the write fence
/// each member's process was given. Keep one per Redis object for the life
/// of the operator; a restarted operator starts afresh (so a failover takes
/// at most `failover_after` longer, never less). It also holds the
/// [`Observer`]: the members' observing tasks and their connections, which
/// end when it is dropped.
#[derive(Debug, Default)]
pub struct Memory {
    pub observer: Observer,
    silent_since: Mutex<HashMap<String, Timestamp>>,
    last_seen: Mutex<HashMap<String, LastSeen>>,
    switchover_sent: Mutex<HashMap<String, Timestamp>>,
    /// Per Pod: the run_id of the process and the fence it was given.
    fenced: Mutex<HashMap<String, (String, WriteFence)>>,
    /// Per Pod: the clients' password its process was given.
    clients: Ledger,
    /// Per Pod: the certificate its process serves; the CAs trusted.
    pub tls: tls::Ledger,
    /// Per Pod: the application users its process was given.
    users: users::Ledger,
}

fn locked<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Memory {
    /// A memory whose observer calls `wake` when a member's answer changes.
    pub fn waking(wake: crate::redis::replication::observer::Wake) -> Self {
        Memory {
            observer: Observer::waking(crate::redis::replication::observer::PERIOD, wake),
            ..Memory::default()
        }
    }

    fn note(&self, pod: &str, answered: Option<&ReplicationInfo>, now: Timestamp) -> Observed {
        let mut since = locked(&self.silent_since);
        let mut last = locked(&self.last_seen);
        match answered {
            Some(i) => {
                since.remove(pod);
                last.insert(pod.to_string(), LastSeen::of(i));
                Observed::Info(i.clone())
            }
            None => Observed::Unreachable {
                since: *since.entry(pod.to_string()).or_insert(now),
                last: last.get(pod).cloned(),
            },
        }
    }

    fn retain(&self, pods: &[PodRef]) {
        let keep = |p: &String| pods.iter().any(|r| &r.pod == p);
        locked(&self.silent_since).retain(|p, _| keep(p));
        locked(&self.last_seen).retain(|p, _| keep(p));
        locked(&self.switchover_sent).retain(|p, _| keep(p));
        locked(&self.fenced).retain(|p, _| keep(p));
        self.clients.retain(|p| pods.iter().any(|r| r.pod == p));
        self.tls.retain(|p| pods.iter().any(|r| r.pod == p));
        self.users.retain(|p| pods.iter().any(|r| r.pod == p));
        let live: Vec<(&str, &str)> = pods
            .iter()
            .filter_map(|p| Some((p.pod.as_str(), p.ip.as_deref()?)))
            .collect();
        self.observer.retain(&live);
    }

    /// Whether `pod`'s process (`run_id`) still needs `fence`.
    fn needs_fence(&self, pod: &str, run_id: &str, fence: WriteFence) -> bool {
        locked(&self.fenced)
            .get(pod)
            .is_none_or(|(r, f)| r != run_id || *f != fence)
    }

    fn note_fence(&self, pod: &str, run_id: &str, fence: WriteFence) {
        locked(&self.fenced).insert(pod.to_string(), (run_id.to_string(), fence));
    }

    fn switchover_sent(&self, from: &str) -> Option<Timestamp> {
        let sent = self
            .switchover_sent
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        sent.get(from).copied()
    }

    fn note_switchover(&self, from: &str, now: Timestamp) {
        let mut sent = self
            .switchover_sent
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        sent.insert(from.to_string(), now);
    }
}

/// How long after a switchover from a primary another one may be sent from
/// it: one that aborted (the target did not catch up within its timeout)
/// paused writes for that long, and is not repeated at once.
pub fn switchover_cooldown(settings: &Settings) -> Duration {
    (settings.switchover_timeout * 2).max(Duration::from_secs(5))
}

/// Holds back a switchover from a primary that was sent one less than
/// `cooldown` ago; the plan then waits.
pub fn defer_repeated_switchover(
    plan: &mut Plan,
    last_sent: Option<Timestamp>,
    now: Timestamp,
    cooldown: Duration,
) {
    let Some(last) = last_sent else { return };
    if !plan
        .actions
        .iter()
        .any(|a| matches!(a, Action::Switchover { .. }))
    {
        return;
    }
    let until = last.checked_add(cooldown).unwrap_or(last);
    if now < until {
        plan.actions.clear();
        plan.waiting = Some(Waiting::SwitchoverCoolingDown { until });
        plan.requeue_after = Duration::try_from(until.duration_since(now))
            .unwrap_or(topology::CONVERGE_PERIOD)
            .max(Duration::from_millis(100));
    }
}

/// Every member's latest answer, from its observing task (see
/// [`crate::redis::replication::observer`]: a silent member costs no wait);
/// members without an IP or that do not answer are
/// [`Observed::Unreachable`]. Returns the members and why each silent one
/// was silent.
pub async fn observe(
    pods: &[PodRef],
    access: &Access<'_>,
    memory: &Memory,
    now: Timestamp,
) -> (Vec<Member>, Vec<(String, Arc<ClientError>)>) {
    memory.retain(pods);
    let answers = join_all(pods.iter().map(|p| async move {
        let ip = p.ip.as_ref()?;
        let endpoint = access.endpoint(&p.pod, ip, p.port);
        Some(memory.observer.latest(access, &p.pod, &endpoint).await)
    }))
    .await;
    let mut members = Vec::with_capacity(pods.len());
    let mut errors = Vec::new();
    for (p, answer) in pods.iter().zip(answers) {
        // A refused connection says the process is gone, sooner than the
        // kubelet reports its container stopped.
        let refused = matches!(&answer, Some(Err(e)) if e.refused());
        let observed = match answer {
            Some(Ok(info)) => memory.note(&p.pod, Some(&info), now),
            other => {
                if let Some(Err(e)) = other {
                    errors.push((p.pod.clone(), e));
                }
                memory.note(&p.pod, None, now)
            }
        };
        members.push(Member {
            pod: p.pod.clone(),
            ip: p.ip.clone(),
            port: p.port,
            ready: p.ready,
            deleting: p.deleting,
            stopped: p.stopped || refused,
            retiring: p.retiring,
            claim: p.claim.clone(),
            observed,
        });
    }
    (members, errors)
}

/// What executing a plan did.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Actions that succeeded, in order.
    pub done: Vec<Action>,
    /// The first failure; later steps were not attempted.
    pub error: Option<ActionError>,
}

impl Outcome {
    pub fn ok(&self) -> bool {
        self.error.is_none()
    }
}

fn action_name(a: &Action) -> &'static str {
    match a {
        Action::Replicate {
            why: Why::Fence, ..
        } => "fence",
        Action::Replicate {
            why: Why::Repoint, ..
        } => "repoint",
        Action::Promote { .. } => "promote",
        Action::Switchover { .. } => "switchover",
    }
}

/// Sends one action's command on the member's cached connection, within
/// one deadline (connecting included).
async fn run(a: &Action, access: &Access<'_>, memory: &Memory) -> Result<(), ActionError> {
    let err = |source| ActionError {
        pod: a.pod().to_string(),
        action: action_name(a),
        source,
    };
    let connections = memory.observer.connections();
    let pod = a.pod();
    let result = match a {
        Action::Replicate {
            ip,
            port,
            primary_ip,
            primary_port,
            ..
        } => connections
            .call(
                access,
                pod,
                &access.endpoint(pod, ip, *port),
                "REPLICAOF",
                |node: Node| async move { node.replicate_from(primary_ip, *primary_port).await },
            )
            .await,
        Action::Promote { ip, port, .. } => {
            connections
                .call(
                    access,
                    pod,
                    &access.endpoint(pod, ip, *port),
                    "REPLICAOF NO ONE",
                    |node: Node| async move { node.promote().await },
                )
                .await
        }
        Action::Switchover {
            from_ip,
            from_port,
            to_ip,
            to_port,
            timeout,
            ..
        } => {
            connections
                .call(
                    access,
                    pod,
                    &access.endpoint(pod, from_ip, *from_port),
                    "FAILOVER",
                    |node: Node| async move { node.failover_to(to_ip, *to_port, *timeout).await },
                )
                .await
        }
    };
    result.map_err(err)
}

/// Runs the plan's actions: the fences (all at once), then the promotion,
/// then the repoints (all at once), or the switchover. Stops at the first
/// failed step, so that no one is promoted while an old primary may still
/// be one, and no one is repointed at a member that is not primary yet.
pub async fn execute(plan: &Plan, access: &Access<'_>, memory: &Memory) -> Outcome {
    let mut outcome = Outcome::default();
    let mut steps: Vec<Vec<&Action>> = Vec::new();
    for a in &plan.actions {
        let group = match a {
            Action::Replicate {
                why: Why::Fence, ..
            } => 0,
            Action::Promote { .. } => 1,
            Action::Replicate {
                why: Why::Repoint, ..
            } => 2,
            Action::Switchover { .. } => 3,
        };
        while steps.len() <= group {
            steps.push(Vec::new());
        }
        steps[group].push(a);
    }
    for step in steps {
        let results = join_all(step.iter().map(|a| run(a, access, memory))).await;
        for (a, r) in step.into_iter().zip(results) {
            match r {
                Ok(()) => outcome.done.push(a.clone()),
                Err(e) if outcome.error.is_none() => outcome.error = Some(e),
                Err(_) => {}
            }
        }
        if outcome.error.is_some() {
            break;
        }
    }
    outcome
}

/// status.primary after a plan ran: the plan's choice. A promotion's was
/// written before it ran ([`record_first`]) and stands whether or not the
/// promotion then succeeded: the next round carries it out or, when the
/// member it names still follows a live primary that never stopped, adopts
/// that one under a new term.
pub fn record(plan: &Plan, recorded: Option<&RecordedPrimary>) -> Option<PrimaryStatus> {
    plan.record.as_ref().or(recorded).map(status_of)
}

pub fn status_of(r: &RecordedPrimary) -> PrimaryStatus {
    PrimaryStatus {
        pod: r.pod.clone(),
        run_id: r.run_id.clone(),
        term: r.term,
        claim: r.claim.clone(),
    }
}

/// The record a plan needs written before it runs: the member it promotes,
/// with the next term. Written first, a promotion is never lost to a
/// restart or a new leader that would then take the older primary, still
/// reachable, for the current one and fence the new. Switchovers need none:
/// a primary that handed over with `FAILOVER` follows its successor, which
/// the next round adopts.
pub fn record_first(plan: &Plan) -> Option<&RecordedPrimary> {
    plan.actions
        .iter()
        .any(|a| matches!(a, Action::Promote { .. }))
        .then_some(plan.record.as_ref())
        .flatten()
}

/// `min-replicas-to-write` and `min-replicas-max-lag` of every member.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WriteFence {
    pub min_replicas: u32,
    pub max_lag_seconds: u32,
    /// `tls-replication` of the members that serve TLS (`None`: TLS is not
    /// known this round, and left as it is).
    pub tls_replication: Option<bool>,
}

impl WriteFence {
    /// `spec.failover`'s fence for a set of `members`: never more replicas
    /// than the set has besides the primary (a single member takes writes).
    pub fn for_members(min_replicas: u32, max_lag_seconds: u32, members: usize) -> Self {
        let replicas = u32::try_from(members.saturating_sub(1)).unwrap_or(u32::MAX);
        WriteFence {
            min_replicas: min_replicas.min(replicas),
            max_lag_seconds: max_lag_seconds.max(1),
            tls_replication: None,
        }
    }
}

/// Gives every member that answers the write fence, once per process: a
/// primary cut off from its replicas then refuses writes by itself, even
/// where the operator cannot reach it. Members that serve TLS are given
/// the set's `tls-replication` with it, so that each dials its primary the
/// way the primary's replication port expects. Returns the members it
/// could not give it to.
async fn fence_writes(
    members: &[Member],
    fence: WriteFence,
    access: &Access<'_>,
    memory: &Memory,
) -> Vec<(String, ClientError)> {
    let due: Vec<(&Member, &str)> = members
        .iter()
        .filter_map(|m| Some((m, m.info()?.run_id.as_str())))
        .filter(|(m, run_id)| memory.needs_fence(&m.pod, run_id, fence))
        .collect();
    let results = join_all(due.iter().map(|(m, _)| async move {
        let ip = m.ip.as_deref().unwrap_or_default();
        let (min, lag) = (
            fence.min_replicas.to_string(),
            fence.max_lag_seconds.to_string(),
        );
        let serves_tls = access.tls.is_some_and(|t| t.ports.contains_key(&m.pod));
        let tls_replication = fence
            .tls_replication
            .filter(|_| serves_tls)
            .map(|on| if on { "yes" } else { "no" });
        memory
            .observer
            .connections()
            .call(
                access,
                &m.pod,
                &access.endpoint(&m.pod, ip, m.port),
                "CONFIG SET",
                |node: Node| async move {
                    let mut pairs = vec![
                        ("min-replicas-to-write", min.as_str()),
                        ("min-replicas-max-lag", lag.as_str()),
                    ];
                    pairs.extend(tls_replication.map(|v| ("tls-replication", v)));
                    node.config_set_many(&pairs).await
                },
            )
            .await
    }))
    .await;
    let mut errors = Vec::new();
    for ((m, run_id), r) in due.into_iter().zip(results) {
        match r {
            Ok(()) => memory.note_fence(&m.pod, run_id, fence),
            Err(e) => errors.push((m.pod.clone(), e)),
        }
    }
    errors
}

/// status.members after a round: as observed, then as the round's
/// completed commands left them (a fenced or repointed member is a replica
/// whose link is still down; a promoted one is the primary), so a status
/// written after a fence never shows the fenced member as a second primary.
pub fn member_statuses_after(members: &[Member], done: &[Action]) -> Vec<MemberStatus> {
    let mut out = member_statuses(members);
    for a in done {
        let (pod, role, link) = match a {
            Action::Replicate { pod, .. } => (pod, Role::Replica.as_str(), "down"),
            Action::Promote { pod, .. } => (pod, Role::Primary.as_str(), "primary"),
            // A FAILOVER completes on its own; the next round observes it.
            Action::Switchover { .. } => continue,
        };
        if let Some(m) = out.iter_mut().find(|m| &m.pod == pod) {
            m.role = role.into();
            m.link_status = link.into();
        }
    }
    out
}

/// status.members: each member's role and replication state.
pub fn member_statuses(members: &[Member]) -> Vec<MemberStatus> {
    let mut out: Vec<MemberStatus> = members
        .iter()
        .map(|m| {
            let (role, link_status) = match m.info() {
                None => ("unknown", "unreachable"),
                Some(i) if i.role == Role::Primary => (Role::Primary.as_str(), "primary"),
                Some(i) if i.sync_in_progress => (Role::Replica.as_str(), "syncing"),
                Some(i) if i.link_up => (Role::Replica.as_str(), "up"),
                Some(_) => (Role::Replica.as_str(), "down"),
            };
            MemberStatus {
                pod: m.pod.clone(),
                role: role.into(),
                link_status: link_status.into(),
            }
        })
        .collect();
    out.sort_by(|a, b| a.pod.cmp(&b.pod));
    out
}

/// The reason of the `Replicated` condition while the operator is the one
/// cut off from the primary: the status says `Unknown` (the operator cannot
/// tell whether the set serves; clients that reach the primary go on
/// writing).
pub const OPERATOR_CUT_OFF: &str = "OperatorCutOff";

/// The `Replicated` condition: status (`True`, `False` or `Unknown`),
/// reason, message.
pub fn replicated_condition(
    plan: &Plan,
    outcome: &Outcome,
    unrecorded: Option<&str>,
) -> (&'static str, &'static str, String) {
    if let Some(e) = unrecorded {
        return (
            "False",
            "PromotionNotRecorded",
            format!(
                "a new primary is chosen but could not be recorded first, so none is promoted: {e}"
            ),
        );
    }
    if let Some(e) = &outcome.error {
        return ("False", "ReplicationCommandFailed", e.to_string());
    }
    if plan.replicated {
        let p = plan.primary.as_deref().unwrap_or_default();
        return (
            "True",
            "Replicated",
            format!("{p} is primary; every replica is linked"),
        );
    }
    match &plan.waiting {
        Some(Waiting::NoMembers) => ("False", "NoMembers", "there are no Pods".into()),
        Some(Waiting::SwitchoverInProgress) => {
            ("False", "SwitchingOver", "a FAILOVER is under way".into())
        }
        Some(Waiting::PrimaryUnreachable { pod, until }) => (
            "False",
            "PrimaryUnreachable",
            format!("{pod} does not answer; failover at {until} if it stays so"),
        ),
        Some(Waiting::NoCandidate) => (
            "False",
            "NoPrimary",
            "no member that holds the data answers; waiting rather than start empty".into(),
        ),
        Some(Waiting::PrimaryClaim { claim }) => (
            "False",
            "NoPrimary",
            format!(
                "every member restarted; waiting for the member on {claim}, the last primary's claim, which holds the newest data"
            ),
        ),
        Some(Waiting::SwitchoverCoolingDown { until }) => (
            "False",
            "SwitchoverDeferred",
            format!("the last switchover did not complete; the next is sent at {until}"),
        ),
        Some(Waiting::OperatorCutOff { pod, witness }) => (
            "Unknown",
            OPERATOR_CUT_OFF,
            format!(
                "{pod} does not answer the operator, but {witness} is linked to it and hears from it: the operator is the one cut off, so no failover"
            ),
        ),
        Some(Waiting::AheadMemberSilent {
            pod,
            candidate,
            bytes,
            until,
        }) => (
            "False",
            "AheadMemberSilent",
            format!(
                "{pod} is silent and was {bytes} bytes ahead of {candidate}, the best member that answers, when last seen: it may hold acknowledged writes, so {candidate} is not promoted before {until} unless {pod} answers or its Pod goes"
            ),
        ),
        Some(Waiting::ReplicaSilent { pod, primary }) => (
            "False",
            "ReplicaSilent",
            format!(
                "{primary} and {pod} do not answer; {pod} may still replicate from {primary}, which could then acknowledge writes a failover would discard: no promotion until either answers, {pod}'s container is reported stopped or its Pod is deleted"
            ),
        ),
        Some(Waiting::NoSwitchoverTarget) => (
            "False",
            "NoSwitchoverTarget",
            "the primary must be handed over but no replica is linked, caught up and ready".into(),
        ),
        // A person's switchover request answered (by an Event) says
        // nothing of the set's replication.
        Some(Waiting::SwitchoverRefused { .. } | Waiting::SwitchoverNotNeeded { .. }) | None
            if !plan.actions.is_empty() =>
        {
            (
                "False",
                "Converging",
                format!("{} replication command(s) sent", outcome.done.len()),
            )
        }
        Some(Waiting::SwitchoverRefused { .. } | Waiting::SwitchoverNotNeeded { .. }) | None => (
            "False",
            "ReplicasNotLinked",
            "some replicas are not linked yet".into(),
        ),
    }
}

/// One observe-plan-record-execute round, as a reconcile runs it.
pub struct Round {
    pub members: Vec<Member>,
    pub silent: Vec<(String, Arc<ClientError>)>,
    pub plan: Plan,
    pub outcome: Outcome,
    pub primary: Option<PrimaryStatus>,
    /// Why a promotion was not recorded, and so not carried out.
    pub unrecorded: Option<String>,
    /// Members that could not be given the write fence.
    pub unfenced: Vec<(String, ClientError)>,
    /// Members that could not be brought to the clients' password.
    pub unconverged: Vec<(String, ClientError)>,
    /// Members made to take the Secret's certificate up, and those that
    /// do not serve it yet.
    pub certificates: tls::Converged,
    /// Whether every member that answers keeps only podkeeper's own
    /// passwords (no old one beside them).
    pub own_alone: bool,
}

/// The order of a round: observe every member, give each the write fence,
/// plan, record a promotion (`record`, a write that fails rather than
/// overwrite a newer record) and only then carry the plan out. When the
/// record fails, nothing is done.
pub async fn reconcile(
    pods: &[PodRef],
    recorded: Option<&RecordedPrimary>,
    settings: &Settings,
    access: &Access<'_>,
    memory: &Memory,
    now: Timestamp,
    record_promotion: impl AsyncFnOnce(&RecordedPrimary) -> Result<(), String>,
) -> Round {
    let (members, silent) = observe(pods, access, memory, now).await;
    // Members about to go (a scale-down, the old Pods of a rollout) do not
    // count: scaling to one member lifts the fence before the last replica
    // goes, not after.
    let staying = members
        .iter()
        .filter(|m| !m.deleting && !m.retiring)
        .count();
    let fence = WriteFence {
        tls_replication: access.tls.map(|t| t.replication),
        ..WriteFence::for_members(
            settings.min_replicas_to_write,
            settings.min_replicas_max_lag_seconds,
            staying,
        )
    };
    let unfenced = fence_writes(&members, fence, access, memory).await;
    let mut unconverged = clients::converge(
        &members,
        access,
        memory.observer.connections(),
        &memory.clients,
    )
    .await;
    // Before any repoint: a member is made a replica (and turns Ready) only
    // once it has the application users.
    unconverged.extend(
        users::converge(
            &members,
            access,
            memory.observer.connections(),
            &memory.users,
        )
        .await,
    );
    let own_alone = access
        .users
        .is_some_and(|u| users::own_alone(&members, u, &memory.users));
    let certificates =
        tls::converge(&members, access, memory.observer.connections(), &memory.tls).await;
    let mut plan = topology::plan(&members, recorded, settings, now);
    if let Some(from) = plan.actions.iter().find_map(|a| match a {
        Action::Switchover { from, .. } => Some(from.clone()),
        _ => None,
    }) {
        let last = memory.switchover_sent(&from);
        defer_repeated_switchover(&mut plan, last, now, switchover_cooldown(settings));
        if !plan.actions.is_empty() {
            memory.note_switchover(&from, now);
        }
    }
    if let Some(next) = record_first(&plan)
        && let Err(e) = record_promotion(next).await
    {
        return Round {
            primary: recorded.map(status_of),
            members,
            silent,
            outcome: Outcome::default(),
            plan: Plan {
                actions: Vec::new(),
                requeue_after: topology::CONVERGE_PERIOD,
                ..plan
            },
            unrecorded: Some(e),
            unfenced,
            unconverged,
            certificates,
            own_alone,
        };
    }
    let outcome = execute(&plan, access, memory).await;
    let primary = record(&plan, recorded);
    Round {
        members,
        silent,
        plan,
        outcome,
        primary,
        unrecorded: None,
        unfenced,
        unconverged,
        certificates,
        own_alone,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::replication::info::ReplicationInfo;

    fn info(role: Role, offset: i64) -> ReplicationInfo {
        ReplicationInfo {
            role,
            run_id: "r".into(),
            master_host: (role == Role::Replica).then(|| "10.0.0.1".into()),
            master_port: (role == Role::Replica).then_some(6379),
            link_up: role == Role::Replica,
            sync_in_progress: false,
            slave_repl_offset: (role == Role::Replica).then_some(offset),
            master_last_io_seconds: (role == Role::Replica).then_some(0),
            master_repl_offset: offset,
            master_replid: "h".into(),
            failover_state: "no-failover".into(),
            connected_replicas: vec![],
            vitals: Default::default(),
        }
    }

    fn member(pod: &str, ip: &str, observed: Observed) -> Member {
        Member {
            pod: pod.into(),
            ip: Some(ip.into()),
            port: 6379,
            ready: true,
            deleting: false,
            stopped: false,
            retiring: false,
            claim: None,
            observed,
        }
    }

    fn promote_plan() -> Plan {
        Plan {
            primary: Some("b".into()),
            record: Some(RecordedPrimary {
                pod: "b".into(),
                run_id: "rb".into(),
                term: 2,
                claim: None,
            }),
            actions: vec![Action::Promote {
                pod: "b".into(),
                ip: "10.0.0.2".into(),
                port: 6379,
            }],
            cause: Some(topology::Cause::PrimaryGone),
            waiting: None,
            replicated: false,
            requeue_after: Duration::from_secs(1),
        }
    }

    #[test]
    fn a_promotion_is_recorded_before_it_runs_and_the_record_stands() {
        let old = RecordedPrimary {
            pod: "a".into(),
            run_id: "ra".into(),
            term: 1,
            claim: None,
        };
        let plan = promote_plan();
        assert_eq!(record_first(&plan), plan.record.as_ref());
        // Whether or not REPLICAOF NO ONE then succeeded, status.primary
        // keeps the record written first: writing the older one back would
        // let a later round fence the member that may already be primary.
        let now = record(&plan, Some(&old)).unwrap();
        assert_eq!(
            (now.pod.as_str(), now.run_id.as_str(), now.term),
            ("b", "rb", 2)
        );
        // A switchover, or a plan that keeps the primary, records nothing
        // first.
        let keep = Plan {
            actions: vec![],
            ..promote_plan()
        };
        assert_eq!(record_first(&keep), None);
        let failed = Outcome {
            done: vec![],
            error: Some(ActionError {
                pod: "b".into(),
                action: "promote",
                source: ClientError::Timeout {
                    addr: "10.0.0.2:6379".into(),
                    command: "REPLICAOF NO ONE",
                },
            }),
        };
        let (status, reason, message) = replicated_condition(&plan, &failed, None);
        assert_eq!(status, "False");
        assert_eq!(reason, "ReplicationCommandFailed");
        assert!(message.contains("timed out"), "{message}");
        let (status, reason, message) =
            replicated_condition(&plan, &Outcome::default(), Some("conflict"));
        assert_eq!(status, "False");
        assert_eq!(reason, "PromotionNotRecorded");
        assert!(message.contains("conflict"), "{message}");
        // The operator cut off from a primary a replica still hears from
        // cannot tell whether the set serves: Unknown, not False.
        let cut_off = Plan {
            actions: vec![],
            waiting: Some(Waiting::OperatorCutOff {
                pod: "a".into(),
                witness: "b".into(),
            }),
            ..promote_plan()
        };
        let (status, reason, _) = replicated_condition(&cut_off, &Outcome::default(), None);
        assert_eq!((status, reason), ("Unknown", OPERATOR_CUT_OFF));
    }

    #[test]
    fn terms_go_up_with_each_new_primary_only() {
        let a1 = RecordedPrimary::next(None, "a", "ra", None);
        assert_eq!(a1.term, 1);
        assert_eq!(RecordedPrimary::next(Some(&a1), "a", "ra", None).term, 1);
        let b2 = RecordedPrimary::next(Some(&a1), "b", "rb", None);
        assert_eq!(b2.term, 2);
        // The same Pod with a new process is a new primary too.
        assert_eq!(RecordedPrimary::next(Some(&b2), "b", "rb2", None).term, 3);
    }

    #[test]
    fn the_write_fence_never_asks_for_more_replicas_than_the_set_has() {
        let f = |n, members| WriteFence::for_members(n, 2, members).min_replicas;
        assert_eq!(f(1, 1), 0, "a single member takes writes");
        assert_eq!(f(1, 3), 1);
        assert_eq!(f(2, 2), 1);
        assert_eq!(f(0, 3), 0, "turned off");
        assert_eq!(f(1, 0), 0);
    }

    #[test]
    fn members_report_role_and_link() {
        let p = info(Role::Primary, 1000);
        let mut syncing = info(Role::Replica, 0);
        syncing.sync_in_progress = true;
        let members = vec![
            member("c", "10.0.0.3", Observed::Info(syncing)),
            member("a", "10.0.0.1", Observed::Info(p)),
            member("b", "10.0.0.2", Observed::Info(info(Role::Replica, 900))),
            member(
                "d",
                "10.0.0.4",
                Observed::Unreachable {
                    since: Timestamp::UNIX_EPOCH,
                    last: None,
                },
            ),
        ];
        let s = member_statuses(&members);
        fn row(m: &MemberStatus) -> (&str, &str, &str) {
            (m.pod.as_str(), m.role.as_str(), m.link_status.as_str())
        }
        assert_eq!(
            s.iter().map(row).collect::<Vec<_>>(),
            [
                ("a", "primary", "primary"),
                ("b", "replica", "up"),
                ("c", "replica", "syncing"),
                ("d", "unknown", "unreachable"),
            ]
        );
    }

    #[test]
    fn members_are_reported_as_the_rounds_commands_left_them() {
        // a returned from a partition still a primary; b was promoted
        // earlier; this round fenced a.
        let members = vec![
            member("a", "10.0.0.1", Observed::Info(info(Role::Primary, 900))),
            member("b", "10.0.0.2", Observed::Info(info(Role::Primary, 1000))),
        ];
        let fence = Action::Replicate {
            pod: "a".into(),
            ip: "10.0.0.1".into(),
            port: 6379,
            primary: "b".into(),
            primary_ip: "10.0.0.2".into(),
            primary_port: 6379,
            why: Why::Fence,
        };
        let s = member_statuses_after(&members, std::slice::from_ref(&fence));
        let roles: Vec<(&str, &str, &str)> = s
            .iter()
            .map(|m| (m.pod.as_str(), m.role.as_str(), m.link_status.as_str()))
            .collect();
        assert_eq!(
            roles,
            [("a", "replica", "down"), ("b", "primary", "primary")]
        );
        // Nothing done: as observed.
        assert_eq!(
            member_statuses_after(&members, &[]),
            member_statuses(&members)
        );
    }

    #[test]
    fn silence_is_counted_from_the_first_miss_and_the_last_answer_is_kept() {
        let s = Memory::default();
        let t0 = Timestamp::from_second(100).unwrap();
        let t1 = Timestamp::from_second(105).unwrap();
        let silent = |since, last| Observed::Unreachable { since, last };
        assert_eq!(s.note("a", None, t0), silent(t0, None));
        assert_eq!(s.note("a", None, t1), silent(t0, None));
        let answer = info(Role::Replica, 900);
        assert_eq!(
            s.note("a", Some(&answer), t1),
            Observed::Info(answer.clone())
        );
        assert_eq!(
            s.note("a", None, t1),
            silent(t1, Some(LastSeen::of(&answer))),
            "silent again: since now, and what it said last"
        );
        assert_eq!(LastSeen::of(&answer).offset, 900);
        assert!(LastSeen::of(&answer).linked);
        s.retain(&[]);
        assert_eq!(
            s.note("a", None, t0),
            silent(t0, None),
            "forgotten once the Pod is gone"
        );
    }

    #[test]
    fn a_switchover_is_not_repeated_within_the_cooldown() {
        let t0 = Timestamp::from_second(100).unwrap();
        let switchover = || Plan {
            primary: Some("a".into()),
            actions: vec![Action::Switchover {
                from: "a".into(),
                from_ip: "10.0.0.1".into(),
                from_port: 6379,
                to: "b".into(),
                to_ip: "10.0.0.2".into(),
                to_port: 6379,
                timeout: Duration::from_secs(10),
            }],
            ..promote_plan()
        };
        let cooldown = Duration::from_secs(20);
        let mut first = switchover();
        defer_repeated_switchover(&mut first, None, t0, cooldown);
        assert_eq!(first.actions.len(), 1, "the first one goes");
        let mut again = switchover();
        let t5 = Timestamp::from_second(105).unwrap();
        defer_repeated_switchover(&mut again, Some(t0), t5, cooldown);
        assert!(again.actions.is_empty());
        assert_eq!(
            again.waiting,
            Some(Waiting::SwitchoverCoolingDown {
                until: Timestamp::from_second(120).unwrap()
            })
        );
        assert_eq!(again.requeue_after, Duration::from_secs(15));
        let mut later = switchover();
        let t20 = Timestamp::from_second(120).unwrap();
        defer_repeated_switchover(&mut later, Some(t0), t20, cooldown);
        assert_eq!(later.actions.len(), 1);
        let settings = Settings {
            failover_after: Duration::from_secs(5),
            switchover_timeout: Duration::from_secs(1),
            min_replicas_to_write: 1,
            min_replicas_max_lag_seconds: 2,
            requested: None,
        };
        assert_eq!(switchover_cooldown(&settings), Duration::from_secs(5));
    }
}
