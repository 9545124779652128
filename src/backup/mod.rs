//! Backups of Redis to S3-compatible object storage (`RedisBackup`).
//!
//! - `rdb.rs`: pure; cuts the RDB snapshot out of a member's `SYNC` reply
//!   and checks it (size, SHA-256, the RDB's CRC-64, its replication id and
//!   offset);
//! - `take.rs`: the socket; asks a member for the snapshot only
//!   (`REPLCONF rdb-only`, diskless) and streams it;
//! - `store.rs`: the bucket; one multipart upload per try, completed only
//!   when the snapshot checked out, aborted otherwise;
//! - `controller.rs`: the `RedisBackup` controller: which member, one try
//!   at a time, retries with backoff, the status and Events;
//! - `schedule.rs`: pure; when a Redis's `spec.backup` schedule is due,
//!   the backups' names, which finished backups retention lets go;
//! - `scheduler.rs`: the schedule's controller over Redis objects: makes
//!   the due `RedisBackup`, prunes objects then `RedisBackup`s;
//! - `restore.rs`: `podkeeper restore`, the init container of a Redis being
//!   restored: download, check, put where redis-server loads it;
//! - `upload.rs`: `podkeeper upload`, an RDB file made by hand checked into
//!   a bucket (to restore from, or as the by-hand floor of a backup).

pub mod controller;
pub mod rdb;
pub mod restore;
pub mod schedule;
pub mod scheduler;
pub mod store;
pub mod take;
pub mod upload;

use tokio::sync::{mpsc, oneshot};

use rdb::Snapshot;
use store::Location;
use take::Source;

/// Why a try ended without a backup.
#[derive(Debug, thiserror::Error)]
pub enum CopyError {
    /// The backup was no longer wanted when the snapshot was whole.
    #[error("the backup was deleted during its try; the upload of {0} was aborted")]
    Abandoned(String),
    /// Which side failed, and why.
    #[error("{0}")]
    Failed(String),
}

/// One try: the snapshot streamed from the member `source` into a
/// multipart upload of `key` at `location`, completed only if the whole
/// snapshot checked out and, asked once it has, `still_wanted` says the
/// backup is still wanted (its `RedisBackup` was not deleted meanwhile).
/// `Err` says which side failed.
pub async fn copy(
    source: &Source,
    location: &Location,
    key: &str,
    still_wanted: impl std::future::Future<Output = bool>,
) -> Result<Snapshot, CopyError> {
    let s3 = store::open(location).map_err(|e| CopyError::Failed(format!("object store: {e}")))?;
    let (tx, rx) = mpsc::channel(8);
    let (verdict_tx, verdict_rx) = oneshot::channel();
    let upload = store::upload(&s3, key, rx, verdict_rx);
    let taking = async {
        let taken = take::take(source, tx).await;
        let wanted = taken.is_ok() && still_wanted.await;
        let _ = verdict_tx.send(wanted);
        (taken, wanted)
    };
    let (uploaded, (taken, wanted)) = futures::join!(upload, taking);
    match (taken, uploaded) {
        (Ok(snapshot), Ok(_)) => Ok(snapshot),
        (Ok(_), Err(_)) if !wanted => Err(CopyError::Abandoned(key.to_string())),
        // The upload failed first and stopped the taking: its error says why.
        (Err(take::TakeError::SinkGone) | Ok(_), Err(e)) => Err(CopyError::Failed(format!(
            "uploading {key}: {}",
            store::describe(&e)
        ))),
        (Err(e), _) => Err(CopyError::Failed(format!(
            "taking the snapshot from {}: {e}",
            source.addr
        ))),
    }
}
