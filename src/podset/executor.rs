//! Carries a [`Plan`] out against the API server: creates Pods from the
//! template in slow-start batches, deletes victims with a uid precondition,
//! records expectations before every call and an Event after it.

use std::collections::BTreeMap;
use std::sync::Arc;

use futures::future::join_all;
use k8s_openapi::api::core::v1::{
    PersistentVolumeClaim, PersistentVolumeClaimVolumeSource, Pod, PodSpec, PodTemplateSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Api, Client, ResourceExt};
use rand::RngExt;
use tracing::{debug, warn};

use crate::api::names::{
    INSTANCE_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE, RESIZE_REFUSED_ANNOTATION,
};
use crate::metrics::Metrics;
use crate::podset::claims::{Choice, ClaimTemplate};
use crate::podset::expectations::Expectations;
use crate::podset::inplace::{self, Change};
use crate::podset::plan::{DeleteReason, Plan, Update, Victim};
use crate::runtime::events::{EventRecorder, EventType};
use crate::runtime::failure::{Failure, api_message};
use crate::runtime::metadata_only;
use crate::runtime::owner::Owner;

/// Characters of generated name suffixes: the same alphabet Kubernetes uses
/// for generateName (no vowels, no confusable characters).
const SUFFIX_ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";

/// What a step did.
#[derive(Clone, Debug, Default)]
pub struct Outcome {
    pub created: usize,
    pub deleted: usize,
    /// Pods updated in place.
    pub updated: usize,
    pub failure: Option<Failure>,
}

/// The claims of the Pods a step creates: one Pod per choice.
pub struct Claims<'a> {
    pub template: &'a ClaimTemplate,
    pub choices: &'a [Choice],
}

/// Shared by all reconciles of all kinds.
#[derive(Clone)]
pub struct Executor {
    pub client: Client,
    pub recorder: Arc<EventRecorder>,
    pub expectations: Arc<Expectations>,
    pub metrics: Arc<Metrics>,
    /// Name of the controller, for metrics.
    pub controller: &'static str,
}

/// A Pod name: the owner's name, a dash and five random characters.
pub fn pod_name(owner: &str) -> String {
    let mut rng = rand::rng();
    let suffix: String = (0..crate::api::names::POD_NAME_SUFFIX_CHARS)
        .map(|_| SUFFIX_ALPHABET[rng.random_range(0..SUFFIX_ALPHABET.len())] as char)
        .collect();
    format!("{owner}-{suffix}")
}

/// Points the Pod's volume `volume` at `claim`.
pub fn mount(spec: &mut PodSpec, volume: &str, claim: &str) {
    for v in spec.volumes.iter_mut().flatten() {
        if v.name == volume {
            v.empty_dir = None;
            v.persistent_volume_claim = Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.to_string(),
                read_only: None,
            });
        }
    }
}

/// The labels that tell whose a claim is: the owner's selector labels
/// (which carry the managed-by label the cache selects on, and the
/// instance label adoption looks for).
fn claim_labels(owner: &Owner, template: &ClaimTemplate) -> BTreeMap<String, String> {
    let mut labels = template.labels.clone();
    labels.insert(MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string());
    labels.insert(INSTANCE_LABEL.to_string(), owner.name.clone());
    labels
}

/// The claim a new Pod named `pod` runs on: the chosen free one, or a new
/// one named after the Pod (a create the client retried finds its own).
pub async fn claim_for(
    executor: &Executor,
    owner: &Owner,
    template: &ClaimTemplate,
    choice: &Choice,
    pod: &str,
) -> Result<String, Failure> {
    let api: Api<PersistentVolumeClaim> =
        Api::namespaced(executor.client.clone(), &owner.namespace);
    if let Choice::Reuse(name) = choice {
        // The cache may not show yet that the claim is being deleted (a
        // stranded claim, a user's delete): a Pod on it would never start.
        match api.get_opt(name).await {
            Ok(Some(c)) if c.metadata.deletion_timestamp.is_none() => return Ok(name.clone()),
            Ok(_) => {}
            Err(e) => {
                return Err(executor
                    .claim_failure(owner, "FailedCreateClaim", name, &e)
                    .await);
            }
        }
    }
    let claim = PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(pod.to_string()),
            namespace: Some(owner.namespace.clone()),
            labels: Some(claim_labels(owner, template)),
            owner_references: Some(vec![owner.reference.clone()]),
            ..Default::default()
        },
        spec: Some(template.spec.clone()),
        status: None,
    };
    let result = match api.create(&PostParams::default(), &claim).await {
        Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
            match api.get_opt(pod).await {
                Ok(Some(c))
                    if c.owner_references()
                        .iter()
                        .any(|r| r.uid == owner.reference.uid) =>
                {
                    Ok(())
                }
                Ok(_) => Err(kube::Error::Api(s)),
                Err(e) => Err(e),
            }
        }
        other => other.map(drop),
    };
    match result {
        Ok(()) => {
            executor.event_in_background(
                owner,
                EventType::Normal,
                "SuccessfulCreateClaim",
                "Create",
                format!("Created PersistentVolumeClaim {pod}"),
            );
            Ok(pod.to_string())
        }
        Err(e) => {
            let message = format!(
                "Error creating PersistentVolumeClaim {pod}: {}",
                api_message(&e)
            );
            warn!(claim = %pod, error = %e, "claim create failed");
            executor
                .event(
                    owner,
                    EventType::Warning,
                    "FailedCreateClaim",
                    "Create",
                    message.clone(),
                )
                .await;
            Err(Failure {
                reason: "FailedCreateClaim",
                message,
            })
        }
    }
}

impl Executor {
    /// Deletes `plan.delete`, updates `plan.in_place` (found in `live`) and
    /// creates `plan.create` Pods, stopping at the first failed create
    /// batch.
    /// With `claims`, one Pod is created per choice (not `plan.create`),
    /// each on its claim.
    pub async fn execute(
        &self,
        owner: &Owner,
        template: &PodTemplateSpec,
        plan: &Plan,
        live: &[Arc<Pod>],
        claims: Option<Claims<'_>>,
    ) -> Outcome {
        let mut outcome = Outcome::default();
        self.delete(owner, &plan.delete, &mut outcome).await;
        self.update(owner, template, &plan.in_place, live, &mut outcome)
            .await;
        let count = match &claims {
            Some(c) => c.choices.len(),
            None => plan.create.max(0) as usize,
        };
        self.create(owner, template, count, claims, &mut outcome)
            .await;
        outcome
    }

    /// Slow start, as the ReplicaSet controller does: batches of 1, 2, 4, ...
    /// so that a create that fails for every Pod (quota, admission) fails
    /// once, not a hundred times.
    async fn create(
        &self,
        owner: &Owner,
        template: &PodTemplateSpec,
        count: usize,
        claims: Option<Claims<'_>>,
        outcome: &mut Outcome,
    ) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &owner.namespace);
        let created = self
            .create_batches(&api, owner, template, count, claims, outcome)
            .await;
        if !created.is_empty() {
            self.event_in_background(
                owner,
                EventType::Normal,
                "SuccessfulCreate",
                "Create",
                summary("Created", &created),
            );
        }
    }

    async fn create_batches(
        &self,
        api: &Api<Pod>,
        owner: &Owner,
        template: &PodTemplateSpec,
        count: usize,
        claims: Option<Claims<'_>>,
        outcome: &mut Outcome,
    ) -> Vec<String> {
        let mut created = Vec::new();
        let mut batch = 1usize;
        let mut remaining = count;
        while remaining > 0 {
            let size = batch.min(remaining);
            let first = count - remaining;
            let results = join_all((first..first + size).map(|i| {
                let claim = claims.as_ref().map(|c| (c.template, &c.choices[i]));
                self.create_one(api, owner, template, claim)
            }))
            .await;
            let mut failed = false;
            for r in results {
                match r {
                    Ok(name) => {
                        outcome.created += 1;
                        created.push(name);
                    }
                    Err(f) => {
                        failed = true;
                        outcome.failure.get_or_insert(f);
                    }
                }
            }
            if failed {
                let skipped = remaining - size;
                if skipped > 0 {
                    debug!(skipped, "slow start stopped after a failed create");
                }
                return created;
            }
            remaining -= size;
            batch *= 2;
        }
        created
    }

    async fn create_one(
        &self,
        api: &Api<Pod>,
        owner: &Owner,
        template: &PodTemplateSpec,
        claim: Option<(&ClaimTemplate, &Choice)>,
    ) -> Result<String, Failure> {
        let name = pod_name(&owner.name);
        let mut spec = template.spec.clone();
        let claim_name = match claim {
            Some((t, choice)) => {
                let claim = claim_for(self, owner, t, choice, &name).await?;
                if let Some(s) = spec.as_mut() {
                    mount(s, &t.volume, &claim);
                }
                Some(claim)
            }
            None => None,
        };
        let mut metadata = template.metadata.clone().unwrap_or_default();
        metadata.name = Some(name.clone());
        metadata.generate_name = None;
        metadata
            .labels
            .get_or_insert_default()
            .insert(crate::api::names::POD_NAME_LABEL.into(), name.clone());
        if let Some(c) = claim_name {
            metadata
                .labels
                .get_or_insert_default()
                .insert(crate::api::names::CLAIM_LABEL.into(), c);
        }
        metadata.namespace = Some(owner.namespace.clone());
        metadata.owner_references = Some(vec![owner.reference.clone()]);
        let pod = Pod {
            metadata,
            spec,
            status: None,
        };
        self.expectations.expect_create(&owner.key, &name);
        let result = match api.create(&PostParams::default(), &pod).await {
            // A create the client retried (say after a 504) finds the Pod
            // its first attempt made: that is a success, if the Pod is ours.
            Err(kube::Error::Api(s)) if s.code == 409 && s.reason == "AlreadyExists" => {
                match api.get_opt(&name).await {
                    Ok(Some(p)) if is_owned_by(&p, &owner.reference.uid) => Ok(()),
                    Ok(_) => Err(kube::Error::Api(s)),
                    Err(e) => Err(e),
                }
            }
            other => other.map(|_| ()),
        };
        match result {
            Ok(()) => {
                self.expectations.create_confirmed(&owner.key, &name);
                self.metrics.pods_created(self.controller);
                Ok(name)
            }
            Err(e) => {
                self.expectations.create_failed(&owner.key, &name);
                let message = format!("Error creating pod {name}: {}", api_message(&e));
                warn!(pod = %name, error = %e, "create failed");
                self.metrics.pod_operation_failed(self.controller, "create");
                self.event(
                    owner,
                    EventType::Warning,
                    "FailedCreate",
                    "Create",
                    message.clone(),
                )
                .await;
                Err(Failure {
                    reason: "FailedCreate",
                    message,
                })
            }
        }
    }

    async fn delete(&self, owner: &Owner, victims: &[Victim], outcome: &mut Outcome) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &owner.namespace);
        let results = join_all(victims.iter().map(|v| self.delete_one(&api, owner, v))).await;
        let mut deleted = Vec::new();
        for (r, victim) in results.into_iter().zip(victims) {
            match r {
                Ok(true) => {
                    outcome.deleted += 1;
                    let why = match victim.reason {
                        DeleteReason::ScaleDown => "scale down",
                        DeleteReason::Outdated => "outdated template",
                        DeleteReason::Cleanup => "owner deleted",
                        DeleteReason::ResizeInfeasible => {
                            "its node cannot resize it in place; replaced"
                        }
                        DeleteReason::ClaimStranded => {
                            "its volume is on a node it cannot run on; a new claim replaces it"
                        }
                    };
                    deleted.push(format!("{} ({why})", victim.name));
                }
                Ok(false) => {}
                Err(f) => {
                    outcome.failure.get_or_insert(f);
                }
            }
        }
        if !deleted.is_empty() {
            self.event_in_background(
                owner,
                EventType::Normal,
                "SuccessfulDelete",
                "Delete",
                summary("Deleted", &deleted),
            );
        }
    }

    /// Deletes one Pod if it is still the one observed (same uid). Returns
    /// whether a delete was issued.
    pub async fn delete_one(
        &self,
        api: &Api<Pod>,
        owner: &Owner,
        victim: &Victim,
    ) -> Result<bool, Failure> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(victim.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        self.expectations.expect_delete(&owner.key, &victim.uid);
        match metadata_only::delete(api, &victim.name, &params).await {
            Ok(()) => {
                self.expectations.delete_confirmed(&owner.key, &victim.uid);
                self.metrics.pods_deleted(self.controller);
                Ok(true)
            }
            // Already gone, or replaced by another Pod of the same name:
            // either way there is nothing left to delete or to wait for.
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                self.expectations.delete_failed(&owner.key, &victim.uid);
                Ok(false)
            }
            Err(e) => {
                self.expectations.delete_failed(&owner.key, &victim.uid);
                let message = format!("Error deleting pod {}: {}", victim.name, api_message(&e));
                warn!(pod = %victim.name, error = %e, "delete failed");
                self.metrics.pod_operation_failed(self.controller, "delete");
                self.event(
                    owner,
                    EventType::Warning,
                    "FailedDelete",
                    "Delete",
                    message.clone(),
                )
                .await;
                Err(Failure {
                    reason: "FailedDelete",
                    message,
                })
            }
        }
    }

    async fn update(
        &self,
        owner: &Owner,
        template: &PodTemplateSpec,
        updates: &[Update],
        live: &[Arc<Pod>],
        outcome: &mut Outcome,
    ) {
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &owner.namespace);
        let revision = crate::podset::revision::revision_of(template);
        for u in updates {
            let Some(pod) = live
                .iter()
                .find(|p| p.metadata.uid.as_deref() == Some(u.uid.as_str()))
            else {
                continue;
            };
            match self
                .update_one(&api, owner, template, &revision, pod, u)
                .await
            {
                Ok(true) => outcome.updated += 1,
                Ok(false) => {}
                Err(f) => {
                    outcome.failure.get_or_insert(f);
                }
            }
        }
    }

    /// Updates one Pod in place: the `resize` subresource first when
    /// resources change (a refusal marks the Pod, which is then replaced),
    /// then a patch of its images and revision. Returns whether it was
    /// updated.
    async fn update_one(
        &self,
        api: &Api<Pod>,
        owner: &Owner,
        template: &PodTemplateSpec,
        revision: &str,
        pod: &Pod,
        u: &Update,
    ) -> Result<bool, Failure> {
        if u.counted_unready && crate::podset::pods::pod_is_ready(pod) {
            // Ready since the plan: the next round decides with it counted.
            return Ok(false);
        }
        let mut what: Vec<String> = inplace::image_changes(pod, template)
            .into_iter()
            .map(|c| format!("image {} -> {}", c.from, c.to))
            .collect();
        if u.change == Change::Resources
            && let Some(patch) = inplace::resize_patch(pod, template)
        {
            let resized = api
                .patch_subresource(
                    "resize",
                    &u.name,
                    &PatchParams::default(),
                    &Patch::Strategic(&patch),
                )
                .await;
            match resized {
                Ok(_) => what.push(format!("resources resized ({})", resource_note(&patch))),
                Err(kube::Error::Api(s)) if matches!(s.code, 400 | 403 | 404 | 405 | 422) => {
                    // The cluster does not allow this resize: mark the Pod
                    // so that the planner replaces it instead.
                    let mark = serde_json::json!({"metadata": {
                        "uid": u.uid,
                        "annotations": {RESIZE_REFUSED_ANNOTATION: revision},
                    }});
                    let marked = api
                        .patch(&u.name, &PatchParams::default(), &Patch::Merge(&mark))
                        .await;
                    if let Err(e) = marked {
                        warn!(pod = %u.name, error = %e, "cannot mark a refused resize");
                    }
                    self.event_in_background(
                        owner,
                        EventType::Warning,
                        "ResizeRefused",
                        "Update",
                        format!(
                            "Cannot resize Pod {} in place ({} {}): replacing it instead",
                            u.name, s.code, s.message
                        ),
                    );
                    return Ok(false);
                }
                Err(kube::Error::Api(s)) if s.code == 409 => return Ok(false),
                Err(e) => return Err(self.update_failed(owner, &u.name, &e).await),
            }
        }
        let patch =
            inplace::update_patch(pod, template, revision, k8s_openapi::jiff::Timestamp::now());
        self.expectations.expect_update(&owner.key, &u.uid);
        match api
            .patch(&u.name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
        {
            Ok(p) => {
                let rv = p.metadata.resource_version.and_then(|v| v.parse().ok());
                self.expectations.update_confirmed(&owner.key, &u.uid, rv);
                if what.is_empty() {
                    what.push("revision only".into());
                }
                self.event_in_background(
                    owner,
                    EventType::Normal,
                    "UpdatedInPlace",
                    "Update",
                    format!("Updated Pod {} in place: {}", u.name, what.join(", ")),
                );
                Ok(true)
            }
            // Gone, or another Pod of that name.
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {
                self.expectations.update_failed(&owner.key, &u.uid);
                Ok(false)
            }
            Err(e) => {
                self.expectations.update_failed(&owner.key, &u.uid);
                Err(self.update_failed(owner, &u.name, &e).await)
            }
        }
    }

    async fn update_failed(&self, owner: &Owner, pod: &str, e: &kube::Error) -> Failure {
        let message = format!("Error updating pod {pod} in place: {}", api_message(e));
        warn!(%pod, error = %e, "in-place update failed");
        self.metrics.pod_operation_failed(self.controller, "update");
        self.event(
            owner,
            EventType::Warning,
            "FailedUpdate",
            "Update",
            message.clone(),
        )
        .await;
        Failure {
            reason: "FailedUpdate",
            message,
        }
    }

    /// Records an Event in the background, so that Pod creates and deletes
    /// do not wait for it (the ReplicaSet controller's broadcaster does the
    /// same).
    /// A claim write the API server refused: a Warning Event and the
    /// step's failure.
    pub async fn claim_failure(
        &self,
        owner: &Owner,
        reason: &'static str,
        claim: &str,
        e: &kube::Error,
    ) -> Failure {
        let message = format!("PersistentVolumeClaim {claim}: {}", api_message(e));
        warn!(claim, error = %e, reason, "claim write failed");
        self.event(owner, EventType::Warning, reason, "Claim", message.clone())
            .await;
        Failure { reason, message }
    }

    pub fn event_in_background(
        &self,
        owner: &Owner,
        type_: EventType,
        reason: &'static str,
        action: &'static str,
        note: String,
    ) {
        let recorder = self.recorder.clone();
        let target = owner.event_target.clone();
        tokio::spawn(async move { recorder.publish(&target, type_, reason, action, note).await });
    }

    /// Records an Event; a failure to record is logged, never fatal.
    pub async fn event(
        &self,
        owner: &Owner,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        self.recorder
            .publish(&owner.event_target, type_, reason, action, note)
            .await;
    }
}

fn is_owned_by(pod: &Pod, uid: &str) -> bool {
    pod.metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.uid == uid && r.controller == Some(true))
}

/// What a resize patch asks for, for Events: `redis: requests cpu=200m`.
fn resource_note(patch: &serde_json::Value) -> String {
    let mut parts = Vec::new();
    for c in patch["spec"]["containers"].as_array().into_iter().flatten() {
        for kind in ["requests", "limits"] {
            if let Some(m) = c["resources"][kind].as_object() {
                let set: Vec<String> = m
                    .iter()
                    .map(|(k, v)| match v.as_str() {
                        Some(q) => format!("{k}={q}"),
                        None => format!("{k} removed"),
                    })
                    .collect();
                parts.push(format!(
                    "{}: {kind} {}",
                    c["name"].as_str().unwrap_or_default(),
                    set.join(" ")
                ));
            }
        }
    }
    parts.join("; ")
}

/// One Event for every batch of Pods a reconcile created or deleted:
/// "Created pod: a" or "Created 3 pods: a, b, c", naming as many as fit in
/// the Event API's 1 kB note ("... and 12 more" for the rest).
pub fn summary(verb: &str, names: &[String]) -> String {
    const LIMIT: usize = 1000;
    let mut text = match names {
        [one] => return format!("{verb} pod: {one}"),
        _ => format!("{verb} {} pods: ", names.len()),
    };
    for (i, name) in names.iter().enumerate() {
        let rest = names.len() - i;
        let tail = format!(" and {rest} more");
        if text.len() + name.len() + 2 + tail.len() > LIMIT && rest > 1 {
            text.push_str(tail.trim_start_matches(' '));
            return text;
        }
        if i > 0 {
            text.push_str(", ");
        }
        text.push_str(name);
    }
    text
}

#[cfg(test)]
impl Executor {
    /// An executor on `client` (see [`crate::runtime::mock_api`]), for unit tests.
    pub fn for_tests(client: Client) -> Self {
        Executor {
            client: client.clone(),
            recorder: Arc::new(crate::runtime::events::EventRecorder::new(
                client, "test", None,
            )),
            expectations: Arc::default(),
            metrics: crate::metrics::Metrics::new(),
            controller: "test",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::summary;

    /// A create the client retried (after a 504, say) answers 409
    /// AlreadyExists for the name podkeeper chose: a success when that Pod
    /// is the owner's (no FailedCreate; its Pod expected from the watch), a
    /// failure when it is someone else's.
    #[tokio::test]
    async fn a_create_answered_already_exists_is_ours_only_if_the_pod_is() {
        use super::Executor;
        use crate::runtime::mock_api;
        use crate::runtime::owner::Owner;
        use k8s_openapi::api::core::v1::PodTemplateSpec;
        use std::sync::{Arc, Mutex};

        for (holder, ours) in [("u", true), ("someone-else", false)] {
            let events = Arc::new(Mutex::new(0));
            let seen = events.clone();
            let client = mock_api::client(move |method, path, _| {
                if path.ends_with("/events") {
                    *seen.lock().unwrap() += 1;
                    return (201, serde_json::json!({}));
                }
                match (method.as_str(), path.rsplit_once("/pods")) {
                    ("POST", Some((_, ""))) => (409, mock_api::status(409, "AlreadyExists")),
                    ("GET", Some((_, name))) => (
                        200,
                        serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                            "metadata": {"name": name.trim_start_matches('/'),
                                "namespace": "ns", "ownerReferences": [{
                                    "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
                                    "name": "r", "uid": holder, "controller": true}]}}),
                    ),
                    other => panic!("unexpected request {other:?} {path}"),
                }
            });
            let executor = Executor::for_tests(client.clone());
            let redis: crate::api::Redis = serde_json::from_value(serde_json::json!({
                "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
                "metadata": {"name": "r", "namespace": "ns", "uid": "u"},
                "spec": {"replicas": 1},
            }))
            .unwrap();
            let owner = Owner::of(&redis, "Redis");
            let api = kube::Api::namespaced(client, "ns");
            let created = executor
                .create_one(&api, &owner, &PodTemplateSpec::default(), None)
                .await;
            assert_eq!(created.is_ok(), ours, "{holder}: {created:?}");
            // Ours: the watch is yet to show it; someone else's: released.
            assert_eq!(executor.expectations.satisfied(&owner.key), !ours);
            let failed_events = *events.lock().unwrap();
            assert_eq!(failed_events > 0, !ours, "{holder}: FailedCreate Events");
        }
    }

    #[test]
    fn one_event_names_the_pods_of_a_reconcile() {
        let names: Vec<String> = (0..12).map(|i| format!("r-{i}")).collect();
        assert_eq!(summary("Created", &names[..1]), "Created pod: r-0");
        assert_eq!(summary("Deleted", &names[..2]), "Deleted 2 pods: r-0, r-1");
        let twelve = summary("Created", &names);
        assert!(twelve.starts_with("Created 12 pods: r-0, "), "{twelve}");
        assert!(twelve.ends_with("r-10, r-11"), "{twelve}");
        let many: Vec<String> = (0..100).map(|i| format!("redis-{i:05}")).collect();
        let long = summary("Created", &many);
        assert!(long.len() <= 1000, "{}", long.len());
        let shown = long.matches("redis-").count();
        assert!(
            long.ends_with(&format!("and {} more", 100 - shown)),
            "{long}"
        );
    }
}
