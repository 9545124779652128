//! `bench-redis --backups N`: a backup and a restore of a large dataset by
//! podkeeper against doing the same by hand in the same run, and the
//! primary's write latency while a backup is taken.
//!
//! A Redis of `--backup-members` members (2 by default) holds `--backup-keys` keys of 1 KiB (1,000,000 is
//! about 1 GiB) and a client Pod writes through its Service the whole time
//! (see [`super::writer`]). Each run, in order:
//!
//! 1. **podkeeper's backup**: a `RedisBackup` created, until the bench
//!    sees it Completed (taken from the replica into the cluster's object
//!    store).
//! 2. **A quiet window** as long as that backup, for the write latency
//!    without one.
//! 3. **The backup by hand**, in the client Pod: `redis-cli --rdb` from the
//!    same replica to a file, then `podkeeper upload` of the file (the same
//!    S3 client and checks as the operator's).
//! 4. **podkeeper's restore**: a Redis of 1 member with
//!    `spec.restore.backup`, until it is Ready (its member downloaded and
//!    checked the object in its init container and loaded it).
//! 5. **The restore by hand**, in the client Pod: `podkeeper restore` (the
//!    same download and checks) into a directory, then a redis-server
//!    started on it, until it answers `PING` (the dataset loaded).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{DeleteParams, PostParams};
use podkeeper::api::Redis;
use podkeeper::api::backup::{RedisBackup, phase};
use serde::Serialize;
use serde_json::json;

use super::session::{CLIENT, Session, load_average, now, wait};
use super::storage::load_dataset;
use super::{PORT, STEP_TIMEOUT, fmt_p, other, progress, writer};
use crate::bench::measure::percentiles;
use crate::kind::object_store as store;
use crate::kind::versions::REDIS_IMAGE;

const METHOD: &str = "A Redis of M members (no spec.storage, no limits) holds N keys of 1 KiB (SHA-1 hex values the RDB's LZF cannot shrink), loaded by Lua scripts; the client Pod writes through its Service the whole time (SET and WAIT 1 per connection, see above). Each run: (1) podkeeper's backup: a RedisBackup created until the bench sees it Completed (polled every 200 ms), taken from the replica into the kind cluster's object store (versitygw on a local-path volume); (2) a quiet window as long as that backup; (3) by hand, in the client Pod: redis-cli --rdb from the same replica to a file, then podkeeper upload of the file (the same S3 client, part size and checks as the operator's); (4) podkeeper's restore: a Redis of 1 member with spec.restore.backup, created until Ready (its init container downloaded and checked the object, redis-server loaded it, the member was made primary); (5) by hand, in the client Pod: podkeeper restore (the same download and checks) into a directory, then redis-server started on it until PING answers PONG. Times are the bench's clock around each step (steps in the client Pod: date +%s.%N inside it). Write latency: end minus start of each accepted write (one redis-cli connection: SET, WAIT 1, INFO) that started in the window (podkeeper's backup, the quiet window, the backup by hand); p99 nearest-rank per window.";

#[derive(Debug, Default, Serialize)]
pub struct Backups {
    pub method: String,
    pub runs: usize,
    pub dataset_keys: u64,
    pub members: i32,
    /// Bytes of the RDB file (the backups' size).
    pub rdb_bytes: i64,
    pub backup_s: Vec<f64>,
    pub by_hand_backup_s: Vec<f64>,
    /// Of the by-hand backup: `redis-cli --rdb` alone.
    pub by_hand_rdb_s: Vec<f64>,
    pub restore_s: Vec<f64>,
    pub by_hand_restore_s: Vec<f64>,
    /// Of the by-hand restore: the download and its checks alone.
    pub by_hand_download_s: Vec<f64>,
    /// The primary's write latency p99 (ms) during each podkeeper backup
    /// and in the quiet window after it.
    pub write_p99_ms_during: Vec<f64>,
    pub write_p99_ms_quiet: Vec<f64>,
    /// The same during each backup by hand.
    pub write_p99_ms_by_hand: Vec<f64>,
    pub failures: Vec<String>,
    pub load: (String, String),
}

const NAME: &str = "bk";
/// This machine's CA bundle (`just image` puts the same file in the image).
const CA_BUNDLE: &str = "/etc/ssl/certs/ca-certificates.crt";

/// Copies the kind cluster's object store credentials (`kind up
/// --object-store`) into the session's namespace as Secret `name` (a
/// `RedisBackup` reads its credentials in its own namespace), and returns
/// them (for steps run by hand). One already there is kept.
pub async fn copy_store_credentials(
    session: &Session,
    name: &str,
) -> Result<(String, String), crate::Error> {
    let from: kube::Api<Secret> = kube::Api::namespaced(session.client.clone(), store::NAMESPACE);
    let secret = from.get(store::SECRET).await?;
    let data = secret.data.clone().unwrap_or_default();
    let value = |k: &str| {
        data.get(k)
            .map(|v| String::from_utf8_lossy(&v.0).into_owned())
            .ok_or_else(|| other(format!("Secret {} has no {k}", store::SECRET)))
    };
    let pair = (
        value(store::ACCESS_KEY_ID)?,
        value(store::SECRET_ACCESS_KEY)?,
    );
    let copy = Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        data: secret.data,
        ..Default::default()
    };
    let to: kube::Api<Secret> = session.api();
    match to.create(&PostParams::default(), &copy).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 409 => {}
        Err(e) => return Err(e.into()),
    }
    Ok(pair)
}

/// The Pod IP of `member` (the one podkeeper took its backup from).
async fn member_ip(session: &Session, member: &str) -> Result<String, crate::Error> {
    session
        .api::<Pod>()
        .get(member)
        .await?
        .status
        .and_then(|s| s.pod_ip)
        .ok_or_else(|| other(format!("member {member} has no IP")))
}

/// Runs `script` in the client Pod; its output's last line is the
/// space-separated `date +%s.%N` stamps it printed.
fn stamps(session: &Session, script: &str) -> Result<Vec<f64>, crate::Error> {
    let out = session.sh(CLIENT, script)?;
    let last = out.lines().last().unwrap_or("");
    let stamps: Vec<f64> = last
        .split_whitespace()
        .filter_map(|s| s.parse().ok())
        .collect();
    if stamps.len() < 2 {
        return Err(other(format!("no time stamps from: {out}")));
    }
    Ok(stamps)
}

/// The p99 (ms) of the latencies of the accepted writes that started in
/// `[from, to)`.
fn write_p99_ms(attempts: &[writer::Attempt], from: f64, to: f64) -> f64 {
    let latencies: Vec<f64> = attempts
        .iter()
        .filter(|a| a.accepted && a.start >= from && a.start < to)
        .map(|a| (a.end - a.start) * 1000.0)
        .collect();
    percentiles(&latencies).p99
}

/// The static podkeeper binary `just static` builds (the image's).
pub fn default_binary() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR").unwrap_or_else(|| "target".into());
    Path::new(&target).join("x86_64-unknown-linux-gnu/release/podkeeper")
}

pub async fn backups(
    session: &Session,
    runs: usize,
    keys: u64,
    members: i32,
    binary: &Path,
    out: &mut Backups,
) -> Result<(), crate::Error> {
    *out = Backups {
        method: METHOD.into(),
        runs,
        dataset_keys: keys,
        members,
        load: (load_average(), String::new()),
        ..Default::default()
    };
    let (id, secret) = copy_store_credentials(session, "s3").await?;
    // The binary and a trust store for its HTTP client (which does not
    // start without one; the operator's image carries the same file).
    for (from, to) in [
        (binary.display().to_string(), "/tmp/podkeeper"),
        (CA_BUNDLE.to_string(), "/tmp/ca-certificates.crt"),
    ] {
        let (ok, _, err) = session.kubectl(&["cp", &from, &format!("{CLIENT}:{to}")]);
        if !ok {
            return Err(other(format!("copying {from} into the client Pod: {err}")));
        }
    }
    session.create_redis(NAME, members, REDIS_IMAGE).await?;
    session
        .settled(NAME, members as usize, STEP_TIMEOUT)
        .await?;
    load_dataset(session, NAME, keys).await?;
    session
        .settled(NAME, members as usize, STEP_TIMEOUT)
        .await?;
    let host = session.cluster_ip(NAME).await?;
    session.start_writer(&host, PORT, 1).await?;
    session.writes_accepted(50).await?;
    let creds = format!(
        "SSL_CERT_FILE=/tmp/ca-certificates.crt AWS_ACCESS_KEY_ID='{id}' AWS_SECRET_ACCESS_KEY='{secret}'"
    );
    let target = format!(
        "--endpoint {} --bucket {} --region {}",
        store::endpoint(),
        store::BUCKET,
        store::REGION
    );
    for run in 0..runs {
        let label = format!("backup {}/{runs}", run + 1);
        if let Err(e) = one_run(session, run, &creds, &target, out).await {
            out.failures.push(format!("{label}: {e}"));
            return Err(other(format!("{label}: {e}")));
        }
        progress(&format!(
            "{label}: podkeeper {:.1} s, by hand {:.1} s; restore {:.1} s, by hand {:.1} s",
            out.backup_s.last().unwrap_or(&0.0),
            out.by_hand_backup_s.last().unwrap_or(&0.0),
            out.restore_s.last().unwrap_or(&0.0),
            out.by_hand_restore_s.last().unwrap_or(&0.0),
        ));
    }
    let _ = session.stop_writer().await;
    out.load.1 = load_average();
    Ok(())
}

async fn one_run(
    session: &Session,
    run: usize,
    creds: &str,
    target: &str,
    out: &mut Backups,
) -> Result<(), crate::Error> {
    // (1) podkeeper's backup.
    let backup_name = format!("bench-{run}");
    let backup: RedisBackup = serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "RedisBackup",
        "metadata": {"name": backup_name},
        "spec": {"redis": NAME, "destination": {
            "endpoint": store::endpoint(), "bucket": store::BUCKET,
            "prefix": "bench", "credentials": {"secretName": "s3"}
        }}
    }))?;
    let backups = session.api::<RedisBackup>();
    let started = now();
    backups.create(&PostParams::default(), &backup).await?;
    let done = wait(
        &format!("{backup_name} to finish"),
        STEP_TIMEOUT,
        || async {
            let b = backups.get(&backup_name).await.ok()?;
            b.finished().then_some(b)
        },
    )
    .await?;
    let finished = now();
    let status = done.status.clone().unwrap_or_default();
    if done.phase() != phase::COMPLETED {
        return Err(other(format!("{backup_name}: {status:?}")));
    }
    out.backup_s.push(finished - started);
    out.rdb_bytes = status.size.unwrap_or_default();

    // (2) As long again without a backup.
    let quiet = now();
    tokio::time::sleep(Duration::from_secs_f64(finished - started)).await;
    let (attempts, _) = session.writes()?;
    out.write_p99_ms_during
        .push(write_p99_ms(&attempts, started, finished));
    out.write_p99_ms_quiet
        .push(write_p99_ms(&attempts, quiet, quiet + (finished - started)));

    // (3) By hand: redis-cli --rdb from the same replica, then the upload.
    let member = status.member.clone().unwrap_or_default();
    let replica = member_ip(session, &member).await?;
    let t = stamps(
        session,
        &format!(
            "set -e; a=$(date +%s.%N); redis-cli -h {replica} -p {PORT} --rdb /tmp/hand.rdb >/dev/null; \
             b=$(date +%s.%N); {creds} /tmp/podkeeper upload {target} --key bench/by-hand-{run}.rdb --file /tmp/hand.rdb >/dev/null; \
             c=$(date +%s.%N); rm -f /tmp/hand.rdb; echo $a $b $c"
        ),
    )?;
    out.by_hand_rdb_s.push(t[1] - t[0]);
    out.by_hand_backup_s.push(t[2] - t[0]);
    let (attempts, _) = session.writes()?;
    out.write_p99_ms_by_hand
        .push(write_p99_ms(&attempts, t[0], t[2]));

    // (4) podkeeper's restore into a new Redis of one member.
    let restored = format!("rs-{run}");
    let started = now();
    session
        .create_redis_spec(
            &restored,
            json!({"replicas": 1, "port": PORT, "image": REDIS_IMAGE, "restore": {"backup": backup_name}}),
        )
        .await?;
    session.settled(&restored, 1, STEP_TIMEOUT).await?;
    out.restore_s.push(now() - started);
    session
        .api::<Redis>()
        .delete(&restored, &DeleteParams::default())
        .await?;

    // (5) By hand: the same download and checks, then redis-server on it.
    let key = status.key.clone().unwrap_or_default();
    let sha = status.sha256.clone().unwrap_or_default();
    let t = stamps(
        session,
        &format!(
            "set -e; rm -rf /tmp/hand; mkdir -p /tmp/hand; a=$(date +%s.%N); \
             {creds} /tmp/podkeeper restore {target} --key {key} --sha256 {sha} --dir /tmp/hand 2>/dev/null; \
             b=$(date +%s.%N); redis-server --port 7777 --dir /tmp/hand --save '' --appendonly no --daemonize yes >/dev/null; \
             until [ \"$(redis-cli -p 7777 ping 2>/dev/null)\" = PONG ]; do sleep 0.05; done; \
             c=$(date +%s.%N); redis-cli -p 7777 shutdown nosave >/dev/null 2>&1 || true; rm -rf /tmp/hand; echo $a $b $c"
        ),
    )?;
    out.by_hand_download_s.push(t[1] - t[0]);
    out.by_hand_restore_s.push(t[2] - t[0]);
    // The restored Redis's Pods gone before the next run loads the nodes.
    wait("the restored Redis to go", STEP_TIMEOUT, || async {
        session
            .api::<Redis>()
            .get_opt(&restored)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await?;
    Ok(())
}

pub fn markdown(s: &mut String, b: &Backups) {
    if b.runs == 0 {
        return;
    }
    let mb = b.rdb_bytes as f64 / 1e6;
    let _ = writeln!(
        s,
        "### Backup and restore ({} of {} runs, a Redis of {} members, {} keys of 1 KiB, RDB {:.0} MB)\n\n{}\n\nLoad averages (1/5/15 min): {} at the start, {} at the end.\n",
        b.backup_s.len(),
        b.runs,
        b.members,
        b.dataset_keys,
        mb,
        b.method,
        b.load.0,
        b.load.1
    );
    let _ = writeln!(
        s,
        "| measure | p50 / p99 / max | MB/s at p50 |\n|---|---|---|"
    );
    let row = |s: &mut String, what: &str, v: &[f64]| {
        if v.is_empty() {
            let _ = writeln!(s, "| {what} | - | - |");
            return;
        }
        let p = percentiles(v);
        let _ = writeln!(
            s,
            "| {what} | {} s | {:.0} |",
            fmt_p(&p),
            mb / p.p50.max(1e-9)
        );
    };
    row(
        s,
        "backup by podkeeper (RedisBackup created to Completed)",
        &b.backup_s,
    );
    row(
        s,
        "backup by hand (redis-cli --rdb, then podkeeper upload)",
        &b.by_hand_backup_s,
    );
    row(s, "of which redis-cli --rdb", &b.by_hand_rdb_s);
    row(
        s,
        "restore by podkeeper (Redis with spec.restore created to Ready)",
        &b.restore_s,
    );
    row(
        s,
        "restore by hand (podkeeper restore, then redis-server until PONG)",
        &b.by_hand_restore_s,
    );
    row(s, "of which the download and checks", &b.by_hand_download_s);
    let ratio = |a: &[f64], b: &[f64]| percentiles(a).p50 / percentiles(b).p50.max(1e-9);
    let _ = writeln!(
        s,
        "\nRatios at p50: backup podkeeper / by hand {:.2}, restore podkeeper / by hand {:.2}.\n",
        ratio(&b.backup_s, &b.by_hand_backup_s),
        ratio(&b.restore_s, &b.by_hand_restore_s)
    );
    let _ = writeln!(
        s,
        "| the primary's write latency p99 per window, ms | p50 / p99 / max over runs |\n|---|---|\n| during podkeeper's backup | {} |\n| quiet window as long, after it | {} |\n| during the backup by hand | {} |\n",
        fmt_p(&percentiles(&b.write_p99_ms_during)),
        fmt_p(&percentiles(&b.write_p99_ms_quiet)),
        fmt_p(&percentiles(&b.write_p99_ms_by_hand))
    );
    for f in &b.failures {
        let _ = writeln!(s, "- failure: {f}\n");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attempt(start: f64, end: f64, accepted: bool) -> writer::Attempt {
        writer::Attempt {
            start,
            end,
            key: 0,
            accepted,
            acks: Some(1),
            run_id: None,
            term: None,
            refused: None,
        }
    }

    #[test]
    fn the_write_p99_counts_accepted_writes_started_in_the_window() {
        let a = [
            attempt(0.5, 0.6, true),
            attempt(1.0, 1.01, true),
            attempt(1.5, 1.53, true),
            attempt(1.7, 4.0, false),
            attempt(2.5, 2.9, true),
        ];
        assert!((write_p99_ms(&a, 1.0, 2.0) - 30.0).abs() < 1e-6);
        assert_eq!(write_p99_ms(&a, 3.0, 4.0), 0.0);
    }
}
