//! The passwords of a Redis's members, from their Secrets: the clients'
//! (`spec.auth`) and the operator's own Redis user's (`<name>-podkeeper`),
//! each made with a generated password when its Secret does not exist and
//! the Redis has not served yet.

use k8s_openapi::api::core::v1::Secret;
use kube::Api;
use kube::api::PostParams;

use crate::api::Redis;
use crate::api::names::FIELD_MANAGER;
use crate::podset::Context;
use crate::redis::replication::acl::{User, Users};
use crate::redis::replication::config;
use crate::runtime::events::EventType;
use crate::runtime::failure::api_message;
use crate::runtime::owner::Owner;

/// The password `spec.auth` names (made when its Secret does not exist).
pub async fn password(
    redis: &Redis,
    ctx: &Context,
    owner: &Owner,
    may_make: bool,
) -> Result<Option<String>, String> {
    let Some(auth) = &redis.spec.auth else {
        return Ok(None);
    };
    let fresh = [(auth.key.as_str(), generate_password())];
    let secret = secret_or_made(ctx, owner, &auth.secret_name, &fresh, may_make).await?;
    text(&secret, &auth.key).map(Some)
}

/// podkeeper's own passwords for a Redis's members, from one GET of
/// `<name>-podkeeper`: the operator's user's and the replication user's,
/// and the ones every member accepts (`active-*`, which differ during a
/// rotation: see [`crate::redis::credentials`]).
pub struct OwnPasswords {
    /// The Secret as read (its resourceVersion is the rotation's version).
    pub secret: Secret,
    pub operator: String,
    /// What went wrong adding it to a Secret an older podkeeper made.
    pub replication: Result<String, String>,
    pub active_operator: String,
    pub active_replication: Option<String>,
    /// Why the Secret's new passwords cannot be used (not letters and
    /// digits: the members' start script refuses them); the members keep
    /// the active ones meanwhile.
    pub invalid: Option<String>,
}

impl OwnPasswords {
    /// The Secret's resourceVersion.
    pub fn version(&self) -> &str {
        self.secret
            .metadata
            .resource_version
            .as_deref()
            .unwrap_or_default()
    }

    /// The same, with a new password the members cannot take (see
    /// [`OwnPasswords::invalid`]) put back to the active one.
    fn checked(mut self) -> Self {
        let bad = |p: &str| p.is_empty() || !p.chars().all(|c| c.is_ascii_alphanumeric());
        let name = self.secret.metadata.name.clone().unwrap_or_default();
        let mut invalid = Vec::new();
        if bad(&self.operator) && !bad(&self.active_operator) {
            invalid.push(config::OPERATOR_SECRET_KEY);
            self.operator = self.active_operator.clone();
        }
        if let (Ok(r), Some(a)) = (&self.replication, &self.active_replication)
            && bad(r)
            && !bad(a)
        {
            invalid.push(config::REPLICATION_SECRET_KEY);
            self.replication = Ok(a.clone());
        }
        if !invalid.is_empty() {
            self.invalid = Some(format!(
                "Secret {name} key {} must be letters and digits only; the members keep their passwords until it is",
                invalid.join(" and ")
            ));
        }
        self
    }

    /// Whether either password differs from the one every member accepts.
    pub fn rotating(&self) -> bool {
        self.operator != self.active_operator
            || matches!((&self.replication, &self.active_replication), (Ok(r), Some(a)) if r != a)
    }
}

/// Reads `<name>-podkeeper` (made, with generated passwords, when it does
/// not exist and `may_make`). A Secret made by an older podkeeper gets
/// what it lacks written into it, if podkeeper made it: a generated
/// replication password (before any member is started with a reference to
/// it) and the active keys (its passwords as they are: nothing was rotated
/// before). What goes wrong there is the replication password's.
pub async fn operator_passwords(
    ctx: &Context,
    owner: &Owner,
    may_make: bool,
) -> Result<OwnPasswords, String> {
    use config::{
        OPERATOR_ACTIVE_KEY, OPERATOR_SECRET_KEY, REPLICATION_ACTIVE_KEY, REPLICATION_SECRET_KEY,
    };
    let name = config::operator_secret_name(&owner.name);
    let (operator, replication) = (generate_password(), generate_password());
    let fresh = [
        (OPERATOR_SECRET_KEY, operator.clone()),
        (OPERATOR_ACTIVE_KEY, operator),
        (REPLICATION_SECRET_KEY, replication.clone()),
        (REPLICATION_ACTIVE_KEY, replication),
    ];
    let secret = secret_or_made(ctx, owner, &name, &fresh, may_make).await?;
    let operator = text(&secret, OPERATOR_SECRET_KEY)?;
    let read = |key: &str| {
        secret_bytes(&secret, key)
            .is_ok()
            .then(|| text(&secret, key))
    };
    let (replication, active_operator, active_replication) = (
        read(REPLICATION_SECRET_KEY),
        read(OPERATOR_ACTIVE_KEY),
        read(REPLICATION_ACTIVE_KEY),
    );
    if let (Some(replication), Some(active_operator), Some(active_replication)) =
        (&replication, &active_operator, &active_replication)
    {
        return Ok(OwnPasswords {
            operator,
            replication: replication.clone(),
            active_operator: active_operator.clone()?,
            active_replication: active_replication.clone().ok(),
            secret,
            invalid: None,
        }
        .checked());
    }
    let as_it_is = |replication: Result<String, String>| OwnPasswords {
        active_operator: operator.clone(),
        active_replication: replication.as_ref().ok().cloned(),
        operator: operator.clone(),
        replication,
        secret: secret.clone(),
        invalid: None,
    };
    if !owned_by(&secret, owner) {
        let replication = replication.unwrap_or_else(|| {
            Err(format!(
                "Secret {name} has no key {REPLICATION_SECRET_KEY} and is not podkeeper's to change"
            ))
        });
        return Ok(as_it_is(replication));
    }
    let mut added = secret.clone();
    let data = added.string_data.get_or_insert_default();
    let replication = match replication {
        Some(r) => r,
        None => {
            let password = generate_password();
            data.insert(REPLICATION_SECRET_KEY.into(), password.clone());
            data.insert(REPLICATION_ACTIVE_KEY.into(), password.clone());
            Ok(password)
        }
    };
    if active_operator.is_none() {
        data.insert(OPERATOR_ACTIVE_KEY.into(), operator.clone());
    }
    if let (Ok(r), None) = (&replication, &active_replication) {
        data.insert(REPLICATION_ACTIVE_KEY.into(), r.clone());
    }
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    match api.replace(&name, &post_params(), &added).await {
        Ok(secret) => Ok(OwnPasswords {
            secret,
            ..as_it_is(replication)
        }),
        Err(e) => {
            let why = format!("cannot add keys to Secret {name}: {}", api_message(&e));
            // The operator's password stands; a replication password that
            // was never written is none.
            let kept = if secret_bytes(&secret, REPLICATION_SECRET_KEY).is_ok() {
                replication
            } else {
                Err(why)
            };
            Ok(as_it_is(kept))
        }
    }
}

/// The application users of `spec.users`, their passwords read from their
/// Secrets (which podkeeper never makes: they are the user's), and what
/// could not be read.
pub async fn users(redis: &Redis, ctx: &Context, owner: &Owner) -> (Users, Vec<String>) {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let read = futures::future::join_all(redis.spec.users.iter().map(|u| {
        let api = api.clone();
        async move {
            let secret = api
                .get_opt(&u.secret_name)
                .await
                .map_err(|e| format!("cannot read Secret {}: {}", u.secret_name, api_message(&e)))?
                .ok_or_else(|| format!("Secret {} not found", u.secret_name))?;
            let password = String::from_utf8(secret_bytes(&secret, &u.key)?)
                .map_err(|_| format!("Secret {} key {} is not UTF-8", u.secret_name, u.key))?;
            Ok::<_, String>(User {
                name: u.name.clone(),
                password,
                rules: u.rules.clone(),
            })
        }
    }))
    .await;
    let mut out = Users {
        own: None,
        users: Vec::new(),
        names: redis.spec.users.iter().map(|u| u.name.clone()).collect(),
    };
    let mut problems = Vec::new();
    for (u, r) in redis.spec.users.iter().zip(read) {
        match r {
            Ok(user) => out.users.push(user),
            Err(e) => problems.push(format!("user {}: {e}", u.name)),
        }
    }
    (out, problems)
}

/// Secret `name`, read with a GET (the operator may not list or watch
/// Secrets); one that does not exist yet is created with `fresh` (generated
/// passwords by key), owned by the Redis (so it goes with it), if
/// `may_make`.
async fn secret_or_made(
    ctx: &Context,
    owner: &Owner,
    name: &str,
    fresh: &[(&str, String)],
    may_make: bool,
) -> Result<Secret, String> {
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let unreadable = |e: &kube::Error| format!("cannot read Secret {name}: {}", api_message(e));
    let secret = match api.get_opt(name).await {
        Ok(Some(secret)) => secret,
        Ok(None) if !may_make => {
            return Err(format!(
                "Secret {name} not found; it is not made again once the Redis has served (its members' password would no longer match): restore it"
            ));
        }
        Ok(None) => match api
            .create(
                &post_params(),
                &owned_secret(owner, name, "Opaque", fresh.iter().cloned()),
            )
            .await
        {
            Ok(secret) => {
                ctx.executor
                    .event(
                        owner,
                        EventType::Normal,
                        "SecretCreated",
                        "CreateSecret",
                        format!(
                            "Created Secret {name} with a generated password under key {}",
                            fresh.iter().map(|(k, _)| *k).collect::<Vec<_>>().join(", ")
                        ),
                    )
                    .await;
                secret
            }
            // Created meanwhile (by the user, or a retried request).
            Err(kube::Error::Api(s)) if s.code == 409 => {
                api.get(name).await.map_err(|e| unreadable(&e))?
            }
            Err(e) => {
                return Err(format!("cannot create Secret {name}: {}", api_message(&e)));
            }
        },
        Err(e) => return Err(unreadable(&e)),
    };
    Ok(secret)
}

/// The text under `key` of a Secret (a password, a PEM file).
pub fn text(secret: &Secret, key: &str) -> Result<String, String> {
    String::from_utf8(secret_bytes(secret, key)?).map_err(|_| {
        format!(
            "Secret {} key {key} is not UTF-8",
            secret.metadata.name.as_deref().unwrap_or_default()
        )
    })
}

/// Whether `secret` is owned by the Redis `owner` (podkeeper made it).
pub fn owned_by(secret: &Secret, owner: &Owner) -> bool {
    secret
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.uid == owner.reference.uid)
}

/// How podkeeper creates and replaces the Secrets it makes.
pub fn post_params() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..Default::default()
    }
}

/// The value under `key` of a Secret, or that it has none.
pub fn secret_bytes(secret: &Secret, key: &str) -> Result<Vec<u8>, String> {
    secret
        .data
        .as_ref()
        .and_then(|d| d.get(key))
        .map(|b| b.0.clone())
        .or_else(|| {
            secret
                .string_data
                .as_ref()
                .and_then(|d| d.get(key))
                .map(|s| s.clone().into_bytes())
        })
        .ok_or_else(|| {
            format!(
                "Secret {} has no key {key}",
                secret.metadata.name.as_deref().unwrap_or_default()
            )
        })
}

/// 32 letters and digits from the thread's CSPRNG (about 190 bits).
pub fn generate_password() -> String {
    use rand::RngExt;
    rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(32)
        .map(char::from)
        .collect()
}

/// A Secret podkeeper makes for Redis `owner`: `data` as its string data,
/// of Secret type `type_`, owned by the Redis (so it goes with it). Pure.
pub fn owned_secret<'a>(
    owner: &Owner,
    name: &str,
    type_: &str,
    data: impl IntoIterator<Item = (&'a str, String)>,
) -> Secret {
    let mut reference = owner.reference.clone();
    // Owned for garbage collection, not controlled: the Pods' controller
    // reference is the Redis's, and a Secret is no Pod of the set.
    reference.controller = None;
    reference.block_owner_deletion = None;
    Secret {
        metadata: kube::api::ObjectMeta {
            name: Some(name.to_string()),
            namespace: Some(owner.namespace.clone()),
            labels: Some(
                [
                    ("app.kubernetes.io/managed-by", "podkeeper"),
                    ("app.kubernetes.io/name", "redis"),
                    ("app.kubernetes.io/instance", owner.name.as_str()),
                ]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
            ),
            owner_references: Some(vec![reference]),
            ..Default::default()
        },
        type_: Some(type_.into()),
        string_data: Some(data.into_iter().map(|(k, v)| (k.to_string(), v)).collect()),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_generated_password_is_32_letters_and_digits_and_never_repeats() {
        let (a, b) = (generate_password(), generate_password());
        assert_eq!(a.len(), 32);
        assert!(a.chars().all(|c| c.is_ascii_alphanumeric()), "{a}");
        assert_ne!(a, b);
    }

    #[test]
    fn the_generated_secret_holds_the_key_and_goes_with_the_redis() {
        let spec = serde_json::from_value(serde_json::json!({"replicas": 1, "image": "redis:7"}));
        let mut r = Redis::new("cache", spec.unwrap());
        r.metadata.namespace = Some("ns".into());
        r.metadata.uid = Some("u-1".into());
        r.spec.auth = Some(crate::api::redis::AuthSpec {
            secret_name: "cache-auth".into(),
            key: "password".into(),
        });
        let owner = Owner::of(&r, "Redis");
        let s = owned_secret(
            &owner,
            "cache-auth",
            "Opaque",
            [("password", "pw".to_string())],
        );
        assert_eq!(s.metadata.name.as_deref(), Some("cache-auth"));
        assert_eq!(s.metadata.namespace.as_deref(), Some("ns"));
        assert_eq!(
            s.string_data
                .as_ref()
                .and_then(|d| d.get("password"))
                .map(String::as_str),
            Some("pw")
        );
        let refs = s.metadata.owner_references.unwrap();
        assert_eq!(refs.len(), 1);
        assert_eq!(
            (refs[0].kind.as_str(), refs[0].uid.as_str()),
            ("Redis", "u-1")
        );
        // Garbage-collected with the Redis, but not one of its controlled
        // objects.
        assert_eq!(refs[0].controller, None);
    }
}
