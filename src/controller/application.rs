//! The Application reconciler: Pods from `spec.deployment` with Deployment's
//! rollout semantics, run by the shared Pod engine, plus a Service from
//! `spec.service`, applied with server-side apply.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::apps::v1::{DeploymentCondition, DeploymentStatus};
use k8s_openapi::api::core::v1::{PodTemplateSpec, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::controller::Action;
use kube::runtime::events::EventType;
use kube::runtime::finalizer::{Event as Finalizer, finalizer};
use kube::runtime::reflector::Store;
use kube::{Api, ResourceExt};
use serde_json::Value;
use tracing::instrument;

use super::{
    Context, Error, FIELD_MANAGER, FINALIZER, MANAGED_BY_LABEL, MANAGED_BY_VALUE, next_action,
    selector,
};
use crate::crd::{Application, ApplicationStatus};
use crate::engine::executor::{Outcome, Owner};
use crate::engine::hash::{revision_of, stamp, template_hash};
use crate::engine::plan;
use crate::engine::plan::{Desired, IntOrPercent, Plan, Strategy, resolve_rolling};

pub const CONTROLLER: &str = "application";
const KIND: &str = "Application";
const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";
/// Hash of the Service podkeeper last applied, to notice fields removed
/// from `spec.service`.
const APPLIED_HASH_ANNOTATION: &str = "podkeeper.dev/applied-hash";
const DEFAULT_PROGRESS_DEADLINE: i64 = 600;

/// What the controller needs besides the Pod engine.
pub struct AppContext {
    pub inner: Arc<Context>,
    /// Services labelled as managed by podkeeper.
    pub services: Store<Service>,
}

/// The rollout settings of an Application, with Deployment's defaults.
#[derive(Clone, Debug, PartialEq)]
pub struct Rollout {
    pub strategy: Strategy,
    /// Available Pods needed for the Available condition.
    pub min_available: i32,
    pub min_ready_seconds: i64,
    pub paused: bool,
    pub progress_deadline_seconds: i64,
}

fn int_or_percent(
    v: Option<&IntOrString>,
    default: IntOrPercent,
    field: &str,
) -> Result<IntOrPercent, String> {
    match v {
        None => Ok(default),
        Some(IntOrString::Int(n)) if *n >= 0 => Ok(IntOrPercent::Int(*n)),
        Some(IntOrString::String(s)) => IntOrPercent::parse(s)
            .filter(|p| matches!(p, IntOrPercent::Percent(0..=100) | IntOrPercent::Int(0..)))
            .ok_or_else(|| format!("{field} must be a non-negative integer or a percentage from 0% to 100%, not {s:?}")),
        Some(IntOrString::Int(n)) => Err(format!("{field} must not be negative, not {n}")),
    }
}

/// Deployment's defaults and arithmetic. Pure.
pub fn rollout(app: &Application) -> Result<Rollout, String> {
    let d = &app.spec.deployment;
    let replicas = d.replicas.unwrap_or(1).max(0);
    let strategy = d.strategy.as_ref();
    let (strategy, min_available) = match strategy.and_then(|s| s.type_.as_deref()) {
        Some("Recreate") => (Strategy::Recreate, replicas),
        None | Some("RollingUpdate") => {
            let rolling = strategy.and_then(|s| s.rolling_update.as_ref());
            let quarter = IntOrPercent::Percent(25);
            let surge = int_or_percent(
                rolling.and_then(|r| r.max_surge.as_ref()),
                quarter,
                "spec.deployment.strategy.rollingUpdate.maxSurge",
            )?;
            let unavailable = int_or_percent(
                rolling.and_then(|r| r.max_unavailable.as_ref()),
                quarter,
                "spec.deployment.strategy.rollingUpdate.maxUnavailable",
            )?;
            let s = resolve_rolling(replicas, surge, unavailable);
            let Strategy::RollingUpdate {
                max_unavailable, ..
            } = s
            else {
                unreachable!()
            };
            (s, replicas - max_unavailable)
        }
        Some(other) => return Err(format!("unknown strategy type {other:?}")),
    };
    Ok(Rollout {
        strategy,
        min_available,
        min_ready_seconds: i64::from(d.min_ready_seconds.unwrap_or(0).max(0)),
        paused: d.paused.unwrap_or(false),
        progress_deadline_seconds: d
            .progress_deadline_seconds
            .map(i64::from)
            .unwrap_or(DEFAULT_PROGRESS_DEADLINE),
    })
}

/// Labels of the Pods: the template's, or, when it has none, the
/// selector's matchLabels, so the selector always matches its own Pods.
fn pod_labels(app: &Application) -> BTreeMap<String, String> {
    let d = &app.spec.deployment;
    let mut labels = d
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone())
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| d.selector.match_labels.clone().unwrap_or_default());
    labels.insert(MANAGED_BY_LABEL.into(), MANAGED_BY_VALUE.into());
    labels
}

/// Checks what the schema cannot. Pure.
pub fn validate(app: &Application) -> Result<Rollout, String> {
    let d = &app.spec.deployment;
    if !selector::matches(&d.selector, &pod_labels(app)) {
        return Err(format!(
            "spec.deployment.selector ({}) does not match the Pod template's labels",
            selector::to_string(&d.selector)
        ));
    }
    if d.template
        .spec
        .as_ref()
        .is_none_or(|s| s.containers.is_empty())
    {
        return Err(
            "spec.deployment.template.spec.containers must list at least one container".into(),
        );
    }
    if let Some(service) = &app.spec.service {
        let has_selector = service.selector.as_ref().is_some_and(|s| !s.is_empty());
        let has_labels = d
            .selector
            .match_labels
            .as_ref()
            .is_some_and(|l| !l.is_empty());
        if !has_selector && !has_labels {
            return Err(
                "spec.service.selector is required when spec.deployment.selector has no matchLabels".into(),
            );
        }
    }
    rollout(app)
}

/// The Pod template with its labels and template hash. Pure.
pub fn pod_template(app: &Application) -> PodTemplateSpec {
    let mut template = app.spec.deployment.template.clone();
    let metadata = template.metadata.get_or_insert_with(ObjectMeta::default);
    metadata.labels = Some(pod_labels(app));
    // Never carried over from a template: the engine sets these.
    metadata.name = None;
    metadata.namespace = None;
    metadata.owner_references = None;
    stamp(template)
}

/// The Service to apply, if `spec.service` is set. Pure.
pub fn desired_service(app: &Application, owner: &Owner) -> Option<Service> {
    let mut spec = app.spec.service.clone()?;
    if spec.selector.as_ref().is_none_or(|s| s.is_empty()) {
        spec.selector = app.spec.deployment.selector.match_labels.clone();
    }
    for port in spec.ports.iter_mut().flatten() {
        port.protocol.get_or_insert_with(|| "TCP".into());
    }
    let mut service = Service {
        metadata: ObjectMeta {
            name: Some(owner.name.clone()),
            namespace: Some(owner.namespace.clone()),
            labels: Some(
                [
                    (MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string()),
                    (INSTANCE_LABEL.to_string(), owner.name.clone()),
                ]
                .into(),
            ),
            owner_references: Some(vec![owner.reference.clone()]),
            ..Default::default()
        },
        spec: Some(spec),
        status: None,
    };
    let hash = template_hash(&service);
    service.metadata.annotations = Some([(APPLIED_HASH_ANNOTATION.to_string(), hash)].into());
    Some(service)
}

/// Whether every field set in `want` has the same value in `have` (lists
/// element by element). Allocated fields that `want` leaves out, such as
/// clusterIP or an unspecified nodePort, do not count.
pub fn is_subset(want: &Value, have: &Value) -> bool {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => w
            .iter()
            .all(|(k, v)| v.is_null() || h.get(k).is_some_and(|hv| is_subset(v, hv))),
        (Value::Array(w), Value::Array(h)) => {
            w.len() == h.len() && w.iter().zip(h).all(|(a, b)| is_subset(a, b))
        }
        _ => want == have,
    }
}

/// The live Service still says what podkeeper applied.
fn service_in_sync(want: &Service, live: &Service) -> bool {
    let (Ok(w), Ok(h)) = (serde_json::to_value(want), serde_json::to_value(live)) else {
        return false;
    };
    [
        "/metadata/labels",
        "/metadata/annotations",
        "/metadata/ownerReferences",
        "/spec",
    ]
    .iter()
    .all(|p| match (w.pointer(p), h.pointer(p)) {
        (Some(wv), Some(hv)) => is_subset(wv, hv),
        (Some(_), None) => false,
        _ => true,
    })
}

fn condition(
    previous: Option<&DeploymentStatus>,
    type_: &str,
    status: &str,
    reason: &str,
    message: String,
    now: Timestamp,
) -> DeploymentCondition {
    let old = previous
        .and_then(|p| p.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_.as_deref() == Some(type_)));
    let same_status = old.is_some_and(|o| o.status.as_deref() == Some(status));
    let unchanged = same_status
        && old.is_some_and(|o| {
            o.reason.as_deref() == Some(reason) && o.message.as_deref() == Some(&message)
        });
    DeploymentCondition {
        type_: Some(type_.into()),
        status: Some(status.into()),
        reason: Some(reason.into()),
        message: Some(message),
        last_transition_time: if same_status {
            old.and_then(|o| o.last_transition_time.clone())
        } else {
            Some(Time(now))
        },
        last_update_time: if unchanged {
            old.and_then(|o| o.last_update_time.clone())
        } else {
            Some(Time(now))
        },
    }
}

/// The Deployment-shaped status, and when to look again for the progress
/// deadline. Pure.
pub fn workflow_status(
    app: &Application,
    plan: &Plan,
    rollout: &Rollout,
    failure: Option<(&str, String)>,
    keep_failure: bool,
    now: Timestamp,
) -> (DeploymentStatus, Option<i64>) {
    let previous = app.status.as_ref().and_then(|s| s.workflow.as_ref());
    let generation = app.metadata.generation;
    let replicas = app.spec.deployment.replicas.unwrap_or(1).max(0);
    let c = plan.counts;
    let name = app.name_any();

    let available = if c.available >= rollout.min_available {
        condition(
            previous,
            "Available",
            "True",
            "MinimumReplicasAvailable",
            format!("{} of {replicas} Pods available", c.available),
            now,
        )
    } else {
        condition(
            previous,
            "Available",
            "False",
            "MinimumReplicasUnavailable",
            format!(
                "{} of {replicas} Pods available, {} needed",
                c.available, rollout.min_available
            ),
            now,
        )
    };

    let counts_now = (
        Some(c.replicas),
        Some(c.updated),
        Some(c.ready),
        Some(c.available),
    );
    let counts_before = previous.map(|p| {
        (
            p.replicas,
            p.updated_replicas,
            p.ready_replicas,
            p.available_replicas,
        )
    });
    let progressed = counts_before != Some(counts_now)
        || previous.and_then(|p| p.observed_generation) != generation;
    let old_progressing = previous.and_then(|p| p.conditions.as_ref()).and_then(|cs| {
        cs.iter()
            .find(|c| c.type_.as_deref() == Some("Progressing"))
    });
    let old_reason = old_progressing.and_then(|c| c.reason.as_deref());
    let mut recheck = None;
    let progressing = if rollout.paused {
        condition(
            previous,
            "Progressing",
            "Unknown",
            "RolloutPaused",
            format!("Application {name} is paused"),
            now,
        )
    } else if plan.complete {
        condition(
            previous,
            "Progressing",
            "True",
            "RolloutComplete",
            format!("Application {name} has {replicas} up-to-date, available Pods"),
            now,
        )
    } else if progressed
        || !matches!(
            old_reason,
            Some("RolloutProgressing") | Some("ProgressDeadlineExceeded")
        )
    {
        recheck = Some(rollout.progress_deadline_seconds);
        let mut c = condition(
            previous,
            "Progressing",
            "True",
            "RolloutProgressing",
            format!(
                "{} of {replicas} Pods updated, {} available",
                c.updated, c.available
            ),
            now,
        );
        c.last_update_time = Some(Time(now));
        c
    } else if old_reason == Some("ProgressDeadlineExceeded") {
        old_progressing.cloned().unwrap_or_else(|| {
            condition(
                previous,
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                String::new(),
                now,
            )
        })
    } else {
        let since = old_progressing
            .and_then(|c| c.last_update_time.as_ref())
            .map(|t| t.0.as_second())
            .unwrap_or(now.as_second());
        let left = since + rollout.progress_deadline_seconds - now.as_second();
        if left <= 0 {
            condition(
                previous,
                "Progressing",
                "False",
                "ProgressDeadlineExceeded",
                format!("Application {name} has timed out progressing"),
                now,
            )
        } else {
            recheck = Some(left);
            old_progressing.cloned().unwrap_or_else(|| {
                condition(
                    previous,
                    "Progressing",
                    "True",
                    "RolloutProgressing",
                    String::new(),
                    now,
                )
            })
        }
    };

    let mut conditions = vec![available, progressing];
    let old_failure = previous
        .and_then(|p| p.conditions.as_ref())
        .and_then(|cs| {
            cs.iter()
                .find(|c| c.type_.as_deref() == Some("ReplicaFailure"))
        })
        .cloned();
    match (failure, keep_failure) {
        (Some((reason, message)), _) => conditions.push(condition(
            previous,
            "ReplicaFailure",
            "True",
            reason,
            message,
            now,
        )),
        (None, true) => conditions.extend(old_failure),
        (None, false) => {}
    }

    let status = DeploymentStatus {
        observed_generation: generation,
        replicas: Some(c.replicas),
        updated_replicas: Some(c.updated),
        ready_replicas: Some(c.ready),
        available_replicas: Some(c.available),
        unavailable_replicas: Some(c.unavailable),
        terminating_replicas: Some(c.terminating),
        conditions: Some(conditions),
        collision_count: None,
    };
    (status, recheck)
}

fn owner(app: &Application) -> Owner {
    Owner::of(app, KIND)
}

fn live_service(ctx: &AppContext, owner: &Owner) -> Option<Arc<Service>> {
    ctx.services.state().into_iter().find(|s| {
        s.metadata.namespace.as_deref() == Some(owner.namespace.as_str())
            && s.owner_references()
                .iter()
                .any(|r| r.uid == owner.reference.uid && r.controller == Some(true))
    })
}

/// Entry point for the controller.
#[instrument(skip_all, fields(namespace = %app.namespace().unwrap_or_default(), name = %app.name_any()))]
pub async fn reconcile(app: Arc<Application>, ctx: Arc<AppContext>) -> Result<Action, Error> {
    let started = Instant::now();
    let api: Api<Application> = Api::namespaced(
        ctx.inner.client.clone(),
        &app.namespace().unwrap_or_default(),
    );
    let result = finalizer(&api, FINALIZER, app.clone(), |event| async {
        match event {
            Finalizer::Apply(a) => apply(&a, &ctx).await,
            Finalizer::Cleanup(a) => cleanup(&a, &ctx).await,
        }
    })
    .await
    .map_err(|e| Error::Finalizer(Box::new(e)));
    ctx.inner.record(KIND, &*app, started, &result);
    result
}

/// Requeue policy on error.
pub fn error_policy(app: Arc<Application>, error: &Error, ctx: Arc<AppContext>) -> Action {
    ctx.inner.backoff(KIND, &*app, error)
}

async fn apply(app: &Application, ctx: &AppContext) -> Result<Action, Error> {
    let owner = owner(app);
    let now = Timestamp::now();
    let pods = ctx.inner.observed(&owner);
    let selector_string = selector::to_string(&app.spec.deployment.selector);

    let rollout = match validate(app) {
        Ok(r) => r,
        Err(message) => {
            // Nothing is created from a spec that cannot work; what exists
            // is left alone and the reason shown.
            ctx.inner
                .executor
                .event(
                    &owner,
                    EventType::Warning,
                    "InvalidSpec",
                    "Validate",
                    message.clone(),
                )
                .await;
            let fallback = Rollout {
                strategy: Strategy::Recreate,
                min_available: app.spec.deployment.replicas.unwrap_or(1),
                min_ready_seconds: 0,
                paused: true,
                progress_deadline_seconds: DEFAULT_PROGRESS_DEADLINE,
            };
            let desired = Desired {
                replicas: app.spec.deployment.replicas.unwrap_or(1),
                revision: String::new(),
                strategy: fallback.strategy,
                min_ready_seconds: 0,
                paused: true,
            };
            let plan = plan(&desired, &pods, now);
            let (workflow, _) = workflow_status(
                app,
                &plan,
                &fallback,
                Some(("InvalidSpec", message)),
                false,
                now,
            );
            let status = ApplicationStatus {
                workflow: Some(workflow),
                network: app.status.as_ref().and_then(|s| s.network.clone()),
                selector: selector_string,
            };
            let deferred = ctx
                .inner
                .write_status(app, app.status.as_ref(), &status)
                .await?;
            return Ok(deferred.map_or_else(Action::await_change, Action::requeue));
        }
    };

    let template = pod_template(app);
    let desired = Desired {
        replicas: app.spec.deployment.replicas.unwrap_or(1),
        revision: revision_of(&template),
        strategy: rollout.strategy,
        min_ready_seconds: rollout.min_ready_seconds,
        paused: rollout.paused,
    };
    let plan = plan(&desired, &pods, now);
    let outcome = ctx.inner.act(&owner, &template, &plan).await;

    let (network, service_failure) = match reconcile_service(app, ctx, &owner).await {
        Ok(network) => (network, None),
        Err(message) => (
            app.status.as_ref().and_then(|s| s.network.clone()),
            Some(message),
        ),
    };

    let failure = match (&outcome, &service_failure) {
        (
            Some(Outcome {
                failure: Some(f), ..
            }),
            _,
        ) => Some((f.reason, f.message.clone())),
        (_, Some(m)) => Some(("FailedService", m.clone())),
        _ => None,
    };
    if outcome.is_none() && service_failure.is_none() {
        // Pod creates or deletes still in flight: as for Redis, the status
        // waits for the watch event that completes them.
        return Ok(next_action(false, plan.recheck_after_seconds));
    }
    let (workflow, deadline) =
        workflow_status(app, &plan, &rollout, failure, outcome.is_none(), now);
    let status = ApplicationStatus {
        workflow: Some(workflow),
        network,
        selector: selector_string,
    };
    let deferred = ctx
        .inner
        .write_status(app, app.status.as_ref(), &status)
        .await?;
    if let Some(wait) = deferred {
        return Ok(Action::requeue(wait));
    }

    let recheck = match (plan.recheck_after_seconds, deadline) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    };
    Ok(next_action(outcome.is_some(), recheck))
}

/// Applies, corrects or removes the Service; returns its status, or a
/// message when the API server refused it.
async fn reconcile_service(
    app: &Application,
    ctx: &AppContext,
    owner: &Owner,
) -> Result<Option<k8s_openapi::api::core::v1::ServiceStatus>, String> {
    let api: Api<Service> = Api::namespaced(ctx.inner.client.clone(), &owner.namespace);
    let live = live_service(ctx, owner);
    match (desired_service(app, owner), live) {
        (Some(want), Some(live)) if service_in_sync(&want, &live) => Ok(live.status.clone()),
        (Some(want), live) => {
            let params = PatchParams::apply(FIELD_MANAGER).force();
            match api.patch(&owner.name, &params, &Patch::Apply(&want)).await {
                Ok(applied) => {
                    let (reason, note) = if live.is_some() {
                        (
                            "ServiceUpdated",
                            format!("Updated Service {} to match spec.service", owner.name),
                        )
                    } else {
                        ("ServiceCreated", format!("Created Service {}", owner.name))
                    };
                    ctx.inner
                        .executor
                        .event(owner, EventType::Normal, reason, "ApplyService", note)
                        .await;
                    Ok(applied.status)
                }
                Err(e) => {
                    let message = format!(
                        "Error applying Service {}: {}",
                        owner.name,
                        crate::engine::executor::api_message(&e)
                    );
                    ctx.inner
                        .executor
                        .event(
                            owner,
                            EventType::Warning,
                            "FailedService",
                            "ApplyService",
                            message.clone(),
                        )
                        .await;
                    Err(message)
                }
            }
        }
        (None, Some(live)) => {
            let _ = delete_service(&api, &live).await;
            ctx.inner
                .executor
                .event(
                    owner,
                    EventType::Normal,
                    "ServiceDeleted",
                    "DeleteService",
                    format!("Deleted Service {}: spec.service was removed", owner.name),
                )
                .await;
            Ok(None)
        }
        (None, None) => Ok(None),
    }
}

async fn delete_service(api: &Api<Service>, svc: &Service) -> Result<(), kube::Error> {
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: svc.uid(),
            resource_version: None,
        }),
        ..Default::default()
    };
    match api.delete(&svc.name_any(), &params).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => Ok(()),
        Err(e) => Err(e),
    }
}

/// The Service first, to stop traffic; then the Pods, newest first; the
/// finalizer goes last.
async fn cleanup(app: &Application, ctx: &AppContext) -> Result<Action, Error> {
    let owner = owner(app);
    if let Some(svc) = live_service(ctx, &owner) {
        if svc.metadata.deletion_timestamp.is_none() {
            let api: Api<Service> = Api::namespaced(ctx.inner.client.clone(), &owner.namespace);
            delete_service(&api, &svc).await?;
            ctx.inner
                .executor
                .event(
                    &owner,
                    EventType::Normal,
                    "Cleanup",
                    "Cleanup",
                    format!("Deleted Service {} before the Pods", svc.name_any()),
                )
                .await;
        }
        return Err(Error::CleanupPending { remaining: 1 });
    }
    ctx.inner.delete_all_pods(&owner).await?;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::pods::TEMPLATE_HASH_LABEL;
    use crate::engine::pods::test_support::{pending, pod};
    use serde_json::json;

    fn app(extra: Value) -> Application {
        let mut spec = json!({
            "deployment": {
                "replicas": 4,
                "selector": {"matchLabels": {"app": "nginx"}},
                "template": {"spec": {"containers": [{"name": "nginx", "image": "nginx:1.14.2"}]}}
            },
            "service": {"type": "NodePort", "ports": [{"port": 80, "targetPort": 80}]}
        });
        merge(&mut spec, extra);
        let mut a = Application::new("web", serde_json::from_value(spec).unwrap());
        a.metadata.namespace = Some("ns".into());
        a.metadata.uid = Some("uid-web".into());
        a.metadata.generation = Some(1);
        a
    }

    fn merge(a: &mut Value, b: Value) {
        match (a, b) {
            (Value::Object(a), Value::Object(b)) => {
                for (k, v) in b {
                    merge(a.entry(k).or_insert(Value::Null), v);
                }
            }
            (a, b) => *a = b,
        }
    }

    #[test]
    fn pods_take_the_selector_labels_when_the_template_has_none() {
        let t = pod_template(&app(json!({})));
        let labels = t.metadata.unwrap().labels.unwrap();
        assert_eq!(labels["app"], "nginx");
        assert_eq!(labels[MANAGED_BY_LABEL], "podkeeper");
        assert!(labels.contains_key(TEMPLATE_HASH_LABEL));

        let with = app(
            json!({"deployment": {"template": {"metadata": {"labels": {"app": "nginx", "tier": "web"}}}}}),
        );
        let labels = pod_template(&with).metadata.unwrap().labels.unwrap();
        assert_eq!(labels["tier"], "web");
    }

    #[test]
    fn deployment_defaults_and_validation() {
        let r = rollout(&app(json!({}))).unwrap();
        assert_eq!(
            r.strategy,
            Strategy::RollingUpdate {
                max_surge: 1,
                max_unavailable: 1
            }
        );
        assert_eq!(
            (r.min_available, r.progress_deadline_seconds, r.paused),
            (3, 600, false)
        );
        let r = rollout(&app(
            json!({"deployment": {"strategy": {"type": "Recreate"}}}),
        ))
        .unwrap();
        assert_eq!((r.strategy, r.min_available), (Strategy::Recreate, 4));
        let r = rollout(&app(json!({"deployment": {"strategy": {"rollingUpdate": {"maxSurge": "50%", "maxUnavailable": 0}}}}))).unwrap();
        assert_eq!(
            r.strategy,
            Strategy::RollingUpdate {
                max_surge: 2,
                max_unavailable: 0
            }
        );
        assert!(
            rollout(&app(
                json!({"deployment": {"strategy": {"rollingUpdate": {"maxSurge": "x"}}}})
            ))
            .is_err()
        );

        let mismatch = app(
            json!({"deployment": {"selector": {"matchLabels": {"app": "other"}}, "template": {"metadata": {"labels": {"app": "nginx"}}}}}),
        );
        assert!(validate(&mismatch).unwrap_err().contains("does not match"));
        let expressions_only = app(json!({"deployment": {
            "selector": {"matchLabels": null, "matchExpressions": [{"key": "app", "operator": "In", "values": ["nginx"]}]},
            "template": {"metadata": {"labels": {"app": "nginx"}}}
        }}));
        assert!(
            validate(&expressions_only)
                .unwrap_err()
                .contains("spec.service.selector is required")
        );
    }

    #[test]
    fn service_defaults_its_selector_and_detects_drift_but_not_allocations() {
        let a = app(json!({}));
        let o = owner(&a);
        let want = desired_service(&a, &o).unwrap();
        let spec = want.spec.as_ref().unwrap();
        assert_eq!(spec.selector.as_ref().unwrap()["app"], "nginx");
        assert_eq!(
            spec.ports.as_ref().unwrap()[0].protocol.as_deref(),
            Some("TCP")
        );

        let mut live = want.clone();
        let live_spec = live.spec.as_mut().unwrap();
        live_spec.cluster_ip = Some("10.96.0.10".into());
        live_spec.ports.as_mut().unwrap()[0].node_port = Some(31234);
        assert!(
            service_in_sync(&want, &live),
            "allocated values are not drift"
        );
        live.spec.as_mut().unwrap().type_ = Some("ClusterIP".into());
        assert!(!service_in_sync(&want, &live), "an edited type is drift");

        let changed = app(json!({"service": {"ports": [{"port": 8080, "targetPort": 80}]}}));
        let want2 = desired_service(&changed, &o).unwrap();
        assert_ne!(want.metadata.annotations, want2.metadata.annotations);
        assert!(desired_service(&app(json!({"service": null})), &o).is_none());
    }

    #[test]
    fn progress_deadline_is_exceeded_only_without_progress() {
        let mut a = app(json!({"deployment": {"progressDeadlineSeconds": 60}}));
        let r = rollout(&a).unwrap();
        let d = Desired {
            replicas: 4,
            revision: "new".into(),
            strategy: r.strategy,
            min_ready_seconds: 0,
            paused: false,
        };
        let pods = vec![pending("p0", "new", 1)];
        let t0 = Timestamp::from_second(1_000).unwrap();
        let p = plan(&d, &pods, t0);
        let (s0, recheck) = workflow_status(&a, &p, &r, None, false, t0);
        let prog = |s: &DeploymentStatus| {
            let c = s
                .conditions
                .as_ref()
                .unwrap()
                .iter()
                .find(|c| c.type_.as_deref() == Some("Progressing"))
                .unwrap()
                .clone();
            (c.status.unwrap(), c.reason.unwrap())
        };
        assert_eq!(prog(&s0), ("True".into(), "RolloutProgressing".into()));
        assert_eq!(recheck, Some(60));

        a.status = Some(ApplicationStatus {
            workflow: Some(s0),
            ..Default::default()
        });
        let t1 = Timestamp::from_second(1_030).unwrap();
        let (s1, recheck) = workflow_status(&a, &plan(&d, &pods, t1), &r, None, false, t1);
        assert_eq!(prog(&s1), ("True".into(), "RolloutProgressing".into()));
        assert_eq!(recheck, Some(30));

        a.status = Some(ApplicationStatus {
            workflow: Some(s1),
            ..Default::default()
        });
        let t2 = Timestamp::from_second(1_061).unwrap();
        let (s2, _) = workflow_status(&a, &plan(&d, &pods, t2), &r, None, false, t2);
        assert_eq!(
            prog(&s2),
            ("False".into(), "ProgressDeadlineExceeded".into())
        );

        // Progress (a Pod became ready) clears it.
        a.status = Some(ApplicationStatus {
            workflow: Some(s2),
            ..Default::default()
        });
        let ready = vec![pod("p0", "new", 1)];
        let (s3, _) = workflow_status(&a, &plan(&d, &ready, t2), &r, None, false, t2);
        assert_eq!(prog(&s3), ("True".into(), "RolloutProgressing".into()));
    }

    #[test]
    fn subset_ignores_extra_fields_but_not_changed_ones() {
        assert!(is_subset(
            &json!({"a": 1, "l": [{"x": 1}]}),
            &json!({"a": 1, "b": 2, "l": [{"x": 1, "y": 2}]})
        ));
        assert!(!is_subset(&json!({"a": 1}), &json!({"a": 2})));
        assert!(!is_subset(
            &json!({"l": [{"x": 1}]}),
            &json!({"l": [{"x": 1}, {"x": 2}]})
        ));
    }
}
