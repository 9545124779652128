//! A loopback network for the members of one test, whose links the test
//! cuts and heals, as a firewall that drops packets would.
//!
//! Each member has an address of its own, `127.A.B.N` (all of 127.0.0.0/8
//! is on the loopback interface): its "Pod IP". Its redis-server listens on
//! 127.0.0.1 only, on the member's port (where the readiness probe, which
//! runs inside the Pod, and the test's own checks reach it), and opens its
//! outgoing connections from its Pod IP (`bind-source-addr`). A proxy
//! listens on the Pod IP and the same port and forwards to the server; it
//! knows who is calling from the source address: another member's Pod IP,
//! or 127.0.0.1, the address the kernel gives the operator's connections to
//! `127.A.B.N`. The test's clients call a second port of the Pod IP. The
//! proxy's connection to the server leaves from the caller's Pod IP when
//! the caller is a member, so the primary's `INFO` lists each replica at its
//! Pod IP and port, as in a cluster, which is how the operator matches
//! replicas to members.
//!
//! A cut between two parties is a black hole: bytes stop flowing both ways
//! on the connections between them (what the proxy had read is held, and
//! delivered when the cut heals, as TCP would retransmit it), a close is
//! not passed on until the cut heals, and a new connection gets no answer
//! until then. Nothing is refused or reset, which the operator rightly
//! takes for "no server there". One difference from a firewall's DROP: the
//! proxy's kernel completes the TCP handshake of a new connection, so a
//! caller sees its connect succeed and its first command hang, where it
//! would otherwise hang in connect; the operator's deadline covers both,
//! and so does redis-server's `repl-timeout`.
//!
//! A member whose server is down (killed, not started again yet) refuses
//! connections, as a Pod IP with nothing listening does; while a cut
//! touches it, its addresses stay open so that the parties cut from it get
//! silence, not a refusal. Cuts count: two faults that cut the same pair
//! need both healed before bytes flow again.

use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

const LOOPBACK: Ipv4Addr = Ipv4Addr::LOCALHOST;

/// Who talks to a member.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Party {
    /// Another member (its redis-server: replication, `FAILOVER`).
    Member(String),
    /// The operator's rounds.
    Operator,
    /// The test's clients (the writer).
    Clients,
}

impl Party {
    pub fn member(name: &str) -> Party {
        Party::Member(name.to_string())
    }
}

/// The two faces of a member: its Pod IP and port (members, operator), and
/// its Pod IP and a second port (clients).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Face {
    Pod,
    Clients,
}

#[derive(Clone, Debug)]
struct Host {
    ip: Ipv4Addr,
    /// The server's port (on 127.0.0.1) and the Pod face's (on `ip`);
    /// zero until the server first started.
    port: u16,
    client_port: u16,
    /// Its redis-server runs.
    up: bool,
}

#[derive(Clone, Debug, Default)]
struct State {
    hosts: BTreeMap<String, Host>,
    /// Unordered pairs (smaller first), with how many faults cut each.
    cuts: BTreeMap<(Party, Party), u32>,
    closed: bool,
}

fn pair(a: &Party, b: &Party) -> (Party, Party) {
    if a <= b {
        (a.clone(), b.clone())
    } else {
        (b.clone(), a.clone())
    }
}

impl State {
    fn is_cut(&self, a: &Party, b: &Party) -> bool {
        self.cuts.get(&pair(a, b)).is_some_and(|n| *n > 0)
    }

    fn touched(&self, member: &str) -> bool {
        let m = Party::member(member);
        self.cuts.keys().any(|(a, b)| *a == m || *b == m)
    }

    /// Whether `member`'s addresses accept connections.
    fn listens(&self, member: &str) -> bool {
        !self.closed
            && self
                .hosts
                .get(member)
                .is_some_and(|h| h.port != 0 && (h.up || self.touched(member)))
    }

    /// The member whose Pod IP `ip` is.
    fn member_at(&self, ip: IpAddr) -> Option<String> {
        self.hosts
            .iter()
            .find(|(_, h)| IpAddr::V4(h.ip) == ip)
            .map(|(name, _)| name.clone())
    }
}

/// The test's network. Dropping it ends its proxies.
pub struct Net {
    state: Arc<watch::Sender<State>>,
    /// `127.A.B.0`: this network's addresses.
    prefix: [u8; 3],
    next_host: Mutex<u8>,
    /// The accept loop of each member's face that is open.
    listeners: Mutex<BTreeMap<(String, Face), JoinHandle<()>>>,
}

impl Net {
    /// A network with addresses of its own: `127.A.B.0/24`, with A and B
    /// from the process id and a count of the networks of this process, so
    /// tests running at once (threads or processes) use different ones. An
    /// address shared with another process would still do: ports are
    /// chosen free, and a proxy only hears from the parties of its own
    /// network, who are told its address.
    pub fn new() -> Net {
        static NETWORKS: AtomicU32 = AtomicU32::new(0);
        let n = NETWORKS.fetch_add(1, Ordering::Relaxed);
        let id = std::process::id().wrapping_mul(64).wrapping_add(n);
        let a = 64 + (id / 256 % 190) as u8;
        let b = (id % 256) as u8;
        Net {
            state: Arc::new(watch::channel(State::default()).0),
            prefix: [127, a, b],
            next_host: Mutex::new(1),
            listeners: Mutex::new(BTreeMap::new()),
        }
    }

    /// Gives `member` a Pod IP of its own (it has no port and no proxy yet).
    pub fn add(&self, member: &str) -> Ipv4Addr {
        let mut next = self.next_host.lock().unwrap();
        assert!(*next < 255, "out of addresses");
        let [a, b, c] = self.prefix;
        let ip = Ipv4Addr::new(a, b, c, *next);
        *next += 1;
        self.state.send_modify(|s| {
            s.hosts.insert(
                member.to_string(),
                Host {
                    ip,
                    port: 0,
                    client_port: 0,
                    up: false,
                },
            );
        });
        ip
    }

    /// `member`'s Pod IP.
    pub fn ip(&self, member: &str) -> Ipv4Addr {
        self.host(member).ip
    }

    /// Where the test's clients reach `member`.
    pub fn client_address(&self, member: &str) -> (Ipv4Addr, u16) {
        let h = self.host(member);
        (h.ip, h.client_port)
    }

    fn host(&self, member: &str) -> Host {
        self.state
            .borrow()
            .hosts
            .get(member)
            .cloned()
            .unwrap_or_else(|| panic!("{member} is not on the network"))
    }

    /// `member`'s server runs on 127.0.0.1:`port`: its faces open (the
    /// Pod face on the same port, the clients' on a free one, both kept for
    /// good).
    pub async fn attach(&self, member: &str, port: u16) {
        let ip = self.ip(member);
        let clients = std::net::TcpListener::bind((ip, 0))
            .unwrap_or_else(|e| panic!("a clients' port on {ip}: {e}"))
            .local_addr()
            .unwrap()
            .port();
        self.state.send_modify(|s| {
            let h = s.hosts.get_mut(member).unwrap();
            h.port = port;
            h.client_port = clients;
            h.up = true;
        });
        self.apply().await;
    }

    /// `member`'s server stopped (`false`) or runs again (`true`) on its
    /// port.
    pub async fn set_up(&self, member: &str, up: bool) {
        self.state
            .send_modify(|s| s.hosts.get_mut(member).unwrap().up = up);
        self.apply().await;
    }

    /// Cuts `a` from each of `others`, both ways, at once.
    pub async fn cut(&self, a: &Party, others: &[Party]) {
        self.state.send_modify(|s| {
            for b in others {
                assert_ne!(a, b);
                *s.cuts.entry(pair(a, b)).or_insert(0) += 1;
            }
        });
        self.apply().await;
    }

    /// Undoes one [`Net::cut`] of `a` from each of `others`, at once.
    pub async fn heal(&self, a: &Party, others: &[Party]) {
        self.state.send_modify(|s| {
            for b in others {
                let key = pair(a, b);
                let n = s
                    .cuts
                    .get_mut(&key)
                    .expect("healing a pair that is not cut");
                *n -= 1;
                if *n == 0 {
                    s.cuts.remove(&key);
                }
            }
        });
        self.apply().await;
    }

    pub fn is_cut(&self, a: &Party, b: &Party) -> bool {
        self.state.borrow().is_cut(a, b)
    }

    /// Everyone `member` could talk to: the other members, the operator and
    /// the clients.
    pub fn others(&self, member: &str) -> Vec<Party> {
        self.state
            .borrow()
            .hosts
            .keys()
            .filter(|m| *m != member)
            .map(|m| Party::member(m))
            .chain([Party::Operator, Party::Clients])
            .collect()
    }

    /// Opens or closes each member's faces as [`State::listens`] says. A
    /// face is closed once this returns (its accept loop has ended), so a
    /// connection made after it is refused.
    async fn apply(&self) {
        let state = self.state.borrow().clone();
        let mut stop = Vec::new();
        let mut start = Vec::new();
        {
            let mut open = self.listeners.lock().unwrap();
            for (name, h) in &state.hosts {
                for (face, port) in [(Face::Pod, h.port), (Face::Clients, h.client_port)] {
                    let key = (name.clone(), face);
                    match (state.listens(name), open.contains_key(&key)) {
                        (true, false) => start.push((key, SocketAddr::from((h.ip, port)))),
                        (false, true) => stop.push(open.remove(&key).unwrap()),
                        _ => {}
                    }
                }
            }
        }
        for task in stop {
            task.abort();
            let _ = task.await;
        }
        for ((name, face), addr) in start {
            let listener = TcpListener::bind(addr)
                .await
                .unwrap_or_else(|e| panic!("{name}'s {face:?} face on {addr}: {e}"));
            let task = tokio::spawn(accept(listener, self.state.clone(), name.clone(), face));
            self.listeners.lock().unwrap().insert((name, face), task);
        }
    }
}

impl Drop for Net {
    fn drop(&mut self) {
        self.state.send_modify(|s| s.closed = true);
        for (_, task) in std::mem::take(&mut *self.listeners.lock().unwrap()) {
            task.abort();
        }
    }
}

/// One face's accept loop: each connection is linked to the member's
/// server, as its caller.
async fn accept(
    listener: TcpListener,
    state: Arc<watch::Sender<State>>,
    member: String,
    face: Face,
) {
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            // Out of file descriptors, say: try again shortly.
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            continue;
        };
        let caller = match face {
            Face::Clients => Some(Party::Clients),
            Face::Pod if peer.ip() == IpAddr::V4(LOOPBACK) => Some(Party::Operator),
            Face::Pod => state.borrow().member_at(peer.ip()).map(Party::Member),
        };
        match caller {
            Some(caller) => {
                tokio::spawn(link(stream, state.subscribe(), caller, member.clone()));
            }
            None => eprintln!("net: {member}: a connection from {peer}, no party of this network"),
        }
    }
}

/// Waits until `a` and `b` are not cut; false once the network is gone.
async fn open(state: &mut watch::Receiver<State>, a: &Party, b: &Party) -> bool {
    match state.wait_for(|s| s.closed || !s.is_cut(a, b)).await {
        Ok(s) => !s.closed,
        Err(_) => false,
    }
}

/// Carries one connection from `caller` to `member`'s server.
async fn link(client: TcpStream, mut state: watch::Receiver<State>, caller: Party, member: String) {
    let to = Party::Member(member.clone());
    // A new connection across a cut gets no answer until the cut heals.
    if !open(&mut state, &caller, &to).await {
        return;
    }
    let (source, port) = {
        let s = state.borrow();
        let source = match &caller {
            Party::Member(m) => s.hosts.get(m).map(|h| h.ip),
            _ => None,
        };
        (source, s.hosts[&member].port)
    };
    let Ok(upstream) = connect(source, port).await else {
        // The server is down: the caller's connection is closed.
        return;
    };
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = upstream.into_split();
    let mut closed = state.clone();
    tokio::select! {
        () = pump(client_read, server_write, state.clone(), &caller, &to) => {}
        () = pump(server_read, client_write, state, &caller, &to) => {}
        _ = closed.wait_for(|s| s.closed) => {}
    }
}

/// A connection to the server on 127.0.0.1:`port`, from `source` when the
/// caller is a member.
async fn connect(source: Option<Ipv4Addr>, port: u16) -> std::io::Result<TcpStream> {
    let socket = TcpSocket::new_v4()?;
    if let Some(ip) = source {
        socket.bind(SocketAddr::from((ip, 0)))?;
    }
    socket.connect(SocketAddr::from((LOOPBACK, port))).await
}

/// Copies `from` to `to` while `a` and `b` are not cut; ends when `from`
/// ends (once the pair is not cut, so that a close crosses no cut either).
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut state: watch::Receiver<State>,
    a: &Party,
    b: &Party,
) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if !open(&mut state, a, b).await {
            return;
        }
        let n = from.read(&mut buf).await.unwrap_or(0);
        if !open(&mut state, a, b).await {
            return;
        }
        if n == 0 || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
