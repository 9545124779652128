//! The metrics and health-probe endpoints.
//!
//! - `/metrics`: Prometheus text format.
//! - `/livez` (and `/healthz`): the process is serving.
//! - `/readyz`: every watch has completed its first list (a standby, which
//!   has none, once it campaigns for the Lease), and shutdown has not begun.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::Router;
use axum::http::StatusCode;
use axum::routing::get;
use tokio::net::TcpListener;
use tracing::info;

use crate::metrics::Metrics;

/// Readiness, flipped by the operator.
#[derive(Default)]
pub struct Readiness {
    synced: AtomicBool,
    stopping: AtomicBool,
}

impl Readiness {
    pub fn set_synced(&self) {
        self.synced.store(true, Ordering::SeqCst);
    }
    pub fn set_stopping(&self) {
        self.stopping.store(true, Ordering::SeqCst);
    }
    pub fn is_ready(&self) -> bool {
        self.synced.load(Ordering::SeqCst) && !self.stopping.load(Ordering::SeqCst)
    }
}

/// Binds `address` unless it is "0"; returns the bound address.
async fn bind(address: &str, what: &str) -> Result<Option<TcpListener>, crate::Error> {
    if address == "0" {
        return Ok(None);
    }
    let address = if address.starts_with(':') {
        format!("0.0.0.0{address}")
    } else {
        address.to_string()
    };
    let listener = TcpListener::bind(&address)
        .await
        .map_err(|e| crate::Error::Other(format!("binding the {what} address {address}: {e}")))?;
    if let Ok(local) = listener.local_addr() {
        info!(address = %local, "serving {what}");
    }
    Ok(Some(listener))
}

/// Where the servers listen (None: disabled).
#[derive(Clone, Copy, Debug, Default)]
pub struct Endpoints {
    pub metrics: Option<SocketAddr>,
    pub probes: Option<SocketAddr>,
}

/// Starts both servers in the background; returns where they listen.
pub async fn serve(
    metrics_address: &str,
    probe_address: &str,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
) -> Result<Endpoints, crate::Error> {
    let mut endpoints = Endpoints::default();
    if let Some(listener) = bind(metrics_address, "metrics").await? {
        endpoints.metrics = listener.local_addr().ok();
        let app = Router::new().route(
            "/metrics",
            get(move || {
                let metrics = metrics.clone();
                async move {
                    (
                        [(
                            "content-type",
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        metrics.render(),
                    )
                }
            }),
        );
        tokio::spawn(async move { axum::serve(listener, app).await });
    }
    if let Some(listener) = bind(probe_address, "health probes").await? {
        endpoints.probes = listener.local_addr().ok();
        let ready = readiness.clone();
        let app = Router::new()
            .route("/livez", get(|| async { "ok" }))
            .route("/healthz", get(|| async { "ok" }))
            .route(
                "/readyz",
                get(move || {
                    let ready = ready.clone();
                    async move {
                        if ready.is_ready() {
                            (StatusCode::OK, "ok")
                        } else {
                            (StatusCode::SERVICE_UNAVAILABLE, "not ready")
                        }
                    }
                }),
            );
        tokio::spawn(async move { axum::serve(listener, app).await });
    }
    Ok(endpoints)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ready_only_when_synced_and_not_stopping() {
        let r = Readiness::default();
        assert!(!r.is_ready());
        r.set_synced();
        assert!(r.is_ready());
        r.set_stopping();
        assert!(!r.is_ready());
        r.set_synced();
        assert!(!r.is_ready(), "stopping is final");
    }
}
