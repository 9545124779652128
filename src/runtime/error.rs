//! The reconcile's error type, with a short fixed label per variant for
//! metrics.

use crate::runtime::failure::Failure;

/// A reconcile failed, or must come back soon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("kubernetes API: {0}")]
    Kube(#[from] kube::Error),
    #[error("finalizer: {0}")]
    Finalizer(#[source] Box<kube::runtime::finalizer::Error<Error>>),
    #[error("waiting for {remaining} pods to be deleted")]
    CleanupPending { remaining: usize },
    /// A step was refused (a Pod create or delete, the Service): retried
    /// with backoff until it succeeds.
    #[error("{}", .0.message)]
    Step(Failure),
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
            Error::Step(f) => match f.reason {
                "FailedCreate" => "create",
                "FailedDelete" => "delete",
                "FailedService" => "service",
                _ => "step",
            },
            Error::Serialize(_) => "serialize",
        }
    }

    /// Waiting, not failing: cleanup that is still deleting Pods.
    pub fn is_waiting(&self) -> bool {
        self.metric_label() == "cleanup_pending"
    }
}
