//! `spec.networkPolicy` enforced on kind, whose cluster runs
//! kube-network-policies (`kind up --network-policies`): once the policy is
//! there, a Pod the `clients` selector does not name can no longer reach
//! any member (through the Service or at a Pod IP), while the named client
//! writes on, the operator still fails the set over and the members still
//! replicate; without the policy the same Pod reaches them again.
//! Acknowledged writes lost: 0.

use std::time::Duration;

use podkeeper_dev::bench::redis::session::{CLIENT, InvariantWatch, Session};
use podkeeper_dev::bench::redis::{self as bench};
use podkeeper_dev::kind::versions::REDIS_IMAGE;
use serde_json::json;

use crate::harness::{TestEnv, wait_for};
use crate::kind_auth::{fail_over, members};
use crate::kind_under_writes::{assert_nothing_lost, session, three_members};

const TIMEOUT: Duration = Duration::from_secs(300);

/// A Pod the policy does not name.
const STRANGER: &str = "stranger";

/// Whether Pod `pod` gets `PONG` from `ip` within 3 s (a connection the
/// policy drops times out).
fn reaches(s: &Session, pod: &str, ip: &str) -> bool {
    s.sh(
        pod,
        &format!("timeout 3 redis-cli -h {ip} -p 6379 ping 2>&1; true"),
    )
    .unwrap()
    .trim()
        == "PONG"
}

/// Every address of Redis `name` a client could use: the Service's and
/// each member's.
async fn addresses(env: &TestEnv, s: &Session, name: &str) -> Vec<String> {
    let mut all = vec![s.cluster_ip(name).await.unwrap()];
    all.extend(members(env, name).await.into_values().map(|(_, ip, _)| ip));
    all
}

#[tokio::test]
async fn only_the_named_clients_reach_the_members_and_the_operator_and_replication_still_do() {
    let env = TestEnv::new("kind-netpol").await;
    let s = session(&env).await;
    let name = "guarded";
    let (ok, _, err) = s.kubectl(&["label", "pod", CLIENT, "role=writer"]);
    assert!(ok, "{err}");
    s.add_client(STRANGER, REDIS_IMAGE, None).await.unwrap();
    let host = three_members(&s, name).await;
    // Without a policy the stranger reaches every member: what is refused
    // below is the policy's doing.
    wait_for(
        "the stranger reaching every address before any policy",
        TIMEOUT,
        || async {
            let all = addresses(&env, &s, name).await;
            all.iter().all(|ip| reaches(&s, STRANGER, ip)).then_some(())
        },
    )
    .await;
    s.start_writer(&host, 6379, 1).await.unwrap();
    s.writes_accepted(200).await.unwrap();
    let watch = InvariantWatch::start(&s, name);

    s.patch_redis(
        name,
        json!({"networkPolicy": {"clients": {"matchLabels": {"role": "writer"}}}}),
    )
    .await
    .unwrap();
    wait_for("the stranger shut out", TIMEOUT, || async {
        let all = addresses(&env, &s, name).await;
        all.iter()
            .all(|ip| !reaches(&s, STRANGER, ip))
            .then_some(())
    })
    .await;
    // The named client writes on, and reaches each member.
    s.writes_accepted(200).await.unwrap();
    // (Waited for: a PING may take longer than 3 s on a loaded machine.)
    wait_for(
        "the named client reaching every address",
        TIMEOUT,
        || async {
            let all = addresses(&env, &s, name).await;
            all.iter().all(|ip| reaches(&s, CLIENT, ip)).then_some(())
        },
    )
    .await;
    // The operator still reaches the members (a failover, the replacement
    // made a replica) and the members each other (replication).
    fail_over(&env, name).await;
    s.writes_accepted(100).await.unwrap();
    s.settled(name, 3, TIMEOUT).await.unwrap();
    for ip in addresses(&env, &s, name).await {
        assert!(!reaches(&s, STRANGER, &ip), "{ip}");
    }

    // Without the policy, the stranger is let in again.
    s.patch_redis(name, json!({"networkPolicy": null}))
        .await
        .unwrap();
    wait_for("the stranger let in again", TIMEOUT, || async {
        let all = addresses(&env, &s, name).await;
        all.iter().all(|ip| reaches(&s, STRANGER, ip)).then_some(())
    })
    .await;
    let w = bench::wind_up(&s, &host, watch).await.unwrap();
    eprintln!("{w:?}");
    assert_nothing_lost(&w);
}
