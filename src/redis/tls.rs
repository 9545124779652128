//! The TLS Secret of a Redis (`spec.tls`): the user's (cert-manager's
//! layout), or `<name>-tls`, issued by podkeeper from its own CA in
//! `<name>-ca` and issued again a month before it ends. Read with a GET
//! each round (the operator may not list or watch Secrets) and checked
//! as the members and the operator will use it.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::jiff::Timestamp;
use kube::{Api, ResourceExt};
use rustls_pki_types::UnixTime;

use crate::api::Redis;
use crate::api::redis::replicas_service_name;
use crate::podset::Context;
use crate::redis::auth::{owned_by, owned_secret, post_params, secret_bytes, text};
use crate::redis::certs::{
    self, CA_KEY, CERT_KEY, Checked, KEY_KEY, Material, ca_secret_name, issued_secret_name,
    secret_name,
};
use crate::redis::pod::{MemberPorts, replication_over_tls};
use crate::redis::replication::dial::TlsAccess;
use crate::redis::replication::tls::{Converged, Ledger};
use crate::runtime::events::EventType;
use crate::runtime::failure::api_message;
use crate::runtime::owner::Owner;

/// A Secret's material, checked.
#[derive(Clone, Debug)]
pub struct Certificate {
    pub material: Material,
    pub checked: Checked,
}

fn now() -> i64 {
    Timestamp::now().as_second()
}

fn unix(t: i64) -> UnixTime {
    UnixTime::since_unix_epoch(std::time::Duration::from_secs(t.max(0) as u64))
}

fn material_of(secret: &Secret, keys: [&str; 3]) -> Result<Material, String> {
    Ok(Material {
        cert: secret_bytes(secret, keys[0])?,
        key: secret_bytes(secret, keys[1])?,
        ca: secret_bytes(secret, keys[2])?,
    })
}

/// The members' certificate for Redis `redis` (`spec.tls`): `None` without
/// TLS; else the Secret's material checked (for the name the operator
/// verifies), made or issued again first when podkeeper issues it; or what
/// is wrong, naming the Secret.
pub async fn certificate(
    redis: &Redis,
    ctx: &Context,
    owner: &Owner,
) -> Result<Option<Certificate>, String> {
    let Some(tls) = &redis.spec.tls else {
        return Ok(None);
    };
    let name = certs::server_name(&owner.name, &owner.namespace);
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let read = |secret: &str| {
        let api = api.clone();
        let secret = secret.to_string();
        async move {
            api.get_opt(&secret)
                .await
                .map_err(|e| format!("cannot read Secret {secret}: {}", api_message(&e)))
        }
    };
    let checked = |secret: &Secret, at: i64| -> Result<Certificate, String> {
        let secret_name = secret.name_any();
        let material = material_of(secret, [CERT_KEY, KEY_KEY, CA_KEY])?;
        let checked = certs::check(&material, &name, unix(at))
            .map_err(|e| format!("Secret {secret_name}: {e}"))?;
        Ok(Certificate { material, checked })
    };
    if let Some(user) = &tls.secret_name {
        let secret = read(user)
            .await?
            .ok_or_else(|| format!("Secret {user} not found"))?;
        return checked(&secret, now()).map(Some);
    }
    let issued = issued_secret_name(&owner.name);
    let existing = read(&issued).await?;
    let at = now();
    if let Some(secret) = &existing
        && let Ok(c) = checked(secret, at)
        && !certs::renewal_due(c.checked.not_after, at)
    {
        return Ok(Some(c));
    }
    // Never a Secret of that name that this Redis does not own.
    if let Some(secret) = &existing
        && !owned_by(secret, owner)
    {
        return Err(format!(
            "Secret {issued} exists and was not made by podkeeper for this Redis: name it in spec.tls.secretName, or delete it"
        ));
    }
    let (ca_cert, ca_key) = self::ca(ctx, owner, &api).await?;
    let names = certs::member_names(
        &owner.name,
        &replicas_service_name(&owner.name),
        &owner.namespace,
    );
    let (cert, key) = certs::issue_member(&ca_cert, &ca_key, &names, at)?;
    let mut secret = owned_secret(
        owner,
        &issued,
        "kubernetes.io/tls",
        [(CERT_KEY, cert), (KEY_KEY, key), (CA_KEY, ca_cert)],
    );
    let params = post_params();
    let written = match &existing {
        None => api.create(&params, &secret).await,
        Some(old) => {
            // Replaced only as read: a concurrent writer wins, and the next
            // round looks again.
            secret.metadata.resource_version = old.resource_version();
            api.replace(&issued, &params, &secret).await
        }
    }
    .map_err(|e| format!("cannot write Secret {issued}: {}", api_message(&e)))?;
    let c = checked(&written, at)?;
    ctx.executor
        .event(
            owner,
            EventType::Normal,
            "CertificateIssued",
            "IssueCertificate",
            format!(
                "Issued the members' certificate in Secret {issued}, valid until {}",
                Timestamp::from_second(c.checked.not_after)
                    .map(|t| t.to_string())
                    .unwrap_or_default()
            ),
        )
        .await;
    Ok(Some(c))
}

/// podkeeper's CA for the Redis (certificate, key; PEM), made when its
/// Secret does not exist.
async fn ca(ctx: &Context, owner: &Owner, api: &Api<Secret>) -> Result<(String, String), String> {
    let name = ca_secret_name(&owner.name);
    let pem = |secret: &Secret| -> Result<(String, String), String> {
        Ok((text(secret, CERT_KEY)?, text(secret, KEY_KEY)?))
    };
    let unreadable = |e: &kube::Error| format!("cannot read Secret {name}: {}", api_message(e));
    if let Some(secret) = api.get_opt(&name).await.map_err(|e| unreadable(&e))? {
        if !owned_by(&secret, owner) {
            return Err(format!(
                "Secret {name} exists and was not made by podkeeper for this Redis: delete it, or name a TLS Secret in spec.tls.secretName"
            ));
        }
        return pem(&secret);
    }
    let (cert, key) = certs::issue_ca(&owner.name, &owner.namespace, now())?;
    let secret = owned_secret(
        owner,
        &name,
        "kubernetes.io/tls",
        [(CERT_KEY, cert), (KEY_KEY, key)],
    );
    let params = post_params();
    match api.create(&params, &secret).await {
        Ok(made) => {
            ctx.executor
                .event(
                    owner,
                    EventType::Normal,
                    "CertificateIssued",
                    "IssueCertificate",
                    format!("Made the Redis's CA in Secret {name}"),
                )
                .await;
            pem(&made)
        }
        Err(kube::Error::Api(s)) if s.code == 409 => {
            pem(&api.get(&name).await.map_err(|e| unreadable(&e))?)
        }
        Err(e) => Err(format!("cannot create Secret {name}: {}", api_message(&e))),
    }
}

/// The operator's TLS for one round: the members' ports from their Pods,
/// whether the set replicates over TLS, and what to trust: `read` (this
/// round's Secret), or the last material that checked out while it does
/// not. `None` without `spec.tls` or any material yet.
pub fn access(
    redis: &Redis,
    owner: &Owner,
    pods: &[Arc<Pod>],
    read: Option<&Certificate>,
    ledger: &Ledger,
) -> Option<TlsAccess> {
    redis.spec.tls.as_ref()?;
    let (material, wanted) =
        ledger.last_good(read.map(|c| (&c.material, c.checked.fingerprint.as_str())))?;
    let ports: Vec<(String, MemberPorts)> = pods
        .iter()
        .map(|p| (p.name_any(), MemberPorts::of(p)))
        .collect();
    let replication =
        replication_over_tls(redis, &ports.iter().map(|(_, p)| *p).collect::<Vec<_>>());
    let dial = ledger
        .dial(
            &material.ca,
            &certs::server_name(&owner.name, &owner.namespace),
        )
        .ok()?;
    let tls_ports: HashMap<String, u16> = ports
        .iter()
        .filter_map(|(pod, p)| Some((pod.clone(), p.tls?)))
        .collect();
    Some(TlsAccess {
        dial,
        wanted,
        ports: tls_ports,
        replication,
    })
}

/// The `CertificateServed` condition (with `spec.tls`): whether every
/// member serves the Secret's certificate, or why not. Pure.
pub fn condition(
    redis: &Redis,
    problem: Option<&str>,
    converged: &Converged,
    read: Option<&Certificate>,
) -> Option<(&'static str, &'static str, String)> {
    let secret = secret_name(redis)?;
    if let Some(problem) = problem {
        return Some((
            "False",
            "SecretInvalid",
            format!("{problem}; the members keep serving what they had"),
        ));
    }
    if !converged.pending.is_empty() {
        let pending = converged
            .pending
            .iter()
            .map(|(pod, why)| format!("{pod}: {why}"))
            .collect::<Vec<_>>()
            .join("; ");
        return Some((
            "False",
            "Reloading",
            format!("not every member serves the certificate of Secret {secret} yet ({pending})"),
        ));
    }
    if !converged.unanswered.is_empty() {
        return Some((
            "False",
            "Unconfirmed",
            format!(
                "{} did not answer: whether they serve the certificate of Secret {secret} is not known",
                converged.unanswered.join(", ")
            ),
        ));
    }
    let until = read
        .and_then(|c| Timestamp::from_second(c.checked.not_after).ok())
        .map(|t| format!(", valid until {t}"))
        .unwrap_or_default();
    Some((
        "True",
        "Served",
        format!("the members serve the certificate of Secret {secret}{until}"),
    ))
}
