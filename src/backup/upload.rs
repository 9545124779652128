//! `podkeeper upload`: an RDB file made elsewhere (`redis-cli --rdb`, a
//! Redis outside Kubernetes) put into a bucket so that a Redis can be
//! restored from it (`spec.restore.source`). The file is checked as a
//! backup is (the RDB's CRC-64, its SHA-256) while it streams into one
//! multipart upload, completed only when it checked out; the SHA-256 to
//! give `spec.restore` is printed.

use tokio::io::AsyncReadExt;
use tokio::sync::{mpsc, oneshot};

use super::rdb::{Check, Snapshot};
use super::store::{self, Location};

/// Uploads the RDB file at `path` as `key`; the object is there only if
/// the whole file is an RDB file whose checksum matched.
pub async fn upload_file(
    at: &Location,
    key: &str,
    path: &std::path::Path,
) -> Result<Snapshot, String> {
    let s3 = store::open(at).map_err(|e| format!("object store: {e}"))?;
    let mut file = tokio::fs::File::open(path)
        .await
        .map_err(|e| format!("opening {}: {e}", path.display()))?;
    let (tx, rx) = mpsc::channel(8);
    let (verdict_tx, verdict_rx) = oneshot::channel();
    let uploading = store::upload(&s3, key, rx, verdict_rx);
    let reading = async {
        let mut check = Check::default();
        let read: Result<(), String> = async {
            loop {
                let mut buf = vec![0u8; 1024 * 1024];
                let n = file
                    .read(&mut buf)
                    .await
                    .map_err(|e| format!("reading {}: {e}", path.display()))?;
                if n == 0 {
                    return Ok(());
                }
                buf.truncate(n);
                check.feed(&buf);
                tx.send(buf).await.map_err(|_| STOPPED.to_string())?;
            }
        }
        .await;
        drop(tx);
        let checked = read.and_then(|()| {
            check
                .finish()
                .map_err(|e| format!("{} is not a whole RDB file: {e}", path.display()))
        });
        let _ = verdict_tx.send(checked.is_ok());
        checked
    };
    let (uploaded, checked) = futures::join!(uploading, reading);
    match (checked, uploaded) {
        (Ok(snapshot), Ok(_)) => Ok(snapshot),
        // The upload failed first and stopped the reading: its error says why.
        (Err(e), Err(up)) if e == STOPPED => {
            Err(format!("uploading {key}: {}", store::describe(&up)))
        }
        (Err(e), _) => Err(e),
        (Ok(_), Err(up)) => Err(format!("uploading {key}: {}", store::describe(&up))),
    }
}

const STOPPED: &str = "the upload stopped";

/// `podkeeper upload`, with the credentials from `AWS_ACCESS_KEY_ID` and
/// `AWS_SECRET_ACCESS_KEY`; prints what `spec.restore.source` needs.
pub async fn run(args: &crate::cli::UploadArgs) -> Result<(), String> {
    let o = &args.object;
    let at = Location::from_env(&o.endpoint, &o.bucket, &o.region)?;
    let snap = upload_file(&at, &o.key, &args.file).await?;
    println!(
        "uploaded {} to {}/{}: {} bytes, sha256 {}",
        args.file.display(),
        o.bucket,
        o.key,
        snap.size,
        snap.sha256
    );
    Ok(())
}
