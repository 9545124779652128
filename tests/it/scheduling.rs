//! Scheduling and Pod metadata against the real control plane: a Redis's
//! nodeSelector, tolerations, affinity, spread, priorityClassName and
//! podMetadata reach every member and a change rolls them; an
//! Application's template carries the same to its Pods; bad input is
//! refused at admission with messages that say why.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Toleration};
use k8s_openapi::api::scheduling::v1::PriorityClass;
use kube::api::{DeleteParams, ListParams, ObjectMeta, Patch, PatchParams, PostParams};
use kube::{Api, ResourceExt};
use podkeeper::api::{Application, Redis};
use serde_json::{Value, json};

use crate::harness::{TestEnv, image, owned_by, real_containers, wait_for};
use crate::redis::converged;

const TIMEOUT: Duration = Duration::from_secs(90);

/// Creates a PriorityClass named after the test's namespace (they are
/// cluster-wide) and returns its name.
async fn priority_class(env: &TestEnv, value: i32) -> String {
    let name = format!("{}-high", env.namespace);
    let api: Api<PriorityClass> = Api::all(env.client.clone());
    api.create(
        &PostParams::default(),
        &PriorityClass {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            value: Some(value),
            description: Some("podkeeper's scheduling test".into()),
            ..Default::default()
        },
    )
    .await
    .unwrap();
    name
}

async fn drop_priority_class(env: &TestEnv, name: &str) {
    let api: Api<PriorityClass> = Api::all(env.client.clone());
    let _ = api.delete(name, &DeleteParams::default()).await;
}

fn tolerations() -> Value {
    json!([
        {"key": "dedicated", "operator": "Equal", "value": "redis", "effect": "NoSchedule"},
        {"key": "example.com/maintenance", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 30},
    ])
}

/// Every toleration of `expected` is on the Pod (the API server adds its
/// own for not-ready and unreachable nodes).
fn has_tolerations(pod: &Pod, expected: &Value) -> bool {
    let expected: Vec<Toleration> = serde_json::from_value(expected.clone()).unwrap();
    let on_pod = pod
        .spec
        .as_ref()
        .unwrap()
        .tolerations
        .clone()
        .unwrap_or_default();
    expected.iter().all(|t| on_pod.contains(t))
}

#[tokio::test]
async fn scheduling_fields_and_pod_metadata_reach_every_member_and_a_change_rolls_them() {
    let env = TestEnv::new("sched-redis").await;
    let mut op = env.start_operator();
    let class = priority_class(&env, 1000).await;
    let api: Api<Redis> = env.api();
    let redis: Redis = serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
        "metadata": {"name": "sched"},
        "spec": {
            "replicas": 3,
            "image": image("redis:7.4.2"),
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "tolerations": tolerations(),
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/arch", "operator": "Exists"}]}]}}},
            "priorityClassName": class,
            "podMetadata": {
                "labels": {"team": "cache", "example.com/tier": "gold"},
                "annotations": {"example.com/owner": "platform team", "note": "any text: ok"},
            },
        },
    }))
    .unwrap();
    api.create(&PostParams::default(), &redis).await.unwrap();
    let (_, pods) = converged(&env, "sched", 3).await;
    let mut nodes = BTreeSet::new();
    for pod in &pods {
        let name = pod.name_any();
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(
            spec.node_selector,
            Some([("kubernetes.io/os".to_string(), "linux".to_string())].into()),
            "{name}"
        );
        assert!(
            has_tolerations(pod, &tolerations()),
            "{name}: {:?}",
            spec.tolerations
        );
        let required = spec
            .affinity
            .as_ref()
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|n| {
                n.required_during_scheduling_ignored_during_execution
                    .as_ref()
            });
        assert_eq!(
            required.map(|r| r.node_selector_terms.len()),
            Some(1),
            "{name}"
        );
        assert_eq!(
            spec.priority_class_name.as_deref(),
            Some(class.as_str()),
            "{name}"
        );
        assert_eq!(spec.priority, Some(1000), "{name}: the class was resolved");
        // The default spread, since none was given.
        let keys: Vec<_> = spec
            .topology_spread_constraints
            .iter()
            .flatten()
            .map(|c| (c.topology_key.as_str(), c.when_unsatisfiable.as_str()))
            .collect();
        assert_eq!(
            keys,
            [
                ("kubernetes.io/hostname", "DoNotSchedule"),
                ("topology.kubernetes.io/zone", "ScheduleAnyway")
            ],
            "{name}"
        );
        let labels = pod.labels();
        assert_eq!(labels["team"], "cache", "{name}");
        assert_eq!(labels["example.com/tier"], "gold", "{name}");
        assert_eq!(labels["app.kubernetes.io/instance"], "sched", "{name}");
        assert_eq!(labels["app.kubernetes.io/name"], "redis", "{name}");
        assert_eq!(
            labels["app.kubernetes.io/managed-by"], "podkeeper",
            "{name}"
        );
        assert!(labels.contains_key("podkeeper.dev/template-hash"), "{name}");
        let annotations = pod.annotations();
        assert_eq!(annotations["example.com/owner"], "platform team", "{name}");
        assert_eq!(annotations["note"], "any text: ok", "{name}");
        nodes.insert(spec.node_name.clone().unwrap_or_default());
    }
    if !real_containers() {
        assert_eq!(nodes.len(), 3, "spread over the 3 kwok nodes: {nodes:?}");
    }

    // Given constraints replace the default, and a label change rolls every
    // member onto Pods that carry both.
    let before: BTreeSet<String> = pods.iter().map(|p| p.name_any()).collect();
    api.patch(
        "sched",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {
            "topologySpreadConstraints": [{"maxSkew": 2, "topologyKey": "kubernetes.io/hostname",
                                           "whenUnsatisfiable": "ScheduleAnyway"}],
            "podMetadata": {"labels": {"team": "storage"}},
        }})),
    )
    .await
    .unwrap();
    let (_, rolled) = converged(&env, "sched", 3).await;
    for pod in &rolled {
        let name = pod.name_any();
        assert!(!before.contains(&name), "{name} was not replaced");
        let labels = pod.labels();
        assert_eq!(labels["team"], "storage", "{name}");
        assert_eq!(
            labels["example.com/tier"], "gold",
            "{name}: merged, still there"
        );
        let constraints = pod
            .spec
            .as_ref()
            .unwrap()
            .topology_spread_constraints
            .clone()
            .unwrap_or_default();
        assert_eq!(constraints.len(), 1, "{name}: the given one only");
        assert_eq!(constraints[0].max_skew, 2, "{name}");
        assert_eq!(
            constraints[0]
                .label_selector
                .as_ref()
                .and_then(|s| s.match_labels.as_ref())
                .map(|m| m["app.kubernetes.io/instance"].as_str()),
            Some("sched"),
            "{name}: without a labelSelector the constraint counts the members"
        );
    }
    op.assert_running();
    drop_priority_class(&env, &class).await;
}

#[tokio::test]
async fn an_applications_template_carries_scheduling_fields_to_its_pods() {
    let env = TestEnv::new("sched-app").await;
    let mut op = env.start_operator();
    let class = priority_class(&env, 500).await;
    let app: Application = serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "Application",
        "metadata": {"name": "web"},
        "spec": {"deployment": {
            "replicas": 2,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {"labels": {"app": "web", "team": "front"},
                             "annotations": {"example.com/owner": "platform"}},
                "spec": {
                    "containers": [{"name": "nginx", "image": image("nginx:1.26")}],
                    "nodeSelector": {"kubernetes.io/os": "linux"},
                    "tolerations": tolerations(),
                    "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 10, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {"app": "web"}}}}]}},
                    "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                        "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "web"}}}],
                    "priorityClassName": class,
                },
            },
        }},
    }))
    .unwrap();
    let apps: Api<Application> = env.api();
    let created = apps.create(&PostParams::default(), &app).await.unwrap();
    let uid = created.uid().unwrap();
    let pods: Api<Pod> = env.api();
    let pods = wait_for("the Application's 2 Pods", TIMEOUT, || async {
        let owned: Vec<Pod> = pods
            .list(&ListParams::default())
            .await
            .ok()?
            .items
            .into_iter()
            .filter(|p| owned_by(p, &uid))
            .collect();
        (owned.len() == 2).then_some(owned)
    })
    .await;
    for pod in &pods {
        let name = pod.name_any();
        let spec = pod.spec.as_ref().unwrap();
        assert_eq!(
            spec.node_selector,
            Some([("kubernetes.io/os".to_string(), "linux".to_string())].into()),
            "{name}"
        );
        assert!(has_tolerations(pod, &tolerations()), "{name}");
        assert!(
            spec.affinity
                .as_ref()
                .is_some_and(|a| a.pod_anti_affinity.is_some()),
            "{name}"
        );
        let spread = spec.topology_spread_constraints.clone().unwrap_or_default();
        assert_eq!(spread.len(), 1, "{name}");
        assert_eq!(
            spec.priority_class_name.as_deref(),
            Some(class.as_str()),
            "{name}"
        );
        assert_eq!(spec.priority, Some(500), "{name}");
        assert_eq!(pod.labels()["team"], "front", "{name}");
        assert_eq!(pod.annotations()["example.com/owner"], "platform", "{name}");
    }
    op.assert_running();
    drop_priority_class(&env, &class).await;
}

#[tokio::test]
async fn bad_scheduling_fields_are_refused_at_admission_with_clear_messages() {
    let env = TestEnv::new("sched-invalid").await;
    let toleration = |extra: Value| {
        let mut t = json!({"key": "dedicated", "operator": "Equal", "value": "redis"});
        if let (Value::Object(t), Value::Object(e)) = (&mut t, extra) {
            t.extend(e);
        }
        json!({ "tolerations": [t] })
    };
    let spread = |extra: Value| {
        let mut c = json!({"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"});
        if let (Value::Object(c), Value::Object(e)) = (&mut c, extra) {
            c.extend(e);
        }
        c
    };
    let many_tolerations: Vec<Value> = (0..65)
        .map(|i| json!({"key": format!("k{i}"), "operator": "Exists"}))
        .collect();
    let many_labels: serde_json::Map<String, Value> =
        (0..65).map(|i| (format!("l{i}"), json!("v"))).collect();
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "operator",
            toleration(json!({"operator": "Contains"})),
            "spec.tolerations[0].operator: Unsupported value: \"Contains\"",
        ),
        (
            "effect",
            toleration(json!({"effect": "NoRun"})),
            "spec.tolerations[0].effect: Unsupported value: \"NoRun\"",
        ),
        (
            "exists-value",
            toleration(json!({"operator": "Exists"})),
            "operator Exists must have no value",
        ),
        (
            "no-key",
            json!({"tolerations": [{"operator": "Equal", "value": "x"}]}),
            "a toleration without a key must have operator Exists",
        ),
        (
            "seconds",
            toleration(json!({"effect": "NoSchedule", "tolerationSeconds": 5})),
            "tolerationSeconds is only for effect NoExecute",
        ),
        (
            "bad-key",
            toleration(json!({"key": "not a key"})),
            "key must be a qualified name",
        ),
        (
            "too-many-tolerations",
            json!({"tolerations": many_tolerations}),
            "must have at most 64 items",
        ),
        (
            "priority",
            json!({"priorityClassName": "High_Priority"}),
            "spec.priorityClassName must be a PriorityClass name",
        ),
        (
            "priority-long",
            json!({"priorityClassName": "p".repeat(254)}),
            "spec.priorityClassName: Too long",
        ),
        (
            "own-label",
            json!({"podMetadata": {"labels": {"app.kubernetes.io/instance": "other"}}}),
            "spec.podMetadata.labels: app.kubernetes.io/instance cannot be set",
        ),
        (
            "own-prefix",
            json!({"podMetadata": {"labels": {"team": "a", "podkeeper.dev/role": "primary"}}}),
            "spec.podMetadata.labels: podkeeper.dev/role cannot be set",
        ),
        (
            "own-annotation",
            json!({"podMetadata": {"annotations": {"podkeeper.dev/template-hash-but-images": "x"}}}),
            "spec.podMetadata.annotations: podkeeper.dev/template-hash-but-images cannot be set",
        ),
        (
            "label-value",
            json!({"podMetadata": {"labels": {"team": "a b"}}}),
            "spec.podMetadata.labels: values must be label values",
        ),
        (
            "label-key",
            json!({"podMetadata": {"labels": {"-team": "a"}}}),
            "spec.podMetadata.labels: -team: not a qualified name",
        ),
        (
            "annotation-key",
            json!({"podMetadata": {"annotations": {"a/b/c": "x"}}}),
            "spec.podMetadata.annotations: a/b/c: not a qualified name",
        ),
        (
            "too-many-labels",
            json!({"podMetadata": {"labels": many_labels}}),
            "spec.podMetadata.labels: Too many",
        ),
        (
            "node-selector",
            json!({"nodeSelector": {"disk": "fast ssd"}}),
            "spec.nodeSelector: values must be label values",
        ),
        (
            "when",
            json!({"topologySpreadConstraints": [spread(json!({"whenUnsatisfiable": "Maybe"}))]}),
            "whenUnsatisfiable: Unsupported value: \"Maybe\"",
        ),
        (
            "skew",
            json!({"topologySpreadConstraints": [spread(json!({"maxSkew": 0}))]}),
            "spec.topologySpreadConstraints[0].maxSkew in body should be greater than or equal to 1",
        ),
        (
            "twice",
            json!({"topologySpreadConstraints": [spread(json!({})), spread(json!({"maxSkew": 2}))]}),
            "each pair of topologyKey and whenUnsatisfiable may appear once",
        ),
        (
            "min-domains",
            json!({"topologySpreadConstraints": [spread(json!({"whenUnsatisfiable": "ScheduleAnyway", "minDomains": 2}))]}),
            "minDomains may only be set with whenUnsatisfiable DoNotSchedule",
        ),
        (
            "affinity",
            json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "Near", "values": ["a"]}]}]}}}}),
            "Unsupported value: \"Near\"",
        ),
    ];
    for (name, spec, expected) in &cases {
        let manifest = json!({
            "apiVersion": "podkeeper.dev/v1",
            "kind": "Redis",
            "metadata": {"name": name, "namespace": env.namespace},
            "spec": spec,
        });
        let path = crate::harness::logs_dir().join(format!("{}-{name}.json", env.namespace));
        std::fs::write(&path, manifest.to_string()).unwrap();
        let (ok, out, err) = env.kubectl(&["create", "-f", path.to_str().unwrap()]);
        assert!(!ok, "{name} was accepted: {out}");
        assert!(
            err.contains(expected),
            "{name}: expected {expected:?} in {err}"
        );
    }
    // What Kubernetes accepts is accepted: an empty operator and effect,
    // a key-less Exists, an empty spread, label keys with a prefix.
    let api: Api<Redis> = env.api();
    let fine: Redis = serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "Redis", "metadata": {"name": "fine"},
        "spec": {
            "tolerations": [{"key": "a", "operator": "", "value": "b", "effect": ""},
                            {"operator": "Exists"},
                            {"key": "c", "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 5}],
            "topologySpreadConstraints": [],
            "nodeSelector": {"kubernetes.io/os": "linux"},
            "priorityClassName": "system-cluster-critical",
            "podMetadata": {"labels": {"example.com/team": "", "app.kubernetes.io/part-of": "shop"},
                            "annotations": {"podkeeper.example.com/x": "y"}},
        },
    }))
    .unwrap();
    let created = api.create(&PostParams::default(), &fine).await.unwrap();
    assert_eq!(created.spec.topology_spread_constraints, Some(vec![]));
    assert_eq!(created.spec.tolerations.len(), 3);
}
