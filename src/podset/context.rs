//! The context every reconcile gets: the client, the Pod executor and
//! cache, and the runtime's backoff and status writer.

use std::sync::Arc;

use kube::Client;

use crate::podset::executor::Executor;
use crate::podset::volumes::ClaimCache;
use crate::podset::watch::PodCache;
use crate::runtime::{backoff, status};

/// What every reconcile shares: plain fields, no behaviour of its own.
pub struct Context {
    pub client: Client,
    /// Pod creates, deletes and updates, with their expectations and Events.
    pub executor: Executor,
    /// Every Pod podkeeper manages (label-selected, managedFields stripped),
    /// indexed by owner.
    pub pods: PodCache,
    /// Every PersistentVolumeClaim podkeeper made (label-selected).
    pub claims: ClaimCache,
    /// The one count of each object's failures.
    pub backoff: backoff::Backoff,
    /// Paced status writes.
    pub status: status::StatusWriter,
}

impl Context {
    pub fn new(
        client: Client,
        executor: Executor,
        pods: PodCache,
        claims: ClaimCache,
    ) -> Arc<Self> {
        Arc::new(Self {
            claims,
            status: status::StatusWriter::new(client.clone()),
            client,
            executor,
            pods,
            backoff: backoff::Backoff::default(),
        })
    }
}
