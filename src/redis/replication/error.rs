//! Errors of the replication module.

/// `INFO` output that could not be understood.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum InfoError {
    #[error("INFO has no field {0}")]
    Missing(&'static str),
    #[error("INFO field {key} has an unexpected value {value:?}")]
    Invalid { key: &'static str, value: String },
}

/// A failure talking to one redis-server.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("{addr}: cannot connect: {source}")]
    Connect {
        addr: String,
        #[source]
        source: redis::RedisError,
    },
    #[error("{addr}: authentication failed: {source}")]
    Auth {
        addr: String,
        #[source]
        source: redis::RedisError,
    },
    #[error("{addr}: {command} timed out")]
    Timeout { addr: String, command: &'static str },
    #[error("{addr}: {command} failed: {source}")]
    Command {
        addr: String,
        command: &'static str,
        #[source]
        source: redis::RedisError,
    },
    #[error("{addr}: {source}")]
    Info {
        addr: String,
        #[source]
        source: InfoError,
    },
}

impl ClientError {
    /// The member's address refused the connection: its Pod's network is
    /// there but nothing listens on the port, so its redis-server is not
    /// running (exited, or restarting) and what it held in memory is gone.
    /// A partition never answers so (its packets are dropped: a timeout).
    pub fn refused(&self) -> bool {
        matches!(self, ClientError::Connect { source, .. } if source.is_connection_refusal())
    }

    /// A short, fixed label for metrics and conditions.
    pub fn metric_label(&self) -> &'static str {
        match self {
            ClientError::Connect { .. } => "connect",
            ClientError::Auth { .. } => "auth",
            ClientError::Timeout { .. } => "timeout",
            ClientError::Command { .. } => "command",
            ClientError::Info { .. } => "info",
        }
    }
}

/// A `spec.config` that podkeeper refuses.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConfigError {
    /// A directive podkeeper owns or does not support, and why.
    #[error("spec.config.{0}: {1}")]
    Refused(String, String),
    #[error(
        "spec.config: {0:?} is not a redis.conf directive name (lower-case letters, digits and '-')"
    )]
    BadName(String),
    /// A value redis-server could read as more than one directive's, or
    /// misread, and why.
    #[error("spec.config.{0}: {1}")]
    BadValue(String, &'static str),
    #[error("spec.config: {0} is given twice (directive names are case-insensitive)")]
    Duplicate(String),
    #[error("spec.config.maxmemory: {0:?} is not a size (bytes, or a number with kb, mb, gb)")]
    BadMaxmemory(String),
}

/// A failure of one planned action.
#[derive(Debug, thiserror::Error)]
#[error("{pod}: {action}: {source}")]
pub struct ActionError {
    pub pod: String,
    pub action: &'static str,
    #[source]
    pub source: ClientError,
}
