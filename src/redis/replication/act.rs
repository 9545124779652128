//! The I/O around the planner: observe every member concurrently, carry out
//! a [`Plan`], and say what to record in status.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use futures::future::join_all;
use k8s_openapi::jiff::Timestamp;

use crate::api::redis::{MemberStatus, PrimaryStatus};
use crate::redis::replication::client::{self, Access, Node};
use crate::redis::replication::error::{ActionError, ClientError};
use crate::redis::replication::info::Role;
use crate::redis::replication::topology::{
    self, Action, Member, Observed, Plan, RecordedPrimary, Settings, Waiting, Why,
};

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
}

/// What the operator remembers about one Redis between reconciles: since
/// when each member has been silent, and when a switchover was last sent
/// from each primary. Keep one per Redis object for the life of the
/// operator; a restarted operator starts afresh (so a failover takes at
/// most `failover_after` longer, never less).
#[derive(Debug, Default)]
pub struct Memory {
    silent_since: Mutex<HashMap<String, Timestamp>>,
    switchover_sent: Mutex<HashMap<String, Timestamp>>,
}

impl Memory {
    fn note(&self, pod: &str, answered: bool, now: Timestamp) -> Option<Timestamp> {
        let mut since = self.silent_since.lock().unwrap_or_else(|e| e.into_inner());
        if answered {
            since.remove(pod);
            None
        } else {
            Some(*since.entry(pod.to_string()).or_insert(now))
        }
    }

    fn retain(&self, pods: &[PodRef]) {
        let keep = |p: &String| pods.iter().any(|r| &r.pod == p);
        let mut since = self.silent_since.lock().unwrap_or_else(|e| e.into_inner());
        since.retain(|p, _| keep(p));
        let mut sent = self
            .switchover_sent
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        sent.retain(|p, _| keep(p));
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

/// Queries every member at once; members without an IP or that do not
/// answer are [`Observed::Unreachable`]. Returns the members and why each
/// silent one was silent.
pub async fn observe(
    pods: &[PodRef],
    access: &Access<'_>,
    memory: &Memory,
    now: Timestamp,
) -> (Vec<Member>, Vec<(String, ClientError)>) {
    memory.retain(pods);
    let answers = join_all(pods.iter().map(|p| async move {
        match &p.ip {
            None => None,
            Some(ip) => Some(client::observe(access, &p.pod, &access.endpoint(ip, p.port)).await),
        }
    }))
    .await;
    let mut members = Vec::with_capacity(pods.len());
    let mut errors = Vec::new();
    for (p, answer) in pods.iter().zip(answers) {
        let observed = match answer {
            Some(Ok(info)) => {
                memory.note(&p.pod, true, now);
                Observed::Info(info)
            }
            other => {
                if let Some(Err(e)) = other {
                    errors.push((p.pod.clone(), e));
                }
                let since = memory.note(&p.pod, false, now).unwrap_or(now);
                Observed::Unreachable { since }
            }
        };
        members.push(Member {
            pod: p.pod.clone(),
            ip: p.ip.clone(),
            port: p.port,
            ready: p.ready,
            deleting: p.deleting,
            stopped: p.stopped,
            retiring: p.retiring,
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

async fn run(a: &Action, access: &Access<'_>) -> Result<(), ActionError> {
    let err = |source| ActionError {
        pod: a.pod().to_string(),
        action: action_name(a),
        source,
    };
    match a {
        Action::Replicate {
            ip,
            port,
            primary_ip,
            primary_port,
            ..
        } => {
            let node = Node::connect_via(access, a.pod(), &access.endpoint(ip, *port))
                .await
                .map_err(err)?;
            node.replicate_from(primary_ip, *primary_port)
                .await
                .map_err(err)
        }
        Action::Promote { ip, port, .. } => {
            let node = Node::connect_via(access, a.pod(), &access.endpoint(ip, *port))
                .await
                .map_err(err)?;
            node.promote().await.map_err(err)
        }
        Action::Switchover {
            from_ip,
            from_port,
            to_ip,
            to_port,
            timeout,
            ..
        } => {
            let node = Node::connect_via(access, a.pod(), &access.endpoint(from_ip, *from_port))
                .await
                .map_err(err)?;
            node.failover_to(to_ip, *to_port, *timeout)
                .await
                .map_err(err)
        }
    }
}

/// Runs the plan's actions: the fences (all at once), then the promotion,
/// then the repoints (all at once), or the switchover. Stops at the first
/// failed step, so that no one is promoted while an old primary may still
/// be one, and no one is repointed at a member that is not primary yet.
pub async fn execute(plan: &Plan, access: &Access<'_>) -> Outcome {
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
        let results = join_all(step.iter().map(|a| run(a, access))).await;
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

/// status.primary after a plan ran: the plan's choice once its promotion
/// (if any) succeeded; otherwise what was recorded before.
pub fn record(
    plan: &Plan,
    outcome: &Outcome,
    recorded: Option<&RecordedPrimary>,
) -> Option<PrimaryStatus> {
    let promoting = plan
        .actions
        .iter()
        .any(|a| matches!(a, Action::Promote { .. }));
    let promoted = outcome
        .done
        .iter()
        .any(|a| matches!(a, Action::Promote { .. }));
    let chosen = if promoting && !promoted {
        recorded
    } else {
        plan.record.as_ref().or(recorded)
    };
    chosen.map(|r| PrimaryStatus {
        pod: r.pod.clone(),
        run_id: r.run_id.clone(),
    })
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

/// The `Replicated` condition: status, reason, message.
pub fn replicated_condition(plan: &Plan, outcome: &Outcome) -> (bool, &'static str, String) {
    if let Some(e) = &outcome.error {
        return (false, "ReplicationCommandFailed", e.to_string());
    }
    if plan.replicated {
        let p = plan.primary.as_deref().unwrap_or_default();
        return (
            true,
            "Replicated",
            format!("{p} is primary; every replica is linked"),
        );
    }
    match &plan.waiting {
        Some(Waiting::NoMembers) => (false, "NoMembers", "there are no Pods".into()),
        Some(Waiting::SwitchoverInProgress) => {
            (false, "SwitchingOver", "a FAILOVER is under way".into())
        }
        Some(Waiting::PrimaryUnreachable { pod, until }) => (
            false,
            "PrimaryUnreachable",
            format!("{pod} does not answer; failover at {until} if it stays so"),
        ),
        Some(Waiting::NoCandidate) => (
            false,
            "NoPrimary",
            "no member that holds the data answers; waiting rather than start empty".into(),
        ),
        Some(Waiting::SwitchoverCoolingDown { until }) => (
            false,
            "SwitchoverDeferred",
            format!("the last switchover did not complete; the next is sent at {until}"),
        ),
        Some(Waiting::NoSwitchoverTarget) => (
            false,
            "NoSwitchoverTarget",
            "the primary must be handed over but no replica is linked, caught up and ready".into(),
        ),
        None if !plan.actions.is_empty() => (
            false,
            "Converging",
            format!("{} replication command(s) sent", outcome.done.len()),
        ),
        None => (
            false,
            "ReplicasNotLinked",
            "some replicas are not linked yet".into(),
        ),
    }
}

/// One observe-plan-execute round, as a reconcile runs it.
pub struct Round {
    pub members: Vec<Member>,
    pub silent: Vec<(String, ClientError)>,
    pub plan: Plan,
    pub outcome: Outcome,
    pub primary: Option<PrimaryStatus>,
}

pub async fn reconcile(
    pods: &[PodRef],
    recorded: Option<&RecordedPrimary>,
    settings: &Settings,
    access: &Access<'_>,
    memory: &Memory,
    now: Timestamp,
) -> Round {
    let (members, silent) = observe(pods, access, memory, now).await;
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
    let outcome = execute(&plan, access).await;
    let primary = record(&plan, &outcome, recorded);
    Round {
        members,
        silent,
        plan,
        outcome,
        primary,
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
            master_repl_offset: offset,
            master_replid: "h".into(),
            failover_state: "no-failover".into(),
            connected_replicas: vec![],
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
            observed,
        }
    }

    fn promote_plan() -> Plan {
        Plan {
            primary: Some("b".into()),
            record: Some(RecordedPrimary {
                pod: "b".into(),
                run_id: "rb".into(),
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
    fn status_primary_changes_only_once_the_promotion_succeeded() {
        let old = RecordedPrimary {
            pod: "a".into(),
            run_id: "ra".into(),
        };
        let plan = promote_plan();
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
        assert_eq!(record(&plan, &failed, Some(&old)).unwrap().pod, "a");
        let done = Outcome {
            done: plan.actions.clone(),
            error: None,
        };
        let now = record(&plan, &done, Some(&old)).unwrap();
        assert_eq!((now.pod.as_str(), now.run_id.as_str()), ("b", "rb"));
        let (ok, reason, message) = replicated_condition(&plan, &failed);
        assert!(!ok);
        assert_eq!(reason, "ReplicationCommandFailed");
        assert!(message.contains("timed out"), "{message}");
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
    fn silence_is_counted_from_the_first_miss_and_forgotten_on_an_answer() {
        let s = Memory::default();
        let t0 = Timestamp::from_second(100).unwrap();
        let t1 = Timestamp::from_second(105).unwrap();
        assert_eq!(s.note("a", false, t0), Some(t0));
        assert_eq!(s.note("a", false, t1), Some(t0));
        assert_eq!(s.note("a", true, t1), None);
        assert_eq!(s.note("a", false, t1), Some(t1));
        s.retain(&[]);
        assert_eq!(
            s.note("a", false, t0),
            Some(t0),
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
        };
        assert_eq!(switchover_cooldown(&settings), Duration::from_secs(5));
    }
}
