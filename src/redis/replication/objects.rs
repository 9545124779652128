//! The Kubernetes objects replication adds around the Pods, built from plain
//! values (pure): the member labels' patch, the password's environment
//! variable and the readiness probe. (The two Services are built with the
//! rest of the Redis's objects, in `controller::redis::services::desired_services`.)

use k8s_openapi::api::core::v1::{EnvVar, EnvVarSource, ExecAction, Probe, SecretKeySelector};

use crate::api::names::{POD_NAME_LABEL, ROLE_LABEL};
use crate::api::redis::AuthSpec;
use crate::redis::replication::config::{
    OPERATOR_ACTIVE_ENV, OPERATOR_ACTIVE_KEY, OPERATOR_PASSWORD_ENV, OPERATOR_SECRET_KEY,
    OPERATOR_USER, PASSWORD_ENV, REPLICATION_ACTIVE_ENV, REPLICATION_ACTIVE_KEY,
    REPLICATION_PASSWORD_ENV, REPLICATION_SECRET_KEY, operator_secret_name,
};
use crate::redis::replication::dial::MOUNT;

/// A merge patch that sets a member Pod's role label and its name label.
pub fn member_labels_patch(pod: &str, role: &str) -> serde_json::Value {
    serde_json::json!({"metadata": {"labels": {ROLE_LABEL: role, POD_NAME_LABEL: pod}}})
}

/// Where the probe asks redis-server.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Listener {
    Plain(u16),
    /// Over TLS, trusting the Secret's CA (members serving TLS only).
    Tls(u16),
}

/// The shell command of the readiness probe: Ready means the member serves
/// the data, as a primary that takes writes or as a replica whose link to
/// its primary is up (`master_link_status:up` comes once the full sync is
/// loaded). A replica that still follows the start-up placeholder, or is
/// loading a sync, would answer reads from an empty or partial dataset, so
/// the `<name>-replicas` Service (ready Pods only) must not send it any. A
/// primary with fewer good replicas than its `min-replicas-to-write` (the
/// write fence podkeeper sets) refuses writes, so the `<name>` Service must
/// not send it clients either. redis-cli logs in as the operator's user
/// (its password from `REDISCLI_AUTH`, set from the container's variable,
/// so it is not on the command line): the probe does not depend on the
/// clients' password, which can change while the container runs.
pub fn readiness_command(listener: Listener) -> String {
    let auth = format!("export REDISCLI_AUTH=\"${OPERATOR_PASSWORD_ENV}\"; ");
    let cli = match listener {
        Listener::Plain(port) => format!("redis-cli --user {OPERATOR_USER} -p {port}"),
        Listener::Tls(port) => {
            format!("redis-cli --tls --cacert {MOUNT}/ca.crt --user {OPERATOR_USER} -p {port}")
        }
    };
    format!(
        "{auth}i=$({cli} info replication) || exit 1; \
         case \"$i\" in *role:master*) ;; *) printf '%s' \"$i\" | grep -q '^master_link_status:up'; exit $?;; esac; \
         need=$({cli} config get min-replicas-to-write | sed -n 2p); \
         good=$(printf '%s' \"$i\" | sed -n 's/^min_slaves_good_slaves:\\([0-9]*\\).*/\\1/p'); \
         [ \"${{need:-0}}\" -eq 0 ] || [ \"${{good:-0}}\" -ge \"$need\" ]"
    )
}

/// The readiness probe that runs [`readiness_command`] every 2 s; two
/// failures in a row make the Pod NotReady.
pub fn readiness_probe(listener: Listener) -> Probe {
    Probe {
        exec: Some(ExecAction {
            command: Some(vec!["sh".into(), "-c".into(), readiness_command(listener)]),
        }),
        period_seconds: Some(2),
        timeout_seconds: Some(2),
        failure_threshold: Some(2),
        ..Probe::default()
    }
}

/// The container's password variable, from the Secret named by spec.auth.
pub fn password_env(auth: &AuthSpec) -> EnvVar {
    EnvVar {
        name: PASSWORD_ENV.to_string(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: auth.secret_name.clone(),
                key: auth.key.clone(),
                optional: Some(false),
            }),
            ..EnvVarSource::default()
        }),
    }
}

/// The container's variables with the operator's own password and the
/// replication user's, and the active ones (optional: see
/// [`OPERATOR_ACTIVE_ENV`]), from the Secret podkeeper makes for Redis
/// `redis`.
pub fn operator_password_env(redis: &str) -> [EnvVar; 4] {
    [
        (OPERATOR_PASSWORD_ENV, OPERATOR_SECRET_KEY, false),
        (REPLICATION_PASSWORD_ENV, REPLICATION_SECRET_KEY, false),
        (OPERATOR_ACTIVE_ENV, OPERATOR_ACTIVE_KEY, true),
        (REPLICATION_ACTIVE_ENV, REPLICATION_ACTIVE_KEY, true),
    ]
    .map(|(name, key, optional)| EnvVar {
        name: name.to_string(),
        value: None,
        value_from: Some(EnvVarSource {
            secret_key_ref: Some(SecretKeySelector {
                name: operator_secret_name(redis),
                key: key.into(),
                optional: Some(optional),
            }),
            ..EnvVarSource::default()
        }),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_labels_patch_sets_only_the_role_and_the_name() {
        assert_eq!(
            member_labels_patch("cache-x1", "primary"),
            serde_json::json!({"metadata": {"labels": {
                "podkeeper.dev/role": "primary",
                "podkeeper.dev/pod-name": "cache-x1",
            }}})
        );
    }

    #[test]
    fn the_password_comes_from_the_secret() {
        let env = password_env(&AuthSpec {
            secret_name: "cache-auth".into(),
            key: "password".into(),
        });
        assert_eq!(env.name, "REDIS_PASSWORD");
        assert!(env.value.is_none(), "never inline");
        let r = env.value_from.unwrap().secret_key_ref.unwrap();
        assert_eq!(
            (r.name.as_str(), r.key.as_str()),
            ("cache-auth", "password")
        );
    }
}
