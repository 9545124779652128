//! A refused step (a Pod create, delete or update, a Service apply or
//! delete): its reason and message, and the API server's words it quotes.

/// The first failure in a step, for the ReplicaFailure condition.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    /// `FailedCreate`, `FailedDelete` or `FailedUpdate` (Pods),
    /// `FailedService` (a Service apply or delete).
    pub reason: &'static str,
    pub message: String,
}

/// The API server's message for an API error, else the error itself.
pub fn api_message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}
