//! Talking to one redis-server, by IP and port, with the `redis` crate.
//!
//! Every connection and every command is bounded by a timeout, so an
//! unreachable or stopped Pod costs at most [`Timeouts::connect`] plus
//! [`Timeouts::command`]; it never blocks a reconcile.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, ConnectionAddr, ConnectionInfo, IntoConnectionInfo};

use crate::redis::replication::error::ClientError;
use crate::redis::replication::info::{self, ReplicationInfo, Role};

/// How long to wait for a connection and for each command's reply.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timeouts {
    pub connect: Duration,
    pub command: Duration,
}

impl Default for Timeouts {
    fn default() -> Self {
        Timeouts {
            connect: Duration::from_secs(2),
            command: Duration::from_secs(2),
        }
    }
}

/// Where a server listens and how to log in to it.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub ip: String,
    pub port: u16,
    pub password: Option<String>,
}

impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the password.
        f.debug_struct("Endpoint")
            .field("ip", &self.ip)
            .field("port", &self.port)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

impl Endpoint {
    pub fn new(ip: impl Into<String>, port: u16, password: Option<String>) -> Self {
        Endpoint {
            ip: ip.into(),
            port,
            password,
        }
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

/// An open connection to one redis-server.
pub struct Node {
    addr: String,
    conn: MultiplexedConnection,
    timeouts: Timeouts,
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

/// How to reach and log in to the members of one Redis.
#[derive(Clone, Copy)]
pub struct Access<'a> {
    pub password: Option<&'a str>,
    pub timeouts: Timeouts,
    pub route: &'a Route,
}

impl Access<'_> {
    /// The member at `ip:port`, with this Redis's password.
    pub fn endpoint(&self, ip: &str, port: u16) -> Endpoint {
        Endpoint::new(ip, port, self.password.map(str::to_string))
    }
}

impl Node {
    /// Connects over the Pod network (and authenticates, when the endpoint
    /// has a password).
    pub async fn connect(endpoint: &Endpoint, timeouts: Timeouts) -> Result<Node, ClientError> {
        Node::connect_by(&Route::PodNetwork, "", endpoint, timeouts).await
    }

    /// Connects to `pod`'s server at `endpoint` as `access` says.
    pub async fn connect_via(
        access: &Access<'_>,
        pod: &str,
        endpoint: &Endpoint,
    ) -> Result<Node, ClientError> {
        Node::connect_by(access.route, pod, endpoint, access.timeouts).await
    }

    async fn connect_by(
        route: &Route,
        pod: &str,
        endpoint: &Endpoint,
        timeouts: Timeouts,
    ) -> Result<Node, ClientError> {
        let addr = endpoint.addr();
        let mut info: ConnectionInfo = ConnectionAddr::Tcp(endpoint.ip.clone(), endpoint.port)
            .into_connection_info()
            .map_err(|source| ClientError::Connect {
                addr: addr.clone(),
                source,
            })?;
        let mut settings = info.redis_settings().clone().set_skip_set_lib_name();
        if let Some(password) = &endpoint.password {
            settings = settings.set_password(password);
        }
        info = info.set_redis_settings(settings);
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(timeouts.connect))
            // Commands are bounded below, one by one (WAIT needs longer).
            .set_response_timeout(None);
        let connecting = async {
            match route {
                Route::PodNetwork => {
                    redis::Client::open(info)?
                        .get_multiplexed_async_connection_with_config(&config)
                        .await
                }
                Route::PortForward(pods) => {
                    let stream = port_forward(pods, pod, endpoint.port).await?;
                    let (conn, driver) = MultiplexedConnection::new_with_config(
                        info.redis_settings(),
                        stream,
                        config,
                    )
                    .await?;
                    tokio::spawn(driver);
                    Ok(conn)
                }
            }
        };
        // The connect timeout covers TCP; AUTH gets the command timeout on top.
        let conn = match tokio::time::timeout(timeouts.connect + timeouts.command, connecting).await
        {
            Err(_) => {
                return Err(ClientError::Timeout {
                    addr,
                    command: "connect",
                });
            }
            Ok(Err(source)) if is_auth_error(&source) => {
                return Err(ClientError::Auth { addr, source });
            }
            Ok(Err(source)) if source.is_timeout() => {
                return Err(ClientError::Timeout {
                    addr,
                    command: "connect",
                });
            }
            Ok(Err(source)) => return Err(ClientError::Connect { addr, source }),
            Ok(Ok(conn)) => conn,
        };
        Ok(Node {
            addr,
            conn,
            timeouts,
        })
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
        match tokio::time::timeout(limit, fut).await {
            Err(_) => Err(ClientError::Timeout {
                addr: self.addr.clone(),
                command,
            }),
            Ok(Err(source)) if is_auth_error(&source) => Err(ClientError::Auth {
                addr: self.addr.clone(),
                source,
            }),
            Ok(Err(source)) => Err(ClientError::Command {
                addr: self.addr.clone(),
                command,
                source,
            }),
            Ok(Ok(v)) => Ok(v),
        }
    }

    async fn query<T: redis::FromRedisValue>(
        &self,
        command: &'static str,
        cmd: &redis::Cmd,
    ) -> Result<T, ClientError> {
        let mut conn = self.conn.clone();
        self.run(command, self.timeouts.command, cmd.query_async(&mut conn))
            .await
    }

    /// `INFO replication` and `INFO server`, parsed.
    pub async fn replication_info(&self) -> Result<ReplicationInfo, ClientError> {
        let server: String = self
            .query("INFO server", redis::cmd("INFO").arg("server"))
            .await?;
        let replication: String = self
            .query("INFO replication", redis::cmd("INFO").arg("replication"))
            .await?;
        let bad = |source| ClientError::Info {
            addr: self.addr.clone(),
            source,
        };
        let run_id = info::parse_run_id(&server).map_err(bad)?;
        info::parse_replication(&replication, run_id).map_err(bad)
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
                    value: format!("{reply:?}"),
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
            timeout + self.timeouts.command,
            redis::cmd("WAIT")
                .arg(replicas)
                .arg(ms)
                .query_async(&mut conn),
        )
        .await
    }

    /// Runs any command on this connection, with the command timeout (for
    /// clients of the data, such as tests).
    pub async fn command<T: redis::FromRedisValue>(
        &self,
        cmd: &redis::Cmd,
    ) -> Result<T, ClientError> {
        self.query("command", cmd).await
    }
}

/// A stream to `port` of `pod` through the API server: one port-forward
/// per connection, which ends when the connection is dropped.
async fn port_forward(
    pods: &Api<Pod>,
    pod: &str,
    port: u16,
) -> Result<tokio::io::DuplexStream, redis::RedisError> {
    let failed = |e: String| std::io::Error::other(format!("port-forward to {pod}:{port}: {e}"));
    let mut forwarder = pods
        .portforward(pod, &[port])
        .await
        .map_err(|e| failed(e.to_string()))?;
    Ok(forwarder
        .take_stream(port)
        .ok_or_else(|| failed("no stream".into()))?)
}

/// Connects to `pod`'s server at `endpoint` as `access` says and reads its
/// replication state.
pub async fn observe(
    access: &Access<'_>,
    pod: &str,
    endpoint: &Endpoint,
) -> Result<ReplicationInfo, ClientError> {
    Node::connect_via(access, pod, endpoint)
        .await?
        .replication_info()
        .await
}
