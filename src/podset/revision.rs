//! A template's revision: the template hash ([`content_hash`]), a short,
//! stable digest of the Pod template that the engine writes into each Pod's labels (a Pod whose
//! hash differs from the current template's is outdated and gets rolled),
//! and the in-place keys, the same digest with images (and resources) left
//! out, that tell which outdated Pods can be updated in place (see
//! [`crate::podset::inplace`]).

use k8s_openapi::api::core::v1::{Container, PodTemplateSpec};

use crate::api::names::{BUT_IMAGES_ANNOTATION, BUT_RESOURCES_ANNOTATION, TEMPLATE_HASH_LABEL};
use crate::runtime::hash::content_hash;

/// Stamps a Pod template with the hash of its contents
/// ([`TEMPLATE_HASH_LABEL`]) and its in-place keys (annotations, see
/// [`crate::podset::inplace`]), all computed before anything is added.
pub fn stamp(mut template: PodTemplateSpec) -> PodTemplateSpec {
    let hash = content_hash(&template);
    let keys = InPlaceKeys::of_template(&template);
    stamp_keys(&mut template, keys);
    let metadata = template.metadata.get_or_insert_with(Default::default);
    metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert(TEMPLATE_HASH_LABEL.into(), hash);
    template
}

/// The hash a stamped template carries.
pub fn revision_of(template: &PodTemplateSpec) -> String {
    template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.as_ref())
        .and_then(|l| l.get(TEMPLATE_HASH_LABEL))
        .cloned()
        .unwrap_or_default()
}

/// The two in-place hashes of a template (or a Pod).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct InPlaceKeys {
    pub but_images: String,
    pub but_resources: String,
}

impl InPlaceKeys {
    /// The keys of a template, computed from its contents (before any
    /// label or annotation of ours is added).
    pub fn of_template(template: &PodTemplateSpec) -> Self {
        let mut t = template.clone();
        let containers: &mut [Container] = t
            .spec
            .as_mut()
            .map(|s| &mut s.containers[..])
            .unwrap_or_default();
        for c in containers.iter_mut() {
            c.image = None;
        }
        let but_images = content_hash(&t);
        if let Some(s) = t.spec.as_mut() {
            for c in s.containers.iter_mut() {
                c.resources = None;
            }
        }
        InPlaceKeys {
            but_images,
            but_resources: content_hash(&t),
        }
    }

    /// The keys stamped on a Pod or template, if it has them.
    pub fn read(annotations: Option<&std::collections::BTreeMap<String, String>>) -> Option<Self> {
        let a = annotations?;
        Some(InPlaceKeys {
            but_images: a.get(BUT_IMAGES_ANNOTATION)?.clone(),
            but_resources: a.get(BUT_RESOURCES_ANNOTATION)?.clone(),
        })
    }
}

/// Adds `keys` (computed from the template before anything of ours was
/// added to it) to its annotations.
pub fn stamp_keys(template: &mut PodTemplateSpec, keys: InPlaceKeys) {
    let annotations = template
        .metadata
        .get_or_insert_with(Default::default)
        .annotations
        .get_or_insert_with(Default::default);
    annotations.insert(BUT_IMAGES_ANNOTATION.into(), keys.but_images);
    annotations.insert(BUT_RESOURCES_ANNOTATION.into(), keys.but_resources);
}
