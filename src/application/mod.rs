//! Application as a [`PodSet`]: Pods from `spec.deployment` with
//! Deployment's rollout semantics, and its status, all pure; the Service
//! from `spec.service` is its [`ServiceExtras`]. The generic reconciler in
//! [`crate::podset::reconcile`] does the rest.

pub mod service;

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::DeploymentStatus;
use k8s_openapi::api::core::v1::PodTemplateSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::ResourceExt;
use kube::core::{Selector, SelectorExt};

use crate::api::names::{MANAGED_BY_LABEL, MANAGED_BY_VALUE};
use crate::api::{Application, ApplicationStatus};
use crate::application::service::{Network, ServiceExtras};
use crate::podset::plan::{Counts, Desired, IntOrPercent, Strategy, resolve_rolling};
use crate::podset::reconcile::{PodSet, PodSetSpec, Report};
use crate::podset::revision::{revision_of, stamp};
use crate::runtime::conditions::{self, Cond, truth};

pub const CONTROLLER: &str = "application";
const KIND: &str = "Application";
const DEFAULT_PROGRESS_DEADLINE: i64 = 600;

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
    let selector = Selector::try_from(d.selector.clone())
        .map_err(|e| format!("spec.deployment.selector: {e}"))?;
    if !selector.matches(&pod_labels(app)) {
        return Err(format!(
            "spec.deployment.selector ({selector}) does not match the Pod template's labels"
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
/// The label selector in string form (for the scale subresource).
fn selector_string(app: &Application) -> String {
    Selector::try_from(app.spec.deployment.selector.clone())
        .map(|s| s.to_string())
        .unwrap_or_default()
}

/// Whether the rollout moved forward since `before`, as the Deployment
/// controller judges it: more updated, ready or available Pods, or fewer
/// old ones. Fewer Pods (one deleted, say) is not progress.
pub fn progressed(before: Option<&DeploymentStatus>, now: &Counts) -> bool {
    let Some(b) = before else {
        return true;
    };
    let old_before = b.replicas.unwrap_or(0) - b.updated_replicas.unwrap_or(0);
    let old_now = now.replicas - now.updated;
    now.updated > b.updated_replicas.unwrap_or(0)
        || old_now < old_before
        || now.ready > b.ready_replicas.unwrap_or(0)
        || now.available > b.available_replicas.unwrap_or(0)
}

/// The status an Application should show, and when to look again for the
/// progress deadline. Pure.
pub fn desired_status(
    app: &Application,
    report: &Report<'_, Network>,
) -> (ApplicationStatus, Option<i64>) {
    let now = report.now;
    let previous = app.status.clone().unwrap_or_default();
    let before = previous.workflow.as_ref();
    let generation = app.metadata.generation;
    let replicas = app.spec.deployment.replicas.unwrap_or(1).max(0);
    let c = report.plan.counts;
    let name = app.name_any();
    let fallback = Rollout {
        strategy: Strategy::Recreate,
        min_available: replicas,
        min_ready_seconds: 0,
        paused: true,
        progress_deadline_seconds: DEFAULT_PROGRESS_DEADLINE,
    };
    let rollout = rollout(app).unwrap_or(fallback);

    let available = if c.available >= rollout.min_available {
        Cond {
            type_: "Available",
            status: "True",
            reason: "MinimumReplicasAvailable",
            message: format!("{} of {replicas} Pods available", c.available),
        }
    } else {
        Cond {
            type_: "Available",
            status: "False",
            reason: "MinimumReplicasUnavailable",
            message: format!(
                "{} of {replicas} Pods available, {} needed",
                c.available, rollout.min_available
            ),
        }
    };

    let old_reason =
        conditions::find(&previous.conditions, "Progressing").map(|c| c.reason.as_str());
    // A new spec, a resumed or a completed rollout starts the clock again.
    let started = before.and_then(|b| b.observed_generation) != generation
        || matches!(
            old_reason,
            None | Some("RolloutPaused") | Some("RolloutComplete")
        );
    let moving = !rollout.paused && !report.plan.complete && report.invalid.is_none();
    let last_progress_time = if moving && (started || progressed(before, &c)) {
        Some(Time(now))
    } else {
        previous.last_progress_time.clone().or(Some(Time(now)))
    };
    let mut recheck = None;
    let progressing = if let Some(message) = report.invalid {
        Cond {
            type_: "Progressing",
            status: "False",
            reason: "InvalidSpec",
            message: message.to_string(),
        }
    } else if rollout.paused {
        Cond {
            type_: "Progressing",
            status: "Unknown",
            reason: "RolloutPaused",
            message: format!("Application {name} is paused"),
        }
    } else if report.plan.complete {
        Cond {
            type_: "Progressing",
            status: "True",
            reason: "RolloutComplete",
            message: format!("Application {name} has {replicas} up-to-date, available Pods"),
        }
    } else {
        let since = last_progress_time
            .as_ref()
            .map_or(now.as_second(), |t| t.0.as_second());
        let left = since + rollout.progress_deadline_seconds - now.as_second();
        if left <= 0 {
            Cond {
                type_: "Progressing",
                status: "False",
                reason: "ProgressDeadlineExceeded",
                message: format!(
                    "Application {name} has made no progress for {} seconds",
                    rollout.progress_deadline_seconds
                ),
            }
        } else {
            recheck = Some(left);
            Cond {
                type_: "Progressing",
                status: "True",
                reason: "RolloutProgressing",
                message: format!(
                    "{} of {replicas} Pods updated, {} available",
                    c.updated, c.available
                ),
            }
        }
    };

    let failure = match (report.invalid, report.failure) {
        (Some(message), _) => Cond {
            type_: "ReplicaFailure",
            status: "True",
            reason: "InvalidSpec",
            message: message.to_string(),
        },
        (None, Some(f)) => Cond {
            type_: "ReplicaFailure",
            status: "True",
            reason: f.reason,
            message: f.message.clone(),
        },
        (None, None) => Cond {
            type_: "ReplicaFailure",
            status: truth(false),
            reason: "NoFailure",
            message: "the last Pod and Service steps succeeded".into(),
        },
    };

    let workflow = DeploymentStatus {
        observed_generation: generation,
        replicas: Some(c.replicas),
        updated_replicas: Some(c.updated),
        ready_replicas: Some(c.ready),
        available_replicas: Some(c.available),
        unavailable_replicas: Some(c.unavailable),
        terminating_replicas: Some(c.terminating),
        conditions: None,
        collision_count: None,
    };
    let status = ApplicationStatus {
        workflow: Some(workflow),
        network: report.extras.clone(),
        selector: selector_string(app),
        last_progress_time,
        conditions: conditions::merge(
            &previous.conditions,
            vec![available, progressing, failure],
            generation,
            now,
        ),
    };
    (status, recheck)
}

impl PodSet for Application {
    const KIND: &'static str = KIND;
    type Status = ApplicationStatus;
    type Extras = ServiceExtras;

    fn pod_set(&self) -> Result<PodSetSpec, String> {
        let rollout = validate(self)?;
        let template = pod_template(self);
        Ok(PodSetSpec {
            desired: Desired {
                replicas: self.replicas(),
                revision: revision_of(&template),
                strategy: rollout.strategy,
                min_ready_seconds: rollout.min_ready_seconds,
                paused: rollout.paused,
                in_place: None,
            },
            template,
        })
    }

    fn replicas(&self) -> i32 {
        self.spec.deployment.replicas.unwrap_or(1)
    }

    fn current_status(&self) -> Option<&ApplicationStatus> {
        self.status.as_ref()
    }

    fn desired_status(&self, report: &Report<'_, Network>) -> (ApplicationStatus, Option<i64>) {
        desired_status(self, report)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::names::TEMPLATE_HASH_LABEL;
    use crate::podset::plan::{Plan, plan};
    use crate::podset::pods::test_support::{pending, pod};
    use k8s_openapi::jiff::Timestamp;
    use serde_json::{Value, json};

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

    fn report<'a>(p: &'a Plan, now: Timestamp) -> Report<'a, Network> {
        static NONE: Network = None;
        Report {
            plan: p,
            failure: None,
            invalid: None,
            extras: &NONE,
            now,
        }
    }

    fn progressing(s: &ApplicationStatus) -> (String, String) {
        let c = conditions::find(&s.conditions, "Progressing").unwrap();
        (c.status.clone(), c.reason.clone())
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
            in_place: None,
        };
        let at = |s| Timestamp::from_second(s).unwrap();
        let two = vec![pod("p0", "new", 1), pending("p1", "new", 1)];
        let (s0, recheck) = desired_status(&a, &report(&plan(&d, &two, at(1_000)), at(1_000)));
        assert_eq!(
            progressing(&s0),
            ("True".into(), "RolloutProgressing".into())
        );
        assert_eq!(recheck, Some(60));

        // Nothing moves for 30 s: same condition, half the deadline left,
        // and the status is unchanged (nothing to write).
        a.status = Some(s0.clone());
        let (s1, recheck) = desired_status(&a, &report(&plan(&d, &two, at(1_030)), at(1_030)));
        assert_eq!(s1, s0);
        assert_eq!(recheck, Some(30));

        // A Pod is lost: fewer Pods is not progress; the clock runs on.
        a.status = Some(s1);
        let one = vec![pod("p0", "new", 1)];
        let (s2, recheck) = desired_status(&a, &report(&plan(&d, &one, at(1_050)), at(1_050)));
        assert_eq!(
            progressing(&s2),
            ("True".into(), "RolloutProgressing".into())
        );
        assert_eq!(recheck, Some(10));
        a.status = Some(s2);
        let (s3, _) = desired_status(&a, &report(&plan(&d, &one, at(1_061)), at(1_061)));
        assert_eq!(
            progressing(&s3),
            ("False".into(), "ProgressDeadlineExceeded".into())
        );

        // Progress (another Pod ready) clears it and restarts the clock.
        a.status = Some(s3);
        let more = vec![pod("p0", "new", 1), pod("p1", "new", 1)];
        let (s4, recheck) = desired_status(&a, &report(&plan(&d, &more, at(1_070)), at(1_070)));
        assert_eq!(
            progressing(&s4),
            ("True".into(), "RolloutProgressing".into())
        );
        assert_eq!(recheck, Some(60));
        assert!(s4.workflow.as_ref().unwrap().conditions.is_none());
    }

    #[test]
    fn removing_the_service_removes_the_network_status() {
        let mut a = app(json!({}));
        let d = Desired {
            replicas: 4,
            revision: "h".into(),
            strategy: Strategy::Recreate,
            min_ready_seconds: 0,
            paused: false,
            in_place: None,
        };
        let t = Timestamp::from_second(1_000).unwrap();
        let p = plan(&d, &[], t);
        let network: Network = Some(Default::default());
        let (with, _) = desired_status(
            &a,
            &Report {
                plan: &p,
                failure: None,
                invalid: None,
                extras: &network,
                now: t,
            },
        );
        assert!(with.network.is_some());
        a.status = Some(with.clone());
        let (without, _) = desired_status(&a, &report(&p, t));
        // The status is replaced whole: a field it leaves out is removed.
        let written = serde_json::to_value(&without).unwrap();
        assert!(written.get("network").is_none(), "{written}");
    }

    #[test]
    fn a_name_that_is_not_a_dns_label_is_refused_only_with_a_service() {
        let crd = serde_json::to_string(&crate::api::application::crd()).unwrap();
        assert!(crd.contains("DNS-1035"), "the CEL rule is in the CRD");
    }

    #[test]
    fn an_invalid_selector_operator_is_an_invalid_spec() {
        let bad = app(json!({"deployment": {
            "selector": {"matchLabels": null, "matchExpressions": [{"key": "app", "operator": "Near"}]},
        }}));
        assert!(
            validate(&bad)
                .unwrap_err()
                .starts_with("spec.deployment.selector")
        );
    }
}
