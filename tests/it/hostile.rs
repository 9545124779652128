//! Hostile input: each malformed or adversarial object is rejected at
//! admission with a clear message, or reported in a status condition and an
//! Event; the operator never crashes and other objects are unaffected.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::Api;
use kube::api::{ListParams, PostParams};
use podkeeper::api::{Application, Redis};
use serde_json::{Value, json};

use crate::harness::image;
use crate::harness::{TestEnv, wait_for};

const TIMEOUT: Duration = Duration::from_secs(90);

fn redis(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "podkeeper.dev/v1", "kind": "Redis", "metadata": {"name": name}, "spec": spec})
}

fn app(name: &str, deployment: Value, service: Option<Value>) -> Value {
    let mut spec = json!({ "deployment": deployment });
    if let Some(s) = service {
        spec["service"] = s;
    }
    json!({"apiVersion": "podkeeper.dev/v1", "kind": "Application", "metadata": {"name": name}, "spec": spec})
}

fn deployment(labels: Value, selector: Value, containers: Value) -> Value {
    json!({"replicas": 1, "selector": selector,
           "template": {"metadata": {"labels": labels}, "spec": {"containers": containers}}})
}

fn web() -> Value {
    json!([{"name": "c", "image": &image("nginx:1.27")}])
}

/// Cases the API server must refuse, with a part of the message it gives.
fn rejected() -> Vec<(Value, &'static str)> {
    let l = json!({"app": "x"});
    let s = json!({"matchLabels": {"app": "x"}});
    vec![
        (redis("port-low", json!({"port": 1233})), "spec.port"),
        (redis("port-high", json!({"port": 54322})), "spec.port"),
        (redis("port-negative", json!({"port": -6379})), "spec.port"),
        (redis("port-string", json!({"port": "6379"})), "spec.port"),
        (
            redis("replicas-negative", json!({"replicas": -1})),
            "spec.replicas",
        ),
        (
            redis("replicas-huge", json!({"replicas": 2147483647})),
            "spec.replicas",
        ),
        (
            redis("replicas-float", json!({"replicas": 1.5})),
            "spec.replicas",
        ),
        (redis("image-empty", json!({"image": ""})), "spec.image"),
        (
            redis("image-spaces", json!({"image": "redis: 7"})),
            "image must not contain spaces",
        ),
        (
            redis("image-long", json!({"image": "r".repeat(600)})),
            "spec.image",
        ),
        (
            redis("pull-policy", json!({"imagePullPolicy": "Sometimes"})),
            "spec.imagePullPolicy",
        ),
        (redis(&"n".repeat(58), json!({})), "at most 57 characters"),
        (redis("Upper-Case", json!({})), "metadata.name"),
        (
            app(
                "app-negative",
                json!({"replicas": -2, "selector": s, "template": {"metadata": {"labels": l}, "spec": {"containers": web()}}}),
                None,
            ),
            "replicas must be 0 or more",
        ),
        (
            app(
                "app-mismatch",
                deployment(json!({"app": "y"}), s.clone(), web()),
                None,
            ),
            "must match spec.deployment.template.metadata.labels",
        ),
        (
            app(
                "app-no-selector",
                json!({"template": {"spec": {"containers": web()}}}),
                None,
            ),
            "selector",
        ),
        (
            app(
                "app-empty-selector",
                deployment(l.clone(), json!({}), web()),
                None,
            ),
            "selector must not be empty",
        ),
        (
            app(
                "app-no-containers",
                deployment(l.clone(), s.clone(), json!([])),
                None,
            ),
            "at least one container",
        ),
        (
            app(
                "app-container-no-name",
                deployment(l.clone(), s.clone(), json!([{"image": "nginx"}])),
                None,
            ),
            "name",
        ),
        (
            app(
                "app-restart-never",
                json!({"selector": s, "template": {"metadata": {"labels": l}, "spec": {"restartPolicy": "Never", "containers": web()}}}),
                None,
            ),
            "restartPolicy must be Always",
        ),
        (
            app(
                "app-zero-zero",
                json!({"selector": s, "strategy": {"rollingUpdate": {"maxSurge": "0%", "maxUnavailable": 0}}, "template": {"metadata": {"labels": l}, "spec": {"containers": web()}}}),
                None,
            ),
            "may not both be 0",
        ),
        (
            app(
                "app-bad-strategy",
                json!({"selector": s, "strategy": {"type": "BlueGreen"}, "template": {"metadata": {"labels": l}, "spec": {"containers": web()}}}),
                None,
            ),
            "RollingUpdate or Recreate",
        ),
        (
            app(
                "app-deadline",
                json!({"selector": s, "minReadySeconds": 10, "progressDeadlineSeconds": 5, "template": {"metadata": {"labels": l}, "spec": {"containers": web()}}}),
                None,
            ),
            "greater than minReadySeconds",
        ),
        (
            app(
                "app-min-ready-negative",
                json!({"selector": s, "minReadySeconds": -1, "template": {"metadata": {"labels": l}, "spec": {"containers": web()}}}),
                None,
            ),
            "minReadySeconds must be 0 or more",
        ),
        (
            app(
                "app-long-label",
                deployment(
                    json!({"app": "v".repeat(64)}),
                    json!({"matchLabels": {"app": "v".repeat(64)}}),
                    web(),
                ),
                None,
            ),
            "63",
        ),
        (
            app(
                "app-unknown-field",
                json!({"selector": s, "replicaz": 3, "template": {"metadata": {"labels": l}, "spec": {"containers": web()}}}),
                None,
            ),
            "unknown field",
        ),
        (
            app(
                "1st-web",
                deployment(l.clone(), s.clone(), web()),
                Some(json!({"ports": [{"port": 80}]})),
            ),
            "DNS-1035",
        ),
        (
            app(
                &"a".repeat(58),
                deployment(l.clone(), s.clone(), web()),
                None,
            ),
            "at most 57 characters",
        ),
    ]
}

#[tokio::test]
async fn hostile_objects_are_refused_or_reported_and_nothing_else_suffers() {
    let env = TestEnv::new("hostile").await;
    let mut op = env.start_operator();
    let redises: Api<Redis> = env.api();
    let apps: Api<Application> = env.api();
    // A bystander that must keep working throughout.
    redises
        .create(
            &PostParams::default(),
            &serde_json::from_value(redis(
                "bystander",
                json!({"replicas": 2, "image": image("redis:7.4.2")}),
            ))
            .unwrap(),
        )
        .await
        .unwrap();

    let cases = rejected();
    let mut tried = 0;
    for (object, expected) in &cases {
        let path = crate::harness::logs_dir().join(format!("{}-{tried}.json", env.namespace));
        std::fs::write(&path, object.to_string()).unwrap();
        // Server-side strict field validation, as kubectl does by default.
        let (ok, out, err) =
            env.kubectl(&["create", "--validate=strict", "-f", path.to_str().unwrap()]);
        let name = object["metadata"]["name"].as_str().unwrap();
        assert!(!ok, "{name} was accepted: {out}");
        assert!(
            err.contains(expected),
            "{name}: expected {expected:?} in: {err}"
        );
        tried += 1;
    }

    // Accepted by the schema, but impossible: reported, not acted on.
    let l = json!({"app": "expr"});
    let expressions_only = app(
        "app-expressions",
        deployment(
            l.clone(),
            json!({"matchExpressions": [{"key": "app", "operator": "In", "values": ["other"]}]}),
            web(),
        ),
        None,
    );
    // A selector matching another object's Pods: ownership, not labels,
    // decides which Pods are whose.
    let copycat = app(
        "copycat",
        deployment(
            json!({"app.kubernetes.io/name": "redis", "app.kubernetes.io/instance": "bystander"}),
            json!({"matchLabels": {"app.kubernetes.io/instance": "bystander"}}),
            web(),
        ),
        None,
    );
    // Two Applications asking for the same nodePort: the second's Service is
    // refused by the API server.
    let port = |name: &str| {
        app(
            name,
            deployment(
                json!({"app": name}),
                json!({"matchLabels": {"app": name}}),
                web(),
            ),
            Some(json!({"type": "NodePort", "ports": [{"port": 80, "nodePort": 31999}]})),
        )
    };
    for object in [expressions_only, copycat, port("port-a")] {
        apps.create(
            &PostParams::default(),
            &serde_json::from_value(object).unwrap(),
        )
        .await
        .unwrap();
        tried += 1;
    }
    let condition = |a: &Application, reason: &str| {
        a.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == "ReplicaFailure" && c.status == "True" && c.reason == reason)
        })
    };
    wait_for("InvalidSpec on app-expressions", TIMEOUT, || async {
        condition(&apps.get("app-expressions").await.ok()?, "InvalidSpec").then_some(())
    })
    .await;
    wait_for("port-a to converge", TIMEOUT, || async {
        let a = apps.get("port-a").await.ok()?;
        (a.status?.workflow?.available_replicas == Some(1)).then_some(())
    })
    .await;
    apps.create(
        &PostParams::default(),
        &serde_json::from_value(port("port-b")).unwrap(),
    )
    .await
    .unwrap();
    tried += 1;
    wait_for("FailedService on port-b", TIMEOUT, || async {
        condition(&apps.get("port-b").await.ok()?, "FailedService").then_some(())
    })
    .await;
    // A quantity the schema cannot check: every Pod create fails, which the
    // Redis reports.
    redises
        .create(
            &PostParams::default(),
            &serde_json::from_value(redis(
                "bad-resources",
                json!({"resources": {"limits": {"memory": "lots"}}}),
            ))
            .unwrap(),
        )
        .await
        .unwrap();
    tried += 1;
    wait_for("FailedCreate on bad-resources", TIMEOUT, || async {
        let r = redises.get("bad-resources").await.ok()?;
        r.status?
            .conditions
            .iter()
            .any(|c| {
                c.type_ == "ReplicaFailure" && c.status == "True" && c.reason == "FailedCreate"
            })
            .then_some(())
    })
    .await;
    let events: Api<Event> = env.api();
    wait_for("Warning Events for both", TIMEOUT, || async {
        let reasons: Vec<String> = events
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter_map(|e| e.reason)
            .collect();
        ["InvalidSpec", "FailedService", "FailedCreate"]
            .iter()
            .all(|w| reasons.iter().any(|r| r == w))
            .then_some(())
    })
    .await;

    // The bystander has exactly its two Pods, the copycat its one, and the
    // operator is still up.
    let pods: Api<Pod> = env.api();
    let bystander = redises.get("bystander").await.unwrap();
    let copycat = wait_for("copycat to converge", TIMEOUT, || async {
        let a = apps.get("copycat").await.ok()?;
        (a.status.as_ref()?.workflow.as_ref()?.available_replicas == Some(1)).then_some(a)
    })
    .await;
    let count = |uid: String| {
        let pods = pods.clone();
        async move {
            pods.list(&ListParams::default())
                .await
                .unwrap()
                .items
                .into_iter()
                .filter(|p| {
                    p.metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|r| r.uid == uid)
                })
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .count()
        }
    };
    wait_for("the bystander's 2 Pods", TIMEOUT, || async {
        (count(bystander.metadata.uid.clone().unwrap()).await == 2).then_some(())
    })
    .await;
    assert_eq!(count(copycat.metadata.uid.clone().unwrap()).await, 1);
    assert!(tried >= 30, "only {tried} hostile inputs");
    op.assert_running();
}
