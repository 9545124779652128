//! A Redis member's Pod: its template (redis-server with the operator's own
//! directives, probes, security context, spread over nodes) and the labels
//! that select a Redis's Pods. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, EnvVar,
    PersistentVolumeClaimSpec, PersistentVolumeClaimVolumeSource, Pod, PodSecurityContext, PodSpec,
    PodTemplateSpec, SeccompProfile, SecretVolumeSource, SecurityContext, TopologySpreadConstraint,
    Volume, VolumeMount, VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::ResourceExt;

use crate::api::Redis;
use crate::api::names::{CREDENTIALS_VERSION_ANNOTATION, INSTANCE_LABEL, NAME_LABEL};
use crate::api::names::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, ROLE_LABEL};
use crate::api::redis::{DefaultUser, Retention, is_own_key};
use crate::podset::claims::ClaimTemplate;
use crate::podset::revision::stamp;
use crate::redis::replication::config::{DEFAULT_USER_ENV, config_args, server_command, tls_args};
use crate::redis::replication::dial::MOUNT as TLS_MOUNT;
use crate::redis::replication::objects::Listener;

/// The volume of the data directory.
pub const DATA_VOLUME: &str = "data";

/// The volume of the TLS Secret (`spec.tls`).
pub const TLS_VOLUME: &str = "tls";
/// The name of the TLS port, in the Pods and the Services.
pub const TLS_PORT_NAME: &str = "redis-tls";

/// Uid and gid of the redis user in the official image.
const REDIS_UID: i64 = 999;

/// The labels that select a Redis's Pods.
pub fn selector_labels(name: &str) -> BTreeMap<String, String> {
    [
        (NAME_LABEL.to_string(), "redis".to_string()),
        (INSTANCE_LABEL.to_string(), name.to_string()),
        (MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string()),
    ]
    .into()
}

/// The selector in string form, for status.selector and `kubectl scale`.
pub fn selector_string(name: &str) -> String {
    selector_labels(name)
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The redis-server command and arguments of a member: `spec.config`
/// (validated; `maxmemory` from the memory limit unless set), listening on
/// every address of the Pod (Debian's redis-server defaults to loopback
/// with protected mode), data in /data, and starting as a replica of the
/// placeholder (see [`crate::redis::replication`]). Pure.
pub fn server_args(redis: &Redis) -> Result<(Vec<String>, Vec<String>), String> {
    let spec = &redis.spec;
    let memory_limit = spec
        .resources
        .as_ref()
        .and_then(|r| r.limits.as_ref())
        .and_then(|l| l.get("memory"));
    let mut args: Vec<String> = ["--bind", "*", "-::*", "--dir", "/data"]
        .iter()
        .map(|a| a.to_string())
        .collect();
    args.extend(
        config_args(&spec.config, memory_limit, spec.storage.is_some())
            .map_err(|e| e.to_string())?,
    );
    if let Some(tls) = &spec.tls {
        args.extend(tls_args(tls));
    }
    let port =
        u16::try_from(spec.port).map_err(|_| format!("spec.port {} out of range", spec.port))?;
    // Port 0: no plaintext at all.
    let port = if plaintext(redis) { port } else { 0 };
    Ok(server_command(port, &args))
}

/// Whether members serve plaintext (on `spec.port`).
pub fn plaintext(redis: &Redis) -> bool {
    redis.spec.tls.as_ref().is_none_or(|t| t.plaintext)
}

/// The ports a member's redis-server listens on, read from its Pod (whose
/// template may be older than the spec): the container's ports are those
/// of its command line.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemberPorts {
    /// Plaintext (`--port`, not 0).
    pub plain: Option<u16>,
    /// TLS (`--tls-port`).
    pub tls: Option<u16>,
}

impl MemberPorts {
    /// Of `pod`'s redis container, from its named ports (`redis`,
    /// `redis-tls`; kept in the operator's Pod cache).
    pub fn of(pod: &Pod) -> MemberPorts {
        let ports = pod
            .spec
            .as_ref()
            .and_then(|s| s.containers.iter().find(|c| c.name == "redis"))
            .and_then(|c| c.ports.as_ref());
        let named = |name: &str| {
            ports
                .and_then(|ps| ps.iter().find(|p| p.name.as_deref() == Some(name)))
                .and_then(|p| u16::try_from(p.container_port).ok())
        };
        MemberPorts {
            plain: named("redis"),
            tls: named(TLS_PORT_NAME),
        }
    }

    /// Serves TLS only.
    pub fn tls_only(&self) -> bool {
        self.tls.is_some() && self.plain.is_none()
    }
}

/// Whether a Redis's members replicate over TLS (and the operator talks
/// TLS to them): once plaintext is off, or while a member serves TLS only
/// (plaintext turned back on: until the last of those is replaced). The
/// same for every member that serves TLS, so that each follows the
/// primary on the primary's replication port; the operator sets it at run
/// time where a member's Pod says otherwise. Pure.
pub fn replication_over_tls(redis: &Redis, pods: &[MemberPorts]) -> bool {
    redis.spec.tls.as_ref().is_some_and(|t| !t.plaintext) || pods.iter().any(MemberPorts::tls_only)
}

/// The label selector of a Redis's members.
fn members(name: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some(selector_labels(name)),
        ..Default::default()
    }
}

/// Spread the members over nodes (at most one more on any node than on
/// another, counting only nodes the Pods may run on) and, where nodes have
/// zones, over zones as far as the scheduler can.
fn spread(name: &str) -> Vec<TopologySpreadConstraint> {
    let selector = members(name);
    [
        ("kubernetes.io/hostname", "DoNotSchedule"),
        ("topology.kubernetes.io/zone", "ScheduleAnyway"),
    ]
    .into_iter()
    .map(|(key, when)| TopologySpreadConstraint {
        label_selector: Some(selector.clone()),
        max_skew: 1,
        topology_key: key.into(),
        when_unsatisfiable: when.into(),
        node_taints_policy: Some("Honor".into()),
        ..Default::default()
    })
    .collect()
}

/// The data directory's volume: the member's claim with `spec.storage`
/// (its name is filled in per Pod, see [`crate::podset::claims`]), else an
/// `emptyDir`.
fn data_volume(redis: &Redis) -> Volume {
    let mut volume = Volume {
        name: DATA_VOLUME.into(),
        ..Default::default()
    };
    if redis.spec.storage.is_some() {
        volume.persistent_volume_claim = Some(PersistentVolumeClaimVolumeSource {
            claim_name: String::new(),
            read_only: None,
        });
    } else {
        volume.empty_dir = Some(EmptyDirVolumeSource::default());
    }
    volume
}

/// A member's claim, from `spec.storage`: its size and class, and what
/// becomes of it on scale-down and deletion. The claim of the recorded
/// primary is taken first when free (every member restarted at once: see
/// [`crate::redis::replication::topology`]). Pure.
pub fn claim_template(redis: &Redis) -> Option<ClaimTemplate> {
    let storage = redis.spec.storage.as_ref()?;
    Some(ClaimTemplate {
        volume: DATA_VOLUME.into(),
        spec: PersistentVolumeClaimSpec {
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some([("storage".to_string(), storage.size.clone())].into()),
                limits: None,
            }),
            storage_class_name: storage.storage_class_name.clone(),
            ..Default::default()
        },
        labels: selector_labels(&redis.name_any()),
        delete_when_scaled: storage.retention.when_scaled == Retention::Delete,
        delete_when_deleted: storage.retention.when_deleted == Retention::Delete,
        prefer: redis
            .status
            .as_ref()
            .and_then(|s| s.primary.as_ref())
            .and_then(|p| p.claim.clone()),
    })
}

/// The Pod template of a Redis, with its template hash label, or why
/// `spec.config` cannot work. Pure.
pub fn pod_template(redis: &Redis) -> Result<PodTemplateSpec, String> {
    let spec = &redis.spec;
    let port = spec.port;
    let (command, args) = server_args(redis)?;
    let mut env =
        crate::redis::replication::objects::operator_password_env(&redis.name_any()).to_vec();
    if spec.default_user == DefaultUser::Disabled {
        env.push(EnvVar {
            name: DEFAULT_USER_ENV.into(),
            value: Some("off".into()),
            ..Default::default()
        });
    }
    env.extend(
        spec.auth
            .as_ref()
            .map(crate::redis::replication::objects::password_env),
    );
    let container = Container {
        name: "redis".into(),
        image: Some(spec.image.clone()),
        image_pull_policy: Some(spec.image_pull_policy.as_str().into()),
        command: Some(command),
        args: Some(args),
        env: Some(env),
        ports: Some(
            [
                plaintext(redis).then_some(("redis", port)),
                spec.tls.as_ref().map(|t| (TLS_PORT_NAME, t.port)),
            ]
            .into_iter()
            .flatten()
            .map(|(name, port)| ContainerPort {
                name: Some(name.into()),
                container_port: port,
                protocol: Some("TCP".into()),
                ..Default::default()
            })
            .collect(),
        ),
        readiness_probe: Some(crate::redis::replication::objects::readiness_probe(
            match spec.tls.as_ref().filter(|_| !plaintext(redis)) {
                Some(t) => Listener::Tls(u16::try_from(t.port).unwrap_or(6380)),
                None => Listener::Plain(u16::try_from(port).unwrap_or(6379)),
            },
        )),
        resources: spec.resources.clone(),
        security_context: Some(SecurityContext {
            allow_privilege_escalation: Some(false),
            read_only_root_filesystem: Some(true),
            run_as_non_root: Some(true),
            capabilities: Some(Capabilities {
                drop: Some(vec!["ALL".into()]),
                add: None,
            }),
            ..Default::default()
        }),
        volume_mounts: Some(
            std::iter::once(VolumeMount {
                name: DATA_VOLUME.into(),
                mount_path: "/data".into(),
                ..Default::default()
            })
            .chain(spec.tls.as_ref().map(|_| VolumeMount {
                name: TLS_VOLUME.into(),
                mount_path: TLS_MOUNT.into(),
                read_only: Some(true),
                ..Default::default()
            }))
            .collect(),
        ),
        ..Default::default()
    };
    let name = redis.name_any();
    let pod_spec = PodSpec {
        containers: vec![container],
        topology_spread_constraints: spread_constraints(redis),
        node_selector: (!spec.node_selector.is_empty()).then(|| spec.node_selector.clone()),
        tolerations: (!spec.tolerations.is_empty()).then(|| spec.tolerations.clone()),
        affinity: spec.affinity.clone(),
        priority_class_name: spec.priority_class_name.clone(),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(REDIS_UID),
            run_as_group: Some(REDIS_UID),
            fs_group: Some(REDIS_UID),
            seccomp_profile: Some(SeccompProfile {
                type_: "RuntimeDefault".into(),
                localhost_profile: None,
            }),
            ..Default::default()
        }),
        volumes: Some(
            std::iter::once(data_volume(redis))
                .chain(
                    crate::redis::certs::secret_name(redis).map(|secret| Volume {
                        name: TLS_VOLUME.into(),
                        // Not a subPath: the kubelet writes a renewed Secret
                        // into the volume, where redis-server reads it again.
                        secret: Some(SecretVolumeSource {
                            secret_name: Some(secret),
                            // Readable by the redis group (fsGroup) only.
                            default_mode: Some(0o440),
                            optional: Some(false),
                            ..Default::default()
                        }),
                        ..Default::default()
                    }),
                )
                .collect(),
        ),
        ..Default::default()
    };
    // spec.podMetadata first, podkeeper's own labels over it (the CRD
    // refuses its keys; checked again here).
    let extra = &spec.pod_metadata;
    for (field, map) in [
        ("labels", &extra.labels),
        ("annotations", &extra.annotations),
    ] {
        if let Some(key) = map.keys().find(|k| is_own_key(k)) {
            return Err(format!(
                "spec.podMetadata.{field}: {key} cannot be set: it is podkeeper's own"
            ));
        }
    }
    let mut labels = extra.labels.clone();
    labels.extend(selector_labels(&name));
    // Every member starts as a replica (of the placeholder); the operator
    // moves the label of the one it makes primary.
    labels.insert(ROLE_LABEL.into(), "replica".into());
    let mut annotations = extra.annotations.clone();
    // A rotation of podkeeper's own passwords rolls the members: each is
    // started again with the new ones (`crate::redis::credentials`).
    if let Some(version) = redis
        .status
        .as_ref()
        .and_then(|s| s.credentials_version.clone())
    {
        annotations.insert(CREDENTIALS_VERSION_ANNOTATION.into(), version);
    }
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels),
            annotations: (!annotations.is_empty()).then_some(annotations),
            ..Default::default()
        }),
        spec: Some(pod_spec),
    };
    Ok(stamp(template))
}

/// The members' spread: `spec.topologySpreadConstraints` when given (a
/// constraint without a label selector counts this Redis's members; an
/// empty list spreads nothing), else [`spread`].
fn spread_constraints(redis: &Redis) -> Option<Vec<TopologySpreadConstraint>> {
    let name = redis.name_any();
    let Some(given) = &redis.spec.topology_spread_constraints else {
        return Some(spread(&name));
    };
    let constraints: Vec<_> = given
        .iter()
        .cloned()
        .map(|mut c| {
            c.label_selector.get_or_insert_with(|| members(&name));
            c
        })
        .collect();
    (!constraints.is_empty()).then_some(constraints)
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::api::names::TEMPLATE_HASH_LABEL;
    use crate::podset::revision::revision_of;

    fn redis(spec: serde_json::Value) -> Redis {
        let mut spec = spec;
        spec["image"] = "redis:7".into();
        serde_json::from_value(serde_json::json!({
            "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
            "metadata": {"name": "cache", "namespace": "ns"},
            "spec": spec,
        }))
        .unwrap()
    }

    fn pod_spec(t: &PodTemplateSpec) -> &PodSpec {
        t.spec.as_ref().unwrap()
    }

    fn container(t: &PodTemplateSpec) -> &Container {
        &pod_spec(t).containers[0]
    }

    #[test]
    fn with_tls_the_secret_is_mounted_and_plaintext_is_off_unless_kept() {
        let plain = pod_template(&redis(serde_json::json!({"replicas": 3}))).unwrap();
        let only = pod_template(&redis(serde_json::json!({"replicas": 3, "tls": {}}))).unwrap();
        let both = pod_template(&redis(
            serde_json::json!({"replicas": 3, "tls": {"secretName": "cache-cert", "port": 7000, "plaintext": true}}),
        ))
        .unwrap();
        let ports = |t: &PodTemplateSpec| {
            container(t)
                .ports
                .iter()
                .flatten()
                .map(|p| (p.name.clone().unwrap(), p.container_port))
                .collect::<Vec<_>>()
        };
        assert_eq!(ports(&plain), [("redis".to_string(), 6379)]);
        assert_eq!(ports(&only), [("redis-tls".to_string(), 6380)]);
        assert_eq!(
            ports(&both),
            [("redis".to_string(), 6379), ("redis-tls".to_string(), 7000)]
        );
        // The members' ports read back from their Pods.
        let of = |t: &PodTemplateSpec| {
            MemberPorts::of(&Pod {
                spec: t.spec.clone(),
                ..Default::default()
            })
        };
        assert_eq!(
            of(&plain),
            MemberPorts {
                plain: Some(6379),
                tls: None
            }
        );
        assert_eq!(
            of(&only),
            MemberPorts {
                plain: None,
                tls: Some(6380)
            }
        );
        assert_eq!(
            of(&both),
            MemberPorts {
                plain: Some(6379),
                tls: Some(7000)
            }
        );
        // The Secret: podkeeper's, or the user's; not a subPath (renewals
        // reach the running container).
        let secret = |t: &PodTemplateSpec| {
            let volume = pod_spec(t)
                .volumes
                .iter()
                .flatten()
                .find(|v| v.name == TLS_VOLUME)?;
            let mount = container(t)
                .volume_mounts
                .iter()
                .flatten()
                .find(|m| m.name == TLS_VOLUME)
                .unwrap();
            assert_eq!(mount.mount_path, "/tls");
            assert!(mount.sub_path.is_none());
            volume.secret.as_ref()?.secret_name.clone()
        };
        assert_eq!(secret(&plain), None);
        assert_eq!(secret(&only).as_deref(), Some("cache-tls"));
        assert_eq!(secret(&both).as_deref(), Some("cache-cert"));
        let args = |t: &PodTemplateSpec| container(t).args.clone().unwrap().join(" ");
        assert!(args(&only).contains("--port 0 "), "{}", args(&only));
        assert!(args(&only).contains("--tls-replication yes"));
        assert!(args(&only).contains("--tls-cert-file /tls/tls.crt"));
        assert!(!args(&both).contains("--tls-replication"));
        assert!(!args(&plain).contains("--tls"));
        // The probe asks over TLS where there is nothing else.
        let probe = |t: &PodTemplateSpec| {
            container(t)
                .readiness_probe
                .as_ref()
                .unwrap()
                .exec
                .as_ref()
                .unwrap()
                .command
                .clone()
                .unwrap()[2]
                .clone()
        };
        assert!(probe(&only).contains("--tls --cacert /tls/ca.crt"));
        assert!(probe(&only).contains("-p 6380"));
        assert!(!probe(&both).contains("--tls"));
        // Replication over TLS once plaintext is off, or while a member
        // serves TLS only.
        let (r_only, r_both) = (
            redis(serde_json::json!({"tls": {}})),
            redis(serde_json::json!({"tls": {"plaintext": true}})),
        );
        assert!(replication_over_tls(&r_only, &[of(&both)]));
        assert!(!replication_over_tls(&r_both, &[of(&both), of(&plain)]));
        assert!(replication_over_tls(&r_both, &[of(&both), of(&only)]));
    }

    fn scheduling() -> serde_json::Value {
        serde_json::json!({
            "nodeSelector": {"disk": "ssd"},
            "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "redis", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}]}}},
            "priorityClassName": "redis-high",
            "podMetadata": {"labels": {"team": "cache"}, "annotations": {"example.com/owner": "platform"}},
        })
    }

    /// Without the scheduling fields the template is what it was before
    /// they existed (no field of theirs set), so existing members are not
    /// rolled when the operator is upgraded.
    #[test]
    fn without_scheduling_fields_the_pod_spec_sets_none_and_spreads_by_default() {
        let r = redis(serde_json::json!({}));
        let t = pod_template(&r).unwrap();
        let spec = pod_spec(&t);
        assert_eq!(spec.node_selector, None);
        assert_eq!(spec.tolerations, None);
        assert_eq!(spec.affinity, None);
        assert_eq!(spec.priority_class_name, None);
        assert_eq!(spec.topology_spread_constraints, Some(spread("cache")));
        let json = serde_json::to_value(&t).unwrap();
        for field in [
            "nodeSelector",
            "tolerations",
            "affinity",
            "priorityClassName",
        ] {
            assert!(json["spec"].get(field).is_none(), "{field}");
        }
        // Only podkeeper's labels and annotations.
        let meta = t.metadata.as_ref().unwrap();
        assert!(meta.labels.as_ref().unwrap().keys().all(|k| is_own_key(k)));
        assert!(
            meta.annotations
                .as_ref()
                .unwrap()
                .keys()
                .all(|k| is_own_key(k))
        );
    }

    #[test]
    fn scheduling_fields_land_on_the_pod_spec_and_change_the_hash() {
        let plain = pod_template(&redis(serde_json::json!({}))).unwrap();
        let r = redis(scheduling());
        let t = pod_template(&r).unwrap();
        let spec = pod_spec(&t);
        assert_eq!(
            spec.node_selector,
            Some([("disk".into(), "ssd".into())].into())
        );
        let tolerations = spec.tolerations.as_ref().unwrap();
        assert_eq!(tolerations.len(), 1);
        assert_eq!(tolerations[0].key.as_deref(), Some("dedicated"));
        assert_eq!(tolerations[0].effect.as_deref(), Some("NoSchedule"));
        let terms = &spec
            .affinity
            .as_ref()
            .unwrap()
            .node_affinity
            .as_ref()
            .unwrap();
        let required = terms
            .required_during_scheduling_ignored_during_execution
            .as_ref();
        assert_eq!(required.unwrap().node_selector_terms.len(), 1);
        assert_eq!(spec.priority_class_name.as_deref(), Some("redis-high"));
        assert_eq!(spec.topology_spread_constraints, Some(spread("cache")));
        assert_ne!(revision_of(&plain), revision_of(&t));
        // Each field on its own changes the hash (so the members are rolled).
        let all = scheduling();
        let mut hashes = vec![revision_of(&plain)];
        for field in all.as_object().unwrap().keys() {
            let one = serde_json::json!({ field.as_str(): all[field].clone() });
            hashes.push(revision_of(&pod_template(&redis(one)).unwrap()));
        }
        let spread = serde_json::json!({"topologySpreadConstraints": []});
        hashes.push(revision_of(&pod_template(&redis(spread)).unwrap()));
        let distinct: std::collections::BTreeSet<_> = hashes.iter().collect();
        assert_eq!(distinct.len(), hashes.len(), "{hashes:?}");
    }

    #[test]
    fn given_spread_constraints_replace_the_default_and_count_the_members() {
        let r = redis(serde_json::json!({"topologySpreadConstraints": [
            {"maxSkew": 2, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule"},
            {"maxSkew": 1, "topologyKey": "rack", "whenUnsatisfiable": "ScheduleAnyway",
             "labelSelector": {"matchLabels": {"app": "other"}}},
        ]}));
        let t = pod_template(&r).unwrap();
        let given = pod_spec(&t).topology_spread_constraints.as_ref().unwrap();
        assert_eq!(given.len(), 2);
        assert_eq!(
            (given[0].max_skew, given[0].topology_key.as_str()),
            (2, "topology.kubernetes.io/zone")
        );
        assert_eq!(given[0].label_selector, Some(members("cache")));
        assert_eq!(given[0].node_taints_policy, None, "as given");
        let other = given[1].label_selector.as_ref().unwrap();
        assert_eq!(
            other.match_labels,
            Some([("app".into(), "other".into())].into()),
            "a given selector is kept"
        );
        assert!(
            given
                .iter()
                .all(|c| c.topology_key != "kubernetes.io/hostname")
        );
        // An empty list: no spreading at all.
        let none = redis(serde_json::json!({"topologySpreadConstraints": []}));
        let t = pod_template(&none).unwrap();
        assert_eq!(pod_spec(&t).topology_spread_constraints, None);
    }

    #[test]
    fn pod_metadata_is_added_and_podkeepers_own_labels_stay() {
        let t = pod_template(&redis(scheduling())).unwrap();
        let meta = t.metadata.as_ref().unwrap();
        let labels = meta.labels.as_ref().unwrap();
        assert_eq!(labels["team"], "cache");
        for (k, v) in selector_labels("cache") {
            assert_eq!(labels[&k], v);
        }
        assert_eq!(labels[ROLE_LABEL], "replica");
        assert!(labels.contains_key(TEMPLATE_HASH_LABEL));
        let annotations = meta.annotations.as_ref().unwrap();
        assert_eq!(annotations["example.com/owner"], "platform");
        assert!(annotations.contains_key(crate::api::names::BUT_IMAGES_ANNOTATION));
        // podkeeper's own keys are refused (the CRD refuses them first).
        for (field, key) in [
            ("labels", "app.kubernetes.io/instance"),
            ("labels", "podkeeper.dev/role"),
            ("annotations", "podkeeper.dev/template-hash-but-images"),
            ("annotations", "x.podkeeper.dev/y"),
        ] {
            let r = redis(serde_json::json!({"podMetadata": {field: {key: "v"}}}));
            let e = pod_template(&r).unwrap_err();
            assert!(e.contains(key) && e.contains(field), "{e}");
        }
    }

    #[test]
    fn own_keys_are_podkeepers_labels_and_its_domain() {
        for k in [
            "app.kubernetes.io/name",
            "app.kubernetes.io/instance",
            "app.kubernetes.io/managed-by",
            "podkeeper.dev/role",
            "podkeeper.dev/anything",
            "kwok.podkeeper.dev/x",
        ] {
            assert!(is_own_key(k), "{k}");
        }
        for k in [
            "app.kubernetes.io/part-of",
            "team",
            "example.com/podkeeper.dev",
            "notpodkeeper.dev/x",
            "podkeeper.dev",
        ] {
            assert!(!is_own_key(k), "{k}");
        }
    }
}
