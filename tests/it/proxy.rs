//! A TCP proxy on 127.0.0.1 between one operator and the API server, to cut
//! that operator off (as a network partition would) and to count the bytes
//! it receives.

#![allow(dead_code)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use kube::config::Kubeconfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::harness::{cluster, logs_dir};

pub struct TcpProxy {
    pub address: SocketAddr,
    cut: watch::Sender<bool>,
    /// Bytes sent from the API server to the client.
    to_client: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl TcpProxy {
    /// Listens on a free port and forwards every connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let address = listener.local_addr().expect("proxy address");
        let (cut, cut_rx) = watch::channel(false);
        let to_client = Arc::new(AtomicU64::new(0));
        let counter = to_client.clone();
        let task = tokio::spawn(async move {
            // Connections accepted after the cut are held open and never
            // answered: the client's requests hang, as across a partition.
            let mut held = Vec::new();
            loop {
                let Ok((client, _)) = listener.accept().await else {
                    return;
                };
                if *cut_rx.borrow() {
                    held.push(client);
                    continue;
                }
                tokio::spawn(forward(client, upstream, cut_rx.clone(), counter.clone()));
            }
        });
        TcpProxy {
            address,
            cut,
            to_client,
            task,
        }
    }

    /// Closes every open connection and answers no new one.
    pub fn cut(&self) {
        self.cut.send_replace(true);
    }

    /// Bytes the client has received through the proxy.
    pub fn bytes_to_client(&self) -> u64 {
        self.to_client.load(Ordering::SeqCst)
    }

    /// A kubeconfig like the operator's, with the server reached through
    /// this proxy.
    pub fn operator_kubeconfig(&self) -> PathBuf {
        let c = cluster();
        let source = c
            .operator_kubeconfig_path
            .as_ref()
            .unwrap_or(&c.kubeconfig_path);
        let mut kc = Kubeconfig::read_from(source).expect("operator kubeconfig");
        for named in &mut kc.clusters {
            if let Some(cluster) = named.cluster.as_mut() {
                cluster.server = Some(format!("https://{}", self.address));
            }
        }
        let path = logs_dir().join(format!("kubeconfig-proxy-{}", self.address.port()));
        let yaml = serde_yaml_ng::to_string(&kc).expect("kubeconfig yaml");
        std::fs::write(&path, yaml).expect("write kubeconfig");
        path
    }
}

impl Drop for TcpProxy {
    fn drop(&mut self) {
        self.cut();
        self.task.abort();
    }
}

/// The API server's address, from the operator's kubeconfig.
pub fn apiserver_address() -> SocketAddr {
    let c = cluster();
    let source = c
        .operator_kubeconfig_path
        .as_ref()
        .unwrap_or(&c.kubeconfig_path);
    let kc = Kubeconfig::read_from(source).expect("operator kubeconfig");
    let server = kc
        .clusters
        .iter()
        .find_map(|n| n.cluster.as_ref()?.server.clone())
        .expect("a server in the kubeconfig");
    let authority = server
        .trim_start_matches("https://")
        .split('/')
        .next()
        .expect("host:port");
    use std::net::ToSocketAddrs;
    authority
        .to_socket_addrs()
        .expect("resolvable API server")
        .next()
        .expect("an address")
}

async fn forward(
    mut client: TcpStream,
    upstream: SocketAddr,
    mut cut: watch::Receiver<bool>,
    to_client: Arc<AtomicU64>,
) {
    let Ok(mut server) = TcpStream::connect(upstream).await else {
        return;
    };
    let (mut client_read, mut client_write) = client.split();
    let (mut server_read, mut server_write) = server.split();
    let up = async {
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(n) = client_read.read(&mut buf).await {
            if n == 0 || server_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
    };
    let down = async {
        let mut buf = vec![0u8; 16 * 1024];
        while let Ok(n) = server_read.read(&mut buf).await {
            if n == 0 || client_write.write_all(&buf[..n]).await.is_err() {
                break;
            }
            to_client.fetch_add(n as u64, Ordering::SeqCst);
        }
    };
    tokio::select! {
        _ = async { futures::join!(up, down) } => {}
        _ = cut.wait_for(|c| *c) => {}
    }
}
