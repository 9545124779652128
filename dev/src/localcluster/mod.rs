//! A real Kubernetes control plane on this machine, built from source.
//!
//! etcd, kube-apiserver, kube-controller-manager and kube-scheduler are built
//! from Go modules ([`binaries`]) and started as child processes bound to
//! 127.0.0.1 on free ports ([`cluster`]); kwok simulates the nodes, so Pods
//! are scheduled by the real scheduler and become Running and Ready. It is
//! what `podkeeper-dev dev` and the integration tests run against.

pub mod binaries;
mod cluster;
mod pki;
pub mod versions;

pub use binaries::{Binaries, cache_root, ensure_binaries};
pub use cluster::{ClusterOptions, LocalCluster, POD_CIDR};

/// Why the local control plane could not be built or started.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },
    #[error("building the local control plane failed at {what}:\n{detail}")]
    Build { what: String, detail: String },
    #[error("starting {component} failed: {detail}")]
    Startup { component: String, detail: String },
    #[error("talking to the local apiserver: {0}")]
    Kube(#[from] kube::Error),
}

impl Error {
    pub(crate) fn io(context: String, source: std::io::Error) -> Self {
        Error::Io { context, source }
    }
}
