//! Every label, annotation, finalizer and field-manager name podkeeper
//! writes or reads, in one place: what `kubectl get -l`, `kubectl describe`
//! and a GitOps tool see of it.

// Names of the objects podkeeper derives from its own.

/// The longest DNS-1035 label: a Service name, a host name (a Pod's name),
/// a label value.
pub const DNS_LABEL_MAX: usize = 63;

/// Characters of the random suffix of a Pod's name (`<owner>-xxxxx`).
pub const POD_NAME_SUFFIX_CHARS: usize = 5;

/// What a Pod's name adds to its owner's: a dash and the random suffix.
pub const POD_NAME_SUFFIX_LEN: usize = 1 + POD_NAME_SUFFIX_CHARS;

// Labels on the objects podkeeper makes.

/// Label on every Pod podkeeper creates; the Pod watch selects on it.
pub const MANAGED_BY_LABEL: &str = "app.kubernetes.io/managed-by";

pub const MANAGED_BY_VALUE: &str = "podkeeper";

pub const NAME_LABEL: &str = "app.kubernetes.io/name";

pub const INSTANCE_LABEL: &str = "app.kubernetes.io/instance";

/// The label on every Pod that says its role: `primary` or `replica`.
pub const ROLE_LABEL: &str = "podkeeper.dev/role";

/// The label on every Pod podkeeper creates that carries the Pod's own
/// name, so that a Service can select exactly one Pod: a Redis's `<name>`
/// Service selects its primary by it.
pub const POD_NAME_LABEL: &str = "podkeeper.dev/pod-name";

/// The label on a Pod that names the PersistentVolumeClaim it keeps its
/// data on (kinds with a claim per Pod: a Redis with `spec.storage`). A
/// claim is named after the Pod it was first made for; a replacement Pod
/// takes it over.
pub const CLAIM_LABEL: &str = "podkeeper.dev/claim";

/// The annotation on the claim that held a deleted Redis's primary, when
/// its claims are kept (`whenDeleted: Retain`): a Redis of the same name
/// that adopts them starts its primary there.
pub const LAST_PRIMARY_ANNOTATION: &str = "podkeeper.dev/last-primary";

/// The label that carries a Pod's template hash.
pub const TEMPLATE_HASH_LABEL: &str = "podkeeper.dev/template-hash";

/// The label on the `RedisBackup` objects a Redis's `spec.backup` schedule
/// made: the Redis's name (`kubectl get rbk -l podkeeper.dev/backup-schedule=<redis>`).
pub const SCHEDULE_LABEL: &str = "podkeeper.dev/backup-schedule";

// Annotations.

/// On a Redis: a person asks for its primary to move to the named member,
/// or (`any`) to the best replica; podkeeper removes it once answered (see
/// [`crate::redis::switchover`]).
pub const SWITCHOVER_ANNOTATION: &str = "podkeeper.dev/switchover-to";

/// The annotation on a scheduled `RedisBackup`: the cron occurrence (RFC
/// 3339, UTC) it was made for.
pub const SCHEDULED_AT_ANNOTATION: &str = "podkeeper.dev/scheduled-at";

/// On a Redis member's Pod template: the `<name>-podkeeper` Secret's
/// resourceVersion its passwords were read at (`status.credentialsVersion`);
/// a rotation changes it, and so rolls the members.
pub const CREDENTIALS_VERSION_ANNOTATION: &str = "podkeeper.dev/credentials-version";

/// The template hash with every container's image left out.
pub const BUT_IMAGES_ANNOTATION: &str = "podkeeper.dev/template-hash-but-images";

/// The template hash with every container's image and resources left out.
pub const BUT_RESOURCES_ANNOTATION: &str = "podkeeper.dev/template-hash-but-images-resources";

/// The revision a Pod was last updated to in place.
pub const UPDATED_IN_PLACE_ANNOTATION: &str = "podkeeper.dev/updated-in-place";

/// When the Pod was last updated in place (RFC 3339).
pub const UPDATED_AT_ANNOTATION: &str = "podkeeper.dev/updated-in-place-at";

/// The containers an in-place image change restarts, with the ID each ran as
/// when the update was sent (a JSON object, name to containerID): such a
/// container is updated once it runs as another ID. Image names cannot tell
/// this alone: a runtime may report the running container by another tag of
/// the same image, and a start time has only seconds.
pub const RESTARTED_FROM_ANNOTATION: &str = "podkeeper.dev/updated-in-place-from";

/// The revision for which the API server refused to resize the Pod: it is
/// replaced instead.
pub const RESIZE_REFUSED_ANNOTATION: &str = "podkeeper.dev/resize-refused";

/// Hash of the Service podkeeper last applied, to notice fields removed
/// from `spec.service`.
pub const APPLIED_HASH_ANNOTATION: &str = "podkeeper.dev/applied-hash";

/// The annotation that ranks Pods for scale-down (as for ReplicaSets).
pub const DELETION_COST_ANNOTATION: &str = "controller.kubernetes.io/pod-deletion-cost";

// Finalizers.

/// The finalizer that makes a deleted owner wait for its Pods.
pub const FINALIZER: &str = "podkeeper.dev/cleanup";

/// The finalizer the API server adds for `propagationPolicy: Orphan`
/// (`kubectl delete --cascade=orphan`).
pub const ORPHAN_FINALIZER: &str = "orphan";

// Field managers.

/// Field manager for server-side apply, patches and status writes.
pub const FIELD_MANAGER: &str = "podkeeper";
