//! Bringing a certificate renewed in the TLS Secret (`spec.tls`) to every
//! running member without a restart ([`converge`]: redis-server reads its
//! certificate files again on `CONFIG SET tls-cert-file`, and keeps what it
//! had when they do not load), and what the operator trusts meanwhile
//! ([`Ledger`]). The dialling itself is [`crate::redis::replication::dial`].

use std::collections::HashMap;
use std::io;
use std::sync::Mutex;

use futures::future::join_all;

use crate::redis::certs;
use crate::redis::replication::client::{Access, Connections, Node};
use crate::redis::replication::dial::Dial;
use crate::redis::replication::error::ClientError;
use crate::redis::replication::topology::Member;

/// Which certificate each member's process was last seen serving, so that
/// it is looked at again only when the Secret's changes or the process
/// restarts.
#[derive(Debug, Default)]
pub struct Ledger {
    served: Mutex<HashMap<String, (String, String)>>,
    /// The CA certificates (PEM) trusted before the Secret's current ones:
    /// a member still serving a certificate of the previous CA is trusted
    /// until it has taken the new one up; and the dial made of them, made
    /// again only when they (or the name) change, not every round.
    trusted: Mutex<Trusted>,
    /// The last Secret material that checked out, and its certificate's
    /// fingerprint: what the operator goes on with while the Secret cannot
    /// be read or does not check out.
    last: Mutex<Option<(certs::Material, String)>>,
}

impl Ledger {
    fn served(&self) -> std::sync::MutexGuard<'_, HashMap<String, (String, String)>> {
        self.served.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Forgets the members `keep` refuses.
    pub fn retain(&self, mut keep: impl FnMut(&str) -> bool) {
        self.served().retain(|p, _| keep(p));
    }

    /// Remembers material that checked out; returns the last that did.
    pub fn last_good(
        &self,
        now: Option<(&certs::Material, &str)>,
    ) -> Option<(certs::Material, String)> {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((m, f)) = now {
            *last = Some((m.clone(), f.to_string()));
        }
        last.clone()
    }

    /// How to dial the members for a Secret whose CA is `ca` (PEM),
    /// verifying `name`: trusting it and the CA trusted before it, if
    /// different.
    pub fn dial(&self, ca: &[u8], name: &str) -> Result<Dial, String> {
        let mut guard = self.trusted.lock().unwrap_or_else(|e| e.into_inner());
        let (trusted, made) = &mut *guard;
        if trusted.first().map(Vec::as_slice) != Some(ca) {
            trusted.insert(0, ca.to_vec());
            trusted.truncate(2);
            *made = None;
        }
        if let Some((n, dial)) = made.as_ref()
            && n == name
        {
            return Ok(dial.clone());
        }
        let dial = Dial::new(&trusted.iter().map(Vec::as_slice).collect::<Vec<_>>(), name)?;
        *made = Some((name.to_string(), dial.clone()));
        Ok(dial)
    }
}

/// The CA certificates trusted (PEM, newest first) and the dial made of
/// them for a name.
type Trusted = (Vec<Vec<u8>>, Option<(String, Dial)>);

/// What [`converge`] did in one round.
#[derive(Debug, Default)]
pub struct Converged {
    /// Members that were made to read their certificate files again and
    /// now serve the Secret's certificate.
    pub reloaded: Vec<String>,
    /// Members that do not serve it yet (the kubelet has not written the
    /// renewed Secret into the Pod yet, or the files did not load), and why.
    pub pending: Vec<(String, String)>,
    /// Members that serve TLS but did not answer: what they serve is not
    /// known.
    pub unanswered: Vec<String>,
}

/// The directives of the files redis-server reads for TLS.
const FILES: [&str; 3] = ["tls-cert-file", "tls-key-file", "tls-ca-cert-file"];

/// Has `node` read its certificate files again: `CONFIG SET` of each to
/// the path it has. redis-server keeps serving what it had when they do
/// not load (a key that does not match, a file cut mid-write).
async fn reload(node: Node) -> Result<(), ClientError> {
    let mut paths = Vec::with_capacity(FILES.len());
    for name in FILES {
        paths.push((name, node.config_get(name).await?.unwrap_or_default()));
    }
    let pairs: Vec<(&str, &str)> = paths.iter().map(|(n, p)| (*n, p.as_str())).collect();
    node.config_set_many(&pairs).await
}

/// Brings every member that serves TLS to the certificate in the Secret:
/// once per process and certificate, looks at what it serves (a TLS
/// handshake of its own); if that is not the Secret's, has it read its
/// files again and looks once more. Members whose process it has seen
/// serve the Secret's certificate are not asked again.
pub async fn converge(
    members: &[Member],
    access: &Access<'_>,
    connections: &Connections,
    ledger: &Ledger,
) -> Converged {
    let mut out = Converged::default();
    let Some(tls) = access.tls else {
        return out;
    };
    out.unanswered = members
        .iter()
        .filter(|m| tls.ports.contains_key(&m.pod) && m.info().is_none())
        .map(|m| m.pod.clone())
        .collect();
    let due: Vec<(&Member, &str, &str, u16)> = members
        .iter()
        .filter_map(|m| {
            let run_id = m.info()?.run_id.as_str();
            let ip = m.ip.as_deref()?;
            let port = *tls.ports.get(&m.pod)?;
            let seen = ledger.served().get(&m.pod).cloned();
            (seen.as_ref() != Some(&(run_id.to_string(), tls.wanted.clone())))
                .then_some((m, run_id, ip, port))
        })
        .collect();
    // What the member serves on its TLS port now, on a connection of its
    // own (the cached ones were verified when they were opened).
    let served = async |pod: &str, ip: &str, port: u16| {
        let look = async {
            let stream = access.route.connect(pod, ip, port).await?;
            tls.dial.served(stream).await
        };
        tokio::time::timeout(access.timeouts.deadline, look)
            .await
            .unwrap_or_else(|_| Err(io::Error::other("no TLS handshake in time")))
    };
    let results = join_all(due.iter().map(|(m, _, ip, port)| async move {
        let served_before = served(&m.pod, ip, *port).await;
        if served_before.as_deref().ok() == Some(tls.wanted.as_str()) {
            return Ok(false);
        }
        connections
            .call(
                access,
                &m.pod,
                &access.endpoint(&m.pod, ip, m.port),
                "CONFIG SET",
                reload,
            )
            .await
            .map_err(|e: ClientError| e.to_string())?;
        match served(&m.pod, ip, *port).await {
            Ok(f) if f == tls.wanted => Ok(true),
            Ok(_) => Err("it still serves the previous certificate".to_string()),
            Err(e) => Err(format!("its TLS port: {e}")),
        }
    }))
    .await;
    for ((m, run_id, _, _), r) in due.into_iter().zip(results) {
        match r {
            Ok(reloaded) => {
                ledger
                    .served()
                    .insert(m.pod.clone(), (run_id.to_string(), tls.wanted.clone()));
                if reloaded {
                    out.reloaded.push(m.pod.clone());
                }
            }
            Err(e) => out.pending.push((m.pod.clone(), e)),
        }
    }
    out
}
