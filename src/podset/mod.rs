//! The bare-Pod engine shared by every kind podkeeper serves.
//!
//! - [`reconcile`]: the one reconcile that owns the order of operations
//!   (finalizer, expectations, snapshot, observe, plan, act, status,
//!   requeue; cleanup on deletion), and [`reconcile::PodSet`], the trait a
//!   kind implements with its pure parts, plus [`reconcile::Extras`], the
//!   hooks for its own I/O.
//! - [`watch`]: the one Pod watch that feeds every kind, with its owner
//!   index; [`lean_pod`]: the Pod as the watch decodes it.
//! - [`pods`]: a plain-value view of observed Pods ([`ObservedPod`]) and how
//!   it is read from a `Pod`.
//! - [`plan`]: the pure planner: desired state, observed Pods and `now` in;
//!   creates, deletes and counts out.
//! - [`rank`]: the order in which Pods are chosen for deletion.
//! - [`revision`]: the template hash that tells current Pods from outdated
//!   ones, stamped with the in-place keys.
//! - [`inplace`]: which outdated Pods can be updated in place, the patches
//!   that do it, and when such an update is done.
//! - [`expectations`]: in-flight creates and deletes not yet seen in the
//!   watch cache, which keep a stale cache from causing duplicates.
//! - [`executor`]: carries a plan out against the API server.
//! - [`claims`]: which PersistentVolumeClaim each new Pod takes and which
//!   claims are surplus (kinds that keep data); [`volumes`]: their I/O.
//! - [`context`]: what every reconcile shares ([`Context`]).

pub mod claims;
pub mod context;
pub mod executor;
pub mod expectations;
pub mod inplace;
pub mod lean_pod;
pub mod plan;
pub mod pods;
pub mod rank;
pub mod reconcile;
pub mod revision;
pub mod volumes;
pub mod watch;

pub use context::Context;
pub use plan::{Desired, Plan, Strategy, plan};
pub use pods::ObservedPod;
