//! The local control plane itself: what every other test relies on.

use std::time::{Duration, Instant};

use k8s_openapi::api::authentication::v1::TokenRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Container, Pod, PodSpec, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::config::{AuthInfo, KubeConfigOptions, NamedAuthInfo};
use kube::{Api, Client, Config, ResourceExt};

use serde_json::{Value, json};

use crate::harness::image;
use crate::harness::{PodDelays, TestEnv, current_rv, is_ready, kubeconfig, wait_for, watch_from};

#[tokio::test]
#[cfg_attr(
    feature = "kind-e2e",
    ignore = "local-only: it checks the kwok nodes of the local control plane"
)]
async fn a_pod_is_scheduled_onto_a_kwok_node_and_becomes_ready() {
    let env = TestEnv::new("cluster-pod").await;
    let pods: Api<Pod> = env.api();
    let pod = Pod {
        metadata: ObjectMeta {
            name: Some("plain".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            containers: vec![Container {
                name: "web".into(),
                image: Some(image("nginx:1.27")),
                ..Default::default()
            }],
            ..Default::default()
        }),
        ..Default::default()
    };
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let ready = wait_for("the Pod to be Ready", Duration::from_secs(60), || async {
        let p = pods.get("plain").await.ok()?;
        let status = p.status.as_ref()?;
        let ready = status
            .conditions
            .as_ref()?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        (ready && status.pod_ip.is_some()).then_some(p)
    })
    .await;
    let node = ready.spec.unwrap().node_name.unwrap();
    assert!(node.starts_with("kwok-node-"), "scheduled onto {node}");
    let status = ready.status.unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));

    // Nothing listens at a kwok Pod's IP, and a connection to it (the
    // operator's Redis rounds make them) must stay on this machine: the
    // cluster's `unreachable` route refuses it at once, where the default
    // route took it to whatever answers off the machine.
    let ip = status.pod_ip.unwrap();
    let started = Instant::now();
    let connect = tokio::time::timeout(
        Duration::from_secs(2),
        tokio::net::TcpStream::connect((ip.as_str(), 6379)),
    )
    .await;
    let refused_here =
        matches!(&connect, Ok(Err(e)) if e.kind() == std::io::ErrorKind::HostUnreachable);
    assert!(
        refused_here,
        "a connection to the kwok Pod IP {ip} was not refused on this machine \
         ({connect:?} after {:?}); the local cluster adds `ip route add unreachable \
         {}` at start, which needs root",
        started.elapsed(),
        podkeeper_dev::localcluster::POD_CIDR
    );
}

#[tokio::test]
async fn the_garbage_collector_deletes_dependents_of_a_deleted_owner() {
    let env = TestEnv::new("cluster-gc").await;
    let cms: Api<ConfigMap> = env.api();
    let owner = cms
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: ObjectMeta {
                    name: Some("owner".into()),
                    ..Default::default()
                },
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let dependent = ConfigMap {
        metadata: ObjectMeta {
            name: Some("dependent".into()),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "ConfigMap".into(),
                name: "owner".into(),
                uid: owner.uid().unwrap(),
                ..Default::default()
            }]),
            ..Default::default()
        },
        ..Default::default()
    };
    cms.create(&PostParams::default(), &dependent)
        .await
        .unwrap();
    cms.delete("owner", &DeleteParams::background())
        .await
        .unwrap();
    wait_for(
        "the dependent to be collected",
        Duration::from_secs(60),
        || async {
            match cms.get_opt("dependent").await {
                Ok(None) => Some(()),
                _ => None,
            }
        },
    )
    .await;
}

#[tokio::test]
async fn rbac_denies_a_service_account_without_permissions() {
    let env = TestEnv::new("cluster-rbac").await;
    let sas: Api<ServiceAccount> = env.api();
    sas.create(
        &PostParams::default(),
        &ServiceAccount {
            metadata: ObjectMeta {
                name: Some("nobody".into()),
                ..Default::default()
            },
            ..Default::default()
        },
    )
    .await
    .unwrap();
    let token = sas
        .create_token_request("nobody", &PostParams::default(), &TokenRequest::default())
        .await
        .unwrap()
        .status
        .unwrap()
        .token
        .expect("a token");

    let mut kc = kubeconfig();
    kc.auth_infos = vec![NamedAuthInfo {
        name: "nobody".into(),
        auth_info: Some(AuthInfo {
            token: Some(token.into()),
            ..Default::default()
        }),
        ..Default::default()
    }];
    for ctx in &mut kc.contexts {
        if let Some(c) = ctx.context.as_mut() {
            c.user = Some("nobody".into());
        }
    }
    let config = Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
        .await
        .unwrap();
    let client = Client::try_from(config).unwrap();
    let pods: Api<Pod> = Api::namespaced(client, &env.namespace);
    match pods.list(&ListParams::default()).await {
        Err(kube::Error::Api(s)) => {
            assert_eq!(s.code, 403, "{s:?}");
            assert!(
                s.message.contains("system:serviceaccount:"),
                "{}",
                s.message
            );
        }
        other => panic!("expected 403 Forbidden, got {other:?}"),
    }
}

/// When each of the Pod's states was first seen, from a watch.
#[derive(Debug, Default)]
struct Timeline {
    running_not_ready: Option<Instant>,
    ready: Option<Instant>,
    terminating: Option<Instant>,
    gone: Option<Instant>,
}

#[tokio::test]
#[cfg_attr(
    feature = "kind-e2e",
    ignore = "local-only: the delays are kwok stages of the local control plane"
)]
async fn pods_take_their_namespaces_delays_to_become_ready_and_to_go() {
    use futures::TryStreamExt;
    use kube::api::WatchEvent;
    let env = TestEnv::new("cluster-delays").await;
    let delay = Duration::from_millis(1500);
    env.set_pod_delays(PodDelays {
        ready: (delay, delay),
        delete: (delay, delay),
    })
    .await;
    let pods: Api<Pod> = env.api();
    let rv = current_rv(&pods).await;
    let mut events = watch_from(&pods, &rv).await;
    let pod = |name: &str, annotations: Value| -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "annotations": annotations},
            "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]}
        }))
        .unwrap()
    };
    let created = Instant::now();
    pods.create(&PostParams::default(), &pod("slow", json!({})))
        .await
        .unwrap();
    // A Pod's own annotation wins over its namespace's.
    let own = pods
        .create(
            &PostParams::default(),
            &pod("own", json!({"kwok.podkeeper.dev/ready-delay": "3s"})),
        )
        .await
        .unwrap();
    assert_eq!(
        own.annotations()["kwok.podkeeper.dev/ready-delay"],
        "3s",
        "{:?}",
        own.annotations()
    );
    let mut t = Timeline::default();
    let mut deleted = None;
    while t.gone.is_none() {
        let ev = tokio::time::timeout(Duration::from_secs(60), events.try_next())
            .await
            .expect("Pod events in time")
            .expect("watch")
            .expect("watch open");
        let now = Instant::now();
        match ev {
            WatchEvent::Added(p) | WatchEvent::Modified(p) if p.name_any() == "slow" => {
                let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
                if p.metadata.deletion_timestamp.is_some() {
                    t.terminating.get_or_insert(now);
                } else if is_ready(&p) {
                    t.ready.get_or_insert(now);
                } else if running {
                    t.running_not_ready.get_or_insert(now);
                }
                if t.ready.is_some() && deleted.is_none() {
                    pods.delete("slow", &DeleteParams::default()).await.unwrap();
                    deleted = Some(Instant::now());
                }
            }
            WatchEvent::Deleted(p) if p.name_any() == "slow" => {
                t.gone = Some(now);
            }
            _ => {}
        }
    }
    let (running, ready, terminating, gone) = (
        t.running_not_ready.expect("Running but not Ready first"),
        t.ready.unwrap(),
        t.terminating.expect("Terminating before it went"),
        t.gone.unwrap(),
    );
    let deleted = deleted.unwrap();
    // kwok counts each delay from when it sees the state before; a watch
    // sees it a little later, so allow 200 ms of that.
    let slack = Duration::from_millis(200);
    eprintln!(
        "delays: Running {:?} after create, Ready {:?} after Running, Terminating {:?} after the delete, gone {:?} after that",
        running - created,
        ready - running,
        terminating.saturating_duration_since(deleted),
        gone - terminating
    );
    assert!(ready - running + slack >= delay, "{t:?}");
    assert!(gone - terminating + slack >= delay, "{t:?}");
    assert!(
        ready - running < delay * 3 && gone - terminating < delay * 3,
        "{t:?}"
    );
}
