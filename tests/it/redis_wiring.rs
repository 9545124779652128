//! Redis replication as the control plane shows it: the role labels, the
//! two Services and their selectors, status.members and status.primary,
//! the Replicated condition, admission of spec.auth/config/failover, and a
//! scale-down that keeps the primary. kwok runs no redis-server, so no
//! member ever answers here; a primary is given by writing status.primary
//! as the operator would (what real servers do is in `kind.rs`).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kube::api::{ListParams, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use podkeeper::api::Redis;
use serde_json::json;

use crate::harness::{TestEnv, image, is_ready, owned_by, wait_for};

const TIMEOUT: Duration = Duration::from_secs(90);
const ROLE: &str = "podkeeper.dev/role";

/// Creates a Redis of `spec`, on an image the cluster has unless `spec`
/// names one.
pub(crate) async fn create(
    env: &TestEnv,
    name: &str,
    mut spec: serde_json::Value,
) -> Result<Redis, String> {
    if spec.get("image").is_none() {
        spec["image"] = json!(image("redis:7.4.2"));
    }
    let redis: Redis = serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1",
        "kind": "Redis",
        "metadata": {"name": name},
        "spec": spec,
    }))
    .map_err(|e| e.to_string())?;
    env.api::<Redis>()
        .create(&PostParams::default(), &redis)
        .await
        .map_err(|e| e.to_string())
}

async fn live_pods(env: &TestEnv, uid: &str) -> Vec<Pod> {
    env.api::<Pod>()
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| owned_by(p, uid) && p.metadata.deletion_timestamp.is_none())
        .collect()
}

pub(crate) fn condition(r: &Redis, type_: &str) -> Option<(String, String, String)> {
    r.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
}

/// The Pods a Service's selector picks.
async fn selected(env: &TestEnv, service: &Service) -> Vec<String> {
    let selector = service.spec.as_ref().unwrap().selector.clone().unwrap();
    let labels: Vec<String> = selector.iter().map(|(k, v)| format!("{k}={v}")).collect();
    let mut names: Vec<String> = env
        .api::<Pod>()
        .list(&ListParams::default().labels(&labels.join(",")))
        .await
        .unwrap()
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.name_any())
        .collect();
    names.sort();
    names
}

#[tokio::test]
#[cfg_attr(
    feature = "kind-e2e",
    ignore = "local-only: it checks what the operator does while no redis-server answers (kwok runs nothing) and records the primary itself; with real redis-server Pods, kind::replication_one_primary_linked_replicas_and_services_that_follow_roles and kind::scale_3_to_1_keeps_the_primary_and_its_keys check the same"
)]
async fn services_role_labels_members_and_a_scale_down_that_keeps_the_primary() {
    let env = TestEnv::new("redis-wiring").await;
    let mut op = env.start_operator();
    let r = create(
        &env,
        "kv",
        json!({"replicas": 3, "config": {"maxmemory-policy": "allkeys-lru"}}),
    )
    .await
    .unwrap();
    let uid = r.uid().unwrap();
    let redis: Api<Redis> = env.api();

    // Three Ready Pods, each labelled replica (nothing answers, so there is
    // no primary), listed in status.members as unreachable.
    let pods = wait_for(
        "3 Ready replica Pods in status.members",
        TIMEOUT,
        || async {
            let pods = live_pods(&env, &uid).await;
            let r = redis.get("kv").await.ok()?;
            let s = r.status.as_ref()?;
            let labelled = pods
                .iter()
                .all(|p| p.labels().get(ROLE).map(String::as_str) == Some("replica"));
            // The status follows the Pods turning Ready within the status
            // interval (1 s): wait until it says they all are.
            let caught_up = condition(&r, "Ready").is_some_and(|c| c.1 != "ReplicasNotReady");
            (pods.len() == 3
                && pods.iter().all(is_ready)
                && labelled
                && s.members.len() == 3
                && caught_up)
                .then_some(pods)
        },
    )
    .await;
    let r = redis.get("kv").await.unwrap();
    let s = r.status.as_ref().unwrap();
    assert!(s.primary.is_none());
    for m in &s.members {
        assert_eq!(
            (m.role.as_str(), m.link_status.as_str()),
            ("unknown", "unreachable")
        );
        assert!(pods.iter().any(|p| p.name_any() == m.pod));
    }
    // kwok's Pods are marked simulated: the conditions say so (see
    // simulated::).
    let (status, reason, _) = condition(&r, "Replicated").unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Simulated"));
    assert_eq!(condition(&r, "Ready").unwrap().1, "Simulated");
    // The config reached the command line; the Pods spread over nodes.
    let spec = pods[0].spec.as_ref().unwrap();
    let args = spec.containers[0].args.clone().unwrap().join(" ");
    assert!(args.contains("--maxmemory-policy allkeys-lru"), "{args}");
    assert!(args.contains("--replicaof 127.0.0.1 1"), "{args}");
    let mut nodes: Vec<String> = pods
        .iter()
        .filter_map(|p| p.spec.as_ref()?.node_name.clone())
        .collect();
    nodes.sort();
    nodes.dedup();
    assert_eq!(nodes.len(), 3, "one Pod per node (3 kwok nodes)");

    // Two Services, owned by the Redis, selecting by role.
    let services: Api<Service> = env.api();
    let (primary_svc, replicas_svc) = wait_for("both Services", TIMEOUT, || async {
        Some((
            services.get_opt("kv").await.ok()??,
            services.get_opt("kv-replicas").await.ok()??,
        ))
    })
    .await;
    for svc in [&primary_svc, &replicas_svc] {
        assert_eq!(svc.owner_references()[0].uid, uid);
        assert_eq!(
            svc.spec.as_ref().unwrap().ports.as_ref().unwrap()[0].port,
            6379
        );
    }
    assert!(selected(&env, &primary_svc).await.is_empty());
    assert_eq!(selected(&env, &replicas_svc).await.len(), 3);

    // status.primary as the operator records it: that Pod takes the
    // primary label, and the primary Service selects it alone.
    let mut names: Vec<String> = pods.iter().map(|p| p.name_any()).collect();
    names.sort();
    let chosen = names[1].clone();
    redis
        .patch_status(
            "kv",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"primary": {"pod": chosen, "runId": "r1"}}})),
        )
        .await
        .unwrap();
    wait_for(
        "the primary label on the recorded primary",
        TIMEOUT,
        || async {
            (selected(&env, &primary_svc).await == [chosen.clone()]
                && selected(&env, &replicas_svc).await.len() == 2)
                .then_some(())
        },
    )
    .await;
    let r = redis.get("kv").await.unwrap();
    assert_eq!(r.status.unwrap().primary.unwrap().pod, chosen);
    let (ok, out, _) = env.kubectl(&["get", "rds", "kv"]);
    assert!(ok && out.contains(&chosen), "the Primary column: {out}");

    // Scale 3 -> 1: the engine's order would pick any of them; the primary
    // stays, whichever it is.
    redis
        .patch(
            "kv",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 1}})),
        )
        .await
        .unwrap();
    let left = wait_for("one Pod left", TIMEOUT, || async {
        let pods = live_pods(&env, &uid).await;
        let all: Vec<Pod> = env
            .api::<Pod>()
            .list(&ListParams::default())
            .await
            .ok()?
            .items;
        let terminating = all
            .iter()
            .any(|p| owned_by(p, &uid) && p.metadata.deletion_timestamp.is_some());
        (pods.len() == 1 && !terminating).then_some(pods)
    })
    .await;
    assert_eq!(left[0].name_any(), chosen, "the primary was kept");
    op.assert_running();
}

#[tokio::test]
async fn auth_config_and_failover_are_validated() {
    let env = TestEnv::new("redis-wiring-admission").await;
    let mut op = env.start_operator();
    // Refused at admission, with a message naming the field.
    for (spec, words) in [
        (
            json!({"config": {"replicaof": "10.0.0.1 6379"}}),
            "spec.config",
        ),
        (json!({"config": {"PORT": "7000"}}), "spec.config"),
        (json!({"config": {"bad name": "x"}}), "directive names"),
        (
            json!({"config": {"rename-command": "CONFIG x"}}),
            "spec.config.rename-command: it would hide commands",
        ),
        (
            json!({"config": {"maxmemory-policy": "allkeys-lru --replicaof 10.0.0.9 6379"}}),
            "spec.config.maxmemory-policy: a word starting with '--'",
        ),
        (json!({"failover": {"afterSeconds": 0}}), "afterSeconds"),
        (
            json!({"failover": {"switchoverTimeoutSeconds": 601}}),
            "switchoverTimeoutSeconds",
        ),
        (
            json!({"auth": {"secretName": "Not_A_Name"}}),
            "spec.auth.secretName",
        ),
        (
            json!({"auth": {"secretName": "s", "key": "a/b"}}),
            "spec.auth.key",
        ),
        (
            json!({"users": [{"name": "podkeeper", "secretName": "s"}]}),
            "default, podkeeper and replication are Redis's and podkeeper's own users",
        ),
        (
            json!({"users": [{"name": "app", "secretName": "s"}, {"name": "app", "secretName": "t"}]}),
            "Duplicate value",
        ),
        (
            json!({"users": [{"name": "app", "secretName": "s", "rules": "+@read >sneaky"}]}),
            "spec.users[].rules: ACL permissions only",
        ),
        (
            json!({"users": [{"name": "app", "secretName": "s", "rules": "on nopass +@all"}]}),
            "spec.users[].rules: ACL permissions only",
        ),
        (
            json!({"users": [{"name": "has space", "secretName": "s"}]}),
            "spec.users[].name",
        ),
        (json!({"defaultUser": "Off"}), "`Enabled` or `Disabled`"),
    ] {
        let err = create(&env, "bad", spec.clone()).await.unwrap_err();
        assert!(err.contains(words), "{spec}: {err}");
    }

    // What CEL does not check is reported: no Pods, Replicated False with
    // the reason, and a Warning Event.
    create(
        &env,
        "bad-maxmemory",
        json!({"replicas": 2, "config": {"maxmemory": "lots"}}),
    )
    .await
    .unwrap();
    let redis: Api<Redis> = env.api();
    let r = wait_for("InvalidSpec", TIMEOUT, || async {
        let r = redis.get("bad-maxmemory").await.ok()?;
        (condition(&r, "Replicated")?.1 == "InvalidSpec").then_some(r)
    })
    .await;
    assert!(
        condition(&r, "Replicated")
            .unwrap()
            .2
            .contains("spec.config.maxmemory")
    );
    assert!(live_pods(&env, &r.uid().unwrap()).await.is_empty());
    let (ok, out, _) = env.kubectl(&["events", "--for", "redis/bad-maxmemory"]);
    assert!(ok && out.contains("InvalidSpec"), "{out}");

    // spec.auth naming a Secret that does not exist: podkeeper creates it
    // with a generated password, owned by the Redis; the Pods read it
    // through secretKeyRef, so the password is not in their spec.
    create(
        &env,
        "locked",
        json!({"replicas": 1, "auth": {"secretName": "pw"}}),
    )
    .await
    .unwrap();
    let secrets = env.api::<Secret>();
    let generated = wait_for("the generated Secret", TIMEOUT, || async {
        secrets.get_opt("pw").await.ok().flatten()
    })
    .await;
    let password = secret_value(&generated, "password");
    assert_eq!(password.len(), 32, "{password}");
    assert!(password.chars().all(|c| c.is_ascii_alphanumeric()));
    let r = redis.get("locked").await.unwrap();
    assert!(
        generated
            .owner_references()
            .iter()
            .any(|o| o.uid == r.uid().unwrap() && o.kind == "Redis"),
        "{:?}",
        generated.owner_references()
    );
    let pods = wait_for("the Pod", TIMEOUT, || async {
        let p = live_pods(&env, &r.uid().unwrap()).await;
        (p.len() == 1).then_some(p)
    })
    .await;
    let c = &pods[0].spec.as_ref().unwrap().containers[0];
    let env_var = c
        .env
        .iter()
        .flatten()
        .find(|e| e.name == podkeeper::redis::replication::config::PASSWORD_ENV)
        .unwrap();
    assert!(env_var.value.is_none());
    assert_eq!(
        env_var
            .value_from
            .as_ref()
            .unwrap()
            .secret_key_ref
            .as_ref()
            .unwrap()
            .name,
        "pw"
    );
    let (ok, out, _) = env.kubectl(&["events", "--for", "redis/locked"]);
    assert!(ok && out.contains("SecretCreated"), "{out}");
    // The operator's own user's password too, and the replication
    // user's, owned by the Redis.
    let own = secrets.get("locked-podkeeper").await.unwrap();
    assert_eq!(secret_value(&own, "password").len(), 32);
    assert_eq!(secret_value(&own, "replication").len(), 32);
    assert!(
        own.owner_references()
            .iter()
            .any(|o| o.uid == r.uid().unwrap())
    );
    // A Secret an older podkeeper made has no replication key: it is
    // added (the operator's password kept).
    let mut old = own.clone();
    old.data.as_mut().unwrap().remove("replication");
    secrets
        .replace("locked-podkeeper", &PostParams::default(), &old)
        .await
        .unwrap();
    let upgraded = wait_for("the replication key added", TIMEOUT, || async {
        let s = secrets.get("locked-podkeeper").await.ok()?;
        s.data.as_ref()?.contains_key("replication").then_some(s)
    })
    .await;
    assert_eq!(
        secret_value(&upgraded, "password"),
        secret_value(&own, "password")
    );
    // And the active keys: the passwords as they are (nothing rotated).
    assert_eq!(
        secret_value(&own, "active-password"),
        secret_value(&own, "password")
    );
    assert_eq!(
        secret_value(&upgraded, "active-replication"),
        secret_value(&upgraded, "replication")
    );

    // A Secret the user made is used as it is, never overwritten; one
    // without the key is reported.
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "given"},
        "stringData": {"other": "s3cret"},
    }))
    .unwrap();
    secrets
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    create(
        &env,
        "given",
        json!({"replicas": 1, "auth": {"secretName": "given", "key": "other"}}),
    )
    .await
    .unwrap();
    create(
        &env,
        "keyless",
        json!({"replicas": 1, "auth": {"secretName": "given"}}),
    )
    .await
    .unwrap();
    let r = wait_for("AuthSecretUnreadable", TIMEOUT, || async {
        let r = redis.get("keyless").await.ok()?;
        (condition(&r, "Replicated")?.1 == "AuthSecretUnreadable").then_some(r)
    })
    .await;
    assert!(
        condition(&r, "Replicated")
            .unwrap()
            .2
            .contains("has no key password")
    );
    wait_for("the given Secret read", TIMEOUT, || async {
        let r = redis.get("given").await.ok()?;
        let reason = condition(&r, "Replicated")?.1;
        (reason != "AuthSecretUnreadable").then_some(())
    })
    .await;
    let given = secrets.get("given").await.unwrap();
    assert_eq!(secret_value(&given, "other"), "s3cret");
    assert!(given.owner_references().is_empty());

    // The generated Secret goes with its Redis (garbage collector).
    redis.delete("locked", &Default::default()).await.unwrap();
    wait_for("the generated Secret gone", TIMEOUT, || async {
        matches!(secrets.get_opt("pw").await, Ok(None)).then_some(())
    })
    .await;
    op.assert_running();
}

fn secret_value(secret: &Secret, key: &str) -> String {
    let bytes = secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .unwrap_or_else(|| panic!("Secret has no key {key}"));
    String::from_utf8(bytes.0.clone()).unwrap()
}

/// The Secret podkeeper would generate is refused (a quota of no Secrets):
/// the Redis says why, in its Replicated condition and an Event, and once
/// the quota is lifted the Secret is created with no other change.
#[tokio::test]
async fn a_generated_secret_refused_by_a_quota_is_created_once_the_quota_is_lifted() {
    let env = TestEnv::new("redis-secret-quota").await;
    env.cap("secrets", 0).await;
    let mut op = env.start_operator();
    create(
        &env,
        "quota",
        json!({"replicas": 1, "auth": {"secretName": "pw"}}),
    )
    .await
    .unwrap();
    let redis = env.api::<Redis>();
    let refused = wait_for("the refused Secret in the condition", TIMEOUT, || async {
        let r = redis.get("quota").await.ok()?;
        let (status, reason, message) = condition(&r, "Replicated")?;
        (status == "False" && reason == "AuthSecretUnreadable").then_some(message)
    })
    .await;
    assert!(
        refused.contains("cannot create Secret pw") && refused.contains("quota"),
        "{refused}"
    );
    let (ok, out, _) = env.kubectl(&["events", "--for", "redis/quota"]);
    assert!(ok && out.contains("cannot create Secret pw"), "{out}");
    let secrets = env.api::<Secret>();
    assert!(secrets.get_opt("pw").await.unwrap().is_none());

    env.uncap("secrets").await;
    let generated = wait_for("the generated Secret", TIMEOUT, || async {
        secrets.get_opt("pw").await.ok().flatten()
    })
    .await;
    assert_eq!(secret_value(&generated, "password").len(), 32);
    let r = redis.get("quota").await.unwrap();
    assert!(
        generated
            .owner_references()
            .iter()
            .any(|o| o.uid == r.uid().unwrap()),
        "{:?}",
        generated.owner_references()
    );
    wait_for("the Secret read", TIMEOUT, || async {
        let r = redis.get("quota").await.ok()?;
        (condition(&r, "Replicated")?.1 != "AuthSecretUnreadable").then_some(())
    })
    .await;
    let (ok, out, _) = env.kubectl(&["events", "--for", "redis/quota"]);
    assert!(ok && out.contains("SecretCreated"), "{out}");
    op.assert_running();
}

/// The version of podkeeper's passwords a Pod was started at.
fn credentials_version(p: &Pod) -> Option<String> {
    p.annotations()
        .get("podkeeper.dev/credentials-version")
        .cloned()
}

/// A person changes the operator's and replication's passwords in
/// `<name>-podkeeper`: the members roll (each started again with the new
/// ones), the new passwords become the active ones only once every member
/// runs on them, and not while the API server refuses that write (the
/// Redis says why, and goes on once it is allowed), with no second roll.
#[tokio::test]
async fn a_change_of_podkeepers_own_passwords_rolls_the_members_and_is_made_active_only_after() {
    let env = TestEnv::new("redis-rotate").await;
    let mut op = env.start_operator();
    let r = create(&env, "rot", json!({"replicas": 3})).await.unwrap();
    let uid = r.uid().unwrap();
    let secrets = env.api::<Secret>();
    let redis = env.api::<Redis>();
    let first = wait_for("3 Pods and the Secret", TIMEOUT, || async {
        let pods = live_pods(&env, &uid).await;
        let s = secrets.get_opt("rot-podkeeper").await.ok()??;
        (pods.len() == 3 && pods.iter().all(is_ready)).then_some((pods, s))
    })
    .await;
    let (old_pods, own) = first;
    let old_password = secret_value(&own, "password");
    // A password the members' start script would refuse is not rolled
    // out: the Redis says why, and the members keep theirs.
    secrets
        .patch(
            "rot-podkeeper",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": "not letters!"}})),
        )
        .await
        .unwrap();
    let why = wait_for("the invalid password reported", TIMEOUT, || async {
        let r = redis.get("rot").await.ok()?;
        let (status, reason, message) = condition(&r, "CredentialsCurrent")?;
        (status == "False" && reason == "InvalidPassword").then_some(message)
    })
    .await;
    assert!(
        why.contains("key password must be letters and digits"),
        "{why}"
    );
    assert!(
        !crate::redis::notes(&env, "InvalidCredentials")
            .await
            .is_empty()
    );
    let r = redis.get("rot").await.unwrap();
    assert_eq!(r.status.unwrap().credentials_version, None, "no roll");
    let mut names: Vec<String> = live_pods(&env, &uid)
        .await
        .iter()
        .map(|p| p.name_any())
        .collect();
    let mut before: Vec<String> = old_pods.iter().map(|p| p.name_any()).collect();
    names.sort();
    before.sort();
    assert_eq!(names, before);
    // The activation is refused while this policy stands (as a webhook
    // or a policy of the cluster's might).
    let policy = crate::transients::Policy::refuse_on(
        &env,
        "secrets",
        &["UPDATE"],
        "!has(object.data) || !has(oldObject.data) || !('active-password' in object.data) \
         || !('active-password' in oldObject.data) \
         || object.data['active-password'] == oldObject.data['active-password']",
        "test policy refuses a change of active-password",
    )
    .await;
    let probe: Secret = serde_json::from_value(json!({
        "metadata": {"name": "probe"}, "stringData": {"active-password": "a"}
    }))
    .unwrap();
    let probe = secrets
        .create(&PostParams::default(), &probe)
        .await
        .unwrap();
    wait_for("the policy in force", TIMEOUT, || async {
        let mut changing = probe.clone();
        changing.string_data = Some([("active-password".to_string(), "b".to_string())].into());
        let dry = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        matches!(
            secrets.replace("probe", &dry, &changing).await,
            Err(kube::Error::Api(_))
        )
        .then_some(())
    })
    .await;
    let (new_op, new_repl) = ("N3wOperatorPassw0rd", "N3wReplicationPassw0rd");
    secrets
        .patch(
            "rot-podkeeper",
            &PatchParams::default(),
            &Patch::Merge(json!({"stringData": {"password": new_op, "replication": new_repl}})),
        )
        .await
        .unwrap();
    // The members roll to the Secret's new version.
    let rolled = wait_for("every member started again", TIMEOUT, || async {
        let r = redis.get("rot").await.ok()?;
        let pods = live_pods(&env, &uid).await;
        let version = r.status.as_ref()?.credentials_version.clone()?;
        let all = pods.len() == 3
            && pods.iter().all(is_ready)
            && pods
                .iter()
                .all(|p| credentials_version(p).as_ref() == Some(&version));
        all.then_some(pods)
    })
    .await;
    for p in &rolled {
        assert!(
            old_pods.iter().all(|o| o.name_any() != p.name_any()),
            "{} was not replaced",
            p.name_any()
        );
    }
    let warning = wait_for("the refused activation told", TIMEOUT, || async {
        crate::redis::notes(&env, "CredentialsNotActivated")
            .await
            .into_iter()
            .next()
    })
    .await;
    assert!(warning.contains("test policy refuses"), "{warning}");
    let r = redis.get("rot").await.unwrap();
    let (status, reason, _) = condition(&r, "CredentialsCurrent").unwrap();
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Rotating"));
    let s = secrets.get("rot-podkeeper").await.unwrap();
    assert_eq!(secret_value(&s, "active-password"), old_password);

    policy.remove().await;
    wait_for("the new passwords active", TIMEOUT, || async {
        let s = secrets.get("rot-podkeeper").await.ok()?;
        (secret_value(&s, "active-password") == new_op
            && secret_value(&s, "active-replication") == new_repl)
            .then_some(())
    })
    .await;
    wait_for("CredentialsCurrent", TIMEOUT, || async {
        let r = redis.get("rot").await.ok()?;
        (condition(&r, "CredentialsCurrent")?.0 == "True").then_some(())
    })
    .await;
    let mut after: Vec<String> = live_pods(&env, &uid)
        .await
        .iter()
        .map(|p| p.name_any())
        .collect();
    let mut rolled: Vec<String> = rolled.iter().map(|p| p.name_any()).collect();
    after.sort();
    rolled.sort();
    assert_eq!(after, rolled, "no second roll");
    let (ok, out, _) = env.kubectl(&["events", "--for", "redis/rot"]);
    assert!(
        ok && out.contains("CredentialsRotating") && out.contains("CredentialsRotated"),
        "{out}"
    );
    op.assert_running();
}

/// An application user whose Secret does not exist: the Redis says so in
/// a condition and an Event (the members keep what they had for it), and
/// once the Secret is made the condition clears.
#[tokio::test]
async fn a_users_secret_that_cannot_be_read_is_a_condition_until_it_can() {
    let env = TestEnv::new("redis-user-secret").await;
    let mut op = env.start_operator();
    create(
        &env,
        "users",
        json!({"replicas": 1, "users": [{"name": "app", "secretName": "app-pw"}]}),
    )
    .await
    .unwrap();
    let redis = env.api::<Redis>();
    let message = wait_for("UserSecretUnreadable", TIMEOUT, || async {
        let r = redis.get("users").await.ok()?;
        let (status, reason, message) = condition(&r, "CredentialsCurrent")?;
        (status == "False" && reason == "UserSecretUnreadable").then_some(message)
    })
    .await;
    assert!(
        message.contains("user app") && message.contains("Secret app-pw not found"),
        "{message}"
    );
    let (ok, out, _) = env.kubectl(&["events", "--for", "redis/users"]);
    assert!(ok && out.contains("UserSecretUnreadable"), "{out}");
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "app-pw"},
        "stringData": {"password": "app-one"},
    }))
    .unwrap();
    env.api::<Secret>()
        .create(&PostParams::default(), &secret)
        .await
        .unwrap();
    wait_for("CredentialsCurrent", TIMEOUT, || async {
        let r = redis.get("users").await.ok()?;
        (condition(&r, "CredentialsCurrent")?.0 == "True").then_some(())
    })
    .await;
    op.assert_running();
}

/// A `<name>-podkeeper` Secret as an older podkeeper left it (no
/// replication key, no active keys), whose update the API server refuses:
/// the Redis says why, and once updates are allowed the keys are added,
/// the operator's password kept.
#[tokio::test]
async fn keys_an_older_operator_secret_lacks_are_added_once_its_update_is_allowed() {
    let env = TestEnv::new("redis-old-secret").await;
    let mut op = env.start_operator();
    create(&env, "old", json!({"replicas": 1})).await.unwrap();
    let secrets = env.api::<Secret>();
    let own = wait_for("the operator's Secret", TIMEOUT, || async {
        secrets.get_opt("old-podkeeper").await.ok().flatten()
    })
    .await;
    let probe: Secret = serde_json::from_value(json!({
        "metadata": {"name": "probe"}, "stringData": {"other": "x"}
    }))
    .unwrap();
    let probe = secrets
        .create(&PostParams::default(), &probe)
        .await
        .unwrap();
    // Refuses any update that adds `replication` to a Secret without it.
    let policy = crate::transients::Policy::refuse_on(
        &env,
        "secrets",
        &["UPDATE"],
        "!has(object.data) || !('replication' in object.data) \
         || (has(oldObject.data) && 'replication' in oldObject.data)",
        "test policy refuses adding the replication key",
    )
    .await;
    wait_for("the policy in force", TIMEOUT, || async {
        let mut adding = probe.clone();
        adding.string_data = Some([("replication".to_string(), "x".to_string())].into());
        let dry = PostParams {
            dry_run: true,
            ..PostParams::default()
        };
        matches!(
            secrets.replace("probe", &dry, &adding).await,
            Err(kube::Error::Api(_))
        )
        .then_some(())
    })
    .await;
    let mut old = own.clone();
    for key in ["replication", "active-password", "active-replication"] {
        old.data.as_mut().unwrap().remove(key);
    }
    secrets
        .replace("old-podkeeper", &PostParams::default(), &old)
        .await
        .unwrap();
    let redis = env.api::<Redis>();
    let message = wait_for("the refused update reported", TIMEOUT, || async {
        let r = redis.get("old").await.ok()?;
        let (status, reason, message) = condition(&r, "Replicated")?;
        (status == "False" && reason == "AuthSecretUnreadable").then_some(message)
    })
    .await;
    assert!(
        message.contains("cannot add keys to Secret old-podkeeper")
            && message.contains("test policy refuses"),
        "{message}"
    );
    let s = secrets.get("old-podkeeper").await.unwrap();
    assert!(!s.data.as_ref().unwrap().contains_key("replication"));

    policy.remove().await;
    let upgraded = wait_for("the keys added", TIMEOUT, || async {
        let s = secrets.get("old-podkeeper").await.ok()?;
        let data = s.data.as_ref()?;
        ["replication", "active-password", "active-replication"]
            .iter()
            .all(|k| data.contains_key(*k))
            .then_some(s)
    })
    .await;
    assert_eq!(
        secret_value(&upgraded, "password"),
        secret_value(&own, "password")
    );
    assert_eq!(
        secret_value(&upgraded, "active-password"),
        secret_value(&own, "password")
    );
    assert_eq!(
        secret_value(&upgraded, "active-replication"),
        secret_value(&upgraded, "replication")
    );
    wait_for("the Secret read again", TIMEOUT, || async {
        let r = redis.get("old").await.ok()?;
        (condition(&r, "Replicated")?.1 != "AuthSecretUnreadable").then_some(())
    })
    .await;
    op.assert_running();
}
