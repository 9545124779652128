//! `spec.config`: validating redis.conf directives and rendering the
//! redis-server command line of a member Pod.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::redis::replication::error::ConfigError;
use crate::redis::replication::topology::{PLACEHOLDER_HOST, PLACEHOLDER_PORT};

/// The environment variable that carries the password into the container
/// (from a `secretKeyRef`).
pub const PASSWORD_ENV: &str = "REDIS_PASSWORD";

/// Directives podkeeper sets itself, with the reason given to the user.
const OWNED: &[(&str, &str)] = &[
    ("replicaof", "the operator sets each Pod's role"),
    ("slaveof", "the operator sets each Pod's role"),
    ("port", "use spec.port"),
    (
        "bind",
        "the operator and the other Pods reach redis-server on the Pod IP",
    ),
    ("bind-source-addr", "replicas connect from the Pod IP"),
    (
        "protected-mode",
        "it would refuse connections on the Pod IP",
    ),
    ("requirepass", "use spec.auth"),
    ("masterauth", "use spec.auth"),
    ("masteruser", "use spec.auth"),
    ("dir", "the data directory belongs to the Pod"),
    ("include", "files in the container are the operator's"),
    (
        "daemonize",
        "redis-server is the container's foreground process",
    ),
    (
        "supervised",
        "redis-server is the container's foreground process",
    ),
    ("logfile", "logs go to the container's output"),
    (
        "replica-announce-ip",
        "the operator matches replicas by Pod IP",
    ),
    (
        "replica-announce-port",
        "the operator matches replicas by port",
    ),
    (
        "slave-announce-ip",
        "the operator matches replicas by Pod IP",
    ),
    (
        "slave-announce-port",
        "the operator matches replicas by port",
    ),
];

/// The names of the directives podkeeper sets itself (the CRD's CEL rule
/// refuses the same list).
pub fn owned_directives() -> impl Iterator<Item = &'static str> {
    OWNED.iter().map(|(name, _)| *name)
}

/// Directives (or prefixes, ending in `-`) podkeeper does not support.
const UNSUPPORTED: &[(&str, &str)] = &[
    (
        "rename-command",
        "it would hide commands the operator needs (INFO, REPLICAOF, FAILOVER, CONFIG)",
    ),
    (
        "user",
        "ACL users could lock the operator out; use spec.auth",
    ),
    (
        "aclfile",
        "ACL users could lock the operator out; use spec.auth",
    ),
    ("cluster-", "Redis Cluster mode is not supported"),
    ("tls-", "TLS is not supported yet"),
];

/// Defaults the user may override: no persistence (there are no volumes).
const DEFAULTS: &[(&str, &str)] = &[("save", ""), ("appendonly", "no")];

fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
        && !name.starts_with('-')
}

/// Checks `spec.config`; returns the directives with lower-case names.
pub fn validate(
    config: &BTreeMap<String, String>,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut out = BTreeMap::new();
    for (name, value) in config {
        let lower = name.to_ascii_lowercase();
        if !valid_name(&lower) {
            return Err(ConfigError::BadName(name.clone()));
        }
        if let Some((_, why)) = OWNED.iter().find(|(n, _)| *n == lower) {
            return Err(ConfigError::Owned(name.clone(), why));
        }
        if let Some((_, why)) = UNSUPPORTED.iter().find(|(n, _)| {
            if n.ends_with('-') {
                lower.starts_with(n)
            } else {
                *n == lower
            }
        }) {
            return Err(ConfigError::Unsupported(name.clone(), why));
        }
        if value.contains(['\n', '\r', '\0']) {
            return Err(ConfigError::BadValue(name.clone()));
        }
        if lower == "maxmemory" && redis_bytes(value).is_none() {
            return Err(ConfigError::BadMaxmemory(value.clone()));
        }
        if out.insert(lower.clone(), value.clone()).is_some() {
            return Err(ConfigError::Duplicate(lower));
        }
    }
    Ok(out)
}

/// A redis.conf memory size: bytes, or with k, kb, m, mb, g, gb (k = 1000,
/// kb = 1024, as redis.conf says), case-insensitive.
pub fn redis_bytes(value: &str) -> Option<u64> {
    let v = value.trim().to_ascii_lowercase();
    let digits = v.find(|c: char| !c.is_ascii_digit()).unwrap_or(v.len());
    let (n, unit) = v.split_at(digits);
    let n: u64 = n.parse().ok()?;
    let mult: u64 = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    n.checked_mul(mult)
}

/// A Kubernetes quantity in bytes (`512Mi`, `1G`, `1.5Gi`, `1e9`, `100000`).
pub fn quantity_bytes(q: &Quantity) -> Option<u64> {
    let s = q.0.trim();
    let suffixes: &[(&str, f64)] = &[
        ("Ki", 1024f64),
        ("Mi", 1024f64.powi(2)),
        ("Gi", 1024f64.powi(3)),
        ("Ti", 1024f64.powi(4)),
        ("Pi", 1024f64.powi(5)),
        ("Ei", 1024f64.powi(6)),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("P", 1e15),
        ("E", 1e18),
        ("m", 1e-3),
    ];
    let (number, mult) = suffixes
        .iter()
        .find_map(|(suf, mult)| s.strip_suffix(suf).map(|n| (n, *mult)))
        .unwrap_or((s, 1.0));
    let n: f64 = number.parse().ok()?;
    let bytes = n * mult;
    (bytes.is_finite() && bytes >= 0.0).then_some(bytes as u64)
}

/// `maxmemory` when the user did not set it: 75 % of the memory limit.
pub fn default_maxmemory(memory_limit: Option<&Quantity>) -> Option<u64> {
    memory_limit
        .and_then(quantity_bytes)
        .map(|b| b / 4 * 3)
        .filter(|b| *b > 0)
}

/// The redis-server arguments for `spec.config` (validated) and the memory
/// limit: `--name value...` per directive, values split on white space as
/// redis.conf splits a line; an empty value stays one empty argument.
pub fn config_args(
    config: &BTreeMap<String, String>,
    memory_limit: Option<&Quantity>,
) -> Result<Vec<String>, ConfigError> {
    let mut config = validate(config)?;
    for (name, value) in DEFAULTS {
        config
            .entry(name.to_string())
            .or_insert_with(|| value.to_string());
    }
    if !config.contains_key("maxmemory")
        && let Some(b) = default_maxmemory(memory_limit)
    {
        config.insert("maxmemory".into(), b.to_string());
    }
    let mut args = Vec::new();
    for (name, value) in &config {
        args.push(format!("--{name}"));
        let words: Vec<&str> = value.split_ascii_whitespace().collect();
        if words.is_empty() {
            args.push(String::new());
        } else {
            args.extend(words.iter().map(|w| w.to_string()));
        }
    }
    Ok(args)
}

/// The container's command and arguments: redis-server on `port`, starting
/// as a replica of the placeholder (never as an empty primary), with the
/// directives of [`config_args`]. With `auth`, it runs through `sh -c` so
/// that the password comes from [`PASSWORD_ENV`] and never appears in the
/// Pod spec.
pub fn server_command(port: u16, config_args: &[String], auth: bool) -> (Vec<String>, Vec<String>) {
    let mut args = vec![
        "--port".to_string(),
        port.to_string(),
        "--replicaof".into(),
        PLACEHOLDER_HOST.into(),
        PLACEHOLDER_PORT.to_string(),
        "--protected-mode".into(),
        "no".into(),
        // Replicas hear from their primary every second, so that their
        // `master_last_io_seconds_ago` is a second opinion on whether it
        // lives (the default, 10 s, is longer than a failover waits).
        "--repl-ping-replica-period".into(),
        "1".into(),
    ];
    args.extend(config_args.iter().cloned());
    if !auth {
        return (vec!["redis-server".into()], args);
    }
    let script = format!(
        "exec redis-server \"$@\" --requirepass \"${PASSWORD_ENV}\" --masterauth \"${PASSWORD_ENV}\""
    );
    let mut sh_args = vec!["-c".to_string(), script, "redis-server".into()];
    sh_args.extend(args);
    (vec!["sh".into()], sh_args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn owned_directives_are_refused_with_the_reason() {
        for name in [
            "replicaof",
            "slaveof",
            "port",
            "bind",
            "requirepass",
            "masterauth",
            "protected-mode",
            "dir",
            "Port",
            "REPLICAOF",
        ] {
            let err = validate(&map(&[(name, "x")])).unwrap_err();
            assert!(matches!(err, ConfigError::Owned(..)), "{name}: {err}");
            assert!(
                err.to_string()
                    .starts_with(&format!("spec.config.{name}: ")),
                "{err}"
            );
        }
        let err = validate(&map(&[("port", "1")])).unwrap_err();
        assert_eq!(
            err.to_string(),
            "spec.config.port: podkeeper sets this directive itself (use spec.port)"
        );
    }

    #[test]
    fn unsupported_directives_are_refused() {
        for name in [
            "rename-command",
            "cluster-enabled",
            "tls-port",
            "user",
            "aclfile",
        ] {
            assert!(
                matches!(
                    validate(&map(&[(name, "x")])),
                    Err(ConfigError::Unsupported(..))
                ),
                "{name}"
            );
        }
    }

    #[test]
    fn names_values_and_duplicates_are_checked() {
        assert!(matches!(
            validate(&map(&[("max memory", "1")])),
            Err(ConfigError::BadName(_))
        ));
        assert!(matches!(
            validate(&map(&[("", "1")])),
            Err(ConfigError::BadName(_))
        ));
        assert!(matches!(
            validate(&map(&[("maxmemory-policy", "a\nport 1")])),
            Err(ConfigError::BadValue(_))
        ));
        assert!(matches!(
            validate(&map(&[("maxmemory", "1"), ("MAXMEMORY", "2")])),
            Err(ConfigError::Duplicate(_))
        ));
        assert!(matches!(
            validate(&map(&[("maxmemory", "lots")])),
            Err(ConfigError::BadMaxmemory(_))
        ));
        let ok = validate(&map(&[("Maxmemory-Policy", "allkeys-lru"), ("save", "")])).unwrap();
        assert_eq!(ok.get("maxmemory-policy").unwrap(), "allkeys-lru");
    }

    #[test]
    fn sizes() {
        assert_eq!(redis_bytes("100"), Some(100));
        assert_eq!(redis_bytes("1kb"), Some(1024));
        assert_eq!(redis_bytes("1k"), Some(1000));
        assert_eq!(redis_bytes("2GB"), Some(2 << 30));
        assert_eq!(redis_bytes("1x"), None);
        assert_eq!(redis_bytes(""), None);
        let q = |s: &str| quantity_bytes(&Quantity(s.into()));
        assert_eq!(q("512Mi"), Some(512 << 20));
        assert_eq!(q("1G"), Some(1_000_000_000));
        assert_eq!(q("1.5Gi"), Some(3 << 29));
        assert_eq!(q("1e3"), Some(1000));
        assert_eq!(q("100000"), Some(100000));
        assert_eq!(q("lots"), None);
    }

    #[test]
    fn maxmemory_is_three_quarters_of_the_limit_unless_set() {
        let limit = Quantity("1Gi".into());
        let args = config_args(&BTreeMap::new(), Some(&limit)).unwrap();
        let at = args.iter().position(|a| a == "--maxmemory").unwrap();
        assert_eq!(args[at + 1], (768u64 << 20).to_string());
        let args = config_args(&map(&[("maxmemory", "100mb")]), Some(&limit)).unwrap();
        let at = args.iter().position(|a| a == "--maxmemory").unwrap();
        assert_eq!(args[at + 1], "100mb");
        let args = config_args(&BTreeMap::new(), None).unwrap();
        assert!(!args.contains(&"--maxmemory".to_string()));
    }

    #[test]
    fn persistence_is_off_unless_asked_for_and_values_split_like_redis_conf() {
        let args = config_args(&BTreeMap::new(), None).unwrap();
        assert_eq!(args, ["--appendonly", "no", "--save", ""]);
        let args = config_args(&map(&[("save", "3600 1 300 100")]), None).unwrap();
        assert_eq!(
            args,
            ["--appendonly", "no", "--save", "3600", "1", "300", "100"]
        );
    }

    #[test]
    fn pods_start_as_replicas_of_the_placeholder_and_never_show_the_password() {
        let (cmd, args) = server_command(6379, &[], false);
        assert_eq!(cmd, ["redis-server"]);
        assert_eq!(
            args[..5],
            ["--port", "6379", "--replicaof", "127.0.0.1", "1"]
        );
        let (cmd, args) = server_command(6379, &[], true);
        assert_eq!(cmd, ["sh"]);
        assert!(args[1].contains("\"$REDIS_PASSWORD\""));
        assert!(args.iter().any(|a| a == "--replicaof"));
    }
}
