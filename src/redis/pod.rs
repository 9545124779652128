//! A Redis member's Pod: its template (redis-server with the operator's own
//! directives, probes, security context, spread over nodes) and the labels
//! that select a Redis's Pods. Pure.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, EmptyDirVolumeSource, PersistentVolumeClaimSpec,
    PersistentVolumeClaimVolumeSource, PodSecurityContext, PodSpec, PodTemplateSpec,
    SeccompProfile, SecurityContext, TopologySpreadConstraint, Volume, VolumeMount,
    VolumeResourceRequirements,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use kube::ResourceExt;

use crate::api::Redis;
use crate::api::names::{INSTANCE_LABEL, NAME_LABEL};
use crate::api::names::{MANAGED_BY_LABEL, MANAGED_BY_VALUE, ROLE_LABEL};
use crate::api::redis::Retention;
use crate::podset::claims::ClaimTemplate;
use crate::podset::revision::stamp;
use crate::redis::replication::config::{config_args, server_command};

/// The volume of the data directory.
pub const DATA_VOLUME: &str = "data";

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
    let port =
        u16::try_from(spec.port).map_err(|_| format!("spec.port {} out of range", spec.port))?;
    Ok(server_command(port, &args, spec.auth.is_some()))
}

/// Spread the members over nodes (at most one more on any node than on
/// another, counting only nodes the Pods may run on) and, where nodes have
/// zones, over zones as far as the scheduler can.
fn spread(name: &str) -> Vec<TopologySpreadConstraint> {
    let selector = LabelSelector {
        match_labels: Some(selector_labels(name)),
        ..Default::default()
    };
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
    let env = spec
        .auth
        .as_ref()
        .map(|auth| vec![crate::redis::replication::objects::password_env(auth)]);
    let container = Container {
        name: "redis".into(),
        image: Some(spec.image.clone()),
        image_pull_policy: Some(spec.image_pull_policy.as_str().into()),
        command: Some(command),
        args: Some(args),
        env,
        ports: Some(vec![ContainerPort {
            name: Some("redis".into()),
            container_port: port,
            protocol: Some("TCP".into()),
            ..Default::default()
        }]),
        readiness_probe: Some(crate::redis::replication::objects::readiness_probe(
            u16::try_from(port).unwrap_or(6379),
            spec.auth.is_some(),
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
        volume_mounts: Some(vec![VolumeMount {
            name: DATA_VOLUME.into(),
            mount_path: "/data".into(),
            ..Default::default()
        }]),
        ..Default::default()
    };
    let pod_spec = PodSpec {
        containers: vec![container],
        topology_spread_constraints: Some(spread(&redis.name_any())),
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
        volumes: Some(vec![data_volume(redis)]),
        ..Default::default()
    };
    // Every member starts as a replica (of the placeholder); the operator
    // moves the label of the one it makes primary.
    let mut labels = selector_labels(&redis.name_any());
    labels.insert(ROLE_LABEL.into(), "replica".into());
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels),
            ..Default::default()
        }),
        spec: Some(pod_spec),
    };
    Ok(stamp(template))
}
