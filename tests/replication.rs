//! The replication module against real redis-server processes on loopback:
//! each test starts its own servers on free ports, with the command line a
//! Pod gets (`config::server_command`), and drives them with the operator's
//! observe-plan-execute round (`act::reconcile`). No Kubernetes here: the
//! "Pods" are processes, all at 127.0.0.1 on different ports.
//!
//! redis-server must be installed (`apt-get install -y redis-server`; .ci/run
//! does it); the tests fail, never skip, without it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::jiff::Timestamp;
use podkeeper::replication::act::{self, Memory, PodRef, Round};
use podkeeper::replication::client::{Endpoint, Node, Timeouts};
use podkeeper::replication::config;
use podkeeper::replication::info::Role;
use podkeeper::replication::topology::{RecordedPrimary, Settings};
use podkeeper::replication::{ClientError, api::PrimaryStatus};
use tokio::process::{Child, Command};

const LOOPBACK: &str = "127.0.0.1";
const DEADLINE: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(100);

fn timeouts() -> Timeouts {
    Timeouts {
        connect: Duration::from_millis(500),
        command: Duration::from_millis(500),
    }
}

fn settings() -> Settings {
    Settings {
        failover_after: Duration::from_secs(1),
        switchover_timeout: Duration::from_secs(5),
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind((LOOPBACK, 0))
        .expect("bind a free port")
        .local_addr()
        .unwrap()
        .port()
}

fn redis_server_installed() {
    let found = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).any(|d| d.join("redis-server").is_file()))
        .unwrap_or(false);
    assert!(
        found,
        "redis-server is not on PATH: install it (apt-get install -y redis-server) to run these tests"
    );
}

/// One redis-server process, started as a member Pod would be.
struct Server {
    name: String,
    port: u16,
    password: Option<String>,
    child: Child,
    log: PathBuf,
    _dir: tempfile::TempDir,
}

impl Server {
    async fn start(name: &str, port: u16, password: Option<&str>) -> Server {
        redis_server_installed();
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("redis.log");
        let directives: BTreeMap<String, String> =
            [("repl-diskless-sync-delay".to_string(), "0".to_string())].into();
        let args = config::config_args(&directives, None).unwrap();
        let (cmd, args) = config::server_command(port, &args, password.is_some());
        let mut command = Command::new(&cmd[0]);
        command
            .args(&args)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::null())
            .kill_on_drop(true);
        if let Some(p) = password {
            command.env(config::PASSWORD_ENV, p);
        }
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("start {}: {e}", cmd[0]));
        let server = Server {
            name: name.into(),
            port,
            password: password.map(str::to_string),
            child,
            log,
            _dir: dir,
        };
        let start = Instant::now();
        loop {
            if let Ok(node) = server.node().await
                && node.command::<String>(&redis::cmd("PING")).await.is_ok()
            {
                return server;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "{name} on port {port} did not answer PING; log: {}",
                std::fs::read_to_string(&server.log).unwrap_or_default()
            );
            tokio::time::sleep(POLL).await;
        }
    }

    fn endpoint(&self) -> Endpoint {
        Endpoint::new(LOOPBACK, self.port, self.password.clone())
    }

    async fn node(&self) -> Result<Node, ClientError> {
        Node::connect(&self.endpoint(), timeouts()).await
    }

    fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }

    fn signal(&self, sig: &str) {
        let ok = std::process::Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.pid().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{sig} {}", self.pid());
    }

    async fn kill9(&mut self) {
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
    }

    async fn role(&self) -> Option<Role> {
        let node = self.node().await.ok()?;
        node.role().await.ok()
    }

    async fn get(&self, key: &str) -> Option<String> {
        let node = self.node().await.ok()?;
        node.command(redis::cmd("GET").arg(key)).await.ok()?
    }
}

/// The servers of one "Redis" and the operator state kept between rounds.
struct Set {
    servers: Vec<Server>,
    recorded: Option<RecordedPrimary>,
    memory: Memory,
    retiring: BTreeSet<String>,
    password: Option<String>,
}

impl Set {
    async fn start(n: usize, password: Option<&str>) -> Set {
        let mut servers = Vec::new();
        for i in 0..n {
            let name = format!("m{i}");
            servers.push(Server::start(&name, free_port(), password).await);
        }
        Set {
            servers,
            recorded: None,
            memory: Memory::default(),
            retiring: BTreeSet::new(),
            password: password.map(str::to_string),
        }
    }

    fn pods(&self) -> Vec<PodRef> {
        self.servers
            .iter()
            .map(|s| PodRef {
                pod: s.name.clone(),
                ip: Some(LOOPBACK.into()),
                port: s.port,
                ready: true,
                deleting: false,
                retiring: self.retiring.contains(&s.name),
            })
            .collect()
    }

    fn server(&self, name: &str) -> &Server {
        self.servers.iter().find(|s| s.name == name).unwrap()
    }

    fn server_mut(&mut self, name: &str) -> &mut Server {
        self.servers.iter_mut().find(|s| s.name == name).unwrap()
    }

    /// One reconcile: observe, plan, execute, record.
    async fn round(&mut self) -> Round {
        let round = act::reconcile(
            &self.pods(),
            self.recorded.as_ref(),
            &settings(),
            self.password.as_deref(),
            timeouts(),
            &self.memory,
            Timestamp::now(),
        )
        .await;
        if let Some(e) = &round.outcome.error {
            eprintln!("round: {e}");
        }
        self.recorded = round
            .primary
            .as_ref()
            .map(|p: &PrimaryStatus| RecordedPrimary {
                pod: p.pod.clone(),
                run_id: p.run_id.clone(),
            });
        round
    }

    /// Rounds until `done` holds for a round, or fail after the deadline.
    async fn until(&mut self, what: &str, done: impl Fn(&Round) -> bool) -> Round {
        let start = Instant::now();
        loop {
            let round = self.round().await;
            if done(&round) {
                return round;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "{what}: not reached in {DEADLINE:?}; last plan: {:#?}",
                round.plan
            );
            tokio::time::sleep(POLL).await;
        }
    }

    async fn converge(&mut self) -> String {
        let round = self.until("replicated", |r| r.plan.replicated).await;
        round.plan.primary.unwrap()
    }

    /// The roles the servers that answer report (ROLE).
    async fn primaries(&self) -> Vec<String> {
        let mut out = Vec::new();
        for s in &self.servers {
            if s.role().await == Some(Role::Primary) {
                out.push(s.name.clone());
            }
        }
        out
    }
}

/// Writes `key` and waits for `replicas` acknowledgements; true when
/// acknowledged.
async fn write_acked(node: &Node, key: &str, replicas: u32) -> Result<bool, ClientError> {
    node.command::<()>(redis::cmd("SET").arg(key).arg(key))
        .await?;
    Ok(node.wait(replicas, Duration::from_millis(1000)).await? >= replicas)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_servers_become_one_primary_and_two_linked_replicas() {
    let mut set = Set::start(3, None).await;
    let primary = set.converge().await;
    assert_eq!(set.primaries().await, vec![primary.clone()]);
    assert_eq!(set.recorded.as_ref().unwrap().pod, primary);

    let node = set.server(&primary).node().await.unwrap();
    for i in 0..50 {
        assert!(write_acked(&node, &format!("k{i}"), 2).await.unwrap());
    }
    for s in &set.servers {
        assert_eq!(s.get("k49").await.as_deref(), Some("k49"), "{}", s.name);
    }
    let round = set.round().await;
    assert!(round.plan.replicated && round.plan.actions.is_empty());
    let statuses = act::member_statuses(&round.members, Some(&primary));
    assert_eq!(statuses.len(), 3);
    for m in &statuses {
        if m.pod == primary {
            assert_eq!(
                (m.role.as_str(), m.link_status.as_str()),
                ("primary", "primary")
            );
        } else {
            assert_eq!((m.role.as_str(), m.link_status.as_str()), ("replica", "up"));
            assert!(m.lag.is_some());
        }
    }
    let (ok, reason, _) = act::replicated_condition(&round.plan, &round.outcome);
    assert!(ok, "{reason}");
}

/// A writer that records which keys `WAIT 1` acknowledged, and the longest
/// gap between two acknowledged writes. It writes to the first endpoint
/// until a write fails; then, with `follow`, it looks for the server that
/// says it is primary (ROLE) and goes on there, retrying the same key, as a
/// client behind the primary Service would; without `follow` it stops.
fn spawn_writer(
    endpoints: Vec<Endpoint>,
    stop: Arc<AtomicBool>,
    progress: Arc<AtomicUsize>,
    follow: bool,
) -> tokio::task::JoinHandle<(Vec<String>, Duration)> {
    tokio::spawn(async move {
        let mut acked = Vec::new();
        let mut longest_pause = Duration::ZERO;
        let mut last_ok = Instant::now();
        let mut node = Node::connect(&endpoints[0], timeouts()).await.ok();
        let mut n = 0u64;
        while !stop.load(Ordering::SeqCst) {
            if node.is_none() {
                for ep in &endpoints {
                    if let Ok(c) = Node::connect(ep, timeouts()).await
                        && c.role().await.ok() == Some(Role::Primary)
                    {
                        node = Some(c);
                        break;
                    }
                }
                if node.is_none() {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            }
            let key = format!("w{n}");
            match write_acked(node.as_ref().unwrap(), &key, 1).await {
                Ok(true) => {
                    acked.push(key);
                    progress.store(acked.len(), Ordering::SeqCst);
                    n += 1;
                    longest_pause = longest_pause.max(last_ok.elapsed());
                    last_ok = Instant::now();
                }
                Ok(false) => n += 1,
                Err(_) if follow => node = None,
                Err(_) => break,
            }
        }
        (acked, longest_pause)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill_9_of_the_primary_fails_over_without_losing_an_acknowledged_write() {
    let mut set = Set::start(3, None).await;
    let old = set.converge().await;
    let stop = Arc::new(AtomicBool::new(false));
    let progress = Arc::new(AtomicUsize::new(0));
    let writer = spawn_writer(
        vec![set.server(&old).endpoint()],
        stop.clone(),
        progress.clone(),
        false,
    );
    // Let acknowledged writes accumulate, then kill the primary mid-stream.
    let start = Instant::now();
    while progress.load(Ordering::SeqCst) < 300 {
        assert!(start.elapsed() < DEADLINE, "the writer made no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    set.server_mut(&old).kill9().await;
    let killed = Instant::now();
    let (acked, _) = writer.await.unwrap();
    assert!(acked.len() >= 300, "{} acknowledged", acked.len());

    let round = set
        .until("a new primary", |r| {
            r.plan.primary.as_deref().is_some_and(|p| p != old)
                && r.outcome.ok()
                && r.primary.as_ref().is_some_and(|p| p.pod != old)
        })
        .await;
    let new = round.plan.primary.unwrap();
    let node = set.server(&new).node().await.unwrap();
    node.command::<()>(redis::cmd("SET").arg("after").arg("1"))
        .await
        .expect("the new primary accepts writes");
    eprintln!(
        "failover: writes accepted on {new} {:?} after kill -9 (failover_after {:?})",
        killed.elapsed(),
        settings().failover_after
    );
    let mut missing = Vec::new();
    for k in &acked {
        if set.server(&new).get(k).await.is_none() {
            missing.push(k.clone());
        }
    }
    assert!(missing.is_empty(), "acknowledged writes lost: {missing:?}");

    // The other replica follows the new primary and gets the data.
    set.servers.retain(|s| s.name != old);
    let primary = set.converge().await;
    assert_eq!(primary, new);
    assert_eq!(set.primaries().await, vec![new.clone()]);
    let other = set.servers.iter().find(|s| s.name != new).unwrap();
    let last = acked.last().unwrap();
    assert_eq!(other.get(last).await.as_deref(), Some(last.as_str()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switchover_loses_no_acknowledged_write() {
    let mut set = Set::start(3, None).await;
    let old = set.converge().await;
    let stop = Arc::new(AtomicBool::new(false));
    let mut endpoints = vec![set.server(&old).endpoint()];
    endpoints.extend(set.servers.iter().map(Server::endpoint));
    let progress = Arc::new(AtomicUsize::new(0));
    let writer = spawn_writer(endpoints, stop.clone(), progress.clone(), true);
    let start = Instant::now();
    while progress.load(Ordering::SeqCst) < 200 {
        assert!(start.elapsed() < DEADLINE, "the writer made no progress");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // The engine wants to replace the primary's Pod: hand it over first.
    set.retiring.insert(old.clone());
    let round = set.round().await;
    assert!(
        round.outcome.done.iter().any(|a| matches!(
            a,
            podkeeper::replication::topology::Action::Switchover { .. }
        )),
        "{:?}",
        round.plan
    );
    let round = set
        .until("the handover", |r| {
            r.plan.primary.as_deref().is_some_and(|p| p != old) && r.plan.replicated
        })
        .await;
    assert!(round.plan.may_touch(&old));
    let new = round.plan.primary.unwrap();
    // Once the writer has gone on through the new primary, stop it.
    let at_handover = progress.load(Ordering::SeqCst);
    let start = Instant::now();
    while progress.load(Ordering::SeqCst) < at_handover + 100 {
        assert!(
            start.elapsed() < DEADLINE,
            "the writer did not follow the new primary"
        );
        tokio::time::sleep(POLL).await;
    }
    stop.store(true, Ordering::SeqCst);
    let (acked, longest_pause) = writer.await.unwrap();
    eprintln!(
        "switchover {old} -> {new}: {} acknowledged writes, longest pause {longest_pause:?}",
        acked.len()
    );
    assert_eq!(set.primaries().await, vec![new.clone()]);
    let mut missing = Vec::new();
    for k in &acked {
        if set.server(&new).get(k).await.is_none() {
            missing.push(k.clone());
        }
    }
    assert!(missing.is_empty(), "acknowledged writes lost: {missing:?}");
    // The old primary is a replica of the new one, with the data.
    assert_eq!(set.server(&old).role().await, Some(Role::Replica));
    let last = acked.last().unwrap();
    let start = Instant::now();
    while set.server(&old).get(last).await.is_none() {
        assert!(
            start.elapsed() < DEADLINE,
            "the old primary does not follow"
        );
        tokio::time::sleep(POLL).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_old_primary_that_returns_is_fenced() {
    let mut set = Set::start(3, None).await;
    let old = set.converge().await;
    let node = set.server(&old).node().await.unwrap();
    assert!(write_acked(&node, "before", 2).await.unwrap());
    drop(node);

    // The old primary freezes (as behind a partition): it stays a primary
    // with the same run_id.
    set.server(&old).signal("STOP");
    let round = set
        .until("failover away from the frozen primary", |r| {
            r.primary.as_ref().is_some_and(|p| p.pod != old) && r.outcome.ok()
        })
        .await;
    let new = round.plan.primary.unwrap();
    assert_eq!(
        set.server(&new).role().await,
        Some(Role::Primary),
        "promoted"
    );

    set.server(&old).signal("CONT");
    // It answers again, as a primary: two primaries for the moment...
    let start = Instant::now();
    while set.server(&old).role().await != Some(Role::Primary) {
        assert!(
            start.elapsed() < DEADLINE,
            "the old primary does not answer"
        );
        tokio::time::sleep(POLL).await;
    }
    // ...until the next round, which fences it.
    let round = set.round().await;
    assert!(
        round.outcome.done.iter().any(|a| matches!(
            a,
            podkeeper::replication::topology::Action::Replicate {
                pod,
                why: podkeeper::replication::topology::Why::Fence,
                ..
            } if *pod == old
        )),
        "{:?}",
        round.plan.actions
    );
    assert_eq!(set.primaries().await, vec![new.clone()]);
    let primary = set.converge().await;
    assert_eq!(primary, new);
    let node = set.server(&new).node().await.unwrap();
    assert!(write_acked(&node, "after", 2).await.unwrap());
    assert_eq!(
        set.server(&old).get("after").await.as_deref(),
        Some("after")
    );
    assert_eq!(
        set.server(&old).get("before").await.as_deref(),
        Some("before")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_restarted_empty_never_wipes_its_replicas() {
    let mut set = Set::start(3, None).await;
    let old = set.converge().await;
    let node = set.server(&old).node().await.unwrap();
    for i in 0..100 {
        assert!(write_acked(&node, &format!("k{i}"), 2).await.unwrap());
    }
    drop(node);
    let replicas: Vec<String> = set
        .servers
        .iter()
        .filter(|s| s.name != old)
        .map(|s| s.name.clone())
        .collect();

    // The container restarts: same address, new process, empty memory.
    let port = set.server(&old).port;
    set.server_mut(&old).kill9().await;
    let restarted = Server::start(&old, port, None).await;
    *set.server_mut(&old) = restarted;

    // The replicas reconnect to it and are refused (it is a replica of the
    // placeholder with no link), so they keep their data.
    for r in &replicas {
        let start = Instant::now();
        loop {
            let log = std::fs::read_to_string(&set.server(r).log).unwrap_or_default();
            if log.contains("NOMASTERLINK") {
                break;
            }
            assert!(
                start.elapsed() < DEADLINE,
                "{r} did not try to resync from the restarted primary; log:\n{log}"
            );
            tokio::time::sleep(POLL).await;
        }
        assert_eq!(
            set.server(r).get("k99").await.as_deref(),
            Some("k99"),
            "{r}"
        );
    }

    let round = set
        .until(
            "a replica promoted in place of the restarted primary",
            |r| r.primary.as_ref().is_some_and(|p| p.pod != old) && r.outcome.ok(),
        )
        .await;
    assert_eq!(
        round.plan.cause,
        Some(podkeeper::replication::topology::Cause::PrimaryRestarted)
    );
    let new = round.plan.primary.unwrap();
    assert!(replicas.contains(&new));
    set.converge().await;
    assert_eq!(set.primaries().await, vec![new.clone()]);
    for s in &set.servers {
        for i in [0, 50, 99] {
            let k = format!("k{i}");
            let start = Instant::now();
            while s.get(&k).await.as_deref() != Some(k.as_str()) {
                assert!(start.elapsed() < DEADLINE, "{}: {k} lost", s.name);
                tokio::time::sleep(POLL).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_password_replication_works_and_strangers_are_refused() {
    let password = "s3cret with spaces";
    let mut set = Set::start(2, Some(password)).await;
    let primary = set.converge().await;
    let node = set.server(&primary).node().await.unwrap();
    assert!(
        write_acked(&node, "k", 1).await.unwrap(),
        "replica authenticated with masterauth"
    );

    let port = set.server(&primary).port;
    let anonymous = Node::connect(&Endpoint::new(LOOPBACK, port, None), timeouts())
        .await
        .unwrap();
    let err = anonymous
        .command::<String>(redis::cmd("GET").arg("k"))
        .await
        .unwrap_err();
    assert!(matches!(err, ClientError::Auth { .. }), "{err}");
    let err = Node::connect(
        &Endpoint::new(LOOPBACK, port, Some("wrong".into())),
        timeouts(),
    )
    .await
    .err()
    .expect("a wrong password is refused");
    assert!(matches!(err, ClientError::Auth { .. }), "{err}");
    assert!(!format!("{:?}", set.server(&primary).endpoint()).contains("s3cret"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rendered_config_is_what_redis_server_runs_with() {
    redis_server_installed();
    let port = free_port();
    let directives: BTreeMap<String, String> = [
        ("maxmemory-policy", "allkeys-lru"),
        ("save", "3600 1 300 100"),
        ("hz", "20"),
    ]
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .into();
    let args = config::config_args(&directives, Some(&Quantity("64Mi".into()))).unwrap();
    let (cmd, args) = config::server_command(port, &args, false);
    let dir = tempfile::tempdir().unwrap();
    let _child = Command::new(&cmd[0])
        .args(&args)
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let start = Instant::now();
    let node = loop {
        if let Ok(n) = Node::connect(&Endpoint::new(LOOPBACK, port, None), timeouts()).await
            && n.command::<String>(&redis::cmd("PING")).await.is_ok()
        {
            break n;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "redis-server did not start with {args:?}"
        );
        tokio::time::sleep(POLL).await;
    };
    let get = |k: &'static str| {
        let node = &node;
        async move { node.config_get(k).await.unwrap().unwrap() }
    };
    assert_eq!(get("maxmemory").await, (48u64 << 20).to_string());
    assert_eq!(get("maxmemory-policy").await, "allkeys-lru");
    assert_eq!(get("save").await, "3600 1 300 100");
    assert_eq!(get("appendonly").await, "no");
    assert_eq!(get("hz").await, "20");
    assert_eq!(get("protected-mode").await, "no");
    assert_eq!(
        node.role().await.unwrap(),
        Role::Replica,
        "starts as a replica of the placeholder"
    );
    node.config_set("hz", "30").await.unwrap();
    assert_eq!(get("hz").await, "30");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_primary_pod_is_replaced_at_once_and_its_successor_joins_as_a_replica() {
    let mut set = Set::start(3, None).await;
    let old = set.converge().await;
    let node = set.server(&old).node().await.unwrap();
    for i in 0..50 {
        assert!(write_acked(&node, &format!("k{i}"), 2).await.unwrap());
    }
    drop(node);
    // The Pod is deleted (gone from the cache) and a new one, with a new
    // name and address, is created in its place.
    set.server_mut(&old).kill9().await;
    set.servers.retain(|s| s.name != old);
    set.servers
        .push(Server::start("m3", free_port(), None).await);
    let round = set.round().await;
    assert_eq!(
        round.plan.cause,
        Some(podkeeper::replication::topology::Cause::PrimaryGone),
        "no waiting for failover_after: the Pod is gone"
    );
    let new = round.plan.primary.clone().unwrap();
    assert_ne!(new, "m3", "the new, empty Pod is never the primary");
    assert_eq!(set.converge().await, new);
    assert_eq!(set.primaries().await, vec![new.clone()]);
    let start = Instant::now();
    while set.server("m3").get("k49").await.as_deref() != Some("k49") {
        assert!(start.elapsed() < DEADLINE, "m3 did not get the data");
        tokio::time::sleep(POLL).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scaling_down_to_one_keeps_the_primary_and_every_key() {
    let mut set = Set::start(3, None).await;
    let primary = set.converge().await;
    let node = set.server(&primary).node().await.unwrap();
    for i in 0..50 {
        assert!(write_acked(&node, &format!("k{i}"), 2).await.unwrap());
    }
    // The engine's ranking put the primary first; it is still kept.
    let mut ranked = vec![primary.clone()];
    ranked.extend(
        set.servers
            .iter()
            .filter(|s| s.name != primary)
            .map(|s| s.name.clone()),
    );
    let victims = podkeeper::replication::topology::scale_down_victims(&ranked, 2, Some(&primary));
    assert!(!victims.contains(&primary));
    for v in &victims {
        set.server_mut(v).kill9().await;
    }
    set.servers.retain(|s| !victims.contains(&s.name));
    assert_eq!(set.converge().await, primary);
    for i in 0..50 {
        let k = format!("k{i}");
        assert_eq!(
            set.server(&primary).get(&k).await.as_deref(),
            Some(k.as_str())
        );
    }
}
