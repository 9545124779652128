//! The cluster's default StorageClass and its dynamic provisioner, as in
//! stock kind: rancher's local-path-provisioner (built from its Go module,
//! [`super::tools`]; its image and its helper Pods' busybox,
//! [`super::images`]), deployed from our own manifests
//! (`storage/local-path-provisioner.yaml`). A PersistentVolumeClaim without a
//! class binds, once a Pod uses it, to a hostPath volume under [`NODE_PATH`]
//! on that Pod's node.
//!
//! [`install`] runs on every `kind up`, on a new cluster and on a reused one
//! alike, and is idempotent: `kubectl apply` of the same objects, and the
//! node image's `standard` class (`kubernetes.io/host-path`, which nothing
//! serves; kind applies it at cluster creation) replaced once, since a
//! StorageClass's provisioner cannot change.

use super::{Error, cluster, docker, hash, versions as v};

/// The manifests, with `@...@` placeholders.
const MANIFESTS: &str = include_str!("storage/local-path-provisioner.yaml");

/// Where the provisioner and its helper Pods live.
pub const NAMESPACE: &str = "local-path-storage";
/// The default StorageClass, named as in stock kind.
pub const STORAGE_CLASS: &str = "standard";
/// The provisioner's name, the StorageClass's `provisioner`.
pub const PROVISIONER: &str = "rancher.io/local-path";
/// The directory of the volumes in each node (container); kind's nodes keep
/// /var on a volume of their own.
pub const NODE_PATH: &str = "/var/local-path-provisioner";
/// The provisioner's Deployment in [`NAMESPACE`].
pub const DEPLOYMENT: &str = "local-path-provisioner";

/// The manifests for these images. `image_id` is the provisioner image's
/// ID: with the manifests themselves it makes the Pod template's revision
/// annotation, so a change to either rolls the Deployment.
pub fn manifests(provisioner_image: &str, helper_image: &str, image_id: &str) -> String {
    let filled = MANIFESTS
        .replace("@NAMESPACE@", NAMESPACE)
        .replace("@STORAGE_CLASS@", STORAGE_CLASS)
        .replace("@PROVISIONER@", PROVISIONER)
        .replace("@NODE_PATH@", NODE_PATH)
        .replace("@PROVISIONER_IMAGE@", provisioner_image)
        .replace("@HELPER_IMAGE@", helper_image);
    let revision = &hash::short(&format!("{filled}\n{image_id}"))[..16];
    filled.replace("@REVISION@", revision)
}

/// Deploys the provisioner and the default StorageClass into cluster `name`
/// (whose nodes have the images of [`super::ensure_storage_images`] loaded) and waits for the provisioner
/// to be Ready.
pub fn install(name: &str) -> Result<(), Error> {
    let provisioner_image = v::local_path_provisioner_image();
    let image_id = docker::output(&["image", "inspect", "-f", "{{.Id}}", &provisioner_image])?;
    let current = cluster::control_plane_kubectl(
        name,
        &[
            "get",
            "storageclass",
            STORAGE_CLASS,
            "--ignore-not-found",
            "-o",
            "jsonpath={.provisioner}",
        ],
    )?;
    if let Some(old) = replaced_provisioner(&current) {
        super::progress(&format!(
            "StorageClass {STORAGE_CLASS}: replacing provisioner {old} (nothing serves it) with {PROVISIONER}"
        ));
        cluster::control_plane_kubectl(name, &["delete", "storageclass", STORAGE_CLASS])?;
    }
    super::progress(&format!(
        "local-path-provisioner v{}: default StorageClass {STORAGE_CLASS} ({PROVISIONER}, volumes in {NODE_PATH} on the nodes)",
        v::LOCAL_PATH_PROVISIONER
    ));
    cluster::control_plane_kubectl_input(
        name,
        &["apply", "-f", "-"],
        &manifests(&provisioner_image, &v::local_path_helper_image(), &image_id),
    )?;
    super::progress("waiting for the local-path-provisioner to be Ready");
    cluster::control_plane_kubectl(
        name,
        &[
            "-n",
            NAMESPACE,
            "rollout",
            "status",
            &format!("deployment/{DEPLOYMENT}"),
            "--timeout=300s",
        ],
    )?;
    wait_started(name)?;
    super::progress("local-path-provisioner Ready");
    Ok(())
}

/// What the provisioner logs once it has read its configuration and its
/// controller runs (it serves no probe: its Pod is Ready once started).
const STARTED: &str = "Started provisioner controller";

/// Waits for the provisioner to log [`STARTED`]: a configuration it cannot
/// read makes it exit before.
fn wait_started(name: &str) -> Result<(), Error> {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    loop {
        let logs = cluster::control_plane_kubectl(
            name,
            &["-n", NAMESPACE, "logs", &format!("deployment/{DEPLOYMENT}")],
        );
        match logs {
            Ok(text) if text.contains(STARTED) => return Ok(()),
            _ if std::time::Instant::now() > deadline => {
                return Err(Error::Step {
                    what: "waiting for the local-path-provisioner to start".into(),
                    detail: format!(
                        "no {STARTED:?} in its log after 120 s (`kubectl -n {NAMESPACE} logs deployment/{DEPLOYMENT}`): {}",
                        match logs {
                            Ok(text) => text,
                            Err(e) => e.to_string(),
                        }
                    ),
                });
            }
            // Its container may still be starting; ask again shortly.
            _ => std::thread::sleep(std::time::Duration::from_secs(1)),
        }
    }
}

/// The provisioner of an existing [`STORAGE_CLASS`] (`current`, empty when
/// there is none) if the class must be replaced to get ours.
fn replaced_provisioner(current: &str) -> Option<&str> {
    let current = current.trim();
    (!current.is_empty() && current != PROVISIONER).then_some(current)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn documents(text: &str) -> Vec<serde_yaml_ng::Value> {
        text.split("\n---\n")
            .map(|d| serde_yaml_ng::from_str(d).expect("a YAML document"))
            .collect()
    }

    fn find<'a>(docs: &'a [serde_yaml_ng::Value], kind: &str) -> &'a serde_yaml_ng::Value {
        docs.iter()
            .find(|d| d["kind"].as_str() == Some(kind))
            .unwrap_or_else(|| panic!("a {kind}"))
    }

    #[test]
    fn every_placeholder_is_filled_and_every_document_parses() {
        let text = manifests("p:v1", "h:v1", "sha256:1");
        assert!(!text.contains('@'), "{text}");
        let docs = documents(&text);
        let kinds: Vec<&str> = docs.iter().filter_map(|d| d["kind"].as_str()).collect();
        assert_eq!(
            kinds,
            [
                "Namespace",
                "ServiceAccount",
                "ClusterRole",
                "ClusterRoleBinding",
                "Role",
                "RoleBinding",
                "ConfigMap",
                "Deployment",
                "StorageClass"
            ]
        );
    }

    #[test]
    fn the_class_is_the_default_local_path_class() {
        let docs = documents(&manifests("p:v1", "h:v1", "sha256:1"));
        let class = find(&docs, "StorageClass");
        assert_eq!(class["metadata"]["name"].as_str(), Some("standard"));
        assert_eq!(
            class["metadata"]["annotations"]["storageclass.kubernetes.io/is-default-class"]
                .as_str(),
            Some("true")
        );
        assert_eq!(class["provisioner"].as_str(), Some(PROVISIONER));
        assert_eq!(
            class["volumeBindingMode"].as_str(),
            Some("WaitForFirstConsumer")
        );
        assert_eq!(class["reclaimPolicy"].as_str(), Some("Delete"));
        assert_eq!(class["allowVolumeExpansion"].as_bool(), Some(false));
    }

    #[test]
    fn images_are_never_pulled_and_the_helper_pod_uses_the_helper_image() {
        let docs = documents(&manifests("p:v1", "h:v1", "sha256:1"));
        let container = &find(&docs, "Deployment")["spec"]["template"]["spec"]["containers"][0];
        assert_eq!(container["image"].as_str(), Some("p:v1"));
        assert_eq!(container["imagePullPolicy"].as_str(), Some("Never"));
        let config = &find(&docs, "ConfigMap")["data"];
        let helper: serde_yaml_ng::Value =
            serde_yaml_ng::from_str(config["helperPod.yaml"].as_str().unwrap()).unwrap();
        let helper = &helper["spec"]["containers"][0];
        assert_eq!(helper["name"].as_str(), Some("helper-pod"));
        assert_eq!(helper["image"].as_str(), Some("h:v1"));
        assert_eq!(helper["imagePullPolicy"].as_str(), Some("Never"));
        let paths: serde_json::Value =
            serde_json::from_str(config["config.json"].as_str().unwrap()).unwrap();
        assert_eq!(paths["nodePathMap"][0]["paths"][0], NODE_PATH);
    }

    #[test]
    fn the_revision_follows_the_image() {
        let revision = |id| {
            let docs = documents(&manifests("p:v1", "h:v1", id));
            find(&docs, "Deployment")["spec"]["template"]["metadata"]["annotations"]
                ["podkeeper.dev/local-path-revision"]
                .as_str()
                .unwrap()
                .to_string()
        };
        assert_eq!(revision("sha256:1"), revision("sha256:1"));
        assert_ne!(revision("sha256:1"), revision("sha256:2"));
    }

    #[test]
    fn only_another_provisioners_class_is_replaced() {
        assert_eq!(replaced_provisioner(""), None);
        assert_eq!(replaced_provisioner(PROVISIONER), None);
        assert_eq!(
            replaced_provisioner("kubernetes.io/host-path\n"),
            Some("kubernetes.io/host-path")
        );
    }
}
