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
    let secret = secret_or_made(ctx, owner, &auth.secret_name, &[&auth.key], may_make).await?;
    text(&secret, &auth.key).map(Some)
}

/// The passwords of the operator's own user and of the replication user in
/// the members, from one GET of the Secret made with the Redis (which it
/// owns). A Secret made by an older podkeeper (the operator's password
/// only) gets a generated replication password added, before any member
/// is started with a reference to it; what goes wrong there is the second
/// result's.
pub async fn operator_passwords(
    ctx: &Context,
    owner: &Owner,
    may_make: bool,
) -> Result<(String, Result<String, String>), String> {
    let name = config::operator_secret_name(&owner.name);
    let (key, replication) = (config::OPERATOR_SECRET_KEY, config::REPLICATION_SECRET_KEY);
    let secret = secret_or_made(ctx, owner, &name, &[key, replication], may_make).await?;
    let operator = text(&secret, key)?;
    if secret_bytes(&secret, replication).is_ok() {
        return Ok((operator, text(&secret, replication)));
    }
    if !owned_by(&secret, owner) {
        let why =
            format!("Secret {name} has no key {replication} and is not podkeeper's to change");
        return Ok((operator, Err(why)));
    }
    let password = generate_password();
    let mut secret = secret;
    secret
        .string_data
        .get_or_insert_default()
        .insert(replication.to_string(), password.clone());
    let api: Api<Secret> = Api::namespaced(ctx.client.clone(), &owner.namespace);
    let added = api
        .replace(&name, &post_params(), &secret)
        .await
        .map(|_| password)
        .map_err(|e| {
            format!(
                "cannot add {replication} to Secret {name}: {}",
                api_message(&e)
            )
        });
    Ok((operator, added))
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
        replication: None,
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
/// Secrets); one that does not exist yet is created with a generated
/// password under each of `keys`, owned by the Redis (so it goes with it),
/// if `may_make`.
async fn secret_or_made(
    ctx: &Context,
    owner: &Owner,
    name: &str,
    keys: &[&str],
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
                &owned_secret(
                    owner,
                    name,
                    "Opaque",
                    keys.iter().map(|k| (*k, generate_password())),
                ),
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
                            keys.join(", ")
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
