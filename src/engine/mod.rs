//! The Pod engine shared by every kind podkeeper serves.
//!
//! - [`pods`]: a plain-value view of observed Pods ([`ObservedPod`]) and how
//!   it is read from a `Pod`.
//! - [`plan`]: the pure planner: desired state, observed Pods and `now` in;
//!   creates, deletes and counts out.
//! - [`rank`]: the order in which Pods are chosen for deletion.
//! - [`hash`]: the template hash that tells current Pods from outdated ones.
//! - [`inplace`]: which outdated Pods can be updated in place, the patches
//!   that do it, and when such an update is done.
//! - [`expectations`]: in-flight creates and deletes not yet seen in the
//!   watch cache, which keep a stale cache from causing duplicates.
//! - [`executor`]: carries a plan out against the API server.
//! - [`metadata_only`]: deletes and status writes answered with metadata
//!   only.
//! - [`events`]: Events whose notes say what happened, with a flood budget.

pub mod events;
pub mod executor;
pub mod expectations;
pub mod hash;
pub mod inplace;
pub mod metadata_only;
#[cfg(test)]
pub mod mock_api;
pub mod plan;
pub mod pods;
pub mod rank;

pub use plan::{Desired, Plan, Strategy, plan};
pub use pods::ObservedPod;
