//! The Redis kind's [`Extras`]: replication and the two Services.
//!
//! Before the engine acts ([`Extras::steer`]), one round of
//! [`crate::redis::replication::act`]: the passwords from their Secrets
//! ([`crate::redis::auth`]), every member observed at once (with timeouts), the planner, its
//! commands (fences, the promotion, repoints, or a `FAILOVER`), the role
//! labels moved, and the primary kept out of the engine's deletions until
//! it has handed its role over. After ([`Extras::apply`]), the Services
//! `<name>` and `<name>-replicas` are applied with server-side apply.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::channel::mpsc::UnboundedSender;
use k8s_openapi::api::core::v1::{Node, PersistentVolumeClaim, Pod, PodTemplateSpec, Service};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Api, ResourceExt};

use crate::api::Redis;
use crate::api::names::{FIELD_MANAGER, POD_NAME_LABEL, ROLE_LABEL};
use crate::api::redis::{DefaultUser, MemberStatus, PrimaryStatus, REPLICATED_CONDITION};
use crate::podset::plan::{Desired, Plan};
use crate::podset::reconcile::Extras;
use crate::podset::{Context, ObservedPod};
use crate::redis::auth;
use crate::redis::metrics::{RedisMetrics, RoundSeen};
use crate::redis::pod::MemberPorts;
use crate::redis::replication::acl::{Own, Users};
use crate::redis::replication::act::{self, Memory, PodRef};
use crate::redis::replication::client::{Access, Route, Timeouts};
use crate::redis::replication::topology::{Action, Cause, RecordedPrimary, Settings, Waiting};
use crate::redis::restore::{self, RestoreState};
use crate::redis::services::{desired_services, service_names};
use crate::redis::{certs, credentials, switchover, tls};
use crate::redis::{disruption, network, rollout};
use crate::runtime::Error;
use crate::runtime::events::EventType;
use crate::runtime::failure::{Failure, api_message};
use crate::runtime::owner::Owner;
use crate::runtime::service_applier::ServiceApplier;
use crate::runtime::services::{cleanup_services, owned_named, owned_services, service_in_sync};
use crate::runtime::status::Pace;

/// A new Redis (no primary recorded) that adopted claims kept from a
/// deleted one of its name: the claim that held its primary stands for the
/// record, so the member on it leads (see
/// [`crate::api::names::LAST_PRIMARY_ANNOTATION`]).
fn adopted_primary_claim(ctx: &Context, owner: &Owner) -> Option<RecordedPrimary> {
    let (owned, _) = ctx.claims.of(owner);
    let claim = owned.iter().find(|c| c.last_primary && !c.deleting)?;
    Some(RecordedPrimary {
        pod: String::new(),
        run_id: String::new(),
        term: 0,
        claim: Some(claim.name.clone()),
    })
}

/// A budget podkeeper could not write: a Warning Event and the step's
/// failure.
async fn budget_failure(ctx: &Context, owner: &Owner, name: &str, e: &kube::Error) -> Failure {
    let message = format!("PodDisruptionBudget {name}: {}", api_message(e));
    tracing::warn!(budget = %name, error = %e, "budget write failed");
    ctx.executor
        .event(
            owner,
            EventType::Warning,
            "FailedDisruptionBudget",
            "Apply",
            message.clone(),
        )
        .await;
    Failure {
        reason: "FailedDisruptionBudget",
        message,
    }
}

/// How often to look again while no member answers at all.
pub const SILENT_PERIOD: Duration = Duration::from_secs(30);

/// What the status shows of replication.
#[derive(Clone, Debug, Default)]
pub struct Replication {
    pub primary: Option<PrimaryStatus>,
    pub members: Vec<MemberStatus>,
    /// The `Replicated` condition: status (`True`, `False`, `Unknown`),
    /// reason, message; `None` when
    /// nothing was observed this time.
    pub condition: Option<(&'static str, &'static str, String)>,
    /// When to look again.
    pub requeue_after_seconds: Option<i64>,
    /// The Services the cache does not show as wanted yet (applied beside
    /// the reconcile): a Redis is not Ready for clients until they are.
    pub services_pending: Vec<String>,
    /// Where the restore of a Redis being restored is (`spec.restore`).
    pub restore: Option<RestoreState>,
    /// The `CertificateServed` condition (`spec.tls`): status, reason,
    /// message.
    pub certificate: Option<(&'static str, &'static str, String)>,
    /// The `CredentialsCurrent` condition: status, reason, message.
    pub credentials: Option<(&'static str, &'static str, String)>,
    /// `status.credentialsVersion`, when a rotation starts.
    pub credentials_version: Option<String>,
}

/// Replication and the Services of every Redis.
pub struct ReplicationExtras {
    /// The two Services, applied beside the reconcile.
    pub applier: ServiceApplier<Redis>,
    /// Since when each member has been silent, per Redis uid.
    silence: Mutex<HashMap<String, Arc<Memory>>>,
    timeouts: Timeouts,
    /// Set when members are reached through port-forwards (the operator
    /// outside the cluster), not at their Pod IPs.
    port_forward: Option<kube::Client>,
    /// Asks the controller for a reconcile of a Redis (its members' answers
    /// changed).
    wake: Option<UnboundedSender<ObjectRef<Redis>>>,
    /// The budgets and the nodes (see [`crate::redis::disruption`]); none
    /// in unit tests.
    disruptions: Option<Disruptions>,
    /// The operator's own image, for the `restore` init container of a
    /// Redis being restored (see [`crate::redis::restore`]).
    restore_image: Option<String>,
    /// `spec.networkPolicy` (see [`crate::redis::network`]).
    network: network::Applier,
    /// Switchovers people asked for (see [`crate::redis::switchover`]).
    requests: switchover::Answered,
    /// What the rounds see, for `/metrics` (see [`crate::redis::metrics`]).
    metrics: Arc<RedisMetrics>,
}

/// The caches [`crate::redis::disruption`] reads.
#[derive(Clone)]
pub struct Disruptions {
    /// The PodDisruptionBudgets podkeeper made (label-selected).
    pub budgets: Store<PodDisruptionBudget>,
    /// Every node, without its status.
    pub nodes: Store<Node>,
}

impl ReplicationExtras {
    pub fn new(
        applier: ServiceApplier<Redis>,
        port_forward: Option<kube::Client>,
        wake: Option<UnboundedSender<ObjectRef<Redis>>>,
    ) -> Self {
        let port_forward_is_set = port_forward.is_some();
        ReplicationExtras {
            applier,
            port_forward,
            wake,
            disruptions: None,
            restore_image: None,
            network: network::Applier::new(std::env::var("POD_NAMESPACE").ok()),
            requests: switchover::Answered::default(),
            metrics: Arc::default(),
            silence: Mutex::new(HashMap::new()),
            timeouts: if port_forward_is_set {
                // Through the API server's port-forward: a stream per
                // connection is set up by the API server and the kubelet.
                Timeouts {
                    deadline: Duration::from_secs(5),
                }
            } else {
                // In-cluster round trips are sub-millisecond: a member that
                // has not connected, logged in and answered both INFO
                // sections within 1.5 s is silent.
                Timeouts {
                    deadline: Duration::from_millis(1500),
                }
            },
        }
    }

    /// With the budget and node caches: budgets applied, cordons seen.
    pub fn with_disruptions(mut self, disruptions: Disruptions) -> Self {
        self.disruptions = Some(disruptions);
        self
    }

    /// With the image of the `restore` init container (the operator's
    /// own): Redis objects with `spec.restore` can be restored.
    /// The Redis metrics the operator's `/metrics` serves.
    pub fn with_metrics(mut self, metrics: Arc<RedisMetrics>) -> Self {
        self.metrics = metrics;
        self
    }

    pub fn with_restore_image(mut self, image: Option<String>) -> Self {
        self.restore_image = image;
        self
    }

    /// Where the restore of `redis` is, while it is being restored; a
    /// restore that cannot start creates no Pods (`plan.create` 0) and is
    /// a Warning.
    async fn restore_state(
        &self,
        redis: &Redis,
        ctx: &Context,
        owner: &Owner,
        pods: &[Arc<Pod>],
        plan: &mut Plan,
    ) -> Option<RestoreState> {
        if !restore::restoring(redis) {
            return None;
        }
        let state = match (restore::resolve(redis, &ctx.client).await, &self.restore_image) {
            (Ok(from), Some(_)) => RestoreState::Restoring {
                from,
                failed: restore::failure(pods),
            },
            (Ok(_), None) => RestoreState::Blocked(
                "NoRestoreImage",
                "the operator does not know its own image for the restore init container: run it in a Pod or with --restore-image".into(),
            ),
            (Err((reason, message)), _) => RestoreState::Blocked(reason, message),
        };
        let warning = match &state {
            RestoreState::Blocked(reason, message) => {
                plan.create = 0;
                Some((*reason, message.clone()))
            }
            RestoreState::Restoring {
                failed: Some(why), ..
            } => Some(("RestoreFailed", why.clone())),
            RestoreState::Restoring { .. } => None,
        };
        if let Some((reason, message)) = warning {
            ctx.executor
                .event(owner, EventType::Warning, reason, "Restore", message)
                .await;
        }
        Some(state)
    }

    /// The members on cordoned nodes.
    fn cordoned(&self, pods: &[Arc<Pod>]) -> Vec<String> {
        let Some(d) = &self.disruptions else {
            return Vec::new();
        };
        disruption::on_cordoned_nodes(pods, &disruption::cordoned(&d.nodes.state()))
    }

    /// Applies the budgets the cache does not show as wanted (server-side
    /// apply), and deletes the primary's budget of a Redis of one member.
    async fn apply_budgets(
        &self,
        redis: &Redis,
        ctx: &Context,
        owner: &Owner,
        has_primary: bool,
    ) -> Option<Failure> {
        let d = self.disruptions.as_ref()?;
        let live: Vec<Arc<PodDisruptionBudget>> = d
            .budgets
            .state()
            .into_iter()
            .filter(|b| {
                b.namespace().as_deref() == Some(owner.namespace.as_str())
                    && b.owner_references()
                        .iter()
                        .any(|r| r.uid == owner.reference.uid)
            })
            .collect();
        let want = disruption::desired_budgets(redis, owner, has_primary);
        let api: Api<PodDisruptionBudget> = Api::namespaced(ctx.client.clone(), &owner.namespace);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        for w in &want {
            let name = w.name_any();
            if live
                .iter()
                .any(|l| l.name_any() == name && disruption::budget_in_sync(w, l))
            {
                continue;
            }
            if let Err(e) = api.patch(&name, &params, &Patch::Apply(w)).await {
                return Some(budget_failure(ctx, owner, &name, &e).await);
            }
        }
        for l in &live {
            let name = l.name_any();
            if want.iter().all(|w| w.name_any() != name)
                && disruption::budget_names(redis).contains(&name)
            {
                match api.delete(&name, &Default::default()).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(s)) if s.code == 404 => {}
                    Err(e) => return Some(budget_failure(ctx, owner, &name, &e).await),
                }
            }
        }
        None
    }

    /// Members that cannot start because their claim's volume is on a
    /// cordoned or deleted node (see [`disruption::stranded`]) get a new
    /// claim: the old one is deleted, then the Pod, whose successor takes a
    /// new claim and resyncs from the primary. Only while a primary answers
    /// (the data is elsewhere) and never the primary's own claim. Without
    /// this a drain of a node with local volumes would wait for its
    /// uncordon, with one member fewer all along.
    async fn replace_stranded_claims(
        &self,
        ctx: &Context,
        owner: &Owner,
        pods: &[Arc<Pod>],
        keep: Option<&str>,
        primary: Option<&str>,
    ) {
        let Some(d) = &self.disruptions else { return };
        let claims: Vec<_> = ctx
            .claims
            .0
            .state()
            .into_iter()
            .filter(|c| {
                c.owner_references()
                    .iter()
                    .any(|r| r.uid == owner.reference.uid)
            })
            .collect();
        if claims.is_empty() {
            return;
        }
        let stranded = disruption::stranded(pods, &claims, &d.nodes.state(), keep);
        let claim_api: Api<PersistentVolumeClaim> =
            Api::namespaced(ctx.client.clone(), &owner.namespace);
        let pod_api: Api<Pod> = Api::namespaced(ctx.client.clone(), &owner.namespace);
        for s in stranded {
            let params = kube::api::DeleteParams {
                preconditions: Some(kube::api::Preconditions {
                    uid: Some(s.claim_uid.clone()),
                    resource_version: None,
                }),
                ..Default::default()
            };
            if let Err(e) = claim_api.delete(&s.claim, &params).await {
                tracing::warn!(claim = %s.claim, error = %e, "cannot delete a stranded claim");
                continue;
            }
            let victim = crate::podset::plan::Victim {
                name: s.pod.clone(),
                uid: s.pod_uid.clone(),
                reason: crate::podset::plan::DeleteReason::ClaimStranded,
            };
            let _ = ctx.executor.delete_one(&pod_api, owner, &victim).await;
            let why = if s.node_gone { "gone" } else { "cordoned" };
            ctx.executor
                .event(
                    owner,
                    EventType::Warning,
                    "ReplacingClaim",
                    "Replace",
                    format!(
                        "Member {} cannot start: the volume of its PersistentVolumeClaim {} is on node {}, which is {why}; deleted the claim and the Pod, whose successor gets a new claim and resyncs from the primary {}",
                        s.pod,
                        s.claim,
                        s.node,
                        primary.unwrap_or_default()
                    ),
                )
                .await;
        }
    }

    fn silence(&self, owner: &Owner) -> Arc<Memory> {
        self.silence
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(owner.reference.uid.clone())
            .or_insert_with(|| {
                Arc::new(match &self.wake {
                    Some(tx) => {
                        let (tx, object) = (
                            tx.clone(),
                            ObjectRef::new(&owner.name).within(&owner.namespace),
                        );
                        Memory::waking(Arc::new(move || {
                            let _ = tx.unbounded_send(object.clone());
                        }))
                    }
                    None => Memory::default(),
                })
            })
            .clone()
    }

    /// How this Redis's members are reached.
    fn route(&self, namespace: &str) -> Route {
        match &self.port_forward {
            Some(client) => {
                Route::PortForward(Box::new(Api::namespaced(client.clone(), namespace)))
            }
            None => Route::PodNetwork,
        }
    }

    /// Points the `<name>` Service at a new primary at once, before the
    /// role labels move. kube-proxy syncs at most once a second: the first
    /// endpoint change after a quiet second goes out at once, the next a
    /// second later. The label moves change `<name>-replicas`'s endpoints;
    /// written first, they would hold the primary's switch back by that
    /// second (seen on kind: promoted 0.18 s after a kill, the Service's
    /// switch live 1.3 s after it). Only when the cache shows the Service
    /// selecting another Pod; a refusal is left to the Service applier,
    /// which applies the same Service after the round and reports it.
    async fn point_primary_service(
        &self,
        redis: &Redis,
        ctx: &Context,
        owner: &Owner,
        primary: Option<&str>,
    ) {
        let Some(pod) = primary else { return };
        let Some(want) = desired_services(redis, owner, Some(pod)).into_iter().next() else {
            return;
        };
        let name = want.name_any();
        let live = owned_named(self.applier.services(), owner, std::slice::from_ref(&name));
        // Not created yet: the applier creates it.
        let Some(live) = live.first() else { return };
        if service_in_sync(&want, live) {
            return;
        }
        let api: Api<Service> = Api::namespaced(ctx.client.clone(), &owner.namespace);
        let params = PatchParams::apply(FIELD_MANAGER).force();
        if let Err(e) = api.patch(&name, &params, &Patch::Apply(&want)).await {
            tracing::warn!(service = %name, %pod, error = %e, "cannot point the Service at the primary");
        }
    }

    fn forget(&self, uid: &str) {
        self.silence
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid);
        self.applier.forget(uid);
        self.network.forget(uid);
        self.requests.forget(uid);
    }
}

/// The member Pods as the replication module sees them. `retiring`: the
/// Pods the engine is about to delete, and the primary if it is held back.
/// `tls_replication`: the set replicates over TLS, so a member that serves
/// TLS is reached on its TLS port.
pub fn pod_refs(
    pods: &[Arc<Pod>],
    port: u16,
    retiring: &[String],
    tls_replication: bool,
) -> Vec<PodRef> {
    let mut refs: Vec<PodRef> = pods
        .iter()
        .filter(|p| {
            !matches!(
                p.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            )
        })
        .map(|p| {
            let name = p.name_any();
            let status = p.status.as_ref();
            let ports = MemberPorts::of(p);
            let port = match ports.tls {
                Some(tls) if tls_replication => tls,
                _ => ports.plain.unwrap_or(port),
            };
            PodRef {
                retiring: retiring.contains(&name),
                pod: name,
                ip: status
                    .and_then(|s| s.pod_ip.clone())
                    .filter(|ip| !ip.is_empty()),
                port,
                ready: crate::podset::pods::pod_is_ready(p),
                deleting: p.metadata.deletion_timestamp.is_some(),
                stopped: container_stopped(p),
                claim: p.labels().get(crate::api::names::CLAIM_LABEL).cloned(),
            }
        })
        .collect();
    refs.sort_by(|a, b| a.pod.cmp(&b.pod));
    refs
}

/// The kubelet reports the Pod's containers, and none of them running (one
/// exited, or waits to be restarted). A Pod without container statuses yet
/// is not known to have stopped.
fn container_stopped(p: &Pod) -> bool {
    let statuses = p
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_deref())
        .unwrap_or_default();
    !statuses.is_empty()
        && statuses
            .iter()
            .all(|c| c.state.as_ref().is_none_or(|s| s.running.is_none()))
}

/// The label changes to make, demotions first (no two Pods labelled
/// primary because of us): each Pod's role, and its name label for Pods
/// made before podkeeper set one at creation (the `<name>` Service selects
/// the primary by it). Pure.
pub fn label_changes(pods: &[Arc<Pod>], primary: Option<&str>) -> Vec<(String, &'static str)> {
    let mut changes: Vec<(String, &'static str)> = pods
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            let name = p.name_any();
            let want = if primary == Some(name.as_str()) {
                "primary"
            } else {
                "replica"
            };
            let have = p.labels().get(ROLE_LABEL).map(String::as_str);
            let named = p.labels().get(POD_NAME_LABEL) == Some(&name);
            (have != Some(want) || !named).then_some((name, want))
        })
        .collect();
    changes.sort_by_key(|(name, role)| (*role == "primary", name.clone()));
    changes
}

fn settings(redis: &Redis) -> Settings {
    let f = &redis.spec.failover;
    Settings {
        failover_after: Duration::from_secs(u64::from(f.after_seconds.max(1))),
        switchover_timeout: Duration::from_secs(u64::from(f.switchover_timeout_seconds.max(1))),
        min_replicas_to_write: f.min_replicas_to_write,
        min_replicas_max_lag_seconds: f.min_replicas_max_lag_seconds,
        requested: None,
    }
}

/// What the metrics count of a round: whether the recorded primary
/// answered as a writable primary, and what was done.
fn round_seen(round: &act::Round) -> RoundSeen {
    let primary = round.primary.as_ref().map(|p| p.pod.as_str());
    RoundSeen {
        writable: round.members.iter().any(|m| {
            Some(m.pod.as_str()) == primary
                && m.info().is_some_and(|i| {
                    i.role == crate::redis::replication::info::Role::Primary
                        && !i.failover_in_progress()
                })
        }),
        promoted: round
            .outcome
            .done
            .iter()
            .any(|a| matches!(a, Action::Promote { .. }))
            .then_some(round.plan.cause)
            .flatten(),
        switched: round
            .outcome
            .done
            .iter()
            .any(|a| matches!(a, Action::Switchover { .. })),
    }
}

fn cause_text(cause: Cause) -> &'static str {
    match cause {
        Cause::NoRecord => "no primary was recorded",
        Cause::PrimaryGone => "the primary's Pod is gone",
        Cause::PrimaryRestarted => "the primary restarted with an empty dataset",
        Cause::PrimaryUnreachable => "the primary did not answer",
        Cause::PrimaryStopped => "the primary's container is not running",
        Cause::PrimaryDemoted => "the recorded primary is a replica",
    }
}

/// Moves the role labels the `<name>` Service selects by, demotions first.
/// A demotion the API server refuses holds the promotion back, so that the
/// Service never selects two Pods: clients meet a replica's `READONLY`
/// until the next round moves both. Each refusal is a Warning Event (the
/// Service not following the primary is what a person would look into).
async fn move_labels(ctx: &Context, owner: &Owner, pods: &[Arc<Pod>], primary: Option<&str>) {
    let api: Api<Pod> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let mut demotion_refused = false;
    for (pod, role) in label_changes(pods, primary) {
        if role == "primary" && demotion_refused {
            continue;
        }
        let patch = crate::redis::replication::objects::member_labels_patch(&pod, role);
        if let Err(e) = api
            .patch(&pod, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            // The next round tries again.
            tracing::warn!(%pod, role, error = %e, "cannot label the Pod's role");
            demotion_refused |= role != "primary";
            let held = if role == "primary" {
                String::new()
            } else {
                format!(
                    "; {} is not labelled primary until then",
                    primary.unwrap_or("the primary")
                )
            };
            ctx.executor
                .event(
                    owner,
                    EventType::Warning,
                    "RoleLabelNotMoved",
                    "Label",
                    format!(
                        "Cannot label Pod {pod} {ROLE_LABEL}={role} ({}): the Service follows the primary once it can{held}",
                        api_message(&e)
                    ),
                )
                .await;
        }
    }
}

impl Extras<Redis> for ReplicationExtras {
    type Report = Replication;
    type Steer = Replication;

    async fn steer(
        &self,
        redis: &Redis,
        ctx: &Context,
        owner: &Owner,
        desired: &Desired,
        observed: &[ObservedPod],
        plan: &mut Plan,
    ) -> Replication {
        let recorded = redis
            .status
            .as_ref()
            .and_then(|s| s.primary.as_ref())
            .map(|p| RecordedPrimary {
                pod: p.pod.clone(),
                run_id: p.run_id.clone(),
                term: p.term,
                // A claim that is gone holds nothing to wait for.
                claim: p.claim.clone().filter(|c| {
                    let (owned, _) = ctx.claims.of(owner);
                    owned.iter().any(|o| &o.name == c && !o.deleting)
                }),
            })
            // Only a Redis with claims has any to look through: the claim
            // cache is not scanned on every round of every other Redis.
            .or_else(|| {
                redis
                    .spec
                    .storage
                    .is_some()
                    .then(|| adopted_primary_claim(ctx, owner))
                    .flatten()
            });
        // Redis's order of a rollout (`rollout.rs`): replicas first, the
        // primary handed over, then the old primary.
        let recorded_pod = recorded.as_ref().map(|r| r.pod.clone());
        let mut retiring = rollout::before_round(plan, observed, desired, recorded_pod.as_deref());
        let pods = ctx.pods.owned(&owner.namespace, &owner.reference.uid);
        // A primary on a cordoned node is switched over before a drain
        // evicts it (its budget refuses the eviction until then), and no
        // switchover goes to a member there.
        retiring.extend(self.cordoned(&pods));
        let restore = self.restore_state(redis, ctx, owner, &pods, plan).await;
        // A password is made only until the Redis has had a primary: one
        // made for a Secret deleted later would be pushed to the serving
        // members (the clients' one) or match none of them (the
        // operator's).
        let may_make = recorded.is_none();
        let (password, operator, certificate, (users, unread_users)) = futures::future::join4(
            auth::password(redis, ctx, owner, may_make),
            auth::operator_passwords(ctx, owner, may_make),
            tls::certificate(redis, ctx, owner),
            auth::users(redis, ctx, owner),
        )
        .await;
        // A user whose Secret cannot be read is left as the members have it.
        if !unread_users.is_empty() {
            ctx.executor
                .event(
                    owner,
                    EventType::Warning,
                    "UserSecretUnreadable",
                    "ReadSecret",
                    unread_users.join("; "),
                )
                .await;
        }
        let silence = self.silence(owner);
        // A TLS Secret that is missing or does not check out is reported;
        // the operator and the members go on with what they had.
        let certificate_problem = certificate.as_ref().err().cloned();
        if let Some(problem) = &certificate_problem {
            ctx.executor
                .event(
                    owner,
                    EventType::Warning,
                    "TLSSecretInvalid",
                    "ReadSecret",
                    problem.clone(),
                )
                .await;
        }
        let certificate = certificate.ok().flatten();
        let tls_access = tls::access(redis, owner, &pods, certificate.as_ref(), &silence.tls);
        // A password Secret that cannot be read is reported; the round goes
        // on while the operator can still log in (as its own user, or with
        // the clients' password), so failover does not wait for the Secret.
        // The clients' password is left as the members have it meanwhile.
        // The replication user's password comes with the operator's (added
        // to a Secret an older podkeeper made, before any member starts with
        // a reference to it).
        let (own, replication) = match operator {
            Ok(own) => {
                let replication = own.replication.clone().map_err(Some);
                (Ok(own), replication)
            }
            Err(e) => (Err(e), Err(None)),
        };
        // A change of podkeeper's own passwords rolls through the members
        // (see `crate::redis::credentials`).
        let rotation = match &own {
            Ok(own) => {
                let recorded = redis
                    .status
                    .as_ref()
                    .and_then(|s| s.credentials_version.as_deref());
                Some(credentials::advance(ctx, owner, own, recorded, &pods).await)
            }
            Err(_) => None,
        };
        // podkeeper's own users on every member (members started by an
        // older podkeeper replicate as the operator's user until then).
        let users = Users {
            own: own.as_ref().ok().and_then(|o| {
                Some(Own {
                    operator: o.operator.clone(),
                    replication: o.replication.clone().ok()?,
                    alone: !o.rotating(),
                })
            }),
            ..users
        };
        let unreadable = [
            password.as_ref().err(),
            own.as_ref().err(),
            replication.as_ref().err().and_then(Option::as_ref),
        ]
        .into_iter()
        .flatten()
        .cloned()
        .collect::<Vec<_>>()
        .join("; ");
        if !unreadable.is_empty() {
            ctx.executor
                .event(
                    owner,
                    EventType::Warning,
                    "AuthSecretUnreadable",
                    "ReadSecret",
                    unreadable.clone(),
                )
                .await;
        }
        let clients_known = password.is_ok();
        let (password, operator) = (password.ok().flatten(), own.ok());
        if operator.is_none() && !clients_known {
            return Replication {
                primary: recorded.as_ref().map(act::status_of),
                members: redis
                    .status
                    .as_ref()
                    .map(|s| s.members.clone())
                    .unwrap_or_default(),
                condition: Some(("False", "AuthSecretUnreadable", unreadable)),
                requeue_after_seconds: Some(5),
                services_pending: Vec::new(),
                restore,
                certificate: None,
                credentials: None,
                credentials_version: None,
            };
        }
        let port = u16::try_from(redis.spec.port).unwrap_or(6379);
        let refs = pod_refs(
            &pods,
            port,
            &retiring,
            tls_access.as_ref().is_some_and(|t| t.replication),
        );
        // A promotion is recorded in status.primary before it is carried
        // out, by a write that fails when anyone (another leader, a
        // user) wrote the status since this reconcile read it.
        let record_promotion = async |next: &RecordedPrimary| {
            let mut status = redis.status.clone().unwrap_or_default();
            status.primary = Some(act::status_of(next));
            match ctx
                .status
                .write(redis, redis.status.as_ref(), &status, Pace::Now)
                .await
            {
                Ok(None) => Ok(()),
                Ok(Some(_)) => Err("the status changed since it was read".to_string()),
                Err(Error::Kube(e)) => Err(api_message(&e)),
                Err(e) => Err(e.to_string()),
            }
        };
        let settings = Settings {
            requested: self.requests.pending(redis),
            ..settings(redis)
        };
        let round = act::reconcile(
            &refs,
            recorded.as_ref(),
            &settings,
            &Access {
                password: password.as_deref(),
                operator: operator.as_ref().map(|o| o.operator.as_str()),
                previous_operator: operator
                    .as_ref()
                    .filter(|o| o.active_operator != o.operator)
                    .map(|o| o.active_operator.as_str()),
                manage_clients: clients_known,
                timeouts: self.timeouts,
                route: &self.route(&owner.namespace),
                tls: tls_access.as_ref(),
                users: Some(&users),
                default_off: redis.spec.default_user == DefaultUser::Disabled,
            },
            &silence,
            Timestamp::now(),
            record_promotion,
        )
        .await;
        if let Some(e) = &round.unrecorded {
            ctx.executor
                .event(
                    owner,
                    EventType::Warning,
                    "PromotionNotRecorded",
                    "Replicate",
                    format!("Promoted no one: the new primary could not be recorded first ({e}); trying again"),
                )
                .await;
        }
        for (pod, e) in &round.unfenced {
            tracing::warn!(%pod, error = %e, "cannot set the write fence (min-replicas-to-write)");
        }
        for (pod, e) in &round.unconverged {
            tracing::warn!(%pod, error = %e, "cannot bring the member to the clients' password");
        }
        if !round.certificates.reloaded.is_empty() {
            ctx.executor
                .event(
                    owner,
                    EventType::Normal,
                    "CertificateReloaded",
                    "ReloadCertificate",
                    format!(
                        "{} took up the certificate of Secret {} without a restart",
                        round.certificates.reloaded.join(", "),
                        certs::secret_name(redis).unwrap_or_default()
                    ),
                )
                .await;
        }

        let primary = round.primary.as_ref().map(|p| p.pod.clone());
        rollout::after_round(
            plan,
            observed,
            desired,
            recorded_pod.as_deref(),
            primary.as_deref(),
            matches!(round.plan.waiting, Some(Waiting::SwitchoverInProgress)),
        );

        for a in &round.outcome.done {
            let note = match a {
                Action::Promote { pod, .. } => Some((
                    "Promoted",
                    format!(
                        "Promoted {pod} to primary: {}",
                        round.plan.cause.map_or("no primary", cause_text)
                    ),
                )),
                Action::Switchover { from, to, .. } => Some((
                    "SwitchingOver",
                    format!("Handing the primary role from {from} over to {to} (FAILOVER)"),
                )),
                Action::Replicate {
                    pod,
                    primary,
                    why: crate::redis::replication::topology::Why::Fence,
                    ..
                } => Some((
                    "Fenced",
                    format!("Made {pod}, a second primary, a replica of {primary}"),
                )),
                Action::Replicate { .. } => None,
            };
            if let Some((reason, note)) = note {
                ctx.executor
                    .event(owner, EventType::Normal, reason, "Replicate", note)
                    .await;
            }
        }
        if let Some(answer) = settings
            .requested
            .as_ref()
            .and_then(|r| switchover::answer(r, &round.plan, &round.outcome.done))
        {
            self.requests.answer(redis, ctx, owner, answer).await;
        }
        self.metrics.round(
            &owner.reference.uid,
            &owner.namespace,
            &owner.name,
            &silence,
            round_seen(&round),
        );
        if let Some(e) = &round.outcome.error {
            tracing::warn!(error = %e, "replication command failed");
        }
        for (pod, e) in &round.silent {
            tracing::debug!(%pod, error = %e, "member did not answer");
        }

        self.point_primary_service(redis, ctx, owner, primary.as_deref())
            .await;
        move_labels(ctx, owner, &pods, primary.as_deref()).await;
        let primary_answers = round.members.iter().any(|m| {
            Some(&m.pod) == primary.as_ref()
                && m.info()
                    .is_some_and(|i| i.role == crate::redis::replication::info::Role::Primary)
        });
        if primary_answers && redis.spec.storage.is_some() {
            let keep = round.primary.as_ref().and_then(|p| p.claim.clone());
            self.replace_stranded_claims(ctx, owner, &pods, keep.as_deref(), primary.as_deref())
                .await;
        }

        let condition =
            act::replicated_condition(&round.plan, &round.outcome, round.unrecorded.as_deref());
        // Waits that a person may want to act on are told once, when they
        // begin (the condition holds them meanwhile).
        let before = redis
            .status
            .as_ref()
            .and_then(|s| {
                s.conditions
                    .iter()
                    .find(|c| c.type_ == REPLICATED_CONDITION)
            })
            .map(|c| c.reason.as_str());
        if matches!(
            condition.1,
            act::OPERATOR_CUT_OFF | "AheadMemberSilent" | "ReplicaSilent"
        ) && before != Some(condition.1)
        {
            ctx.executor
                .event(
                    owner,
                    EventType::Warning,
                    condition.1,
                    "Failover",
                    condition.2.clone(),
                )
                .await;
        }
        // Nothing answers at all (no container yet, or no Redis behind the
        // Pod IPs, as on kwok): nothing can be done until something does,
        // and the Pod events of a container that starts or restarts bring
        // the next reconcile; look less often.
        let nobody = round.members.iter().all(|m| m.info().is_none());
        let mut requeue = round.plan.requeue_after;
        if nobody && !round.members.is_empty() {
            requeue = requeue.max(SILENT_PERIOD);
        }
        let members = act::member_statuses_after(&round.members, &round.outcome.done);
        let condition =
            crate::redis::simulated::replicated_condition(&pods, &members).unwrap_or(condition);
        // The unreadable Secret is what a person must act on.
        let condition = if unreadable.is_empty() {
            condition
        } else {
            ("False", "AuthSecretUnreadable", unreadable)
        };
        Replication {
            primary: round.primary,
            members,
            condition: Some(condition),
            requeue_after_seconds: Some(requeue.as_secs_f64().ceil().max(1.0) as i64),
            services_pending: Vec::new(),
            restore,
            certificate: tls::condition(
                redis,
                certificate_problem.as_deref(),
                &round.certificates,
                certificate.as_ref(),
            ),
            credentials: match rotation.as_ref() {
                // A user whose Secret cannot be read is what a person must
                // act on once no rotation is under way.
                None | Some(credentials::Step::Settled) if !unread_users.is_empty() => Some((
                    "False",
                    "UserSecretUnreadable",
                    format!(
                        "{}; the members keep what they had for these users",
                        unread_users.join("; ")
                    ),
                )),
                rotation => {
                    rotation.and_then(|s| credentials::condition(s, round.own_alone, &owner.name))
                }
            },
            credentials_version: match rotation {
                Some(credentials::Step::Start(version)) => Some(version),
                _ => None,
            },
        }
    }

    fn at_creation(&self, redis: &Redis, steer: &Replication, template: &mut PodTemplateSpec) {
        if let (Some(RestoreState::Restoring { from, .. }), Some(image)) =
            (&steer.restore, &self.restore_image)
        {
            restore::add_init_container(redis, from, image, template);
        }
    }

    async fn apply(
        &self,
        redis: &Redis,
        ctx: &Context,
        owner: &Owner,
        mut steer: Replication,
    ) -> (Replication, Option<Failure>) {
        let budget_failure = self
            .apply_budgets(redis, ctx, owner, steer.primary.is_some())
            .await
            .or(self.network.step(redis, ctx, owner).await);
        // Both Services, each only when the cache shows it missing or
        // changed, applied beside the reconcile (see [`crate::runtime::service_applier`]).
        let owned = owned_named(self.applier.services(), owner, &service_names(redis));
        let primary = steer.primary.as_ref().map(|p| p.pod.as_str());
        let inputs = redis
            .metadata
            .generation
            .map(|g| format!("{g}/{}", primary.unwrap_or_default()));
        let changes = self.applier.changes(owner, inputs, &owned, || {
            desired_services(redis, owner, primary)
        });
        steer.services_pending = changes.iter().map(|c| c.want.name_any()).collect();
        let failure = self.applier.step(owner, changes);
        (steer, failure.or(budget_failure))
    }

    fn kept(&self, redis: &Redis) -> Replication {
        let status = redis.status.as_ref();
        Replication {
            primary: status.and_then(|s| s.primary.clone()),
            members: status.map(|s| s.members.clone()).unwrap_or_default(),
            condition: None,
            requeue_after_seconds: None,
            services_pending: Vec::new(),
            restore: None,
            certificate: None,
            credentials: None,
            credentials_version: None,
        }
    }

    /// The Services first, to stop traffic: `Ok(true)` once they are gone.
    async fn cleanup(&self, _: &Redis, ctx: &Context, owner: &Owner) -> Result<bool, Error> {
        let live = owned_services(self.applier.services(), owner);
        let gone = cleanup_services(&ctx.client, &ctx.executor.recorder, owner, &live).await?;
        if gone {
            self.forget(&owner.reference.uid);
            self.metrics.forget(&owner.reference.uid);
        }
        Ok(gone)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PodStatus;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn pod(name: &str, role: Option<&str>, ip: Option<&str>) -> Arc<Pod> {
        Arc::new(Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                labels: Some(
                    role.map(|r| (ROLE_LABEL.to_string(), r.to_string()))
                        .into_iter()
                        .chain([(POD_NAME_LABEL.to_string(), name.to_string())])
                        .collect(),
                ),
                ..Default::default()
            },
            spec: None,
            status: Some(PodStatus {
                pod_ip: ip.map(str::to_string),
                phase: Some("Running".into()),
                ..Default::default()
            }),
        })
    }

    #[test]
    fn labels_demote_before_they_promote_and_skip_what_is_right() {
        let pods = vec![
            pod("a", Some("primary"), Some("10.0.0.1")),
            pod("b", None, Some("10.0.0.2")),
            pod("c", Some("replica"), None),
        ];
        assert_eq!(
            label_changes(&pods, Some("b")),
            [("a".to_string(), "replica"), ("b".to_string(), "primary")]
        );
        assert_eq!(
            label_changes(&pods, Some("a")),
            [("b".to_string(), "replica")]
        );
        assert_eq!(
            label_changes(&pods, None),
            [("a".to_string(), "replica"), ("b".to_string(), "replica")]
        );
        // A Pod made before Pods carried their name gets it, role unchanged.
        let mut unnamed = (*pod("d", Some("replica"), None)).clone();
        unnamed.labels_mut().remove(POD_NAME_LABEL);
        assert_eq!(
            label_changes(&[Arc::new(unnamed)], Some("a")),
            [("d".to_string(), "replica")]
        );
    }

    #[test]
    fn pod_refs_carry_ip_readiness_and_retiring() {
        let pods = vec![pod("b", None, Some("10.0.0.2")), pod("a", None, Some(""))];
        let refs = pod_refs(&pods, 7000, &["b".to_string()], false);
        assert_eq!(
            refs,
            [
                PodRef {
                    pod: "a".into(),
                    ip: None,
                    port: 7000,
                    ready: false,
                    deleting: false,
                    stopped: false,
                    retiring: false,
                    claim: None,
                },
                PodRef {
                    pod: "b".into(),
                    ip: Some("10.0.0.2".into()),
                    port: 7000,
                    ready: false,
                    deleting: false,
                    stopped: false,
                    retiring: true,
                    claim: None,
                },
            ]
        );
    }

    #[test]
    fn a_pod_whose_container_exited_or_waits_to_restart_is_stopped() {
        use k8s_openapi::api::core::v1::{
            ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStateWaiting,
            ContainerStatus,
        };
        let with = |state: ContainerState| {
            let p = pod("a", Some("primary"), Some("10.0.0.1"));
            let mut p = (*p).clone();
            p.status.as_mut().unwrap().container_statuses = Some(vec![ContainerStatus {
                name: "redis".into(),
                state: Some(state),
                ..Default::default()
            }]);
            p
        };
        let running = with(ContainerState {
            running: Some(ContainerStateRunning::default()),
            ..Default::default()
        });
        let exited = with(ContainerState {
            terminated: Some(ContainerStateTerminated {
                exit_code: 137,
                ..Default::default()
            }),
            ..Default::default()
        });
        let back_off = with(ContainerState {
            waiting: Some(ContainerStateWaiting {
                reason: Some("CrashLoopBackOff".into()),
                ..Default::default()
            }),
            ..Default::default()
        });
        assert!(!container_stopped(&running));
        assert!(container_stopped(&exited));
        assert!(container_stopped(&back_off));
        assert!(
            !container_stopped(&pod("a", None, None)),
            "no statuses yet: not known to have stopped"
        );
    }
}
