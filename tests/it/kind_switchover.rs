//! A switchover a person asks for (issue 32, point 4), on kind's real
//! redis-server Pods under a client writing the whole time: `kubectl
//! annotate redis NAME podkeeper.dev/switchover-to=POD` (or `=any`) moves
//! the primary with `FAILOVER` as a rollout does; one to a member that
//! cannot take it is refused with the reason; each request is answered by
//! an Event and the annotation's removal.

use std::time::Duration;

use kube::{Api, ResourceExt};
use podkeeper::api::Redis;
use podkeeper::api::names::SWITCHOVER_ANNOTATION;
use podkeeper_dev::bench::redis::session::{self, InvariantWatch, Session};
use podkeeper_dev::bench::redis::{self as bench, writer};

use crate::harness::{TestEnv, wait_for};
use crate::kind_under_writes::{assert_nothing_lost, session, three_members};

const TIMEOUT: Duration = Duration::from_secs(300);

async fn primary(redises: &Api<Redis>, name: &str) -> Option<String> {
    Some(redises.get(name).await.ok()?.primary_pod()?.to_string())
}

/// Asks for a switchover to `to`, waits until the request is answered
/// (the annotation gone), and returns the Events' text then.
async fn ask(s: &Session, redises: &Api<Redis>, name: &str, to: &str) -> String {
    let (ok, _, err) = s.kubectl(&[
        "annotate",
        "redis",
        name,
        "--overwrite",
        &format!("{SWITCHOVER_ANNOTATION}={to}"),
    ]);
    assert!(ok, "{err}");
    wait_for("the request answered", TIMEOUT, || async {
        let r = redises.get(name).await.ok()?;
        (!r.annotations().contains_key(SWITCHOVER_ANNOTATION)).then_some(())
    })
    .await;
    let (ok, out, err) = s.kubectl(&["events", "--for", &format!("redis/{name}")]);
    assert!(ok, "{err}");
    out
}

#[tokio::test]
async fn a_switchover_asked_for_moves_the_primary_under_writes_and_one_that_cannot_be_is_refused() {
    let env = TestEnv::new("kind-w-ask").await;
    let s = session(&env).await;
    let name = "asked";
    let host = three_members(&s, name).await;
    s.start_writer(&host, 6379, 1).await.unwrap();
    s.writes_accepted(200).await.unwrap();
    let watch = InvariantWatch::start(&s, name);
    let redises: Api<Redis> = env.api();
    let first = primary(&redises, name).await.unwrap();
    let members: Vec<String> = redises
        .get(name)
        .await
        .unwrap()
        .status
        .unwrap()
        .members
        .iter()
        .map(|m| m.pod.clone())
        .collect();
    let target = members.iter().find(|p| **p != first).unwrap().clone();

    // To a named replica.
    let asked = session::now();
    let events = ask(&s, &redises, name, &target).await;
    assert!(
        events.contains("SwitchoverRequested") && events.contains(&target),
        "{events}"
    );
    wait_for("the named member primary", TIMEOUT, || async {
        (primary(&redises, name).await? == target).then_some(())
    })
    .await;
    s.settled(name, 3, TIMEOUT).await.unwrap();
    s.writes_accepted(100).await.unwrap();
    let moved = session::now();

    // To the best replica.
    let events = ask(&s, &redises, name, "any").await;
    wait_for("another member primary", TIMEOUT, || async {
        (primary(&redises, name).await? != target).then_some(())
    })
    .await;
    assert!(
        events.matches("SwitchoverRequested").count() >= 2,
        "{events}"
    );
    s.settled(name, 3, TIMEOUT).await.unwrap();
    s.writes_accepted(100).await.unwrap();
    let moved_again = session::now();

    // To a Pod that is not a member: refused, the primary stays.
    let now = primary(&redises, name).await.unwrap();
    let events = ask(&s, &redises, name, "no-such-pod").await;
    assert!(
        events.contains("SwitchoverRefused") && events.contains("no-such-pod is not a member"),
        "{events}"
    );
    // And to the primary itself: nothing to do.
    let events = ask(&s, &redises, name, &now).await;
    assert!(events.contains("SwitchoverNotNeeded"), "{events}");
    assert_eq!(primary(&redises, name).await.unwrap(), now);

    let (attempts, _) = s.writes().unwrap();
    eprintln!(
        "writes refused while the primary moved as asked, to {target} ({:.0} s): {:?}; to any ({:.0} s): {:?}",
        moved - asked,
        writer::refusals(&attempts, asked, moved),
        moved_again - moved,
        writer::refusals(&attempts, moved, moved_again),
    );
    let w = bench::wind_up(&s, &host, watch).await.unwrap();
    eprintln!("{w:?}");
    assert_nothing_lost(&w);
}
