//! Hostile input: each malformed or adversarial object is rejected at
//! admission with a clear message, or reported in a status condition and an
//! Event; the operator never crashes and other objects are unaffected.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
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

/// A Redis whose `spec.config` is `config` (a JSON object).
fn configured(name: &str, config: Value) -> Value {
    redis(name, json!({ "config": config }))
}

/// What the API server says of a value with a word that starts another
/// directive, of one with a control character, and of one with quotes.
const STARTS_A_DIRECTIVE: &str = ": a word starting with '--', or a lone '-', would make redis-server read what follows as another directive";
const CONTROL: &str = ": the value must be one line of printable text";
const QUOTES: &str = ": quotes are not interpreted";

/// `spec.config` cases the API server must refuse: the Redis's name, its
/// config, and the message (which names the directive).
fn rejected_config() -> Vec<(&'static str, Value, String)> {
    let value = |name: &'static str, directive: &str, v: &str, why: &str| {
        (
            name,
            json!({ directive: v }),
            format!("spec.config.{directive}{why}"),
        )
    };
    let directive = |name: &'static str, directive: &str, why: &str| {
        (
            name,
            json!({ directive: "yes" }),
            format!("spec.config.{directive}: {why}"),
        )
    };
    vec![
        // Values redis-server would read as more than one directive: each
        // would override a directive podkeeper sets (the user's comes last).
        value(
            "inject-replicaof",
            "maxmemory-policy",
            "allkeys-lru --replicaof 10.0.0.9 6379",
            STARTS_A_DIRECTIVE,
        ),
        value("inject-port", "hz", "10 --port 7000", STARTS_A_DIRECTIVE),
        value(
            "inject-bind-dir",
            "maxmemory-policy",
            "noeviction --bind 0.0.0.0 --dir /tmp",
            STARTS_A_DIRECTIVE,
        ),
        value(
            "inject-first",
            "timeout",
            "--requirepass x",
            STARTS_A_DIRECTIVE,
        ),
        value("inject-stdin", "save", "3600 1 -", STARTS_A_DIRECTIVE),
        value("inject-lone-dash", "appendfsync", "-", STARTS_A_DIRECTIVE),
        value(
            "inject-newline",
            "maxmemory-policy",
            "allkeys-lru\nport 7000",
            CONTROL,
        ),
        value(
            "inject-crlf",
            "maxmemory-policy",
            "allkeys-lru\r\nport 7000",
            CONTROL,
        ),
        value("inject-tab", "hz", "10\t--port\t7000", CONTROL),
        value("inject-vtab", "hz", "10\u{b}--port 7000", CONTROL),
        value("inject-control", "hz", "10\u{1}", CONTROL),
        value("inject-quotes", "save", "\"3600 1\" --port 7000", QUOTES),
        value("inject-single-quote", "save", "'3600 1'", QUOTES),
        value("inject-empty-quotes", "save", "\"\"", QUOTES),
        // Directives that break podkeeper's contract.
        directive(
            "own-replicaof",
            "replicaof",
            "podkeeper sets this directive itself",
        ),
        directive(
            "own-port-upper",
            "PORT",
            "podkeeper sets this directive itself (use spec.port)",
        ),
        directive(
            "own-requirepass",
            "requirepass",
            "podkeeper sets this directive itself (use spec.auth)",
        ),
        directive(
            "own-include",
            "include",
            "podkeeper sets this directive itself",
        ),
        directive(
            "rename-command",
            "rename-command",
            "it would hide commands the operator needs",
        ),
        directive(
            "replica-read-only",
            "replica-read-only",
            "replicas must refuse writes",
        ),
        directive(
            "slave-read-only",
            "Slave-Read-Only",
            "replicas must refuse writes",
        ),
        directive(
            "replica-announced",
            "replica-announced",
            "the operator finds the replicas",
        ),
        directive(
            "cluster-enabled",
            "cluster-enabled",
            "Redis Cluster mode is not supported",
        ),
        directive(
            "tls-port",
            "tls-port",
            "podkeeper sets the TLS directives from spec.tls",
        ),
        directive(
            "aclfile",
            "aclfile",
            "ACL users could lock the operator out",
        ),
        directive("acl-user", "user", "ACL users could lock the operator out"),
        directive(
            "unixsocket",
            "unixsocket",
            "redis-server listens on TCP only",
        ),
        directive(
            "min-replicas",
            "min-replicas-to-write",
            "podkeeper sets it to fence a primary",
        ),
        directive(
            "min-slaves",
            "min-slaves-max-lag",
            "podkeeper sets it to fence a primary",
        ),
        directive(
            "repl-ping",
            "repl-ping-replica-period",
            "podkeeper sets it to 1 s",
        ),
        directive("debug-command", "enable-debug-command", "DEBUG can change"),
        directive(
            "protected-configs",
            "enable-protected-configs",
            "it would let clients change dir",
        ),
    ]
}

/// Cases the API server must refuse, with a part of the message it gives.
fn rejected() -> Vec<(Value, String)> {
    let l = json!({"app": "x"});
    let s = json!({"matchLabels": {"app": "x"}});
    let mut cases: Vec<(Value, &str)> = vec![
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
        // A failover must not come before a cut-off primary stops taking
        // writes.
        (
            redis(
                "fence-too-slow",
                json!({"failover": {"afterSeconds": 4, "minReplicasMaxLagSeconds": 2}}),
            ),
            "afterSeconds must be at least minReplicasMaxLagSeconds + 3",
        ),
        (
            redis(
                "fence-default-lag",
                json!({"failover": {"afterSeconds": 2}}),
            ),
            "afterSeconds must be at least minReplicasMaxLagSeconds + 3",
        ),
        (
            redis(
                "fence-lag-zero",
                json!({"failover": {"minReplicasMaxLagSeconds": 0}}),
            ),
            "spec.failover.minReplicasMaxLagSeconds",
        ),
        // Names: DNS-1035 labels short enough for `<name>-replicas`.
        (redis(&"n".repeat(55), json!({})), "at most 54 characters"),
        (redis(&"n".repeat(56), json!({})), "at most 54 characters"),
        (redis(&"n".repeat(58), json!({})), "at most 54 characters"),
        (redis("Upper-Case", json!({})), "metadata.name"),
        (redis("1st-cache", json!({})), "must be a DNS-1035 label"),
        (redis("cache.v2", json!({})), "must be a DNS-1035 label"),
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
    ];
    let mut cases: Vec<(Value, String)> =
        cases.drain(..).map(|(v, m)| (v, m.to_string())).collect();
    cases.extend(
        rejected_config()
            .into_iter()
            .map(|(name, config, message)| (configured(name, config), message)),
    );
    cases
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

    // Every case is refused with its message; `refused` counts the
    // refusals seen, `reported` the objects accepted and then reported.
    let mut refused = 0;
    let mut reported = 0;
    for (i, (object, expected)) in rejected().iter().enumerate() {
        let path = crate::harness::logs_dir().join(format!("{}-{i}.json", env.namespace));
        std::fs::write(&path, object.to_string()).unwrap();
        // Server-side strict field validation, as kubectl does by default.
        let (ok, out, err) =
            env.kubectl(&["create", "--validate=strict", "-f", path.to_str().unwrap()]);
        let name = object["metadata"]["name"].as_str().unwrap();
        assert!(!ok, "{name} was accepted: {out}");
        assert!(
            err.contains(expected.as_str()),
            "{name}: expected {expected:?} in: {err}"
        );
        refused += 1;
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
    reported += 1;
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
    wait_for("FailedService on port-b", TIMEOUT, || async {
        condition(&apps.get("port-b").await.ok()?, "FailedService").then_some(())
    })
    .await;
    reported += 1;
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
    let redis_condition = |r: &Redis, type_: &str, reason: &str| {
        r.status.as_ref().is_some_and(|s| {
            s.conditions
                .iter()
                .any(|c| c.type_ == type_ && c.reason == reason)
        })
    };
    wait_for("FailedCreate on bad-resources", TIMEOUT, || async {
        let r = redises.get("bad-resources").await.ok()?;
        redis_condition(&r, "ReplicaFailure", "FailedCreate").then_some(())
    })
    .await;
    reported += 1;
    // A directive given twice in different cases, which CEL does not
    // compare: the operator reports it and creates no Pod.
    redises
        .create(
            &PostParams::default(),
            &serde_json::from_value(configured(
                "twice",
                json!({"maxmemory": "1mb", "MAXMEMORY": "2mb"}),
            ))
            .unwrap(),
        )
        .await
        .unwrap();
    let twice = wait_for("InvalidSpec on twice", TIMEOUT, || async {
        let r = redises.get("twice").await.ok()?;
        redis_condition(&r, "Replicated", "InvalidSpec").then_some(r)
    })
    .await;
    reported += 1;

    // The longest name admitted, with multi-word values: its Pods and both
    // Services (`<name>-replicas` is 63 characters) are created.
    let longest = "l".repeat(podkeeper::api::redis::MAX_NAME_LENGTH);
    redises
        .create(
            &PostParams::default(),
            &serde_json::from_value(configured(
                &longest,
                json!({
                    "save": "3600 1 300 100",
                    "client-output-buffer-limit": "replica 256mb 64mb 60",
                    "list-max-listpack-size": "-2",
                    "proc-title-template": "{title}",
                }),
            ))
            .unwrap(),
        )
        .await
        .unwrap();
    let services: Api<Service> = env.api();
    wait_for("both Services of the longest name", TIMEOUT, || async {
        let replicas = format!("{longest}-replicas");
        assert_eq!(replicas.len(), 63);
        services.get_opt(&longest).await.ok()??;
        services.get_opt(&replicas).await.ok()??;
        Some(())
    })
    .await;
    crate::redis::events_with_reasons(&env, &["InvalidSpec", "FailedService", "FailedCreate"])
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
    assert_eq!(count(twice.metadata.uid.clone().unwrap()).await, 0);
    wait_for("the longest name's Pod", TIMEOUT, || async {
        let r = redises.get(&longest).await.ok()?;
        (count(r.metadata.uid.clone()?).await == 1).then_some(())
    })
    .await;
    assert!(refused >= 63, "only {refused} refusals seen");
    assert_eq!(reported, 4, "reported, not acted on");
    op.assert_running();
}
