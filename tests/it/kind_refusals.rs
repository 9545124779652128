//! Issue 28, point 1, on kind's real redis-server Pods under a client that
//! writes the whole time: what a failover does when the API server says
//! no. An admission policy (a ValidatingAdmissionPolicy bound to the
//! test's namespace) refuses the writes a failover needs, the primary is
//! killed, and the tests assert what a person relying on the Redis cares
//! about: who is primary while the refusal lasts, that the operator says
//! why, and, once the refusal is lifted, that the Redis heals by itself
//! with no acknowledged write lost and never two primaries at any Pod or
//! Redis event.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use podkeeper::api::Redis;
use podkeeper::api::names::{POD_NAME_LABEL, ROLE_LABEL};
use podkeeper_dev::bench::redis as bench;
use podkeeper_dev::bench::redis::session::{self as bench_session, InvariantWatch, Session};

use crate::harness::{TestEnv, kubectl};
use crate::kind_under_writes::session;

const PORT: u16 = 6379;
const STEP: Duration = Duration::from_secs(300);

/// A ValidatingAdmissionPolicy and its binding that deny, in one
/// namespace, the updates `rules` match for which `allowed` (CEL) is
/// false. Removed by [`Refusal::lift`], or when dropped.
struct Refusal {
    name: String,
}

impl Refusal {
    async fn apply(env: &TestEnv, what: &str, rules: serde_json::Value, allowed: &str) -> Refusal {
        let name = format!("{}-{what}", env.namespace);
        let policy: ValidatingAdmissionPolicy = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": rules},
                "validations": [{
                    "expression": allowed,
                    "message": format!("refused by podkeeper's test ({what})"),
                }],
            },
        }))
        .unwrap();
        let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {
                    "kubernetes.io/metadata.name": env.namespace,
                }}},
            },
        }))
        .unwrap();
        Api::<ValidatingAdmissionPolicy>::all(env.client.clone())
            .create(&PostParams::default(), &policy)
            .await
            .expect("the admission policy");
        Api::<ValidatingAdmissionPolicyBinding>::all(env.client.clone())
            .create(&PostParams::default(), &binding)
            .await
            .expect("its binding");
        Refusal { name }
    }

    /// Removes the policy and its binding (also when a test fails first:
    /// they are cluster-scoped and would outlive its namespace).
    fn lift(self) {
        drop(self);
    }
}

impl Drop for Refusal {
    fn drop(&mut self) {
        for kind in [
            "validatingadmissionpolicybinding",
            "validatingadmissionpolicy",
        ] {
            let (ok, _, err) = kubectl(&["delete", kind, &self.name, "--ignore-not-found"]);
            assert!(
                ok || std::thread::panicking(),
                "removing {kind} {}: {err}",
                self.name
            );
        }
    }
}

/// Waits until `probe` (a dry-run write) is refused, or accepted when
/// `refused` is false: the API server applies a policy a moment after it
/// is created or removed.
async fn until_dry_run<F, Fut>(what: &str, refused: bool, probe: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Result<(), kube::Error>>,
{
    bench_session::wait(what, STEP, || async {
        // Other errors (a conflict with a write in between) prove nothing.
        let ours = match probe().await {
            Ok(()) => false,
            Err(e) if e.to_string().contains("refused by podkeeper's test") => true,
            Err(_) => return None,
        };
        (ours == refused).then_some(())
    })
    .await
    .unwrap();
}

/// The Events about `redis/name` with `reason`: (reportingInstance, note).
fn events(env: &TestEnv, name: &str, reason: &str) -> Vec<(String, String)> {
    let (ok, out, err) = env.kubectl(&[
        "get",
        "events",
        "--field-selector",
        &format!("involvedObject.name={name},involvedObject.kind=Redis,reason={reason}"),
        "-o",
        "json",
    ]);
    assert!(ok, "{err}");
    let list: serde_json::Value = serde_json::from_str(&out).unwrap();
    list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["reportingInstance"].as_str().unwrap_or_default().into(),
                e["message"].as_str().unwrap_or_default().into(),
            )
        })
        .collect()
}

/// `ROLE` as the member's redis-server reports it (`master` or `slave`),
/// once it answers: a container restarting or a loaded node's slow `exec`
/// is waited out, not read as an answer.
async fn role(s: &Session, pod: &str) -> String {
    bench_session::wait(&format!("{pod}'s ROLE"), STEP, || async {
        let out = s.redis_cli(pod, PORT, "role").ok()?;
        Some(out.lines().next()?.trim().to_string()).filter(|r| !r.is_empty())
    })
    .await
    .unwrap()
}

/// A Redis of 3 under the session's writer, settled, with the watch of
/// its invariants running.
struct Started {
    s: Session,
    host: String,
    watch: InvariantWatch,
    redis: Api<Redis>,
    members: Vec<Pod>,
    /// The primary before the fault, and its redis-server's run_id.
    old: String,
    old_run_id: String,
}

async fn under_writes(env: &TestEnv, name: &str) -> Started {
    let s = session(env).await;
    let host = bench::start(&s, name, 3, 1)
        .await
        .expect("a Redis of 3 under writes");
    let watch = InvariantWatch::start(&s, name);
    let redis: Api<Redis> = s.api();
    let (r, members) = s.settled(name, 3, STEP).await.unwrap();
    let old = bench::primary(&r).unwrap();
    let old_run_id = s.run_id(&old, PORT).unwrap();
    Started {
        s,
        host,
        watch,
        redis,
        members,
        old,
        old_run_id,
    }
}

/// What the writer and the watch saw over a whole test: writes were
/// acknowledged, none of them lost, never two primaries.
fn assert_nothing_lost(w: &bench::UnderWrites) {
    assert!(w.acknowledged > 0);
    assert_eq!(w.acknowledged_lost, 0, "acknowledged writes lost");
    assert_eq!(w.client_overlaps, 0, "the client saw two primaries");
    assert_eq!(w.watch_violations, Vec::<String>::new(), "two primaries");
}

fn role_label(p: &Pod) -> Option<&str> {
    p.labels().get(ROLE_LABEL).map(String::as_str)
}

/// The API server refuses every write of the Redis's status while its
/// primary is killed: the operator cannot record the replica it chose,
/// so it promotes no one (a Warning Event says why; no write is accepted
/// anywhere meanwhile). Once the refusal is lifted it records, promotes,
/// and the writes go on, with nothing acknowledged lost.
#[tokio::test]
async fn a_failover_the_api_server_will_not_record_promotes_no_one_until_it_can() {
    let env = TestEnv::new("kind-no-record").await;
    let name = "norecord";
    let Started {
        s,
        host,
        watch,
        redis,
        members,
        old,
        old_run_id,
    } = under_writes(&env, name).await;

    let refusal = Refusal::apply(
        &env,
        "status",
        serde_json::json!([{
            "apiGroups": ["podkeeper.dev"], "apiVersions": ["v1"],
            "operations": ["UPDATE"], "resources": ["redises/status"],
        }]),
        "false",
    )
    .await;
    let probe = || async {
        let current = redis.get(name).await?;
        let dry = PostParams {
            dry_run: true,
            ..Default::default()
        };
        redis.replace_status(name, &dry, &current).await.map(|_| ())
    };
    until_dry_run("status writes refused", true, probe).await;

    let killed_at = s.kill_9(&old).await.unwrap();
    let refused = bench_session::wait("a PromotionNotRecorded Event", STEP, || async {
        let seen = events(&env, name, "PromotionNotRecorded");
        (!seen.is_empty()).then_some(seen)
    })
    .await
    .unwrap();
    eprintln!("while refused: {refused:?}");
    assert!(
        refused[0].1.contains("could not be recorded"),
        "{refused:?}"
    );
    // Rounds went by: the Event repeats (its count grows) or the old
    // primary's container is back; either way nobody is a primary.
    for pod in members.iter().map(|p| p.name_any()) {
        assert_ne!(
            role(&s, &pod).await,
            "master",
            "{pod} is a primary, unrecorded"
        );
    }
    assert_eq!(
        redis.get(name).await.unwrap().primary_pod(),
        Some(old.as_str()),
        "the record was kept"
    );
    // No server but the killed one (before the kill landed) took a write.
    let (writes, _) = s.writes().unwrap();
    let accepted: Vec<_> = writes
        .iter()
        .filter(|a| a.accepted && a.end > killed_at)
        .filter(|a| a.run_id.as_deref() != Some(old_run_id.as_str()))
        .collect();
    assert!(
        accepted.is_empty(),
        "writes accepted while no promotion could be recorded: {accepted:?}"
    );

    refusal.lift();
    let new = recorded_new_primary(&redis, name, &old).await;
    s.settled(name, 3, STEP).await.unwrap();
    assert_eq!(role(&s, &new).await, "master");
    s.writes_accepted(5).await.unwrap();
    let w = bench::wind_up(&s, &host, watch).await.unwrap();
    eprintln!("no record, then a failover: {w:?}");
    assert_nothing_lost(&w);
}

/// The API server refuses every change of a Pod's role label while the
/// primary is killed: the operator records and promotes a replica; the
/// labels cannot follow (a Warning Event says so, and no Pod is labelled
/// primary beside the old one), but the `<name>` Service, which selects
/// the primary by its Pod's name, does: writes through it reach the new
/// primary. The operator's leader is then killed: the new leader, starting
/// from the record, keeps the promoted member as the primary and never
/// turns the restarted old one back into one. Once the refusal is lifted
/// the labels move, and nothing acknowledged is lost.
#[tokio::test]
async fn role_labels_refused_leave_the_service_on_the_new_primary_across_a_new_leader() {
    let env = TestEnv::new("kind-no-label").await;
    let name = "nolabel";
    let Started {
        s,
        host,
        watch,
        redis,
        members,
        old,
        ..
    } = under_writes(&env, name).await;
    let pods: Api<Pod> = s.api();
    let replica = members
        .iter()
        .map(|p| p.name_any())
        .find(|p| *p != old)
        .unwrap();

    let label = format!("'{ROLE_LABEL}'");
    let role_of = |o: &str| {
        format!(
            "(has({o}.metadata.labels) && {label} in {o}.metadata.labels ? {o}.metadata.labels[{label}] : '')"
        )
    };
    let refusal = Refusal::apply(
        &env,
        "labels",
        serde_json::json!([{
            "apiGroups": [""], "apiVersions": ["v1"],
            "operations": ["UPDATE"], "resources": ["pods"],
        }]),
        &format!("{} == {}", role_of("oldObject"), role_of("object")),
    )
    .await;
    let probe = || async {
        let patch = serde_json::json!({"metadata": {"labels": {ROLE_LABEL: "primary"}}});
        let dry = PatchParams {
            dry_run: true,
            ..Default::default()
        };
        pods.patch(&replica, &dry, &Patch::Merge(&patch))
            .await
            .map(|_| ())
    };
    until_dry_run("role label changes refused", true, probe).await;

    s.kill_9(&old).await.unwrap();
    let new = recorded_new_primary(&redis, name, &old).await;
    bench_session::wait("the new primary promoted", STEP, || async {
        (role(&s, &new).await == "master").then_some(())
    })
    .await
    .unwrap();
    bench_session::wait("a RoleLabelNotMoved Event", STEP, || async {
        (!events(&env, name, "RoleLabelNotMoved").is_empty()).then_some(())
    })
    .await
    .unwrap();
    assert_eq!(role_label(&pods.get(&new).await.unwrap()), Some("replica"));
    let new_run_id = s.run_id(&new, PORT).unwrap();
    s.writes_accepted(5).await.unwrap();
    assert_last_write_on(&s, &new_run_id, "labels refused");

    // The leader dies while the Service still points at the old Pod.
    let before: Vec<String> = events(&env, name, "RoleLabelNotMoved")
        .into_iter()
        .map(|(instance, _)| instance)
        .collect();
    crate::kind_under_writes::kill_operator();
    let next = bench_session::wait(
        "the next leader's RoleLabelNotMoved Event",
        STEP,
        || async {
            events(&env, name, "RoleLabelNotMoved")
                .into_iter()
                .find(|(instance, _)| !before.contains(instance))
        },
    )
    .await
    .unwrap();
    eprintln!("RoleLabelNotMoved from {before:?}, then from the next leader: {next:?}");
    // The next leader has run rounds from the record: the promoted member
    // is still the primary, recorded and in fact, and the old one (its
    // container restarted, empty) is not.
    let r = redis.get(name).await.unwrap();
    assert_eq!(r.primary_pod(), Some(new.as_str()));
    assert_eq!(role(&s, &new).await, "master");
    assert_ne!(role(&s, &old).await, "master");
    let (ok, out, _) = kubectl(&[
        "get",
        "pods",
        "-n",
        &env.namespace,
        "-l",
        &format!("{ROLE_LABEL}=primary"),
        "-o",
        "name",
    ]);
    assert!(ok);
    assert_eq!(
        out.trim(),
        format!("pod/{old}"),
        "only the old Pod is labelled primary"
    );

    refusal.lift();
    bench_session::wait("the Service's label on the new primary", STEP, || async {
        let p = pods.get(&new).await.ok()?;
        (role_label(&p) == Some("primary")).then_some(())
    })
    .await
    .unwrap();
    s.settled(name, 3, STEP).await.unwrap();
    s.writes_accepted(5).await.unwrap();
    assert_last_write_on(&s, &new_run_id, "labels moved");
    let w = bench::wind_up(&s, &host, watch).await.unwrap();
    eprintln!("labels refused, leader killed: {w:?}");
    assert_nothing_lost(&w);
}

/// The writer's last accepted write went to the server that runs as
/// `run_id`: the `<name>` Service sends writes there.
fn assert_last_write_on(s: &Session, run_id: &str, when: &str) {
    let (writes, _) = s.writes().unwrap();
    let last = writes.iter().rev().find(|a| a.accepted);
    assert!(
        last.is_some_and(|a| a.run_id.as_deref() == Some(run_id)),
        "{when}: the Service sends the writes to the new primary (last accepted: {last:?})"
    );
}

/// Waits until status.primary names a Pod other than `old`, and returns it.
async fn recorded_new_primary(redis: &Api<Redis>, name: &str, old: &str) -> String {
    bench_session::wait("a recorded new primary", STEP, || async {
        let r = redis.get(name).await.ok()?;
        r.primary_pod().filter(|p| *p != old).map(str::to_string)
    })
    .await
    .unwrap()
}

/// The Pod the `<name>` Service selects.
async fn selected(services: &Api<Service>, name: &str) -> Option<String> {
    let svc = services.get(name).await.ok()?;
    svc.spec?.selector?.get(POD_NAME_LABEL).cloned()
}

/// The API server refuses every change of a Service's selector while the
/// primary is killed: the operator records and promotes a replica, but
/// `<name>` cannot be pointed at it (a `FailedService` Warning Event says
/// so) and keeps selecting the old Pod, whose restarted server is no
/// primary: no write is accepted through the Service by anyone but the
/// new primary. Once the refusal is lifted the Service follows, the writes
/// go on, and nothing acknowledged is lost.
#[tokio::test]
async fn a_service_the_api_server_will_not_repoint_follows_the_new_primary_once_it_can() {
    let env = TestEnv::new("kind-no-repoint").await;
    let name = "norepoint";
    let Started {
        s,
        host,
        watch,
        redis,
        old,
        old_run_id,
        ..
    } = under_writes(&env, name).await;
    let services: Api<Service> = s.api();
    assert_eq!(
        selected(&services, name).await.as_deref(),
        Some(old.as_str())
    );

    let refusal = Refusal::apply(
        &env,
        "selector",
        serde_json::json!([{
            "apiGroups": [""], "apiVersions": ["v1"],
            "operations": ["UPDATE"], "resources": ["services"],
        }]),
        "oldObject.spec.selector == object.spec.selector",
    )
    .await;
    let probe = || async {
        let patch = serde_json::json!({"spec": {"selector": {POD_NAME_LABEL: "elsewhere"}}});
        let dry = PatchParams {
            dry_run: true,
            ..Default::default()
        };
        services
            .patch(name, &dry, &Patch::Merge(&patch))
            .await
            .map(|_| ())
    };
    until_dry_run("Service selector changes refused", true, probe).await;

    let killed_at = s.kill_9(&old).await.unwrap();
    let new = recorded_new_primary(&redis, name, &old).await;
    bench_session::wait("the new primary promoted", STEP, || async {
        (role(&s, &new).await == "master").then_some(())
    })
    .await
    .unwrap();
    bench_session::wait("a FailedService Event", STEP, || async {
        (!events(&env, name, "FailedService").is_empty()).then_some(())
    })
    .await
    .unwrap();
    assert_eq!(
        selected(&services, name).await.as_deref(),
        Some(old.as_str()),
        "the Service still selects the old Pod"
    );
    let new_run_id = s.run_id(&new, PORT).unwrap();
    let (writes, _) = s.writes().unwrap();
    let elsewhere: Vec<_> = writes
        .iter()
        .filter(|a| a.accepted && a.end > killed_at)
        .filter(|a| {
            ![Some(old_run_id.as_str()), Some(new_run_id.as_str())].contains(&a.run_id.as_deref())
        })
        .collect();
    assert!(
        elsewhere.is_empty(),
        "writes accepted by neither primary: {elsewhere:?}"
    );

    refusal.lift();
    bench_session::wait("the Service on the new primary", STEP, || async {
        (selected(&services, name).await? == new).then_some(())
    })
    .await
    .unwrap();
    s.settled(name, 3, STEP).await.unwrap();
    s.writes_accepted(5).await.unwrap();
    assert_last_write_on(&s, &new_run_id, "Service repointed");
    let w = bench::wind_up(&s, &host, watch).await.unwrap();
    eprintln!("Service repointing refused: {w:?}");
    assert_nothing_lost(&w);
}
