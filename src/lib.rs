#![forbid(unsafe_code)]
//! podkeeper: a finalizer-driven operator that manages bare Pods for `Redis`
//! and `Application` resources.
//!
//! - [`crd`]: the resource types.
//! - [`engine`]: the Pod engine (pure planner, ranking, expectations,
//!   executor) shared by every kind.
//! - [`controller`]: the reconcilers, one per kind.
//! - [`operator`]: wiring the controllers to a cluster.
//! - [`replication`]: Redis primary/replica roles, failover and switchover
//!   (not wired into the controller yet).
//!
//! The dev tools (local control plane, kind, `dev`, benchmarks) live in the
//! `podkeeper-dev` crate beside this one.

pub mod api;
pub mod application;
pub mod cli;
pub mod http;
pub mod leader;
pub mod metrics;
pub mod operator;
pub mod podset;
pub mod redis;
pub mod runtime;
pub mod telemetry;

/// Top-level errors of the commands.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes: {0}")]
    Kube(#[from] kube::Error),
    #[error("kubeconfig: {0}")]
    Config(String),
    #[error("{0}")]
    Other(String),
    #[error("json: {0}")]
    Json(#[from] serde_json::Error),
}
