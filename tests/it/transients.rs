//! The API server says no for a while, then yes: a ResourceQuota, policies
//! that refuse Pod creates or deletes, a webhook that cannot be reached (the
//! API server answers 500), a nodePort taken by another Service.
//! Each recovers with no other change. Also: orphan deletion, removing
//! `spec.service`, and Events that name the Pods of each batch.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding, ValidatingWebhookConfiguration,
};
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::events::v1::Event;
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, PropagationPolicy};
use kube::{Api, ResourceExt};
use podkeeper::api::{Application, Redis};
use serde_json::{Value, json};

use crate::harness::{PodDelays, TestEnv, image, is_ready, owned_by, wait_for};

const TIMEOUT: Duration = Duration::from_secs(90);

async fn create_redis(env: &TestEnv, name: &str, replicas: i32) -> Redis {
    let api: Api<Redis> = env.api();
    let r: Redis = serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
        "metadata": {"name": name},
        "spec": {"replicas": replicas, "image": image("redis:7.4.2")}
    }))
    .unwrap();
    api.create(&PostParams::default(), &r).await.unwrap()
}

/// Live (not terminating) Pods of the owner with `uid`.
async fn live_pods(env: &TestEnv, uid: &str) -> Vec<Pod> {
    let pods: Api<Pod> = env.api();
    pods.list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter(|p| owned_by(p, uid) && p.metadata.deletion_timestamp.is_none())
        .collect()
}

/// The Redis's Pods, if it has exactly `n`, all Ready, and says so.
async fn converged_now(env: &TestEnv, name: &str, n: usize) -> Option<Vec<Pod>> {
    let api: Api<Redis> = env.api();
    let r = api.get(name).await.ok()?;
    let s = r.status.clone()?;
    if s.observed_generation != r.metadata.generation
        || s.ready_replicas != n as i32
        || s.replicas != n as i32
    {
        return None;
    }
    let pods = live_pods(env, &r.uid()?).await;
    (pods.len() == n && pods.iter().all(is_ready)).then_some(pods)
}

/// Waits until the Redis has exactly `n` Ready Pods and says so.
async fn converged(env: &TestEnv, name: &str, n: usize) -> Vec<Pod> {
    wait_for(&format!("{name} at {n} ready Pods"), TIMEOUT, || {
        converged_now(env, name, n)
    })
    .await
}

pub(crate) fn replica_failure(r: &Redis) -> Option<(String, String)> {
    r.status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == "ReplicaFailure")
        .map(|c| (c.status.clone(), c.reason.clone()))
}

pub(crate) async fn wait_failure(env: &TestEnv, name: &str, reason: &str) -> Redis {
    let api: Api<Redis> = env.api();
    wait_for(
        &format!("ReplicaFailure {reason} on {name}"),
        TIMEOUT,
        || async {
            let r = api.get(name).await.ok()?;
            (replica_failure(&r) == Some(("True".into(), reason.into()))).then_some(r)
        },
    )
    .await
}

/// A cluster-wide policy, bound to this test's namespace only, that refuses
/// operations on Pods (or on another core resource, [`Policy::refuse_on`]).
/// Dropped with [`Policy::remove`].
pub(crate) struct Policy {
    name: String,
    client: kube::Client,
}

impl Policy {
    async fn refuse(env: &TestEnv, operation: &str) -> Policy {
        let message = format!("test policy refuses Pod {operation}");
        Policy::refuse_unless(env, operation, "false", &message).await
    }

    /// Refuses `operation` on Pods unless the CEL `expression` holds.
    pub(crate) async fn refuse_unless(
        env: &TestEnv,
        operation: &str,
        expression: &str,
        message: &str,
    ) -> Policy {
        Policy::refuse_on(env, "pods", &[operation], expression, message).await
    }

    /// Refuses `operations` on the core (group "") `resource` unless the
    /// CEL `expression` holds.
    pub(crate) async fn refuse_on(
        env: &TestEnv,
        resource: &str,
        operations: &[&str],
        expression: &str,
        message: &str,
    ) -> Policy {
        Policy::refuse_in_group(env, "", resource, operations, expression, message).await
    }

    /// The same for `resource` of API group `group`, version v1.
    pub(crate) async fn refuse_in_group(
        env: &TestEnv,
        group: &str,
        resource: &str,
        operations: &[&str],
        expression: &str,
        message: &str,
    ) -> Policy {
        let name = format!(
            "refuse-{resource}-{}-{}",
            operations.join("-").to_lowercase(),
            env.namespace
        );
        let policies: Api<ValidatingAdmissionPolicy> = Api::all(env.client.clone());
        let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(env.client.clone());
        let policy: ValidatingAdmissionPolicy = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [{
                    "apiGroups": [group], "apiVersions": ["v1"],
                    "operations": operations, "resources": [resource]
                }]},
                "validations": [{"expression": expression, "message": message}]
            }
        }))
        .unwrap();
        policies
            .create(&PostParams::default(), &policy)
            .await
            .unwrap();
        let binding: ValidatingAdmissionPolicyBinding = serde_json::from_value(json!({
            "metadata": {"name": name},
            "spec": {
                "policyName": name,
                "validationActions": ["Deny"],
                "matchResources": {"namespaceSelector": {"matchLabels": {
                    "kubernetes.io/metadata.name": env.namespace
                }}}
            }
        }))
        .unwrap();
        bindings
            .create(&PostParams::default(), &binding)
            .await
            .unwrap();
        Policy {
            name,
            client: env.client.clone(),
        }
    }

    pub(crate) async fn remove(self) {
        let policies: Api<ValidatingAdmissionPolicy> = Api::all(self.client.clone());
        let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(self.client.clone());
        // A delete that failed would leave the refusal in place and show
        // up much later as a wait for it to end that times out.
        bindings
            .delete(&self.name, &DeleteParams::default())
            .await
            .unwrap();
        policies
            .delete(&self.name, &DeleteParams::default())
            .await
            .unwrap();
    }
}

/// A validating webhook, for this test's namespace only, whose endpoint is
/// a closed port on the API server's loopback: with `failurePolicy: Fail`
/// the API server answers every matching request `500 Internal Server
/// Error` ("failed calling webhook"), as it does while a real webhook's
/// backend is down. Dropped with [`DownWebhook::remove`].
pub(crate) struct DownWebhook {
    name: String,
    client: kube::Client,
}

impl DownWebhook {
    pub(crate) async fn on(env: &TestEnv, resource: &str, operation: &str) -> DownWebhook {
        DownWebhook::on_group(env, "", resource, operation).await
    }

    /// The same for `resource` of API group `group`, version v1.
    pub(crate) async fn on_group(
        env: &TestEnv,
        group: &str,
        resource: &str,
        operation: &str,
    ) -> DownWebhook {
        let name = format!(
            "down-{}-{}-{}.podkeeper.dev",
            resource.replace('/', "-"),
            operation.to_lowercase(),
            env.namespace
        );
        let webhooks: Api<ValidatingWebhookConfiguration> = Api::all(env.client.clone());
        let webhook: ValidatingWebhookConfiguration = serde_json::from_value(json!({
            "metadata": {"name": name},
            "webhooks": [{
                "name": name,
                "clientConfig": {"url": "https://127.0.0.1:1/validate"},
                "rules": [{
                    "apiGroups": [group], "apiVersions": ["v1"],
                    "operations": [operation], "resources": [resource]
                }],
                "namespaceSelector": {"matchLabels": {
                    "kubernetes.io/metadata.name": env.namespace
                }},
                "failurePolicy": "Fail",
                "sideEffects": "None",
                "admissionReviewVersions": ["v1"],
                "timeoutSeconds": 2
            }]
        }))
        .unwrap();
        webhooks
            .create(&PostParams::default(), &webhook)
            .await
            .unwrap();
        DownWebhook {
            name,
            client: env.client.clone(),
        }
    }

    pub(crate) async fn remove(self) {
        let webhooks: Api<ValidatingWebhookConfiguration> = Api::all(self.client);
        webhooks
            .delete(&self.name, &DeleteParams::default())
            .await
            .unwrap();
    }
}

/// Whether `result` is the API server's 500 for a webhook it cannot call.
fn is_500<T>(result: &Result<T, kube::Error>) -> bool {
    matches!(result, Err(kube::Error::Api(s)) if s.code == 500)
}

fn probe_pod(name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name},
        "spec": {"containers": [{"name": "c", "image": "busybox"}]}
    }))
    .unwrap()
}

/// A Pod of the test's own for dry-run deletes to probe: owned by nothing,
/// so neither the operator's cleanup or scale-down nor the garbage
/// collector deletes it, and only admission decides how a dry-run delete of
/// it is answered. (Probing one of the Redis's Pods instead loses a race
/// once the refusal ends: the operator's retry deletes that Pod, kwok
/// removes it at once, and from then on every probe is a 404.)
async fn delete_probe(env: &TestEnv) -> String {
    let pods: Api<Pod> = env.api();
    pods.create(&PostParams::default(), &probe_pod("delete-probe"))
        .await
        .unwrap()
        .name_any()
}

/// Waits until a dry-run `request` gets an answer `wanted` accepts:
/// policies and webhooks take effect a moment after they exist.
async fn answered<T, F, Fut>(what: &str, wanted: fn(&Result<T, kube::Error>) -> bool, request: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    wait_for(what, TIMEOUT, || async {
        wanted(&request().await).then_some(())
    })
    .await;
}

/// Whether `result` is a test [`Policy`]'s refusal, as the API server words
/// it ("ValidatingAdmissionPolicy 'refuse-...' with binding ... denied
/// request: ..."), and not another error that would pass for one (a 404, a
/// timeout under load).
fn policy_refusal<T>(result: &Result<T, kube::Error>) -> bool {
    matches!(result, Err(kube::Error::Api(s))
        if s.message.contains("ValidatingAdmissionPolicy 'refuse-"))
}

/// Refused by a test policy when `refused`, allowed otherwise.
fn refused_if<T>(refused: bool) -> fn(&Result<T, kube::Error>) -> bool {
    if refused {
        policy_refusal
    } else {
        Result::is_ok
    }
}

/// Waits until `request` (a dry run) is answered 500 (`failing`) or
/// succeeds.
async fn answered_500<T, F, Fut>(what: &str, failing: bool, request: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    let wanted = if failing { is_500 } else { Result::is_ok };
    answered(&format!("{what} answered 500: {failing}"), wanted, request).await;
}

/// Waits until a dry-run status write of Redis `name` is answered 500
/// (`refused`) or goes through.
async fn status_writes_refused(env: &TestEnv, name: &str, refused: bool) {
    let api: Api<Redis> = env.api();
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let probe = || async {
        let current = api.get(name).await?;
        api.replace_status(name, &dry, &current).await
    };
    answered_500("Redis status writes", refused, probe).await;
}

/// Waits until a dry-run Pod create in the namespace is refused (`true`)
/// or allowed (`false`).
pub(crate) async fn creates_refused(env: &TestEnv, refused: bool) {
    let pods: Api<Pod> = env.api();
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let probe = probe_pod("probe");
    let what = format!("Pod creates to be refused: {refused}");
    answered(&what, refused_if(refused), || pods.create(&dry, &probe)).await;
}

/// The same for deleting `pod` (dry run), a [`delete_probe`].
async fn deletes_refused(env: &TestEnv, pod: &str, refused: bool) {
    let pods: Api<Pod> = env.api();
    let dry = DeleteParams {
        dry_run: true,
        ..Default::default()
    };
    let what = format!("Pod deletes to be refused: {refused}");
    answered(&what, refused_if(refused), || pods.delete(pod, &dry)).await;
}

/// The same for a change of `pod`'s image (a dry-run patch).
pub(crate) async fn image_changes_refused(env: &TestEnv, pod: &str, refused: bool) {
    let pods: Api<Pod> = env.api();
    let current = pods.get(pod).await.unwrap();
    let container = current.spec.as_ref().unwrap().containers[0].name.clone();
    let patch = Patch::Strategic(
        json!({"spec": {"containers": [{"name": container, "image": "probe:1"}]}}),
    );
    let dry = PatchParams::default().dry_run();
    let what = format!("image changes of {pod} to be refused: {refused}");
    answered(&what, refused_if(refused), || pods.patch(pod, &dry, &patch)).await;
}

/// The message of the Redis's `ReplicaFailure` condition.
fn failure_message(r: &Redis) -> String {
    r.status
        .iter()
        .flat_map(|s| &s.conditions)
        .find(|c| c.type_ == "ReplicaFailure")
        .map(|c| c.message.clone())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_quota_that_caps_pods_then_is_lifted_lets_the_redis_reach_its_replicas() {
    let env = TestEnv::new("quota").await;
    let mut op = env.start_operator();
    env.cap("pods", 2).await;

    create_redis(&env, "capped", 3).await;
    // Settled at the cap: two Pods Ready and the refusal reported, so no
    // Pod event is left to trigger another reconcile by chance.
    let api: Api<Redis> = env.api();
    let r = wait_for("2 Ready Pods and FailedCreate", TIMEOUT, || async {
        let r = api.get("capped").await.ok()?;
        let settled = r.status.as_ref()?.ready_replicas == 2
            && replica_failure(&r) == Some(("True".into(), "FailedCreate".into()));
        settled.then_some(r)
    })
    .await;
    let message = r
        .status
        .unwrap()
        .conditions
        .into_iter()
        .find(|c| c.type_ == "ReplicaFailure")
        .unwrap()
        .message;
    assert!(message.contains("quota"), "{message}");
    assert_eq!(live_pods(&env, &r.metadata.uid.unwrap()).await.len(), 2);

    // Lifting the quota is the only change.
    env.uncap("pods").await;
    converged(&env, "capped", 3).await;
    let r = api.get("capped").await.unwrap();
    assert_eq!(
        replica_failure(&r).map(|c| c.0),
        Some("False".into()),
        "the failure is cleared once creates succeed"
    );
    op.assert_running();
}

#[tokio::test]
async fn a_policy_that_refuses_pod_creates_for_a_while() {
    let env = TestEnv::new("refuse-create").await;
    let mut op = env.start_operator();
    let policy = Policy::refuse(&env, "CREATE").await;
    creates_refused(&env, true).await;
    create_redis(&env, "blocked", 2).await;
    let r = wait_failure(&env, "blocked", "FailedCreate").await;
    assert!(live_pods(&env, &r.metadata.uid.unwrap()).await.is_empty());
    policy.remove().await;
    creates_refused(&env, false).await;
    converged(&env, "blocked", 2).await;
    op.assert_running();
}

#[tokio::test]
async fn a_policy_that_refuses_pod_deletes_holds_a_scale_down_until_removed() {
    let env = TestEnv::new("refuse-delete").await;
    let mut op = env.start_operator();
    create_redis(&env, "sticky", 3).await;
    converged(&env, "sticky", 3).await;
    let probe = delete_probe(&env).await;
    let policy = Policy::refuse(&env, "DELETE").await;
    deletes_refused(&env, &probe, true).await;
    crate::redis::scale(&env, "sticky", 1).await;
    let r = wait_failure(&env, "sticky", "FailedDelete").await;
    assert_eq!(live_pods(&env, &r.metadata.uid.unwrap()).await.len(), 3);
    policy.remove().await;
    deletes_refused(&env, &probe, false).await;
    converged(&env, "sticky", 1).await;
    op.assert_running();
}

#[tokio::test]
async fn a_service_whose_node_port_frees_up_is_created_without_other_change() {
    let env = TestEnv::new("nodeport").await;
    let mut op = env.start_operator();
    let port = 30000 + (rand::random::<u16>() % 2000) as i32;
    let services: Api<Service> = env.api();
    // Someone else's Service holds the nodePort.
    let squatter: Service = serde_json::from_value(json!({
        "metadata": {"name": "squatter"},
        "spec": {"type": "NodePort", "selector": {"x": "y"},
                 "ports": [{"port": 80, "nodePort": port}]}
    }))
    .unwrap();
    services
        .create(&PostParams::default(), &squatter)
        .await
        .unwrap();
    let apps: Api<Application> = env.api();
    let app: Application = serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "Application",
        "metadata": {"name": "web"},
        "spec": {
            "deployment": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                             "spec": {"containers": [{"name": "c", "image": image("nginx")}]}}
            },
            "service": {"type": "NodePort", "ports": [{"port": 80, "nodePort": port}]}
        }
    }))
    .unwrap();
    apps.create(&PostParams::default(), &app).await.unwrap();
    wait_for("FailedService", TIMEOUT, || async {
        let a = apps.get("web").await.ok()?;
        a.status?
            .conditions
            .iter()
            .any(|c| c.type_ == "ReplicaFailure" && c.reason == "FailedService")
            .then_some(())
    })
    .await;
    services
        .delete("squatter", &DeleteParams::default())
        .await
        .unwrap();
    let svc = wait_for("the Application's Service", TIMEOUT, || async {
        services.get_opt("web").await.ok().flatten()
    })
    .await;
    assert_eq!(svc.spec.unwrap().ports.unwrap()[0].node_port, Some(port));
    wait_for("ReplicaFailure cleared", TIMEOUT, || async {
        let a = apps.get("web").await.ok()?;
        a.status?
            .conditions
            .iter()
            .any(|c| c.type_ == "ReplicaFailure" && c.status == "False")
            .then_some(())
    })
    .await;
    op.assert_running();
}

#[tokio::test]
async fn an_orphan_delete_leaves_the_pods_running_without_owner_references() {
    let env = TestEnv::new("orphan").await;
    let mut op = env.start_operator();
    let r = create_redis(&env, "left", 3).await;
    let uid = r.metadata.uid.clone().unwrap();
    let before: BTreeSet<String> = converged(&env, "left", 3)
        .await
        .iter()
        .map(|p| p.name_any())
        .collect();
    // `kubectl delete --cascade=orphan`.
    let api: Api<Redis> = env.api();
    api.delete(
        "left",
        &DeleteParams {
            propagation_policy: Some(PropagationPolicy::Orphan),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let pods: Api<Pod> = env.api();
    let after = wait_for(
        "the Redis gone and its Pods without owner references",
        TIMEOUT,
        || async {
            if api.get_opt("left").await.ok()?.is_some() {
                return None;
            }
            let all = pods.list(&ListParams::default()).await.ok()?.items;
            let freed: Vec<Pod> = all
                .into_iter()
                .filter(|p| before.contains(&p.name_any()))
                .collect();
            freed
                .iter()
                .all(|p| p.owner_references().is_empty())
                .then_some(freed)
        },
    )
    .await;
    let names: BTreeSet<String> = after
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| p.name_any())
        .collect();
    assert_eq!(names, before, "every Pod is still there, none terminating");
    assert!(after.iter().all(|p| !owned_by(p, &uid)));

    // An Application keeps its Service too.
    let apps: Api<Application> = env.api();
    let app: Application = serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "Application",
        "metadata": {"name": "kept"},
        "spec": {
            "deployment": {
                "replicas": 2,
                "selector": {"matchLabels": {"app": "kept"}},
                "template": {"metadata": {"labels": {"app": "kept"}},
                             "spec": {"containers": [{"name": "c", "image": image("nginx")}]}}
            },
            "service": {"ports": [{"port": 80}]}
        }
    }))
    .unwrap();
    let app = apps.create(&PostParams::default(), &app).await.unwrap();
    let app_uid = app.metadata.uid.unwrap();
    let services: Api<Service> = env.api();
    let app_pods: BTreeSet<String> = wait_for("2 Pods and the Service", TIMEOUT, || async {
        services.get_opt("kept").await.ok()??;
        let p = live_pods(&env, &app_uid).await;
        (p.len() == 2 && p.iter().all(is_ready)).then(|| p.iter().map(|p| p.name_any()).collect())
    })
    .await;
    apps.delete(
        "kept",
        &DeleteParams {
            propagation_policy: Some(PropagationPolicy::Orphan),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    wait_for(
        "the Application gone, its Service and Pods freed",
        TIMEOUT,
        || async {
            if apps.get_opt("kept").await.ok()?.is_some() {
                return None;
            }
            let svc = services.get_opt("kept").await.ok()??;
            let all = pods.list(&ListParams::default()).await.ok()?.items;
            let freed: BTreeSet<String> = all
                .iter()
                .filter(|p| {
                    p.owner_references().is_empty() && p.metadata.deletion_timestamp.is_none()
                })
                .map(|p| p.name_any())
                .filter(|n| app_pods.contains(n))
                .collect();
            (svc.owner_references().is_empty()
                && svc.metadata.deletion_timestamp.is_none()
                && freed == app_pods)
                .then_some(())
        },
    )
    .await;

    let events: Api<Event> = env.api();
    wait_for("the Orphaning Event", TIMEOUT, || async {
        let list = events.list(&ListParams::default()).await.ok()?;
        list.items
            .iter()
            .any(|e| e.reason.as_deref() == Some("Orphaning"))
            .then_some(())
    })
    .await;
    op.assert_running();
}

#[tokio::test]
async fn removing_spec_service_removes_the_service_and_status_network() {
    let env = TestEnv::new("unservice").await;
    let mut op = env.start_operator();
    let apps: Api<Application> = env.api();
    let app: Application = serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "Application",
        "metadata": {"name": "web"},
        "spec": {
            "deployment": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                             "spec": {"containers": [{"name": "c", "image": image("nginx")}]}}
            },
            "service": {"ports": [{"port": 80}]}
        }
    }))
    .unwrap();
    apps.create(&PostParams::default(), &app).await.unwrap();
    // Read raw, so that a field the types would drop is still seen.
    let raw: Api<kube::api::DynamicObject> = Api::namespaced_with(
        env.client.clone(),
        &env.namespace,
        &kube::discovery::ApiResource::erase::<Application>(&()),
    );
    let network = |o: &kube::api::DynamicObject| -> Option<Value> {
        o.data.pointer("/status/network").cloned()
    };
    wait_for("status.network", TIMEOUT, || async {
        network(&raw.get("web").await.ok()?).map(|_| ())
    })
    .await;
    let services: Api<Service> = env.api();
    assert!(services.get_opt("web").await.unwrap().is_some());

    apps.patch(
        "web",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"service": null}})),
    )
    .await
    .unwrap();
    wait_for(
        "the Service gone and status.network removed",
        TIMEOUT,
        || async {
            let o = raw.get("web").await.ok()?;
            let svc = services.get_opt("web").await.ok()?;
            let observed = o.data.pointer("/status/workflow/observedGeneration")
                == Some(&json!(o.metadata.generation));
            (network(&o).is_none() && svc.is_none() && observed).then_some(())
        },
    )
    .await;
    op.assert_running();
}

/// Pod names an Event's note lists ("Created 2 pods: a, b" or "Created
/// pod: a").
fn named_pods(note: &str) -> BTreeSet<String> {
    let list = note.split_once(": ").map(|(_, l)| l).unwrap_or_default();
    list.split(", ").map(|s| s.trim().to_string()).collect()
}

#[tokio::test]
async fn events_of_a_scale_up_a_heal_and_another_scale_up_each_name_their_pods() {
    let env = TestEnv::new("events").await;
    let mut op = env.start_operator();
    create_redis(&env, "told", 2).await;
    let names = |pods: &[Pod]| -> BTreeSet<String> { pods.iter().map(|p| p.name_any()).collect() };
    let first = names(&converged(&env, "told", 2).await);

    let pods: Api<Pod> = env.api();
    let victim = first.iter().next().unwrap().clone();
    pods.delete(&victim, &DeleteParams::default())
        .await
        .unwrap();
    let healed = wait_for("the heal", TIMEOUT, || async {
        let now = names(&converged_now(&env, "told", 2).await?);
        (!now.contains(&victim)).then_some(now)
    })
    .await;
    let heal: BTreeSet<String> = healed.difference(&first).cloned().collect();
    assert_eq!(heal.len(), 1);

    crate::redis::scale(&env, "told", 4).await;
    let last = names(&converged(&env, "told", 4).await);
    let second: BTreeSet<String> = last.difference(&healed).cloned().collect();
    assert_eq!(second.len(), 2);

    let events: Api<Event> = env.api();
    let batches = [first, heal, second];
    let notes = wait_for("an Event per batch", TIMEOUT, || async {
        let notes: Vec<String> = events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("SuccessfulCreate"))
            .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some("told"))
            .filter_map(|e| e.note)
            .collect();
        batches
            .iter()
            .all(|b| notes.iter().any(|n| &named_pods(n) == b))
            .then_some(notes)
    })
    .await;
    assert_eq!(notes.len(), 3, "one Event per batch: {notes:?}");

    // What a user reads.
    for args in [
        &["events", "--for", "redis/told"][..],
        &["describe", "redis", "told"],
    ] {
        let (ok, out, err) = env.kubectl(args);
        assert!(ok, "{err}");
        for b in &batches {
            for name in b {
                assert!(
                    out.contains(name.as_str()),
                    "{name} not in {args:?}:\n{out}"
                );
            }
        }
    }
    op.assert_running();
}

/// Waits until the Redis `name` has both its Services and its
/// `ReplicaFailure` is cleared.
async fn services_and_no_failure(env: &TestEnv, name: &str) {
    let services: Api<Service> = env.api();
    for svc in [name.to_string(), format!("{name}-replicas")] {
        wait_for(&format!("Service {svc}"), TIMEOUT, || async {
            services.get_opt(&svc).await.ok()?.map(|_| ())
        })
        .await;
    }
    let api: Api<Redis> = env.api();
    wait_for("the failure cleared", TIMEOUT, || async {
        let r = api.get(name).await.ok()?;
        (replica_failure(&r).map(|c| c.0) == Some("False".into())).then_some(())
    })
    .await;
}

/// A quota of no Services refuses a new Redis's two Services for a while:
/// its Pods are created anyway (the Services do not hold them up), the
/// refusal shows as `FailedService`, no Pod event ever sees more live Pods
/// than asked for, and both Services come once the quota goes.
#[tokio::test]
async fn services_refused_by_a_quota_come_once_it_is_lifted_and_the_pods_do_not_wait() {
    let env = TestEnv::new("quota-svc").await;
    let mut op = env.start_operator();
    let recorder = crate::bounds::Recorder::start(&env).await;
    env.cap("services", 0).await;

    create_redis(&env, "nosvc", 2).await;
    let r = wait_failure(&env, "nosvc", "FailedService").await;
    let message = r
        .status
        .as_ref()
        .unwrap()
        .conditions
        .iter()
        .find(|c| c.type_ == "ReplicaFailure")
        .unwrap()
        .message
        .clone();
    assert!(message.contains("quota"), "{message}");
    let uid = r.metadata.uid.clone().unwrap();
    wait_for("2 Pods while the Services are refused", TIMEOUT, || async {
        (live_pods(&env, &uid).await.len() == 2).then_some(())
    })
    .await;
    let services: Api<Service> = env.api();
    assert!(services.get_opt("nosvc").await.unwrap().is_none());

    // Lifting the quota is the only change.
    env.uncap("services").await;
    services_and_no_failure(&env, "nosvc").await;
    assert_eq!(live_pods(&env, &uid).await.len(), 2);
    recorder.check().assert_held("Services refused by a quota");
    op.assert_running();
}

/// While a webhook's backend is down the API server answers Pod creates
/// with 500: the Redis says `FailedCreate` with the server's reason and
/// creates nothing; once the webhook is back (here: removed) it reaches its
/// replicas with no other change.
#[tokio::test]
async fn pod_creates_answered_500_recover_once_the_webhook_is_back() {
    let env = TestEnv::new("create-500").await;
    let mut op = env.start_operator();
    let pods: Api<Pod> = env.api();
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let probe_object = probe_pod("probe");
    let probe = || pods.create(&dry, &probe_object);
    let webhook = DownWebhook::on(&env, "pods", "CREATE").await;
    answered_500("Pod creates", true, probe).await;

    create_redis(&env, "down", 2).await;
    let r = wait_failure(&env, "down", "FailedCreate").await;
    let message = failure_message(&r);
    assert!(message.contains("failed calling webhook"), "{message}");
    assert!(live_pods(&env, &r.uid().unwrap()).await.is_empty());

    webhook.remove().await;
    answered_500("Pod creates", false, probe).await;
    converged(&env, "down", 2).await;
    let r: Redis = env.api().get("down").await.unwrap();
    assert_eq!(replica_failure(&r).map(|c| c.0), Some("False".into()));
    op.assert_running();
}

/// The same for Pod deletes during a scale-down: nothing is deleted while
/// the API server answers 500, `FailedDelete` says why, and the scale-down
/// completes once the webhook is back.
#[tokio::test]
async fn pod_deletes_answered_500_hold_a_scale_down_until_the_webhook_is_back() {
    let env = TestEnv::new("delete-500").await;
    let mut op = env.start_operator();
    create_redis(&env, "stuck", 3).await;
    let before = converged(&env, "stuck", 3).await;
    let pods: Api<Pod> = env.api();
    let dry = DeleteParams {
        dry_run: true,
        ..Default::default()
    };
    let probed = delete_probe(&env).await;
    let probe = || pods.delete(&probed, &dry);
    let webhook = DownWebhook::on(&env, "pods", "DELETE").await;
    answered_500("Pod deletes", true, probe).await;

    crate::redis::scale(&env, "stuck", 1).await;
    let r = wait_failure(&env, "stuck", "FailedDelete").await;
    let message = failure_message(&r);
    assert!(message.contains("failed calling webhook"), "{message}");
    let names = |pods: Vec<Pod>| pods.iter().map(|p| p.name_any()).collect::<BTreeSet<_>>();
    assert_eq!(
        names(live_pods(&env, &r.uid().unwrap()).await),
        names(before),
        "no Pod is deleted while deletes fail"
    );

    webhook.remove().await;
    answered_500("Pod deletes", false, probe).await;
    converged(&env, "stuck", 1).await;
    op.assert_running();
}

/// Status writes answered 500: the Pods follow the spec anyway, the status
/// keeps saying what it said before (no write gets through), and it
/// catches up, generation and counts, once the webhook is back.
#[tokio::test]
async fn status_writes_answered_500_catch_up_once_the_webhook_is_back() {
    let env = TestEnv::new("status-500").await;
    let mut op = env.start_operator();
    create_redis(&env, "held", 2).await;
    converged(&env, "held", 2).await;
    let api: Api<Redis> = env.api();
    let webhook = DownWebhook::on_group(&env, "podkeeper.dev", "redises/status", "UPDATE").await;
    status_writes_refused(&env, "held", true).await;

    crate::redis::scale(&env, "held", 3).await;
    let r = api.get("held").await.unwrap();
    let uid = r.uid().unwrap();
    let ready = wait_for("3 ready Pods of held", TIMEOUT, || async {
        let pods = live_pods(&env, &uid).await;
        (pods.len() == 3 && pods.iter().all(is_ready)).then_some(pods)
    })
    .await;
    assert_eq!(ready.len(), 3);
    let r = api.get("held").await.unwrap();
    let status = r.status.clone().unwrap();
    assert_eq!(
        (status.observed_generation, status.replicas),
        (Some(1), 2),
        "no status write got through while the webhook was down"
    );

    webhook.remove().await;
    status_writes_refused(&env, "held", false).await;
    converged(&env, "held", 3).await;
    op.assert_running();
}

/// A scale-down whose Pods take longer than the grace (`DRAIN_GRACE`) to
/// go, while status writes are answered 500: the held write and its
/// retries are refused, the Pods go anyway and never exceed the bounds at
/// any event, and the status catches up (generation, one replica) once the
/// webhook is back.
#[tokio::test]
async fn a_held_scale_down_status_refused_500_catches_up_once_the_webhook_is_back() {
    let env = TestEnv::new("drain-500").await;
    env.set_pod_delays(PodDelays {
        ready: (Duration::ZERO, Duration::ZERO),
        delete: (Duration::from_secs(7), Duration::from_secs(8)),
    })
    .await;
    let mut op = env.start_operator();
    create_redis(&env, "held", 3).await;
    converged(&env, "held", 3).await;
    let recorder = crate::bounds::Recorder::start(&env).await;
    let api: Api<Redis> = env.api();
    let webhook = DownWebhook::on_group(&env, "podkeeper.dev", "redises/status", "UPDATE").await;
    status_writes_refused(&env, "held", true).await;

    crate::redis::scale(&env, "held", 1).await;
    let uid = api.get("held").await.unwrap().uid().unwrap();
    let pods: Api<Pod> = env.api();
    wait_for("the two scaled-down Pods gone", TIMEOUT, || async {
        let all = pods.list(&ListParams::default()).await.ok()?;
        (all.items.iter().filter(|p| owned_by(p, &uid)).count() == 1).then_some(())
    })
    .await;
    let status = api.get("held").await.unwrap().status.unwrap();
    assert_eq!(
        (status.observed_generation, status.replicas),
        (Some(1), 3),
        "no status write got through while the webhook was down"
    );

    webhook.remove().await;
    status_writes_refused(&env, "held", false).await;
    converged(&env, "held", 1).await;
    recorder
        .check()
        .assert_held("a held scale-down's status answered 500");
    op.assert_running();
}

/// Service applies answered 500: the Redis's Pods come anyway, the refusal
/// shows as `FailedService`, no Pod event sees more live Pods than asked
/// for, and both Services come once the webhook is back.
#[tokio::test]
async fn service_applies_answered_500_recover_once_the_webhook_is_back() {
    let env = TestEnv::new("svc-500").await;
    let mut op = env.start_operator();
    let recorder = crate::bounds::Recorder::start(&env).await;
    let services: Api<Service> = env.api();
    let dry = PostParams {
        dry_run: true,
        ..Default::default()
    };
    let probe_service: Service = serde_json::from_value(json!({
        "metadata": {"name": "probe"},
        "spec": {"ports": [{"port": 80}]}
    }))
    .unwrap();
    let probe = || services.create(&dry, &probe_service);
    let webhook = DownWebhook::on(&env, "services", "CREATE").await;
    answered_500("Service creates", true, probe).await;

    create_redis(&env, "nosvc", 2).await;
    let r = wait_failure(&env, "nosvc", "FailedService").await;
    let message = failure_message(&r);
    assert!(message.contains("failed calling webhook"), "{message}");
    let uid = r.uid().unwrap();
    converged(&env, "nosvc", 2).await;
    assert!(services.get_opt("nosvc").await.unwrap().is_none());

    webhook.remove().await;
    answered_500("Service creates", false, probe).await;
    services_and_no_failure(&env, "nosvc").await;
    assert_eq!(live_pods(&env, &uid).await.len(), 2);
    recorder.check().assert_held("Service applies answered 500");
    op.assert_running();
}

/// Deleting a Redis while the API server answers its Service deletes with
/// 500: the Services go first, so nothing else is touched (every Pod stays
/// live, none over its bounds at any Pod event), `FailedService` says why,
/// and once the webhook is back the Services, the Pods and the Redis go.
#[tokio::test]
async fn a_deletion_whose_service_deletes_are_answered_500_waits_and_then_completes() {
    let env = TestEnv::new("cleanup-500").await;
    let mut op = env.start_operator();
    let recorder = crate::bounds::Recorder::start(&env).await;
    let uid = create_redis(&env, "held", 2).await.uid().unwrap();
    converged(&env, "held", 2).await;
    services_and_no_failure(&env, "held").await;
    let services: Api<Service> = env.api();
    let dry = DeleteParams {
        dry_run: true,
        ..Default::default()
    };
    let probe = || services.delete("held", &dry);
    let webhook = DownWebhook::on(&env, "services", "DELETE").await;
    answered_500("Service deletes", true, probe).await;

    let api: Api<Redis> = env.api();
    api.delete("held", &DeleteParams::default()).await.unwrap();
    let events: Api<Event> = env.api();
    let note = wait_for("a FailedService Event", TIMEOUT, || async {
        let list = events.list(&ListParams::default()).await.ok()?.items;
        list.into_iter()
            .find(|e| e.reason.as_deref() == Some("FailedService"))
            .and_then(|e| e.note)
    })
    .await;
    assert!(note.contains("failed calling webhook"), "{note}");
    assert_eq!(
        live_pods(&env, &uid).await.len(),
        2,
        "no Pod is deleted while its Services cannot be"
    );
    assert!(api.get_opt("held").await.unwrap().is_some());

    webhook.remove().await;
    wait_for(
        "the Redis, its Services and its Pods gone",
        TIMEOUT,
        || async {
            let redis_gone = api.get_opt("held").await.ok()?.is_none();
            let svcs = services.list(&ListParams::default()).await.ok()?.items;
            let pods: Api<Pod> = env.api();
            let left = pods.list(&ListParams::default()).await.ok()?.items;
            (redis_gone && svcs.is_empty() && left.is_empty()).then_some(())
        },
    )
    .await;
    recorder.check().assert_held("Service deletes answered 500");
    op.assert_running();
}

#[tokio::test]
async fn a_deletion_whose_pod_deletes_are_refused_waits_and_then_completes() {
    let env = TestEnv::new("cleanup-refused").await;
    let mut op = env.start_operator();
    let recorder = crate::bounds::Recorder::start(&env).await;
    let uid = create_redis(&env, "kept", 2).await.uid().unwrap();
    converged(&env, "kept", 2).await;
    let probe = delete_probe(&env).await;
    let policy = Policy::refuse(&env, "DELETE").await;
    deletes_refused(&env, &probe, true).await;

    let api: Api<Redis> = env.api();
    api.delete("kept", &DeleteParams::default()).await.unwrap();
    let events: Api<Event> = env.api();
    wait_for("a FailedDelete Event", TIMEOUT, || async {
        let list = events.list(&ListParams::default()).await.ok()?.items;
        list.into_iter()
            .any(|e| e.reason.as_deref() == Some("FailedDelete"))
            .then_some(())
    })
    .await;
    assert_eq!(
        live_pods(&env, &uid).await.len(),
        2,
        "a refused delete leaves its Pod running"
    );
    assert!(
        api.get_opt("kept").await.unwrap().is_some(),
        "the Redis stays until its Pods are gone"
    );

    // Cleanup forgets the refused deletes, so its retries send them again.
    policy.remove().await;
    deletes_refused(&env, &probe, false).await;
    wait_for("the Redis and its Pods gone", TIMEOUT, || async {
        let redis_gone = api.get_opt("kept").await.ok()?.is_none();
        (redis_gone && live_pods(&env, &uid).await.is_empty()).then_some(())
    })
    .await;
    recorder
        .check()
        .assert_held("Pod deletes refused during cleanup");
    op.assert_running();
}
