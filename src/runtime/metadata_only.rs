//! Writes whose answer podkeeper reads only the metadata of.
//!
//! The API server answers a Pod delete with the whole Pod and a status
//! write with the whole object; podkeeper needs nothing of the first and
//! the resourceVersion of the second. Asked for `PartialObjectMetadata`
//! (the same `Accept` header as kube's `*_metadata` calls), the API server
//! encodes only the metadata and the operator decodes only that: in the
//! benchmark's scale-down, decoding those answers was about 5 % of the
//! operator's CPU, and the API server, which every contender shares,
//! encoded a Pod or a Redis in full for each.

use http::HeaderValue;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, PostParams};
use kube::core::Request;
use kube::{Api, Client};
use serde::Deserialize;
use serde::de::IgnoredAny;

const ACCEPT_METADATA: &str = "application/json;as=PartialObjectMetadata;g=meta.k8s.io;v=v1";

/// The metadata of an answer; the rest is skipped unread.
#[derive(Deserialize)]
struct Answer {
    #[serde(default)]
    metadata: ObjectMeta,
}

/// The client `api` sends with.
fn client<K: kube::Resource + Clone>(api: &Api<K>) -> Client {
    api.clone().into_client()
}

fn metadata_only(
    request: Result<http::Request<Vec<u8>>, kube::core::request::Error>,
    verb: &'static str,
) -> kube::Result<http::Request<Vec<u8>>> {
    let mut request = request.map_err(kube::Error::BuildRequest)?;
    request.headers_mut().insert(
        http::header::ACCEPT,
        HeaderValue::from_static(ACCEPT_METADATA),
    );
    // kube's own calls name their verb this way (for its tracing).
    request.extensions_mut().insert(verb);
    Ok(request)
}

/// Deletes `name`, as `Api::delete` does; refusals are the same
/// `kube::Error::Api`. The answer (the object, or a Status once it is
/// gone) is not decoded.
pub async fn delete<K: kube::Resource + Clone>(
    api: &Api<K>,
    name: &str,
    params: &DeleteParams,
) -> kube::Result<()> {
    let request = Request::new(api.resource_url()).delete(name, params);
    client(api)
        .request::<IgnoredAny>(metadata_only(request, "delete")?)
        .await
        .map(drop)
}

/// Replaces the status subresource of `name` with `body`'s, as
/// `Api::replace_status` does, and returns the metadata of the object it
/// made.
pub async fn replace_status<K: kube::Resource + Clone>(
    api: &Api<K>,
    name: &str,
    params: &PostParams,
    body: &serde_json::Value,
) -> kube::Result<ObjectMeta> {
    let body = serde_json::to_vec(body).map_err(kube::Error::SerdeError)?;
    let request =
        Request::new(api.resource_url()).replace_subresource("status", name, params, body);
    let answer: Answer = client(api)
        .request(metadata_only(request, "replace_status")?)
        .await?;
    Ok(answer.metadata)
}
