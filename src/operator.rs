//! Wiring: one Pod watch, the controllers, and shutdown.

use std::sync::Arc;

use futures::{FutureExt, StreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector;
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tracing::{info, warn};

use crate::cli::RunArgs;
use crate::controller::{self, Context, FIELD_MANAGER, pod_watch};
use crate::crd::Redis;
use crate::engine::executor::Executor;
use crate::engine::expectations::Expectations;
use crate::metrics::Metrics;

/// `podkeeper run`: the usual kubeconfig resolution, stopped by SIGINT or
/// SIGTERM.
pub async fn run_from_env(args: RunArgs) -> Result<(), crate::Error> {
    let client = Client::try_default().await?;
    run(client, args, shutdown_signal()).await
}

/// Resolves on SIGINT or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(s) => s,
                Err(_) => {
                    let _ = ctrl_c.await;
                    return;
                }
            };
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// Runs every controller until `shutdown` resolves; in-flight reconciles
/// finish first.
pub async fn run(
    client: Client,
    args: RunArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), crate::Error> {
    let shutdown = shutdown.shared();
    let namespace = args.namespace.as_deref();
    let metrics = Metrics::new();
    let expectations = Arc::new(Expectations::default());
    let reporter = Reporter {
        controller: "podkeeper".into(),
        instance: std::env::var("POD_NAME").ok(),
    };
    let executor = Executor {
        client: client.clone(),
        recorder: Recorder::new(client.clone(), reporter),
        expectations: expectations.clone(),
        metrics: metrics.clone(),
        controller: controller::redis::CONTROLLER,
    };

    let (redis_tx, redis_rx) = futures::channel::mpsc::unbounded();
    let (redis_relist_tx, redis_relist_rx) = futures::channel::mpsc::unbounded();
    let (pods, pod_driver) = pod_watch::start(
        client.clone(),
        namespace,
        expectations,
        pod_watch::Routes {
            redis: redis_tx,
            relisted: vec![redis_relist_tx],
        },
    );
    let pod_task = tokio::spawn(pod_driver);
    info!(
        namespace = namespace.unwrap_or("<all>"),
        "waiting for the initial Pod list"
    );
    // Planning from a cache that has not finished its first list would see
    // too few Pods and create duplicates.
    tokio::select! {
        r = pods.wait_until_ready() => r.map_err(|e| crate::Error::Other(format!("pod cache: {e}")))?,
        _ = shutdown.clone() => { pod_task.abort(); return Ok(()); }
    }

    let ctx = Context::new(client.clone(), executor, pods);
    let redis_api: Api<Redis> = match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    };
    let (redis_store, redis_writer) = reflector::store();
    // Status-only updates do not trigger; spec (generation), deletion and
    // finalizer changes do.
    let redis_stream = reflector::reflector(
        redis_writer,
        watcher(redis_api, watcher::Config::default()).default_backoff(),
    )
    .applied_objects()
    .predicate_filter(spec_or_lifecycle, Default::default());
    info!("starting the redis controller");
    Controller::for_stream(redis_stream, redis_store)
        .reconcile_on(redis_rx)
        .reconcile_all_on(redis_relist_rx)
        .graceful_shutdown_on(shutdown.clone())
        .run(
            controller::redis::reconcile,
            controller::redis::error_policy,
            ctx,
        )
        .for_each(|result| async move {
            match result {
                Ok((obj, _)) => tracing::debug!(object = %obj, "reconciled"),
                Err(kube::runtime::controller::Error::ReconcilerFailed(e, obj))
                    if e.is_waiting() =>
                {
                    tracing::debug!(object = %obj, "cleanup in progress")
                }
                Err(e) => warn!(error = %e, "controller"),
            }
        })
        .await;
    pod_task.abort();
    info!("stopped");
    Ok(())
}

/// A predicate that changes with the spec (generation), the finalizers and
/// the start of deletion, and not with status.
fn spec_or_lifecycle(obj: &Redis) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let mut h = std::collections::hash_map::DefaultHasher::new();
    obj.metadata.generation.hash(&mut h);
    obj.metadata.finalizers.hash(&mut h);
    obj.metadata.deletion_timestamp.is_some().hash(&mut h);
    Some(h.finish())
}

/// Installs or updates every CRD with server-side apply and waits until
/// each is Established.
pub async fn install_crds(client: &Client) -> Result<(), crate::Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for crd in crate::crd::all() {
        let name = crd.name_any();
        api.patch(&name, &params, &Patch::Apply(&crd)).await?;
        let established = kube::runtime::conditions::is_crd_established();
        kube::runtime::wait::await_condition(api.clone(), &name, established)
            .await
            .map_err(|e| crate::Error::Other(format!("waiting for CRD {name}: {e}")))?;
    }
    Ok(())
}
