//! Parsing `INFO replication` and `INFO server` into plain values.
//!
//! Redis answers `INFO` with `# Section` headers and `key:value` lines
//! (CRLF-terminated). Unknown keys are ignored, so newer servers parse too;
//! keys this module relies on must be present, or parsing fails with the
//! key's name.
//!
//! The server's answer is not trusted to size anything: at most
//! [`MAX_LINES`] lines are read (the connection already caps a reply's
//! bytes), counts such as `connected_slaves` never make the parser look for
//! more than the answer holds, and a value quoted in an error is cut to
//! [`EXCERPT_CHARS`] characters, so an error message (which goes into the
//! status and Events) stays small.

use std::collections::HashMap;

pub use crate::redis::replication::error::InfoError;

/// What a server says it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    Primary,
    Replica,
}

impl Role {
    /// The value of the `podkeeper.dev/role` label and of status.members[].role.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Primary => "primary",
            Role::Replica => "replica",
        }
    }
}

/// One `slaveN:` line of a primary: a replica as the primary sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConnectedReplica {
    pub ip: String,
    pub port: u16,
    /// `online` once the initial sync is done; `wait_bgsave`, `send_bulk`
    /// before.
    pub state: String,
    /// Replication offset the replica last acknowledged.
    pub offset: i64,
    /// Seconds since the replica's last acknowledgement.
    pub lag_seconds: i64,
}

impl ConnectedReplica {
    pub fn online(&self) -> bool {
        self.state == "online"
    }
}

/// The replication state of one server, from `INFO replication` plus the
/// `run_id` of `INFO server`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ReplicationInfo {
    pub role: Role,
    /// Changes whenever the redis-server process restarts: a primary whose
    /// run_id changed has lost its in-memory dataset.
    pub run_id: String,
    /// Replicas only: where the replica replicates from.
    pub master_host: Option<String>,
    pub master_port: Option<u16>,
    /// Replicas only: `master_link_status:up`.
    pub link_up: bool,
    /// Replicas only: a full sync is being received (the dataset is
    /// incomplete until it ends).
    pub sync_in_progress: bool,
    /// Replicas only: the offset of the replication stream applied so far.
    pub slave_repl_offset: Option<i64>,
    /// Replicas only, while the link is up: seconds since the replica last
    /// heard from its primary (podkeeper has primaries ping every second).
    pub master_last_io_seconds: Option<i64>,
    /// The server's own replication offset.
    pub master_repl_offset: i64,
    /// The id of the replication history this server's data belongs to.
    pub master_replid: String,
    /// `master_failover_state` (Redis 6.2+): `no-failover` unless a
    /// `FAILOVER` is under way on this server.
    pub failover_state: String,
    /// Primaries only: the replicas connected to it.
    pub connected_replicas: Vec<ConnectedReplica>,
    /// What the server says of its memory, clients, commands and keys, for
    /// the metrics only: the planner never reads it.
    pub vitals: Box<Vitals>,
}

/// From `INFO memory`, `clients`, `stats` and `keyspace`. Every field is
/// optional: a server that leaves one out (an older or newer version)
/// still serves the planner, and that metric is left out.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Vitals {
    pub used_memory: Option<u64>,
    /// 0: no limit.
    pub maxmemory: Option<u64>,
    pub connected_clients: Option<u64>,
    pub commands_processed: Option<u64>,
    pub evicted_keys: Option<u64>,
    pub expired_keys: Option<u64>,
    /// Per database that holds keys (`db0` ...): its keys, and those with
    /// an expiry. At most 16 (Redis's default `databases`) in practice;
    /// never more than the answer's lines.
    pub keyspace: Vec<Keyspace>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Keyspace {
    pub db: u32,
    pub keys: u64,
    pub expires: u64,
}

/// The most databases reported: bounds the metrics' `db` label even
/// against a server configured with thousands.
pub const MAX_DATABASES: usize = 16;

impl ReplicationInfo {
    /// The offset to compare when choosing whom to promote: what a replica
    /// has applied, or what a primary has produced.
    pub fn offset(&self) -> i64 {
        match self.role {
            Role::Primary => self.master_repl_offset,
            Role::Replica => self.slave_repl_offset.unwrap_or(self.master_repl_offset),
        }
    }

    /// Whether this server replicates from `host:port`.
    pub fn follows(&self, host: &str, port: u16) -> bool {
        self.role == Role::Replica
            && self.master_host.as_deref() == Some(host)
            && self.master_port == Some(port)
    }

    /// A `FAILOVER` is under way on this server.
    pub fn failover_in_progress(&self) -> bool {
        !self.failover_state.is_empty() && self.failover_state != "no-failover"
    }

    /// A primary's view of the replica listening on `ip:port`.
    pub fn replica(&self, ip: &str, port: u16) -> Option<&ConnectedReplica> {
        self.connected_replicas
            .iter()
            .find(|r| r.ip == ip && r.port == port)
    }
}

/// The `INFO` sections [`parse_vitals`] reads.
pub const VITALS: &[&str] = &["memory", "clients", "stats", "keyspace"];

/// The most lines of one `INFO` section read; a real one has fewer than
/// 100, plus one per connected replica.
pub const MAX_LINES: usize = 4096;

/// The most characters of a server's value quoted in an error.
pub const EXCERPT_CHARS: usize = 64;

/// `value`, cut to [`EXCERPT_CHARS`] characters (marked with `...`).
pub fn excerpt(value: &str) -> String {
    match value.char_indices().nth(EXCERPT_CHARS) {
        None => value.to_string(),
        Some((at, _)) => format!("{}...", &value[..at]),
    }
}

fn fields(text: &str) -> HashMap<&str, &str> {
    text.lines()
        .take(MAX_LINES)
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .filter_map(|l| l.split_once(':'))
        .collect()
}

fn required<'a>(f: &HashMap<&str, &'a str>, key: &'static str) -> Result<&'a str, InfoError> {
    f.get(key).copied().ok_or(InfoError::Missing(key))
}

fn number<T: std::str::FromStr>(key: &'static str, value: &str) -> Result<T, InfoError> {
    value.parse().map_err(|_| InfoError::Invalid {
        key,
        value: excerpt(value),
    })
}

/// The `run_id` field of `INFO server`.
pub fn parse_run_id(server: &str) -> Result<String, InfoError> {
    Ok(required(&fields(server), "run_id")?.to_string())
}

/// Parses `INFO replication`; `run_id` comes from [`parse_run_id`].
pub fn parse_replication(text: &str, run_id: String) -> Result<ReplicationInfo, InfoError> {
    let f = fields(text);
    let role = match required(&f, "role")? {
        "master" => Role::Primary,
        "slave" => Role::Replica,
        other => {
            return Err(InfoError::Invalid {
                key: "role",
                value: excerpt(other),
            });
        }
    };
    let master_repl_offset = number("master_repl_offset", required(&f, "master_repl_offset")?)?;
    let master_replid = required(&f, "master_replid")?.to_string();
    let failover_state = f
        .get("master_failover_state")
        .copied()
        .unwrap_or("no-failover")
        .to_string();
    let mut info = ReplicationInfo {
        role,
        run_id,
        master_host: None,
        master_port: None,
        link_up: false,
        sync_in_progress: false,
        slave_repl_offset: None,
        master_last_io_seconds: None,
        master_repl_offset,
        master_replid,
        failover_state,
        connected_replicas: Vec::new(),
        vitals: Box::default(),
    };
    if role == Role::Replica {
        info.master_host = Some(required(&f, "master_host")?.to_string());
        info.master_port = Some(number("master_port", required(&f, "master_port")?)?);
        info.link_up = required(&f, "master_link_status")? == "up";
        info.sync_in_progress = required(&f, "master_sync_in_progress")? == "1";
        info.slave_repl_offset = Some(number(
            "slave_repl_offset",
            required(&f, "slave_repl_offset")?,
        )?);
        // Absent (or -1) while the link is down.
        info.master_last_io_seconds = f
            .get("master_last_io_seconds_ago")
            .and_then(|v| v.parse::<i64>().ok())
            .filter(|s| *s >= 0);
    }
    let connected: usize = number("connected_slaves", required(&f, "connected_slaves")?)?;
    // The count is the server's word: never look for more lines than the
    // answer holds.
    for n in 0..connected.min(f.len()) {
        let key = format!("slave{n}");
        // A replica may disconnect between the count and the list.
        if let Some(line) = f.get(key.as_str()) {
            info.connected_replicas.push(parse_replica_line(line)?);
        }
    }
    Ok(info)
}

/// Parses the `INFO memory`, `clients`, `stats` and `keyspace` sections
/// (in any order, as one text or several). Never fails: a missing or
/// unreadable field is `None`.
pub fn parse_vitals(text: &str) -> Vitals {
    let f = fields(text);
    let get = |k: &str| f.get(k).and_then(|v| v.parse::<u64>().ok());
    let mut keyspace: Vec<Keyspace> = f
        .iter()
        .filter_map(|(k, v)| {
            let db = k.strip_prefix("db")?.parse::<u32>().ok()?;
            let kv: HashMap<&str, &str> = v.split(',').filter_map(|p| p.split_once('=')).collect();
            Some(Keyspace {
                db,
                keys: kv.get("keys")?.parse().ok()?,
                expires: kv.get("expires").and_then(|e| e.parse().ok()).unwrap_or(0),
            })
        })
        .collect();
    keyspace.sort_by_key(|k| k.db);
    keyspace.truncate(MAX_DATABASES);
    Vitals {
        used_memory: get("used_memory"),
        maxmemory: get("maxmemory"),
        connected_clients: get("connected_clients"),
        commands_processed: get("total_commands_processed"),
        evicted_keys: get("evicted_keys"),
        expired_keys: get("expired_keys"),
        keyspace,
    }
}

/// `ip=10.0.0.5,port=6379,state=online,offset=1234,lag=0`
fn parse_replica_line(line: &str) -> Result<ConnectedReplica, InfoError> {
    let kv: HashMap<&str, &str> = line.split(',').filter_map(|p| p.split_once('=')).collect();
    let get = |k: &'static str| kv.get(k).copied().ok_or(InfoError::Missing(k));
    Ok(ConnectedReplica {
        ip: get("ip")?.to_string(),
        port: number("slave port", get("port")?)?,
        state: get("state")?.to_string(),
        offset: number("slave offset", get("offset")?)?,
        lag_seconds: number("slave lag", get("lag")?)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const PRIMARY: &str = "# Replication\r\nrole:master\r\nconnected_slaves:2\r\n\
        slave0:ip=10.0.0.2,port=6379,state=online,offset=1500,lag=0\r\n\
        slave1:ip=10.0.0.3,port=6379,state=wait_bgsave,offset=0,lag=1\r\n\
        master_failover_state:no-failover\r\n\
        master_replid:a5f5a87ca3e5a7f266028690b96fc478ba3c9cb3\r\n\
        master_replid2:0000000000000000000000000000000000000000\r\n\
        master_repl_offset:1512\r\nsecond_repl_offset:-1\r\nrepl_backlog_active:1\r\n";

    const REPLICA: &str = "# Replication\r\nrole:slave\r\nmaster_host:10.0.0.1\r\n\
        master_port:6379\r\nmaster_link_status:up\r\nmaster_last_io_seconds_ago:2\r\n\
        master_sync_in_progress:0\r\nslave_read_repl_offset:1512\r\nslave_repl_offset:1500\r\n\
        slave_priority:100\r\nslave_read_only:1\r\nreplica_announced:1\r\nconnected_slaves:0\r\n\
        master_failover_state:no-failover\r\n\
        master_replid:a5f5a87ca3e5a7f266028690b96fc478ba3c9cb3\r\n\
        master_repl_offset:1500\r\n";

    #[test]
    fn parses_a_primary_and_its_replicas() {
        let info = parse_replication(PRIMARY, "r1".into()).unwrap();
        assert_eq!(info.role, Role::Primary);
        assert_eq!(info.offset(), 1512);
        assert_eq!(info.run_id, "r1");
        assert_eq!(info.connected_replicas.len(), 2);
        let online = info.replica("10.0.0.2", 6379).unwrap();
        assert!(online.online());
        assert_eq!(online.offset, 1500);
        assert!(!info.replica("10.0.0.3", 6379).unwrap().online());
        assert!(info.replica("10.0.0.4", 6379).is_none());
        assert!(!info.failover_in_progress());
    }

    #[test]
    fn parses_a_replica() {
        let info = parse_replication(REPLICA, "r2".into()).unwrap();
        assert_eq!(info.role, Role::Replica);
        assert!(info.follows("10.0.0.1", 6379));
        assert!(!info.follows("10.0.0.1", 6380));
        assert!(info.link_up);
        assert!(!info.sync_in_progress);
        assert_eq!(info.offset(), 1500);
        assert_eq!(info.master_last_io_seconds, Some(2));
    }

    #[test]
    fn a_count_of_replicas_larger_than_the_answer_costs_nothing() {
        let text = PRIMARY.replace(
            "connected_slaves:2",
            "connected_slaves:18446744073709551615",
        );
        let info = parse_replication(&text, "r".into()).unwrap();
        assert_eq!(info.connected_replicas.len(), 2);
    }

    #[test]
    fn a_huge_answer_is_read_only_so_far_and_quoted_short() {
        // Many lines: only the first MAX_LINES are looked at, so a field
        // after them is missing.
        let mut text = String::from("# Replication\r\n");
        for n in 0..(MAX_LINES + 10) {
            text.push_str(&format!("junk{n}:x\r\n"));
        }
        text.push_str("role:master\r\n");
        assert_eq!(
            parse_replication(&text, "r".into()).unwrap_err(),
            InfoError::Missing("role")
        );
        // A huge value is quoted by its start only.
        let huge = "9".repeat(1 << 20);
        let err = parse_replication(
            &PRIMARY.replace(
                "master_repl_offset:1512",
                &format!("master_repl_offset:{huge}"),
            ),
            "r".into(),
        )
        .unwrap_err();
        assert!(err.to_string().len() < 200, "{}", err.to_string().len());
        let err = parse_replication(
            &PRIMARY.replace("role:master", &format!("role:{huge}")),
            "r".into(),
        )
        .unwrap_err();
        assert!(err.to_string().len() < 200);
        assert_eq!(excerpt("short"), "short");
        assert_eq!(excerpt(&"é".repeat(100)).chars().count(), EXCERPT_CHARS + 3);
    }

    #[test]
    fn a_replica_of_the_placeholder_with_its_link_down() {
        let text = REPLICA
            .replace("master_host:10.0.0.1", "master_host:127.0.0.1")
            .replace("master_port:6379", "master_port:1")
            .replace("master_link_status:up", "master_link_status:down")
            .replace(
                "master_last_io_seconds_ago:2",
                "master_last_io_seconds_ago:-1",
            );
        let info = parse_replication(&text, "r".into()).unwrap();
        assert!(!info.link_up);
        assert_eq!(info.master_last_io_seconds, None);
        assert!(info.follows("127.0.0.1", 1));
    }

    #[test]
    fn a_failover_under_way_is_seen() {
        let text = PRIMARY.replace("no-failover", "waiting-for-sync");
        assert!(
            parse_replication(&text, "r".into())
                .unwrap()
                .failover_in_progress()
        );
    }

    #[test]
    fn missing_and_bad_fields_are_named() {
        let err = parse_replication("# Replication\r\n", "r".into()).unwrap_err();
        assert_eq!(err.to_string(), "INFO has no field role");
        let err = parse_replication(
            &PRIMARY.replace("master_repl_offset:1512", "master_repl_offset:x"),
            "r".into(),
        )
        .unwrap_err();
        assert!(err.to_string().contains("master_repl_offset"), "{err}");
        let err = parse_replication(&PRIMARY.replace("role:master", "role:sentinel"), "r".into())
            .unwrap_err();
        assert!(err.to_string().contains("sentinel"), "{err}");
    }

    #[test]
    fn vitals_are_read_from_their_sections_and_missing_ones_left_out() {
        let text = "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\nmaxmemory:0\r\n\
            # Clients\r\nconnected_clients:7\r\n\
            # Stats\r\ntotal_commands_processed:1234\r\nexpired_keys:3\r\nevicted_keys:0\r\n\
            # Keyspace\r\ndb3:keys=2,expires=0,avg_ttl=0\r\ndb0:keys=1500,expires=12,avg_ttl=9\r\n";
        let v = parse_vitals(text);
        assert_eq!(v.used_memory, Some(1_048_576));
        assert_eq!(v.maxmemory, Some(0));
        assert_eq!(v.connected_clients, Some(7));
        assert_eq!(v.commands_processed, Some(1234));
        assert_eq!((v.expired_keys, v.evicted_keys), (Some(3), Some(0)));
        assert_eq!(
            v.keyspace,
            vec![
                Keyspace {
                    db: 0,
                    keys: 1500,
                    expires: 12
                },
                Keyspace {
                    db: 3,
                    keys: 2,
                    expires: 0
                }
            ]
        );
        // A server that says nothing of them, or nonsense, still parses.
        assert_eq!(
            parse_vitals("# Memory\r\nused_memory:lots\r\n"),
            Vitals::default()
        );
        // A server with thousands of databases holding keys: 16 reported.
        let many: String = (0..5000)
            .map(|n| format!("db{n}:keys=1,expires=0\r\n"))
            .collect();
        assert_eq!(parse_vitals(&many).keyspace.len(), MAX_DATABASES);
    }

    #[test]
    fn run_id_comes_from_info_server() {
        let server = "# Server\r\nredis_version:7.0.15\r\nrun_id:98a68048163ae37440d6d0e89c8286f3c9746534\r\ntcp_port:6379\r\n";
        assert_eq!(
            parse_run_id(server).unwrap(),
            "98a68048163ae37440d6d0e89c8286f3c9746534"
        );
        assert!(parse_run_id("# Server\r\n").is_err());
    }
}
