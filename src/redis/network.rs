//! `spec.networkPolicy`: a NetworkPolicy `<name>` that admits to the
//! members, on their ports, only the clients the user names, the members
//! themselves (replication) and the operator (its rounds and backups). The
//! policy is pure ([`desired_policy`]); [`Applier`] applies it with
//! server-side apply when it changed (or every [`REAPPLY`], which corrects
//! a drift), and deletes it once `spec.networkPolicy` is removed. Owned by
//! the Redis, so it goes with it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::networking::v1::{
    NetworkPolicy, NetworkPolicyIngressRule, NetworkPolicyPeer, NetworkPolicyPort,
    NetworkPolicySpec as PolicySpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::{Api, ResourceExt};

use crate::api::Redis;
use crate::api::names::{
    FIELD_MANAGER, INSTANCE_LABEL, MANAGED_BY_LABEL, MANAGED_BY_VALUE, NAME_LABEL,
};
use crate::podset::Context;
use crate::redis::pod::{plaintext, selector_labels};
use crate::runtime::failure::{Failure, api_message};
use crate::runtime::hash::content_hash;
use crate::runtime::owner::Owner;

/// How often an unchanged policy is applied again.
pub const REAPPLY: Duration = Duration::from_secs(600);

/// The label the operator's Pods carry (its Deployment's).
const OPERATOR_LABEL: (&str, &str) = ("app.kubernetes.io/name", "podkeeper");

/// The members' ports: plaintext (unless `spec.tls` turned it off) and TLS.
fn ports(redis: &Redis) -> Vec<NetworkPolicyPort> {
    [
        plaintext(redis).then_some(redis.spec.port),
        redis.spec.tls.as_ref().map(|t| t.port),
    ]
    .into_iter()
    .flatten()
    .map(|p| NetworkPolicyPort {
        port: Some(IntOrString::Int(p)),
        protocol: Some("TCP".into()),
        ..Default::default()
    })
    .collect()
}

/// The NetworkPolicy of a Redis with `spec.networkPolicy`. The operator is
/// admitted from `operator_namespace` (its own; every namespace when it is
/// not known, as when it runs outside the cluster, where it reaches the
/// members through the API server's port-forward, which no policy sees).
/// Pure.
pub fn desired_policy(
    redis: &Redis,
    owner: &Owner,
    operator_namespace: Option<&str>,
) -> Option<NetworkPolicy> {
    let spec = redis.spec.network_policy.as_ref()?;
    let name = redis.name_any();
    let members = LabelSelector {
        match_labels: Some(selector_labels(&name)),
        ..Default::default()
    };
    let operator = NetworkPolicyPeer {
        namespace_selector: Some(LabelSelector {
            match_labels: operator_namespace
                .map(|ns| [("kubernetes.io/metadata.name".to_string(), ns.to_string())].into()),
            ..Default::default()
        }),
        pod_selector: Some(LabelSelector {
            match_labels: Some(
                [(OPERATOR_LABEL.0.to_string(), OPERATOR_LABEL.1.to_string())].into(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    };
    let clients = NetworkPolicyPeer {
        pod_selector: Some(spec.clients.clone()),
        namespace_selector: spec.namespace_selector.clone(),
        ..Default::default()
    };
    let peers = NetworkPolicyPeer {
        pod_selector: Some(members.clone()),
        ..Default::default()
    };
    let mut reference = owner.reference.clone();
    reference.controller = None;
    reference.block_owner_deletion = None;
    Some(NetworkPolicy {
        metadata: ObjectMeta {
            name: Some(name.clone()),
            namespace: Some(owner.namespace.clone()),
            labels: Some(
                [
                    (MANAGED_BY_LABEL.to_string(), MANAGED_BY_VALUE.to_string()),
                    (INSTANCE_LABEL.to_string(), name),
                    (NAME_LABEL.to_string(), "redis".to_string()),
                ]
                .into(),
            ),
            owner_references: Some(vec![reference]),
            ..Default::default()
        },
        spec: Some(PolicySpec {
            pod_selector: Some(members),
            policy_types: Some(vec!["Ingress".into()]),
            ingress: Some(vec![NetworkPolicyIngressRule {
                from: Some(vec![clients, peers, operator]),
                ports: Some(ports(redis)),
            }]),
            egress: None,
        }),
    })
}

/// The policies applied, per Redis uid: what and when.
#[derive(Default)]
pub struct Applier {
    applied: Mutex<HashMap<String, (Option<String>, Instant)>>,
    operator_namespace: Option<String>,
}

impl Applier {
    /// Admitting the operator from `operator_namespace` (its own Pod's).
    pub fn new(operator_namespace: Option<String>) -> Self {
        Applier {
            applied: Mutex::default(),
            operator_namespace,
        }
    }

    fn applied(&self) -> std::sync::MutexGuard<'_, HashMap<String, (Option<String>, Instant)>> {
        self.applied.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies the Redis's policy when it changed or [`REAPPLY`] passed;
    /// deletes it once `spec.networkPolicy` is gone (once per operator
    /// start for a Redis that never had one). A refusal is the reconcile's
    /// failure (`FailedNetworkPolicy`).
    pub async fn step(&self, redis: &Redis, ctx: &Context, owner: &Owner) -> Option<Failure> {
        let want = desired_policy(redis, owner, self.operator_namespace.as_deref());
        let hash = want.as_ref().map(content_hash);
        let uid = owner.reference.uid.clone();
        let due = match self.applied().get(&uid) {
            Some((done, at)) => *done != hash || (hash.is_some() && at.elapsed() >= REAPPLY),
            None => true,
        };
        if !due {
            return None;
        }
        let api: Api<NetworkPolicy> = Api::namespaced(ctx.client.clone(), &owner.namespace);
        let name = owner.name.clone();
        let result = match &want {
            Some(policy) => api
                .patch(
                    &name,
                    &PatchParams::apply(FIELD_MANAGER).force(),
                    &Patch::Apply(policy),
                )
                .await
                .map(|_| ()),
            None => match api.get_opt(&name).await {
                // Only the policy this Redis owns.
                Ok(Some(p)) if p.owner_references().iter().any(|r| r.uid == uid) => api
                    .delete(&name, &DeleteParams::default())
                    .await
                    .map(|_| ()),
                Ok(_) => Ok(()),
                Err(e) => Err(e),
            },
        };
        match result {
            Ok(()) => {
                self.applied().insert(uid, (hash, Instant::now()));
                None
            }
            Err(kube::Error::Api(s)) if want.is_none() && s.code == 404 => {
                self.applied().insert(uid, (None, Instant::now()));
                None
            }
            Err(e) => Some(Failure {
                reason: "FailedNetworkPolicy",
                message: format!("NetworkPolicy {name}: {}", api_message(&e)),
            }),
        }
    }

    /// Forgets a deleted Redis.
    pub fn forget(&self, uid: &str) {
        self.applied().remove(uid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn redis(spec: serde_json::Value) -> Redis {
        let mut spec = spec;
        spec["image"] = "redis:7".into();
        let mut r: Redis = serde_json::from_value(serde_json::json!({
            "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
            "metadata": {"name": "cache", "namespace": "shop", "uid": "u-1"},
            "spec": spec,
        }))
        .unwrap();
        r.metadata.uid = Some("u-1".into());
        r
    }

    #[test]
    fn the_policy_admits_the_named_clients_the_members_and_the_operator_on_the_members_ports() {
        let r = redis(serde_json::json!({
            "tls": {"plaintext": true},
            "networkPolicy": {"clients": {"matchLabels": {"app": "web"}}},
        }));
        let owner = Owner::of(&r, "Redis");
        let p = desired_policy(&r, &owner, Some("podkeeper-system")).unwrap();
        assert_eq!(p.metadata.name.as_deref(), Some("cache"));
        assert_eq!(p.metadata.owner_references.as_ref().unwrap()[0].uid, "u-1");
        let spec = p.spec.unwrap();
        assert_eq!(
            spec.pod_selector.unwrap().match_labels.unwrap(),
            selector_labels("cache")
        );
        assert_eq!(spec.policy_types.unwrap(), ["Ingress"]);
        let rule = &spec.ingress.unwrap()[0];
        let ports: Vec<i32> = rule
            .ports
            .iter()
            .flatten()
            .map(|p| match p.port {
                Some(IntOrString::Int(n)) => n,
                _ => 0,
            })
            .collect();
        assert_eq!(ports, [6379, 6380]);
        let from = rule.from.as_ref().unwrap();
        // The clients, in this namespace only (no namespace selector).
        assert_eq!(
            from[0]
                .pod_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["app"],
            "web"
        );
        assert!(from[0].namespace_selector.is_none());
        // The members.
        assert_eq!(
            from[1]
                .pod_selector
                .as_ref()
                .unwrap()
                .match_labels
                .clone()
                .unwrap(),
            selector_labels("cache")
        );
        // The operator, from its namespace.
        assert_eq!(
            from[2]
                .namespace_selector
                .as_ref()
                .unwrap()
                .match_labels
                .as_ref()
                .unwrap()["kubernetes.io/metadata.name"],
            "podkeeper-system"
        );
        // TLS only: the TLS port only; without spec.networkPolicy, none.
        let tls_only = redis(serde_json::json!({
            "tls": {},
            "networkPolicy": {"clients": {}},
        }));
        let p = desired_policy(&tls_only, &owner, None).unwrap();
        let rule = &p.spec.unwrap().ingress.unwrap()[0];
        assert_eq!(rule.ports.as_ref().unwrap().len(), 1);
        assert_eq!(
            rule.ports.as_ref().unwrap()[0].port,
            Some(IntOrString::Int(6380))
        );
        assert_eq!(
            rule.from.as_ref().unwrap()[2]
                .namespace_selector
                .as_ref()
                .unwrap()
                .match_labels,
            None,
            "every namespace when the operator's is not known"
        );
        assert!(desired_policy(&redis(serde_json::json!({})), &owner, None).is_none());
    }
}
