//! The claims' I/O besides a new Pod's own claim (made by the executor with
//! the Pod): the cache of the PersistentVolumeClaims podkeeper made,
//! adoption, expansion, surplus claims deleted, and at an owner's deletion
//! its claims deleted or let go (see [`crate::podset::claims`]
//! for which).

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use kube::api::{DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::reflector::Store;
use kube::{Api, ResourceExt};

use crate::api::names::{
    INSTANCE_LABEL, LAST_PRIMARY_ANNOTATION, MANAGED_BY_LABEL, MANAGED_BY_VALUE,
};
use crate::podset::claims::{ClaimTemplate, ObservedClaim};
use crate::podset::executor::{Executor, summary};
use crate::runtime::events::EventType;
use crate::runtime::failure::Failure;
use crate::runtime::metadata_only;
use crate::runtime::owner::Owner;

/// Every PersistentVolumeClaim podkeeper made (label-selected), with
/// managedFields stripped.
#[derive(Clone)]
pub struct ClaimCache(pub Store<PersistentVolumeClaim>);

impl ClaimCache {
    /// A cache that holds nothing (for kinds and tests without claims).
    pub fn empty() -> Self {
        ClaimCache(kube::runtime::reflector::store().0)
    }

    /// The claims `owner` owns, and those of its name that no one owns
    /// (kept from a deleted owner of the same name, to be adopted).
    pub fn of(&self, owner: &Owner) -> (Vec<ObservedClaim>, Vec<PersistentVolumeClaim>) {
        let mut owned = Vec::new();
        let mut orphans = Vec::new();
        for c in self.0.state() {
            if c.namespace().as_deref() != Some(owner.namespace.as_str()) {
                continue;
            }
            let refs = c.owner_references();
            if refs.iter().any(|r| r.uid == owner.reference.uid) {
                owned.push(observe(&c));
            } else if refs.is_empty()
                && c.labels().get(INSTANCE_LABEL) == Some(&owner.name)
                && c.labels().get(MANAGED_BY_LABEL).map(String::as_str) == Some(MANAGED_BY_VALUE)
            {
                orphans.push((*c).clone());
            }
        }
        (owned, orphans)
    }
}

pub fn observe(c: &PersistentVolumeClaim) -> ObservedClaim {
    ObservedClaim {
        name: c.name_any(),
        uid: c.uid().unwrap_or_default(),
        created: c.creation_timestamp().map(|t| t.0).unwrap_or_default(),
        deleting: c.metadata.deletion_timestamp.is_some(),
        last_primary: c.annotations().contains_key(LAST_PRIMARY_ANNOTATION),
    }
}

/// Takes claims kept from a deleted owner of the same name: they get the
/// owner's reference (and so follow its retention policy).
pub async fn adopt(
    executor: &Executor,
    owner: &Owner,
    orphans: &[PersistentVolumeClaim],
) -> Result<(), Failure> {
    if orphans.is_empty() {
        return Ok(());
    }
    let api: Api<PersistentVolumeClaim> =
        Api::namespaced(executor.client.clone(), &owner.namespace);
    let mut adopted = Vec::new();
    for c in orphans {
        let patch = serde_json::json!({
            "metadata": {
                "ownerReferences": [owner.reference],
                "resourceVersion": c.resource_version(),
            }
        });
        if let Err(e) = api
            .patch_metadata(
                &c.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            return Err(executor
                .claim_failure(owner, "FailedAdoptClaim", &c.name_any(), &e)
                .await);
        }
        adopted.push(c.name_any());
    }
    executor.event_in_background(
        owner,
        EventType::Normal,
        "AdoptedClaims",
        "Adopt",
        format!(
            "{}, kept from a deleted {} of this name",
            summary("Adopted PersistentVolumeClaims", &adopted),
            owner.reference.kind
        ),
    );
    Ok(())
}

/// Deletes claims (with a uid precondition), saying why in one Event.
pub async fn delete(
    executor: &Executor,
    owner: &Owner,
    claims: &[&ObservedClaim],
    why: &str,
) -> Result<(), Failure> {
    if claims.is_empty() {
        return Ok(());
    }
    let api: Api<PersistentVolumeClaim> =
        Api::namespaced(executor.client.clone(), &owner.namespace);
    let mut deleted = Vec::new();
    for c in claims {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(c.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match metadata_only::delete(&api, &c.name, &params).await {
            Ok(()) => deleted.push(c.name.clone()),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => {
                return Err(executor
                    .claim_failure(owner, "FailedDeleteClaim", &c.name, &e)
                    .await);
            }
        }
    }
    if !deleted.is_empty() {
        executor.event_in_background(
            owner,
            EventType::Normal,
            "DeletedClaims",
            "Delete",
            format!(
                "{} ({why})",
                summary("Deleted PersistentVolumeClaims", &deleted)
            ),
        );
    }
    Ok(())
}

/// Lets claims go at the owner's deletion (`whenDeleted: Retain`): their
/// owner reference is removed, so the garbage collector keeps them and an
/// owner of the same name created later adopts them. `primary` (the claim
/// the kind says holds the newest data) is annotated so, the others not.
pub async fn release(
    executor: &Executor,
    owner: &Owner,
    claims: &[ObservedClaim],
    primary: Option<&str>,
) -> Result<(), Failure> {
    if claims.is_empty() {
        return Ok(());
    }
    let api: Api<PersistentVolumeClaim> =
        Api::namespaced(executor.client.clone(), &owner.namespace);
    let mut kept = Vec::new();
    for c in claims {
        // The uid makes it a conflict for another claim of the same name.
        let mark = (Some(c.name.as_str()) == primary).then_some("true");
        let patch = serde_json::json!({
            "metadata": {
                "uid": c.uid,
                "ownerReferences": null,
                "annotations": {LAST_PRIMARY_ANNOTATION: mark},
            }
        });
        match api
            .patch_metadata(&c.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => kept.push(c.name.clone()),
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => {
                return Err(executor
                    .claim_failure(owner, "FailedReleaseClaim", &c.name, &e)
                    .await);
            }
        }
    }
    executor
        .event(
            owner,
            EventType::Normal,
            "KeptClaims",
            "Cleanup",
            format!(
                "{} (retention whenDeleted: Retain); a {} of the same name created later takes them back",
                summary("Kept PersistentVolumeClaims", &kept),
                owner.reference.kind
            ),
        )
        .await;
    Ok(())
}

/// The storage a claim (or a claim spec) requests, in bytes.
fn requested(spec: Option<&k8s_openapi::api::core::v1::PersistentVolumeClaimSpec>) -> Option<u64> {
    let q = spec?
        .resources
        .as_ref()?
        .requests
        .as_ref()?
        .get("storage")?;
    crate::runtime::quantity::bytes(q)
}

/// Grows the owner's claims that request less than the template (a
/// StorageClass with `allowVolumeExpansion` resizes the volume; the API
/// server refuses it otherwise, and the refusal is the step's failure).
pub async fn expand(
    executor: &Executor,
    cache: &ClaimCache,
    owner: &Owner,
    template: &ClaimTemplate,
) -> Result<(), Failure> {
    let Some(want) = requested(Some(&template.spec)) else {
        return Ok(());
    };
    let size = template
        .spec
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .cloned();
    let api: Api<PersistentVolumeClaim> =
        Api::namespaced(executor.client.clone(), &owner.namespace);
    for c in cache.0.state() {
        let ours = c.namespace().as_deref() == Some(owner.namespace.as_str())
            && c.owner_references()
                .iter()
                .any(|r| r.uid == owner.reference.uid);
        if !ours || c.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if requested(c.spec.as_ref()).is_none_or(|have| have >= want) {
            continue;
        }
        let patch = serde_json::json!({
            "spec": {"resources": {"requests": {"storage": size}}}
        });
        match api
            .patch(
                &c.name_any(),
                &PatchParams::default(),
                &Patch::Merge(&patch),
            )
            .await
        {
            Ok(_) => executor.event_in_background(
                owner,
                EventType::Normal,
                "ExpandingClaim",
                "Expand",
                format!(
                    "Asked for PersistentVolumeClaim {} to grow to {}",
                    c.name_any(),
                    size.as_ref().map(|q| q.0.as_str()).unwrap_or_default()
                ),
            ),
            Err(e) => {
                // The API server's answer for a class without
                // `allowVolumeExpansion` is a 403 that speaks of resizing;
                // anything else (quota, webhook, 5xx) may pass on a retry.
                let not_expandable = matches!(&e, kube::Error::Api(s)
                    if s.code == 403 && s.message.contains("resize"));
                let reason = if not_expandable {
                    "ClaimNotExpandable"
                } else {
                    "FailedExpandClaim"
                };
                return Err(executor
                    .claim_failure(owner, reason, &c.name_any(), &e)
                    .await);
            }
        }
    }
    Ok(())
}
