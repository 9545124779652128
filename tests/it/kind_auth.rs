//! The clients' password on kind, with real redis-server members: changing
//! its Secret while a client writes reaches every running member without a
//! restart, old and new both taken until every member has the new one, and
//! leaves neither the operator (its own Redis user) nor replication locked
//! out; the Secret deleted meanwhile is reported, not made again, and a
//! failover still happens without it.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use podkeeper::api::Redis;
use podkeeper_dev::bench::redis::session::{self, CLIENT, InvariantWatch, Session};
use podkeeper_dev::bench::redis::{self as bench, writer};
use podkeeper_dev::kind::versions::REDIS_IMAGE;
use serde_json::json;

use crate::harness::{TestEnv, wait_for};
use crate::kind_under_writes::{assert_nothing_lost, session, three_members};

const TIMEOUT: Duration = Duration::from_secs(300);

/// The member Pods of `name`: name -> (uid, IP, container restarts).
pub(crate) async fn members(env: &TestEnv, name: &str) -> BTreeMap<String, (String, String, i32)> {
    let pods: Api<Pod> = env.api();
    pods.list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={name}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let status = p.status.clone().unwrap_or_default();
            let restarts = status
                .container_statuses
                .iter()
                .flatten()
                .map(|c| c.restart_count)
                .sum();
            (
                p.name_any(),
                (
                    p.uid().unwrap(),
                    status.pod_ip.unwrap_or_default(),
                    restarts,
                ),
            )
        })
        .collect()
}

/// What the member at `ip` answers `PING` from a client logging in with
/// `password`: `PONG`, or the refusal.
fn login(s: &Session, ip: &str, password: &str) -> String {
    login_as(s, ip, "default", password)
}

#[tokio::test]
async fn a_changed_password_reaches_every_member_under_writes_without_a_restart_a_deleted_one_is_not_replaced_and_no_write_is_lost()
 {
    let env = TestEnv::new("kind-auth").await;
    let s = session(&env).await;
    let name = "cache";
    let secrets: Api<Secret> = env.api();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "cache-auth"},
        "stringData": {"password": "old-password"}
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    s.create_redis_spec(
        name,
        json!({"replicas": 3, "port": 6379, "image": REDIS_IMAGE,
               "auth": {"secretName": "cache-auth", "key": "password"}}),
    )
    .await
    .unwrap();
    s.settled(name, 3, TIMEOUT).await.unwrap();
    let host = s.cluster_ip(name).await.unwrap();
    let set_password = |pw: &str| {
        s.sh(
            CLIENT,
            &format!(
                "printf %s '{pw}' > {f}.new && mv {f}.new {f}",
                f = writer::PASSWORD_FILE
            ),
        )
        .unwrap();
    };
    set_password("old-password");
    s.start_writer(&host, 6379, 1).await.unwrap();
    s.writes_accepted(300).await.unwrap();
    let watch = InvariantWatch::start(&s, name);
    let before = members(&env, name).await;
    assert_eq!(before.len(), 3);

    // The Secret changes. Every member takes the new password, and, once
    // all of them do, no longer the old one; no Pod is replaced or
    // restarted for it.
    secrets
        .patch(
            "cache-auth",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": "new-password"}})),
        )
        .await
        .unwrap();
    wait_for("every member on the new password only", TIMEOUT, || async {
        let now = members(&env, name).await;
        let done = now.values().all(|(_, ip, _)| {
            login(&s, ip, "new-password") == "PONG" && login(&s, ip, "old-password") != "PONG"
        });
        done.then_some(())
    })
    .await;
    assert_eq!(
        members(&env, name).await,
        before,
        "no Pod replaced or restarted"
    );

    // The client moves to the new password, as one that reloads its
    // configuration would.
    set_password("new-password");
    s.writes_accepted(200).await.unwrap();

    // The Secret deleted while the Redis serves: not made again with
    // another password (which would lock the clients out) but reported;
    // the operator acts on (its own user): the primary deleted meanwhile
    // is failed over to a running member, and writes go on. Put back, the
    // Secret is read again and the primary's replacement starts with it.
    let kept = secrets.get("cache-auth").await.unwrap();
    secrets
        .delete("cache-auth", &Default::default())
        .await
        .unwrap();
    let redises: Api<Redis> = env.api();
    let reason = |r: Redis| {
        r.status?
            .conditions
            .into_iter()
            .find(|c| c.type_ == "Replicated")
            .map(|c| (c.reason, c.message))
    };
    wait_for("AuthSecretUnreadable", TIMEOUT, || async {
        let (why, message) = reason(redises.get(name).await.ok()?)?;
        (why == "AuthSecretUnreadable" && message.contains("not made again")).then_some(())
    })
    .await;
    assert!(secrets.get_opt("cache-auth").await.unwrap().is_none());
    fail_over(&env, name).await;
    s.writes_accepted(100).await.unwrap();
    let back: Secret = serde_json::from_value(json!({
        "metadata": {"name": "cache-auth"},
        "data": kept.data,
    }))
    .unwrap();
    secrets.create(&PostParams::default(), &back).await.unwrap();
    s.settled(name, 3, TIMEOUT).await.unwrap();
    wait_for("the Secret read again", TIMEOUT, || async {
        let (why, _) = reason(redises.get(name).await.ok()?)?;
        (why != "AuthSecretUnreadable").then_some(())
    })
    .await;
    for (_, ip, _) in members(&env, name).await.values() {
        assert_eq!(login(&s, ip, "new-password"), "PONG");
    }
    s.writes_accepted(100).await.unwrap();

    let w = bench::wind_up(&s, &host, watch).await.unwrap();
    assert_nothing_lost(&w);
}

/// Deletes the primary's Pod of Redis `name` and waits for another
/// primary.
pub(crate) async fn fail_over(env: &TestEnv, name: &str) {
    let redises: Api<Redis> = env.api();
    let primary = redises
        .get(name)
        .await
        .unwrap()
        .primary_pod()
        .unwrap()
        .to_string();
    env.api::<Pod>()
        .delete(&primary, &Default::default())
        .await
        .unwrap();
    wait_for("a new primary", TIMEOUT, || async {
        let r = redises.get(name).await.ok()?;
        (r.primary_pod()? != primary).then_some(())
    })
    .await;
}

/// What the member at `ip` answers `PING` from a client logging in as
/// `user` with `password`.
fn login_as(s: &Session, ip: &str, user: &str, password: &str) -> String {
    s.sh(
        CLIENT,
        &format!(
            "REDISCLI_AUTH='{password}' redis-cli --user {user} -h {ip} -p 6379 ping 2>&1; true"
        ),
    )
    .unwrap()
    .trim()
    .to_string()
}

#[tokio::test]
async fn an_application_users_password_changes_under_writes_without_a_restart_and_it_cannot_administer_the_set()
 {
    let env = TestEnv::new("kind-users").await;
    let s = session(&env).await;
    let name = "users";
    let secrets: Api<Secret> = env.api();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "app-password"},
        "stringData": {"password": "app-one"}
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    // Only the application user may log in; it may write the writer's keys
    // and ask what the writer asks (WAIT, INFO).
    s.create_redis_spec(
        name,
        json!({"replicas": 3, "port": 6379, "image": REDIS_IMAGE,
               "defaultUser": "Disabled",
               "users": [{"name": "app", "secretName": "app-password",
                          "rules": "~w* +@read +@write +@connection +info"}]}),
    )
    .await
    .unwrap();
    s.settled(name, 3, TIMEOUT).await.unwrap();
    let host = s.cluster_ip(name).await.unwrap();
    let set_login = |login: &str| {
        s.sh(
            CLIENT,
            &format!(
                "printf %s '{login}' > {f}.new && mv {f}.new {f}",
                f = writer::PASSWORD_FILE
            ),
        )
        .unwrap();
    };
    set_login("app app-one");
    s.start_writer(&host, 6379, 1).await.unwrap();
    s.writes_accepted(300).await.unwrap();
    let watch = InvariantWatch::start(&s, name);
    let before = members(&env, name).await;

    // `default` is off; the application user cannot administer the set,
    // whatever it asks, through the Service.
    let anonymous = s
        .sh(
            CLIENT,
            &format!("redis-cli -h {host} -p 6379 ping 2>&1; true"),
        )
        .unwrap();
    assert!(anonymous.contains("NOAUTH"), "{anonymous}");
    for admin in [
        "config set maxmemory 1",
        "replicaof no one",
        "failover abort",
        "acl setuser app +@all",
        "shutdown nosave",
    ] {
        let out = s
            .sh(
                CLIENT,
                &format!("REDISCLI_AUTH=app-one redis-cli --user app -h {host} -p 6379 {admin} 2>&1; true"),
            )
            .unwrap();
        assert!(out.contains("NOPERM"), "{admin}: {out}");
    }

    // Its Secret changes: every member takes the new password beside the
    // old, and then alone; no Pod replaced or restarted. The client moves
    // as soon as every member takes the new one.
    let changing = session::now();
    secrets
        .patch(
            "app-password",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": "app-two"}})),
        )
        .await
        .unwrap();
    wait_for("every member taking the new password", TIMEOUT, || async {
        let now = members(&env, name).await;
        now.values()
            .all(|(_, ip, _)| login_as(&s, ip, "app", "app-two") == "PONG")
            .then_some(())
    })
    .await;
    set_login("app app-two");
    wait_for("the old password gone", TIMEOUT, || async {
        let now = members(&env, name).await;
        now.values()
            .all(|(_, ip, _)| login_as(&s, ip, "app", "app-one") != "PONG")
            .then_some(())
    })
    .await;
    s.writes_accepted(100).await.unwrap();
    let changed = session::now();
    assert_eq!(
        members(&env, name).await,
        before,
        "no Pod replaced or restarted"
    );
    let (attempts, _) = s.writes().unwrap();
    eprintln!(
        "writes refused while the user's password changed ({:.0} s): {:?}",
        changed - changing,
        writer::refusals(&attempts, changing, changed)
    );

    // A failover: the new primary has the user too.
    fail_over(&env, name).await;
    s.writes_accepted(100).await.unwrap();
    s.settled(name, 3, TIMEOUT).await.unwrap();
    // The replacement member got the user before it served.
    for (_, ip, _) in members(&env, name).await.values() {
        assert_eq!(login_as(&s, ip, "app", "app-two"), "PONG");
    }
    let w = bench::wind_up(&s, &host, watch).await.unwrap();
    eprintln!("{w:?}");
    assert_nothing_lost(&w);
}

/// The text under `key` of a Secret.
fn secret_text(secret: &Secret, key: &str) -> String {
    let bytes = secret.data.as_ref().and_then(|d| d.get(key)).unwrap();
    String::from_utf8(bytes.0.clone()).unwrap()
}

/// podkeeper's own passwords (the operator's user's and replication's, in
/// `<name>-podkeeper`) changed while a client writes: the members roll to
/// them with one switchover, the operator is never cut off (checked at
/// every look), and once the new ones are active every member refuses the
/// old ones; a failover afterwards links the replicas with the new
/// replication password. Acknowledged writes lost: 0.
#[tokio::test]
async fn podkeepers_own_passwords_rotate_under_writes_and_the_old_ones_end_refused_on_every_member()
{
    let env = TestEnv::new("kind-rotate").await;
    let s = session(&env).await;
    let name = "rotate";
    let host = three_members(&s, name).await;
    s.start_writer(&host, 6379, 1).await.unwrap();
    s.writes_accepted(300).await.unwrap();
    let watch = InvariantWatch::start(&s, name);
    let secrets: Api<Secret> = env.api();
    let redises: Api<Redis> = env.api();
    let own = secrets.get("rotate-podkeeper").await.unwrap();
    let (old_op, old_repl) = (
        secret_text(&own, "password"),
        secret_text(&own, "replication"),
    );
    let (new_op, new_repl) = ("N3wOperatorPassw0rd", "N3wReplicationPassw0rd");
    let before = members(&env, name).await;

    let changing = session::now();
    secrets
        .patch(
            "rotate-podkeeper",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": new_op, "replication": new_repl}})),
        )
        .await
        .unwrap();
    let mut looks = 0;
    wait_for("the new passwords active and alone", TIMEOUT * 2, || {
        looks += 1;
        async {
            let r = redises.get(name).await.ok()?;
            let replicated = r
                .status
                .as_ref()?
                .conditions
                .iter()
                .find(|c| c.type_ == "Replicated")
                .map(|c| c.reason.clone());
            assert_ne!(
                replicated.as_deref(),
                Some(podkeeper::redis::replication::act::OPERATOR_CUT_OFF),
                "the operator was locked out during the rotation"
            );
            let current = r
                .status
                .as_ref()?
                .conditions
                .iter()
                .any(|c| c.type_ == "CredentialsCurrent" && c.status == "True");
            let s = secrets.get("rotate-podkeeper").await.ok()?;
            (current && secret_text(&s, "active-password") == new_op).then_some(())
        }
    })
    .await;
    s.settled(name, 3, TIMEOUT).await.unwrap();
    let changed = session::now();
    let after = members(&env, name).await;
    for pod in after.keys() {
        assert!(!before.contains_key(pod), "{pod} was not started again");
    }
    for (pod, (_, ip, _)) in &after {
        for (user, old, new) in [
            ("podkeeper", old_op.as_str(), new_op),
            ("replication", old_repl.as_str(), new_repl),
        ] {
            assert_eq!(login_as(&s, ip, user, new), "PONG", "{pod} {user}");
            let refused = login_as(&s, ip, user, old);
            assert!(refused.contains("WRONGPASS"), "{pod} {user}: {refused}");
        }
    }
    let (attempts, _) = s.writes().unwrap();
    eprintln!(
        "writes refused while podkeeper's own passwords rotated ({:.0} s, {looks} looks): {:?}",
        changed - changing,
        writer::refusals(&attempts, changing, changed)
    );

    // A failover: the replicas follow the new primary, logging in with the
    // new replication password.
    fail_over(&env, name).await;
    s.writes_accepted(100).await.unwrap();
    s.settled(name, 3, TIMEOUT).await.unwrap();
    let w = bench::wind_up(&s, &host, watch).await.unwrap();
    eprintln!("{w:?}");
    assert_nothing_lost(&w);
}

/// `spec.auth` added to a running Redis, then removed, while a client
/// writes: the client sends the password from the start (any password
/// logs in while `default` needs none), so it writes on throughout. Added,
/// every member asks for the password at once (a wrong one refused), and
/// the rollout the template change brings follows; removed, every member
/// takes any login again at once, and the next rollout follows.
/// Acknowledged writes lost: 0.
#[tokio::test]
async fn spec_auth_added_to_a_running_redis_and_removed_again_under_writes_loses_no_write() {
    let env = TestEnv::new("kind-auth-toggle").await;
    let s = session(&env).await;
    let name = "toggle";
    let secrets: Api<Secret> = env.api();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "toggle-auth"},
        "stringData": {"password": "s3cret-pw"}
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    let host = three_members(&s, name).await;
    s.sh(
        CLIENT,
        &format!(
            "printf %s s3cret-pw > {f}.new && mv {f}.new {f}",
            f = writer::PASSWORD_FILE
        ),
    )
    .unwrap();
    s.start_writer(&host, 6379, 1).await.unwrap();
    s.writes_accepted(300).await.unwrap();
    let watch = InvariantWatch::start(&s, name);

    let adding = session::now();
    s.patch_redis(name, json!({"auth": {"secretName": "toggle-auth"}}))
        .await
        .unwrap();
    wait_for("every member asking for the password", TIMEOUT, || async {
        let now = members(&env, name).await;
        now.values()
            .all(|(_, ip, _)| {
                login(&s, ip, "wrong-pw") != "PONG" && login(&s, ip, "s3cret-pw") == "PONG"
            })
            .then_some(())
    })
    .await;
    s.settled(name, 3, TIMEOUT).await.unwrap();
    s.writes_accepted(100).await.unwrap();
    let added = session::now();

    let removing = session::now();
    s.patch_redis(name, json!({"auth": null})).await.unwrap();
    wait_for("every member taking any login", TIMEOUT, || async {
        let now = members(&env, name).await;
        now.values()
            .all(|(_, ip, _)| login(&s, ip, "wrong-pw") == "PONG")
            .then_some(())
    })
    .await;
    s.settled(name, 3, TIMEOUT).await.unwrap();
    s.writes_accepted(100).await.unwrap();
    let removed = session::now();
    let (attempts, _) = s.writes().unwrap();
    eprintln!(
        "writes refused while spec.auth was added ({:.0} s): {:?}; removed ({:.0} s): {:?}",
        added - adding,
        writer::refusals(&attempts, adding, added),
        removed - removing,
        writer::refusals(&attempts, removing, removed)
    );
    let w = bench::wind_up(&s, &host, watch).await.unwrap();
    eprintln!("{w:?}");
    assert_nothing_lost(&w);
}
