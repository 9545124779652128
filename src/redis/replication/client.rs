//! Talking to one redis-server, by IP and port, with the `redis` crate.
//!
//! Bounds, so that a slow, silent or hostile server costs a bounded time
//! and memory and never more:
//! - one deadline per step, [`Timeouts::deadline`], covers everything the
//!   step does: connecting (TCP, or the port-forward), AUTH, and its
//!   command(s) (an observation pipelines `INFO server` and `INFO
//!   replication`), instead of timeouts per step that add up;
//! - a server may send at most [`MAX_REPLY_BYTES`] between two requests
//!   ([`Capped`]): a reply of many MB (a bulk string that declares 512 MB,
//!   or an endless one) ends the connection once that much is read, rather
//!   than being read whole. The `redis` crate's own limits cover the rest:
//!   nesting is bounded, and an array's declared length preallocates at
//!   most 4096 elements;
//! - connections are kept in [`Connections`], one per member (Pod, IP,
//!   port, password, route), reused between rounds and dropped when a step
//!   on them fails or the Pod goes.

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, RedisConnectionInfo};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio_util::either::Either;

use crate::redis::replication::acl::Users;
use crate::redis::replication::config::OPERATOR_USER;
use crate::redis::replication::dial::{self, Dial, TlsAccess};
use crate::redis::replication::error::ClientError;
use crate::redis::replication::info::{self, ReplicationInfo, Role};

/// The most a server may send between two requests; far above a real
/// `INFO replication` (about 100 bytes per replica) or `INFO server`
/// (about 2 KB).
pub const MAX_REPLY_BYTES: usize = 256 * 1024;

/// How long one step with one member may take, all included.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    /// Connecting (when no connection is cached), AUTH and the step's
    /// command(s), together.
    pub deadline: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            deadline: Duration::from_millis(1500),
        }
    }
}

/// Where a server listens and how to log in to it.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub ip: String,
    pub port: u16,
    /// The clients' password (`default` user, `spec.auth`).
    pub password: Option<String>,
    /// The operator's own user's password: tried first, the clients'
    /// password only where it is refused (a member started before podkeeper
    /// gave its members that user).
    pub operator: Option<String>,
    /// The operator's user's password before a rotation (see
    /// `crate::redis::credentials`): tried after [`Endpoint::operator`].
    pub previous_operator: Option<String>,
    /// Over TLS, verified so (`spec.tls`, on the member's TLS port).
    pub tls: Option<Dial>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the password.
        f.debug_struct("Endpoint")
            .field("ip", &self.ip)
            .field("port", &self.port)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("operator", &self.operator.as_ref().map(|_| "<redacted>"))
            .field(
                "previous_operator",
                &self.previous_operator.as_ref().map(|_| "<redacted>"),
            )
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

impl Endpoint {
    pub fn new(ip: impl Into<String>, port: u16, password: Option<String>) -> Self {
        Endpoint {
            ip: ip.into(),
            port,
            password,
            operator: None,
            previous_operator: None,
            tls: None,
        }
    }

    /// The same, over TLS with `dial` (when there is one).
    pub fn with_tls(mut self, dial: Option<Dial>) -> Self {
        self.tls = dial;
        self
    }

    /// The same, logging in as the operator's user first (with its
    /// password, then the one before a rotation).
    pub fn with_operator(mut self, operator: Option<String>, previous: Option<String>) -> Self {
        self.operator = operator;
        self.previous_operator = previous;
        self
    }

    /// The logins to try, in order: the operator's user (its password, then
    /// the one before a rotation), then the clients' password (or none).
    fn logins(&self) -> Vec<RedisConnectionInfo> {
        let plain = RedisConnectionInfo::default().set_skip_set_lib_name();
        let mut logins = Vec::new();
        for op in self.operator.iter().chain(&self.previous_operator) {
            logins.push(plain.clone().set_username(OPERATOR_USER).set_password(op));
        }
        logins.push(match &self.password {
            Some(p) => plain.set_password(p),
            None => plain,
        });
        logins
    }

    /// `ip:port`, as used in messages.
    pub fn addr(&self) -> String {
        if self.ip.contains(':') {
            format!("[{}]:{}", self.ip, self.port)
        } else {
            format!("{}:{}", self.ip, self.port)
        }
    }
}

/// An open connection to one redis-server (a handle: clones share it).
#[derive(Clone)]
pub struct Node {
    addr: String,
    conn: MultiplexedConnection,
    timeouts: Timeouts,
    /// Whether the connection ended (the server closed it or died, or the
    /// stream failed), and a wait for it: see [`Node::closed`].
    closed: Arc<Closed>,
}

/// The end of a connection: its driver (which reads the socket whether or
/// not a request waits) returns when the stream ends or fails.
#[derive(Default)]
pub struct Closed {
    ended: std::sync::atomic::AtomicBool,
    notify: Notify,
}

impl Closed {
    fn end(&self) {
        self.ended.store(true, Ordering::Release);
        self.notify.notify_one();
    }

    pub fn is_ended(&self) -> bool {
        self.ended.load(Ordering::Acquire)
    }

    /// Returns once the connection has ended (at once if it already has).
    /// One waiter at a time.
    pub async fn ended(&self) {
        if !self.is_ended() {
            self.notify.notified().await;
        }
    }
}

fn is_auth_error(e: &redis::RedisError) -> bool {
    e.kind() == redis::ErrorKind::AuthenticationFailed
        || matches!(e.code(), Some("NOAUTH" | "WRONGPASS"))
}

/// How the operator's connections reach a member's redis-server.
#[derive(Clone, Default)]
pub enum Route {
    /// Straight to the Pod IP: the operator runs in the cluster.
    #[default]
    PodNetwork,
    /// Through the API server's port-forward to the member's Pod (in this
    /// Api's namespace): the operator runs outside the cluster, where Pod
    /// IPs do not route (`podkeeper dev --kind`).
    PortForward(Box<Api<Pod>>),
}

/// A connection to a member's Pod, by either route: TCP to its IP, or
/// the API server's port-forward.
pub type RawStream = Either<tokio::net::TcpStream, tokio::io::DuplexStream>;

impl Route {
    /// A connection to `port` of `pod` (at `ip`).
    pub async fn connect(&self, pod: &str, ip: &str, port: u16) -> io::Result<RawStream> {
        match self {
            Route::PodNetwork => {
                let stream = tokio::net::TcpStream::connect((ip, port)).await?;
                stream.set_nodelay(true)?;
                Ok(Either::Left(stream))
            }
            Route::PortForward(pods) => Ok(Either::Right(port_forward(pods, pod, port).await?)),
        }
    }
}

/// How to reach and log in to the members of one Redis.
#[derive(Clone, Copy)]
pub struct Access<'a> {
    pub password: Option<&'a str>,
    /// The operator's own user's password (see [`Endpoint::operator`]).
    pub operator: Option<&'a str>,
    /// Its password before a rotation (see [`Endpoint::previous_operator`]).
    pub previous_operator: Option<&'a str>,
    /// Whether `password` is what the members should have (its Secret was
    /// read): only then are they brought to it.
    pub manage_clients: bool,
    pub timeouts: Timeouts,
    pub route: &'a Route,
    /// `spec.tls`, when the members serve it.
    pub tls: Option<&'a TlsAccess>,
    /// `spec.users` (`None`: not known this round; left as they are).
    pub users: Option<&'a Users>,
    /// `spec.defaultUser: Disabled`.
    pub default_off: bool,
}

#[cfg(test)]
impl<'a> Access<'a> {
    /// No password, one `deadline` (the unit tests' fake servers).
    pub fn plain(route: &'a Route, deadline: Duration) -> Self {
        Access {
            password: None,
            operator: None,
            previous_operator: None,
            manage_clients: true,
            timeouts: Timeouts { deadline },
            route,
            tls: None,
            users: None,
            default_off: false,
        }
    }
}

impl Access<'_> {
    /// Member `pod` at `ip:port`, with this Redis's passwords; over TLS,
    /// on its TLS port instead, when it serves TLS (`port`, its replication
    /// port, is then only what its replicas dial).
    pub fn endpoint(&self, pod: &str, ip: &str, port: u16) -> Endpoint {
        let tls = self
            .tls
            .and_then(|t| Some((t.dial.clone(), *t.ports.get(pod)?)));
        let port = tls.as_ref().map_or(port, |(_, p)| *p);
        Endpoint::new(ip, port, self.password.map(str::to_string))
            .with_operator(
                self.operator.map(str::to_string),
                self.previous_operator.map(str::to_string),
            )
            .with_tls(tls.map(|(dial, _)| dial))
    }
}

impl Node {
    /// Connects over the Pod network (and authenticates, when the endpoint
    /// has a password), within [`Timeouts::deadline`].
    pub async fn connect(endpoint: &Endpoint, timeouts: Timeouts) -> Result<Node, ClientError> {
        within(
            &endpoint.addr(),
            "connect",
            timeouts.deadline,
            Node::open(&Route::PodNetwork, "", endpoint, timeouts),
        )
        .await
    }

    /// Opens a connection, with no deadline of its own (the caller's
    /// covers it).
    async fn open(
        route: &Route,
        pod: &str,
        endpoint: &Endpoint,
        timeouts: Timeouts,
    ) -> Result<Node, ClientError> {
        let addr = endpoint.addr();
        // Each command is bounded by its caller's deadline (WAIT needs
        // longer than the others).
        let config = AsyncConnectionConfig::new().set_response_timeout(None);
        let connect_error = |source: io::Error| ClientError::Connect {
            addr: addr.clone(),
            source: source.into(),
        };
        let logins = endpoint.logins();
        let mut first_refusal = None;
        let mut opened = None;
        for (i, settings) in logins.iter().enumerate() {
            let stream = route
                .connect(pod, &endpoint.ip, endpoint.port)
                .await
                .map_err(connect_error)?;
            let stream = dial::open(stream, endpoint.tls.as_ref())
                .await
                .map_err(connect_error)?;
            let tried = handshake(settings, stream, config.clone()).await;
            match tried {
                Ok(c) => {
                    opened = Some(c);
                    break;
                }
                // The server answered the login with a refusal: the next
                // login, if any (the first refusal says the most).
                Err(source) if !source.is_io_error() && i + 1 < logins.len() => {
                    first_refusal.get_or_insert(source);
                }
                Err(source) => {
                    let source = first_refusal.unwrap_or(source);
                    return Err(if is_auth_error(&source) {
                        ClientError::Auth { addr, source }
                    } else {
                        ClientError::Connect { addr, source }
                    });
                }
            }
        }
        let Some((conn, closed)) = opened else {
            unreachable!("every login either opened a connection or returned");
        };
        Ok(Node {
            addr,
            conn,
            timeouts,
            closed,
        })
    }

    /// This connection's end. A redis-server that dies is seen here at once
    /// (its kernel closes the socket), not at the next ask.
    pub fn closed(&self) -> Arc<Closed> {
        self.closed.clone()
    }

    pub fn addr(&self) -> &str {
        &self.addr
    }

    async fn run<T, F>(
        &self,
        command: &'static str,
        limit: Duration,
        fut: F,
    ) -> Result<T, ClientError>
    where
        F: Future<Output = redis::RedisResult<T>>,
    {
        within(&self.addr, command, limit, async {
            fut.await.map_err(|source| {
                if is_auth_error(&source) {
                    ClientError::Auth {
                        addr: self.addr.clone(),
                        source,
                    }
                } else {
                    ClientError::Command {
                        addr: self.addr.clone(),
                        command,
                        source,
                    }
                }
            })
        })
        .await
    }

    async fn query<T: redis::FromRedisValue>(
        &self,
        command: &'static str,
        cmd: &redis::Cmd,
    ) -> Result<T, ClientError> {
        let mut conn = self.conn.clone();
        self.run(command, self.timeouts.deadline, cmd.query_async(&mut conn))
            .await
    }

    /// `INFO server`, `replication`, and the sections the metrics read
    /// (`memory`, `clients`, `stats`, `keyspace`) in one round trip, parsed.
    /// One section per command: Redis before 7 takes one section name.
    pub async fn replication_info(&self) -> Result<ReplicationInfo, ClientError> {
        let mut conn = self.conn.clone();
        let mut pipe = redis::pipe();
        for section in ["server", "replication"].iter().chain(info::VITALS) {
            pipe.cmd("INFO").arg(*section);
        }
        let mut answers: Vec<String> = self
            .run("INFO", self.timeouts.deadline, pipe.query_async(&mut conn))
            .await?;
        let bad = |source| ClientError::Info {
            addr: self.addr.clone(),
            source,
        };
        if answers.len() < 2 {
            return Err(bad(info::InfoError::Missing("replication")));
        }
        let vitals = Box::new(info::parse_vitals(&answers.split_off(2).join("\r\n")));
        let run_id = info::parse_run_id(&answers[0]).map_err(bad)?;
        Ok(ReplicationInfo {
            vitals,
            ..info::parse_replication(&answers[1], run_id).map_err(bad)?
        })
    }

    /// `REPLICAOF host port`: become a replica of `host:port` (the dataset
    /// is replaced by the primary's on sync).
    pub async fn replicate_from(&self, host: &str, port: u16) -> Result<(), ClientError> {
        self.query::<()>("REPLICAOF", redis::cmd("REPLICAOF").arg(host).arg(port))
            .await
    }

    /// `REPLICAOF NO ONE`: become a primary, keeping the dataset.
    pub async fn promote(&self) -> Result<(), ClientError> {
        self.query::<()>(
            "REPLICAOF NO ONE",
            redis::cmd("REPLICAOF").arg("NO").arg("ONE"),
        )
        .await
    }

    /// `FAILOVER TO host port TIMEOUT ms`, sent to the primary: it pauses
    /// writes, waits until `host:port` has its offset, then swaps roles; if
    /// that takes longer than `timeout` it aborts and stays primary (no FORCE,
    /// so no write is given up). The reply comes at once; the handover is
    /// seen in `INFO` (`master_failover_state`, then the roles).
    pub async fn failover_to(
        &self,
        host: &str,
        port: u16,
        timeout: Duration,
    ) -> Result<(), ClientError> {
        let ms = u64::try_from(timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        self.query::<()>(
            "FAILOVER",
            redis::cmd("FAILOVER")
                .arg("TO")
                .arg(host)
                .arg(port)
                .arg("TIMEOUT")
                .arg(ms),
        )
        .await
    }

    /// `CONFIG SET key value`.
    pub async fn config_set(&self, key: &str, value: &str) -> Result<(), ClientError> {
        self.query::<()>(
            "CONFIG SET",
            redis::cmd("CONFIG").arg("SET").arg(key).arg(value),
        )
        .await
    }

    /// `CONFIG SET k1 v1 k2 v2 ...`: all or none (Redis 7).
    pub async fn config_set_many(&self, pairs: &[(&str, &str)]) -> Result<(), ClientError> {
        let mut cmd = redis::cmd("CONFIG");
        cmd.arg("SET");
        for (k, v) in pairs {
            cmd.arg(*k).arg(*v);
        }
        self.query::<()>("CONFIG SET", &cmd).await
    }

    /// `CONFIG GET key`: the value, if the directive exists.
    pub async fn config_get(&self, key: &str) -> Result<Option<String>, ClientError> {
        let pairs: Vec<String> = self
            .query("CONFIG GET", redis::cmd("CONFIG").arg("GET").arg(key))
            .await?;
        Ok(pairs.get(1).cloned())
    }

    /// `ROLE`: the first element of the reply.
    pub async fn role(&self) -> Result<Role, ClientError> {
        let reply: Vec<redis::Value> = self.query("ROLE", &redis::cmd("ROLE")).await?;
        let first = reply.first().and_then(|v| match v {
            redis::Value::BulkString(b) => std::str::from_utf8(b).ok().map(str::to_string),
            redis::Value::SimpleString(s) => Some(s.clone()),
            _ => None,
        });
        match first.as_deref() {
            Some("master") => Ok(Role::Primary),
            Some("slave") => Ok(Role::Replica),
            _ => Err(ClientError::Info {
                addr: self.addr.clone(),
                source: crate::redis::replication::error::InfoError::Invalid {
                    key: "ROLE",
                    value: info::excerpt(&format!("{reply:?}")),
                },
            }),
        }
    }

    /// `WAIT replicas timeout`: how many replicas acknowledged this
    /// connection's writes within `timeout`.
    pub async fn wait(&self, replicas: u32, timeout: Duration) -> Result<u32, ClientError> {
        let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
        let mut conn = self.conn.clone();
        self.run(
            "WAIT",
            timeout + self.timeouts.deadline,
            redis::cmd("WAIT")
                .arg(replicas)
                .arg(ms)
                .query_async(&mut conn),
        )
        .await
    }

    /// Runs any command on this connection, within the deadline (for
    /// clients of the data, such as tests).
    pub async fn command<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
    ) -> Result<T, ClientError> {
        self.query("command", cmd).await
    }
}

/// Logs in (when there is a password) on `stream`, capped, and starts the
/// connection's driver, which ends when the last handle to it is dropped.
/// The connection, and its end.
async fn handshake<S>(
    settings: &RedisConnectionInfo,
    stream: S,
    config: AsyncConnectionConfig,
) -> redis::RedisResult<(MultiplexedConnection, Arc<Closed>)>
where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (conn, driver) =
        MultiplexedConnection::new_with_config(settings, Capped::new(stream), config).await?;
    let closed = Arc::new(Closed::default());
    let signal = closed.clone();
    tokio::spawn(async move {
        driver.await;
        signal.end();
    });
    Ok((conn, closed))
}

/// `fut`, or a timeout once `limit` has passed.
async fn within<T>(
    addr: &str,
    command: &'static str,
    limit: Duration,
    fut: impl Future<Output = Result<T, ClientError>>,
) -> Result<T, ClientError> {
    tokio::time::timeout(limit, fut).await.unwrap_or_else(|_| {
        Err(ClientError::Timeout {
            addr: addr.to_string(),
            command,
        })
    })
}

/// A stream that fails once the server has sent more than its cap since
/// the client last wrote: the connection ends, and with it the reply being
/// read, instead of memory growing with what a server chooses to send.
pub struct Capped<S> {
    inner: S,
    unasked: usize,
    cap: usize,
}

impl<S> Capped<S> {
    pub fn new(inner: S) -> Self {
        Capped::with_cap(inner, MAX_REPLY_BYTES)
    }

    pub fn with_cap(inner: S, cap: usize) -> Self {
        Capped {
            inner,
            unasked: 0,
            cap,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Capped<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.unasked > this.cap {
            return Poll::Ready(Err(too_much(this.cap)));
        }
        let before = buf.filled().len();
        ready!(Pin::new(&mut this.inner).poll_read(cx, buf))?;
        let n = buf.filled().len() - before;
        this.unasked += n;
        if this.unasked > this.cap {
            return Poll::Ready(Err(too_much(this.cap)));
        }
        Poll::Ready(Ok(()))
    }
}

fn too_much(cap: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("the server sent more than {cap} bytes for one request; connection dropped"),
    )
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Capped<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let n = ready!(Pin::new(&mut this.inner).poll_write(cx, buf))?;
        if n > 0 {
            this.unasked = 0;
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

/// A stream to `port` of `pod` through the API server: one port-forward
/// per connection, which ends when the connection is dropped.
async fn port_forward(
    pods: &Api<Pod>,
    pod: &str,
    port: u16,
) -> Result<tokio::io::DuplexStream, io::Error> {
    let failed = |e: String| io::Error::other(format!("port-forward to {pod}:{port}: {e}"));
    let mut forwarder = pods
        .portforward(pod, &[port])
        .await
        .map_err(|e| failed(e.to_string()))?;
    forwarder
        .take_stream(port)
        .ok_or_else(|| failed("no stream".into()))
}

/// What a cached connection is for: the member (Pod name, IP, port), the
/// password it logged in with, and whether it goes through a port-forward.
/// A new Pod IP, a new password or another route is another connection.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct ConnectionKey {
    pub pod: String,
    pub ip: String,
    pub port: u16,
    password: Option<String>,
    operator: Option<String>,
    previous_operator: Option<String>,
    tls: Option<Dial>,
    forwarded: bool,
}

impl std::fmt::Debug for ConnectionKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConnectionKey")
            .field("pod", &self.pod)
            .field("ip", &self.ip)
            .field("port", &self.port)
            .field("forwarded", &self.forwarded)
            .finish_non_exhaustive()
    }
}

/// Open connections, one per member, reused from round to round.
#[derive(Default)]
pub struct Connections {
    open: Mutex<HashMap<ConnectionKey, (u64, Node)>>,
    opened: AtomicU64,
}

impl Connections {
    fn key(access: &Access<'_>, pod: &str, endpoint: &Endpoint) -> ConnectionKey {
        ConnectionKey {
            pod: pod.to_string(),
            ip: endpoint.ip.clone(),
            port: endpoint.port,
            password: endpoint.password.clone(),
            operator: endpoint.operator.clone(),
            previous_operator: endpoint.previous_operator.clone(),
            tls: endpoint.tls.clone(),
            forwarded: matches!(access.route, Route::PortForward(_)),
        }
    }

    fn open(&self) -> std::sync::MutexGuard<'_, HashMap<ConnectionKey, (u64, Node)>> {
        self.open.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many connections were opened so far.
    pub fn opened(&self) -> u64 {
        self.opened.load(Ordering::Relaxed)
    }

    /// How many are open now.
    pub fn len(&self) -> usize {
        self.open().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The end of the cached connection to `pod`'s server at `endpoint`;
    /// `None` when none is open.
    pub fn closed(
        &self,
        access: &Access<'_>,
        pod: &str,
        endpoint: &Endpoint,
    ) -> Option<Arc<Closed>> {
        let key = Connections::key(access, pod, endpoint);
        self.open().get(&key).map(|(_, node)| node.closed())
    }

    /// Keeps only the connections `keep` accepts (the Pods that remain).
    pub fn retain(&self, mut keep: impl FnMut(&ConnectionKey) -> bool) {
        self.open().retain(|k, _| keep(k));
    }

    /// Runs `step` on `pod`'s server at `endpoint`, on the cached
    /// connection or a new one, all within one [`Timeouts::deadline`]
    /// (`what` names the step in a timeout). A failed step drops the
    /// connection: the next one connects afresh.
    pub async fn call<T, F, Fut>(
        &self,
        access: &Access<'_>,
        pod: &str,
        endpoint: &Endpoint,
        what: &'static str,
        step: F,
    ) -> Result<T, ClientError>
    where
        F: FnOnce(Node) -> Fut,
        Fut: Future<Output = Result<T, ClientError>>,
    {
        let key = Connections::key(access, pod, endpoint);
        // A connection that has ended is not used: the step would fail on
        // it ("broken pipe") where a new one tells what is there now (a
        // refused port: no server; a new process).
        let cached = self
            .open()
            .get(&key)
            .filter(|(_, node)| !node.closed.is_ended())
            .cloned();
        let mut used = None;
        let result = within(&endpoint.addr(), what, access.timeouts.deadline, async {
            let (id, node) = match cached {
                Some(c) => c,
                None => {
                    let node = Node::open(access.route, pod, endpoint, access.timeouts).await?;
                    let id = self.opened.fetch_add(1, Ordering::Relaxed) + 1;
                    self.open().insert(key.clone(), (id, node.clone()));
                    (id, node)
                }
            };
            used = Some(id);
            step(node).await
        })
        .await;
        if result.is_err()
            && let Some(id) = used
        {
            let mut open = self.open();
            if open.get(&key).is_some_and(|(i, _)| *i == id) {
                open.remove(&key);
            }
        }
        result
    }

    /// `pod`'s replication state, within one deadline. A reused connection
    /// that fails at once (the server it knew is gone: "broken pipe",
    /// "connection reset") says nothing of what is there now, so it is
    /// asked once more on a new connection: a refused port (no server), a
    /// new process or an answer. INFO changes nothing, so asking twice is
    /// safe; commands are never sent twice.
    pub async fn observe(
        &self,
        access: &Access<'_>,
        pod: &str,
        endpoint: &Endpoint,
    ) -> Result<ReplicationInfo, ClientError> {
        let ask = || {
            self.call(access, pod, endpoint, "INFO", |node: Node| async move {
                node.replication_info().await
            })
        };
        let reused = {
            let key = Connections::key(access, pod, endpoint);
            self.open().contains_key(&key)
        };
        match ask().await {
            Err(e) if reused && !matches!(e, ClientError::Timeout { .. }) => ask().await,
            result => result,
        }
    }
}

/// Connects to `pod`'s server at `endpoint` as `access` says and reads its
/// replication state, on a connection of its own, within one deadline.
pub async fn observe(
    access: &Access<'_>,
    pod: &str,
    endpoint: &Endpoint,
) -> Result<ReplicationInfo, ClientError> {
    Connections::default().observe(access, pod, endpoint).await
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::Arc;
    use std::sync::atomic::AtomicUsize;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpListener;
    use tokio::time::Instant;

    const DEADLINE: Duration = Duration::from_millis(400);

    /// What a lone primary answers to the `INFO server` and `INFO
    /// replication` pipeline, at its shortest.
    pub(crate) fn primary_info_reply() -> String {
        let server = "# Server\r\nrun_id:abc\r\n";
        let repl = "# Replication\r\nrole:master\r\nconnected_slaves:0\r\nmaster_replid:x\r\nmaster_repl_offset:0\r\n";
        let mut reply = String::new();
        for section in [
            server,
            repl,
            "# Memory\r\n",
            "# Clients\r\n",
            "# Stats\r\n",
            "# Keyspace\r\n",
        ] {
            reply.push_str(&format!("${}\r\n{section}\r\n", section.len()));
        }
        reply
    }

    /// A fake server on loopback: `serve` runs for every connection it
    /// accepts. Returns its port.
    async fn fake<F, Fut>(serve: F) -> u16
    where
        F: Fn(tokio::net::TcpStream) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream));
            }
        });
        port
    }

    async fn observe_fake(port: u16, password: Option<&str>) -> (Result<(), String>, Duration) {
        let route = Route::PodNetwork;
        let access = Access {
            password,
            operator: None,
            previous_operator: None,
            manage_clients: true,
            timeouts: Timeouts { deadline: DEADLINE },
            route: &route,
            tls: None,
            users: None,
            default_off: false,
        };
        let started = Instant::now();
        let result = Connections::default()
            .observe(&access, "p", &access.endpoint("p", "127.0.0.1", port))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string());
        (result, started.elapsed())
    }

    /// Reads one request (whatever arrives in one read).
    async fn read_some(stream: &mut tokio::net::TcpStream) -> bool {
        let mut buf = [0u8; 4096];
        matches!(stream.read(&mut buf).await, Ok(n) if n > 0)
    }

    #[tokio::test]
    async fn a_server_that_accepts_and_never_answers_costs_one_deadline() {
        let port = fake(|mut s| async move { while read_some(&mut s).await {} }).await;
        let (result, took) = observe_fake(port, None).await;
        let err = result.unwrap_err();
        assert!(err.contains("timed out"), "{err}");
        assert!(took >= DEADLINE && took < DEADLINE * 2, "{took:?}");
    }

    #[tokio::test]
    async fn steps_that_each_fit_a_timeout_share_one_deadline() {
        // AUTH, then the INFO pipeline: each answered after 60 % of the
        // deadline, so each would fit a timeout of its own; together they
        // do not.
        let port = fake(|mut s| async move {
            while read_some(&mut s).await {
                tokio::time::sleep(DEADLINE * 6 / 10).await;
                if s.write_all(b"+OK\r\n").await.is_err() {
                    return;
                }
            }
        })
        .await;
        let (result, took) = observe_fake(port, Some("pw")).await;
        let err = result.unwrap_err();
        assert!(err.contains("timed out"), "{err}");
        assert!(took < DEADLINE + DEADLINE / 2, "{took:?}");
    }

    #[tokio::test]
    async fn a_server_that_trickles_its_answer_costs_one_deadline() {
        let port = fake(|mut s| async move {
            read_some(&mut s).await;
            if s.write_all(b"$100000\r\n").await.is_err() {
                return;
            }
            loop {
                tokio::time::sleep(Duration::from_millis(20)).await;
                if s.write_all(b"x").await.is_err() {
                    return;
                }
            }
        })
        .await;
        let (result, took) = observe_fake(port, None).await;
        let err = result.unwrap_err();
        assert!(err.contains("timed out"), "{err}");
        assert!(took >= DEADLINE && took < DEADLINE * 2, "{took:?}");
    }

    #[tokio::test]
    async fn a_huge_answer_is_cut_off_not_read_whole() {
        let sent = Arc::new(AtomicUsize::new(0));
        let counted = sent.clone();
        let port = fake(move |mut s| {
            let sent = counted.clone();
            async move {
                read_some(&mut s).await;
                // A bulk string of 64 MB, sent as fast as it goes.
                if s.write_all(b"$67108864\r\n").await.is_err() {
                    return;
                }
                let chunk = vec![b'a'; 64 * 1024];
                while s.write_all(&chunk).await.is_ok() {
                    sent.fetch_add(chunk.len(), Ordering::Relaxed);
                }
            }
        })
        .await;
        let route = Route::PodNetwork;
        let access = Access::plain(&route, Duration::from_secs(10));
        let started = Instant::now();
        let err = Connections::default()
            .observe(&access, "p", &access.endpoint("p", "127.0.0.1", port))
            .await
            .unwrap_err()
            .to_string();
        assert!(!err.contains("timed out"), "{err}");
        assert!(started.elapsed() < Duration::from_secs(5));
        // Give the server time to notice the connection is gone.
        tokio::time::sleep(Duration::from_millis(200)).await;
        let sent = sent.load(Ordering::Relaxed);
        // What the server got out: what the client read (the cap) plus the
        // sockets' buffers, far below the 64 MB announced.
        assert!(sent < 24 << 20, "{sent} bytes sent");
    }

    #[tokio::test]
    async fn the_cap_counts_from_the_last_request() {
        let (client, mut server) = tokio::io::duplex(1 << 16);
        let mut capped = Capped::with_cap(client, 10);
        server.write_all(b"12345678").await.unwrap();
        let mut buf = [0u8; 64];
        assert_eq!(capped.read(&mut buf).await.unwrap(), 8);
        capped.write_all(b"ask").await.unwrap();
        server.write_all(b"12345678").await.unwrap();
        assert_eq!(capped.read(&mut buf).await.unwrap(), 8, "counted afresh");
        server.write_all(b"12345").await.unwrap();
        let err = capped.read(&mut buf).await.unwrap_err();
        assert!(err.to_string().contains("more than 10 bytes"), "{err}");
    }

    #[tokio::test]
    async fn a_connection_is_reused_and_dropped_when_a_step_fails() {
        // Answers INFO with a minimal valid answer, every time; fails once
        // asked for anything after a `FAIL` marker.
        let accepted = Arc::new(AtomicUsize::new(0));
        let counted = accepted.clone();
        let port = fake(move |mut s| {
            counted.fetch_add(1, Ordering::Relaxed);
            async move {
                let reply = primary_info_reply();
                let mut buf = [0u8; 4096];
                loop {
                    match s.read(&mut buf).await {
                        Ok(n) if n > 0 => {
                            if buf[..n].windows(4).any(|w| w == b"ROLE") {
                                // A broken answer: the step fails.
                                let _ = s.write_all(b"*1\r\n:1\r\n").await;
                            } else if s.write_all(reply.as_bytes()).await.is_err() {
                                return;
                            }
                        }
                        _ => return,
                    }
                }
            }
        })
        .await;
        let route = Route::PodNetwork;
        let access = Access::plain(&route, DEADLINE);
        let endpoint = access.endpoint("p", "127.0.0.1", port);
        let connections = Connections::default();
        for _ in 0..5 {
            connections
                .observe(&access, "p", &endpoint)
                .await
                .expect("a good answer");
        }
        assert_eq!(connections.opened(), 1);
        assert_eq!(accepted.load(Ordering::Relaxed), 1);
        let failed = connections
            .call(&access, "p", &endpoint, "ROLE", |n: Node| async move {
                n.role().await
            })
            .await;
        assert!(failed.is_err());
        assert!(connections.is_empty(), "dropped after the failure");
        connections.observe(&access, "p", &endpoint).await.unwrap();
        assert_eq!(connections.opened(), 2);
        // Another Pod at the same address, or another password, is another
        // connection.
        connections.observe(&access, "q", &endpoint).await.unwrap();
        assert_eq!(connections.opened(), 3);
        connections.retain(|k| k.pod == "q");
        assert_eq!(connections.len(), 1);
    }
}
