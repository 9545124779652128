//! The programs of the node image and of the cluster images, built from Go
//! modules into podkeeper's cache (`<cache>/bin/<component>-v<version>/`),
//! the same way and in the same place as the local control plane.

use std::fs;
use std::path::{Path, PathBuf};

use super::versions as v;
use crate::localcluster::binaries::{self, GoBuild, build_if_missing};
use crate::localcluster::{self, Error};

/// Directories holding each component's executables.
#[derive(Clone, Debug)]
pub struct Tools {
    /// `kind`.
    pub kind: PathBuf,
    /// `containerd`, `ctr`, `containerd-shim-runc-v2`.
    pub containerd: PathBuf,
    /// `runc`.
    pub runc: PathBuf,
    /// `crictl`.
    pub crictl: PathBuf,
    /// `ptp`, `loopback`, `host-local`, `portmap`.
    pub cni_plugins: PathBuf,
    /// `kubelet`, `kubeadm`, `kubectl`, `kube-proxy`.
    pub kubernetes_node: PathBuf,
    /// `coredns`.
    pub coredns: PathBuf,
    /// `pause` (ours, `src/kind/pause/main.go`).
    pub pause: PathBuf,
    /// `local-path-provisioner` (the default StorageClass's provisioner; not
    /// part of the node image).
    pub local_path_provisioner: PathBuf,
    /// The local control plane's etcd and Kubernetes control plane.
    pub control_plane: localcluster::Binaries,
}

/// The kind binary alone (for commands on an existing cluster).
pub fn ensure_kind() -> Result<PathBuf, Error> {
    let root = binaries::cache_root();
    Ok(build_if_missing(&root, kind_build())?.join("kind"))
}

/// The object store's server (versitygw), built if missing. Not one of
/// [`Tools`]: neither the node image nor a plain `kind up` needs it, so only
/// a cluster asked for the object store pays for its build (257 s on 2 busy
/// cores from cold Go caches; 44 MB).
pub fn ensure_object_store_tool() -> Result<PathBuf, Error> {
    let root = binaries::cache_root();
    Ok(build_if_missing(&root, versitygw_build())?.join("versitygw"))
}

/// kube-router, built if missing; like the object store's server, only a
/// cluster asked for NetworkPolicies pays for its build.
pub fn ensure_network_policies_tool() -> Result<PathBuf, Error> {
    let root = binaries::cache_root();
    Ok(build_if_missing(&root, network_policies_build())?.join("kube-router"))
}

/// Builds whatever is missing. Takes many minutes on a cold cache and shows
/// progress on stderr.
pub fn ensure_tools() -> Result<Tools, Error> {
    let control_plane = localcluster::ensure_binaries()?;
    let root = binaries::cache_root();
    let pause = build_if_missing(&root, pause_build(&root)?)?;
    Ok(Tools {
        kind: build_if_missing(&root, kind_build())?.join("kind"),
        containerd: build_if_missing(&root, containerd_build())?,
        runc: build_if_missing(&root, runc_build())?,
        crictl: build_if_missing(&root, crictl_build())?,
        cni_plugins: build_if_missing(&root, cni_build())?,
        kubernetes_node: build_if_missing(
            &root,
            binaries::kubernetes_build_of(
                "kubernetes-node",
                &["kubelet", "kubeadm", "kubectl", "kube-proxy"],
            )?,
        )?,
        coredns: build_if_missing(&root, coredns_build())?,
        pause,
        local_path_provisioner: build_if_missing(&root, local_path_provisioner_build())?,
        control_plane,
    })
}

fn require(module: &str, version: &str) -> Vec<String> {
    vec![format!("{module} v{version}")]
}

fn kind_build() -> GoBuild {
    GoBuild::new(
        format!("kind-v{}", v::KIND),
        &require("sigs.k8s.io/kind", v::KIND),
        &["sigs.k8s.io/kind"],
    )
}

fn containerd_build() -> GoBuild {
    let mut b = GoBuild::new(
        format!("containerd-v{}", v::CONTAINERD),
        &require("github.com/containerd/containerd/v2", v::CONTAINERD),
        &[
            "github.com/containerd/containerd/v2/cmd/containerd",
            "github.com/containerd/containerd/v2/cmd/ctr",
            "github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2",
        ],
    );
    // The snapshotters kind's base image leaves out too.
    b.tags = ["no_aufs", "no_zfs", "no_btrfs", "no_devmapper"]
        .map(String::from)
        .to_vec();
    b.ldflags = format!(
        "-X github.com/containerd/containerd/v2/version.Version=v{}",
        v::CONTAINERD
    );
    b
}

/// runc needs cgo (its nsenter is C) and libseccomp (libseccomp-dev to
/// build, libseccomp2 in the node image).
fn runc_build() -> GoBuild {
    let mut b = GoBuild::new(
        format!("runc-v{}", v::RUNC),
        &require("github.com/opencontainers/runc", v::RUNC),
        &["github.com/opencontainers/runc"],
    );
    b.cgo = true;
    b.tags = vec!["seccomp".into()];
    b.ldflags = format!("-X main.version={}", v::RUNC);
    b
}

fn crictl_build() -> GoBuild {
    let mut b = GoBuild::new(
        format!("crictl-v{}", v::CRICTL),
        &require("sigs.k8s.io/cri-tools", v::CRICTL),
        &["sigs.k8s.io/cri-tools/cmd/crictl"],
    );
    b.ldflags = format!(
        "-X sigs.k8s.io/cri-tools/pkg/version.Version=v{}",
        v::CRICTL
    );
    b
}

fn cni_build() -> GoBuild {
    GoBuild::new(
        format!("cni-plugins-v{}", v::CNI_PLUGINS),
        &require("github.com/containernetworking/plugins", v::CNI_PLUGINS),
        &[
            "github.com/containernetworking/plugins/plugins/main/ptp",
            "github.com/containernetworking/plugins/plugins/main/loopback",
            "github.com/containernetworking/plugins/plugins/ipam/host-local",
            "github.com/containernetworking/plugins/plugins/meta/portmap",
        ],
    )
}

fn coredns_build() -> GoBuild {
    GoBuild::new(
        format!("coredns-v{}", v::COREDNS),
        &require("github.com/coredns/coredns", v::COREDNS),
        &["github.com/coredns/coredns"],
    )
}

fn local_path_provisioner_build() -> GoBuild {
    let mut b = GoBuild::new(
        format!("local-path-provisioner-v{}", v::LOCAL_PATH_PROVISIONER),
        &require(
            "github.com/rancher/local-path-provisioner",
            v::LOCAL_PATH_PROVISIONER,
        ),
        &["github.com/rancher/local-path-provisioner"],
    );
    b.ldflags = format!("-X main.VERSION=v{}", v::LOCAL_PATH_PROVISIONER);
    b
}

/// versitygw's one command, static (no cgo: every Go build here is, unless it
/// says otherwise), with its version where `versitygw --version` prints it.
fn versitygw_build() -> GoBuild {
    let mut b = GoBuild::new(
        format!("versitygw-v{}", v::VERSITYGW),
        &require("github.com/versity/versitygw", v::VERSITYGW),
        &["github.com/versity/versitygw/cmd/versitygw"],
    );
    b.ldflags = format!("-X main.Version=v{}", v::VERSITYGW);
    b
}

fn network_policies_build() -> GoBuild {
    GoBuild::new(
        format!("kube-router-v{}", v::KUBE_ROUTER),
        &require("github.com/cloudnativelabs/kube-router/v2", v::KUBE_ROUTER),
        &["github.com/cloudnativelabs/kube-router/v2/cmd/kube-router"],
    )
}

/// Our pause: a one-file module written next to the cache's other sources.
/// The cache key hashes the source, so editing it rebuilds.
fn pause_build(root: &Path) -> Result<GoBuild, Error> {
    let source = include_str!("pause/main.go");
    let key = format!("pause-v{}-{}", v::PAUSE, &super::hash::short(source)[..8]);
    let dir = root.join("src").join(&key);
    fs::create_dir_all(&dir).map_err(|e| Error::io(format!("creating {}", dir.display()), e))?;
    fs::write(dir.join("main.go"), source).map_err(|e| Error::io("writing main.go".into(), e))?;
    let mut b = GoBuild::new(key, &[], &["."]);
    b.output_name = Some("pause");
    Ok(b)
}
