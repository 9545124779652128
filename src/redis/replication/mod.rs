//! Redis replication: one primary, the other Pods its replicas, driven by
//! the operator (no Sentinel), issue 13. The Redis kind calls it from
//! [`crate::redis::hooks`] on every reconcile.
//!
//! - [`info`]: parsing `INFO replication` / `INFO server`.
//! - [`client`]: one connection per Pod (IP and port), cached between
//!   rounds, with one deadline per step, a cap on what a server may send,
//!   logging in as the operator's own user (the clients' password as a
//!   fallback).
//! - [`clients`]: the clients' password (`spec.auth`) brought to the
//!   running members with `ACL SETUSER`, new beside old, then new only.
//! - [`users`]: the application users (`spec.users`) brought to the
//!   running members with `ACL SETUSER`, never with an administrative
//!   command.
//! - [`tls`]: the operator's TLS to the members (rustls, verifying the
//!   Secret's CA and the Redis's name) and a renewed certificate brought to
//!   the running members (`CONFIG SET`, checked by a handshake).
//! - [`observer`]: one task per member keeping its latest `INFO` fresh, so
//!   that a round waits for no silent member.
//! - [`topology`]: the pure planner: who is primary, whom to promote, whom
//!   to repoint or fence, when to switch over.
//! - [`act`]: observing every member concurrently, executing a plan, and
//!   what to record in status.
//! - [`config`]: validating `spec.config` and rendering redis-server's
//!   arguments.
//! - the CRD fields it serves are in [`crate::api::redis`].
//! - [`objects`]: the Services, role label patch, password variable and
//!   spreading constraints, built from plain values.
//!
//! # Design
//!
//! **Roles.** Exactly one member is primary. The operator records it in
//! `status.primary` as `{pod, runId}`: the Pod and the `run_id` of its
//! redis-server process. Every other member replicates from the primary's
//! Pod IP (`REPLICAOF ip port`). The Pods carry `podkeeper.dev/role=primary`
//! or `replica`; the Service `<name>` selects the primary (read-write),
//! `<name>-replicas` the replicas (read-only, ready ones only, as Services
//! do).
//!
//! **No empty primary, ever.** redis-server starts as a replica of a
//! placeholder that never answers (`--replicaof 127.0.0.1 1`), so a new Pod,
//! or a Pod whose container restarted (and lost its memory), comes up as a
//! replica with its link down. Redis refuses to feed a replica from a server
//! whose own link is down (`-NOMASTERLINK`), so the other replicas keep
//! their data until the operator decides. A recorded primary whose `run_id`
//! changed has restarted empty: the planner promotes the best replica
//! instead and demotes the restarted one. Without the guard (a primary that
//! restarted as primary), replicas whose `master_replid` already equals the
//! restarted primary's have resynced from the empty dataset and are never
//! promoted.
//!
//! **Unplanned failover** happens when the primary's Pod is gone or
//! terminating and unreachable, has restarted, is unreachable while the
//! kubelet reports its container not running (it exited, or waits out the
//! restart back-off), or has been unreachable for
//! `spec.failover.afterSeconds`. The replica with the highest replication
//! offset is promoted (a write acknowledged by `WAIT 1` is on it), others
//! are repointed, and a returning old primary is fenced: it is made a
//! replica of the new one in the same reconcile that sees it, and its own
//! writes since the failover are discarded.
//!
//! **Planned switchover.** Before the engine touches the primary's Pod
//! (rollout, scale-down, deletion), the planner sends `FAILOVER TO
//! <replica> TIMEOUT <spec.failover.switchoverTimeoutSeconds>` to the
//! primary: writes pause, the target catches up, roles swap, and only then
//! is the old primary free to go. Without FORCE, Redis aborts rather than
//! lose writes. Scale-down never picks the primary.
//!
//! **Auth.** Every member has the operator's own user
//! ([`config::OPERATOR_USER`], its password in a Secret podkeeper makes per
//! Redis); the operator, replication (`masteruser`) and the readiness
//! probe log in as it. `spec.auth` names a Secret key: the clients'
//! (`default` user's) password. The container gets both as environment
//! variables from `secretKeyRef`s; a `sh -c` script writes them, quoted for
//! redis.conf, as `user`, `masteruser`, `masterauth` and `requirepass`
//! lines to redis-server's standard input (see [`config::AUTH_SCRIPT`]), so
//! no password is in the Pod spec, nor redis-server's command line or
//! environment, nor the operator's logs ([`client::Endpoint`]'s Debug
//! redacts them). A changed clients' password reaches running members
//! through [`clients`].
//!
//! **Links.** A replica that follows the right address but whose link is
//! down is left to Redis, which reconnects every second (`REPLICAOF` to the
//! same address is a no-op); one that follows any other address (the
//! placeholder, an old primary, an old IP) is repointed in the round that
//! sees it.
//!
//! **Config.** `spec.config` takes redis.conf directives, minus those the
//! operator owns or that break what it relies on, and refuses values
//! redis-server would read as more than one directive (see
//! [`config::validate`]; the CRD's rules are generated from the same
//! lists). `maxmemory` defaults to 75 % of the container's memory limit.
//!
//! Left out here: persistence volumes, TLS, backups, Redis Cluster mode,
//! Sentinel.

pub mod acl;
pub mod act;
pub mod client;
pub mod clients;
pub mod config;
pub mod dial;
pub mod error;
pub mod info;
pub mod objects;
pub mod observer;
pub mod tls;
pub mod topology;
pub mod users;

pub use error::{ActionError, ClientError, ConfigError, InfoError};
