//! The replication planner: from what every member said (or that it did not
//! answer), what was recorded, and the time, decide who is primary and what
//! to send to whom. Pure: no I/O, no clock; `now` is an argument.
//!
//! Rules, in order:
//!
//! 1. While a `FAILOVER` is under way anywhere, wait.
//! 2. The recorded primary stays primary while it answers as a primary with
//!    the recorded `run_id`. If it answers as a replica of a member that is
//!    primary (a switchover finished before it was recorded), that member is
//!    adopted.
//! 3. Otherwise the primary is lost: its Pod is gone; it is terminating and
//!    silent; it restarted (new `run_id`: its memory is empty); it is silent
//!    and the kubelet reports its container not running; it has been silent
//!    for `failover_after`; or nothing was recorded. A new primary is
//!    chosen among members that hold the data: the highest replication
//!    offset wins (so every write acknowledged by `WAIT 1` survives). Never
//!    chosen while others hold data: a member following the start-up
//!    placeholder (it has never synced), a restarted primary, or a replica
//!    whose `master_replid` is the restarted primary's (it resynced from the
//!    empty dataset). Only when no member can hold data (a new Redis, or all
//!    data gone) is such a member promoted; while a member with an address
//!    does not answer (and something was recorded), the planner waits
//!    instead. With a claim per member, such members may have loaded data
//!    from their claims: the one on the recorded primary's claim is chosen,
//!    and waited for while its claim exists.
//! 4. Every other member that is primary is fenced (made a replica of the
//!    primary) before the new primary is promoted; replicas that follow any
//!    other address are repointed after.
//! 5. A primary that is terminating or that the engine wants to retire is
//!    handed over with `FAILOVER` to a linked, caught-up, ready replica that
//!    is not retiring, once nothing else needs doing. The engine must never
//!    touch [`Plan::primary`].
//! 6. A switchover a person asked for ([`Settings::requested`]) goes the
//!    same way, once nothing else needs doing and the primary is not being
//!    handed over already: to the best such replica, or to the named member
//!    when it is one; otherwise it is refused with the reason (a member
//!    behind is never made primary on request).

use std::cmp::Reverse;
use std::time::Duration;

use k8s_openapi::jiff::Timestamp;

use crate::redis::replication::info::{ReplicationInfo, Role};

/// New Pods start as replicas of this address, which never answers, so that
/// no Pod ever comes up as an empty primary that others sync from.
pub const PLACEHOLDER_HOST: &str = "127.0.0.1";
pub const PLACEHOLDER_PORT: u16 = 1;

/// One Pod of the set, as observed.
#[derive(Clone, Debug, PartialEq)]
pub struct Member {
    pub pod: String,
    /// The Pod IP; `None` before the Pod has one (it has never run).
    pub ip: Option<String>,
    pub port: u16,
    /// The Pod's Ready condition.
    pub ready: bool,
    /// The Pod has a deletionTimestamp.
    pub deleting: bool,
    /// The kubelet reports its container not running: whatever it held in
    /// memory is gone, so a silent primary need not be waited for.
    pub stopped: bool,
    /// The engine wants to replace, update or remove this Pod (rollout,
    /// scale-down): a primary is switched over first.
    pub retiring: bool,
    /// The PersistentVolumeClaim its data directory is on (`spec.storage`).
    pub claim: Option<String>,
    pub observed: Observed,
}

/// What the last observation of a member gave.
#[derive(Clone, Debug, PartialEq)]
pub enum Observed {
    Info(ReplicationInfo),
    /// No answer (or no IP) since this time; what it said when it last
    /// answered, if it did while this operator watched.
    Unreachable {
        since: Timestamp,
        last: Option<LastSeen>,
    },
}

/// What a member said the last time it answered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LastSeen {
    /// Its replication offset ([`ReplicationInfo::offset`]).
    pub offset: i64,
    /// The replication history the offset counts in.
    pub replid: String,
    /// A replica with its link to the primary up.
    pub linked: bool,
}

impl LastSeen {
    pub fn of(i: &ReplicationInfo) -> Self {
        LastSeen {
            offset: i.offset(),
            replid: i.master_replid.clone(),
            linked: i.role == Role::Replica && i.link_up,
        }
    }
}

impl Member {
    pub fn info(&self) -> Option<&ReplicationInfo> {
        match &self.observed {
            Observed::Info(i) if self.ip.is_some() => Some(i),
            _ => None,
        }
    }

    fn ip(&self) -> &str {
        self.ip.as_deref().unwrap_or_default()
    }

    /// Silent, with an address: it may have run and may hold data.
    fn may_hold_data_unseen(&self) -> bool {
        matches!(self.observed, Observed::Unreachable { .. })
            && self.ip.is_some()
            && !self.deleting
            && !self.stopped
    }
}

/// `status.primary`: the chosen primary, its process' run_id, and the
/// term it was chosen in.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecordedPrimary {
    pub pod: String,
    pub run_id: String,
    pub term: u64,
    /// Its claim, while that claim exists (see [`Waiting::PrimaryClaim`]).
    pub claim: Option<String>,
}

impl RecordedPrimary {
    /// The record that names `pod` (with `run_id`, on `claim`) after
    /// `before`: the same term when it names the same process, the next one
    /// otherwise.
    pub fn next(
        before: Option<&RecordedPrimary>,
        pod: &str,
        run_id: &str,
        claim: Option<&str>,
    ) -> RecordedPrimary {
        let term = match before {
            Some(b) if b.pod == pod && b.run_id == run_id => b.term,
            Some(b) => b.term + 1,
            None => 1,
        };
        RecordedPrimary {
            pod: pod.to_string(),
            run_id: run_id.to_string(),
            term,
            claim: claim.map(str::to_string),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Settings {
    /// How long the primary may be unreachable before a replica is promoted.
    pub failover_after: Duration,
    /// The TIMEOUT of a planned `FAILOVER`.
    pub switchover_timeout: Duration,
    /// `spec.failover.minReplicasToWrite` and `minReplicasMaxLagSeconds`:
    /// the write fence every member gets (see `act::WriteFence`).
    pub min_replicas_to_write: u32,
    pub min_replicas_max_lag_seconds: u32,
    /// A person asked for the primary to move (rule 6).
    pub requested: Option<Requested>,
}

/// Where a person asked the primary to move.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Requested {
    /// To the replica a rollout's switchover would pick.
    Best,
    /// To this member (a Pod name).
    To(String),
}

impl Settings {
    /// How long a silent member that was ahead of every candidate holds a
    /// promotion back, counted from when it fell silent.
    pub fn ahead_wait(&self) -> Duration {
        self.failover_after * AHEAD_WAIT_FACTOR
    }
}

/// [`Settings::ahead_wait`] in units of `failover_after`.
pub const AHEAD_WAIT_FACTOR: u32 = 3;

/// Why a `REPLICAOF host port` is sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// The member is a primary but not the chosen one.
    Fence,
    /// The member replicates from another address (the placeholder, an old
    /// primary, an old IP).
    Repoint,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// `REPLICAOF primary_ip primary_port` on `pod`.
    Replicate {
        pod: String,
        ip: String,
        port: u16,
        primary: String,
        primary_ip: String,
        primary_port: u16,
        why: Why,
    },
    /// `REPLICAOF NO ONE` on `pod`.
    Promote { pod: String, ip: String, port: u16 },
    /// `FAILOVER TO to_ip to_port TIMEOUT timeout` on `from`.
    Switchover {
        from: String,
        from_ip: String,
        from_port: u16,
        to: String,
        to_ip: String,
        to_port: u16,
        timeout: Duration,
    },
}

impl Action {
    pub fn pod(&self) -> &str {
        match self {
            Action::Replicate { pod, .. } | Action::Promote { pod, .. } => pod,
            Action::Switchover { from, .. } => from,
        }
    }
}

/// Why a new primary is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cause {
    /// Nothing was recorded (a new Redis, or status was lost).
    NoRecord,
    /// The recorded primary's Pod is gone, or terminating and silent.
    PrimaryGone,
    /// The recorded primary's process restarted: its memory is empty.
    PrimaryRestarted,
    /// The recorded primary did not answer for `failover_after`.
    PrimaryUnreachable,
    /// The recorded primary is silent and its container is not running
    /// (it exited, or waits out the kubelet's restart back-off).
    PrimaryStopped,
    /// The recorded primary is a replica of something that is not a member.
    PrimaryDemoted,
}

/// Why nothing (more) is done this time.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Waiting {
    /// A `FAILOVER` is under way.
    SwitchoverInProgress,
    /// The primary is silent; failover at `until` if it stays so.
    PrimaryUnreachable { pod: String, until: Timestamp },
    /// No member that holds the data answers (members that may hold it are
    /// silent).
    NoCandidate,
    /// Every member restarted (none holds data by replication): the one on
    /// the recorded primary's claim holds the newest data, and its Pod does
    /// not answer yet. Nothing is promoted until it does: a member on an
    /// older or new claim would replace the newest data with less.
    PrimaryClaim { claim: String },
    /// The primary must be handed over but no replica is linked, caught up
    /// and ready.
    NoSwitchoverTarget,
    /// The primary does not answer the operator, but a replica reports its
    /// link to it up and recent traffic: the operator is the one cut off.
    OperatorCutOff { pod: String, witness: String },
    /// The best member that answers is behind a silent one that was a
    /// linked replica when last seen (it may hold writes a `WAIT`
    /// acknowledged): promote nothing until `until`, unless it answers.
    AheadMemberSilent {
        pod: String,
        candidate: String,
        bytes: i64,
        until: Timestamp,
    },
    /// The primary is silent (not known stopped) and so is `pod`, a member
    /// that may still replicate from it: promoted now, the new primary
    /// could not fence `pod`, and the old primary, with `pod` as its
    /// replica, could go on acknowledging writes (`WAIT 1`, its
    /// `min-replicas-to-write` met) that the new term discards. Nothing is
    /// promoted until either answers, or `pod`'s container is reported
    /// stopped or its Pod goes (`kubectl delete pod` is the way to fail
    /// over without it).
    ReplicaSilent { pod: String, primary: String },
    /// A switchover a person asked for cannot be carried out, and why.
    SwitchoverRefused { reason: String },
    /// The member a person asked to be primary already is.
    SwitchoverNotNeeded { pod: String },
    /// A switchover from this primary was sent recently and did not
    /// complete; the next may go at `until` (set by `act`, which remembers).
    SwitchoverCoolingDown { until: Timestamp },
    /// There are no members.
    NoMembers,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The member that holds, or is given, the primary role. Its Pod gets
    /// the `primary` label and must not be touched by the engine.
    pub primary: Option<String>,
    /// What status.primary should say once the actions succeeded.
    pub record: Option<RecordedPrimary>,
    /// In execution order: fences, then the promotion, then repoints; or one
    /// switchover.
    pub actions: Vec<Action>,
    /// Set when a new primary is chosen.
    pub cause: Option<Cause>,
    pub waiting: Option<Waiting>,
    /// A primary accepts writes and every member is its linked, caught-up
    /// replica (online in the primary's list), with nothing to do.
    pub replicated: bool,
    /// When to look again.
    pub requeue_after: Duration,
}

impl Plan {
    /// Whether the engine may delete or update this Pod now.
    pub fn may_touch(&self, pod: &str) -> bool {
        self.primary.as_deref() != Some(pod)
    }
}

/// Steady state: look again after this long, to notice what Redis does on
/// its own (links dropping, processes restarting).
pub const RESYNC_PERIOD: Duration = Duration::from_secs(10);
/// While converging: look again soon.
pub const CONVERGE_PERIOD: Duration = Duration::from_secs(1);

fn follows_placeholder(i: &ReplicationInfo) -> bool {
    i.follows(PLACEHOLDER_HOST, PLACEHOLDER_PORT)
}

enum Current<'a> {
    /// The primary, already serving (the recorded one, or the one it
    /// handed over to).
    Healthy(&'a Member),
    /// No primary: choose one.
    Lost {
        cause: Cause,
        /// Not eligible for the data tier (silent, or restarted empty).
        excluded: Option<&'a str>,
        /// The replication id of a restarted primary: replicas sharing it
        /// synced from the empty dataset.
        tainted_replid: Option<String>,
    },
    Wait(Waiting, Duration),
}

fn current<'a>(
    members: &'a [Member],
    recorded: Option<&RecordedPrimary>,
    settings: &Settings,
    now: Timestamp,
) -> Current<'a> {
    let Some(rec) = recorded else {
        return Current::Lost {
            cause: Cause::NoRecord,
            excluded: None,
            tainted_replid: None,
        };
    };
    let Some(m) = members.iter().find(|m| m.pod == rec.pod) else {
        return Current::Lost {
            cause: Cause::PrimaryGone,
            excluded: None,
            tainted_replid: None,
        };
    };
    match (&m.observed, m.info()) {
        (_, Some(i)) if i.run_id != rec.run_id => Current::Lost {
            cause: Cause::PrimaryRestarted,
            excluded: Some(&m.pod),
            tainted_replid: Some(i.master_replid.clone()),
        },
        (_, Some(i)) if i.role == Role::Primary => Current::Healthy(m),
        (_, Some(i)) => {
            // A replica with its data: of whom?
            let leader = members
                .iter()
                .find(|o| o.pod != m.pod && o.info().is_some() && i.follows(o.ip(), o.port));
            match leader.and_then(|l| l.info().map(|li| (l, li))) {
                Some((l, li)) if li.role == Role::Primary => Current::Healthy(l),
                // Both replicas of each other: the last step of a handover.
                Some((_, li)) if li.follows(m.ip(), m.port) => {
                    Current::Wait(Waiting::SwitchoverInProgress, CONVERGE_PERIOD)
                }
                _ => Current::Lost {
                    cause: Cause::PrimaryDemoted,
                    excluded: None,
                    tainted_replid: None,
                },
            }
        }
        (Observed::Unreachable { since, .. }, _) => {
            let until = since.checked_add(settings.failover_after).unwrap_or(*since);
            let gone = m.deleting || m.ip.is_none() || m.stopped;
            if !gone && now >= until {
                // A second opinion: a replica that still hears from it.
                if let Some(w) = witness(members, m, settings) {
                    return Current::Wait(
                        Waiting::OperatorCutOff {
                            pod: m.pod.clone(),
                            witness: w.pod.clone(),
                        },
                        CONVERGE_PERIOD,
                    );
                }
            }
            if gone || now >= until {
                Current::Lost {
                    cause: if m.deleting || m.ip.is_none() {
                        Cause::PrimaryGone
                    } else if m.stopped {
                        Cause::PrimaryStopped
                    } else {
                        Cause::PrimaryUnreachable
                    },
                    excluded: Some(&m.pod),
                    tainted_replid: None,
                }
            } else {
                let left = until.duration_since(now);
                let left = Duration::try_from(left).unwrap_or(CONVERGE_PERIOD);
                Current::Wait(
                    Waiting::PrimaryUnreachable {
                        pod: m.pod.clone(),
                        until,
                    },
                    left.max(Duration::from_millis(100)),
                )
            }
        }
        // Observed::Info without an IP cannot happen (see Member::info).
        (Observed::Info(_), None) => Current::Lost {
            cause: Cause::PrimaryGone,
            excluded: Some(&m.pod),
            tainted_replid: None,
        },
    }
}

/// A replica that answers and reports its link to `primary` up, with
/// traffic from it within `failover_after` (primaries ping their replicas
/// every second): the primary lives, and only the operator cannot reach it.
fn witness<'a>(members: &'a [Member], primary: &Member, settings: &Settings) -> Option<&'a Member> {
    let recent = i64::try_from(settings.failover_after.as_secs()).unwrap_or(i64::MAX);
    members.iter().find(|o| {
        o.pod != primary.pod
            && o.info().is_some_and(|i| {
                i.follows(primary.ip(), primary.port)
                    && i.link_up
                    && !i.sync_in_progress
                    && i.master_last_io_seconds.is_some_and(|s| s < recent)
            })
    })
}

/// A member that answered, with what it said.
type Candidate<'a> = (&'a Member, &'a ReplicationInfo);

/// Ranks a candidate: higher is better. Without a record, a member that
/// already is primary goes first (status was lost; keep what runs);
/// otherwise the highest offset does.
fn rank<'a>(
    (m, i): Candidate<'a>,
    prefer_primaries: bool,
) -> (bool, i64, bool, bool, bool, Reverse<&'a str>) {
    let is_primary = i.role == Role::Primary;
    (
        prefer_primaries && is_primary,
        i.offset(),
        is_primary,
        !m.retiring,
        m.ready,
        Reverse(m.pod.as_str()),
    )
}

/// Chooses the new primary, or says why none is chosen now: no member that
/// answers holds the data while a silent one may, or a silent member was
/// ahead of the best one that answers.
fn elect<'a>(
    members: &'a [Member],
    cause: Cause,
    excluded: Option<&str>,
    tainted_replid: Option<&str>,
    recorded_claim: Option<&str>,
    settings: &Settings,
    now: Timestamp,
) -> Result<&'a Member, (Waiting, Duration)> {
    let prefer_primaries = cause == Cause::NoRecord;
    let restarted = cause == Cause::PrimaryRestarted;
    let best = |c: &[Candidate<'a>]| {
        c.iter()
            .copied()
            .max_by(|a, b| rank(*a, prefer_primaries).cmp(&rank(*b, prefer_primaries)))
            .map(|(m, _)| m)
    };
    let alive: Vec<Candidate> = members
        .iter()
        .filter(|m| !m.deleting)
        .filter_map(|m| m.info().map(|i| (m, i)))
        .collect();
    let empty = |(m, i): Candidate| {
        follows_placeholder(i)
            || (restarted && excluded == Some(m.pod.as_str()))
            || tainted_replid.is_some_and(|t| i.master_replid == t)
    };
    let holders: Vec<Candidate> = alive
        .iter()
        .copied()
        .filter(|(m, i)| excluded != Some(m.pod.as_str()) && !i.sync_in_progress)
        .filter(|c| !empty(*c))
        .collect();
    let no_candidate = (Waiting::NoCandidate, CONVERGE_PERIOD);
    if let Some(b) = best(&holders) {
        if cause == Cause::PrimaryUnreachable
            && let Some(w) = follower_silent(members, b, excluded)
        {
            return Err(w);
        }
        return match ahead_of(members, b, excluded, settings, now) {
            Some(w) => Err(w),
            None => Ok(b),
        };
    }
    // Nobody holds the data by replication: every member restarted. With
    // claims, the one on the recorded primary's claim loaded the newest
    // data from it; wait for it while its claim exists.
    if let Some(claim) = recorded_claim {
        return alive
            .iter()
            .find(|(m, i)| m.claim.as_deref() == Some(claim) && !i.sync_in_progress)
            .map(|(m, _)| *m)
            .ok_or((
                Waiting::PrimaryClaim {
                    claim: claim.to_string(),
                },
                CONVERGE_PERIOD,
            ));
    }
    // Nobody who answers holds the data. If a silent member may (the old
    // primary among them), wait for it rather than start empty. A new Redis
    // (nothing recorded) does not wait for Pods that never answered.
    if !prefer_primaries && members.iter().any(Member::may_hold_data_unseen) {
        return Err(no_candidate);
    }
    best(&alive).ok_or(no_candidate)
}

/// With the primary `excluded` silent (not known stopped): a silent member
/// other than `candidate` that may still follow it, so that a promotion now
/// could leave two primaries able to acknowledge writes
/// ([`Waiting::ReplicaSilent`]). One last seen as a linked replica, or
/// never seen by this operator process (a new leader knows nothing yet),
/// counts; one whose Pod is going or whose container stopped does not.
fn follower_silent(
    members: &[Member],
    candidate: &Member,
    excluded: Option<&str>,
) -> Option<(Waiting, Duration)> {
    let primary = excluded?;
    members
        .iter()
        .filter(|m| m.pod != primary && m.pod != candidate.pod)
        .filter(|m| m.may_hold_data_unseen())
        .find(|m| match &m.observed {
            Observed::Unreachable { last, .. } => last.as_ref().is_none_or(|l| l.linked),
            _ => false,
        })
        .map(|m| {
            (
                Waiting::ReplicaSilent {
                    pod: m.pod.clone(),
                    primary: primary.to_string(),
                },
                CONVERGE_PERIOD,
            )
        })
}

/// A silent member (not the lost primary) that was a linked replica ahead
/// of `candidate` when last seen, in the same history: it may hold writes a
/// `WAIT 1` acknowledged that the candidate lacks, so the promotion waits
/// for it, up to [`Settings::ahead_wait`] of its silence. One whose Pod is
/// going or whose container stopped holds nothing any more.
fn ahead_of(
    members: &[Member],
    candidate: &Member,
    excluded: Option<&str>,
    settings: &Settings,
    now: Timestamp,
) -> Option<(Waiting, Duration)> {
    let c = candidate.info()?;
    members
        .iter()
        .filter(|m| excluded != Some(m.pod.as_str()) && !m.stopped)
        .filter(|m| m.may_hold_data_unseen())
        .filter_map(|m| match &m.observed {
            Observed::Unreachable {
                since,
                last: Some(last),
            } if last.linked && last.replid == c.master_replid && last.offset > c.offset() => {
                let until = since.checked_add(settings.ahead_wait()).unwrap_or(*since);
                (now < until).then(|| (m, last.offset - c.offset(), until))
            }
            _ => None,
        })
        .max_by_key(|(_, bytes, _)| *bytes)
        .map(|(m, bytes, until)| {
            let left = Duration::try_from(until.duration_since(now)).unwrap_or(CONVERGE_PERIOD);
            (
                Waiting::AheadMemberSilent {
                    pod: m.pod.clone(),
                    candidate: candidate.pod.clone(),
                    bytes,
                    until,
                },
                left.clamp(Duration::from_millis(100), CONVERGE_PERIOD),
            )
        })
}

/// Fences and repoints everyone but `primary`; the promotion goes between.
fn converge(members: &[Member], primary: &Member, promote: bool) -> Vec<Action> {
    let mut fences = Vec::new();
    let mut repoints = Vec::new();
    for m in members {
        let Some(i) = m.info() else { continue };
        if m.pod == primary.pod {
            continue;
        }
        let action = |why| Action::Replicate {
            pod: m.pod.clone(),
            ip: m.ip().to_string(),
            port: m.port,
            primary: primary.pod.clone(),
            primary_ip: primary.ip().to_string(),
            primary_port: primary.port,
            why,
        };
        if i.role == Role::Primary {
            // Even a terminating one: it must stop taking writes.
            fences.push(action(Why::Fence));
        } else if !m.deleting && !i.follows(primary.ip(), primary.port) {
            repoints.push(action(Why::Repoint));
        }
    }
    let mut actions = fences;
    if promote {
        actions.push(Action::Promote {
            pod: primary.pod.clone(),
            ip: primary.ip().to_string(),
            port: primary.port,
        });
    }
    actions.extend(repoints);
    actions
}

/// How long a replica may go without hearing from its primary and still
/// count as linked, s. Primaries ping their replicas every second
/// (podkeeper sets `repl-ping-replica-period 1`), while
/// `master_link_status` stays `up` until `repl-timeout` (60 s) on a link
/// whose packets are dropped.
pub const LINK_SILENCE_MAX_SECONDS: i64 = 3;

/// Whether `m` is a linked, caught-up replica of `primary`, hearing from it.
pub fn linked_to(m: &Member, primary: &Member) -> bool {
    let (Some(i), Some(p)) = (m.info(), primary.info()) else {
        return false;
    };
    i.follows(primary.ip(), primary.port)
        && i.link_up
        && !i.sync_in_progress
        && i.master_last_io_seconds
            .is_none_or(|s| s <= LINK_SILENCE_MAX_SECONDS)
        && p.replica(m.ip(), m.port).is_some_and(|r| r.online())
}

fn switchover_target<'a>(members: &'a [Member], primary: &Member) -> Option<&'a Member> {
    members
        .iter()
        .filter(|m| m.pod != primary.pod && !m.deleting && !m.retiring && m.ready)
        .filter(|m| linked_to(m, primary))
        .max_by_key(|m| (m.info().map(|i| i.offset()), Reverse(m.pod.as_str())))
}

/// The member a requested switchover goes to; `None` when the named member
/// is the primary already; why not, when no member may take it.
fn requested_target<'a>(
    members: &'a [Member],
    primary: &Member,
    requested: &Requested,
) -> Result<Option<&'a Member>, String> {
    let named = match requested {
        Requested::Best => {
            return switchover_target(members, primary)
                .map(Some)
                .ok_or_else(|| {
                    "no replica is linked to the primary, caught up and ready".to_string()
                });
        }
        Requested::To(pod) if *pod == primary.pod => return Ok(None),
        Requested::To(pod) => pod,
    };
    let Some(m) = members.iter().find(|m| m.pod == *named) else {
        return Err(format!("{named} is not a member of this Redis"));
    };
    if m.deleting || m.retiring {
        Err(format!("{named} is about to be replaced or removed"))
    } else if !m.ready {
        Err(format!("{named} is not Ready"))
    } else if !linked_to(m, primary) {
        Err(format!(
            "{named} is not a linked, caught-up replica of the primary {}",
            primary.pod
        ))
    } else {
        Ok(Some(m))
    }
}

/// The plan for one reconcile.
pub fn plan(
    members: &[Member],
    recorded: Option<&RecordedPrimary>,
    settings: &Settings,
    now: Timestamp,
) -> Plan {
    let keep = |waiting, requeue_after| Plan {
        primary: recorded.map(|r| r.pod.clone()),
        record: recorded.cloned(),
        actions: Vec::new(),
        cause: None,
        waiting: Some(waiting),
        replicated: false,
        requeue_after,
    };
    if members.is_empty() {
        return keep(Waiting::NoMembers, RESYNC_PERIOD);
    }
    if members
        .iter()
        .filter_map(Member::info)
        .any(ReplicationInfo::failover_in_progress)
    {
        return keep(Waiting::SwitchoverInProgress, CONVERGE_PERIOD);
    }
    let (primary, promote, cause) = match current(members, recorded, settings, now) {
        Current::Wait(w, after) => return keep(w, after),
        Current::Healthy(p) => (p, false, None),
        Current::Lost {
            cause,
            excluded,
            tainted_replid,
        } => match elect(
            members,
            cause,
            excluded,
            tainted_replid.as_deref(),
            recorded.and_then(|r| r.claim.as_deref()),
            settings,
            now,
        ) {
            Err((w, after)) => return keep(w, after),
            Ok(p) => {
                let is_primary = p.info().is_some_and(|i| i.role == Role::Primary);
                (p, !is_primary, Some(cause))
            }
        },
    };
    let record = primary.info().map(|i| {
        RecordedPrimary::next(recorded, &primary.pod, &i.run_id, primary.claim.as_deref())
    });
    let mut actions = converge(members, primary, promote);
    let mut waiting = None;
    let switchover = |t: &Member| Action::Switchover {
        from: primary.pod.clone(),
        from_ip: primary.ip().to_string(),
        from_port: primary.port,
        to: t.pod.clone(),
        to_ip: t.ip().to_string(),
        to_port: t.port,
        timeout: settings.switchover_timeout,
    };
    if actions.is_empty() && (primary.retiring || primary.deleting) {
        match switchover_target(members, primary) {
            Some(t) => actions.push(switchover(t)),
            None => waiting = Some(Waiting::NoSwitchoverTarget),
        }
    } else if actions.is_empty()
        && !promote
        && let Some(requested) = &settings.requested
    {
        match requested_target(members, primary, requested) {
            Ok(Some(t)) => actions.push(switchover(t)),
            Ok(None) => {
                waiting = Some(Waiting::SwitchoverNotNeeded {
                    pod: primary.pod.clone(),
                })
            }
            Err(reason) => waiting = Some(Waiting::SwitchoverRefused { reason }),
        }
    }
    let replicated = actions.is_empty()
        && !promote
        && members
            .iter()
            .filter(|m| !m.deleting && m.pod != primary.pod)
            .all(|m| linked_to(m, primary));
    Plan {
        primary: Some(primary.pod.clone()),
        record,
        actions,
        cause,
        waiting,
        replicated,
        requeue_after: if replicated && !primary.retiring {
            RESYNC_PERIOD
        } else {
            CONVERGE_PERIOD
        },
    }
}

#[cfg(test)]
mod tests;
