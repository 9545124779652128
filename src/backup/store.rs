//! The object store at the edge: an S3-compatible bucket through the
//! `object_store` crate. An upload is one multipart upload that is
//! completed only when the snapshot checked out and aborted otherwise, so
//! no object under a backup's key is ever a partial snapshot.

use std::time::Duration;

use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path;
use object_store::{ObjectStoreExt, RetryConfig, WriteMultipart};
use tokio::sync::{mpsc, oneshot};

/// Where backups go and come from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Location {
    pub endpoint: String,
    pub bucket: String,
    pub region: String,
    pub access_key_id: String,
    pub secret_access_key: String,
}

impl Location {
    /// A store named on a command line (`podkeeper restore`, `upload`),
    /// with the credentials from `AWS_ACCESS_KEY_ID` and
    /// `AWS_SECRET_ACCESS_KEY` (a Pod's `secretKeyRef`s).
    pub fn from_env(endpoint: &str, bucket: &str, region: &str) -> Result<Location, String> {
        let env = |name: &str| {
            std::env::var(name).map_err(|_| format!("{name} is not set (the store's credentials)"))
        };
        Ok(Location {
            endpoint: endpoint.trim_end_matches('/').to_string(),
            bucket: bucket.into(),
            region: region.into(),
            access_key_id: env("AWS_ACCESS_KEY_ID")?,
            secret_access_key: env("AWS_SECRET_ACCESS_KEY")?,
        })
    }
}

/// Parts of 16 MiB (S3's least is 5 MiB; at most 10,000 parts: 156 GiB).
const PART: usize = 16 * 1024 * 1024;
/// Parts in flight at once.
const IN_FLIGHT: usize = 2;

pub fn open(at: &Location) -> Result<AmazonS3, object_store::Error> {
    // The HTTP client's TLS takes the process's default provider: ring,
    // as kube's (a second install is refused, and harmless).
    let _ = rustls::crypto::ring::default_provider().install_default();
    AmazonS3Builder::new()
        .with_endpoint(&at.endpoint)
        .with_allow_http(at.endpoint.starts_with("http://"))
        .with_virtual_hosted_style_request(false)
        .with_bucket_name(&at.bucket)
        .with_region(&at.region)
        .with_access_key_id(&at.access_key_id)
        .with_secret_access_key(&at.secret_access_key)
        .with_retry(RetryConfig {
            max_retries: 4,
            retry_timeout: Duration::from_secs(60),
            ..RetryConfig::default()
        })
        .build()
}

/// Uploads the pieces from `pieces` as the object `key`, once `verdict`
/// says the whole was good (`true`); aborts the upload if it says no, or
/// is dropped, or a part fails. Returns the bytes uploaded.
pub async fn upload(
    store: &AmazonS3,
    key: &str,
    mut pieces: mpsc::Receiver<Vec<u8>>,
    verdict: oneshot::Receiver<bool>,
) -> Result<u64, object_store::Error> {
    let path = Path::from(key);
    let upload = store.put_multipart(&path).await?;
    let mut writer = WriteMultipart::new_with_chunk_size(upload, PART);
    let mut sent = 0u64;
    let written: Result<(), object_store::Error> = async {
        while let Some(piece) = pieces.recv().await {
            writer.wait_for_capacity(IN_FLIGHT).await?;
            writer.write(&piece);
            sent += piece.len() as u64;
        }
        Ok(())
    }
    .await;
    if let Err(e) = written {
        abort(writer).await;
        return Err(e);
    }
    if verdict.await == Ok(true) {
        writer.finish().await?;
        Ok(sent)
    } else {
        abort(writer).await;
        Err(object_store::Error::Generic {
            store: "S3",
            source: "the snapshot did not check out; upload aborted".into(),
        })
    }
}

/// Aborts a multipart upload once its parts in flight have ended: a part
/// cut off in the middle of its request can land in the store after the
/// abort and be left there (versitygw keeps it).
async fn abort(mut writer: WriteMultipart) {
    let _ = writer.wait_for_capacity(0).await;
    if let Err(e) = writer.abort().await {
        tracing::warn!(error = %describe(&e), "aborting a multipart upload failed");
    }
}

/// An error of the store in a line a person reads in `kubectl describe`:
/// an S3 error's XML body (which can run to kilobytes: the string the
/// store signed, in hex) is cut down to its `Code` and `Message`, first.
pub fn describe(e: &object_store::Error) -> String {
    let text = e.to_string();
    let Some(at) = text.find("<?xml") else {
        return text;
    };
    let body = &text[at..];
    let field = |tag: &str| {
        let open = format!("<{tag}>");
        let start = body.find(&open)? + open.len();
        let len = body[start..].find(&format!("</{tag}>"))?;
        Some(body[start..start + len].trim().to_string())
    };
    let head = text[..at].trim_end_matches([' ', ':']);
    match (field("Code"), field("Message")) {
        (Some(code), Some(message)) => format!("{code}: {message} ({head})"),
        (Some(code), None) => format!("{code} ({head})"),
        _ => head.to_string(),
    }
}

/// Deletes the object `key` (pruning a backup). An object already gone is
/// not an error: S3 answers a delete of a missing key with success.
pub async fn delete(at: &Location, key: &str) -> Result<(), object_store::Error> {
    let store = open(at)?;
    match store.delete(&Path::from(key)).await {
        Ok(()) | Err(object_store::Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn generic(text: &str) -> object_store::Error {
        object_store::Error::Generic {
            store: "S3",
            source: text.into(),
        }
    }

    #[test]
    fn store_errors_read_as_their_code_and_message_without_the_xml() {
        let refused = generic(concat!(
            "Error performing POST http://s3/b/a.rdb?uploads= - Server returned non-2xx status code: ",
            "403 Forbidden: <?xml version=\"1.0\"?>\n<Error><Code>SignatureDoesNotMatch</Code>",
            "<Message>The request signature we calculated does not match.</Message>",
            "<StringToSignBytes>41 57 53</StringToSignBytes></Error>"
        ));
        let d = describe(&refused);
        assert!(
            d.starts_with("SignatureDoesNotMatch: The request signature we calculated does not match. (Generic S3 error: Error performing POST http://s3/b/a.rdb?uploads="),
            "{d}"
        );
        assert!(d.ends_with("403 Forbidden)"), "{d}");
        assert!(!d.contains("StringToSign"), "{d}");
        // Without a body, the error as it is.
        let nowhere = generic(
            "Error performing POST http://s3/b/a.rdb?uploads= - HTTP error: error sending request",
        );
        assert_eq!(describe(&nowhere), nowhere.to_string());
    }
}
