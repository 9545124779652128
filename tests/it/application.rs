//! Application against the real control plane: the seed sample, rollouts
//! with Deployment semantics, the Service, and cleanup order.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent};
use kube::{Api, ResourceExt};
use podkeeper::api::Application;
use serde_json::{Value, json};

use crate::bounds::Recorder;
use crate::harness::image;
use crate::harness::{
    PodDelays, TestEnv, current_rv, follow_owned_pods, is_ready, owned_by, wait_for, watch_from,
};

const TIMEOUT: Duration = Duration::from_secs(90);

fn application(name: &str, deployment: Value, service: Option<Value>) -> Application {
    let mut spec = json!({ "deployment": deployment });
    if let Some(s) = service {
        spec["service"] = s;
    }
    serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "Application",
        "metadata": {"name": name}, "spec": spec
    }))
    .unwrap()
}

fn nginx(replicas: i32, image: &str, extra: Value) -> Value {
    let mut d = json!({
        "replicas": replicas,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}},
                     "spec": {"containers": [{"name": "nginx", "image": image}]}}
    });
    if let (Value::Object(d), Value::Object(e)) = (&mut d, extra) {
        d.extend(e);
    }
    d
}

fn image_of(p: &Pod) -> String {
    p.spec.as_ref().unwrap().containers[0]
        .image
        .clone()
        .unwrap_or_default()
}

/// Waits until the Application has exactly `n` live Pods, all Ready, on
/// `image`, and its status.workflow says so for the current generation.
async fn converged(env: &TestEnv, name: &str, n: i32, image: &str) -> (Application, Vec<Pod>) {
    let apps: Api<Application> = env.api();
    let pods: Api<Pod> = env.api();
    wait_for(
        &format!("{name} to converge to {n} Pods on {image}"),
        TIMEOUT,
        || async {
            let a = apps.get(name).await.ok()?;
            let w = a.status.as_ref()?.workflow.clone()?;
            if w.observed_generation != a.metadata.generation
                || w.available_replicas != Some(n)
                || w.updated_replicas != Some(n)
                || w.replicas != Some(n)
            {
                return None;
            }
            let uid = a.uid()?;
            let all: Vec<Pod> = pods
                .list(&ListParams::default())
                .await
                .ok()?
                .items
                .into_iter()
                .filter(|p| owned_by(p, &uid))
                .collect();
            let ok = all.len() == n as usize
                && all.iter().all(|p| {
                    p.metadata.deletion_timestamp.is_none() && is_ready(p) && image_of(p) == image
                });
            ok.then_some((a, all))
        },
    )
    .await
}

fn find_condition(a: &Application, type_: &str) -> Option<(String, String)> {
    let c = a
        .status
        .as_ref()?
        .conditions
        .iter()
        .find(|c| c.type_ == type_)?;
    Some((c.status.clone(), c.reason.clone()))
}

fn condition(a: &Application, type_: &str) -> (String, String) {
    find_condition(a, type_).unwrap_or_else(|| panic!("no {type_} condition"))
}

/// The seed's sample, verbatim but for its apiVersion.
const SEED_SAMPLE: &str = r#"apiVersion: podkeeper.dev/v1
kind: Application
metadata:
  name: nginx-sample
  labels:
    app: nginx
spec:
  deployment:
    replicas: 1
    selector:
      matchLabels:
        app: nginx
    template:
      spec:
        containers:
        - name: nginx
          image: nginx:1.14.2
          ports:
          - containerPort: 80
  service:
    type: NodePort
    ports:
    - port: 80
      targetPort: 80
      nodePort: 30080
"#;

#[tokio::test]
async fn the_seed_sample_runs_on_bare_pods_with_a_service() {
    let env = TestEnv::new("app-seed").await;
    let mut op = env.start_operator();
    let path = crate::harness::logs_dir().join(format!("{}-seed.yaml", env.namespace));
    std::fs::write(
        &path,
        SEED_SAMPLE.replace("nginx:1.14.2", &image("nginx:1.14.2")),
    )
    .unwrap();
    let (ok, out, err) = env.kubectl(&["apply", "-f", path.to_str().unwrap()]);
    assert!(ok, "{out}{err}");
    let (a, pods) = converged(&env, "nginx-sample", 1, &image("nginx:1.14.2")).await;
    // Without template labels, the Pods get the selector's matchLabels.
    assert_eq!(pods[0].labels()["app"], "nginx");
    assert_eq!(
        condition(&a, "Available"),
        ("True".into(), "MinimumReplicasAvailable".into())
    );
    assert_eq!(a.status.as_ref().unwrap().selector, "app=nginx");

    let services: Api<Service> = env.api();
    let svc = wait_for("the Service", TIMEOUT, || async {
        services.get_opt("nginx-sample").await.ok().flatten()
    })
    .await;
    let spec = svc.spec.unwrap();
    assert_eq!(spec.type_.as_deref(), Some("NodePort"));
    assert_eq!(spec.ports.unwrap()[0].node_port, Some(30080));
    assert_eq!(spec.selector.unwrap()["app"], "nginx");
    assert_eq!(
        svc.metadata.owner_references.unwrap()[0].name,
        "nginx-sample"
    );

    // No Deployment and no ReplicaSet, ever.
    let deployments: Api<Deployment> = env.api();
    let replicasets: Api<ReplicaSet> = env.api();
    assert!(
        deployments
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );
    assert!(
        replicasets
            .list(&ListParams::default())
            .await
            .unwrap()
            .items
            .is_empty()
    );

    // The sample with template labels (samples/application.yaml) applies
    // over it, and those labels reach new Pods.
    let sample = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/samples/application.yaml"
    ))
    .unwrap()
    .replace("nginx:1.14.2", &image("nginx:1.14.2"));
    let labelled = sample
        .replace(
            "namespace: default",
            &format!("namespace: {}", env.namespace),
        )
        .replace(
            "      metadata:\n        labels:\n          app: nginx\n",
            "      metadata:\n        labels:\n          app: nginx\n          tier: frontend\n",
        );
    std::fs::write(&path, labelled).unwrap();
    let (ok, out, err) = env.kubectl(&["apply", "-f", path.to_str().unwrap()]);
    assert!(ok, "{out}{err}");
    let (_, pods) = wait_for("a Pod with the template's labels", TIMEOUT, || async {
        let (a, pods) = converged(&env, "nginx-sample", 1, &image("nginx:1.14.2")).await;
        pods.iter()
            .all(|p| p.labels().get("tier").map(String::as_str) == Some("frontend"))
            .then_some((a, pods))
    })
    .await;
    assert_eq!(pods[0].labels()["app"], "nginx");
    let (ok, out, err) = env.kubectl(&[
        "delete",
        "-f",
        path.to_str().unwrap(),
        "--wait=true",
        "--timeout=60s",
    ]);
    assert!(ok, "{out}{err}");
    op.assert_running();
}

#[tokio::test]
async fn the_crd_installs_with_a_plain_client_side_apply() {
    let env = TestEnv::new("app-crd").await;
    let (ok, out, err) = env.kubectl(&[
        "apply",
        "-f",
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/manifests/crds/application.yaml"
        ),
    ]);
    assert!(ok, "{out}{err}");
    let (ok, out, _) = env.kubectl(&["explain", "application.spec.deployment"]);
    assert!(
        ok && out.contains("Deployment would describe them"),
        "{out}"
    );
}

async fn set_image(env: &TestEnv, name: &str, image: &str) {
    let apps: Api<Application> = env.api();
    apps.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"deployment": {"template": {"spec": {"containers": [{"name": "nginx", "image": image}]}}}}})),
    )
    .await
    .unwrap();
}

fn all_on(state: &BTreeMap<String, Pod>, n: usize, image: &str) -> bool {
    state.len() == n && state.values().all(|p| is_ready(p) && image_of(p) == image)
}

/// Pods take a while to become Ready and to go, as with a kubelet, so that
/// rollouts really wait on readiness and on terminating Pods.
const ROLLOUT_DELAYS: PodDelays = PodDelays {
    ready: (Duration::from_millis(300), Duration::from_millis(900)),
    delete: (Duration::from_millis(300), Duration::from_millis(1200)),
};

#[tokio::test]
async fn a_rolling_update_stays_within_max_surge_and_max_unavailable() {
    let env = TestEnv::new("app-rolling").await;
    env.set_pod_delays(ROLLOUT_DELAYS).await;
    let mut op = env.start_operator();
    let apps: Api<Application> = env.api();
    let strategy = json!({"strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}}});
    apps.create(
        &PostParams::default(),
        &application("roll", nginx(6, &image("nginx:1.26"), strategy), None),
    )
    .await
    .unwrap();
    converged(&env, "roll", 6, &image("nginx:1.26")).await;
    let recorder = Recorder::start(&env).await;
    set_image(&env, "roll", &image("nginx:1.27")).await;
    converged(&env, "roll", 6, &image("nginx:1.27")).await;
    // maxSurge 25% of 6 rounds up to 2; maxUnavailable is 1: at most 8
    // live Pods and at least 5 Ready ones at every Pod event.
    let report = recorder.check();
    report.assert_held("rolling update");
    let stats = report.owner("roll");
    eprintln!("rolling update: {stats:?}");
    assert!(
        stats.pod_events >= 18,
        "observed the rollout step by step ({stats:?})"
    );
    assert!(stats.most_live > 6, "the rollout surged ({stats:?})");
    assert!(
        stats.most_unready > 0 && stats.most_terminating > 0,
        "new Pods took time to be Ready and old ones to go ({stats:?})"
    );
    // The condition follows once the old Pods are gone, as with
    // `kubectl rollout status`.
    let apps: Api<Application> = env.api();
    wait_for("Progressing=True/RolloutComplete", TIMEOUT, || async {
        let a = apps.get("roll").await.ok()?;
        (find_condition(&a, "Progressing") == Some(("True".into(), "RolloutComplete".into())))
            .then_some(())
    })
    .await;
    op.assert_running();
}

#[tokio::test]
async fn recreate_removes_every_old_pod_before_creating_new_ones() {
    let env = TestEnv::new("app-recreate").await;
    env.set_pod_delays(ROLLOUT_DELAYS).await;
    let mut op = env.start_operator();
    let apps: Api<Application> = env.api();
    apps.create(
        &PostParams::default(),
        &application(
            "rec",
            nginx(
                3,
                &image("nginx:1.26"),
                json!({"strategy": {"type": "Recreate"}}),
            ),
            None,
        ),
    )
    .await
    .unwrap();
    converged(&env, "rec", 3, &image("nginx:1.26")).await;
    let recorder = Recorder::start(&env).await;
    set_image(&env, "rec", &image("nginx:1.27")).await;
    converged(&env, "rec", 3, &image("nginx:1.27")).await;
    // No new Pod while an old one exists, terminating ones included.
    let report = recorder.check();
    report.assert_held("Recreate");
    let stats = report.owner("rec");
    eprintln!("Recreate: {stats:?}");
    assert!(
        stats.most_terminating == 3,
        "the old Pods were terminating together for a while ({stats:?})"
    );
    op.assert_running();
}

#[tokio::test]
async fn paused_holds_the_rollout_until_resumed() {
    let env = TestEnv::new("app-paused").await;
    let mut op = env.start_operator();
    let apps: Api<Application> = env.api();
    apps.create(
        &PostParams::default(),
        &application(
            "p",
            nginx(2, &image("nginx:1.26"), json!({"paused": true})),
            None,
        ),
    )
    .await
    .unwrap();
    converged(&env, "p", 2, &image("nginx:1.26")).await;
    set_image(&env, "p", &image("nginx:1.27")).await;
    // The new generation is observed, and nothing was replaced.
    let a = wait_for("the paused generation to be observed", TIMEOUT, || async {
        let a = apps.get("p").await.ok()?;
        (a.status.as_ref()?.workflow.as_ref()?.observed_generation == a.metadata.generation)
            .then_some(a)
    })
    .await;
    assert_eq!(
        condition(&a, "Progressing"),
        ("Unknown".into(), "RolloutPaused".into())
    );
    let w = a.status.unwrap().workflow.unwrap();
    assert_eq!((w.replicas, w.updated_replicas), (Some(2), Some(0)));
    apps.patch(
        "p",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"deployment": {"paused": false}}})),
    )
    .await
    .unwrap();
    converged(&env, "p", 2, &image("nginx:1.27")).await;
    op.assert_running();
}

#[tokio::test]
async fn min_ready_seconds_governs_availability_and_the_deadline_is_reported() {
    let env = TestEnv::new("app-timing").await;
    let mut op = env.start_operator();
    let apps: Api<Application> = env.api();
    apps.create(
        &PostParams::default(),
        &application(
            "slow",
            nginx(2, &image("nginx:1.26"), json!({"minReadySeconds": 4})),
            None,
        ),
    )
    .await
    .unwrap();
    let w = wait_for("both Pods ready", TIMEOUT, || async {
        let w = apps.get("slow").await.ok()?.status?.workflow?;
        (w.ready_replicas == Some(2)).then_some(w)
    })
    .await;
    assert_eq!(
        w.available_replicas,
        Some(0),
        "ready Pods are not available before minReadySeconds"
    );
    converged(&env, "slow", 2, &image("nginx:1.26")).await;

    // Pods that can never be scheduled make no progress.
    let stuck = nginx(
        1,
        &image("nginx:1.26"),
        json!({"progressDeadlineSeconds": 3}),
    );
    let mut app = application("stuck", stuck, None);
    app.spec
        .deployment
        .template
        .spec
        .as_mut()
        .unwrap()
        .node_selector = Some([("no-such".to_string(), "node".to_string())].into());
    apps.create(&PostParams::default(), &app).await.unwrap();
    wait_for("ProgressDeadlineExceeded", TIMEOUT, || async {
        let a = apps.get("stuck").await.ok()?;
        (find_condition(&a, "Progressing")? == ("False".into(), "ProgressDeadlineExceeded".into()))
            .then_some(())
    })
    .await;
    op.assert_running();
}

#[tokio::test]
async fn the_service_follows_the_spec_corrects_drift_and_keeps_allocations() {
    let env = TestEnv::new("app-service").await;
    let mut op = env.start_operator();
    let apps: Api<Application> = env.api();
    let services: Api<Service> = env.api();
    let service =
        json!({"type": "NodePort", "ports": [{"name": "http", "port": 80, "targetPort": 80}]});
    apps.create(
        &PostParams::default(),
        &application(
            "svc",
            nginx(1, &image("nginx:1.26"), json!({})),
            Some(service),
        ),
    )
    .await
    .unwrap();
    let first = wait_for("the Service", TIMEOUT, || async {
        services.get_opt("svc").await.ok().flatten()
    })
    .await;
    let spec = first.spec.clone().unwrap();
    let cluster_ip = spec.cluster_ip.clone().unwrap();
    let node_port = spec.ports.as_ref().unwrap()[0].node_port.unwrap();
    assert_eq!(
        spec.selector.unwrap()["app"],
        "web",
        "the selector defaults to the Pod selector"
    );

    // A spec change reaches it; allocated values stay.
    apps.patch(
        "svc",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"service": {"ports": [
            {"name": "http", "port": 80, "targetPort": 80},
            {"name": "metrics", "port": 9090, "targetPort": 9090}
        ]}}})),
    )
    .await
    .unwrap();
    let updated = wait_for("the new port", TIMEOUT, || async {
        let s = services.get("svc").await.ok()?;
        (s.spec.as_ref()?.ports.as_ref()?.len() == 2).then_some(s)
    })
    .await;
    let spec = updated.spec.unwrap();
    assert_eq!(spec.cluster_ip.unwrap(), cluster_ip);
    assert_eq!(
        spec.ports
            .unwrap()
            .iter()
            .find(|p| p.name.as_deref() == Some("http"))
            .unwrap()
            .node_port,
        Some(node_port)
    );

    // Drift: an edited selector is put back.
    services
        .patch(
            "svc",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"selector": {"app": "other"}}})),
        )
        .await
        .unwrap();
    wait_for("the selector to be restored", TIMEOUT, || async {
        let s = services.get("svc").await.ok()?;
        let sel = s.spec?.selector?;
        (sel.get("app").map(String::as_str) == Some("web") && sel.len() == 1).then_some(())
    })
    .await;

    // Deleted: it comes back.
    services
        .delete("svc", &DeleteParams::default())
        .await
        .unwrap();
    wait_for("the Service to come back", TIMEOUT, || async {
        let s = services.get_opt("svc").await.ok().flatten()?;
        (s.uid() != first.uid()).then_some(())
    })
    .await;

    // status.network mirrors the Service's status.
    let a = apps.get("svc").await.unwrap();
    assert!(a.status.unwrap().network.is_some());
    op.assert_running();
}

#[tokio::test]
async fn cleanup_deletes_the_service_then_the_pods_and_the_application_last() {
    let env = TestEnv::new("app-cleanup").await;
    let mut op = env.start_operator();
    let apps: Api<Application> = env.api();
    apps.create(
        &PostParams::default(),
        &application(
            "bye",
            nginx(3, &image("nginx:1.26"), json!({})),
            Some(json!({"ports": [{"port": 80}]})),
        ),
    )
    .await
    .unwrap();
    converged(&env, "bye", 3, &image("nginx:1.26")).await;
    let services: Api<Service> = env.api();
    wait_for("the Service", TIMEOUT, || async {
        services.get_opt("bye").await.ok().flatten()
    })
    .await;

    let pods: Api<Pod> = env.api();
    let rv = current_rv(&pods).await;
    let mut pod_stream = watch_from(&pods, &rv).await;
    let mut svc_stream = watch_from(&services, &rv).await;
    let mut app_stream = watch_from(&apps, &rv).await;
    apps.delete("bye", &DeleteParams::default()).await.unwrap();

    let app_gone: u64 = loop {
        match tokio::time::timeout(TIMEOUT, app_stream.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            WatchEvent::Deleted(a) => break a.resource_version().unwrap().parse().unwrap(),
            _ => continue,
        }
    };
    let svc_gone: u64 = loop {
        match tokio::time::timeout(TIMEOUT, svc_stream.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            WatchEvent::Deleted(s) => break s.resource_version().unwrap().parse().unwrap(),
            _ => continue,
        }
    };
    // The first change to any Pod (its deletion starting) comes after the
    // Service is gone.
    let mut first_pod_change = None;
    let mut pod_deletions = Vec::new();
    while let Ok(Some(Ok(ev))) =
        tokio::time::timeout(Duration::from_millis(500), pod_stream.next()).await
    {
        match ev {
            WatchEvent::Modified(p) | WatchEvent::Deleted(p) => {
                let rv: u64 = p.resource_version().unwrap().parse().unwrap();
                first_pod_change.get_or_insert(rv);
                if pod_deletions.len() < 3 && p.metadata.deletion_timestamp.is_some() {
                    pod_deletions.push(rv);
                }
            }
            _ => {}
        }
    }
    let first_pod_change = first_pod_change.expect("the Pods were deleted");
    assert!(
        svc_gone < first_pod_change,
        "Service gone at {svc_gone}, first Pod change at {first_pod_change}"
    );
    assert!(
        pod_deletions.iter().all(|rv| *rv < app_gone),
        "Pods at {pod_deletions:?}, Application at {app_gone}"
    );
    op.assert_running();
}

#[tokio::test]
async fn admission_rejects_what_a_deployment_would_reject() {
    let env = TestEnv::new("app-invalid").await;
    let apps: Api<Application> = env.api();
    let cases: Vec<(&str, Value, &str)> = vec![
        (
            "mismatch",
            json!({"replicas": 1, "selector": {"matchLabels": {"app": "a"}},
                   "template": {"metadata": {"labels": {"app": "b"}}, "spec": {"containers": [{"name": "c", "image": "i"}]}}}),
            "selector.matchLabels must match",
        ),
        (
            "negative",
            nginx(-1, "nginx", json!({})),
            "replicas must be 0 or more",
        ),
        (
            "zero-zero",
            nginx(
                1,
                "nginx",
                json!({"strategy": {"rollingUpdate": {"maxSurge": 0, "maxUnavailable": "0%"}}}),
            ),
            "may not both be 0",
        ),
        (
            "recreate-rolling",
            nginx(
                1,
                "nginx",
                json!({"strategy": {"type": "Recreate", "rollingUpdate": {"maxSurge": 1}}}),
            ),
            "may not be set when the strategy is Recreate",
        ),
        (
            "empty-selector",
            json!({"selector": {}, "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}),
            "selector must not be empty",
        ),
        (
            "no-containers",
            nginx(
                1,
                "nginx",
                json!({"template": {"spec": {"containers": []}}}),
            ),
            "",
        ),
    ];
    for (name, deployment, expected) in cases {
        let err = apps
            .create(&PostParams::default(), &application(name, deployment, None))
            .await
            .expect_err(name);
        let kube::Error::Api(s) = err else {
            panic!("{name}: {err}")
        };
        assert_eq!(s.code, 422, "{name}: {}", s.message);
        assert!(
            s.message.contains(expected),
            "{name}: expected {expected:?} in {}",
            s.message
        );
    }
}

#[tokio::test]
async fn kubectl_scale_works_on_an_application() {
    let env = TestEnv::new("app-scale").await;
    let mut op = env.start_operator();
    let apps: Api<Application> = env.api();
    apps.create(
        &PostParams::default(),
        &application("sc", nginx(1, &image("nginx:1.26"), json!({})), None),
    )
    .await
    .unwrap();
    converged(&env, "sc", 1, &image("nginx:1.26")).await;
    let (ok, out, err) = env.kubectl(&["scale", "application/sc", "--replicas=4"]);
    assert!(ok, "{out}{err}");
    converged(&env, "sc", 4, &image("nginx:1.26")).await;
    let (ok, out, _) = env.kubectl(&["get", "app", "sc"]);
    assert!(ok);
    let row: Vec<&str> = out.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(&row[..5], ["sc", "4", "4", "4", "4"]);
    op.assert_running();
}

#[tokio::test]
async fn a_rollout_survives_the_operator_being_killed_repeatedly() {
    let env = TestEnv::new("app-kills").await;
    env.set_pod_delays(ROLLOUT_DELAYS).await;
    let mut op = env.start_operator();
    let apps: Api<Application> = env.api();
    let strategy = json!({"strategy": {"rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}}});
    apps.create(
        &PostParams::default(),
        &application("k", nginx(6, &image("nginx:1.26"), strategy), None),
    )
    .await
    .unwrap();
    let (a, _) = converged(&env, "k", 6, &image("nginx:1.26")).await;
    let recorder = Recorder::start(&env).await;
    let (mut events, mut kills) = (0u32, 0u32);
    follow_owned_pods(
        &env,
        &a.uid().unwrap(),
        |s| all_on(s, 6, &image("nginx:1.27")),
        |_| {
            events += 1;
            // SIGKILL and restart on every fourth Pod event, mid-rollout.
            if events % 4 == 0 && kills < 5 {
                op.restart();
                kills += 1;
            }
        },
        set_image(&env, "k", &image("nginx:1.27")),
    )
    .await;
    assert!(kills >= 2, "the operator was killed {kills} times");
    converged(&env, "k", 6, &image("nginx:1.27")).await;
    // At most 6 + 1 live Pods and at least 6 - 1 Ready ones at every event.
    let report = recorder.check();
    report.assert_held(&format!("rollout with {kills} operator kills"));
    eprintln!("rollout with kills: {:?}", report.owner("k"));
    op.assert_running();
}
