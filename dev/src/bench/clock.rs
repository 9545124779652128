//! Watch-driven timing. The benchmark learns about changes the way a
//! controller does, from a watch, and never polls the apiserver (polling
//! thousands of Pods would load the very server being measured).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::StreamExt;
use kube::runtime::watcher;
use kube::runtime::watcher::Event;
use kube::{Api, Resource, ResourceExt};
use serde::de::DeserializeOwned;

/// An object the watch shows, with when it was first seen and first ready.
pub struct Entry<K> {
    pub object: K,
    pub seen: Instant,
    /// When `placed` first held (for Pods: bound to a node).
    pub placed_at: Option<Instant>,
    pub ready_at: Option<Instant>,
    /// When the watch first showed it terminating (deletionTimestamp set).
    pub terminating_at: Option<Instant>,
}

/// An object the watch saw deleted.
#[derive(Clone, Debug)]
pub struct Gone {
    pub uid: String,
    pub namespace: String,
    /// The uid of its controller (owner reference with `controller: true`).
    pub owner: Option<String>,
    /// The resourceVersion of the delete event (etcd's revision of the
    /// deletion), to order deletions.
    pub resource_version: Option<u64>,
    /// When the watch showed it terminating, and gone (`None`: found gone
    /// by a relist).
    pub terminating_at: Option<Instant>,
    pub at: Option<Instant>,
}

/// What the watch shows now, keyed by uid.
pub struct State<K> {
    pub live: HashMap<String, Entry<K>>,
    pub gone: Vec<Gone>,
}

impl<K: Resource> State<K> {
    /// Objects in `namespace`, terminating ones included.
    pub fn in_namespace<'a>(&'a self, namespace: &'a str) -> impl Iterator<Item = &'a Entry<K>> {
        self.live
            .values()
            .filter(move |e| e.object.meta().namespace.as_deref() == Some(namespace))
    }

    /// Objects in `namespace` that are not terminating.
    pub fn active<'a>(&'a self, namespace: &'a str) -> impl Iterator<Item = &'a Entry<K>> {
        self.in_namespace(namespace)
            .filter(|e| e.object.meta().deletion_timestamp.is_none())
    }
}

/// The uid of the object's controller.
pub fn controller_uid<K: Resource>(object: &K) -> Option<String> {
    object
        .meta()
        .owner_references
        .as_ref()?
        .iter()
        .find(|o| o.controller == Some(true))
        .map(|o| o.uid.clone())
}

/// A running watch of one kind that keeps a [`State`].
pub struct Clock<K> {
    state: Arc<Mutex<State<K>>>,
    changes: tokio::sync::watch::Receiver<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl<K> Drop for Clock<K> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<K> Clock<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    /// Starts watching and returns once the initial list is in.
    pub async fn start(
        api: Api<K>,
        placed: fn(&K) -> bool,
        ready: fn(&K) -> bool,
    ) -> Result<Self, crate::Error> {
        let state = Arc::new(Mutex::new(State {
            live: HashMap::new(),
            gone: Vec::new(),
        }));
        let (tx, mut changes) = tokio::sync::watch::channel(0u64);
        let (synced_tx, synced_rx) = tokio::sync::oneshot::channel::<()>();
        let shared = state.clone();
        let task = tokio::spawn(async move {
            let mut synced = Some(synced_tx);
            let mut relisted: Option<Vec<String>> = None;
            let mut events = std::pin::pin!(watcher(api, watcher::Config::default()));
            while let Some(event) = events.next().await {
                let Ok(event) = event else { continue };
                let now = Instant::now();
                let mut st = shared.lock().expect("clock state");
                match event {
                    Event::Init => relisted = Some(Vec::new()),
                    Event::InitApply(object) | Event::Apply(object) => {
                        let uid = object.uid().unwrap_or_default();
                        if let Some(seen) = relisted.as_mut() {
                            seen.push(uid.clone());
                        }
                        let is_ready = ready(&object);
                        let entry = st.live.entry(uid).or_insert_with(|| Entry {
                            object: object.clone(),
                            seen: now,
                            placed_at: None,
                            ready_at: None,
                            terminating_at: None,
                        });
                        if placed(&object) && entry.placed_at.is_none() {
                            entry.placed_at = Some(now);
                        }
                        if is_ready && entry.ready_at.is_none() {
                            entry.ready_at = Some(now);
                        }
                        if object.meta().deletion_timestamp.is_some()
                            && entry.terminating_at.is_none()
                        {
                            entry.terminating_at = Some(now);
                        }
                        entry.object = object;
                    }
                    Event::Delete(object) => {
                        let uid = object.uid().unwrap_or_default();
                        let terminating_at = st.live.remove(&uid).and_then(|e| e.terminating_at);
                        st.gone.push(Gone {
                            terminating_at: terminating_at.or(Some(now)),
                            at: Some(now),
                            uid,
                            namespace: object.namespace().unwrap_or_default(),
                            owner: controller_uid(&object),
                            resource_version: object
                                .resource_version()
                                .and_then(|rv| rv.parse().ok()),
                        });
                    }
                    Event::InitDone => {
                        // Objects deleted while the watch was down: gone,
                        // at an unknown revision.
                        if let Some(seen) = relisted.take() {
                            let seen: std::collections::HashSet<String> =
                                seen.into_iter().collect();
                            let missing: Vec<String> = st
                                .live
                                .keys()
                                .filter(|uid| !seen.contains(*uid))
                                .cloned()
                                .collect();
                            for uid in missing {
                                if let Some(e) = st.live.remove(&uid) {
                                    st.gone.push(Gone {
                                        uid,
                                        namespace: e.object.namespace().unwrap_or_default(),
                                        owner: controller_uid(&e.object),
                                        resource_version: None,
                                        terminating_at: e.terminating_at,
                                        at: None,
                                    });
                                }
                            }
                        }
                        if let Some(tx) = synced.take() {
                            let _ = tx.send(());
                        }
                    }
                }
                drop(st);
                tx.send_modify(|v| *v += 1);
            }
        });
        synced_rx.await.map_err(|_| {
            crate::Error::Other("the benchmark's watch ended before its first list".into())
        })?;
        changes.mark_unchanged();
        Ok(Clock {
            state,
            changes,
            task,
        })
    }

    /// Evaluates `check` on every change until it returns a value; fails
    /// with `what` after `timeout`.
    pub async fn until<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut check: impl FnMut(&State<K>) -> Option<T>,
    ) -> Result<T, crate::Error> {
        let deadline = tokio::time::Instant::now() + timeout;
        let mut changes = self.changes.clone();
        loop {
            if let Some(value) = check(&self.state.lock().expect("clock state")) {
                return Ok(value);
            }
            match tokio::time::timeout_at(deadline, changes.changed()).await {
                Ok(Ok(())) => {}
                Ok(Err(_)) => {
                    return Err(crate::Error::Other(format!(
                        "the benchmark's watch ended while waiting for {what}"
                    )));
                }
                Err(_) => {
                    return Err(crate::Error::Other(format!(
                        "timed out after {}s waiting for {what}",
                        timeout.as_secs()
                    )));
                }
            }
        }
    }

    /// Runs `f` on the current state.
    pub fn with<T>(&self, f: impl FnOnce(&State<K>) -> T) -> T {
        f(&self.state.lock().expect("clock state"))
    }
}
