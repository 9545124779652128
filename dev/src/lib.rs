#![forbid(unsafe_code)]
//! podkeeper's dev tools, beside the operator and never inside it: the
//! operator crate knows nothing of them.
//!
//! - [`localcluster`]: a real control plane built from Go modules, with
//!   kwok nodes, for `dev` and the tests.
//! - [`kind`]: kind clusters with real containers, every image built from
//!   source.
//! - [`dev`]: `podkeeper-dev dev`, the operator on one of those clusters.
//! - [`bench`]: the benchmarks (`bench` against the ReplicaSet controller,
//!   `bench-redis` on kind).

/// Progress of long work (builds, cluster start), written straight to the
/// process's stderr: inside a test, `eprintln!` would hold it back until the
/// test ends.
macro_rules! progress {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod bench;
pub mod cli;
pub mod dev;
pub mod kind;
pub mod localcluster;
pub mod monitoring;

/// Errors of the dev tools' commands.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    LocalCluster(#[from] localcluster::Error),
    #[error(transparent)]
    Kind(#[from] kind::Error),
    #[error(transparent)]
    Operator(#[from] podkeeper::Error),
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    #[error("kubeconfig: {0}")]
    Config(String),
    #[error("{0}")]
    Other(String),
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
}
