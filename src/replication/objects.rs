//! The Kubernetes objects replication adds around the Pods, built from plain
//! values (pure): the two Services, the role label, the password's
//! environment variable and the readiness probe. The caller passes the
//! labels that select the set's Pods and sets owner references.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    EnvVar, EnvVarSource, ExecAction, Probe, SecretKeySelector, Service, ServicePort, ServiceSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;

use super::api::{AuthSpec, ROLE_LABEL, primary_service_name, replicas_service_name};
use super::config::PASSWORD_ENV;
use super::info::Role;

fn with_role(selector: &BTreeMap<String, String>, role: Role) -> BTreeMap<String, String> {
    let mut labels = selector.clone();
    labels.insert(ROLE_LABEL.to_string(), role.as_str().to_string());
    labels
}

fn service(
    name: String,
    namespace: &str,
    selector: BTreeMap<String, String>,
    port: u16,
) -> Service {
    Service {
        metadata: ObjectMeta {
            name: Some(name),
            namespace: Some(namespace.to_string()),
            labels: Some(selector.clone()),
            ..ObjectMeta::default()
        },
        spec: Some(ServiceSpec {
            selector: Some(selector),
            ports: Some(vec![ServicePort {
                name: Some("redis".into()),
                port: i32::from(port),
                target_port: Some(IntOrString::Int(i32::from(port))),
                protocol: Some("TCP".into()),
                ..ServicePort::default()
            }]),
            // Not-ready Pods are left out (the default), so a replica in
            // full sync gets no reads.
            publish_not_ready_addresses: None,
            ..ServiceSpec::default()
        }),
        status: None,
    }
}

/// `<name>`: selects the primary (read-write).
pub fn primary_service(
    redis: &str,
    namespace: &str,
    selector: &BTreeMap<String, String>,
    port: u16,
) -> Service {
    service(
        primary_service_name(redis),
        namespace,
        with_role(selector, Role::Primary),
        port,
    )
}

/// `<name>-replicas`: selects the ready replicas (read-only).
pub fn replicas_service(
    redis: &str,
    namespace: &str,
    selector: &BTreeMap<String, String>,
    port: u16,
) -> Service {
    service(
        replicas_service_name(redis),
        namespace,
        with_role(selector, Role::Replica),
        port,
    )
}

/// A merge patch that sets a Pod's role label.
pub fn role_label_patch(role: &str) -> serde_json::Value {
    serde_json::json!({"metadata": {"labels": {ROLE_LABEL: role}}})
}

/// The shell command of the readiness probe: Ready means the member serves
/// the data, as a primary or as a replica whose link to its primary is up
/// (`master_link_status:up` comes once the full sync is loaded). A replica
/// that still follows the start-up placeholder, or is loading a sync, would
/// answer reads from an empty or partial dataset, so the `<name>-replicas`
/// Service (ready Pods only) must not send it any. With a password,
/// redis-cli takes it from `REDISCLI_AUTH`, set from the container's
/// password variable, so it is not on the command line.
pub fn readiness_command(port: u16, password: bool) -> String {
    let auth = if password {
        format!("REDISCLI_AUTH=\"${PASSWORD_ENV}\" ")
    } else {
        String::new()
    };
    format!(
        "{auth}redis-cli -p {port} info replication | grep -Eq '^(role:master|master_link_status:up)'"
    )
}

/// The readiness probe that runs [`readiness_command`] every 2 s; two
/// failures in a row make the Pod NotReady.
pub fn readiness_probe(port: u16, password: bool) -> Probe {
    Probe {
        exec: Some(ExecAction {
            command: Some(vec![
                "sh".into(),
                "-c".into(),
                readiness_command(port, password),
            ]),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn selector() -> BTreeMap<String, String> {
        [("app.kubernetes.io/instance", "cache")]
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .into()
    }

    #[test]
    fn the_services_select_by_role() {
        let p = primary_service("cache", "ns", &selector(), 6380);
        let r = replicas_service("cache", "ns", &selector(), 6380);
        assert_eq!(p.metadata.name.as_deref(), Some("cache"));
        assert_eq!(r.metadata.name.as_deref(), Some("cache-replicas"));
        let sel = |s: &Service| s.spec.as_ref().unwrap().selector.clone().unwrap();
        assert_eq!(sel(&p)[ROLE_LABEL], "primary");
        assert_eq!(sel(&r)[ROLE_LABEL], "replica");
        assert_eq!(sel(&p)["app.kubernetes.io/instance"], "cache");
        let port = &p.spec.as_ref().unwrap().ports.as_ref().unwrap()[0];
        assert_eq!(port.port, 6380);
        assert_eq!(port.target_port, Some(IntOrString::Int(6380)));
        assert_eq!(
            role_label_patch("primary"),
            serde_json::json!({"metadata": {"labels": {"podkeeper.dev/role": "primary"}}})
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
