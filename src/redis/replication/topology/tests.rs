use super::*;
use crate::redis::replication::info::ConnectedReplica;
use proptest::prelude::*;

const PORT: u16 = 6379;
const SECOND: Duration = Duration::from_secs(1);

fn t(secs: i64) -> Timestamp {
    Timestamp::from_second(1_800_000_000 + secs).unwrap()
}

fn settings() -> Settings {
    Settings {
        failover_after: Duration::from_secs(5),
        switchover_timeout: Duration::from_secs(10),
        min_replicas_to_write: 1,
        min_replicas_max_lag_seconds: 2,
        requested: None,
    }
}

fn base(pod: &str, ip: &str, observed: Observed) -> Member {
    Member {
        pod: pod.into(),
        ip: Some(ip.into()),
        port: PORT,
        ready: true,
        deleting: false,
        stopped: false,
        retiring: false,
        claim: None,
        observed,
    }
}

fn info(role: Role, run_id: &str, offset: i64) -> ReplicationInfo {
    ReplicationInfo {
        role,
        run_id: run_id.into(),
        master_host: None,
        master_port: None,
        link_up: false,
        sync_in_progress: false,
        slave_repl_offset: None,
        master_last_io_seconds: None,
        master_repl_offset: offset,
        master_replid: "history-1".into(),
        failover_state: "no-failover".into(),
        connected_replicas: vec![],
        vitals: Default::default(),
    }
}

/// A primary; `replicas` are (ip, offset) it sees online.
fn primary(pod: &str, ip: &str, offset: i64, replicas: &[(&str, i64)]) -> Member {
    let mut i = info(Role::Primary, &format!("run-{pod}"), offset);
    i.connected_replicas = replicas
        .iter()
        .map(|(ip, off)| ConnectedReplica {
            ip: ip.to_string(),
            port: PORT,
            state: "online".into(),
            offset: *off,
            lag_seconds: 0,
        })
        .collect();
    base(pod, ip, Observed::Info(i))
}

/// A replica of `of` (an IP) with its link up or down.
fn replica(pod: &str, ip: &str, of: &str, offset: i64, link_up: bool) -> Member {
    let mut i = info(Role::Replica, &format!("run-{pod}"), offset);
    i.master_host = Some(of.into());
    i.master_port = Some(if of == PLACEHOLDER_HOST {
        PLACEHOLDER_PORT
    } else {
        PORT
    });
    i.link_up = link_up;
    i.master_last_io_seconds = link_up.then_some(0);
    i.slave_repl_offset = Some(offset);
    base(pod, ip, Observed::Info(i))
}

/// A new Pod: a replica of the placeholder that never synced.
fn fresh(pod: &str, ip: &str) -> Member {
    let mut m = replica(pod, ip, PLACEHOLDER_HOST, 1, false);
    if let Observed::Info(i) = &mut m.observed {
        i.master_replid = format!("own-{pod}");
    }
    m
}

fn silent(pod: &str, ip: &str, since: Timestamp) -> Member {
    base(pod, ip, Observed::Unreachable { since, last: None })
}

fn rec(pod: &str) -> RecordedPrimary {
    RecordedPrimary {
        pod: pod.into(),
        run_id: format!("run-{pod}"),
        term: 1,
        claim: None,
    }
}

fn rec_at(pod: &str, term: u64) -> RecordedPrimary {
    RecordedPrimary { term, ..rec(pod) }
}

fn info_mut(m: &mut Member) -> &mut ReplicationInfo {
    match &mut m.observed {
        Observed::Info(i) => i,
        _ => panic!("no info"),
    }
}

/// The three-member set in steady state: a primary at 10.0.0.1, b and c
/// linked to it.
fn steady() -> Vec<Member> {
    vec![
        primary("a", "10.0.0.1", 100, &[("10.0.0.2", 100), ("10.0.0.3", 90)]),
        replica("b", "10.0.0.2", "10.0.0.1", 100, true),
        replica("c", "10.0.0.3", "10.0.0.1", 90, true),
    ]
}

fn promoted(plan: &Plan) -> Vec<&str> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::Promote { pod, .. } => Some(pod.as_str()),
            _ => None,
        })
        .collect()
}

fn replicated_to(plan: &Plan, why: Why) -> Vec<(&str, &str)> {
    plan.actions
        .iter()
        .filter_map(|a| match a {
            Action::Replicate {
                pod,
                primary_ip,
                why: w,
                ..
            } if *w == why => Some((pod.as_str(), primary_ip.as_str())),
            _ => None,
        })
        .collect()
}

#[test]
fn a_steady_set_is_kept_as_it_is() {
    let p = plan(&steady(), Some(&rec("a")), &settings(), t(0));
    assert_eq!(p.primary.as_deref(), Some("a"));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert!(p.replicated);
    assert_eq!(p.record, Some(rec("a")));
    assert_eq!(p.waiting, None);
    assert_eq!(p.requeue_after, RESYNC_PERIOD);
    assert!(!p.may_touch("a") && p.may_touch("b"));
}

#[test]
fn a_replica_that_stopped_hearing_from_its_primary_is_not_linked() {
    // b's link is cut (packets dropped): Redis keeps master_link_status up
    // until repl-timeout, but nothing has come from a for 10 s.
    let mut m = steady();
    info_mut(&mut m[1]).master_last_io_seconds = Some(LINK_SILENCE_MAX_SECONDS + 7);
    let p = plan(&m, Some(&rec("a")), &settings(), t(0));
    assert!(!p.replicated, "not Replicated while b hears nothing");
    assert!(!linked_to(&m[1], &m[0]));
    info_mut(&mut m[1]).master_last_io_seconds = Some(LINK_SILENCE_MAX_SECONDS);
    assert!(linked_to(&m[1], &m[0]));
    assert!(plan(&m, Some(&rec("a")), &settings(), t(0)).replicated);
}

#[test]
fn a_replica_not_yet_online_keeps_replicated_false() {
    let mut m = steady();
    info_mut(&mut m[0]).connected_replicas[1].state = "send_bulk".into();
    let p = plan(&m, Some(&rec("a")), &settings(), t(0));
    assert!(p.actions.is_empty());
    assert!(!p.replicated);
    assert_eq!(p.requeue_after, CONVERGE_PERIOD);
}

#[test]
fn a_silent_primary_is_waited_for_then_the_highest_offset_is_promoted() {
    let mut m = steady();
    m[0] = silent("a", "10.0.0.1", t(0));
    m[1] = replica("b", "10.0.0.2", "10.0.0.1", 80, false);
    m[2] = replica("c", "10.0.0.3", "10.0.0.1", 95, false);
    let p = plan(&m, Some(&rec("a")), &settings(), t(4));
    assert!(p.actions.is_empty(), "no failover before failover_after");
    assert_eq!(
        p.waiting,
        Some(Waiting::PrimaryUnreachable {
            pod: "a".into(),
            until: t(5)
        })
    );
    assert_eq!(p.requeue_after, SECOND);
    assert_eq!(p.primary.as_deref(), Some("a"));

    let p = plan(&m, Some(&rec("a")), &settings(), t(5));
    assert_eq!(p.cause, Some(Cause::PrimaryUnreachable));
    assert_eq!(promoted(&p), ["c"]);
    assert_eq!(replicated_to(&p, Why::Repoint), [("b", "10.0.0.3")]);
    assert_eq!(p.primary.as_deref(), Some("c"));
    assert_eq!(p.record, Some(rec_at("c", 2)));
    assert!(!p.replicated);
}

#[test]
fn a_deleted_or_terminating_silent_primary_is_replaced_at_once() {
    let mut m = steady();
    m.remove(0);
    let p = plan(&m, Some(&rec("a")), &settings(), t(0));
    assert_eq!(p.cause, Some(Cause::PrimaryGone));
    assert_eq!(promoted(&p), ["b"]);
    assert_eq!(replicated_to(&p, Why::Repoint), [("c", "10.0.0.2")]);

    let mut m = steady();
    m[0] = silent("a", "10.0.0.1", t(0));
    m[0].deleting = true;
    let p = plan(&m, Some(&rec("a")), &settings(), t(0));
    assert_eq!(p.cause, Some(Cause::PrimaryGone));
    assert_eq!(promoted(&p), ["b"]);
}

#[test]
fn a_silent_primary_whose_container_stopped_is_replaced_at_once() {
    let mut m = steady();
    m[0] = silent("a", "10.0.0.1", t(0));
    m[1] = replica("b", "10.0.0.2", "10.0.0.1", 80, false);
    m[2] = replica("c", "10.0.0.3", "10.0.0.1", 95, false);
    m[0].stopped = true;
    let p = plan(&m, Some(&rec("a")), &settings(), t(0));
    assert_eq!(p.cause, Some(Cause::PrimaryStopped));
    assert_eq!(promoted(&p), ["c"], "the highest offset, without waiting");
    assert_eq!(replicated_to(&p, Why::Repoint), [("b", "10.0.0.3")]);

    // A stopped replica changes nothing for a primary that answers.
    let mut m = steady();
    m[1].stopped = true;
    let p = plan(&m, Some(&rec("a")), &settings(), t(0));
    assert_eq!(p.cause, None);
    assert_eq!(p.primary.as_deref(), Some("a"));
}

#[test]
fn ties_on_offset_prefer_ready_non_retiring_then_the_name() {
    let mut m = steady();
    m.remove(0);
    m[0] = replica("b", "10.0.0.2", "10.0.0.1", 90, false);
    m[1] = replica("c", "10.0.0.3", "10.0.0.1", 90, false);
    m[0].retiring = true;
    let p = plan(&m, Some(&rec("a")), &settings(), t(0));
    assert_eq!(promoted(&p), ["c"]);
    m[0].retiring = false;
    m[1].ready = false;
    let p = plan(&m, Some(&rec("a")), &settings(), t(0));
    assert_eq!(promoted(&p), ["b"]);
}

#[test]
fn data_comes_first_even_from_a_retiring_replica() {
    let mut m = steady();
    m.remove(0);
    m[0].retiring = true; // b: offset 100
    let p = plan(&m, Some(&rec("a")), &settings(), t(0));
    assert_eq!(promoted(&p), ["b"]);
}

#[test]
fn a_replica_in_full_sync_or_deleting_is_never_promoted() {
    let mut m = steady();
    m.remove(0);
    info_mut(&mut m[0]).sync_in_progress = true;
    let p = plan(&m, Some(&rec("a")), &settings(), t(0));
    assert_eq!(promoted(&p), ["c"]);
    let mut m = steady();
    m.remove(0);
    m[0].deleting = true;
    let p = plan(&m, Some(&rec("a")), &settings(), t(0));
    assert_eq!(promoted(&p), ["c"]);
    assert!(
        replicated_to(&p, Why::Repoint).is_empty(),
        "a terminating replica is left alone"
    );
}

#[test]
fn a_returning_old_primary_is_fenced() {
    // b was promoted while a was away; a comes back as a primary, even with
    // a higher offset (writes nobody acknowledged through a replica).
    let m = vec![
        primary("a", "10.0.0.1", 500, &[]),
        primary("b", "10.0.0.2", 300, &[("10.0.0.3", 300)]),
        replica("c", "10.0.0.3", "10.0.0.2", 300, true),
    ];
    let p = plan(&m, Some(&rec("b")), &settings(), t(0));
    assert_eq!(p.primary.as_deref(), Some("b"));
    assert_eq!(replicated_to(&p, Why::Fence), [("a", "10.0.0.2")]);
    assert!(promoted(&p).is_empty());
    assert_eq!(p.cause, None);
    assert!(!p.replicated);
}

#[test]
fn fences_go_before_the_promotion_and_repoints_after() {
    let m = vec![
        primary("a", "10.0.0.1", 50, &[]),
        replica("b", "10.0.0.2", "10.0.0.9", 100, false),
        replica("c", "10.0.0.3", "10.0.0.9", 90, false),
    ];
    // The recorded primary (at .9) is gone; a is a stale primary.
    let p = plan(&m, Some(&rec("x")), &settings(), t(0));
    let kinds: Vec<&str> = p
        .actions
        .iter()
        .map(|a| match a {
            Action::Replicate {
                why: Why::Fence, ..
            } => "fence",
            Action::Promote { .. } => "promote",
            Action::Replicate {
                why: Why::Repoint, ..
            } => "repoint",
            Action::Switchover { .. } => "switchover",
        })
        .collect();
    assert_eq!(kinds, ["fence", "promote", "repoint"]);
    assert_eq!(promoted(&p), ["b"]);
}

#[test]
fn a_primary_restarted_empty_behind_the_guard_is_replaced_and_demoted() {
    // a restarted: its new process is a replica of the placeholder, with a
    // new run_id. b and c kept their data (NOMASTERLINK).
    let mut m = steady();
    m[0] = fresh("a", "10.0.0.1");
    info_mut(&mut m[0]).run_id = "run-a-2".into();
    m[1] = replica("b", "10.0.0.2", "10.0.0.1", 100, false);
    m[2] = replica("c", "10.0.0.3", "10.0.0.1", 90, false);
    let p = plan(&m, Some(&rec("a")), &settings(), t(0));
    assert_eq!(p.cause, Some(Cause::PrimaryRestarted));
    assert_eq!(promoted(&p), ["b"]);
    let mut repointed = replicated_to(&p, Why::Repoint);
    repointed.sort();
    assert_eq!(repointed, [("a", "10.0.0.2"), ("c", "10.0.0.2")]);
}

#[test]
fn a_primary_restarted_empty_as_primary_never_feeds_a_promotion() {
    // Without the guard: a came back as an empty primary with a new history;
    // b already resynced from it (same master_replid); c still has the data.
    let mut a = primary("a", "10.0.0.1", 10, &[("10.0.0.2", 10)]);
    info_mut(&mut a).run_id = "run-a-2".into();
    info_mut(&mut a).master_replid = "empty".into();
    let mut b = replica("b", "10.0.0.2", "10.0.0.1", 10, true);
    info_mut(&mut b).master_replid = "empty".into();
    let c = replica("c", "10.0.0.3", "10.0.0.1", 90, false);
    let p = plan(&[a, b, c], Some(&rec("a")), &settings(), t(0));
    assert_eq!(p.cause, Some(Cause::PrimaryRestarted));
    assert_eq!(promoted(&p), ["c"]);
    assert_eq!(replicated_to(&p, Why::Fence), [("a", "10.0.0.3")]);
    assert_eq!(replicated_to(&p, Why::Repoint), [("b", "10.0.0.3")]);
}

#[test]
fn a_tainted_replica_is_not_promoted_even_with_a_higher_offset() {
    let mut a = primary("a", "10.0.0.1", 10, &[]);
    info_mut(&mut a).run_id = "run-a-2".into();
    info_mut(&mut a).master_replid = "empty".into();
    let mut b = replica("b", "10.0.0.2", "10.0.0.1", 5000, true);
    info_mut(&mut b).master_replid = "empty".into();
    let c = replica("c", "10.0.0.3", "10.0.0.1", 90, false);
    let p = plan(&[a, b, c], Some(&rec("a")), &settings(), t(0));
    assert_eq!(promoted(&p), ["c"]);
}

#[test]
fn when_every_copy_is_gone_the_restarted_primary_is_accepted() {
    let mut a = primary("a", "10.0.0.1", 10, &[("10.0.0.2", 10)]);
    info_mut(&mut a).run_id = "run-a-2".into();
    info_mut(&mut a).master_replid = "empty".into();
    let mut b = replica("b", "10.0.0.2", "10.0.0.1", 10, true);
    info_mut(&mut b).master_replid = "empty".into();
    let p = plan(&[a, b], Some(&rec("a")), &settings(), t(0));
    assert_eq!(p.primary.as_deref(), Some("a"));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(
        p.record,
        Some(RecordedPrimary {
            pod: "a".into(),
            run_id: "run-a-2".into(),
            term: 2,
            claim: None,
        })
    );
}

#[test]
fn a_single_member_that_restarted_is_promoted_again() {
    let mut a = fresh("a", "10.0.0.1");
    info_mut(&mut a).run_id = "run-a-2".into();
    let p = plan(&[a], Some(&rec("a")), &settings(), t(0));
    assert_eq!(p.cause, Some(Cause::PrimaryRestarted));
    assert_eq!(promoted(&p), ["a"]);
    assert_eq!(p.record.unwrap().run_id, "run-a-2");
}

#[test]
fn no_empty_member_is_promoted_while_the_silent_primary_may_return() {
    let m = vec![
        silent("a", "10.0.0.1", t(0)),
        fresh("b", "10.0.0.2"),
        fresh("c", "10.0.0.3"),
    ];
    let p = plan(&m, Some(&rec("a")), &settings(), t(60));
    assert!(p.actions.is_empty());
    assert_eq!(p.waiting, Some(Waiting::NoCandidate));
    assert_eq!(p.primary.as_deref(), Some("a"));
}

#[test]
fn replicas_following_an_old_ip_are_repointed() {
    // a's Pod is the same but got a new IP; b and c follow the old one.
    let m = vec![
        primary("a", "10.0.0.9", 100, &[]),
        replica("b", "10.0.0.2", "10.0.0.1", 100, false),
        replica("c", "10.0.0.3", "10.0.0.1", 90, false),
    ];
    let p = plan(&m, Some(&rec("a")), &settings(), t(0));
    assert_eq!(
        replicated_to(&p, Why::Repoint),
        [("b", "10.0.0.9"), ("c", "10.0.0.9")]
    );
    assert!(promoted(&p).is_empty());
}

#[test]
fn a_replica_of_a_recreated_pod_is_repointed_and_new_pods_join() {
    let mut m = steady();
    // b's Pod was recreated as d: a fresh replica of the placeholder.
    m[1] = fresh("d", "10.0.0.4");
    let p = plan(&m, Some(&rec("a")), &settings(), t(0));
    assert_eq!(replicated_to(&p, Why::Repoint), [("d", "10.0.0.1")]);
}

#[test]
fn a_new_redis_promotes_one_fresh_member() {
    let mut m = vec![
        fresh("c", "10.0.0.3"),
        fresh("b", "10.0.0.2"),
        fresh("a", "10.0.0.1"),
    ];
    m[2].ready = false;
    let p = plan(&m, None, &settings(), t(0));
    assert_eq!(p.cause, Some(Cause::NoRecord));
    assert_eq!(promoted(&p), ["b"]);
    assert_eq!(
        replicated_to(&p, Why::Repoint),
        [("c", "10.0.0.2"), ("a", "10.0.0.2")]
    );
}

#[test]
fn a_pod_without_an_ip_does_not_hold_up_the_first_primary() {
    let mut pending = silent("b", "x", t(0));
    pending.ip = None;
    let p = plan(&[fresh("a", "10.0.0.1"), pending], None, &settings(), t(0));
    assert_eq!(promoted(&p), ["a"]);
}

#[test]
fn without_a_record_the_running_primary_is_adopted() {
    let p = plan(&steady(), None, &settings(), t(0));
    assert_eq!(p.primary.as_deref(), Some("a"));
    assert!(p.actions.is_empty());
    assert_eq!(p.record, Some(rec("a")));
}

#[test]
fn a_promotion_that_was_not_recorded_is_adopted() {
    // b is primary and c follows it, yet status.primary names a, which is
    // gone: a status restored from an old copy, or edited by hand (podkeeper
    // records a promotion before it makes one). What runs is kept.
    let m = vec![
        primary("b", "10.0.0.2", 100, &[("10.0.0.3", 100)]),
        replica("c", "10.0.0.3", "10.0.0.2", 100, true),
    ];
    let p = plan(&m, Some(&rec("a")), &settings(), t(0));
    assert_eq!(p.primary.as_deref(), Some("b"));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(p.record, Some(rec_at("b", 2)));
}

#[test]
fn a_retiring_primary_is_switched_over_to_a_linked_ready_replica() {
    let mut m = steady();
    m[0].retiring = true;
    m[1].ready = false; // b has the highest offset but is not ready
    let p = plan(&m, Some(&rec("a")), &settings(), t(0));
    assert_eq!(
        p.actions,
        [Action::Switchover {
            from: "a".into(),
            from_ip: "10.0.0.1".into(),
            from_port: PORT,
            to: "c".into(),
            to_ip: "10.0.0.3".into(),
            to_port: PORT,
            timeout: Duration::from_secs(10),
        }]
    );
    assert_eq!(p.primary.as_deref(), Some("a"));
    assert!(
        !p.may_touch("a"),
        "the primary is not touched before the handover"
    );
}

#[test]
fn a_terminating_primary_that_answers_is_switched_over_too() {
    let mut m = steady();
    m[0].deleting = true;
    let p = plan(&m, Some(&rec("a")), &settings(), t(0));
    assert!(matches!(&p.actions[..], [Action::Switchover { to, .. }] if to == "b"));
}

#[test]
fn switchover_waits_for_repoints_and_for_a_target() {
    let mut m = steady();
    m[0].retiring = true;
    m.push(fresh("d", "10.0.0.4"));
    let p = plan(&m, Some(&rec("a")), &settings(), t(0));
    assert_eq!(replicated_to(&p, Why::Repoint), [("d", "10.0.0.1")]);
    assert!(
        !p.actions
            .iter()
            .any(|a| matches!(a, Action::Switchover { .. }))
    );

    let mut m = steady();
    m[0].retiring = true;
    m[1].retiring = true;
    m[2] = replica("c", "10.0.0.3", "10.0.0.1", 90, false); // link down
    let p = plan(&m, Some(&rec("a")), &settings(), t(0));
    assert!(p.actions.is_empty());
    assert_eq!(p.waiting, Some(Waiting::NoSwitchoverTarget));
    assert!(!p.may_touch("a"));
}

fn asking(requested: Requested) -> Settings {
    Settings {
        requested: Some(requested),
        ..settings()
    }
}

fn switched_to(p: &Plan) -> Option<&str> {
    match &p.actions[..] {
        [Action::Switchover { from, to, .. }] if from == "a" => Some(to),
        _ => None,
    }
}

#[test]
fn a_requested_switchover_goes_to_the_named_member_or_the_best_one() {
    let m = steady();
    let any = plan(&m, Some(&rec("a")), &asking(Requested::Best), t(0));
    assert_eq!(switched_to(&any), Some("b"), "b has the highest offset");
    let to_c = plan(
        &m,
        Some(&rec("a")),
        &asking(Requested::To("c".into())),
        t(0),
    );
    assert_eq!(switched_to(&to_c), Some("c"));
    assert!(!to_c.may_touch("a"));
    // The primary already: nothing sent, answered as not needed.
    let to_a = plan(
        &m,
        Some(&rec("a")),
        &asking(Requested::To("a".into())),
        t(0),
    );
    assert!(to_a.actions.is_empty());
    assert_eq!(
        to_a.waiting,
        Some(Waiting::SwitchoverNotNeeded { pod: "a".into() })
    );
}

#[test]
fn a_requested_switchover_to_a_member_that_cannot_take_it_is_refused_with_the_reason() {
    let refused = |m: &[Member], to: &str| {
        let p = plan(m, Some(&rec("a")), &asking(Requested::To(to.into())), t(0));
        assert!(p.actions.is_empty(), "{:?}", p.actions);
        match p.waiting {
            Some(Waiting::SwitchoverRefused { reason }) => reason,
            w => panic!("{w:?}"),
        }
    };
    let mut m = steady();
    assert!(refused(&m, "z").contains("z is not a member"));
    m[2] = replica("c", "10.0.0.3", "10.0.0.1", 90, false);
    assert!(refused(&m, "c").contains("c is not a linked, caught-up replica of the primary a"));
    m[1].ready = false;
    assert!(refused(&m, "b").contains("b is not Ready"));
    // No replica can take it: "any" is refused too.
    let p = plan(&m, Some(&rec("a")), &asking(Requested::Best), t(0));
    assert!(matches!(p.waiting, Some(Waiting::SwitchoverRefused { .. })));
    m[1].ready = true;
    m[1].retiring = true;
    assert!(refused(&m, "b").contains("about to be replaced"));
}

#[test]
fn a_requested_switchover_waits_while_anything_else_is_done() {
    // A new member to repoint first.
    let mut m = steady();
    m.push(fresh("d", "10.0.0.4"));
    let p = plan(&m, Some(&rec("a")), &asking(Requested::Best), t(0));
    assert_eq!(replicated_to(&p, Why::Repoint), [("d", "10.0.0.1")]);
    assert_eq!(switched_to(&p), None);
    assert_eq!(p.waiting, None);
    // A FAILOVER under way.
    let mut m = steady();
    info_mut(&mut m[0]).failover_state = "waiting-for-sync".into();
    let p = plan(&m, Some(&rec("a")), &asking(Requested::Best), t(0));
    assert_eq!(p.waiting, Some(Waiting::SwitchoverInProgress));
    // A retiring primary is handed over as a rollout says, not as asked.
    let mut m = steady();
    m[0].retiring = true;
    let p = plan(
        &m,
        Some(&rec("a")),
        &asking(Requested::To("c".into())),
        t(0),
    );
    assert_eq!(switched_to(&p), Some("b"));
}

#[test]
fn during_a_failover_nothing_is_done() {
    let mut m = steady();
    info_mut(&mut m[0]).failover_state = "failover-in-progress".into();
    let p = plan(&m, Some(&rec("a")), &settings(), t(0));
    assert!(p.actions.is_empty());
    assert_eq!(p.waiting, Some(Waiting::SwitchoverInProgress));

    // The instant between the two halves of a handover: a already follows
    // b, b still follows a.
    let m = vec![
        replica("a", "10.0.0.1", "10.0.0.2", 100, false),
        replica("b", "10.0.0.2", "10.0.0.1", 100, true),
    ];
    let p = plan(&m, Some(&rec("a")), &settings(), t(0));
    assert!(p.actions.is_empty());
    assert_eq!(p.waiting, Some(Waiting::SwitchoverInProgress));
}

#[test]
fn after_a_switchover_the_new_primary_is_adopted() {
    let m = vec![
        replica("a", "10.0.0.1", "10.0.0.2", 100, true),
        primary(
            "b",
            "10.0.0.2",
            100,
            &[("10.0.0.1", 100), ("10.0.0.3", 100)],
        ),
        replica("c", "10.0.0.3", "10.0.0.1", 100, false),
    ];
    let p = plan(&m, Some(&rec("a")), &settings(), t(0));
    assert_eq!(p.primary.as_deref(), Some("b"));
    assert_eq!(p.record, Some(rec_at("b", 2)), "a new term");
    assert_eq!(p.cause, None);
    assert_eq!(replicated_to(&p, Why::Repoint), [("c", "10.0.0.2")]);
    assert!(promoted(&p).is_empty());
}

#[test]
fn no_members_no_plan() {
    let p = plan(&[], Some(&rec("a")), &settings(), t(0));
    assert_eq!(p.waiting, Some(Waiting::NoMembers));
    assert!(p.actions.is_empty());
}

// ---- properties over arbitrary observations ----

#[derive(Clone, Debug)]
enum Shape {
    Primary { offset: i64 },
    Replica { of: usize, offset: i64, link: bool },
    Fresh,
    Silent { for_secs: i64 },
}

fn shape() -> impl Strategy<Value = Shape> {
    prop_oneof![
        (0i64..200).prop_map(|offset| Shape::Primary { offset }),
        (0usize..6, 0i64..200, any::<bool>()).prop_map(|(of, offset, link)| Shape::Replica {
            of,
            offset,
            link
        }),
        Just(Shape::Fresh),
        (0i64..20).prop_map(|for_secs| Shape::Silent { for_secs }),
    ]
}

fn build(shapes: &[(Shape, bool, bool, bool)]) -> Vec<Member> {
    let ip = |n: usize| format!("10.0.0.{}", n + 1);
    shapes
        .iter()
        .enumerate()
        .map(|(n, (s, ready, deleting, retiring))| {
            let pod = format!("p{n}");
            let mut m = match s {
                Shape::Primary { offset } => primary(&pod, &ip(n), *offset, &[]),
                Shape::Replica { of, offset, link } => {
                    replica(&pod, &ip(n), &ip(*of), *offset, *link)
                }
                Shape::Fresh => fresh(&pod, &ip(n)),
                Shape::Silent { for_secs } => silent(&pod, &ip(n), t(-for_secs)),
            };
            m.ready = *ready;
            m.deleting = *deleting;
            m.retiring = *retiring;
            m
        })
        .collect()
}

/// The roles once every action of the plan has taken effect (a switchover
/// swaps the two roles).
fn roles_after(members: &[Member], p: &Plan) -> Vec<(String, Option<Role>)> {
    let mut roles: Vec<(String, Option<Role>)> = members
        .iter()
        .map(|m| (m.pod.clone(), m.info().map(|i| i.role)))
        .collect();
    let set = |roles: &mut Vec<(String, Option<Role>)>, pod: &str, r| {
        if let Some(e) = roles.iter_mut().find(|(p, _)| p == pod) {
            e.1 = Some(r);
        }
    };
    for a in &p.actions {
        match a {
            Action::Replicate { pod, .. } => set(&mut roles, pod, Role::Replica),
            Action::Promote { pod, .. } => set(&mut roles, pod, Role::Primary),
            Action::Switchover { from, to, .. } => {
                set(&mut roles, from, Role::Replica);
                set(&mut roles, to, Role::Primary);
            }
        }
    }
    roles
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn never_two_primaries_and_never_an_empty_one_over_data(
        shapes in prop::collection::vec((shape(), any::<bool>(), any::<bool>(), any::<bool>()), 1..6),
        recorded in prop::option::of(0usize..6),
    ) {
        let members = build(&shapes);
        let recorded = recorded.map(|n| rec(&format!("p{n}")));
        let p = plan(&members, recorded.as_ref(), &settings(), t(0));

        // At most one member that answers is primary afterwards, and it is
        // the plan's primary.
        let primaries: Vec<String> = roles_after(&members, &p)
            .into_iter()
            .filter(|(_, r)| *r == Some(Role::Primary))
            .map(|(pod, _)| pod)
            .collect();
        let switching = p.actions.iter().any(|a| matches!(a, Action::Switchover { .. }));
        // (While waiting, the planner changes no roles at all.)
        if p.waiting.is_none() {
            prop_assert!(primaries.len() <= 1, "{primaries:?} from {:?}", p.actions);
        } else {
            prop_assert!(p.actions.is_empty() || p.waiting == Some(Waiting::NoSwitchoverTarget));
        }
        if !p.actions.is_empty() && !switching {
            prop_assert_eq!(primaries.first(), p.primary.as_ref());
        }

        // Only a member with an address is acted on; nothing is promoted
        // twice; a switchover comes alone.
        prop_assert!(promoted(&p).len() <= 1);
        if switching {
            prop_assert_eq!(p.actions.len(), 1);
        }

        // A promoted member holds the data whenever any member that answers
        // does (it is not fresh, not syncing) and has the highest offset
        // among those that hold it.
        if let Some(new) = promoted(&p).first() {
            let m = members.iter().find(|m| m.pod == *new).unwrap();
            prop_assert!(!m.deleting);
            let holders: Vec<&Member> = members
                .iter()
                .filter(|m| !m.deleting)
                .filter(|m| m.info().is_some_and(|i| !follows_placeholder(i) && !i.sync_in_progress))
                .filter(|m| recorded.as_ref().is_none_or(|r| r.pod != m.pod))
                .collect();
            if !holders.is_empty() {
                let best = holders.iter().map(|h| h.info().unwrap().offset()).max().unwrap();
                prop_assert!(m.info().unwrap().offset() >= best);
            }
        }

        // The engine may touch every Pod but the primary.
        if let Some(pp) = &p.primary {
            prop_assert!(!p.may_touch(pp));
        }
    }
}

/// A silent replica `pod` last seen linked at `offset`, silent since `since`.
fn silent_ahead(pod: &str, ip: &str, since: Timestamp, offset: i64) -> Member {
    base(
        pod,
        ip,
        Observed::Unreachable {
            since,
            last: Some(LastSeen {
                offset,
                replid: "history-1".into(),
                linked: true,
            }),
        },
    )
}

#[test]
fn a_primary_its_replicas_still_hear_is_not_failed_over() {
    // The operator lost a (silent past failover_after), but b's link to a is
    // up with traffic a second ago: the operator is the one cut off.
    let members = vec![
        silent("a", "10.0.0.1", t(0)),
        replica("b", "10.0.0.2", "10.0.0.1", 100, true),
        replica("c", "10.0.0.3", "10.0.0.1", 100, false),
    ];
    let p = plan(&members, Some(&rec("a")), &settings(), t(30));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(p.primary.as_deref(), Some("a"));
    assert_eq!(
        p.waiting,
        Some(Waiting::OperatorCutOff {
            pod: "a".into(),
            witness: "b".into()
        })
    );
    // No traffic for as long as a failover waits: no witness.
    let mut stale = members.clone();
    info_mut(&mut stale[1]).master_last_io_seconds = Some(5);
    let p = plan(&stale, Some(&rec("a")), &settings(), t(30));
    assert_eq!(promoted(&p), ["b"]);
    // A link that is down, or a replica of someone else, is no witness.
    let mut down = members.clone();
    info_mut(&mut down[1]).link_up = false;
    info_mut(&mut down[1]).master_last_io_seconds = None;
    assert_eq!(
        promoted(&plan(&down, Some(&rec("a")), &settings(), t(30))),
        ["b"]
    );
    // A primary whose Pod is going, or whose container stopped, is replaced
    // whatever its replicas last heard.
    let mut stopped = members.clone();
    stopped[0].stopped = true;
    assert_eq!(
        promoted(&plan(&stopped, Some(&rec("a")), &settings(), t(30))),
        ["b"]
    );
}

#[test]
fn a_silent_replica_of_a_silent_primary_holds_the_promotion_back_until_accounted_for() {
    // a (primary) and b fell silent together at t(0); b was a linked
    // replica when last seen; c answers. Promoting c could leave a with b
    // as a replica that still acknowledges a's writes.
    let members = vec![
        silent("a", "10.0.0.1", t(0)),
        silent_ahead("b", "10.0.0.2", t(0), 400),
        replica("c", "10.0.0.3", "10.0.0.1", 400, false),
    ];
    for at in [t(6), t(600), t(86_400)] {
        let p = plan(&members, Some(&rec("a")), &settings(), at);
        assert!(p.actions.is_empty(), "{:?}", p.actions);
        assert_eq!(
            p.waiting,
            Some(Waiting::ReplicaSilent {
                pod: "b".into(),
                primary: "a".into()
            }),
            "no time bound: a bound would only delay the loss"
        );
    }
    // Never seen by this operator process (a new leader): it may follow a.
    let mut unknown = members.clone();
    unknown[1] = silent("b", "10.0.0.2", t(0));
    assert!(promoted(&plan(&unknown, Some(&rec("a")), &settings(), t(6))).is_empty());
    // Accounted for: its Pod going, its container stopped, last seen not
    // linked (following no one: it cannot acknowledge a's writes), or the
    // primary known stopped (it takes no writes).
    let accounted: [fn(&mut Vec<Member>); 4] = [
        |m| m[1].deleting = true,
        |m| m[1].stopped = true,
        |m| {
            m[1].observed = Observed::Unreachable {
                since: t(0),
                last: Some(LastSeen {
                    offset: 400,
                    replid: "history-1".into(),
                    linked: false,
                }),
            }
        },
        |m| m[0].stopped = true,
    ];
    for (i, account) in accounted.iter().enumerate() {
        let mut m = members.clone();
        account(&mut m);
        assert_eq!(
            promoted(&plan(&m, Some(&rec("a")), &settings(), t(6))),
            ["c"],
            "case {i}"
        );
    }
}

#[test]
fn a_silent_replica_that_was_ahead_holds_the_promotion_back_for_a_while() {
    // a (primary) stopped (its container reported not running) and b fell
    // silent at t(0); b was a linked replica at offset 500 when last seen;
    // c answers at 400.
    let mut a = silent("a", "10.0.0.1", t(0));
    a.stopped = true;
    let members = vec![
        a,
        silent_ahead("b", "10.0.0.2", t(0), 500),
        replica("c", "10.0.0.3", "10.0.0.1", 400, false),
    ];
    let p = plan(&members, Some(&rec("a")), &settings(), t(6));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    let wait_until = t(0)
        .checked_add(settings().failover_after * AHEAD_WAIT_FACTOR)
        .unwrap();
    assert_eq!(
        p.waiting,
        Some(Waiting::AheadMemberSilent {
            pod: "b".into(),
            candidate: "c".into(),
            bytes: 100,
            until: wait_until,
        })
    );
    // Bounded: past the wait, c is promoted.
    let p = plan(&members, Some(&rec("a")), &settings(), wait_until);
    assert_eq!(promoted(&p), ["c"]);
    // Its Pod going, or its container stopped, ends the wait at once.
    for gone in [
        |m: &mut Member| m.deleting = true,
        |m: &mut Member| m.stopped = true,
    ] {
        let mut m = members.clone();
        gone(&mut m[1]);
        assert_eq!(
            promoted(&plan(&m, Some(&rec("a")), &settings(), t(6))),
            ["c"]
        );
    }
    // Not ahead of the candidate, or of another history, or not linked
    // when last seen: no wait.
    for (offset, replid, linked) in [
        (400, "history-1", true),
        (500, "other", true),
        (500, "history-1", false),
    ] {
        let mut m = members.clone();
        m[1].observed = Observed::Unreachable {
            since: t(0),
            last: Some(LastSeen {
                offset,
                replid: replid.into(),
                linked,
            }),
        };
        assert_eq!(
            promoted(&plan(&m, Some(&rec("a")), &settings(), t(6))),
            ["c"],
            "{offset} {replid} {linked}"
        );
    }
    // The lost primary itself never holds a promotion back (what it alone
    // took was never acknowledged by a replica).
    let mut m = members.clone();
    m[0] = silent_ahead("a", "10.0.0.1", t(0), 900);
    m[0].stopped = true;
    m[1] = replica("b", "10.0.0.2", "10.0.0.1", 500, false);
    assert_eq!(
        promoted(&plan(&m, Some(&rec("a")), &settings(), t(6))),
        ["b"]
    );
}

fn on_claim(mut m: Member, claim: &str) -> Member {
    m.claim = Some(claim.into());
    m
}

fn rec_on(pod: &str, claim: &str) -> RecordedPrimary {
    RecordedPrimary {
        claim: Some(claim.into()),
        ..rec(pod)
    }
}

#[test]
fn every_member_restarted_on_its_claim_the_one_on_the_primarys_claim_is_promoted() {
    // a (on claim ca) was primary; every Pod was deleted at once and came
    // back under new names, each on its own claim, each following the
    // placeholder (what they hold came from their claims).
    let m = vec![
        on_claim(fresh("d", "10.0.0.4"), "cb"),
        on_claim(fresh("e", "10.0.0.5"), "ca"),
        on_claim(fresh("f", "10.0.0.6"), "cc"),
    ];
    let p = plan(&m, Some(&rec_on("a", "ca")), &settings(), t(0));
    assert_eq!(p.cause, Some(Cause::PrimaryGone));
    assert_eq!(promoted(&p), ["e"], "{p:?}");
    let record = p.record.unwrap();
    assert_eq!(record.claim.as_deref(), Some("ca"));
    assert_eq!(record.term, 2);
}

#[test]
fn the_member_on_the_primarys_claim_is_waited_for_while_it_does_not_answer() {
    let waiting = Some(Waiting::PrimaryClaim { claim: "ca".into() });
    // Its Pod is not there yet.
    let m = vec![
        on_claim(fresh("d", "10.0.0.4"), "cb"),
        on_claim(fresh("f", "10.0.0.6"), "cc"),
    ];
    let p = plan(&m, Some(&rec_on("a", "ca")), &settings(), t(0));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(p.waiting, waiting);
    // Its Pod runs but does not answer yet (loading its data, say).
    let mut m = m;
    m.push(on_claim(silent("e", "10.0.0.5", t(0)), "ca"));
    let p = plan(&m, Some(&rec_on("a", "ca")), &settings(), t(30));
    assert!(p.actions.is_empty(), "{:?}", p.actions);
    assert_eq!(p.waiting, waiting);
}

#[test]
fn replicas_with_data_still_win_over_the_primarys_claim_and_the_record_follows_the_claim() {
    // Only the primary's Pod went: the caught-up replica holds the data,
    // and the replacement on the old primary's claim (stale by now) is not
    // chosen.
    let m = vec![
        on_claim(fresh("d", "10.0.0.4"), "ca"),
        on_claim(replica("b", "10.0.0.2", "10.0.0.1", 100, false), "cb"),
        on_claim(replica("c", "10.0.0.3", "10.0.0.1", 90, false), "cc"),
    ];
    let p = plan(&m, Some(&rec_on("a", "ca")), &settings(), t(0));
    assert_eq!(promoted(&p), ["b"]);
    assert_eq!(p.record.unwrap().claim.as_deref(), Some("cb"));
}
