//! Reconcilers and what they share: the context, the error type with its
//! metric labels, per-object backoff, and the one Pod watch that feeds every
//! controller.

pub mod conditions;
pub mod pod_watch;
pub mod redis;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;

use crate::engine::executor::Executor;

/// Label on every Pod podkeeper creates; the Pod watch selects on it.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY_VALUE: &str = "podkeeper";
/// The finalizer that makes a deleted owner wait for its Pods.
pub const FINALIZER: &str = "podkeeper.dev/cleanup";
/// Field manager for server-side apply and status patches.
pub const FIELD_MANAGER: &str = "podkeeper";

/// A reconcile failed, or must come back soon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    #[error("waiting for {remaining} pods to be deleted")]
    CleanupPending { remaining: usize },
    #[error("serializing: {0}")]
    Serialize(#[from] serde_json::Error),
}

impl Error {
    /// A short, fixed label for metrics (never the error text).
    pub fn metric_label(&self) -> &'static str {
        match self {
            Error::Kube(_) => "kube",
            Error::Finalizer(inner) => match inner.as_ref() {
                kube::runtime::finalizer::Error::ApplyFailed(e)
                | kube::runtime::finalizer::Error::CleanupFailed(e) => e.metric_label(),
                _ => "finalizer",
            },
            Error::CleanupPending { .. } => "cleanup_pending",
            Error::Serialize(_) => "serialize",
        }
    }

    /// Waiting, not failing: cleanup that is still deleting Pods.
    pub fn is_waiting(&self) -> bool {
        self.metric_label() == "cleanup_pending"
    }
}

/// Shared by every reconcile.
pub struct Context {
    pub client: Client,
    pub executor: Executor,
    /// Every Pod podkeeper manages (label-selected, managedFields stripped).
    pub pods: Store<Pod>,
    failures: Mutex<HashMap<(&'static str, String, String), u32>>,
}

impl Context {
    pub fn new(client: Client, executor: Executor, pods: Store<Pod>) -> Arc<Self> {
        Arc::new(Self {
            client,
            executor,
            pods,
            failures: Mutex::new(HashMap::new()),
        })
    }

    /// Pods in `namespace` whose controller owner has `owner_uid`.
    pub fn owned_pods(&self, namespace: &str, owner_uid: &str) -> Vec<Arc<Pod>> {
        self.pods
            .state()
            .into_iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(namespace))
            .filter(|p| {
                p.metadata.owner_references.as_ref().is_some_and(|refs| {
                    refs.iter()
                        .any(|r| r.controller == Some(true) && r.uid == owner_uid)
                })
            })
            .collect()
    }

    /// Per-object exponential backoff (kube-runtime has none): 0.5 s doubling
    /// to 5 min; cleanup that is only waiting for Pods retries every second.
    pub fn backoff(
        &self,
        kind: &'static str,
        namespace: &str,
        name: &str,
        error: &Error,
    ) -> Action {
        if error.is_waiting() {
            return Action::requeue(Duration::from_secs(1));
        }
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = failures
            .entry((kind, namespace.to_string(), name.to_string()))
            .or_insert(0);
        *n = n.saturating_add(1);
        let millis = 500u64.saturating_mul(1u64 << (*n - 1).min(20));
        Action::requeue(Duration::from_millis(millis.min(300_000)))
    }

    /// Forgets the failure count after a successful reconcile.
    pub fn succeeded(&self, kind: &'static str, namespace: &str, name: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.remove(&(kind, namespace.to_string(), name.to_string()));
    }
}
