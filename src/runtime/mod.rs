//! Plumbing every kind shares and none knows: the context, the error type
//! with its metric labels, per-object backoff, paced status writes, Events,
//! conditions and the Service applier.

pub mod backoff;
pub mod conditions;
pub mod error;
pub mod events;
pub mod service_applier;
pub mod services;
pub mod status;

use std::sync::Arc;

use kube::Client;

use crate::podset::executor::Executor;
use crate::podset::watch::PodCache;

pub use error::Error;
pub use status::{DRAIN_GRACE, Pace};

/// What every reconcile shares: plain fields, no behaviour of its own.
pub struct Context {
    pub client: Client,
    /// Pod creates, deletes and updates, with their expectations and Events.
    pub executor: Executor,
    /// Every Pod podkeeper manages (label-selected, managedFields stripped),
    /// indexed by owner.
    pub pods: PodCache,
    /// The one count of each object's failures.
    pub backoff: backoff::Backoff,
    /// Paced status writes.
    pub status: status::StatusWriter,
}

impl Context {
    pub fn new(client: Client, executor: Executor, pods: PodCache) -> Arc<Self> {
        Arc::new(Self {
            status: status::StatusWriter::new(client.clone()),
            client,
            executor,
            pods,
            backoff: backoff::Backoff::default(),
        })
    }
}
