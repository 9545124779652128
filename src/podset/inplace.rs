//! In-place updates: what tells an outdated Pod that can be updated where it
//! runs (it keeps its name, UID, node and IP) from one that must be
//! replaced, and when such an update is done. Pure.
//!
//! Every Pod carries, besides its template hash, two more hashes of its
//! template: one with the containers' images left out and one with their
//! images and resources left out ([`crate::podset::revision::stamp_keys`]). An outdated Pod whose
//! first hash equals the current template's differs from it only in
//! container images: patching the images updates it. One whose second hash
//! equals the current template's differs only in images and resources: the
//! `resize` subresource (and an image patch, if images changed too) updates
//! it. Anything else changed, or a Pod created before these hashes existed:
//! it is replaced.
//!
//! The patch that updates a Pod also moves its template hash label to the
//! current revision and records that revision in
//! [`UPDATED_IN_PLACE_ANNOTATION`]. From then on the Pod counts as updated,
//! but not as Ready until it [`settled`]: every container reports the spec's
//! image and is ready, no resize is pending or in progress, and the kubelet
//! has observed the Pod's latest generation (where it reports one).

use k8s_openapi::api::core::v1::{
    Container, ContainerStatus, Pod, PodTemplateSpec, ResourceRequirements,
};
use serde_json::{Map, Value, json};

use crate::api::names::TEMPLATE_HASH_LABEL;
use crate::api::names::{
    BUT_IMAGES_ANNOTATION, BUT_RESOURCES_ANNOTATION, RESTARTED_FROM_ANNOTATION,
    UPDATED_AT_ANNOTATION, UPDATED_IN_PLACE_ANNOTATION,
};
use crate::podset::revision::InPlaceKeys;

/// What an in-place update of one Pod changes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Change {
    /// Container images only: a patch of the Pod.
    Images,
    /// Container resources, and maybe images: the `resize` subresource.
    Resources,
}

impl InPlaceKeys {
    /// How `self` (a Pod's keys) can be brought to `desired` in place, if
    /// at all; `resize`: whether resources may change in place.
    pub fn change_to(&self, desired: &InPlaceKeys, resize: bool) -> Option<Change> {
        if self.but_images == desired.but_images {
            Some(Change::Images)
        } else if resize && self.but_resources == desired.but_resources {
            Some(Change::Resources)
        } else {
            None
        }
    }
}

/// An image reference in the form container runtimes report it: a domain
/// (`docker.io` when there is none), `library/` for Docker Hub's official
/// images, and `:latest` when there is neither tag nor digest. So
/// `redis:7.4` and `docker.io/library/redis:7.4` are the same image.
pub fn normalize_image(image: &str) -> String {
    let image = image.trim();
    let (name, digest) = match image.split_once('@') {
        Some((n, d)) => (n, Some(d)),
        None => (image, None),
    };
    // A tag is a ':' after the last '/'.
    let last_slash = name.rfind('/').map_or(0, |i| i + 1);
    let (repo, tag) = match name[last_slash..].rfind(':') {
        Some(i) => (&name[..last_slash + i], Some(&name[last_slash + i + 1..])),
        None => (name, None),
    };
    let first = repo.split('/').next().unwrap_or_default();
    let has_domain =
        repo.contains('/') && (first.contains('.') || first.contains(':') || first == "localhost");
    let mut full = if has_domain {
        repo.to_string()
    } else if repo.contains('/') {
        format!("docker.io/{repo}")
    } else {
        format!("docker.io/library/{repo}")
    };
    if let Some(rest) = full.strip_prefix("docker.io/")
        && !rest.contains('/')
    {
        full = format!("docker.io/library/{rest}");
    }
    match (tag, digest) {
        (Some(t), Some(d)) => format!("{full}:{t}@{d}"),
        (Some(t), None) => format!("{full}:{t}"),
        (None, Some(d)) => format!("{full}@{d}"),
        (None, None) => format!("{full}:latest"),
    }
}

/// Whether two image references name the same image.
pub fn same_image(a: &str, b: &str) -> bool {
    normalize_image(a) == normalize_image(b)
}

/// The revision the Pod was last updated to in place, if any.
pub fn updated_in_place(pod: &Pod) -> Option<&str> {
    pod.metadata
        .annotations
        .as_ref()?
        .get(UPDATED_IN_PLACE_ANNOTATION)
        .map(String::as_str)
}

/// A Pod updated in place is done: every container reports the spec's
/// image and is ready, no resize is pending or in progress, and the kubelet
/// has seen the Pod's latest spec (`status.observedGeneration`, where it
/// reports it).
pub fn settled(pod: &Pod) -> bool {
    let (Some(spec), Some(status)) = (pod.spec.as_ref(), pod.status.as_ref()) else {
        return false;
    };
    let statuses = status.container_statuses.as_deref().unwrap_or_default();
    // Runtimes report one name of the image a container runs: with several
    // tags on one image (as on kind here) not necessarily the spec's. A
    // container started since the update runs the new spec too.
    let updated_at: Option<k8s_openapi::jiff::Timestamp> = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(UPDATED_AT_ANNOTATION))
        .and_then(|t| t.parse().ok());
    let started_since = |s: &ContainerStatus| {
        let started = s
            .state
            .as_ref()
            .and_then(|st| st.running.as_ref())
            .and_then(|r| r.started_at.as_ref())
            .map(|t| t.0);
        matches!((started, updated_at), (Some(st), Some(at)) if st.as_second() >= at.as_second())
    };
    let restarted_from: std::collections::BTreeMap<String, String> = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(RESTARTED_FROM_ANNOTATION))
        .and_then(|v| serde_json::from_str(v).ok())
        .unwrap_or_default();
    // A container recorded at the update is updated once it runs as another
    // ID; one updated before IDs were recorded, by its image or start time.
    let updated = |c: &Container, s: &ContainerStatus| match restarted_from.get(&c.name) {
        Some(old) => s
            .container_id
            .as_deref()
            .is_some_and(|id| !id.is_empty() && id != old),
        None => c.image.as_deref().is_some_and(|i| same_image(i, &s.image)) || started_since(s),
    };
    let containers_done = spec.containers.iter().all(|c| {
        statuses
            .iter()
            .any(|s| s.name == c.name && s.ready && updated(c, s))
    });
    let resizing = status.conditions.iter().flatten().any(|c| {
        (c.type_ == "PodResizePending" || c.type_ == "PodResizeInProgress") && c.status == "True"
    });
    let seen = match (status.observed_generation, pod.metadata.generation) {
        (Some(observed), Some(generation)) => observed >= generation,
        _ => true,
    };
    containers_done && !resizing && seen
}

/// The kubelet reported that the Pod's resize cannot be done on its node
/// (`PodResizePending` with reason `Infeasible`).
pub fn resize_infeasible(pod: &Pod) -> bool {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                c.type_ == "PodResizePending"
                    && c.status == "True"
                    && c.reason.as_deref() == Some("Infeasible")
            })
        })
}

/// One container's image change, for Events.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ImageChange {
    pub container: String,
    pub from: String,
    pub to: String,
}

/// The images of `template` that differ from `live`'s.
pub fn image_changes(live: &Pod, template: &PodTemplateSpec) -> Vec<ImageChange> {
    let want = template.spec.as_ref().map(|s| &s.containers[..]);
    let have = live.spec.as_ref().map(|s| &s.containers[..]);
    let (Some(want), Some(have)) = (want, have) else {
        return Vec::new();
    };
    want.iter()
        .filter_map(|w| {
            let h = have.iter().find(|h| h.name == w.name)?;
            let (to, from) = (w.image.clone()?, h.image.clone().unwrap_or_default());
            (to != from).then(|| ImageChange {
                container: w.name.clone(),
                from,
                to,
            })
        })
        .collect()
}

/// The strategic merge patch that updates `live` in place to `template`
/// (revision `revision`): the images that changed, the template hash
/// label, the in-place keys and [`UPDATED_IN_PLACE_ANNOTATION`]. The Pod's
/// uid is in the patch, so it applies to that Pod only.
pub fn update_patch(
    live: &Pod,
    template: &PodTemplateSpec,
    revision: &str,
    now: k8s_openapi::jiff::Timestamp,
) -> Value {
    let changes = image_changes(live, template);
    let containers: Vec<Value> = changes
        .iter()
        .map(|c| json!({"name": c.container, "image": c.to}))
        .collect();
    let statuses = live
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default();
    let restarted_from: Map<String, Value> = changes
        .iter()
        .filter_map(|c| {
            let s = statuses.iter().find(|s| s.name == c.container)?;
            let id = s.container_id.as_deref().filter(|id| !id.is_empty())?;
            Some((c.container.clone(), json!(id)))
        })
        .collect();
    let keys = InPlaceKeys::read(
        template
            .metadata
            .as_ref()
            .and_then(|m| m.annotations.as_ref()),
    )
    .unwrap_or_default();
    let mut patch = json!({
        "metadata": {
            "uid": live.metadata.uid,
            "labels": {TEMPLATE_HASH_LABEL: revision},
            "annotations": {
                UPDATED_IN_PLACE_ANNOTATION: revision,
                UPDATED_AT_ANNOTATION: now.to_string(),
                BUT_IMAGES_ANNOTATION: keys.but_images,
                BUT_RESOURCES_ANNOTATION: keys.but_resources,
            },
        },
    });
    // Always set (null removes it): a record from an earlier update would
    // otherwise judge this one.
    patch["metadata"]["annotations"][RESTARTED_FROM_ANNOTATION] = if restarted_from.is_empty() {
        Value::Null
    } else {
        json!(Value::Object(restarted_from).to_string())
    };
    if !containers.is_empty() {
        patch["spec"] = json!({"containers": containers});
    }
    patch
}

/// The strategic merge patch for the `resize` subresource that gives
/// `live`'s containers `template`'s resources (requests and limits that
/// the template no longer has are removed), or `None` when they are equal.
pub fn resize_patch(live: &Pod, template: &PodTemplateSpec) -> Option<Value> {
    let want = template.spec.as_ref()?;
    let have = live.spec.as_ref()?;
    let containers: Vec<Value> = want
        .containers
        .iter()
        .filter_map(|w| {
            let h = have.containers.iter().find(|h| h.name == w.name)?;
            let empty = ResourceRequirements::default();
            let wr = w.resources.as_ref().unwrap_or(&empty);
            let hr = h.resources.as_ref().unwrap_or(&empty);
            let field = |want: &Option<std::collections::BTreeMap<String, _>>,
                         have: &Option<std::collections::BTreeMap<String, _>>|
             -> Option<Value> {
                let want = want.clone().unwrap_or_default();
                let have = have.clone().unwrap_or_default();
                if want == have {
                    return None;
                }
                let mut m = Map::new();
                for (k, v) in &want {
                    m.insert(k.clone(), json!(v));
                }
                for k in have.keys().filter(|k| !want.contains_key(*k)) {
                    m.insert(k.clone(), Value::Null);
                }
                Some(Value::Object(m))
            };
            let requests = field(&wr.requests, &hr.requests);
            let limits = field(&wr.limits, &hr.limits);
            if requests.is_none() && limits.is_none() {
                return None;
            }
            let mut r = Map::new();
            if let Some(v) = requests {
                r.insert("requests".into(), v);
            }
            if let Some(v) = limits {
                r.insert("limits".into(), v);
            }
            Some(json!({"name": w.name, "resources": r}))
        })
        .collect();
    (!containers.is_empty()).then(|| json!({"spec": {"containers": containers}}))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podset::revision::stamp_keys;
    use k8s_openapi::api::core::v1::{ContainerStatus, PodCondition, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn template(image: &str, cpu: &str, args: &str) -> PodTemplateSpec {
        PodTemplateSpec {
            metadata: None,
            spec: Some(PodSpec {
                containers: vec![Container {
                    name: "c".into(),
                    image: Some(image.into()),
                    args: Some(vec![args.into()]),
                    resources: Some(ResourceRequirements {
                        requests: Some([("cpu".to_string(), Quantity(cpu.into()))].into()),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
        }
    }

    #[test]
    fn keys_tell_image_and_resource_changes_from_others() {
        let base = InPlaceKeys::of_template(&template("a:1", "1", "x"));
        let image = InPlaceKeys::of_template(&template("a:2", "1", "x"));
        let cpu = InPlaceKeys::of_template(&template("a:2", "2", "x"));
        let args = InPlaceKeys::of_template(&template("a:1", "1", "y"));
        assert_eq!(base.change_to(&image, true), Some(Change::Images));
        assert_eq!(base.change_to(&cpu, true), Some(Change::Resources));
        assert_eq!(base.change_to(&cpu, false), None);
        assert_eq!(base.change_to(&args, true), None);
    }

    #[test]
    fn images_normalize_as_runtimes_report_them() {
        assert_eq!(normalize_image("redis:7.4"), "docker.io/library/redis:7.4");
        assert_eq!(normalize_image("redis"), "docker.io/library/redis:latest");
        assert_eq!(
            normalize_image("bitnami/redis:7"),
            "docker.io/bitnami/redis:7"
        );
        assert_eq!(
            normalize_image("podkeeper.dev/redis:7.0.15-debian"),
            "podkeeper.dev/redis:7.0.15-debian"
        );
        assert_eq!(
            normalize_image("localhost:5000/r@sha256:ab"),
            "localhost:5000/r@sha256:ab"
        );
        assert!(same_image("docker.io/redis:7", "redis:7"));
        assert!(!same_image("redis:7", "redis:8"));
    }

    fn pod(spec_image: &str, status_image: &str, ready: bool) -> Pod {
        Pod {
            metadata: ObjectMeta {
                uid: Some("u1".into()),
                generation: Some(2),
                ..Default::default()
            },
            spec: template(spec_image, "1", "x").spec,
            status: Some(PodStatus {
                observed_generation: Some(2),
                container_statuses: Some(vec![ContainerStatus {
                    name: "c".into(),
                    image: status_image.into(),
                    ready,
                    ..Default::default()
                }]),
                ..Default::default()
            }),
        }
    }

    fn first_status(p: &mut Pod) -> &mut ContainerStatus {
        &mut p
            .status
            .as_mut()
            .unwrap()
            .container_statuses
            .as_mut()
            .unwrap()[0]
    }

    #[test]
    fn settled_only_on_the_new_image_ready_and_observed() {
        assert!(settled(&pod("redis:8", "docker.io/library/redis:8", true)));
        assert!(!settled(&pod("redis:8", "docker.io/library/redis:7", true)));
        assert!(!settled(&pod("redis:8", "redis:8", false)));
        let mut p = pod("redis:8", "redis:8", true);
        p.metadata.generation = Some(3);
        assert!(!settled(&p), "the kubelet has not seen generation 3");
        // Another tag of the same image: the runtime reports the old name,
        // but the container started after the update.
        let mut p = pod("redis:8", "redis:7", true);
        p.metadata.annotations = Some(
            [(
                UPDATED_AT_ANNOTATION.to_string(),
                "2026-12-03T10:00:00Z".to_string(),
            )]
            .into(),
        );
        assert!(!settled(&p));
        let running = |at: &str| k8s_openapi::api::core::v1::ContainerState {
            running: Some(k8s_openapi::api::core::v1::ContainerStateRunning {
                started_at: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    at.parse().unwrap(),
                )),
            }),
            ..Default::default()
        };
        p.status
            .as_mut()
            .unwrap()
            .container_statuses
            .as_mut()
            .unwrap()[0]
            .state = Some(running("2026-12-03T09:59:00Z"));
        assert!(!settled(&p), "started before the update");
        p.status
            .as_mut()
            .unwrap()
            .container_statuses
            .as_mut()
            .unwrap()[0]
            .state = Some(running("2026-12-03T10:00:05Z"));
        assert!(settled(&p));
        // The container that ran when the update was sent is recorded: the
        // update is done once another one runs, whatever image name the
        // runtime reports and however soon it started.
        let mut p = pod("redis:8", "redis:8", true);
        p.metadata.annotations = Some(
            [
                (
                    UPDATED_AT_ANNOTATION.to_string(),
                    "2026-12-03T10:00:00Z".to_string(),
                ),
                (
                    RESTARTED_FROM_ANNOTATION.to_string(),
                    r#"{"c":"containerd://old"}"#.to_string(),
                ),
            ]
            .into(),
        );
        first_status(&mut p).container_id = Some("containerd://old".into());
        first_status(&mut p).state = Some(running("2026-12-03T10:00:00Z"));
        assert!(!settled(&p), "the old container still runs");
        first_status(&mut p).container_id = Some("containerd://new".into());
        first_status(&mut p).image = "redis:7".into();
        assert!(
            settled(&p),
            "another container runs, reported by the old tag"
        );
        first_status(&mut p).ready = false;
        assert!(!settled(&p));
        let mut p = pod("redis:8", "redis:8", true);
        p.status.as_mut().unwrap().conditions = Some(vec![PodCondition {
            type_: "PodResizePending".into(),
            status: "True".into(),
            reason: Some("Infeasible".into()),
            ..Default::default()
        }]);
        assert!(!settled(&p) && resize_infeasible(&p));
    }

    #[test]
    fn patches_change_only_what_differs() {
        let live = pod("a:1", "a:1", true);
        let mut t = template("a:2", "1", "x");
        let keys = InPlaceKeys::of_template(&t);
        stamp_keys(&mut t, keys);
        let patch = update_patch(&live, &t, "rev2", k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        assert_eq!(
            patch["spec"]["containers"],
            json!([{"name": "c", "image": "a:2"}])
        );
        assert_eq!(patch["metadata"]["uid"], "u1");
        assert_eq!(patch["metadata"]["labels"][TEMPLATE_HASH_LABEL], "rev2");
        assert_eq!(
            patch["metadata"]["annotations"][UPDATED_IN_PLACE_ANNOTATION],
            "rev2"
        );
        assert_eq!(resize_patch(&live, &t), None);
        assert_eq!(
            patch["metadata"]["annotations"][RESTARTED_FROM_ANNOTATION],
            Value::Null,
            "no container ID known: nothing recorded, an old record removed"
        );
        let mut running = live.clone();
        first_status(&mut running).container_id = Some("containerd://1".into());
        let patch = update_patch(
            &running,
            &t,
            "rev2",
            k8s_openapi::jiff::Timestamp::UNIX_EPOCH,
        );
        assert_eq!(
            patch["metadata"]["annotations"][RESTARTED_FROM_ANNOTATION],
            r#"{"c":"containerd://1"}"#
        );

        let mut t = template("a:1", "2", "x");
        t.spec.as_mut().unwrap().containers[0]
            .resources
            .as_mut()
            .unwrap()
            .limits = Some([("cpu".to_string(), Quantity("3".into()))].into());
        let mut live = pod("a:1", "a:1", true);
        live.spec.as_mut().unwrap().containers[0]
            .resources
            .as_mut()
            .unwrap()
            .requests
            .as_mut()
            .unwrap()
            .insert("memory".into(), Quantity("1Gi".into()));
        assert_eq!(
            resize_patch(&live, &t),
            Some(json!({"spec": {"containers": [{"name": "c", "resources": {
                "requests": {"cpu": "2", "memory": null},
                "limits": {"cpu": "3"},
            }}]}}))
        );
        assert!(
            update_patch(&live, &t, "r", k8s_openapi::jiff::Timestamp::UNIX_EPOCH)
                .get("spec")
                .is_none()
        );
    }
}
