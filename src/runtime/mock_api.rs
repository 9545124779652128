//! A stand-in API server for unit tests of the steps that talk to one: each
//! request is answered by a function of its method, path and JSON body.

use std::sync::Arc;

use kube::Client;
use serde_json::Value;

/// A client whose every request `answer` answers with (status code, JSON
/// body).
pub fn client(
    answer: impl Fn(&http::Method, &str, Value) -> (u16, Value) + Send + Sync + 'static,
) -> Client {
    let answer = Arc::new(answer);
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let answer = answer.clone();
        async move {
            let (parts, body) = req.into_parts();
            let bytes = body.collect_bytes().await.expect("request body");
            let body = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
            let (code, json) = answer(&parts.method, parts.uri.path(), body);
            Ok::<_, std::convert::Infallible>(
                http::Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(
                        serde_json::to_vec(&json).expect("answer"),
                    ))
                    .expect("response"),
            )
        }
    });
    Client::new(service, "ns")
}

/// The body of a refusal with `code` and `reason`, as the API server sends it.
pub fn status(code: u16, reason: &str) -> Value {
    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
        "reason": reason, "code": code, "message": reason})
}
