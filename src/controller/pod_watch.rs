//! The one Pod watch behind every controller.
//!
//! It lists and watches only Pods labelled `app.kubernetes.io/managed-by=
//! podkeeper`, strips their managedFields before caching them, and for each
//! event (deletions included, which kube-runtime's shared streams do not
//! forward) it marks expectations observed and asks the owning controller to
//! reconcile the owner.

use std::sync::Arc;

use futures::StreamExt;
use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::api::core::v1::Pod;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use tracing::warn;

use super::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use crate::crd::{Application, GROUP, Redis};
use crate::engine::expectations::Expectations;

/// Where Pod events are sent, per owner kind.
#[derive(Clone)]
pub struct Routes {
    pub redis: UnboundedSender<ObjectRef<Redis>>,
    pub application: UnboundedSender<ObjectRef<Application>>,
    /// Told after every (re)list: a Pod deleted while the watch was down
    /// leaves no Delete event, so every owner is reconciled then.
    pub relisted: Vec<UnboundedSender<()>>,
}

/// Starts the watch; the returned future drives it and never ends unless
/// the stream does.
pub fn start(
    client: Client,
    namespace: Option<&str>,
    expectations: Arc<Expectations>,
    routes: Routes,
) -> (Store<Pod>, impl Future<Output = ()> + Send + 'static) {
    let api: Api<Pod> = match namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let config =
        watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"));
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, config)
            .default_backoff()
            .modify(|pod: &mut Pod| {
                pod.metadata.managed_fields = None;
            }),
    );
    let driver = async move {
        let mut stream = std::pin::pin!(stream);
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Apply(pod)) | Ok(watcher::Event::InitApply(pod)) => {
                    route(&pod, false, &expectations, &routes)
                }
                Ok(watcher::Event::Delete(pod)) => route(&pod, true, &expectations, &routes),
                Ok(watcher::Event::InitDone) => {
                    for tx in &routes.relisted {
                        let _ = tx.unbounded_send(());
                    }
                }
                Ok(watcher::Event::Init) => {}
                Err(e) => warn!(error = %e, "pod watch error; retrying with backoff"),
            }
        }
    };
    (reader, driver)
}

fn route(pod: &Pod, deleted: bool, expectations: &Expectations, routes: &Routes) {
    let meta = pod.meta();
    let (Some(name), Some(uid), Some(namespace)) = (&meta.name, &meta.uid, &meta.namespace) else {
        return;
    };
    let Some(owner) = meta
        .owner_references
        .as_ref()
        .and_then(|refs| refs.iter().find(|r| r.controller == Some(true)))
    else {
        return;
    };
    if owner.api_version.split('/').next() != Some(GROUP) {
        return;
    }
    let gone = deleted || meta.deletion_timestamp.is_some();
    tracing::trace!(pod = %name, deleted, gone, owner = %owner.name, "pod event");
    let key = (namespace.clone(), owner.name.clone());
    match owner.kind.as_str() {
        "Redis" => {
            expectations.observe(&("Redis", key.0, key.1), name, uid, gone);
            let _ = routes
                .redis
                .unbounded_send(ObjectRef::new(&owner.name).within(namespace));
        }
        "Application" => {
            expectations.observe(&("Application", key.0, key.1), name, uid, gone);
            let _ = routes
                .application
                .unbounded_send(ObjectRef::new(&owner.name).within(namespace));
        }
        _ => {}
    }
}
