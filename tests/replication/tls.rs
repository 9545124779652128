//! TLS (`spec.tls`) against real redis-server processes on loopback: the
//! operator's round over TLS only (plaintext off, replication over TLS),
//! verifying the members against the Secret's CA and name; a renewed
//! certificate taken up by every member without a restart, and one whose
//! key does not match left out while the member keeps serving what it
//! had; and a set moved from plaintext replication onto TLS without a
//! full sync.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;
use std::process::Stdio;
use std::time::Instant;

use k8s_openapi::jiff::Timestamp;
use podkeeper::redis::certs::{self, Material};
use podkeeper::redis::replication::act::{self, Memory, PodRef, Round};
use podkeeper::redis::replication::client::{Access, Endpoint, Node, Route};
use podkeeper::redis::replication::config;
use podkeeper::redis::replication::dial::{Dial, TlsAccess};
use podkeeper::redis::replication::info::Role;
use podkeeper::redis::replication::topology::RecordedPrimary;
use tokio::process::{Child, Command};

use super::{
    DEADLINE, LOOPBACK, OPERATOR_PASSWORD, POLL, REPLICATION_PASSWORD, free_port,
    redis_server_installed, settings, timeouts, write_acked,
};

const NAME: &str = "cache";
const NAMESPACE: &str = "prod";

fn now() -> i64 {
    Timestamp::now().as_second()
}

/// A CA and certificates it issues for the `cache` Redis's names.
struct Pki {
    ca: String,
    ca_key: String,
}

impl Pki {
    fn new() -> Pki {
        let (ca, ca_key) = certs::issue_ca(NAME, NAMESPACE, now()).unwrap();
        Pki { ca, ca_key }
    }

    fn issue(&self) -> Material {
        let names = certs::member_names(NAME, "cache-replicas", NAMESPACE);
        let (cert, key) = certs::issue_member(&self.ca, &self.ca_key, &names, now()).unwrap();
        Material {
            cert: cert.into_bytes(),
            key: key.into_bytes(),
            ca: self.ca.clone().into_bytes(),
        }
    }
}

fn fingerprint(m: &Material) -> String {
    certs::check(m, &certs::server_name(NAME, NAMESPACE), rustls_now())
        .unwrap()
        .fingerprint
}

fn rustls_now() -> rustls_pki_types::UnixTime {
    rustls_pki_types::UnixTime::now()
}

/// Writes `m` into `dir` as the kubelet writes a Secret volume: each file
/// whole, put in place by a rename.
fn write_files(dir: &Path, m: &Material) {
    for (name, bytes) in [("tls.crt", &m.cert), ("tls.key", &m.key), ("ca.crt", &m.ca)] {
        let tmp = dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, bytes).unwrap();
        std::fs::rename(&tmp, dir.join(name)).unwrap();
    }
}

/// One member: redis-server with the command line a Pod of a Redis with
/// `spec.tls` gets, its Secret's files in a directory of its own.
struct Member {
    name: String,
    plain: Option<u16>,
    tls: u16,
    child: Child,
    dir: tempfile::TempDir,
}

impl Member {
    /// `plaintext`: also on a plaintext port, replicating over it.
    async fn start(name: &str, m: &Material, plaintext: bool) -> Member {
        redis_server_installed();
        let dir = tempfile::tempdir().unwrap();
        write_files(dir.path(), m);
        let (plain, tls) = (plaintext.then(free_port), free_port());
        let directives: BTreeMap<String, String> =
            [("repl-diskless-sync-delay".to_string(), "0".to_string())].into();
        let mut args = config::config_args(&directives, None, false).unwrap();
        let spec = podkeeper::api::redis::TlsSpec {
            secret_name: None,
            port: i32::from(tls),
            plaintext,
        };
        // The Pod's paths (/tls/...) are this member's directory here.
        for a in config::tls_args(&spec) {
            args.push(match a.strip_prefix("/tls/") {
                Some(file) => dir.path().join(file).display().to_string(),
                None => a,
            });
        }
        let (cmd, args) = config::server_command(plain.unwrap_or(0), &args);
        let log = dir.path().join("redis.log");
        let child = Command::new(&cmd[0])
            .args(&args)
            .current_dir(dir.path())
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(Stdio::null())
            .env(config::OPERATOR_PASSWORD_ENV, OPERATOR_PASSWORD)
            .env(config::REPLICATION_PASSWORD_ENV, REPLICATION_PASSWORD)
            .kill_on_drop(true)
            .spawn()
            .unwrap();
        let member = Member {
            name: name.into(),
            plain,
            tls,
            child,
            dir,
        };
        let start = Instant::now();
        let dial = Dial::new(&[&m.ca], &certs::server_name(NAME, NAMESPACE)).unwrap();
        while Node::connect(&member.endpoint(Some(&dial)), timeouts())
            .await
            .is_err()
        {
            let log = std::fs::read_to_string(&log).unwrap_or_default();
            assert!(
                start.elapsed() < DEADLINE,
                "{name} did not answer over TLS; log:\n{log}"
            );
            tokio::time::sleep(POLL).await;
        }
        member
    }

    /// Over TLS with `dial`, else plaintext.
    fn endpoint(&self, dial: Option<&Dial>) -> Endpoint {
        let port = if dial.is_some() {
            self.tls
        } else {
            self.plain.expect("a plaintext port")
        };
        Endpoint::new(LOOPBACK, port, None).with_tls(dial.cloned())
    }

    fn pid(&self) -> u32 {
        self.child.id().expect("running")
    }
}

/// The members of one Redis and the operator's memory of it.
struct Set {
    members: Vec<Member>,
    memory: Memory,
    recorded: Option<RecordedPrimary>,
    /// What the operator trusts and wants served.
    ca: Vec<u8>,
    wanted: String,
    /// The set replicates over TLS.
    replication: bool,
}

impl Set {
    async fn start(n: usize, m: &Material, plaintext: bool) -> Set {
        let mut members = Vec::new();
        for i in 0..n {
            members.push(Member::start(&format!("m{i}"), m, plaintext).await);
        }
        Set {
            members,
            memory: Memory::default(),
            recorded: None,
            ca: m.ca.clone(),
            wanted: fingerprint(m),
            replication: !plaintext,
        }
    }

    fn dial(&self) -> Dial {
        Dial::new(&[&self.ca], &certs::server_name(NAME, NAMESPACE)).unwrap()
    }

    fn tls(&self) -> TlsAccess {
        let ports: HashMap<String, u16> = self
            .members
            .iter()
            .map(|m| (m.name.clone(), m.tls))
            .collect();
        TlsAccess {
            dial: self.dial(),
            wanted: self.wanted.clone(),
            ports,
            replication: self.replication,
        }
    }

    fn pods(&self) -> Vec<PodRef> {
        self.members
            .iter()
            .map(|m| PodRef {
                pod: m.name.clone(),
                ip: Some(LOOPBACK.into()),
                port: if self.replication {
                    m.tls
                } else {
                    m.plain.unwrap()
                },
                ready: true,
                deleting: false,
                stopped: false,
                retiring: false,
                claim: None,
            })
            .collect()
    }

    async fn round(&mut self) -> Round {
        let tls = self.tls();
        let round = act::reconcile(
            &self.pods(),
            self.recorded.as_ref(),
            &settings(),
            &Access {
                password: None,
                operator: Some(OPERATOR_PASSWORD),
                previous_operator: None,
                manage_clients: true,
                timeouts: timeouts(),
                route: &Route::PodNetwork,
                tls: Some(&tls),
                users: None,
                default_off: false,
            },
            &self.memory,
            Timestamp::now(),
            async |_: &RecordedPrimary| Ok(()),
        )
        .await;
        if let Some(e) = &round.outcome.error {
            eprintln!("round: {e}");
        }
        self.recorded = round.primary.as_ref().map(|p| RecordedPrimary {
            pod: p.pod.clone(),
            run_id: p.run_id.clone(),
            term: p.term,
            claim: None,
        });
        round
    }

    /// Rounds until the set is replicated; its primary.
    async fn converge(&mut self) -> String {
        let start = Instant::now();
        loop {
            let round = self.round().await;
            if round.plan.replicated && round.plan.actions.is_empty() {
                return self.recorded.as_ref().unwrap().pod.clone();
            }
            assert!(
                start.elapsed() < DEADLINE,
                "not replicated: {:?}",
                round.plan.waiting
            );
            tokio::time::sleep(POLL).await;
        }
    }

    /// Rounds until no member is pending any more but those of `stuck`
    /// (a member whose handshake did not finish within the round's
    /// deadline on a loaded machine is pending and looked at again): the
    /// members made to take the certificate up over those rounds, sorted,
    /// and the last round's pending ones.
    async fn reload_rounds(&mut self, stuck: &[&str]) -> (Vec<String>, Vec<String>) {
        let mut reloaded = std::collections::BTreeSet::new();
        let start = Instant::now();
        loop {
            let round = self.round().await;
            reloaded.extend(round.certificates.reloaded.iter().cloned());
            let pending: Vec<String> = round
                .certificates
                .pending
                .iter()
                .map(|(p, _)| p.clone())
                .collect();
            if pending.iter().all(|p| stuck.contains(&p.as_str())) {
                return (reloaded.into_iter().collect(), pending);
            }
            assert!(
                start.elapsed() < DEADLINE,
                "still pending: {:?}",
                round.certificates
            );
            tokio::time::sleep(POLL).await;
        }
    }

    fn member(&self, name: &str) -> &Member {
        self.members.iter().find(|m| m.name == name).unwrap()
    }

    /// A connection the way the operator opens it now.
    async fn node(&self, name: &str) -> Node {
        let dial = self.dial();
        let m = self.member(name);
        Node::connect(&m.endpoint(self.replication.then_some(&dial)), timeouts())
            .await
            .unwrap()
    }

    /// What each member serves on its TLS port, on a new connection.
    async fn served(&self) -> Vec<String> {
        let dial = self.dial();
        let mut out = Vec::new();
        for m in &self.members {
            let tcp = tokio::net::TcpStream::connect((LOOPBACK, m.tls))
                .await
                .unwrap();
            out.push(dial.served(tcp).await.unwrap());
        }
        out
    }
}

async fn info(node: &Node, section: &str) -> String {
    node.command(redis::cmd("INFO").arg(section)).await.unwrap()
}

fn field<'a>(info: &'a str, name: &str) -> Option<&'a str> {
    info.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
        .map(str::trim)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_over_tls_only_replicates_verified_and_takes_a_renewed_certificate_up_without_a_restart()
 {
    let pki = Pki::new();
    let first = pki.issue();
    let mut set = Set::start(3, &first, false).await;
    let primary = set.converge().await;
    // Replication is over TLS: each replica follows the primary's TLS port.
    let primary_port = set.member(&primary).tls;
    for m in set.members.iter().filter(|m| m.name != primary) {
        let i = info(&set.node(&m.name).await, "replication").await;
        assert_eq!(
            field(&i, "master_port"),
            Some(primary_port.to_string().as_str())
        );
        assert_eq!(field(&i, "master_link_status"), Some("up"), "{}", m.name);
    }
    let node = set.node(&primary).await;
    assert!(write_acked(&node, "before", 2).await.unwrap());
    // Every member serves the certificate it started with: nothing reloaded.
    let (reloaded, _) = set.reload_rounds(&[]).await;
    assert!(reloaded.is_empty(), "{reloaded:?}");

    // The operator verifies: another CA, or another name, is refused.
    let other = Pki::new().issue();
    let stranger = Dial::new(&[&other.ca], &certs::server_name(NAME, NAMESPACE)).unwrap();
    let wrong_name = Dial::new(&[&first.ca], "other.prod.svc").unwrap();
    for dial in [&stranger, &wrong_name] {
        let e = Node::connect(&set.member(&primary).endpoint(Some(dial)), timeouts())
            .await
            .err()
            .expect("an unverified member is refused");
        assert!(e.to_string().contains("certificate"), "{e}");
    }

    // Renewed: the kubelet writes the new Secret into every Pod's volume.
    let pids: Vec<u32> = set.members.iter().map(Member::pid).collect();
    let second = pki.issue();
    for m in &set.members {
        write_files(m.dir.path(), &second);
    }
    set.wanted = fingerprint(&second);
    let (reloaded, _) = set.reload_rounds(&[]).await;
    assert_eq!(reloaded, ["m0", "m1", "m2"]);
    assert_eq!(set.served().await, vec![set.wanted.clone(); 3]);
    assert_eq!(
        set.members.iter().map(Member::pid).collect::<Vec<_>>(),
        pids,
        "no member restarted"
    );
    // Once taken up, not asked again.
    let round = set.round().await;
    assert!(round.certificates.reloaded.is_empty());
    let node = set.node(&primary).await;
    assert!(write_acked(&node, "after", 2).await.unwrap());
    for m in &set.members {
        let got: Option<String> = set
            .node(&m.name)
            .await
            .command(redis::cmd("GET").arg("before"))
            .await
            .unwrap();
        assert_eq!(got.as_deref(), Some("before"), "{}", m.name);
    }

    // A renewal whose key does not match its certificate on one member:
    // that member keeps serving what it had and says why; the others take
    // theirs up.
    let third = pki.issue();
    let mismatched = Material {
        key: pki.issue().key,
        ..third.clone()
    };
    for m in &set.members {
        write_files(
            m.dir.path(),
            if m.name == "m0" { &mismatched } else { &third },
        );
    }
    set.wanted = fingerprint(&third);
    let (reloaded, pending) = set.reload_rounds(&["m0"]).await;
    assert_eq!(reloaded, ["m1", "m2"]);
    assert_eq!(pending, ["m0"]);
    let served = set.served().await;
    assert_eq!(served[0], fingerprint(&second), "m0 kept its certificate");
    assert_eq!(&served[1..], &[set.wanted.clone(), set.wanted.clone()]);
    // Its files put right, it takes them up.
    write_files(set.member("m0").dir.path(), &third);
    let (reloaded, _) = set.reload_rounds(&[]).await;
    assert_eq!(reloaded, ["m0"]);
    assert_eq!(set.served().await, vec![set.wanted.clone(); 3]);
    assert!(set.round().await.plan.replicated);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replication_moved_onto_tls_keeps_its_data_and_needs_no_full_sync() {
    let pki = Pki::new();
    let m = pki.issue();
    // TLS served beside plaintext; replication on plaintext.
    let mut set = Set::start(3, &m, true).await;
    let primary = set.converge().await;
    let node = set.node(&primary).await;
    for i in 0..100 {
        assert!(write_acked(&node, &format!("k{i}"), 2).await.unwrap());
    }
    // The operator talks TLS to every member that serves it, replication
    // on plaintext or not: its connections (user podkeeper) are on the
    // TLS port.
    for m in &set.members {
        let clients: String = set
            .node(&m.name)
            .await
            .command(redis::cmd("CLIENT").arg("LIST"))
            .await
            .unwrap();
        let operator: Vec<&str> = clients
            .lines()
            .filter(|l| l.contains(" user=podkeeper "))
            .collect();
        assert!(!operator.is_empty(), "{}: {clients}", m.name);
        for l in operator {
            assert!(
                l.contains(&format!(" laddr=127.0.0.1:{} ", m.tls)),
                "{}: {l}",
                m.name
            );
        }
    }
    let full_syncs = |i: &str| field(i, "sync_full").map(str::to_string);
    let before = full_syncs(&info(&node, "stats").await);

    // Plaintext off: the set replicates over TLS. The operator gives each
    // member `tls-replication yes` and repoints the replicas to the
    // primary's TLS port; they continue where they were.
    set.replication = true;
    let primary_after = set.converge().await;
    assert_eq!(primary_after, primary, "no failover");
    let node = set.node(&primary).await;
    let tls_port = set.member(&primary).tls.to_string();
    for r in set.members.iter().filter(|r| r.name != primary) {
        let replica = set.node(&r.name).await;
        let i = info(&replica, "replication").await;
        assert_eq!(
            field(&i, "master_port"),
            Some(tls_port.as_str()),
            "{}",
            r.name
        );
        assert_eq!(field(&i, "master_link_status"), Some("up"), "{}", r.name);
        let on: Option<String> = replica.config_get("tls-replication").await.unwrap();
        assert_eq!(on.as_deref(), Some("yes"));
        let got: Option<String> = replica.command(redis::cmd("GET").arg("k99")).await.unwrap();
        assert_eq!(got.as_deref(), Some("k99"));
    }
    assert_eq!(
        full_syncs(&info(&node, "stats").await),
        before,
        "the replicas resumed over TLS with a partial sync"
    );
    assert!(write_acked(&node, "over-tls", 2).await.unwrap());
    let roles: Vec<Role> = {
        let mut out = Vec::new();
        for m in &set.members {
            out.push(set.node(&m.name).await.role().await.unwrap());
        }
        out
    };
    assert_eq!(roles.iter().filter(|r| **r == Role::Primary).count(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_of_a_member_serving_tls_only_is_taken_over_tls_and_verified() {
    let pki = Pki::new();
    let m = pki.issue();
    let mut set = Set::start(2, &m, false).await;
    let primary = set.converge().await;
    let node = set.node(&primary).await;
    for i in 0..1000 {
        node.command::<()>(redis::cmd("SET").arg(format!("k{i}")).arg(i))
            .await
            .unwrap();
    }
    assert!(write_acked(&node, "last", 1).await.unwrap());
    let replica = set.members.iter().find(|r| r.name != primary).unwrap();
    let source = |dial: Dial| podkeeper::backup::take::Source {
        addr: format!("{LOOPBACK}:{}", replica.tls),
        auth: Some((
            Some(config::REPLICATION_USER.into()),
            REPLICATION_PASSWORD.into(),
        )),
        idle: std::time::Duration::from_secs(30),
        tls: Some(dial),
    };
    let (tx, mut rx) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    let bytes = tokio::spawn(async move {
        let mut n = 0;
        while let Some(b) = rx.recv().await {
            n += b.len() as u64;
        }
        n
    });
    let snapshot = podkeeper::backup::take::take(&source(set.dial()), tx)
        .await
        .unwrap();
    assert_eq!(bytes.await.unwrap(), snapshot.size);
    assert!(snapshot.size > 1000, "{snapshot:?}");
    // A member whose certificate the backup cannot verify is refused.
    let stranger = Dial::new(
        &[&Pki::new().issue().ca],
        &certs::server_name(NAME, NAMESPACE),
    )
    .unwrap();
    let (tx, _rx) = tokio::sync::mpsc::channel::<Vec<u8>>(16);
    let e = podkeeper::backup::take::take(&source(stranger), tx)
        .await
        .unwrap_err();
    assert!(e.to_string().contains("certificate"), "{e}");
}
