//! Backups (`src/backup`) against real processes on loopback: a snapshot
//! taken from a redis-server replica the way the `RedisBackup` controller
//! takes it, into a real S3-compatible server (versitygw, built from its Go
//! module by podkeeper-dev, its posix backend in a temporary directory: a
//! bucket is a directory, an object a file). A completed object is the
//! whole snapshot and restores every key into a new server; a try that
//! cannot complete leaves no object.

use std::future::ready;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use podkeeper::backup::{self, store::Location, take::Source};
use sha2::{Digest, Sha256};
use tokio::process::{Child, Command};

use super::{DEADLINE, LOOPBACK, POLL, Server, free_port};

const PASSWORD: &str = "backup-test-password";
const BUCKET: &str = "backups";
const ACCESS_KEY: &str = "podkeeper-test";
const SECRET_KEY: &str = "podkeeper-test-secret";

/// Writes keys `k<ARGV[1]>..=k<ARGV[2]>` of 1 KiB each (a Lua script on
/// the server).
/// Each value is 26 SHA-1 hex digests (1,040 bytes the RDB's LZF does
/// not shrink).
const LOAD: &str = r#"for i=tonumber(ARGV[1]),tonumber(ARGV[2]) do local v={} for j=1,26 do v[j]=redis.sha1hex(i..":"..j) end redis.call("SET","k"..i,table.concat(v)) end return 1"#;

/// A versitygw process serving `<dir>/data` (bucket [`BUCKET`] made as a
/// directory before it starts).
struct ObjectStore {
    _child: Child,
    port: u16,
    dir: tempfile::TempDir,
}

impl ObjectStore {
    async fn start() -> ObjectStore {
        let bin = tokio::task::spawn_blocking(podkeeper_dev::kind::tools::ensure_object_store_tool)
            .await
            .unwrap()
            .expect("versitygw built from its Go module");
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("data").join(BUCKET)).unwrap();
        let port = free_port();
        let child = Command::new(bin)
            .args(["--port", &format!("{LOOPBACK}:{port}"), "posix"])
            .arg(dir.path().join("data"))
            .env("ROOT_ACCESS_KEY", ACCESS_KEY)
            .env("ROOT_SECRET_KEY", SECRET_KEY)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("start versitygw");
        let start = Instant::now();
        while tokio::net::TcpStream::connect((LOOPBACK, port))
            .await
            .is_err()
        {
            assert!(
                start.elapsed() < DEADLINE,
                "versitygw did not listen on {port}"
            );
            tokio::time::sleep(POLL).await;
        }
        ObjectStore {
            _child: child,
            port,
            dir,
        }
    }

    fn location(&self, secret: &str) -> Location {
        Location {
            endpoint: format!("http://{LOOPBACK}:{}", self.port),
            bucket: BUCKET.into(),
            region: "us-east-1".into(),
            access_key_id: ACCESS_KEY.into(),
            secret_access_key: secret.into(),
        }
    }

    /// The objects in the bucket (files, not the store's own `.sgwtmp`).
    fn objects(&self) -> Vec<PathBuf> {
        fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let p = e.path();
                if p.file_name().is_some_and(|n| n == ".sgwtmp") {
                    continue;
                }
                if p.is_dir() {
                    walk(&p, out);
                } else {
                    out.push(p);
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.dir.path().join("data").join(BUCKET), &mut out);
        out
    }

    /// Whether a multipart upload has a part on disk.
    fn uploading(&self) -> bool {
        ObjectStore::any_file(&self.dir.path().join("data").join(BUCKET).join(".sgwtmp"))
    }

    fn any_file(dir: &Path) -> bool {
        std::fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                let p = e.path();
                if p.is_dir() {
                    ObjectStore::any_file(&p)
                } else {
                    true
                }
            })
    }
}

/// A primary with `keys` keys of 1 KiB and a replica caught up with it.
async fn pair(keys: u64) -> (Server, Server) {
    let primary = Server::start_anywhere("p", Some(PASSWORD)).await;
    let replica = Server::start_anywhere("r", Some(PASSWORD)).await;
    let p = primary.node().await.unwrap();
    p.promote().await.unwrap();
    let r = replica.node().await.unwrap();
    r.replicate_from(LOOPBACK, primary.port).await.unwrap();
    let start = Instant::now();
    loop {
        let info = r.replication_info().await.unwrap();
        if info.link_up && !info.sync_in_progress {
            break;
        }
        assert!(start.elapsed() < DEADLINE, "the replica did not link");
        tokio::time::sleep(POLL).await;
    }
    // In scripts of 200 keys (5,200 SHA-1s): each far inside the client's
    // 500 ms deadline, on a loaded machine too.
    for from in (1..=keys).step_by(200) {
        let to = (from + 199).min(keys);
        let _: i64 = p
            .command(redis::cmd("EVAL").arg(LOAD).arg(0).arg(from).arg(to))
            .await
            .unwrap();
    }
    let target = p.replication_info().await.unwrap().master_repl_offset;
    let start = Instant::now();
    while r.replication_info().await.unwrap().slave_repl_offset < Some(target) {
        assert!(start.elapsed() < DEADLINE, "the replica did not catch up");
        tokio::time::sleep(POLL).await;
    }
    (primary, replica)
}

fn source(server: &Server) -> Source {
    Source {
        addr: format!("{LOOPBACK}:{}", server.port),
        auth: Some((None, PASSWORD.into())),
        idle: Duration::from_secs(30),
        tls: None,
    }
}

/// A new redis-server on `rdb` as its dump file: its key count.
async fn keys_when_loaded(rdb: &Path) -> i64 {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(rdb, dir.path().join("dump.rdb")).unwrap();
    keys_in(dir.path(), false).await
}

#[tokio::test]
async fn a_snapshot_from_a_replica_is_uploaded_whole_and_restores_every_key() {
    let (primary, replica) = pair(20_000).await;
    let store = ObjectStore::start().await;
    let key = "shop/cache/nightly.rdb";
    let snap = backup::copy(
        &source(&replica),
        &store.location(SECRET_KEY),
        key,
        ready(true),
    )
    .await
    .expect("a backup");
    let p = primary
        .node()
        .await
        .unwrap()
        .replication_info()
        .await
        .unwrap();
    assert_eq!(snap.repl_id.as_deref(), Some(p.master_replid.as_str()));
    let offset = snap.repl_offset.expect("a replication offset");
    assert!(
        offset > 0 && offset <= p.master_repl_offset,
        "{offset} of {}",
        p.master_repl_offset
    );
    assert_eq!(
        store.objects(),
        [store.dir.path().join("data").join(BUCKET).join(key)]
    );
    let object = std::fs::read(&store.objects()[0]).unwrap();
    assert_eq!(object.len() as u64, snap.size);
    let sha: String = Sha256::digest(&object)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(sha, snap.sha256, "the object is the snapshot checked");
    assert_eq!(keys_when_loaded(&store.objects()[0]).await, 20_000);
    assert!(!store.uploading(), "no upload left behind");
}

#[tokio::test]
async fn a_backup_that_cannot_complete_leaves_no_object() {
    let (_primary, replica) = pair(30_000).await;
    let store = ObjectStore::start().await;

    // Credentials the store refuses.
    let e = backup::copy(
        &source(&replica),
        &store.location("wrong"),
        "a.rdb",
        ready(true),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("uploading a.rdb: SignatureDoesNotMatch: "),
        "{e}"
    );

    // A bucket that does not exist, and an endpoint nothing listens on.
    let missing = Location {
        bucket: "no-such-bucket".into(),
        ..store.location(SECRET_KEY)
    };
    let e = backup::copy(&source(&replica), &missing, "m.rdb", ready(true))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.starts_with("uploading m.rdb: NoSuchBucket: "), "{e}");
    let nowhere = Location {
        endpoint: format!("http://{LOOPBACK}:{}", free_port()),
        ..store.location(SECRET_KEY)
    };
    let e = backup::copy(&source(&replica), &nowhere, "n.rdb", ready(true))
        .await
        .unwrap_err()
        .to_string();
    assert!(e.contains("uploading n.rdb"), "{e}");
    assert!(e.contains("error sending request"), "{e}");

    // A snapshot taken whole whose backup is no longer wanted (its
    // RedisBackup deleted during the try): the upload is aborted.
    let e = backup::copy(
        &source(&replica),
        &store.location(SECRET_KEY),
        "gone.rdb",
        ready(false),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("deleted during its try"), "{e}");

    // A replica not linked to a primary refuses to serve a snapshot.
    let unlinked = Server::start_anywhere("u", Some(PASSWORD)).await;
    let e = backup::copy(
        &source(&unlinked),
        &store.location(SECRET_KEY),
        "b.rdb",
        ready(true),
    )
    .await
    .unwrap_err()
    .to_string();
    assert!(e.contains("NOMASTERLINK"), "{e}");

    // A member whose connection ends in the middle of its snapshot, after
    // a part of it reached the store: the member here serves the first
    // 20 MB of a real snapshot and closes once the store holds a part.
    let whole = backup::copy(
        &source(&replica),
        &store.location(SECRET_KEY),
        "whole.rdb",
        ready(true),
    )
    .await
    .expect("a backup");
    assert!(whole.size > 25_000_000, "{} bytes", whole.size);
    let whole_file = store.dir.path().join("data").join(BUCKET).join("whole.rdb");
    let rdb = std::fs::read(&whole_file).unwrap();
    let listener = tokio::net::TcpListener::bind((LOOPBACK, 0)).await.unwrap();
    let addr = listener.local_addr().unwrap();
    let store_dir = store.dir.path().join("data").join(BUCKET).join(".sgwtmp");
    let member = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut conn, _) = listener.accept().await.unwrap();
        let mut seen = Vec::new();
        let mut buf = [0u8; 4096];
        while !seen.windows(6).any(|w| w == b"SYNC\r\n") {
            let n = conn.read(&mut buf).await.unwrap();
            assert!(n > 0, "the taker left before SYNC");
            seen.extend_from_slice(&buf[..n]);
            if seen.ends_with(b"eof\r\n") {
                conn.write_all(b"+OK\r\n+OK\r\n+OK\r\n").await.unwrap();
            }
        }
        conn.write_all(b"$EOF:0123456789012345678901234567890123456789\r\n")
            .await
            .unwrap();
        conn.write_all(&rdb[..20_000_000]).await.unwrap();
        let start = Instant::now();
        while !ObjectStore::any_file(&store_dir) {
            assert!(start.elapsed() < DEADLINE, "no part reached the store");
            tokio::time::sleep(POLL).await;
        }
        // Dropped: the connection ends.
    });
    let cut = Source {
        addr: addr.to_string(),
        ..source(&replica)
    };
    let e = backup::copy(&cut, &store.location(SECRET_KEY), "cut.rdb", ready(true))
        .await
        .unwrap_err()
        .to_string();
    member.await.unwrap();
    assert!(
        e.contains("closed the connection before the snapshot's end"),
        "{e}"
    );

    assert_eq!(
        store.objects(),
        [whole_file],
        "no object from a try that failed"
    );
    assert!(!store.uploading(), "every upload aborted");
}

/// A new redis-server on the data directory `dir` (with `appendonly`):
/// its key count once it answers.
async fn keys_in(dir: &Path, appendonly: bool) -> i64 {
    let port = free_port();
    let _server = Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            LOOPBACK,
            "--save",
            "",
        ])
        .args(["--appendonly", if appendonly { "yes" } else { "no" }])
        .arg("--dir")
        .arg(dir)
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("redis-server");
    let client = redis::Client::open(format!("redis://{LOOPBACK}:{port}")).unwrap();
    let start = Instant::now();
    loop {
        if let Ok(mut c) = client.get_multiplexed_async_connection().await
            && let Ok(n) = redis::cmd("DBSIZE").query_async::<i64>(&mut c).await
        {
            return n;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "the restored server did not answer"
        );
        tokio::time::sleep(POLL).await;
    }
}

#[tokio::test]
async fn a_backup_restores_every_key_with_and_without_aof_and_only_when_it_checks_out() {
    use podkeeper::backup::restore::{Layout, MARKER, Restored, restore};
    let (_primary, replica) = pair(5_000).await;
    let store = ObjectStore::start().await;
    let at = store.location(SECRET_KEY);
    let key = "shop/cache/restore-me.rdb";
    let snap = backup::copy(&source(&replica), &at, key, ready(true))
        .await
        .expect("a backup");
    let layout = |dir: &Path, aof: bool| Layout {
        dir: dir.to_path_buf(),
        dbfilename: "dump.rdb".into(),
        aof: aof.then(|| ("appendonlydir".into(), "appendonly.aof".into())),
    };

    for aof in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        let l = layout(dir.path(), aof);
        match restore(&at, key, &snap.sha256, &l).await {
            Ok(Restored::Done(s)) => assert_eq!(s.sha256, snap.sha256),
            other => panic!("{other:?}"),
        }
        // A container started again (a node's restart) does not put the
        // backup over what the member has since.
        assert_eq!(
            restore(&at, key, &snap.sha256, &l).await,
            Ok(Restored::Already)
        );
        assert_eq!(keys_in(dir.path(), aof).await, 5_000, "appendonly {aof}");
    }

    // The wrong checksum, a missing object, wrong credentials: an error
    // that says so, and nothing where redis-server would load it.
    let dir = tempfile::tempdir().unwrap();
    let l = layout(dir.path(), true);
    let wrong = "0".repeat(64);
    let e = restore(&at, key, &wrong, &l).await.unwrap_err();
    assert!(e.contains(&snap.sha256) && e.contains(&wrong), "{e}");
    let e = restore(&at, "shop/cache/none.rdb", &snap.sha256, &l)
        .await
        .unwrap_err();
    assert!(e.contains("not found"), "{e}");
    let e = restore(&store.location("wrong-secret"), key, &snap.sha256, &l)
        .await
        .unwrap_err();
    assert!(e.contains(key), "{e}");
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    assert!(
        left.is_empty(),
        "nothing left after failed restores: {left:?}"
    );
    assert!(!dir.path().join(MARKER).exists());
    assert_eq!(keys_in(dir.path(), true).await, 0);
}

#[tokio::test]
async fn an_rdb_file_uploaded_by_hand_goes_in_only_whole_and_restores() {
    use podkeeper::backup::restore::{Layout, Restored, restore};
    use podkeeper::backup::upload::upload_file;
    let (_primary, replica) = pair(2_000).await;
    let store = ObjectStore::start().await;
    let at = store.location(SECRET_KEY);
    let snap = backup::copy(&source(&replica), &at, "taken.rdb", ready(true))
        .await
        .expect("a backup");
    // An RDB file made elsewhere: the object just taken, as a file.
    let made = tempfile::tempdir().unwrap();
    let file = made.path().join("dump.rdb");
    std::fs::copy(&store.objects()[0], &file).unwrap();
    let up = upload_file(&at, "imported/dump.rdb", &file)
        .await
        .expect("uploaded");
    assert_eq!(
        (up.sha256.as_str(), up.size),
        (snap.sha256.as_str(), snap.size)
    );

    // Half a file is refused, and nothing is left in the bucket for it.
    let bytes = std::fs::read(&file).unwrap();
    let half = made.path().join("half.rdb");
    std::fs::write(&half, &bytes[..bytes.len() / 2]).unwrap();
    let e = upload_file(&at, "imported/half.rdb", &half)
        .await
        .unwrap_err();
    assert!(e.contains("not a whole RDB file"), "{e}");
    assert_eq!(store.objects().len(), 2, "{:?}", store.objects());
    assert!(!store.uploading(), "no upload left behind");

    let dir = tempfile::tempdir().unwrap();
    let layout = Layout {
        dir: dir.path().to_path_buf(),
        dbfilename: "dump.rdb".into(),
        aof: None,
    };
    assert!(matches!(
        restore(&at, "imported/dump.rdb", &up.sha256, &layout).await,
        Ok(Restored::Done(_))
    ));
    assert_eq!(keys_in(dir.path(), false).await, 2_000);
}
