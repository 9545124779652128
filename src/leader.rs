//! Leader election on a coordination.k8s.io Lease, the way client-go's
//! leaderelection does it: read the Lease, decide (see [`record`]), write it
//! back with its resourceVersion, so that of two candidates writing at once
//! exactly one succeeds.
//!
//! - A standby looks at the Lease every retry period (with jitter).
//! - The leader renews every retry period; if it has not renewed within the
//!   renew deadline, or finds another holder, it has lost the Lease and
//!   says so at once (the operator then stops acting and exits), before the
//!   Lease can expire for anyone else.
//! - Releasing clears the holder, so that a standby takes over at its next
//!   look instead of waiting out the lease duration.

mod record;

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{debug, error, info, warn};

pub use record::Timing;
use record::{Decision, Observation};

/// Where a candidate stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Standby,
    Leading,
    /// Could not renew in time, or found another holder. Final.
    Lost,
}

/// A campaign for a Lease: running from [`Leadership::campaign`] until
/// [`Leadership::release`] or until the Lease is lost.
pub struct Leadership {
    status: watch::Receiver<Status>,
    release: oneshot::Sender<()>,
    task: JoinHandle<()>,
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
    pub fn campaign(
        client: Client,
        namespace: &str,
        name: &str,
        timing: Timing,
    ) -> Result<Self, crate::Error> {
        timing.validate().map_err(crate::Error::Other)?;
        let identity = identity();
        let candidate = Candidate {
            api: Api::namespaced(client, namespace),
            name: name.to_string(),
            identity: identity.clone(),
            timing,
            observed: None,
            held: None,
        };
        let (status_tx, status) = watch::channel(Status::Standby);
        let (release, release_rx) = oneshot::channel();
        let task = tokio::spawn(candidate.run(status_tx, release_rx));
        info!(%identity, lease = %format!("{namespace}/{name}"), "campaigning for leadership");
        Ok(Leadership {
            status,
            release,
            task,
            identity,
        })
    }

    /// Resolves once this process holds the Lease.
    pub async fn acquired(&mut self) -> Result<(), crate::Error> {
        match self.status.wait_for(|s| *s != Status::Standby).await {
            Ok(s) if *s == Status::Leading => Ok(()),
            _ => Err(crate::Error::Other("leader election stopped".into())),
        }
    }

    /// Resolves when this process has lost the Lease (or the campaign has
    /// ended).
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut status = self.status.clone();
        async move {
            let _ = status.wait_for(|s| *s == Status::Lost).await;
        }
    }

    /// Ends the campaign; if this process holds the Lease, gives it up so
    /// that a standby takes over at once.
    pub async fn release(self) {
        let _ = self.release.send(());
        if let Err(e) = self.task.await {
            warn!(error = %e, "leader election task");
        }
    }
}

/// What one look at the Lease found.
enum Attempt {
    /// This candidate holds it (just written).
    Leading,
    HeldBy(String),
}

struct Candidate {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: Timing,
    observed: Option<Observation>,
    /// The Lease as last written by this candidate, while it leads.
    held: Option<Lease>,
}

/// `period` stretched by a random factor in [1, JITTER).
fn jittered(period: Duration) -> Duration {
    period.mul_f64(1.0 + rand::random::<f64>() * (record::JITTER - 1.0))
}

impl Candidate {
    async fn run(mut self, status: watch::Sender<Status>, mut release: oneshot::Receiver<()>) {
        let timing = self.timing;
        // Standby: look every retry period until the Lease is ours.
        let mut renewed_at = loop {
            let started = Instant::now();
            let attempt = tokio::select! {
                _ = &mut release => return self.release().await,
                r = tokio::time::timeout(timing.renew_deadline, self.try_acquire_or_renew()) => r,
            };
            match attempt {
                Ok(Ok(Attempt::Leading)) => break started,
                Ok(Ok(Attempt::HeldBy(holder))) => debug!(%holder, "the leader Lease is held"),
                Ok(Err(e)) => warn!(error = %e, "looking at the leader Lease"),
                Err(_) => warn!("looking at the leader Lease timed out"),
            }
            tokio::select! {
                _ = &mut release => return self.release().await,
                _ = tokio::time::sleep(jittered(timing.retry_period)) => {}
            }
        };
        status.send_replace(Status::Leading);

        // Leading: renew every retry period; give up at the renew deadline.
        loop {
            tokio::select! {
                _ = &mut release => return self.release().await,
                _ = tokio::time::sleep(timing.retry_period) => {}
            }
            let deadline = tokio::time::Instant::from_std(renewed_at + timing.renew_deadline);
            loop {
                let started = Instant::now();
                let attempt = tokio::select! {
                    _ = &mut release => return self.release().await,
                    r = tokio::time::timeout_at(deadline, self.try_acquire_or_renew()) => r,
                };
                match attempt {
                    Ok(Ok(Attempt::Leading)) => {
                        renewed_at = started;
                        break;
                    }
                    Ok(Ok(Attempt::HeldBy(holder))) => {
                        error!(%holder, "another candidate holds the leader Lease");
                        status.send_replace(Status::Lost);
                        return;
                    }
                    Ok(Err(e)) => warn!(error = %e, "renewing the leader Lease; retrying"),
                    Err(_) => {
                        error!(
                            renew_deadline = ?timing.renew_deadline,
                            "could not renew the leader Lease within the renew deadline"
                        );
                        status.send_replace(Status::Lost);
                        return;
                    }
                }
                let next = (tokio::time::Instant::now() + timing.retry_period).min(deadline);
                tokio::select! {
                    _ = &mut release => return self.release().await,
                    _ = tokio::time::sleep_until(next) => {}
                }
            }
        }
    }

    /// One look: renew or acquire the Lease if this candidate may, else
    /// report its holder.
    async fn try_acquire_or_renew(&mut self) -> Result<Attempt, kube::Error> {
        // The leader writes on top of its own last write: one request. If
        // someone else wrote in between, the resourceVersion conflicts and
        // the Lease is read again.
        if let Some(held) = self.held.take() {
            let spec = held.spec.clone().unwrap_or_default();
            let observed = Observation::note(None, &spec, Instant::now());
            if let Decision::Write(next) = self.decide(&spec, &observed) {
                let lease = Lease {
                    spec: Some(next),
                    ..held
                };
                match self
                    .api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await
                {
                    Ok(written) => {
                        self.held = Some(written);
                        return Ok(Attempt::Leading);
                    }
                    Err(e) => debug!(error = %e, "renewing on the last write; reading the Lease"),
                }
            }
        }
        let now = Instant::now();
        let Some(lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..Default::default()
                },
                spec: Some(record::fresh(
                    &self.identity,
                    &self.timing,
                    Timestamp::now(),
                )),
            };
            let written = self.api.create(&PostParams::default(), &lease).await?;
            self.held = Some(written);
            return Ok(Attempt::Leading);
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let observed = Observation::note(self.observed.take(), &spec, now);
        let decision = self.decide(&spec, &observed);
        self.observed = Some(observed);
        match decision {
            Decision::HeldBy(holder) => Ok(Attempt::HeldBy(holder)),
            Decision::Write(next) => {
                let lease = Lease {
                    spec: Some(next),
                    ..lease
                };
                let written = self
                    .api
                    .replace(&self.name, &PostParams::default(), &lease)
                    .await?;
                self.held = Some(written);
                Ok(Attempt::Leading)
            }
        }
    }

    fn decide(
        &self,
        spec: &k8s_openapi::api::coordination::v1::LeaseSpec,
        observed: &Observation,
    ) -> Decision {
        record::decide(
            spec,
            observed,
            &self.identity,
            &self.timing,
            Instant::now(),
            Timestamp::now(),
        )
    }

    /// Clears the holder if it is this candidate (bounded by the renew
    /// deadline: a stopping process does not hang on an unreachable API
    /// server).
    async fn release(mut self) {
        let timing = self.timing;
        match tokio::time::timeout(timing.renew_deadline, self.clear_holder()).await {
            Ok(Ok(true)) => info!("released the leader Lease"),
            Ok(Ok(false)) => debug!("not holding the leader Lease; nothing to release"),
            Ok(Err(e)) => warn!(error = %e, "releasing the leader Lease"),
            Err(_) => warn!("releasing the leader Lease timed out"),
        }
    }

    async fn clear_holder(&mut self) -> Result<bool, kube::Error> {
        if let Some(held) = self.held.take() {
            let spec = record::released(&held.spec.clone().unwrap_or_default(), Timestamp::now());
            let lease = Lease {
                spec: Some(spec),
                ..held
            };
            match self
                .api
                .replace(&self.name, &PostParams::default(), &lease)
                .await
            {
                Ok(_) => return Ok(true),
                Err(e) => debug!(error = %e, "releasing on the last write; reading the Lease"),
            }
        }
        // Not leading as far as we know, or our last write is stale: a write
        // whose answer was lost may still have made us the holder.
        let Some(lease) = self.api.get_opt(&self.name).await? else {
            return Ok(false);
        };
        let spec = lease.spec.clone().unwrap_or_default();
        if record::holder(&spec) != Some(self.identity.as_str()) {
            return Ok(false);
        }
        let lease = Lease {
            spec: Some(record::released(&spec, Timestamp::now())),
            ..lease
        };
        self.api
            .replace(&self.name, &PostParams::default(), &lease)
            .await?;
        Ok(true)
    }
}
