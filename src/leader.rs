//! Leader election on a coordination.k8s.io Lease, through the maintained
//! `kube-lease-manager` crate (server-side apply on the Lease, so two
//! candidates can never both hold it).

use kube::Client;
use kube_lease_manager::LeaseManagerBuilder;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tracing::info;

type ManagerTask = JoinHandle<kube_lease_manager::Result<kube_lease_manager::LeaseManager>>;

/// A held (or awaited) Lease. Dropping the channel releases it.
pub struct Leadership {
    channel: watch::Receiver<bool>,
    task: ManagerTask,
    pub identity: String,
}

/// This process's identity: the Pod name if known, else the host name, with
/// a random suffix so that two processes on one host differ.
pub fn identity() -> String {
    let base = std::env::var("POD_NAME")
        .or_else(|_| std::env::var("HOSTNAME"))
        .unwrap_or_else(|_| "podkeeper".into());
    format!("{base}-{:06x}", rand::random::<u32>() & 0xff_ffff)
}

impl Leadership {
    /// Starts campaigning for `name` in `namespace`.
    pub async fn campaign(
        client: Client,
        namespace: &str,
        name: &str,
        duration_seconds: u64,
    ) -> Result<Self, crate::Error> {
        let identity = identity();
        let grace = (duration_seconds / 3).max(1);
        let manager = LeaseManagerBuilder::new(client, name)
            .with_namespace(namespace)
            .with_identity(identity.clone())
            .with_duration(duration_seconds)
            .with_grace(grace)
            .build()
            .await
            .map_err(|e| crate::Error::Other(format!("leader election: {e}")))?;
        let (channel, task) = manager.watch().await;
        info!(%identity, lease = %format!("{namespace}/{name}"), "campaigning for leadership");
        Ok(Leadership {
            channel,
            task,
            identity,
        })
    }

    /// Resolves once this process holds the Lease.
    pub async fn acquired(&mut self) -> Result<(), crate::Error> {
        self.channel
            .wait_for(|leading| *leading)
            .await
            .map(|_| ())
            .map_err(|_| crate::Error::Other("leader election stopped".into()))
    }

    /// Resolves when this process no longer holds the Lease.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut channel = self.channel.clone();
        async move {
            let _ = channel.wait_for(|leading| !*leading).await;
        }
    }

    /// Gives the Lease up, so that a standby takes over at once.
    pub async fn release(self) {
        drop(self.channel);
        match self.task.await {
            Ok(Ok(_)) => info!("released the leader Lease"),
            Ok(Err(e)) => tracing::warn!(error = %e, "releasing the leader Lease"),
            Err(e) => tracing::warn!(error = %e, "leader election task"),
        }
    }
}
