//! Wiring: leader election, one Pod watch, the controllers, and shutdown.

use std::sync::Arc;

use futures::channel::mpsc::{UnboundedSender, unbounded};
use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::{Action, Error as ControllerError};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tracing::{info, warn};

use crate::api::backup::RedisBackup;
use crate::api::names::{FIELD_MANAGER, MANAGED_BY_LABEL, MANAGED_BY_VALUE, SCHEDULE_LABEL};
use crate::api::{Application, Redis};
use crate::application::service::ServiceExtras;
use crate::backup::controller::{self as backup, BackupCtx};
use crate::backup::scheduler::{self, ScheduleCtx};
use crate::cli::{RedisConnect, RunArgs};
use crate::http::{self, Readiness};
use crate::leader::Leadership;
use crate::metrics::Metrics;
use crate::podset::Context;
use crate::podset::executor::Executor;
use crate::podset::expectations::Expectations;
use crate::podset::reconcile::{self as podset, Ctx, PodSet};
use crate::podset::volumes::ClaimCache;
use crate::podset::watch as pod_watch;
use crate::redis::hooks::{Disruptions, ReplicationExtras};
use crate::redis::metrics::RedisMetrics;
use crate::runtime;
use crate::runtime::events::EventRecorder;
use crate::runtime::service_applier::ServiceApplier;

/// `podkeeper run`: the usual kubeconfig resolution, stopped by SIGINT or
/// SIGTERM.
pub async fn run_from_env(args: RunArgs) -> Result<(), crate::Error> {
    let client = client_from_env().await?;
    run(client, args, shutdown_signal()).await
}

/// What podkeeper sends as its User-Agent, so that its requests can be told
/// apart in the apiserver's audit log.
pub const USER_AGENT: &str = concat!("podkeeper/", env!("CARGO_PKG_VERSION"));

/// A client from the usual kubeconfig resolution (KUBECONFIG,
/// ~/.kube/config, in-cluster) that identifies itself as [`USER_AGENT`].
pub async fn client_from_env() -> Result<Client, crate::Error> {
    let mut config = kube::Config::infer()
        .await
        .map_err(|e| crate::Error::Config(e.to_string()))?;
    config.headers.push((
        ::http::header::USER_AGENT,
        ::http::HeaderValue::from_static(USER_AGENT),
    ));
    Ok(Client::try_from(config)?)
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

fn scoped<K>(client: &Client, namespace: Option<&str>) -> Api<K>
where
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope, DynamicType = ()>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// The image of the `restore` init container: `--restore-image`, else
/// the image of the operator's own Pod (`POD_NAME` in `POD_NAMESPACE`,
/// set by the manifests), else none (a Redis with `spec.restore` then says
/// so in its `Restored` condition).
async fn restore_image(client: &Client, args: &RunArgs) -> Option<String> {
    if let Some(image) = &args.restore_image {
        return Some(image.clone());
    }
    let (name, namespace) = (
        std::env::var("POD_NAME").ok()?,
        std::env::var("POD_NAMESPACE").ok()?,
    );
    match Api::<Pod>::namespaced(client.clone(), &namespace)
        .get(&name)
        .await
    {
        Ok(pod) => {
            let image = pod.spec?.containers.into_iter().next()?.image;
            info!(
                image = image.as_deref().unwrap_or(""),
                "restore init containers use the operator's image"
            );
            image
        }
        Err(e) => {
            warn!(error = %e, pod = %name, "cannot read the operator's own Pod: no image for restores");
            None
        }
    }
}

/// A cached watch of the owner kind that passes on spec (generation),
/// finalizer and deletion changes, and not status-only updates.
fn owner_stream<K>(
    api: Api<K>,
) -> (
    Store<K>,
    impl Stream<Item = Result<K, watcher::Error>> + Send + 'static,
)
where
    K: PodSet,
{
    let (store, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, watcher::Config::default())
            .default_backoff()
            .modify(|o: &mut K| o.meta_mut().managed_fields = None),
    )
    .applied_objects()
    .predicate_filter(spec_or_lifecycle::<K>, Default::default());
    (store, stream)
}

/// Changes with the generation, the template's other inputs, what a person
/// asks by annotation, the finalizers and the start of deletion.
fn spec_or_lifecycle<K: PodSet>(obj: &K) -> Option<u64> {
    use std::hash::{Hash, Hasher};
    let meta = obj.meta();
    let mut h = std::collections::hash_map::DefaultHasher::new();
    meta.generation.hash(&mut h);
    obj.template_inputs().hash(&mut h);
    obj.requests().hash(&mut h);
    meta.finalizers.hash(&mut h);
    meta.deletion_timestamp.is_some().hash(&mut h);
    Some(h.finish())
}

async fn log_results<K: Resource, E: std::error::Error + 'static>(
    results: impl Stream<Item = Result<(ObjectRef<K>, Action), ControllerError<runtime::Error, E>>>,
) {
    results
        .for_each(|result| async move {
            match result {
                Ok((obj, _)) => tracing::debug!(object = %obj, "reconciled"),
                Err(ControllerError::ReconcilerFailed(e, obj)) if e.is_waiting() => {
                    tracing::debug!(object = %obj, "cleanup in progress")
                }
                Err(ControllerError::ReconcilerFailed(_, _)) => {}
                Err(e) => warn!(error = %e, "controller"),
            }
        })
        .await;
}

/// Runs every controller until `shutdown` resolves; in-flight reconciles
/// finish first. With `--leader-elect`, the process campaigns first and
/// starts its watches and controllers only once it holds the Lease, so a
/// standby holds no cache and buffers no events. Losing the Lease (another
/// holder, or no renewal within the renew deadline) stops everything at once
/// and ends the process with an error; stopping releases the Lease so that a
/// standby takes over at once.
pub async fn run(
    client: Client,
    args: RunArgs,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), crate::Error> {
    let shutdown = shutdown.shared();
    // The Redis metrics: a collector the rounds feed and /metrics reads.
    let redis_metrics = Arc::new(RedisMetrics::default());
    let metrics = Metrics::with_collectors(vec![Box::new(redis_metrics.clone())]);
    let readiness = Arc::new(Readiness::default());
    let endpoints = http::serve(
        args.metrics_address(),
        args.probe_address(),
        metrics.clone(),
        readiness.clone(),
    )
    .await?;
    if args.print_endpoints {
        print_endpoints(&endpoints);
    }
    {
        let readiness = readiness.clone();
        let shutdown = shutdown.clone();
        tokio::spawn(async move {
            shutdown.await;
            readiness.set_stopping();
        });
    }

    let leadership = match args.leader_elect {
        true => match lead(&client, &args, &readiness, shutdown.clone()).await? {
            Some(l) => Some(l),
            None => return Ok(()),
        },
        false => None,
    };
    let lost = match &leadership {
        Some(l) => l.lost().boxed(),
        None => futures::future::pending().boxed(),
    }
    .shared();
    let stop = {
        let (shutdown, lost) = (shutdown.clone(), lost.clone());
        async move {
            tokio::select! { _ = shutdown => {}, _ = lost => {} }
        }
        .shared()
    };

    let namespace = args.namespace.as_deref();
    let expectations = Arc::new(Expectations::default());
    let (redis_tx, redis_rx) = unbounded();
    let (app_tx, app_rx) = unbounded();
    // The Service appliers wake their owner's reconcile the same way.
    let (redis_wake, app_wake) = (redis_tx.clone(), app_tx.clone());
    // And so does the one Service watch, for the owner of each Service.
    let service_routes = (redis_tx.clone(), app_tx.clone());
    // And so do the Redis members' observing tasks, when an answer changes.
    let redis_observed = redis_tx.clone();
    let (redis_relist_tx, redis_relist_rx) = unbounded();
    // A node cordoned: every Redis looks at its members' nodes again.
    let cordon_wake = redis_relist_tx.clone();
    let (app_relist_tx, app_relist_rx) = unbounded();
    let (pods, pod_driver) = pod_watch::start(
        client.clone(),
        namespace,
        expectations.clone(),
        pod_watch::Routes {
            redis: redis_tx,
            application: app_tx,
            relisted: vec![redis_relist_tx, app_relist_tx],
        },
    );
    let pod_task = AbortOnDrop(tokio::spawn(pod_driver));
    info!(
        namespace = namespace.unwrap_or("<all>"),
        "waiting for the initial Pod list"
    );
    // Planning from a cache that has not finished its first list would see
    // too few Pods and create duplicates.
    tokio::select! {
        r = pods.wait_until_ready() => r.map_err(|e| crate::Error::Other(format!("pod cache: {e}")))?,
        _ = stop.clone() => return stopped(leadership, &lost, &shutdown).await,
    }
    readiness.set_synced();

    let recorder = EventRecorder::new(
        client.clone(),
        "podkeeper",
        leadership.as_ref().map(|l| l.identity.clone()),
    );
    let executor = Executor {
        client: client.clone(),
        recorder: Arc::new(recorder),
        expectations,
        metrics,
        controller: crate::redis::CONTROLLER,
    };
    let (services, service_driver) = service_watch(&client, namespace, service_routes);
    let service_task = AbortOnDrop(tokio::spawn(service_driver));
    let (claims, claim_driver) = claim_watch(&client, namespace);
    let claim_task = AbortOnDrop(tokio::spawn(claim_driver));
    let (disruptions, disruption_driver) = disruption_watch(&client, namespace, cordon_wake);
    let disruption_task = AbortOnDrop(tokio::spawn(disruption_driver));
    // A new Pod takes a claim no Pod holds: planned from a cache without its
    // first list, it would get an empty new one instead.
    tokio::select! {
        r = claims.0.wait_until_ready() => r.map_err(|e| crate::Error::Other(format!("claim cache: {e}")))?,
        _ = stop.clone() => return stopped(leadership, &lost, &shutdown).await,
    }
    let redis_ctx = Ctx::<Redis>::new(
        Context::new(
            client.clone(),
            executor.clone(),
            pods.clone(),
            claims.clone(),
        ),
        ReplicationExtras::new(
            ServiceApplier::new(
                client.clone(),
                executor.recorder.clone(),
                services.clone(),
                redis_wake,
                args.concurrent_reconciles.into(),
            ),
            (args.redis_connect == Some(RedisConnect::PortForward)).then(|| client.clone()),
            Some(redis_observed),
        )
        .with_disruptions(disruptions)
        .with_metrics(redis_metrics)
        .with_restore_image(restore_image(&client, &args).await),
    );
    let (redis_store, redis_stream) = owner_stream(scoped::<Redis>(&client, namespace));
    // One cache of RedisBackups, for their controller and for the
    // schedules (which list a Redis's scheduled backups from it and are
    // woken by their changes).
    let (backup_store, backup_writer) = reflector::store_shared(256);
    let scheduled_changes = backup_writer
        .subscribe()
        .expect("a shared store gives subscribers");
    let backup_stream = reflector::reflector(
        backup_writer,
        watcher(
            scoped::<RedisBackup>(&client, namespace),
            watcher::Config::default(),
        )
        .default_backoff()
        .modify(|b: &mut RedisBackup| b.meta_mut().managed_fields = None),
    )
    .applied_objects();
    let backup_ctx = BackupCtx::new(client.clone(), executor.recorder.clone());
    let schedule_ctx = ScheduleCtx::new(
        client.clone(),
        executor.recorder.clone(),
        backup_store.clone(),
    );
    let app_ctx = application_context(
        &client,
        executor,
        pods,
        claims,
        services.clone(),
        app_wake,
        args.concurrent_reconciles.into(),
    );
    let (app_store, app_stream) = owner_stream(scoped::<Application>(&client, namespace));
    {
        // Ready again once every controller's cache has its first list.
        let (readiness, redis_store, app_store, service_store) = (
            readiness.clone(),
            redis_store.clone(),
            app_store.clone(),
            services.clone(),
        );
        tokio::spawn(async move {
            let _ = redis_store.wait_until_ready().await;
            let _ = app_store.wait_until_ready().await;
            let _ = service_store.wait_until_ready().await;
            readiness.set_synced();
        });
    }
    let controller_config =
        kube::runtime::controller::Config::default().concurrency(args.concurrent_reconciles);
    let redis = Controller::for_stream(redis_stream, redis_store)
        .reconcile_on(redis_rx)
        .reconcile_all_on(redis_relist_rx)
        .with_config(controller_config.clone())
        .graceful_shutdown_on(stop.clone())
        .run(
            podset::reconcile::<Redis>,
            podset::error_policy::<Redis>,
            redis_ctx,
        );
    let applications = Controller::for_stream(app_stream, app_store)
        .reconcile_on(app_rx)
        .reconcile_all_on(app_relist_rx)
        .with_config(controller_config.clone())
        .graceful_shutdown_on(stop.clone())
        .run(
            podset::reconcile::<Application>,
            podset::error_policy::<Application>,
            app_ctx,
        );
    // Backups: each try runs in a task of its own; the reconcile only
    // starts tries and reads their outcome from the status.
    let backups = Controller::for_stream(backup_stream, backup_store)
        .with_config(controller_config.clone())
        .graceful_shutdown_on(stop.clone())
        .run(backup::reconcile, backup::error_policy, backup_ctx);
    // Backup schedules: a Redis's spec changes and its scheduled backups'
    // changes wake its schedule; otherwise it sleeps until the next
    // occurrence.
    let (schedule_store, schedule_stream) = owner_stream(scoped::<Redis>(&client, namespace));
    let schedules = Controller::for_stream(schedule_stream, schedule_store)
        .watches_shared_stream(scheduled_changes, |b: Arc<RedisBackup>| {
            let redis = b.labels().get(SCHEDULE_LABEL)?;
            Some(ObjectRef::new(redis).within(&b.namespace()?))
        })
        .with_config(controller_config)
        .graceful_shutdown_on(stop.clone())
        .run(scheduler::reconcile, scheduler::error_policy, schedule_ctx);
    info!("controllers started");
    let controllers = async {
        futures::join!(
            log_results(redis),
            log_results(applications),
            log_results(backups),
            log_results(schedules)
        );
    };
    tokio::select! {
        biased;
        // A leader that lost its Lease stops acting now: dropping the
        // controllers cancels their in-flight requests.
        _ = lost.clone() => {}
        _ = controllers => {}
    }
    drop(service_task);
    drop(claim_task);
    drop(disruption_task);
    drop(pod_task);
    stopped(leadership, &lost, &shutdown).await
}

/// Campaigns for the Lease; returns it once held, or None if `shutdown`
/// came first. A standby is ready (for its probe) once it campaigns: it has
/// nothing else to wait for.
async fn lead(
    client: &Client,
    args: &RunArgs,
    readiness: &Readiness,
    shutdown: impl Future<Output = ()>,
) -> Result<Option<Leadership>, crate::Error> {
    let lease_namespace = args.leader_election_namespace.clone().ok_or_else(|| {
        crate::Error::Other(
            "--leader-elect needs --leader-election-namespace or POD_NAMESPACE".into(),
        )
    })?;
    let mut l = Leadership::campaign(
        client.clone(),
        &lease_namespace,
        &args.leader_election_id,
        args.leader_election_timing(),
    )?;
    readiness.set_synced();
    tokio::select! {
        r = l.acquired() => r?,
        _ = shutdown => { l.release().await; return Ok(None); }
    }
    info!(identity = %l.identity, "became the leader");
    Ok(Some(l))
}

/// The end of [`run`]: an error if the Lease was lost, else the Lease is
/// released.
async fn stopped(
    leadership: Option<Leadership>,
    lost: &futures::future::Shared<futures::future::BoxFuture<'static, ()>>,
    shutdown: &futures::future::Shared<impl Future<Output = ()>>,
) -> Result<(), crate::Error> {
    let lost_leadership = leadership.is_some()
        && lost.clone().now_or_never().is_some()
        && shutdown.clone().now_or_never().is_none();
    if lost_leadership {
        return Err(crate::Error::Other("lost the leader Lease".into()));
    }
    if let Some(l) = leadership {
        l.release().await;
    }
    info!("stopped");
    Ok(())
}

/// Aborts the task when dropped, so that every way out of [`run`] stops the
/// Pod watch.
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Tells a developer where the metrics and probes are.
fn print_endpoints(endpoints: &http::Endpoints) {
    if let Some(address) = endpoints.metrics {
        println!("podkeeper: metrics at http://{address}/metrics");
    }
    if let Some(address) = endpoints.probes {
        println!("podkeeper: probes at http://{address}/readyz (and /livez, /healthz)");
    }
}

/// The cache of the PersistentVolumeClaims podkeeper made (label selected,
/// managedFields stripped), and the task that fills it. Claims change with
/// their Pods, whose events reconcile their owners: no routing of its own.
fn claim_watch(
    client: &Client,
    namespace: Option<&str>,
) -> (ClaimCache, impl Future<Output = ()> + Send + 'static) {
    let (store, writer) = reflector::store();
    let config =
        watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"));
    let driver = reflector::reflector(
        writer,
        watcher(scoped::<PersistentVolumeClaim>(client, namespace), config)
            .default_backoff()
            .modify(|c: &mut PersistentVolumeClaim| c.metadata.managed_fields = None),
    )
    .for_each(|_| async {});
    (ClaimCache(store), driver)
}

/// The caches of the PodDisruptionBudgets podkeeper made (label selected)
/// and of the nodes (without their status), and the task that fills them
/// and asks every Redis to look again when a node is cordoned (a primary
/// there is switched over before a drain evicts it).
fn disruption_watch(
    client: &Client,
    namespace: Option<&str>,
    cordoned: UnboundedSender<()>,
) -> (Disruptions, impl Future<Output = ()> + Send + 'static) {
    let (budgets, budget_writer) = reflector::store();
    let config =
        watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"));
    let budget_driver = reflector::reflector(
        budget_writer,
        watcher(scoped::<PodDisruptionBudget>(client, namespace), config)
            .default_backoff()
            .modify(|b: &mut PodDisruptionBudget| b.metadata.managed_fields = None),
    )
    .for_each(|_| async {});
    let (nodes, node_writer) = reflector::store();
    let mut was_cordoned = std::collections::HashSet::new();
    let node_driver = reflector::reflector(
        node_writer,
        watcher(Api::<Node>::all(client.clone()), watcher::Config::default())
            .default_backoff()
            .modify(|n: &mut Node| {
                n.metadata.managed_fields = None;
                n.status = None;
            }),
    )
    .applied_objects()
    .for_each(move |node| {
        if let Ok(node) = node {
            let now = node.spec.as_ref().and_then(|s| s.unschedulable) == Some(true);
            if now && was_cordoned.insert(node.name_any()) {
                let _ = cordoned.unbounded_send(());
            } else if !now {
                was_cordoned.remove(&node.name_any());
            }
        }
        async {}
    });
    let driver = async move {
        futures::join!(budget_driver, node_driver);
    };
    (Disruptions { budgets, nodes }, driver)
}

/// The one cache of the Services podkeeper manages (label selected,
/// managedFields stripped) for every kind that owns Services, and the task
/// that fills it and asks each Service's owner to reconcile on every change,
/// deletions included, so that a deleted Service comes back.
fn service_watch(
    client: &Client,
    namespace: Option<&str>,
    (redis, application): (
        UnboundedSender<ObjectRef<Redis>>,
        UnboundedSender<ObjectRef<Application>>,
    ),
) -> (Store<Service>, impl Future<Output = ()> + Send + 'static) {
    let (services, writer) = reflector::store();
    let config =
        watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"));
    let driver = reflector::reflector(
        writer,
        watcher(scoped::<Service>(client, namespace), config)
            .default_backoff()
            .modify(|s: &mut Service| s.metadata.managed_fields = None),
    )
    .touched_objects()
    .for_each(move |event| {
        match event {
            Ok(service) => route_service(&service, &redis, &application),
            Err(e) => warn!(error = %e, "service watch"),
        }
        std::future::ready(())
    });
    (services, driver)
}

/// Asks the controller of the Service's owner (a Redis or an Application of
/// podkeeper.dev) to reconcile it.
fn route_service(
    service: &Service,
    redis: &UnboundedSender<ObjectRef<Redis>>,
    application: &UnboundedSender<ObjectRef<Application>>,
) {
    let Some(namespace) = service.metadata.namespace.as_deref() else {
        return;
    };
    match pod_watch::podkeeper_owner(&service.metadata) {
        Some(("Redis", name)) => {
            let _ = redis.unbounded_send(ObjectRef::new(name).within(namespace));
        }
        Some((_, name)) => {
            let _ = application.unbounded_send(ObjectRef::new(name).within(namespace));
        }
        None => {}
    }
}

/// The Application context, its Service applier on the shared Service cache.
fn application_context(
    client: &Client,
    executor: Executor,
    pods: pod_watch::PodCache,
    claims: ClaimCache,
    services: Store<Service>,
    wake: UnboundedSender<ObjectRef<Application>>,
    in_flight: usize,
) -> Arc<Ctx<Application>> {
    let executor = Executor {
        controller: crate::application::CONTROLLER,
        ..executor
    };
    let applier = ServiceApplier::new(
        client.clone(),
        executor.recorder.clone(),
        services,
        wake,
        in_flight,
    );
    Ctx::<Application>::new(
        Context::new(client.clone(), executor, pods, claims),
        ServiceExtras { applier },
    )
}

/// Installs or updates every CRD with server-side apply and waits until
/// each is Established.
pub async fn install_crds(client: &Client) -> Result<(), crate::Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let params = PatchParams::apply(FIELD_MANAGER).force();
    for crd in crate::api::all() {
        let name = crd.name_any();
        api.patch(&name, &params, &Patch::Apply(&crd)).await?;
        let established = kube::runtime::conditions::is_crd_established();
        kube::runtime::wait::await_condition(api.clone(), &name, established)
            .await
            .map_err(|e| crate::Error::Other(format!("waiting for CRD {name}: {e}")))?;
    }
    Ok(())
}
