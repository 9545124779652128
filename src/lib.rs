#![forbid(unsafe_code)]
//! podkeeper: a finalizer-driven operator that manages bare Pods for `Redis`
//! and `Application` resources. Floors, top to bottom; nothing imports
//! upward:
//!
//! - [`operator`]: wiring: one Pod watch, one Service watch, the two
//!   controllers, leader election ([`leader`]), probes and metrics
//!   ([`http`], [`metrics`]), logs ([`telemetry`]); [`cli`]: the flags.
//! - [`redis`] and [`application`]: the two kinds, each a thin adapter of
//!   pure parts (desired Pods, Services, status) and hooks for its own I/O
//!   (Redis: replication, with its client, topology and actions).
//! - [`runtime`]: plumbing that knows no kind: the context, the error and
//!   its metric labels, the one backoff, paced status writes, Events,
//!   conditions, the Service applier.
//! - [`podset`]: the generic bare-Pod engine: the one reconcile that owns
//!   the order of operations, the pure planner, the executor.
//! - [`api`]: the CRD types and every label, annotation, finalizer and
//!   field-manager name.
//!
//! The dev tools (local control plane, kind, `dev`, benchmarks) live in the
//! `podkeeper-dev` crate beside this one, which depends on this library and
//! never the other way round.

pub mod api;
pub mod application;
pub mod backup;
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
