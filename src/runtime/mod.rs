//! Plumbing every kind shares and none knows: the error type with its
//! metric labels, the owner and the failures of its steps, per-object
//! backoff, paced status writes, Events, conditions, quantities, Service
//! helpers and the Service applier. The Pod engine is built on it; it uses nothing of
//! the Pod engine.

pub mod backoff;
pub mod conditions;
pub mod error;
pub mod events;
pub mod failure;
pub mod hash;
pub mod metadata_only;
#[cfg(test)]
pub mod mock_api;
pub mod owner;
pub mod quantity;
pub mod service_applier;
pub mod services;
pub mod status;

pub use error::Error;
pub use status::{DRAIN_GRACE, Pace};
