//! TLS on kind, with real redis-server members and a client writing over
//! TLS the whole time (openssl, verifying the members against the Redis's
//! CA and `<name>.<namespace>.svc`): a certificate podkeeper issues again
//! is taken up by every member without a restart, plaintext is off, a
//! failover happens over TLS; and a running plaintext Redis moves to TLS
//! only (TLS beside plaintext, then plaintext off), its replication onto
//! TLS, with writers on both, and back (plaintext on again, then TLS
//! removed). Writes refused during each change are counted; acknowledged
//! writes lost: none.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Secret, Service};
use kube::Api;
use podkeeper::api::Redis;
use podkeeper::redis::certs;
use podkeeper_dev::bench::redis::session::{CLIENT, InvariantWatch, Session, now};
use podkeeper_dev::bench::redis::{self as bench, writer};
use podkeeper_dev::kind::versions::REDIS_IMAGE;
use serde_json::json;

use crate::harness::{TestEnv, wait_for};
use crate::kind_auth::{fail_over, members};
use crate::kind_under_writes::{assert_nothing_lost, session};

const TIMEOUT: Duration = Duration::from_secs(300);
const TLS_PORT: u16 = 6380;

/// The ports Service `name` serves.
async fn service_ports(env: &TestEnv, name: &str) -> Vec<i32> {
    let service = env.api::<Service>().get(name).await.unwrap();
    service
        .spec
        .unwrap()
        .ports
        .unwrap()
        .iter()
        .map(|p| p.port)
        .collect()
}

/// Gives the client Pod `pod` the Redis's CA and name: its writer and
/// read-back go over TLS from then on, verifying the members.
async fn trust(s: &Session, env: &TestEnv, pod: &str, redis: &str, secret: &str) {
    let ca = wait_for("the TLS Secret", TIMEOUT, || async {
        let s = env.api::<Secret>().get_opt(secret).await.ok().flatten()?;
        Some(s.data?.get("ca.crt")?.0.clone())
    })
    .await;
    let ca = String::from_utf8(ca).unwrap();
    s.sh(
        pod,
        &format!(
            "printf '%s' '{ca}' > {ca_file}.new && mv {ca_file}.new {ca_file} && printf %s {redis}.{ns}.svc > {name_file}",
            ca_file = writer::TLS_CA_FILE,
            name_file = writer::TLS_NAME_FILE,
            ns = env.namespace,
        ),
    )
    .unwrap();
}

/// The SHA-256 fingerprint of the certificate the member at `ip` serves on
/// the TLS port, as a client sees it (hex, lower case).
fn served(s: &Session, pod: &str, ip: &str) -> String {
    let out = s
        .sh(
            pod,
            &format!(
                "openssl s_client -connect {ip}:{TLS_PORT} -CAfile {} </dev/null 2>/dev/null | openssl x509 -noout -fingerprint -sha256",
                writer::TLS_CA_FILE
            ),
        )
        .unwrap_or_default();
    out.trim()
        .rsplit('=')
        .next()
        .unwrap_or_default()
        .replace(':', "")
        .to_lowercase()
}

/// The fingerprint of the certificate in Secret `name`.
async fn in_secret(env: &TestEnv, name: &str, redis: &str) -> Option<String> {
    let s = env.api::<Secret>().get_opt(name).await.ok()??;
    let data = s.data?;
    let m = certs::Material {
        cert: data.get("tls.crt")?.0.clone(),
        key: data.get("tls.key")?.0.clone(),
        ca: data.get("ca.crt")?.0.clone(),
    };
    certs::check(
        &m,
        &certs::server_name(redis, &env.namespace),
        rustls_pki_types::UnixTime::now(),
    )
    .ok()
    .map(|c| c.fingerprint)
}

fn condition(r: &Redis, type_: &str) -> Option<(String, String)> {
    r.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone()))
}

/// Refused writes of `pod`'s writer that ended between `from` and `to`.
fn refused(s: &Session, pod: &str, from: f64, to: f64) -> Vec<(String, usize)> {
    let (attempts, _) = s.writes_in(pod).unwrap();
    writer::refusals(&attempts, from, to)
}

#[tokio::test]
async fn a_redis_over_tls_only_takes_a_renewed_certificate_up_under_writes_without_a_restart_and_fails_over()
 {
    let env = TestEnv::new("kind-tls").await;
    let s = session(&env).await;
    let name = "cache";
    s.create_redis_spec(
        name,
        json!({"replicas": 3, "port": 6379, "image": REDIS_IMAGE, "tls": {}}),
    )
    .await
    .unwrap();
    s.settled(name, 3, TIMEOUT).await.unwrap();
    trust(&s, &env, CLIENT, name, "cache-tls").await;
    let host = s.cluster_ip(name).await.unwrap();
    s.start_writer(&host, TLS_PORT, 1).await.unwrap();
    s.writes_accepted(300).await.unwrap();
    let watch = InvariantWatch::start(&s, name);
    let redises: Api<Redis> = env.api();
    wait_for("CertificateServed", TIMEOUT, || async {
        let r = redises.get(name).await.ok()?;
        (condition(&r, "CertificateServed")? == ("True".into(), "Served".into())).then_some(())
    })
    .await;

    // Plaintext is off: nothing answers on 6379; TLS with a client that
    // does not trust the CA is refused.
    let before = members(&env, name).await;
    assert_eq!(before.len(), 3);
    let first = in_secret(&env, "cache-tls", name).await.unwrap();
    for (_, ip, _) in before.values() {
        let plain = s
            .sh(
                CLIENT,
                &format!("redis-cli -h {ip} -p 6379 ping 2>&1; true"),
            )
            .unwrap();
        assert!(!plain.contains("PONG"), "{plain}");
        assert_eq!(served(&s, CLIENT, ip), first);
        let untrusted = s
            .sh(
                CLIENT,
                &format!("echo | openssl s_client -connect {ip}:{TLS_PORT} -verify_return_error 2>&1 >/dev/null | grep -c 'verify error' ; true"),
            )
            .unwrap();
        assert_ne!(untrusted.trim(), "0", "a client without the CA is refused");
    }

    // The certificate issued again (its Secret deleted: podkeeper makes a
    // new one under the same CA). The kubelet writes it into every Pod;
    // the operator has each member read it: every member serves it, with
    // no Pod replaced or restarted, and writes go on.
    let renewing = now();
    env.api::<Secret>()
        .delete("cache-tls", &Default::default())
        .await
        .unwrap();
    let second = wait_for("a new certificate", TIMEOUT, || async {
        let f = in_secret(&env, "cache-tls", name).await?;
        (f != first).then_some(f)
    })
    .await;
    wait_for(
        "every member serving the new certificate",
        TIMEOUT,
        || async {
            let now = members(&env, name).await;
            now.values()
                .all(|(_, ip, _)| served(&s, CLIENT, ip) == second)
                .then_some(())
        },
    )
    .await;
    let renewed = now();
    assert_eq!(
        members(&env, name).await,
        before,
        "no Pod replaced or restarted"
    );
    crate::redis::events_with_reasons(&env, &["CertificateIssued", "CertificateReloaded"]).await;
    s.writes_accepted(100).await.unwrap();
    eprintln!(
        "writes refused while the certificate was renewed ({:.0} s): {:?}",
        renewed - renewing,
        refused(&s, CLIENT, renewing, renewed)
    );

    // A failover over TLS: the primary deleted, a replica promoted.
    let failing = now();
    fail_over(&env, name).await;
    s.writes_accepted(100).await.unwrap();
    s.settled(name, 3, TIMEOUT).await.unwrap();
    eprintln!(
        "writes refused around the failover: {:?}",
        refused(&s, CLIENT, failing, now())
    );
    // The replacement serves the current certificate from its start.
    for (_, ip, _) in members(&env, name).await.values() {
        assert_eq!(served(&s, CLIENT, ip), second);
    }

    let w = bench::wind_up_on(&s, CLIENT, "w", &host, TLS_PORT, watch)
        .await
        .unwrap();
    eprintln!("{w:?}");
    assert_nothing_lost(&w);
}

#[tokio::test]
async fn a_running_redis_moves_to_tls_only_and_back_under_writes_and_loses_no_write() {
    let env = TestEnv::new("kind-tls-move").await;
    let s = session(&env).await;
    let name = "moving";
    s.create_redis(name, 3, REDIS_IMAGE).await.unwrap();
    s.settled(name, 3, TIMEOUT).await.unwrap();
    let host = s.cluster_ip(name).await.unwrap();
    s.start_writer(&host, 6379, 1).await.unwrap();
    s.writes_accepted(300).await.unwrap();
    let plain_watch = InvariantWatch::start(&s, name);

    // Step one: TLS beside plaintext. The members roll once; the
    // plaintext client writes on.
    let step_one = now();
    s.patch_redis(name, json!({"tls": {"plaintext": true}}))
        .await
        .unwrap();
    s.settled(name, 3, TIMEOUT).await.unwrap();
    s.writes_accepted(100).await.unwrap();
    let step_one_done = now();
    eprintln!(
        "plaintext writes refused while TLS was added ({:.0} s): {:?}",
        step_one_done - step_one,
        refused(&s, CLIENT, step_one, step_one_done)
    );

    // A client over TLS starts beside it; then the plaintext one stops.
    const TLS_CLIENT: &str = "tls-client";
    s.add_client(TLS_CLIENT, REDIS_IMAGE, None).await.unwrap();
    trust(&s, &env, TLS_CLIENT, name, "moving-tls").await;
    s.start_writer_in(TLS_CLIENT, "t", &host, TLS_PORT, 1)
        .await
        .unwrap();
    s.writes_accepted_in(TLS_CLIENT, 200).await.unwrap();
    let tls_watch = InvariantWatch::start(&s, name);
    let plain = bench::wind_up_on(&s, CLIENT, "w", &host, 6379, plain_watch)
        .await
        .unwrap();
    eprintln!("plaintext writer: {plain:?}");
    assert_nothing_lost(&plain);

    // Step two: plaintext off. The members roll again, and replication
    // moves onto TLS.
    let step_two = now();
    s.patch_redis(name, json!({"tls": {"plaintext": false}}))
        .await
        .unwrap();
    s.settled(name, 3, TIMEOUT).await.unwrap();
    s.writes_accepted_in(TLS_CLIENT, 100).await.unwrap();
    let step_two_done = now();
    eprintln!(
        "TLS writes refused while plaintext was turned off ({:.0} s): {:?}",
        step_two_done - step_two,
        refused(&s, TLS_CLIENT, step_two, step_two_done)
    );
    assert_eq!(service_ports(&env, name).await, [i32::from(TLS_PORT)]);
    // Every replica follows its primary on the TLS port.
    let operator = env
        .api::<Secret>()
        .get("moving-podkeeper")
        .await
        .unwrap()
        .data
        .unwrap()["password"]
        .0
        .clone();
    let operator = String::from_utf8(operator).unwrap();
    let primary = env
        .api::<Redis>()
        .get(name)
        .await
        .unwrap()
        .primary_pod()
        .unwrap()
        .to_string();
    for (pod, (_, ip, _)) in members(&env, name).await {
        if pod == primary {
            continue;
        }
        let info = s
            .sh(
                TLS_CLIENT,
                &format!(
                    "REDISCLI_AUTH={operator} redis-cli --tls --cacert {} --user podkeeper -h {ip} -p {TLS_PORT} info replication",
                    writer::TLS_CA_FILE
                ),
            )
            .unwrap();
        assert!(
            info.contains(&format!("master_port:{TLS_PORT}"))
                && info.contains("master_link_status:up"),
            "{pod}: {info}"
        );
    }

    // And back. Step three: plaintext on again beside TLS (the members
    // roll; replication goes back onto plaintext member by member); the
    // TLS client writes on, then a plaintext client starts beside it and
    // the TLS one stops.
    let step_three = now();
    s.patch_redis(name, json!({"tls": {"plaintext": true}}))
        .await
        .unwrap();
    s.settled(name, 3, TIMEOUT).await.unwrap();
    s.writes_accepted_in(TLS_CLIENT, 100).await.unwrap();
    let step_three_done = now();
    eprintln!(
        "TLS writes refused while plaintext was turned on again ({:.0} s): {:?}",
        step_three_done - step_three,
        refused(&s, TLS_CLIENT, step_three, step_three_done)
    );
    s.start_writer_in(CLIENT, "p", &host, 6379, 1)
        .await
        .unwrap();
    s.writes_accepted_in(CLIENT, 200).await.unwrap();
    let plain_watch = InvariantWatch::start(&s, name);
    let w = bench::wind_up_on(&s, TLS_CLIENT, "t", &host, TLS_PORT, tls_watch)
        .await
        .unwrap();
    eprintln!("TLS writer: {w:?}");
    assert_nothing_lost(&w);

    // Step four: TLS removed. The members roll once more; the plaintext
    // client writes on, and the Service serves plaintext only.
    let step_four = now();
    s.patch_redis(name, json!({"tls": null})).await.unwrap();
    s.settled(name, 3, TIMEOUT).await.unwrap();
    s.writes_accepted_in(CLIENT, 100).await.unwrap();
    let step_four_done = now();
    eprintln!(
        "plaintext writes refused while TLS was removed ({:.0} s): {:?}",
        step_four_done - step_four,
        refused(&s, CLIENT, step_four, step_four_done)
    );
    assert_eq!(service_ports(&env, name).await, [6379]);
    let w = bench::wind_up_on(&s, CLIENT, "p", &host, 6379, plain_watch)
        .await
        .unwrap();
    eprintln!("plaintext writer, back: {w:?}");
    assert_nothing_lost(&w);
}
