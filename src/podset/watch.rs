//! The one Pod watch behind every controller.
//!
//! It lists and watches only Pods labelled `app.kubernetes.io/managed-by=
//! podkeeper`, decodes them without their managedFields ([`LeanPod`]), and
//! for each event (deletions included, which kube-runtime's shared streams
//! do not forward) it marks expectations observed and asks the owning
//! controller to reconcile the owner.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, RwLock};

use futures::channel::mpsc::UnboundedSender;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource};
use tracing::{info, warn};

use crate::api::names::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use crate::api::{Application, GROUP, Redis};
use crate::podset::ObservedPod;
use crate::podset::expectations::Expectations;
use crate::podset::lean_pod::LeanPod;
use crate::runtime::owner::Owner;

/// Where Pod events are sent, per owner kind.
#[derive(Clone)]
pub struct Routes {
    pub redis: UnboundedSender<ObjectRef<Redis>>,
    pub application: UnboundedSender<ObjectRef<Application>>,
    /// Told after every (re)list: a Pod deleted while the watch was down
    /// leaves no Delete event, so every owner is reconciled then.
    pub relisted: Vec<UnboundedSender<()>>,
}

type OwnerIndex = HashMap<String, HashSet<ObjectRef<Pod>>>;

/// The Pod cache with an index by controller owner uid, so that a reconcile
/// reads its own Pods instead of scanning every Pod.
#[derive(Clone)]
pub struct PodCache {
    store: Store<Pod>,
    by_owner: Arc<RwLock<OwnerIndex>>,
}

#[cfg(test)]
impl PodCache {
    /// A cache that holds no Pod, for tests of what needs none.
    pub fn empty() -> Self {
        let (store, _) = reflector::store();
        PodCache {
            store,
            by_owner: Arc::default(),
        }
    }
}

impl PodCache {
    /// Pods in `namespace` whose controller owner has `owner_uid`.
    pub fn owned(&self, namespace: &str, owner_uid: &str) -> Vec<Arc<Pod>> {
        self.owned_by(owner_uid)
            .into_iter()
            .filter(|p| p.metadata.namespace.as_deref() == Some(namespace))
            .collect()
    }

    /// The owner's Pods as the planner sees them.
    pub fn observed(&self, owner: &Owner) -> Vec<ObservedPod> {
        self.owned(&owner.namespace, &owner.reference.uid)
            .iter()
            .filter_map(|p| ObservedPod::from_pod(p))
            .collect()
    }

    /// Pods whose controller owner has `owner_uid`.
    pub fn owned_by(&self, owner_uid: &str) -> Vec<Arc<Pod>> {
        let index = self.by_owner.read().unwrap_or_else(|e| e.into_inner());
        index
            .get(owner_uid)
            .into_iter()
            .flatten()
            .filter_map(|r| self.store.get(r))
            .filter(|p| controller_uid(p) == Some(owner_uid))
            .collect()
    }

    /// Resolves once the first list is complete.
    pub async fn wait_until_ready(
        &self,
    ) -> Result<(), kube::runtime::reflector::store::WriterDropped> {
        self.store.wait_until_ready().await
    }
}

fn controller_uid(pod: &Pod) -> Option<&str> {
    pod.metadata
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))
        .map(|r| r.uid.as_str())
}

fn index_insert(index: &mut OwnerIndex, pod: &Pod) {
    if let Some(uid) = controller_uid(pod) {
        index
            .entry(uid.to_string())
            .or_default()
            .insert(ObjectRef::from_obj(pod));
    }
}

/// Starts the watch; the returned future drives it and never ends unless
/// the stream does.
pub fn start(
    client: Client,
    namespace: Option<&str>,
    expectations: Arc<Expectations>,
    routes: Routes,
) -> (PodCache, impl Future<Output = ()> + Send + 'static) {
    let api: Api<LeanPod> = match namespace {
        Some(ns) => Api::namespaced(client, ns),
        None => Api::all(client),
    };
    let config =
        watcher::Config::default().labels(&format!("{MANAGED_BY_LABEL}={MANAGED_BY_VALUE}"));
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(api, config).default_backoff().map_ok(plain_pods),
    );
    let by_owner: Arc<RwLock<OwnerIndex>> = Arc::default();
    let cache = PodCache {
        store: reader,
        by_owner: by_owner.clone(),
    };
    let driver = async move {
        let mut stream = std::pin::pin!(stream);
        // A relist is built aside and swapped in at its end, as the store
        // does; its Pods are routed only then, once the store holds the new
        // list, so a reconcile they trigger plans from it.
        let mut relist: OwnerIndex = HashMap::new();
        let mut relisted: Vec<Sighting> = Vec::new();
        let mut relist_started = std::time::Instant::now();
        while let Some(event) = stream.next().await {
            match event {
                Ok(watcher::Event::Apply(pod)) => {
                    index_insert(
                        &mut by_owner.write().unwrap_or_else(|e| e.into_inner()),
                        &pod,
                    );
                    if let Some(s) = Sighting::of(&pod, false) {
                        s.route(&expectations, &routes);
                    }
                }
                Ok(watcher::Event::InitApply(pod)) => {
                    index_insert(&mut relist, &pod);
                    relisted.extend(Sighting::of(&pod, false));
                }
                Ok(watcher::Event::Delete(pod)) => {
                    if let Some(uid) = controller_uid(&pod) {
                        let mut index = by_owner.write().unwrap_or_else(|e| e.into_inner());
                        if let Some(set) = index.get_mut(uid) {
                            set.remove(&ObjectRef::from_obj(&pod));
                            if set.is_empty() {
                                index.remove(uid);
                            }
                        }
                    }
                    if let Some(s) = Sighting::of(&pod, true) {
                        s.route(&expectations, &routes);
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    *by_owner.write().unwrap_or_else(|e| e.into_inner()) =
                        std::mem::take(&mut relist);
                    for s in std::mem::take(&mut relisted) {
                        s.route(&expectations, &routes);
                    }
                    let dropped = expectations.relisted(relist_started);
                    if dropped > 0 {
                        info!(
                            dropped,
                            "pod list done; dropped expectations of Pods that came and went unseen"
                        );
                    }
                    for tx in &routes.relisted {
                        let _ = tx.unbounded_send(());
                    }
                }
                Ok(watcher::Event::Init) => {
                    relist.clear();
                    relisted.clear();
                    relist_started = std::time::Instant::now();
                }
                Err(e) => warn!(error = %e, "pod watch error; retrying with backoff"),
            }
        }
    };
    (cache, driver)
}

/// The watch's event with the Pods [`LeanPod`] decoded.
fn plain_pods(event: watcher::Event<LeanPod>) -> watcher::Event<Pod> {
    match event {
        watcher::Event::Apply(LeanPod(p)) => watcher::Event::Apply(p),
        watcher::Event::Delete(LeanPod(p)) => watcher::Event::Delete(p),
        watcher::Event::Init => watcher::Event::Init,
        watcher::Event::InitApply(LeanPod(p)) => watcher::Event::InitApply(p),
        watcher::Event::InitDone => watcher::Event::InitDone,
    }
}

/// The kind (`Redis` or `Application`) and name of an object's controller
/// owner, when that is a podkeeper object: whose reconcile a change of the
/// object (a Pod, a Service) asks for.
pub fn podkeeper_owner(meta: &ObjectMeta) -> Option<(&'static str, &str)> {
    let owner = meta
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true))?;
    if owner.api_version.split('/').next() != Some(GROUP) {
        return None;
    }
    let kind = match owner.kind.as_str() {
        "Redis" => "Redis",
        "Application" => "Application",
        _ => return None,
    };
    Some((kind, owner.name.as_str()))
}

/// What routing needs of one Pod event: the Pod and its podkeeper owner.
struct Sighting {
    kind: &'static str,
    namespace: String,
    owner: String,
    name: String,
    uid: String,
    /// Deleted, or terminating.
    gone: bool,
    resource_version: Option<u64>,
}

impl Sighting {
    fn of(pod: &Pod, deleted: bool) -> Option<Self> {
        let meta = pod.meta();
        let (kind, owner) = podkeeper_owner(meta)?;
        Some(Sighting {
            kind,
            namespace: meta.namespace.clone()?,
            owner: owner.to_string(),
            name: meta.name.clone()?,
            uid: meta.uid.clone()?,
            gone: deleted || meta.deletion_timestamp.is_some(),
            resource_version: meta
                .resource_version
                .as_deref()
                .and_then(|v| v.parse().ok()),
        })
    }

    /// Marks expectations observed and asks the owner's controller to
    /// reconcile it.
    fn route(self, expectations: &Expectations, routes: &Routes) {
        tracing::trace!(pod = %self.name, gone = self.gone, owner = %self.owner, "pod event");
        let key = (self.kind, self.namespace.clone(), self.owner.clone());
        expectations.observe(&key, &self.name, &self.uid, self.gone);
        expectations.observe_version(&key, &self.uid, self.resource_version, self.gone);
        if self.kind == "Redis" {
            let _ = routes
                .redis
                .unbounded_send(ObjectRef::new(&self.owner).within(&self.namespace));
        } else {
            let _ = routes
                .application
                .unbounded_send(ObjectRef::new(&self.owner).within(&self.namespace));
        }
    }
}
