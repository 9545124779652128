//! Dialling a member over TLS (`spec.tls`), with rustls: what the
//! operator trusts and the name it verifies ([`Dial`]), a connection over
//! TLS or plain ([`open`]), and what a round knows of a Redis's TLS
//! ([`TlsAccess`]).

use std::collections::HashMap;
use std::io;
use std::sync::Arc;

use rustls::ClientConfig;
use rustls_pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_util::either::Either;

use crate::redis::certs;

/// Where the members find the Secret's files (a Secret volume: the
/// kubelet writes a renewed Secret there, and [`converge`] has redis-server
/// read them again).
pub const MOUNT: &str = "/tls";

/// How to dial a member over TLS: the CAs trusted and the name verified.
/// Two dials are the same when they trust the same CAs for the same name.
/// (One pointer: every member's observing task holds one.)
#[derive(Clone)]
pub struct Dial(Arc<DialInner>);

struct DialInner {
    config: Arc<ClientConfig>,
    name: ServerName<'static>,
    id: String,
}

impl PartialEq for Dial {
    fn eq(&self, other: &Self) -> bool {
        self.0.id == other.0.id
    }
}
impl Eq for Dial {}
impl std::hash::Hash for Dial {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.0.id.hash(state);
    }
}
impl std::fmt::Debug for Dial {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dial").field("name", &self.0.name).finish()
    }
}

impl Dial {
    /// Trusting every CA certificate in `cas` (PEM), verifying `name`.
    pub fn new(cas: &[&[u8]], name: &str) -> Result<Dial, String> {
        let mut roots = rustls::RootCertStore::empty();
        let mut id = name.to_string();
        for ca in cas {
            for cert in certs::certificates(ca) {
                id.push(' ');
                id.push_str(&certs::fingerprint(&cert));
                let _ = roots.add(cert);
            }
        }
        if roots.is_empty() {
            return Err(format!("{} holds no CA certificate", certs::CA_KEY));
        }
        let config =
            ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
                .with_safe_default_protocol_versions()
                .map_err(|e| e.to_string())?
                .with_root_certificates(roots)
                .with_no_client_auth();
        let name = ServerName::try_from(name.to_string())
            .map_err(|_| format!("{name} is not a DNS name"))?;
        Ok(Dial(Arc::new(DialInner {
            config: Arc::new(config),
            name,
            id,
        })))
    }

    /// TLS on `stream`, the member verified.
    pub async fn wrap<S>(&self, stream: S) -> io::Result<TlsStream<S>>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        TlsConnector::from(self.0.config.clone())
            .connect(self.0.name.clone(), stream)
            .await
    }

    /// The fingerprint of the certificate the member at the other end of
    /// `stream` serves.
    pub async fn served<S>(&self, stream: S) -> io::Result<String>
    where
        S: AsyncRead + AsyncWrite + Unpin,
    {
        let tls = self.wrap(stream).await?;
        tls.get_ref()
            .1
            .peer_certificates()
            .and_then(|c| c.first())
            .map(certs::fingerprint)
            .ok_or_else(|| io::Error::other("the member sent no certificate"))
    }
}

/// A connection to a member, over TLS or plain.
pub type Stream<S> = Either<Box<TlsStream<S>>, S>;

/// `stream`, over TLS with `dial` when there is one.
pub async fn open<S>(stream: S, dial: Option<&Dial>) -> io::Result<Stream<S>>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    Ok(match dial {
        Some(d) => Either::Left(Box::new(d.wrap(stream).await?)),
        None => Either::Right(stream),
    })
}

/// A Redis's TLS as the operator uses it in one round.
#[derive(Clone, Debug)]
pub struct TlsAccess {
    pub dial: Dial,
    /// The fingerprint of the certificate in the Secret: what every member
    /// should serve.
    pub wanted: String,
    /// The members that serve TLS, and on which port: the operator talks
    /// TLS to each of them there.
    pub ports: HashMap<String, u16>,
    /// Whether the set replicates over TLS (see
    /// [`crate::redis::pod::replication_over_tls`]).
    pub replication: bool,
}
