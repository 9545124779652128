//! One reconciler for every kind that owns a set of Pods.
//!
//! A kind implements [`PodSet`] with pure functions only: the Pods it asks
//! for (template, replicas, strategy) or why its spec cannot work, and its
//! status from the engine's [`Report`]. Objects of its own besides the Pods
//! (the Application's Service) come through [`Extras`]. [`reconcile`] owns
//! the order of operations, the same for every kind:
//!
//! 1. the finalizer: added first, in the same reconcile
//!    ([`with_finalizer`]), and on deletion [`cleanup`] runs instead of the
//!    steps below (kube-runtime's `finalizer()`);
//! 2. expectations, checked *before* the snapshot, as the ReplicaSet
//!    controller does: a Pod indexed after the snapshot may clear an
//!    expectation, but the snapshot then cannot be the stale one;
//! 3. the snapshot of the owner's Pods from the watch cache;
//! 4. the plan (pure);
//! 5. acting on it, only if the expectations were satisfied, and the
//!    extras;
//! 6. the status, written only when it changed, and not right after
//!    creates or deletes the watch has yet to show (the reconcile their
//!    events start writes it);
//! 7. the requeue: a failed step (create, delete, extras, status write) is
//!    an error, retried with per-object backoff ([`crate::runtime::backoff::backoff_delay`])
//!    until it succeeds; otherwise when the plan says to look again.

use std::collections::HashMap;
use std::fmt::Debug;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use std::time::Instant;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::controller::Action;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::{Api, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;
use tracing::Instrument;

use crate::api::names::ORPHAN_FINALIZER;
use crate::api::names::{FIELD_MANAGER, FINALIZER};
use crate::podset::claims::{self, ClaimTemplate};
use crate::podset::executor::{Claims, Outcome, summary};
use crate::podset::plan::{DeleteReason, Desired, Plan, Strategy, plan, victim};
use crate::podset::volumes;
use crate::podset::{Context, ObservedPod};
use crate::runtime::events::EventType;
use crate::runtime::failure::Failure;
use crate::runtime::owner::Owner;
use crate::runtime::{Error, Pace};

/// What a kind asks of the Pod engine.
#[derive(Clone, Debug)]
pub struct PodSetSpec {
    pub template: PodTemplateSpec,
    pub desired: Desired,
}

/// What the engine tells a kind to build its status from.
pub struct Report<'a, X> {
    pub plan: &'a Plan,
    /// The first refused step of this reconcile, if any.
    pub failure: Option<&'a Failure>,
    /// Why the spec cannot work, when it cannot (nothing was done).
    pub invalid: Option<&'a str>,
    /// What the extras reported.
    pub extras: &'a X,
    pub now: Timestamp,
}

/// A kind whose objects own a set of Pods.
pub trait PodSet:
    Resource<Scope = NamespaceResourceScope, DynamicType = ()>
    + Clone
    + DeserializeOwned
    + Serialize
    + Debug
    + Send
    + Sync
    + 'static
{
    /// The kind, as in owner keys and logs.
    const KIND: &'static str;
    type Status: Serialize + PartialEq + Send + Sync;
    type Extras: Extras<Self>;

    /// The Pods asked for, or why the spec cannot work. Pure, and from the
    /// object's name, its spec and [`PodSet::template_inputs`] only: the
    /// reconcile keeps what it desires per generation and inputs
    /// ([`Ctx::pod_set`]).
    fn pod_set(&self) -> Result<PodSetSpec, String>;
    /// What [`PodSet::pod_set`] reads besides the spec (which the
    /// generation covers), as one value. Default: nothing.
    fn template_inputs(&self) -> Option<&str> {
        None
    }
    /// What a person asks of the object besides its spec (an annotation
    /// the kind acts on), as one value: a change of it wakes the object's
    /// reconcile as a spec change does. Default: nothing.
    fn requests(&self) -> Option<&str> {
        None
    }
    /// Replicas asked for, even when the spec is invalid (for counts).
    fn replicas(&self) -> i32;
    /// A PersistentVolumeClaim per Pod, for kinds that keep data. Pure.
    /// Default: none.
    fn claims(&self) -> Option<ClaimTemplate> {
        None
    }
    /// The status the object shows now.
    fn current_status(&self) -> Option<&Self::Status>;
    /// The status to show, and in how many seconds to look again (say for
    /// a progress deadline). Pure.
    fn desired_status(
        &self,
        report: &Report<'_, <Self::Extras as Extras<Self>>::Report>,
    ) -> (Self::Status, Option<i64>);
}

/// Objects of a kind's own besides its Pods, and what the kind does with
/// its Pods besides creating and deleting them (Redis replication).
pub trait Extras<K>: Send + Sync + 'static {
    /// What goes into the status.
    type Report: Send + Sync;
    /// What [`Extras::steer`] hands to [`Extras::apply`].
    type Steer: Default + Send + Sync;
    /// Runs before the engine acts on `plan` (made from `desired` and
    /// `pods`), on every reconcile of a valid spec whose expectations are
    /// satisfied: it may change which Pods the plan deletes (Redis keeps its
    /// primary until it has handed the role over).
    /// Default: nothing.
    fn steer(
        &self,
        _obj: &K,
        _ctx: &Context,
        _owner: &Owner,
        _desired: &Desired,
        _pods: &[ObservedPod],
        _plan: &mut Plan,
    ) -> impl Future<Output = Self::Steer> + Send {
        async { Self::Steer::default() }
    }
    /// Brings them in line with `obj`; a refused step is returned with the
    /// report (which should then keep what the status said before).
    fn apply(
        &self,
        obj: &K,
        ctx: &Context,
        owner: &Owner,
        steer: Self::Steer,
    ) -> impl Future<Output = (Self::Report, Option<Failure>)> + Send;
    /// Adds to the Pods this reconcile creates what only Pods created now
    /// get (a Redis being restored: the `restore` init container). It is
    /// not part of the template or its hash, so Pods made later without it
    /// are on the same revision. Default: nothing.
    fn at_creation(&self, _obj: &K, _steer: &Self::Steer, _template: &mut PodTemplateSpec) {}
    /// The report that keeps what the status says, when nothing was applied.
    fn kept(&self, obj: &K) -> Self::Report;
    /// Deletes them before the Pods; `Ok(true)` once they are gone.
    fn cleanup(
        &self,
        obj: &K,
        ctx: &Context,
        owner: &Owner,
    ) -> impl Future<Output = Result<bool, Error>> + Send;
}

/// No extras.
pub struct NoExtras;

impl<K: Sync> Extras<K> for NoExtras {
    type Report = ();
    type Steer = ();
    async fn apply(&self, _: &K, _: &Context, _: &Owner, _: ()) -> ((), Option<Failure>) {
        ((), None)
    }
    fn kept(&self, _: &K) {}
    async fn cleanup(&self, _: &K, _: &Context, _: &Owner) -> Result<bool, Error> {
        Ok(true)
    }
}

/// The context of one kind's controller.
pub struct Ctx<K: PodSet> {
    pub inner: Arc<Context>,
    pub extras: K::Extras,
    /// Per object uid: the generation, the template inputs and what
    /// [`PodSet::pod_set`] made of them, without the template (about 10 KiB
    /// per Redis, 11 of the operator's 80 MiB of heap at 1000 x 3 by
    /// heaptrack), which only a reconcile that creates or updates Pods
    /// needs ([`act`] makes it again).
    pod_sets: Mutex<HashMap<String, PodSetOf>>,
}

/// What a cached Pod set was made from, and what it is.
type PodSetOf = (i64, Option<String>, DesiredOf);

/// The [`Desired`] of what [`PodSet::pod_set`] returned, or why the spec
/// cannot work; shared.
type DesiredOf = Arc<Result<Desired, String>>;

impl<K: PodSet> Ctx<K> {
    pub fn new(inner: Arc<Context>, extras: K::Extras) -> Arc<Self> {
        Arc::new(Ctx {
            inner,
            extras,
            pod_sets: Mutex::default(),
        })
    }

    /// What `obj.pod_set()` desires, made once per generation and
    /// template inputs: a spec change is a new generation, and the Pods'
    /// events that reconcile an object again change nothing it depends on. (Building and hashing the
    /// template on each of them was about 8 % of the operator's CPU in the
    /// benchmark's scale-down.) The template comes along when it was made
    /// now, so the first reconcile of a generation does not make it twice.
    pub fn pod_set(&self, obj: &K) -> (DesiredOf, Option<PodTemplateSpec>) {
        let split = |made: Result<PodSetSpec, String>| match made {
            Ok(s) => (Arc::new(Ok(s.desired)), Some(s.template)),
            Err(message) => (Arc::new(Err(message)), None),
        };
        let meta = obj.meta();
        let (Some(uid), Some(generation)) = (meta.uid.as_deref(), meta.generation) else {
            return split(obj.pod_set());
        };
        let inputs = obj.template_inputs();
        let mut pod_sets = self.pod_sets.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((seen, seen_inputs, made)) = pod_sets.get(uid)
            && *seen == generation
            && seen_inputs.as_deref() == inputs
        {
            return (made.clone(), None);
        }
        let (desired, template) = split(obj.pod_set());
        pod_sets.insert(
            uid.to_string(),
            (generation, inputs.map(str::to_string), desired.clone()),
        );
        (desired, template)
    }

    /// Forgets the Pod set of an object that is gone.
    fn forget_pod_set(&self, owner: &Owner) {
        self.pod_sets
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&owner.reference.uid);
    }
}

/// Entry point of every Pod-set controller.
pub async fn reconcile<K: PodSet>(obj: Arc<K>, ctx: Arc<Ctx<K>>) -> Result<Action, Error> {
    let span = tracing::info_span!(
        "reconcile",
        kind = K::KIND,
        namespace = %obj.namespace().unwrap_or_default(),
        name = %obj.name_any()
    );
    async {
        let started = Instant::now();
        let api: Api<K> = Api::namespaced(
            ctx.inner.client.clone(),
            &obj.namespace().unwrap_or_default(),
        );
        let result = match with_finalizer(&api, obj.clone()).await {
            Ok(obj) => finalizer(&api, FINALIZER, obj, |event| async {
                match event {
                    Finalizer::Apply(o) => apply(&*o, &ctx).await,
                    Finalizer::Cleanup(o) => cleanup(&*o, &ctx).await,
                }
            })
            .await
            .map_err(|e| Error::Finalizer(Box::new(e))),
            Err(e) => Err(e),
        };
        record(&ctx.inner, K::KIND, &*obj, started, &result);
        result
    }
    .instrument(span)
    .await
}

/// The object with podkeeper's finalizer: added first, and the reconcile
/// goes on with what the patch returned. kube-runtime's `finalizer()` alone
/// ends the reconcile once it added the finalizer and waits for the watch
/// to bring the change back: for every new object one more trip through
/// the queue before its first Pod is created. The patch is the same JSON
/// patch (a test of the finalizers seen, then an add), so it fails rather
/// than duplicate or drop someone else's finalizer, and never touches
/// anything else. Objects being deleted are left as they are.
async fn with_finalizer<K: PodSet>(api: &Api<K>, obj: Arc<K>) -> Result<Arc<K>, Error> {
    let meta = obj.meta();
    if meta.deletion_timestamp.is_some() || obj.finalizers().iter().any(|f| f == FINALIZER) {
        return Ok(obj);
    }
    let ops = if obj.finalizers().is_empty() {
        serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers", "value": null},
            {"op": "add", "path": "/metadata/finalizers", "value": [FINALIZER]},
        ])
    } else {
        serde_json::json!([
            {"op": "test", "path": "/metadata/finalizers", "value": obj.finalizers()},
            {"op": "add", "path": "/metadata/finalizers/-", "value": FINALIZER},
        ])
    };
    let added = |e| Error::Finalizer(Box::new(kube::runtime::finalizer::Error::AddFinalizer(e)));
    let name = meta.name.clone().unwrap_or_default();
    let updated = api
        .patch(
            &name,
            // Named, so that managedFields say who added it (not "unknown").
            &PatchParams {
                field_manager: Some(FIELD_MANAGER.into()),
                ..Default::default()
            },
            &Patch::Json::<()>(serde_json::from_value(ops)?),
        )
        .await
        .map_err(added)?;
    Ok(Arc::new(updated))
}

/// Requeue policy on error: per-object exponential backoff.
pub fn error_policy<K: PodSet>(obj: Arc<K>, error: &Error, ctx: Arc<Ctx<K>>) -> Action {
    ctx.inner.backoff.failed(K::KIND, &*obj, error)
}

async fn apply<K: PodSet>(obj: &K, ctx: &Ctx<K>) -> Result<Action, Error> {
    let inner = &ctx.inner;
    // The status is computed from the last one shown: ours when the cache
    // has not caught up with our write yet.
    let fresh = inner.status.freshest(obj);
    let obj = fresh.as_ref().unwrap_or(obj);
    let owner = Owner::of(obj, K::KIND);
    let now = Timestamp::now();
    let satisfied = inner.executor.expectations.satisfied(&owner.key);
    let pods = inner.pods.observed(&owner);

    let (made, template) = ctx.pod_set(obj);
    let desired = match made.as_ref() {
        Ok(desired) => desired,
        Err(message) => {
            // Nothing is created from a spec that cannot work; what exists
            // is left alone and the reason shown. Only a spec change helps.
            inner
                .executor
                .event(
                    &owner,
                    EventType::Warning,
                    "InvalidSpec",
                    "Validate",
                    message.clone(),
                )
                .await;
            let hold = Desired {
                replicas: obj.replicas(),
                revision: String::new(),
                strategy: Strategy::Recreate,
                min_ready_seconds: 0,
                paused: true,
                in_place: None,
            };
            let plan = plan(&hold, &pods, now);
            let extras = ctx.extras.kept(obj);
            let (status, _) = obj.desired_status(&Report {
                plan: &plan,
                failure: None,
                invalid: Some(message),
                extras: &extras,
                now,
            });
            let deferred = inner
                .status
                .write(obj, obj.current_status(), &status, Pace::Changing)
                .await?;
            return Ok(deferred.map_or_else(Action::await_change, Action::requeue));
        }
    };

    let mut plan = plan(desired, &pods, now);
    // While creates or deletes are in flight nothing is acted on and no
    // status is written (below), so the extras' round (Redis: every member
    // queried over the network) would be thrown away: it runs once the
    // event that completes them reconciles again, as the engine's own step.
    let steer = if satisfied {
        let steering = Instant::now();
        let steer = ctx
            .extras
            .steer(obj, inner, &owner, desired, &pods, &mut plan)
            .await;
        tracing::debug!(steer_ms = steering.elapsed().as_millis() as u64, "steered");
        steer
    } else {
        tracing::debug!("expectations pending: no steering");
        Default::default()
    };
    // Pods to create get what only Pods created now get (the template is
    // cached per generation: made here when this round creates).
    let template = if satisfied && plan.create > 0 {
        let mut t = template.or_else(|| obj.pod_set().ok().map(|s| s.template));
        if let Some(t) = t.as_mut() {
            ctx.extras.at_creation(obj, &steer, t);
        }
        t
    } else {
        template
    };
    // The Pods and the extras do not wait for each other. The extras'
    // Services go to a task beside the reconcile (see `crate::runtime::service_applier`), so
    // a new object's reconcile holds its worker only for its Pods.
    let acting = async {
        if satisfied {
            Some(act(inner, &owner, obj, template, &plan, &pods).await)
        } else {
            None
        }
    };
    let (outcome, (extras, extras_failure)) =
        futures::join!(acting, ctx.extras.apply(obj, inner, &owner, steer));
    let Some(outcome) = outcome else {
        // Creates or deletes are still in flight: the status would describe
        // a state the watch is about to replace, and the event that
        // completes them reconciles again.
        if let Some(f) = extras_failure {
            return Err(Error::Step(f));
        }
        return Ok(next_action(false, plan.recheck_after_seconds));
    };
    if outcome.failure.is_none()
        && extras_failure.is_none()
        && (outcome.created > 0 || outcome.deleted > 0 || outcome.updated > 0)
    {
        // The status would describe the Pods as they were before this
        // step, and the watch is about to show what it did: the reconcile
        // its events start (expectations then satisfied) writes the status.
        // On scale-down this was one status write per object the next
        // reconcile replaced within a second.
        return Ok(next_action(false, plan.recheck_after_seconds));
    }
    let failure = outcome.failure.or(extras_failure);
    let (status, recheck) = obj.desired_status(&Report {
        plan: &plan,
        failure: failure.as_ref(),
        invalid: None,
        extras: &extras,
        now,
    });
    let deferred = inner
        .status
        .write(obj, obj.current_status(), &status, pace(desired, &plan))
        .await?;
    if let Some(f) = failure {
        return Err(Error::Step(f));
    }
    if let Some(wait) = deferred {
        return Ok(Action::requeue(wait));
    }
    let recheck = match (plan.recheck_after_seconds, recheck) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok(next_action(true, recheck))
}

/// What the status about to be written describes, for its pacing.
fn pace(desired: &Desired, plan: &Plan) -> Pace {
    let c = plan.counts;
    if plan.complete {
        Pace::AtRest
    } else if c.terminating > 0
        && plan.create == 0
        && plan.delete.is_empty()
        && plan.in_place.is_empty()
        && c.replicas == desired.replicas.max(0)
        && c.updated == c.replicas
        && c.available == c.replicas
    {
        Pace::Draining
    } else {
        Pace::Changing
    }
}

/// The claims of the Pods `plan` creates: claims kept from a deleted owner
/// of this name are adopted first; a Pod whose claim a terminating Pod
/// still holds waits for it (its deletion reconciles again).
async fn assign_claims(
    ctx: &Context,
    owner: &Owner,
    template: &ClaimTemplate,
    pods: &[ObservedPod],
    plan: &Plan,
) -> Result<claims::Assignment, Failure> {
    let (mut owned, orphans) = ctx.claims.of(owner);
    volumes::adopt(&ctx.executor, owner, &orphans).await?;
    owned.extend(orphans.iter().map(volumes::observe));
    let count = usize::try_from(plan.create.max(0)).unwrap_or(0);
    let a = claims::assign(count, &owned, pods, template.prefer.as_deref());
    if !a.waiting_for.is_empty() {
        tracing::info!(
            waiting_for = ?a.waiting_for,
            "a new Pod waits for the claim a terminating Pod still holds"
        );
    }
    Ok(a)
}

/// With claims and nothing else to do: claims left free by a scale-down
/// are deleted (`whenScaled: Delete`), and claims smaller than asked for
/// are expanded.
async fn tidy_claims(
    ctx: &Context,
    owner: &Owner,
    template: &ClaimTemplate,
    pods: &[ObservedPod],
    replicas: i32,
) -> Result<(), Failure> {
    let (owned, _) = ctx.claims.of(owner);
    if template.delete_when_scaled {
        let surplus = claims::surplus(&owned, pods, replicas, template.prefer.as_deref());
        volumes::delete(
            &ctx.executor,
            owner,
            &surplus,
            "scaled down; retention whenScaled: Delete",
        )
        .await?;
    }
    volumes::expand(&ctx.executor, &ctx.claims, owner, template).await
}

/// Acts on `plan` with the current template: `template` if this reconcile
/// made it already, else made again from `obj` (pure, and the same for the
/// same generation).
async fn act<K: PodSet>(
    ctx: &Context,
    owner: &Owner,
    obj: &K,
    template: Option<PodTemplateSpec>,
    plan: &Plan,
    pods: &[ObservedPod],
) -> Outcome {
    if plan.create == 0 && plan.delete.is_empty() && plan.in_place.is_empty() {
        let mut outcome = Outcome::default();
        if let Some(t) = obj.claims() {
            outcome.failure = tidy_claims(ctx, owner, &t, pods, obj.replicas())
                .await
                .err();
        }
        return outcome;
    }
    let template = match template
        .map(Ok)
        .unwrap_or_else(|| obj.pod_set().map(|s| s.template))
    {
        Ok(template) => template,
        // Not for a spec that gave a Desired: `pod_set` is pure.
        Err(_) => return Outcome::default(),
    };
    let template = &template;
    let live = if plan.in_place.is_empty() {
        Vec::new()
    } else {
        ctx.pods.owned(&owner.namespace, &owner.reference.uid)
    };
    let claim_template = obj.claims();
    let assignment = match &claim_template {
        Some(t) if plan.create > 0 => match assign_claims(ctx, owner, t, pods, plan).await {
            Ok(a) => Some(a),
            Err(failure) => {
                return Outcome {
                    failure: Some(failure),
                    ..Outcome::default()
                };
            }
        },
        _ => None,
    };
    let claims = match (&claim_template, &assignment) {
        (Some(template), Some(a)) => Some(Claims {
            template,
            choices: &a.choices,
        }),
        (Some(template), None) => Some(Claims {
            template,
            choices: &[],
        }),
        _ => None,
    };
    let outcome = ctx
        .executor
        .execute(owner, template, plan, &live, claims)
        .await;
    if outcome.created > 0 || outcome.deleted > 0 || outcome.updated > 0 {
        tracing::info!(
            created = outcome.created,
            deleted = outcome.deleted,
            updated = outcome.updated,
            "pods changed"
        );
    }
    outcome
}

/// Deletion: the extras first (the Service, to stop traffic), then the
/// Pods, newest first; the finalizer goes only once none is left, so the
/// owner disappears last. With the `orphan` finalizer (`kubectl delete
/// --cascade=orphan`) nothing is deleted: the garbage collector removes
/// the owner references and the Pods keep running.
pub async fn cleanup<K: PodSet>(obj: &K, ctx: &Ctx<K>) -> Result<Action, Error> {
    let inner = &ctx.inner;
    let owner = Owner::of(obj, K::KIND);
    if obj.finalizers().iter().any(|f| f == ORPHAN_FINALIZER) {
        let mut names: Vec<String> = inner
            .pods
            .observed(&owner)
            .into_iter()
            .filter(|p| !p.terminating)
            .map(|p| p.name)
            .collect();
        names.sort();
        let what = if names.is_empty() {
            "no Pods to keep".to_string()
        } else {
            summary("keeping", &names)
        };
        inner
            .executor
            .event(
                &owner,
                EventType::Normal,
                "Orphaning",
                "Cleanup",
                format!(
                    "Deleted with propagationPolicy Orphan: {what}; the garbage collector removes their owner references"
                ),
            )
            .await;
        forget(inner, &owner);
        ctx.forget_pod_set(&owner);
        return Ok(Action::await_change());
    }
    if !ctx.extras.cleanup(obj, inner, &owner).await? {
        return Err(Error::CleanupPending { remaining: 1 });
    }
    delete_all_pods(inner, &owner).await?;
    if let Some(t) = obj.claims() {
        // Pods first, then their claims, by the retention policy.
        let (owned, _) = inner.claims.of(&owner);
        let result = if t.delete_when_deleted {
            let doomed: Vec<_> = owned.iter().filter(|c| !c.deleting).collect();
            volumes::delete(
                &inner.executor,
                &owner,
                &doomed,
                "owner deleted; retention whenDeleted: Delete",
            )
            .await
        } else {
            volumes::release(&inner.executor, &owner, &owned, t.prefer.as_deref()).await
        };
        result.map_err(Error::Step)?;
    }
    ctx.forget_pod_set(&owner);
    Ok(Action::await_change())
}

/// Cleanup of an owner's Pods: deletes those not yet terminating, newest
/// first, and succeeds only when none is left (not even terminating) and
/// no create is still unseen. Writes no Event when all goes through (it
/// logs); a refused delete is a `FailedDelete` Warning and an error,
/// retried with backoff.
async fn delete_all_pods(ctx: &Context, owner: &Owner) -> Result<(), Error> {
    // Expectations before the snapshot: a create seen after it is
    // still counted as unseen, never missed; a Pod whose delete was
    // sent but is not yet seen terminating is not deleted again (the
    // pass that the Service's deletion or a Pod event starts came
    // within ms of the first: a third of the Pods got two deletes).
    let unseen = ctx.executor.expectations.unseen(&owner.key);
    let mut pods = ctx.pods.observed(owner);
    if pods.is_empty() && unseen.creates == 0 {
        // A deletion that goes through writes no Event, as the
        // ReplicaSet controller's does not: the owner is about to be gone,
        // and three Events per object cost a deletion three waits on the
        // API server. Refusals are Warning Events (FailedDelete,
        // FailedService); the log says what happened.
        tracing::info!(
            kind = owner.reference.kind,
            namespace = owner.namespace,
            name = owner.name,
            "all Pods are gone; removing the finalizer"
        );
        forget(ctx, owner);
        return Ok(());
    }
    pods.sort_by(|a, b| b.created.cmp(&a.created).then_with(|| a.name.cmp(&b.name)));
    let to_delete: Vec<_> = pods
        .iter()
        .filter(|p| !p.terminating && !unseen.deletes.contains(&p.uid))
        .map(|p| victim(p, DeleteReason::Cleanup))
        .collect();
    if !to_delete.is_empty() {
        let names: Vec<String> = to_delete.iter().map(|v| v.name.clone()).collect();
        tracing::info!(
            kind = owner.reference.kind,
            namespace = owner.namespace,
            name = owner.name,
            "{} before the {} is removed ({} already being deleted)",
            summary("Deleting", &names),
            owner.reference.kind,
            pods.len() - to_delete.len()
        );
        let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &owner.namespace);
        let mut failure = None;
        for v in &to_delete {
            // Newest first, one after the other, as the order promises.
            if let Err(f) = ctx.executor.delete_one(&api, owner, v).await {
                failure.get_or_insert(f);
            }
        }
        if let Some(f) = failure {
            return Err(Error::Step(f));
        }
    }
    Err(Error::CleanupPending {
        remaining: pods.len().max(unseen.creates),
    })
}

/// Forgets everything kept about an owner that is gone.
fn forget(ctx: &Context, owner: &Owner) {
    ctx.executor.expectations.forget(&owner.key);
    ctx.status.forget(&owner.reference.uid);
    ctx.backoff
        .succeeded(owner.key.0, &owner.namespace, &owner.name);
}

/// Records a finished reconcile: metrics by result, and the failure
/// count reset on success.
pub fn record<K: Resource>(
    ctx: &Context,
    kind: &'static str,
    obj: &K,
    started: std::time::Instant,
    result: &Result<Action, Error>,
) {
    let metrics = &ctx.executor.metrics;
    let controller = ctx.executor.controller;
    let elapsed = started.elapsed().as_secs_f64();
    tracing::debug!(
        elapsed_ms = (elapsed * 1000.0) as u64,
        ok = result.is_ok(),
        "reconciled"
    );
    match result {
        Ok(_) => {
            let meta = obj.meta();
            ctx.backoff.succeeded(
                kind,
                meta.namespace.as_deref().unwrap_or_default(),
                meta.name.as_deref().unwrap_or_default(),
            );
            metrics.reconciled(controller, "success", elapsed);
        }
        Err(e) if e.is_waiting() => metrics.reconciled(controller, "requeue", elapsed),
        Err(e) => {
            metrics.reconciled(controller, "error", elapsed);
            metrics.reconcile_error(controller, e.metric_label());
        }
    }
}

/// How long to wait before reconciling again after a successful step.
pub fn next_action(settled: bool, recheck_after_seconds: Option<i64>) -> Action {
    match (settled, recheck_after_seconds) {
        // Expectations unseen: their events trigger the next reconcile;
        // this is only the safety net should one be lost.
        (false, _) => Action::requeue(Duration::from_secs(30)),
        (true, Some(s)) => Action::requeue(Duration::from_secs(s.max(1) as u64)),
        (true, None) => Action::await_change(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::podset::plan::Strategy;

    fn desired(replicas: i32) -> Desired {
        Desired {
            replicas,
            revision: "r1".into(),
            strategy: Strategy::Recreate,
            min_ready_seconds: 0,
            paused: false,
            in_place: None,
        }
    }

    #[test]
    fn only_the_tail_of_a_scale_down_is_paced_as_draining() {
        use crate::podset::pods::test_support::pod;
        let now = Timestamp::from_second(1_000).unwrap();
        let ready = |name: &str| pod(name, "r1", 100);
        let mut going = ready("c");
        going.terminating = true;
        // Scaled to 2, one Pod still terminating: only its end is left.
        let pods = vec![ready("a"), ready("b"), going.clone()];
        let p = plan(&desired(2), &pods, now);
        assert_eq!(pace(&desired(2), &p), Pace::Draining);
        // Once it is gone, at rest.
        let p = plan(&desired(2), &pods[..2], now);
        assert_eq!(pace(&desired(2), &p), Pace::AtRest);
        // Still short of Pods: changing, terminating or not.
        let p = plan(&desired(3), &pods, now);
        assert_eq!(pace(&desired(3), &p), Pace::Changing);
    }

    /// A failure lengthens the object's backoff; a success resets it, so
    /// the next failure waits the shortest time again.
    #[tokio::test]
    async fn a_success_resets_the_backoff_of_its_object() {
        let client = crate::runtime::mock_api::client(|_, path, _| {
            panic!("no request expected, got {path}")
        });
        let ctx = Context::new(
            client.clone(),
            crate::podset::executor::Executor::for_tests(client),
            crate::podset::watch::PodCache::empty(),
            crate::podset::volumes::ClaimCache::empty(),
        );
        let redis: crate::api::Redis = serde_json::from_value(serde_json::json!({
            "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
            "metadata": {"name": "r", "namespace": "ns"}, "spec": {"replicas": 1},
        }))
        .unwrap();
        let failed = || {
            Error::Step(Failure {
                reason: "FailedCreate",
                message: "refused".into(),
            })
        };
        let count = || ctx.backoff.failures("Redis", "ns", "r");
        let started = std::time::Instant::now();
        for n in 1..=3 {
            ctx.backoff.failed("Redis", &redis, &failed());
            record(&ctx, "Redis", &redis, started, &Err(failed()));
            assert_eq!(count(), Some(n), "failure {n} counted");
        }
        record(&ctx, "Redis", &redis, started, &Ok(Action::await_change()));
        assert_eq!(count(), None, "reset by the success");
        ctx.backoff.failed("Redis", &redis, &failed());
        assert_eq!(count(), Some(1), "the next failure starts over");
    }
}
