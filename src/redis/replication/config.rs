//! `spec.config`: validating redis.conf directives and rendering the
//! redis-server command line of a member Pod.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::api::redis::TlsSpec;
use crate::api::redis_config::{refusal, value_problem};
use crate::redis::replication::error::ConfigError;
use crate::redis::replication::topology::{PLACEHOLDER_HOST, PLACEHOLDER_PORT};
use crate::runtime::quantity;

/// The environment variable that carries the password into the container
/// (from a `secretKeyRef`).
pub const PASSWORD_ENV: &str = "REDIS_PASSWORD";

/// Defaults the user may override without volumes: no persistence.
const DEFAULTS: &[(&str, &str)] = &[("save", ""), ("appendonly", "no")];

/// Defaults the user may override with a volume per member (`spec.storage`):
/// every write in the append-only file, flushed to disk every second; no
/// RDB snapshots (the AOF's own base is one).
const PERSISTENT_DEFAULTS: &[(&str, &str)] = &[
    ("save", ""),
    ("appendonly", "yes"),
    ("appendfsync", "everysec"),
];

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
        if let Some(why) = refusal(&lower) {
            return Err(ConfigError::Refused(name.clone(), why));
        }
        if let Some(why) = value_problem(value) {
            return Err(ConfigError::BadValue(name.clone(), why));
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

/// `maxmemory` when the user did not set it: 75 % of the memory limit.
pub fn default_maxmemory(memory_limit: Option<&Quantity>) -> Option<u64> {
    memory_limit
        .and_then(quantity::bytes)
        .map(|b| b / 4 * 3)
        .filter(|b| *b > 0)
}

/// `spec.config` (validated, names in lower case) with podkeeper's
/// persistence defaults for what it does not set. `persistent`: the data
/// directory is a volume that outlives the Pod.
pub fn effective(
    config: &BTreeMap<String, String>,
    persistent: bool,
) -> Result<BTreeMap<String, String>, ConfigError> {
    let mut config = validate(config)?;
    let defaults = if persistent {
        PERSISTENT_DEFAULTS
    } else {
        DEFAULTS
    };
    for (name, value) in defaults {
        config
            .entry(name.to_string())
            .or_insert_with(|| value.to_string());
    }
    Ok(config)
}

/// The redis-server arguments for `spec.config` (validated) and the memory
/// limit: `--name value...` per directive, values split on white space as
/// redis.conf splits a line; an empty value stays one empty argument.
/// `persistent`: the data directory is a volume that outlives the Pod.
pub fn config_args(
    config: &BTreeMap<String, String>,
    memory_limit: Option<&Quantity>,
    persistent: bool,
) -> Result<Vec<String>, ConfigError> {
    let mut config = effective(config, persistent)?;
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

/// The environment variable that carries the operator's own password into
/// the container (from a `secretKeyRef` to [`operator_secret_name`]).
pub const OPERATOR_PASSWORD_ENV: &str = "PODKEEPER_PASSWORD";

/// The Redis user the operator logs in as: its own, so that changing the
/// clients' password (`spec.auth`) never locks the operator out.
pub const OPERATOR_USER: &str = "podkeeper";

/// What the operator's user may do: the commands the operator and the
/// readiness probe send, no keys, no channels.
pub const OPERATOR_RULES: &str = "resetkeys resetchannels -@all +ping +info +role +replicaof +failover +wait +config|get +config|set +acl|setuser +acl|deluser +acl|users";

/// The Redis user replicas log in to their primary as (`masteruser`), and
/// backups take their snapshot as: the replication commands only.
pub const REPLICATION_USER: &str = "replication";

/// What the replication user may do.
pub const REPLICATION_RULES: &str = "resetkeys resetchannels -@all +psync +sync +replconf +ping";

/// The environment variable that carries the replication user's password
/// into the container (from a `secretKeyRef` to [`operator_secret_name`],
/// key [`REPLICATION_SECRET_KEY`]).
pub const REPLICATION_PASSWORD_ENV: &str = "PODKEEPER_REPLICATION_PASSWORD";

/// The key of the replication user's password in [`operator_secret_name`].
pub const REPLICATION_SECRET_KEY: &str = "replication";

/// The keys podkeeper writes in [`operator_secret_name`] beside
/// [`OPERATOR_SECRET_KEY`] and [`REPLICATION_SECRET_KEY`]: the passwords
/// every member accepts. While a key differs from its active one, the
/// password is being rotated (see `crate::redis::credentials`).
pub const OPERATOR_ACTIVE_KEY: &str = "active-password";
pub const REPLICATION_ACTIVE_KEY: &str = "active-replication";

/// The environment variables that carry the active passwords into the
/// container (optional: a Secret made by an older podkeeper has none), so
/// that a member started during a rotation accepts the old password beside
/// the new one, as the running members do.
pub const OPERATOR_ACTIVE_ENV: &str = "PODKEEPER_ACTIVE_PASSWORD";
pub const REPLICATION_ACTIVE_ENV: &str = "PODKEEPER_ACTIVE_REPLICATION_PASSWORD";

/// The environment variable that says, with the value `off`, that the
/// `default` user may not log in (`spec.defaultUser: Disabled`).
pub const DEFAULT_USER_ENV: &str = "PODKEEPER_DEFAULT_USER";

/// The Secret podkeeper makes for its own user's password, owned by the
/// Redis (key [`OPERATOR_SECRET_KEY`]).
pub fn operator_secret_name(redis: &str) -> String {
    format!("{redis}-podkeeper")
}

/// The key of the operator's password in [`operator_secret_name`].
pub const OPERATOR_SECRET_KEY: &str = "password";

/// The shell script that starts every member: it writes redis.conf lines
/// to redis-server's standard input (`-`, which redis-server 7 reads
/// before its other arguments when it is the last one), so that no
/// password is in the Pod spec or in redis-server's command line:
///
/// - the operator's user [`OPERATOR_USER`] with the password from
///   [`OPERATOR_PASSWORD_ENV`] and [`OPERATOR_RULES`], the replication
///   user [`REPLICATION_USER`] with the password from
///   [`REPLICATION_PASSWORD_ENV`] and [`REPLICATION_RULES`] (both
///   passwords letters and digits, made by podkeeper; the script refuses
///   anything else), each also with its active password
///   ([`OPERATOR_ACTIVE_ENV`], [`REPLICATION_ACTIVE_ENV`]; the same one
///   but during a rotation), and replication logging in as it
///   (`masteruser`, `masterauth`, the new password);
/// - with [`DEFAULT_USER_ENV`] `off`, the `default` user off;
/// - with `spec.auth`, `requirepass` (the `default` user's password) from
///   [`PASSWORD_ENV`], quoted for redis.conf with shell built-ins only (no
///   other process sees it): `\`, `"` and line feeds are escaped inside
///   double quotes, every other byte stands for itself.
///
/// The password variables are unset before the exec, so redis-server's
/// environment does not hold them either. `$@` is the arguments.
pub const AUTH_SCRIPT: &str = r#"o=$PODKEEPER_PASSWORD r=$PODKEEPER_REPLICATION_PASSWORD
oa=${PODKEEPER_ACTIVE_PASSWORD:-$o} ra=${PODKEEPER_ACTIVE_REPLICATION_PASSWORD:-$r}
unset PODKEEPER_PASSWORD PODKEEPER_REPLICATION_PASSWORD PODKEEPER_ACTIVE_PASSWORD PODKEEPER_ACTIVE_REPLICATION_PASSWORD
for x in "$o" "$r" "$oa" "$ra"; do
  case $x in
    ''|*[!A-Za-z0-9]*) echo "podkeeper: the operator's and replication's passwords must be letters and digits" >&2; exit 1 ;;
  esac
done
d=
[ "$PODKEEPER_DEFAULT_USER" = off ] && d='user default off'
a=
if [ -n "${REDIS_PASSWORD+set}" ]; then
  p=$REDIS_PASSWORD
  bs='\' dq='"' nl='
'
  q=
  while :; do
    h=${p%%["$bs$dq$nl"]*}
    q=$q$h
    [ "$h" = "$p" ] && break
    p=${p#"$h"}
    case $p in
      "$nl"*) q=$q'\n' ;;
      *) q=$q$bs${p%"${p#?}"} ;;
    esac
    p=${p#?}
  done
  a="requirepass \"$q\""
fi
unset REDIS_PASSWORD
exec redis-server "$@" - <<EOF
user podkeeper on >$o >$oa resetkeys resetchannels -@all +ping +info +role +replicaof +failover +wait +config|get +config|set +acl|setuser +acl|deluser +acl|users
user replication on >$r >$ra resetkeys resetchannels -@all +psync +sync +replconf +ping
masteruser replication
masterauth $r
$a
$d
EOF
"#;

/// The TLS directives of a member (`spec.tls`): the Secret's files at
/// [`crate::redis::replication::dial::MOUNT`], clients not asked for a
/// certificate, and replication over TLS once plaintext is off (see
/// `docs/redis.md`: while plaintext is served, replication stays on it, so
/// that members started before and after TLS was added can follow each
/// other).
pub fn tls_args(tls: &TlsSpec) -> Vec<String> {
    let mut args: Vec<String> = [
        "--tls-port",
        &tls.port.to_string(),
        "--tls-cert-file",
        "/tls/tls.crt",
        "--tls-key-file",
        "/tls/tls.key",
        "--tls-ca-cert-file",
        "/tls/ca.crt",
        "--tls-auth-clients",
        "no",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    if !tls.plaintext {
        args.extend(["--tls-replication".to_string(), "yes".to_string()]);
    }
    args
}

/// The container's command and arguments: redis-server on `port`, starting
/// as a replica of the placeholder (never as an empty primary), with the
/// directives of [`config_args`], through `sh -c` [`AUTH_SCRIPT`], which
/// passes the passwords on redis-server's standard input: they are in
/// neither the Pod spec nor any process's command line.
pub fn server_command(port: u16, config_args: &[String]) -> (Vec<String>, Vec<String>) {
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
    let mut sh_args = vec!["-c".to_string(), AUTH_SCRIPT.into(), "redis-server".into()];
    sh_args.extend(args);
    (vec!["sh".into()], sh_args)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::redis_config::*;

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
            assert!(matches!(err, ConfigError::Refused(..)), "{name}: {err}");
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
            "Cluster-Config-File",
            "tls-port",
            "user",
            "aclfile",
            "replica-read-only",
            "slave-read-only",
            "replica-announced",
            "unixsocket",
            "min-replicas-to-write",
            "min-slaves-max-lag",
            "enable-debug-command",
            "enable-protected-configs",
        ] {
            let err = validate(&map(&[(name, "x")])).unwrap_err();
            assert!(matches!(err, ConfigError::Refused(..)), "{name}");
            assert!(
                err.to_string()
                    .starts_with(&format!("spec.config.{name}: ")),
                "{err}"
            );
        }
        for name in [
            "set-proc-title",
            "proc-title-template",
            "loadmodule",
            "pidfile",
        ] {
            assert!(validate(&map(&[(name, "x")])).is_ok(), "{name}");
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
            Err(ConfigError::BadValue(_, CONTROL_TEXT))
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
    }

    #[test]
    fn maxmemory_is_three_quarters_of_the_limit_unless_set() {
        let limit = Quantity("1Gi".into());
        let args = config_args(&BTreeMap::new(), Some(&limit), false).unwrap();
        let at = args.iter().position(|a| a == "--maxmemory").unwrap();
        assert_eq!(args[at + 1], (768u64 << 20).to_string());
        let args = config_args(&map(&[("maxmemory", "100mb")]), Some(&limit), false).unwrap();
        let at = args.iter().position(|a| a == "--maxmemory").unwrap();
        assert_eq!(args[at + 1], "100mb");
        let args = config_args(&BTreeMap::new(), None, false).unwrap();
        assert!(!args.contains(&"--maxmemory".to_string()));
    }

    #[test]
    fn persistence_is_off_unless_asked_for_and_values_split_like_redis_conf() {
        let args = config_args(&BTreeMap::new(), None, false).unwrap();
        assert_eq!(args, ["--appendonly", "no", "--save", ""]);
        let args = config_args(&map(&[("save", "3600 1 300 100")]), None, false).unwrap();
        assert_eq!(
            args,
            ["--appendonly", "no", "--save", "3600", "1", "300", "100"]
        );
    }

    #[test]
    fn with_a_volume_every_write_goes_to_the_append_only_file_unless_configured_otherwise() {
        let args = config_args(&BTreeMap::new(), None, true).unwrap();
        assert_eq!(
            args,
            [
                "--appendfsync",
                "everysec",
                "--appendonly",
                "yes",
                "--save",
                ""
            ]
        );
        let args = config_args(&map(&[("appendfsync", "always")]), None, true).unwrap();
        assert_eq!(
            args,
            [
                "--appendfsync",
                "always",
                "--appendonly",
                "yes",
                "--save",
                ""
            ]
        );
        let args = config_args(&map(&[("appendonly", "no")]), None, true).unwrap();
        assert!(args.windows(2).any(|w| w == ["--appendonly", "no"]));
    }

    #[test]
    fn values_redis_server_would_read_as_more_than_one_directive_are_refused() {
        for value in [
            "allkeys-lru",
            "3600 1 300 100",
            "replica 256mb 64mb 60",
            "-2",
            "-1 -2",
            "",
            "  ",
            "a\\b",
            "x-y--z",
            "{title} {listen-addr}",
        ] {
            assert_eq!(value_problem(value), None, "{value:?}");
            assert!(validate(&map(&[("save", value)])).is_ok(), "{value:?}");
        }
        for (value, why) in [
            ("allkeys-lru --replicaof 10.0.0.9 6379", DIRECTIVE_TEXT),
            ("--port 1", DIRECTIVE_TEXT),
            ("x --", DIRECTIVE_TEXT),
            ("x -", DIRECTIVE_TEXT),
            ("-", DIRECTIVE_TEXT),
            ("a\nport 1", CONTROL_TEXT),
            ("a\r", CONTROL_TEXT),
            ("a\tb", CONTROL_TEXT),
            ("a\u{0b}--port 1", CONTROL_TEXT),
            ("\0", CONTROL_TEXT),
            ("a\u{7f}", CONTROL_TEXT),
            ("\"3600 1\"", QUOTES_TEXT),
            ("'x'", QUOTES_TEXT),
            ("\"\"", QUOTES_TEXT),
        ] {
            let err = validate(&map(&[("maxmemory-policy", value)])).unwrap_err();
            assert_eq!(
                err,
                ConfigError::BadValue("maxmemory-policy".into(), why),
                "{value:?}"
            );
            assert!(
                err.to_string()
                    .starts_with("spec.config.maxmemory-policy: ")
            );
        }
    }

    /// The CRD's rules carry every refused directive with the reason that
    /// `validate` gives, and a pattern per value check.
    #[test]
    fn pods_start_as_replicas_of_the_placeholder_and_never_show_the_password() {
        let (cmd, args) = server_command(6379, &["--save".into(), String::new()]);
        assert_eq!(cmd, ["sh"]);
        assert_eq!(args[..3], ["-c", AUTH_SCRIPT, "redis-server"]);
        assert_eq!(
            args[3..8],
            ["--port", "6379", "--replicaof", "127.0.0.1", "1"]
        );
        assert!(AUTH_SCRIPT.contains(&format!("unset {PASSWORD_ENV}\n")));
        assert!(AUTH_SCRIPT.contains(&format!(
            "unset {OPERATOR_PASSWORD_ENV} {REPLICATION_PASSWORD_ENV} {OPERATOR_ACTIVE_ENV} {REPLICATION_ACTIVE_ENV}\n"
        )));
        for a in &args[3..] {
            assert!(!a.contains("requirepass") && !a.contains("masterauth") && !a.contains('$'));
        }
    }

    /// redis.conf's reading of a double-quoted string (`sdssplitargs`):
    /// `\n`, `\r`, `\t`, `\b`, `\a`, `\xHH`, else `\c` is `c`.
    fn redis_conf_unquote(quoted: &str) -> Vec<u8> {
        let inner = quoted
            .strip_prefix('"')
            .and_then(|q| q.strip_suffix('"'))
            .expect("double-quoted");
        let bytes = inner.as_bytes();
        let mut out = Vec::new();
        let mut i = 0;
        while i < bytes.len() {
            match bytes[i] {
                b'\\' => {
                    let c = bytes[i + 1];
                    match c {
                        b'n' => out.push(b'\n'),
                        b'r' => out.push(b'\r'),
                        b't' => out.push(b'\t'),
                        b'b' => out.push(8),
                        b'a' => out.push(7),
                        b'x' => panic!("the script writes no hex escapes"),
                        c => out.push(c),
                    }
                    i += 2;
                }
                b'"' => panic!("an unescaped quote ends the string early: {quoted}"),
                c => {
                    out.push(c);
                    i += 1;
                }
            }
        }
        out
    }

    /// The start script, run by /bin/sh with a redis-server that records
    /// its arguments and standard input: the password is in the redis.conf
    /// lines on stdin, quoted so that redis-server reads it back byte for
    /// byte, and nowhere in the arguments or the environment.
    #[test]
    fn the_start_script_passes_any_password_on_stdin_only() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let fake = dir.path().join("redis-server");
        std::fs::write(
            &fake,
            "#!/bin/sh\nprintf '%s\\n' \"$@\" > \"$OUT/args\"\nenv > \"$OUT/env\"\ncat > \"$OUT/stdin\"\n",
        )
        .unwrap();
        std::fs::set_permissions(&fake, std::fs::Permissions::from_mode(0o755)).unwrap();
        let path = format!(
            "{}:{}",
            dir.path().display(),
            std::env::var("PATH").unwrap()
        );
        let replication = "Repl1cationPassw0rd";
        let run_as =
            |operator: &str, replication: &str, password: Option<&str>, default_off: bool| {
                let (cmd, args) = server_command(7000, &["--save".into(), String::new()]);
                let mut c = std::process::Command::new(&cmd[0]);
                c.args(&args)
                    .env("PATH", &path)
                    .env("OUT", dir.path())
                    .env(OPERATOR_PASSWORD_ENV, operator)
                    .env(REPLICATION_PASSWORD_ENV, replication)
                    .env_remove(PASSWORD_ENV)
                    .env_remove(OPERATOR_ACTIVE_ENV)
                    .env_remove(REPLICATION_ACTIVE_ENV)
                    .env_remove(DEFAULT_USER_ENV);
                if default_off {
                    c.env(DEFAULT_USER_ENV, "off");
                }
                if let Some(p) = password {
                    c.env(PASSWORD_ENV, p);
                }
                c.status().unwrap().success()
            };
        let run =
            |operator: &str, password: Option<&str>| run_as(operator, replication, password, false);
        let read = |f: &str| std::fs::read_to_string(dir.path().join(f)).unwrap();
        let operator = "Op3ratorPassw0rd";
        for password in [
            "plain",
            "s3cret with spaces",
            r#"q"uo"te's $HOME `id` $(id) \ back\\slash \"#,
            "\\",
            "\"",
            "*?[a] ( ! -n = ; & | < >",
            "line\nfeed\r\ttab",
            "\nleading and trailing\n",
            "ünïcödé ✓",
            "-",
            "--port 1",
        ] {
            assert!(run(operator, Some(password)));
            let argv = read("args");
            let argv: Vec<&str> = argv.lines().collect();
            assert_eq!(argv.last(), Some(&"-"), "stdin is the last argument");
            assert_eq!(argv[..2], ["--port", "7000"]);
            for secret in [password, operator, replication] {
                if secret.len() >= 5 {
                    assert!(!argv.join("\n").contains(secret), "{secret:?} in {argv:?}");
                }
            }
            let env = read("env");
            assert!(
                !env.contains(PASSWORD_ENV)
                    && !env.contains(OPERATOR_PASSWORD_ENV)
                    && !env.contains(REPLICATION_PASSWORD_ENV)
            );
            let stdin = read("stdin");
            let lines: Vec<&str> = stdin.lines().collect();
            assert_eq!(
                lines[..4],
                [
                    format!("user {OPERATOR_USER} on >{operator} >{operator} {OPERATOR_RULES}"),
                    format!(
                        "user {REPLICATION_USER} on >{replication} >{replication} {REPLICATION_RULES}"
                    ),
                    format!("masteruser {REPLICATION_USER}"),
                    format!("masterauth {replication}"),
                ],
                "{stdin:?}"
            );
            assert_eq!(lines.len(), 6, "{stdin:?}");
            assert_eq!(lines[5], "", "the default user as Redis has it");
            let quoted = lines[4].strip_prefix("requirepass ").unwrap();
            assert_eq!(
                redis_conf_unquote(quoted),
                password.as_bytes(),
                "{password:?} as {quoted}"
            );
        }
        // Without spec.auth: the operator's user, no requirepass.
        assert!(run(operator, None));
        let stdin = read("stdin");
        assert!(!stdin.contains("requirepass"), "{stdin:?}");
        assert!(stdin.starts_with(&format!("user {OPERATOR_USER} on >{operator} ")));
        // spec.defaultUser: Disabled.
        assert!(run_as(operator, replication, Some("pw"), true));
        assert_eq!(read("stdin").lines().last(), Some("user default off"));
        // During a rotation: the new passwords and the active ones, both
        // accepted; replication logs in with the new one.
        let (cmd, args) = server_command(7000, &[]);
        let started = std::process::Command::new(&cmd[0])
            .args(&args)
            .env("PATH", &path)
            .env("OUT", dir.path())
            .env(OPERATOR_PASSWORD_ENV, "NewOp")
            .env(REPLICATION_PASSWORD_ENV, "NewRepl")
            .env(OPERATOR_ACTIVE_ENV, "OldOp")
            .env(REPLICATION_ACTIVE_ENV, "OldRepl")
            .env_remove(PASSWORD_ENV)
            .env_remove(DEFAULT_USER_ENV)
            .status()
            .unwrap();
        assert!(started.success());
        let stdin = read("stdin");
        let lines: Vec<&str> = stdin.lines().collect();
        assert_eq!(
            lines[..4],
            [
                format!("user {OPERATOR_USER} on >NewOp >OldOp {OPERATOR_RULES}"),
                format!("user {REPLICATION_USER} on >NewRepl >OldRepl {REPLICATION_RULES}"),
                format!("masteruser {REPLICATION_USER}"),
                "masterauth NewRepl".to_string(),
            ]
        );
        assert!(!read("env").contains("OldOp"));
        // An operator or replication password that is not letters and
        // digits is refused: it would be read as more ACL rules.
        for bad in ["", "two words", "pw>x", "a\nb"] {
            assert!(!run(bad, None), "{bad:?}");
            assert!(!run_as(operator, bad, None, false), "{bad:?}");
        }
    }
}
