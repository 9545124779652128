//! Restoring a member's data directory from a backup: the work of the
//! `restore` init container (`podkeeper restore`) that the members of a
//! Redis with `spec.restore` start with while it is being restored.
//!
//! The object is downloaded next to the data, checked whole (its SHA-256
//! against the one asked for, and the RDB file's own CRC-64), and only
//! then put where redis-server loads it: `dump.rdb` when the append-only
//! file is off, or as the base of a new append-only file (Redis 7's
//! multi-part AOF: `appendonlydir/appendonly.aof.1.base.rdb` and a
//! manifest naming it) when it is on, since redis-server with
//! `appendonly yes` ignores `dump.rdb`. A marker then records the restore,
//! so a container started again later (a node's restart) never puts the
//! old backup over newer data.

use std::path::{Path, PathBuf};

use futures::StreamExt;
use object_store::ObjectStoreExt;
use object_store::path::Path as ObjectPath;
use tokio::io::AsyncWriteExt;

use super::rdb::{Check, Snapshot};
use super::store::{self, Location};

/// Where redis-server looks for its data, from its effective
/// configuration.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// The data directory (`dir`).
    pub dir: PathBuf,
    /// `dbfilename`.
    pub dbfilename: String,
    /// With `appendonly yes`: `appenddirname` and `appendfilename`.
    pub aof: Option<(String, String)>,
}

/// The marker of a finished restore, in the data directory: the SHA-256
/// restored.
pub const MARKER: &str = ".podkeeper-restored";
const PARTIAL: &str = ".podkeeper-restore.partial";

impl Layout {
    /// Where the RDB file goes.
    pub fn rdb_path(&self) -> PathBuf {
        match &self.aof {
            Some((dir, file)) => self.dir.join(dir).join(format!("{file}.1.base.rdb")),
            None => self.dir.join(&self.dbfilename),
        }
    }

    /// The AOF manifest that makes the RDB file the base, when AOF is on.
    pub fn manifest(&self) -> Option<(PathBuf, String)> {
        let (dir, file) = self.aof.as_ref()?;
        Some((
            self.dir.join(dir).join(format!("{file}.manifest")),
            format!("file {file}.1.base.rdb seq 1 type b\n"),
        ))
    }
}

/// What a restore did.
#[derive(Debug, PartialEq, Eq)]
pub enum Restored {
    /// The object, checked, is in place.
    Done(Snapshot),
    /// The marker says this data directory was restored already: nothing
    /// was touched.
    Already,
}

fn io(what: &str, path: &Path, e: std::io::Error) -> String {
    format!("{what} {}: {e}", path.display())
}

/// Restores `key` from `at` into `layout`, checked against `sha256`. On
/// any error nothing of the backup is left where redis-server would load
/// it, and the error says what failed (the object missing, the store
/// refusing, the checksum).
pub async fn restore(
    at: &Location,
    key: &str,
    sha256: &str,
    layout: &Layout,
) -> Result<Restored, String> {
    let marker = layout.dir.join(MARKER);
    if tokio::fs::try_exists(&marker).await.unwrap_or(false) {
        return Ok(Restored::Already);
    }
    let s3 = store::open(at).map_err(|e| format!("object store: {e}"))?;
    let object = s3.get(&ObjectPath::from(key)).await.map_err(|e| match e {
        object_store::Error::NotFound { .. } => {
            format!("object {key} not found in bucket {}", at.bucket)
        }
        e => format!(
            "reading {key} from bucket {}: {}",
            at.bucket,
            store::describe(&e)
        ),
    })?;
    let partial = layout.dir.join(PARTIAL);
    let mut file = tokio::fs::File::create(&partial)
        .await
        .map_err(|e| io("creating", &partial, e))?;
    let mut check = Check::default();
    let mut stream = object.into_stream();
    let copied: Result<(), String> = async {
        while let Some(chunk) = stream.next().await {
            let chunk = chunk.map_err(|e| format!("reading {key}: {e}"))?;
            check.feed(&chunk);
            file.write_all(&chunk)
                .await
                .map_err(|e| io("writing", &partial, e))?;
        }
        file.sync_all()
            .await
            .map_err(|e| io("syncing", &partial, e))
    }
    .await;
    drop(file);
    let checked = copied.and_then(|()| {
        let snap = check
            .finish()
            .map_err(|e| format!("{key} is not a whole RDB file: {e}"))?;
        if snap.sha256 != sha256 {
            return Err(format!(
                "{key} has SHA-256 {}, not the {sha256} asked for",
                snap.sha256
            ));
        }
        Ok(snap)
    });
    let snap = match checked {
        Ok(s) => s,
        Err(why) => {
            let _ = tokio::fs::remove_file(&partial).await;
            return Err(why);
        }
    };
    place(layout, &partial).await.inspect_err(|_| {
        let _ = std::fs::remove_file(&partial);
    })?;
    tokio::fs::write(&marker, format!("{sha256}\n"))
        .await
        .map_err(|e| io("writing", &marker, e))?;
    Ok(Restored::Done(snap))
}

/// `podkeeper restore`: [`restore`] with the credentials from the
/// environment (`AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, from the
/// Secret by `secretKeyRef`), its outcome on stderr and, on failure, in the
/// container's termination message (what `kubectl describe pod` and the
/// operator's `RestoreFailed` condition show).
pub async fn run(args: &crate::cli::RestoreArgs) -> Result<(), String> {
    let o = &args.object;
    let outcome = async {
        let at = Location::from_env(&o.endpoint, &o.bucket, &o.region)?;
        let layout = Layout {
            dir: args.dir.clone(),
            dbfilename: args.dbfilename.clone(),
            aof: args.aof_dir.clone().zip(args.aof_file.clone()),
        };
        restore(&at, &o.key, &args.sha256, &layout).await
    }
    .await;
    match outcome {
        Ok(Restored::Done(snap)) => {
            eprintln!(
                "podkeeper: restored {} ({} bytes, SHA-256 {}, replication offset {}) into {}",
                o.key,
                snap.size,
                snap.sha256,
                snap.repl_offset.map_or("-".into(), |o| o.to_string()),
                args.dir.display()
            );
            Ok(())
        }
        Ok(Restored::Already) => {
            eprintln!(
                "podkeeper: {} was restored before ({MARKER}); nothing done",
                args.dir.display()
            );
            Ok(())
        }
        Err(why) => {
            if let Some(log) = &args.termination_log {
                let _ = std::fs::write(log, &why);
            }
            Err(why)
        }
    }
}

/// Moves the checked file where redis-server loads it, replacing what an
/// earlier, unfinished try left.
async fn place(layout: &Layout, partial: &Path) -> Result<(), String> {
    let _ = tokio::fs::remove_file(layout.dir.join(&layout.dbfilename)).await;
    let target = layout.rdb_path();
    if let Some((dir, _)) = &layout.aof {
        let aof_dir = layout.dir.join(dir);
        let _ = tokio::fs::remove_dir_all(&aof_dir).await;
        tokio::fs::create_dir_all(&aof_dir)
            .await
            .map_err(|e| io("creating", &aof_dir, e))?;
    }
    tokio::fs::rename(partial, &target)
        .await
        .map_err(|e| io("moving the restored file to", &target, e))?;
    if let Some((path, contents)) = layout.manifest() {
        tokio::fs::write(&path, contents)
            .await
            .map_err(|e| io("writing", &path, e))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_aof_the_backup_is_the_base_of_a_new_append_only_file() {
        let aof = Layout {
            dir: "/data".into(),
            dbfilename: "dump.rdb".into(),
            aof: Some(("appendonlydir".into(), "appendonly.aof".into())),
        };
        assert_eq!(
            aof.rdb_path(),
            PathBuf::from("/data/appendonlydir/appendonly.aof.1.base.rdb")
        );
        assert_eq!(
            aof.manifest(),
            Some((
                PathBuf::from("/data/appendonlydir/appendonly.aof.manifest"),
                "file appendonly.aof.1.base.rdb seq 1 type b\n".into()
            ))
        );
        let rdb = Layout { aof: None, ..aof };
        assert_eq!(rdb.rdb_path(), PathBuf::from("/data/dump.rdb"));
        assert_eq!(rdb.manifest(), None);
    }
}
