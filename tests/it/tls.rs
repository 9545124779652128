//! `spec.tls` as the control plane shows it: admission of the fields and
//! of the moves between plaintext and TLS, the CA and certificate podkeeper
//! issues (and issues again when due), the Pods and Services it gives the
//! members, and a TLS Secret that is missing, does not check out, is not
//! podkeeper's, or cannot be made reported in a condition and an Event
//! until it is put right. kwok runs no redis-server: that members take a
//! certificate up is proven on loopback (`tests/replication/tls.rs`) and on
//! kind (`kind_tls.rs`).

use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use k8s_openapi::jiff::Timestamp;
use kube::ResourceExt;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams};
use podkeeper::api::Redis;
use podkeeper::redis::certs::{self, Material};
use serde_json::json;

use crate::harness::{TestEnv, owned_by, wait_for};
use crate::redis_wiring::{condition, create};

const TIMEOUT: Duration = Duration::from_secs(90);

async fn patch(env: &TestEnv, name: &str, spec: serde_json::Value) -> Result<Redis, String> {
    env.api::<Redis>()
        .patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": spec})),
        )
        .await
        .map_err(|e| e.to_string())
}

/// Waits until the Redis's `CertificateServed` condition has `reason`;
/// its message.
async fn certificate_reason(env: &TestEnv, name: &str, reason: &str) -> String {
    let redis = env.api::<Redis>();
    wait_for(&format!("CertificateServed {reason}"), TIMEOUT, || async {
        let r = redis.get(name).await.ok()?;
        let (_, got, message) = condition(&r, "CertificateServed")?;
        (got == reason).then_some(message)
    })
    .await
}

fn value(secret: &Secret, key: &str) -> Vec<u8> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .unwrap_or_else(|| panic!("no {key}"))
        .0
        .clone()
}

fn material(secret: &Secret) -> Material {
    let get = |k: &str| value(secret, k);
    Material {
        cert: get("tls.crt"),
        key: get("tls.key"),
        ca: get("ca.crt"),
    }
}

fn tls_secret(name: &str, m: &Material) -> Secret {
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        type_: Some("kubernetes.io/tls".into()),
        data: Some(
            [("tls.crt", &m.cert), ("tls.key", &m.key), ("ca.crt", &m.ca)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), ByteString(v.clone())))
                .collect(),
        ),
        ..Default::default()
    }
}

fn now() -> i64 {
    Timestamp::now().as_second()
}

#[tokio::test]
async fn tls_fields_and_moves_between_plaintext_and_tls_are_checked_at_admission() {
    let env = TestEnv::new("tls-admission").await;
    for (spec, words) in [
        (
            json!({"tls": {"port": 6379}}),
            "spec.tls.port must differ from spec.port",
        ),
        (json!({"tls": {"port": 80}}), "spec.tls.port"),
        (
            json!({"tls": {"secretName": "Not_A_Name"}}),
            "spec.tls.secretName must be a Secret name",
        ),
        (
            json!({"config": {"tls-port": "6380"}}),
            "podkeeper sets the TLS directives from spec.tls",
        ),
    ] {
        let err = create(&env, "bad", spec.clone()).await.unwrap_err();
        assert!(err.contains(words), "{spec}: {err}");
    }
    // TLS only from the start is allowed; so is plaintext beside it.
    create(&env, "tls-only", json!({"replicas": 1, "tls": {}}))
        .await
        .unwrap();
    create(&env, "plain", json!({"replicas": 1})).await.unwrap();
    // A running plaintext Redis moves to TLS in two steps: TLS beside
    // plaintext, then plaintext off. One step is refused.
    let err = patch(&env, "plain", json!({"tls": {}})).await.unwrap_err();
    assert!(
        err.contains("spec.tls must be added to a running Redis with plaintext: true"),
        "{err}"
    );
    patch(&env, "plain", json!({"tls": {"plaintext": true}}))
        .await
        .unwrap();
    patch(&env, "plain", json!({"tls": {"plaintext": false}}))
        .await
        .unwrap();
    // And back: TLS is removed only while plaintext is on.
    let err = patch(&env, "plain", json!({"tls": null}))
        .await
        .unwrap_err();
    assert!(
        err.contains("spec.tls can be removed only while plaintext is true"),
        "{err}"
    );
    patch(&env, "plain", json!({"tls": {"plaintext": true}}))
        .await
        .unwrap();
    patch(&env, "plain", json!({"tls": null})).await.unwrap();
}

#[tokio::test]
async fn podkeeper_issues_the_members_certificate_renews_it_when_due_and_serves_tls_only() {
    let env = TestEnv::new("tls-issued").await;
    let mut op = env.start_operator();
    let r = create(&env, "cache", json!({"replicas": 2, "tls": {}}))
        .await
        .unwrap();
    let secrets = env.api::<Secret>();
    let issued = wait_for("cache-tls", TIMEOUT, || async {
        secrets.get_opt("cache-tls").await.ok().flatten()
    })
    .await;
    let ca = secrets.get("cache-ca").await.unwrap();
    let ns = env.namespace.clone();
    for s in [&issued, &ca] {
        assert_eq!(s.type_.as_deref(), Some("kubernetes.io/tls"));
        assert!(
            s.owner_references()
                .iter()
                .any(|o| o.uid == r.uid().unwrap()),
            "{} goes with the Redis",
            s.name_any()
        );
    }
    let m = material(&issued);
    let checked = certs::check(
        &m,
        &format!("cache.{ns}.svc"),
        rustls_pki_types::UnixTime::now(),
    )
    .unwrap();
    assert!(checked.not_after > now() + 89 * 24 * 3600, "{checked:?}");
    // The CA's key is in no Secret a Pod mounts.
    assert!(!issued.data.as_ref().unwrap().contains_key("ca.key"));
    // The members mount it; the Services offer the TLS port only.
    let pods = wait_for("two Pods", TIMEOUT, || async {
        let pods: Vec<Pod> = env
            .api::<Pod>()
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|p| owned_by(p, &r.uid().unwrap()))
            .collect();
        (pods.len() == 2).then_some(pods)
    })
    .await;
    for p in &pods {
        let volumes = p.spec.as_ref().unwrap().volumes.clone().unwrap();
        assert!(
            volumes
                .iter()
                .any(|v| v.secret.as_ref().and_then(|s| s.secret_name.as_deref())
                    == Some("cache-tls")),
            "{volumes:?}"
        );
    }
    for name in ["cache", "cache-replicas"] {
        let services = env.api::<Service>();
        let service = wait_for(name, TIMEOUT, || async {
            services.get_opt(name).await.ok().flatten()
        })
        .await;
        let ports: Vec<(String, i32)> = service
            .spec
            .unwrap()
            .ports
            .unwrap()
            .into_iter()
            .map(|p| (p.name.unwrap(), p.port))
            .collect();
        assert_eq!(ports, [("redis-tls".to_string(), 6380)], "{name}");
    }
    let (ok, out, _) = env.kubectl(&["events", "--for", "redis/cache"]);
    assert!(ok && out.contains("CertificateIssued"), "{out}");

    // A certificate due for renewal (ten days left) is issued again, under
    // the same CA, in the same Secret (the Pods' volume: no rollout).
    let (due_cert, due_key) = certs::issue_member(
        &String::from_utf8(value(&ca, "tls.crt")).unwrap(),
        &String::from_utf8(value(&ca, "tls.key")).unwrap(),
        &certs::member_names("cache", "cache-replicas", &ns),
        now() - 80 * 24 * 3600,
    )
    .unwrap();
    let mut due = secrets.get("cache-tls").await.unwrap();
    let data = due.data.get_or_insert_default();
    data.insert("tls.crt".into(), ByteString(due_cert.into_bytes()));
    data.insert("tls.key".into(), ByteString(due_key.into_bytes()));
    let due = secrets
        .replace("cache-tls", &PostParams::default(), &due)
        .await
        .unwrap();
    let renewed = wait_for("the renewed certificate", TIMEOUT, || async {
        let s = secrets.get("cache-tls").await.ok()?;
        (s.resource_version() != due.resource_version()).then_some(s)
    })
    .await;
    let again = certs::check(
        &material(&renewed),
        &format!("cache.{ns}.svc"),
        rustls_pki_types::UnixTime::now(),
    )
    .unwrap();
    assert!(again.not_after > now() + 89 * 24 * 3600, "{again:?}");
    assert_eq!(material(&renewed).ca, material(&issued).ca, "the same CA");
    let pods_after: Vec<String> = env
        .api::<Pod>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| owned_by(p, &r.uid().unwrap()))
        .map(|p| p.name_any())
        .collect();
    let mut before: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
    before.sort();
    let mut after = pods_after;
    after.sort();
    assert_eq!(before, after, "no Pod replaced");
    op.assert_running();
}

#[tokio::test]
async fn a_tls_secret_that_cannot_work_is_reported_until_it_is_put_right() {
    let env = TestEnv::new("tls-bad-secret").await;
    let mut op = env.start_operator();
    let ns = env.namespace.clone();
    let secrets = env.api::<Secret>();

    // Named but missing.
    create(
        &env,
        "named",
        json!({"replicas": 1, "tls": {"secretName": "named-cert"}}),
    )
    .await
    .unwrap();
    let message = certificate_reason(&env, "named", "SecretInvalid").await;
    assert!(message.contains("Secret named-cert not found"), "{message}");
    let (ok, out, _) = env.kubectl(&["events", "--for", "redis/named"]);
    assert!(ok && out.contains("TLSSecretInvalid"), "{out}");

    // A key that is not the certificate's.
    let (ca, ca_key) = certs::issue_ca("named", &ns, now()).unwrap();
    let names = certs::member_names("named", "named-replicas", &ns);
    let issue = || certs::issue_member(&ca, &ca_key, &names, now()).unwrap();
    let (cert, _) = issue();
    let (_, other_key) = issue();
    let mismatched = Material {
        cert: cert.clone().into_bytes(),
        key: other_key.into_bytes(),
        ca: ca.clone().into_bytes(),
    };
    secrets
        .create(
            &PostParams::default(),
            &tls_secret("named-cert", &mismatched),
        )
        .await
        .unwrap();
    let message = wait_for("the mismatch reported", TIMEOUT, || async {
        let m = certificate_reason(&env, "named", "SecretInvalid").await;
        m.contains("tls.key is not the key of the certificate in tls.crt")
            .then_some(m)
    })
    .await;
    assert!(message.contains("Secret named-cert"), "{message}");
    // A certificate for another name.
    let (wrong_cert, wrong_key) =
        certs::issue_member(&ca, &ca_key, &["other.example".to_string()], now()).unwrap();
    let mut s = secrets.get("named-cert").await.unwrap();
    s.data = tls_secret(
        "named-cert",
        &Material {
            cert: wrong_cert.into_bytes(),
            key: wrong_key.into_bytes(),
            ca: ca.clone().into_bytes(),
        },
    )
    .data;
    secrets
        .replace("named-cert", &PostParams::default(), &s)
        .await
        .unwrap();
    wait_for("the wrong name reported", TIMEOUT, || async {
        let m = certificate_reason(&env, "named", "SecretInvalid").await;
        m.contains(&format!("does not verify for named.{ns}.svc"))
            .then_some(())
    })
    .await;
    // Put right: no longer invalid (kwok's members never answer, so what
    // they serve stays unconfirmed).
    let (good_cert, good_key) = issue();
    let mut s = secrets.get("named-cert").await.unwrap();
    s.data = tls_secret(
        "named-cert",
        &Material {
            cert: good_cert.into_bytes(),
            key: good_key.into_bytes(),
            ca: ca.into_bytes(),
        },
    )
    .data;
    secrets
        .replace("named-cert", &PostParams::default(), &s)
        .await
        .unwrap();
    let message = certificate_reason(&env, "named", "Unconfirmed").await;
    assert!(message.contains("did not answer"), "{message}");

    // A Secret of the issued certificate's name that podkeeper did not
    // make is never overwritten.
    let foreign = Material {
        cert: b"not a certificate".to_vec(),
        key: b"x".to_vec(),
        ca: b"y".to_vec(),
    };
    secrets
        .create(&PostParams::default(), &tls_secret("taken-tls", &foreign))
        .await
        .unwrap();
    create(&env, "taken", json!({"replicas": 1, "tls": {}}))
        .await
        .unwrap();
    let message = certificate_reason(&env, "taken", "SecretInvalid").await;
    assert!(
        message.contains("Secret taken-tls exists and was not made by podkeeper"),
        "{message}"
    );
    assert_eq!(
        material(&secrets.get("taken-tls").await.unwrap()).cert,
        foreign.cert,
        "left as it was"
    );
    secrets
        .delete("taken-tls", &DeleteParams::default())
        .await
        .unwrap();
    wait_for(
        "the issued Secret once the other is gone",
        TIMEOUT,
        || async {
            let s = secrets.get_opt("taken-tls").await.ok().flatten()?;
            (material(&s).cert != foreign.cert).then_some(())
        },
    )
    .await;
    op.assert_running();
}

/// The API server refuses the Secrets podkeeper issues (a quota of no
/// Secrets): the Redis says why, and once the quota is lifted the CA and
/// the certificate are made with no other change.
#[tokio::test]
async fn issued_secrets_refused_by_a_quota_are_made_once_it_is_lifted() {
    let env = TestEnv::new("tls-quota").await;
    env.cap("secrets", 0).await;
    let mut op = env.start_operator();
    create(&env, "capped", json!({"replicas": 1, "tls": {}}))
        .await
        .unwrap();
    let message = certificate_reason(&env, "capped", "SecretInvalid").await;
    assert!(
        message.contains("cannot create Secret capped-ca") && message.contains("quota"),
        "{message}"
    );
    env.uncap("secrets").await;
    let secrets = env.api::<Secret>();
    wait_for("the issued Secrets", TIMEOUT, || async {
        secrets.get_opt("capped-tls").await.ok().flatten()?;
        secrets.get_opt("capped-ca").await.ok().flatten()
    })
    .await;
    certificate_reason(&env, "capped", "Unconfirmed").await;
    op.assert_running();
}
