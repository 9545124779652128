//! Taking a snapshot from a member over its Redis port (see `rdb.rs`):
//! the bytes go to `sink` as they come, and the snapshot is checked whole
//! before [`take`] says it is one.

use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::rdb::{Check, CheckError, Framing, FramingError, Snapshot};
use crate::redis::replication::dial::{self, Dial};

/// Where to take the snapshot from.
#[derive(Clone, Debug)]
pub struct Source {
    /// `ip:port` of the member.
    pub addr: String,
    /// `AUTH` first: the user (none: `default`) and the password.
    pub auth: Option<(Option<String>, String)>,
    /// How long the member may send nothing (it sends a newline every
    /// second while it prepares the snapshot).
    pub idle: Duration,
    /// Over TLS, verified so (the member's TLS port).
    pub tls: Option<Dial>,
}

#[derive(Debug, thiserror::Error)]
pub enum TakeError {
    #[error("connecting to {addr}: {source}")]
    Connect {
        addr: String,
        source: std::io::Error,
    },
    #[error("reading from the member: {0}")]
    Io(#[from] std::io::Error),
    #[error("nothing from the member for {0:?}")]
    Idle(Duration),
    /// The member said no: `NOMASTERLINK` (a replica not linked to its
    /// primary), `NOAUTH`/`WRONGPASS`, an older Redis without `rdb-only`.
    #[error("the member refused: {0}")]
    Refused(String),
    #[error("the member's reply is not a snapshot transfer: {0}")]
    Protocol(String),
    #[error("the member closed the connection before the snapshot's end")]
    Cut,
    #[error(transparent)]
    Check(#[from] CheckError),
    /// Whoever took the bytes went away (the upload failed).
    #[error("the upload stopped taking the snapshot's bytes")]
    SinkGone,
}

impl From<FramingError> for TakeError {
    fn from(e: FramingError) -> Self {
        match e {
            FramingError::Refused(m) => TakeError::Refused(m),
            FramingError::Unexpected(m) => TakeError::Protocol(m),
        }
    }
}

/// One command as a RESP array.
fn command(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for a in args {
        out.extend(format!("${}\r\n", a.len()).into_bytes());
        out.extend(a.as_bytes());
        out.extend(b"\r\n");
    }
    out
}

async fn idle<T>(
    limit: Duration,
    f: impl std::future::Future<Output = std::io::Result<T>>,
) -> Result<T, TakeError> {
    match tokio::time::timeout(limit, f).await {
        Ok(r) => Ok(r?),
        Err(_) => Err(TakeError::Idle(limit)),
    }
}

/// Takes a snapshot from `source`, sending its bytes to `sink` in pieces
/// as they arrive; returns what was checked once the whole RDB file came
/// and its CRC-64 matched. On any error the bytes sent are not a snapshot.
pub async fn take(source: &Source, sink: mpsc::Sender<Vec<u8>>) -> Result<Snapshot, TakeError> {
    // Connecting (and the TLS handshake) failing is a connect error.
    let connecting = |e: TakeError| match e {
        TakeError::Io(io) => TakeError::Connect {
            addr: source.addr.clone(),
            source: io,
        },
        other => other,
    };
    let stream = idle(source.idle, TcpStream::connect(&source.addr))
        .await
        .map_err(connecting)?;
    stream.set_nodelay(true)?;
    let stream = idle(source.idle, dial::open(stream, source.tls.as_ref()))
        .await
        .map_err(connecting)?;
    let mut stream = BufReader::new(stream);
    let mut hello = Vec::new();
    let mut replies = 2;
    if let Some((user, password)) = &source.auth {
        hello.extend(match user {
            Some(u) => command(&["AUTH", u, password]),
            None => command(&["AUTH", password]),
        });
        replies += 1;
    }
    hello.extend(command(&["REPLCONF", "rdb-only", "1"]));
    hello.extend(command(&["REPLCONF", "capa", "eof"]));
    stream.get_mut().write_all(&hello).await?;
    for _ in 0..replies {
        let mut line = String::new();
        if idle(source.idle, stream.read_line(&mut line)).await? == 0 {
            return Err(TakeError::Cut);
        }
        match line.trim_end().strip_prefix('-') {
            Some(err) => return Err(TakeError::Refused(err.to_string())),
            None if line.starts_with('+') => {}
            None => return Err(TakeError::Protocol(line.trim_end().to_string())),
        }
    }
    stream.get_mut().write_all(&command(&["SYNC"])).await?;
    let mut framing = Framing::default();
    let mut check = Check::default();
    let mut buf = vec![0u8; 256 * 1024];
    while !framing.done() {
        let n = idle(source.idle, stream.read(&mut buf)).await?;
        if n == 0 {
            return Err(TakeError::Cut);
        }
        let payload = framing.feed(&buf[..n])?;
        if !payload.is_empty() {
            check.feed(&payload);
            sink.send(payload).await.map_err(|_| TakeError::SinkGone)?;
        }
    }
    Ok(check.finish()?)
}
