//! The one place that pins what the kind node image and the cluster images
//! are built from. Kubernetes and etcd come from the local control plane's
//! pins, so kind runs the same releases as `podkeeper-dev dev` and the tests.
//!
//! Changing a version here changes the cache keys and the node image's tag.

pub use crate::localcluster::versions::{ETCD, KUBERNETES};

/// kind (`sigs.k8s.io/kind`), whose default node is Kubernetes v1.37.
pub const KIND: &str = "0.33.0";
/// The components of kind v0.33.0's base image, built from their Go modules.
pub const CONTAINERD: &str = "2.3.4";
pub const RUNC: &str = "1.4.3";
pub const CRICTL: &str = "1.36.0";
pub const CNI_PLUGINS: &str = "1.9.1";
/// kubeadm v1.37's CoreDNS and pause versions (its `CoreDNSVersion` and
/// `PauseVersion` constants): kubeadm asks for exactly these tags.
pub const COREDNS: &str = "1.14.6";
pub const PAUSE: &str = "3.10.2";
/// rancher's local-path-provisioner (`github.com/rancher/local-path-provisioner`),
/// the dynamic provisioner behind the default StorageClass, as in stock kind.
pub const LOCAL_PATH_PROVISIONER: &str = "0.0.30";
/// versitygw (`github.com/versity/versitygw`, Apache-2.0), the S3-compatible
/// object store that `kind up --object-store` deploys (its posix backend on a
/// claim of the default StorageClass).
pub const VERSITYGW: &str = "1.8.0";
/// kube-router (`github.com/cloudnativelabs/kube-router/v2`, Apache-2.0),
/// run as a NetworkPolicy firewall only, which `kind up --network-policies`
/// deploys. (Stock kind's kube-network-policies needs the kernel's nftables
/// queue expression, `CONFIG_NFT_QUEUE`, which this machine's kernel lacks;
/// kube-router filters with iptables and ipset.) Test clusters only: the
/// Go proxy here flags reported security flaws in this version.
pub const KUBE_ROUTER: &str = "2.1.0";

/// Debian release of every root filesystem (node, kube-proxy, workloads).
pub const DEBIAN_SUITE: &str = "bookworm";
/// Debian's redis-server in [`DEBIAN_SUITE`].
pub const DEBIAN_REDIS: &str = "7.0.15";

/// Registry-less repository of the cluster images, given to kubeadm as its
/// `imageRepository`. Nothing is ever pulled from it: the images are
/// preloaded into the node image.
pub const CLUSTER_IMAGE_REPOSITORY: &str = "podkeeper.dev/kind";
/// Repository of the node image; its tag is `v<KUBERNETES>-<input hash>`.
pub const NODE_IMAGE_REPOSITORY: &str = "podkeeper.dev/kind-node";
/// Workload images for the tests and `dev --kind`, loaded into kind.
pub const REDIS_IMAGE: &str = "podkeeper.dev/redis:7.0.15-debian";
pub const HTTPD_IMAGE: &str = "podkeeper.dev/httpd:busybox-debian";

/// Further images with the same contents as those two (one label more), for
/// tests that roll out from one image to another. `podkeeper-dev kind up`
/// builds and loads them all.
pub const REDIS_ROLLOUT_IMAGES: [&str; 3] = [
    "podkeeper.dev/redis:7.0.15-debian-rollout-2",
    "podkeeper.dev/redis:7.0.15-debian-rollout-3",
    "podkeeper.dev/redis:7.0.15-debian-rollout-4",
];
pub const HTTPD_ROLLOUT_IMAGES: [&str; 3] = [
    "podkeeper.dev/httpd:busybox-debian-rollout-2",
    "podkeeper.dev/httpd:busybox-debian-rollout-3",
    "podkeeper.dev/httpd:busybox-debian-rollout-4",
];

/// The local-path-provisioner's image and the image of its helper Pods
/// (Debian's static busybox with its applets linked, for the shell scripts
/// that create and remove volume directories). Loaded into a cluster with
/// `kind load`, not preloaded into the node image.
pub fn local_path_provisioner_image() -> String {
    format!("{CLUSTER_IMAGE_REPOSITORY}/local-path-provisioner:v{LOCAL_PATH_PROVISIONER}")
}
pub fn local_path_helper_image() -> String {
    format!("{CLUSTER_IMAGE_REPOSITORY}/busybox:{DEBIAN_SUITE}")
}

/// The object store's image (versitygw alone). Built and loaded with `kind
/// load` only when a cluster is asked for the object store.
pub fn network_policies_image() -> String {
    format!("{CLUSTER_IMAGE_REPOSITORY}/kube-router:v{KUBE_ROUTER}")
}

pub fn versitygw_image() -> String {
    format!("{CLUSTER_IMAGE_REPOSITORY}/versitygw:v{VERSITYGW}")
}

/// The etcd image tag (kubeadm's form, `<version>-0`).
pub fn etcd_tag() -> String {
    format!("{ETCD}-0")
}
