//! The Redis metrics: what the operator already reads, in Prometheus form.
//!
//! - Per member (labels `namespace`, `redis`, `pod`): what its observer
//!   last heard ([`crate::redis::replication::observer`] asks every member
//!   `INFO` once a second), read at scrape time and asking nobody. Named as
//!   redis_exporter names them where it has the metric (`redis_up`,
//!   `redis_memory_used_bytes`, ...); `podkeeper_redis_replica_lag_*` are
//!   the replica's lag as its primary reports it.
//! - Per Redis (labels `namespace`, `redis`): what its rounds saw: whether
//!   a writable primary was there, for how long it was not, failovers (by
//!   cause) and switchovers with their durations, and when the last round
//!   ran.
//!
//! Cardinality: every label value is a Redis, one of its Pods, a database
//! number (at most [`MAX_DATABASES`]), a role or a failover cause (fixed
//! sets). A member's series go with its Pod (the next scrape after its
//! observer stops), a Redis's with the object.
//!
//! Durations are seen by the rounds: a period without a writable primary
//! begins at the first round that finds none (or that sends a `FAILOVER`,
//! which pauses writes) and ends at the first round that finds one, so its
//! resolution is the time between rounds (a member's change of role or
//! link wakes a round at once; see the observer).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric};
use prometheus_client::metrics::MetricType;
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::histogram::Histogram;

use crate::redis::replication::act::Memory;
use crate::redis::replication::info::{ReplicationInfo, Role};
use crate::redis::replication::observer::Latest;
use crate::redis::replication::topology::Cause;

pub use crate::redis::replication::info::MAX_DATABASES;

/// Histogram buckets of failover and switchover durations, in seconds:
/// from a quarter of a second to about two minutes.
const DURATION_BUCKETS: [f64; 10] = [0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0, 120.0];

/// What one round saw, as the metrics count it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RoundSeen {
    /// The recorded primary answered as a primary, not in a `FAILOVER`.
    pub writable: bool,
    /// A replica was promoted this round, and why.
    pub promoted: Option<Cause>,
    /// A `FAILOVER` was sent this round.
    pub switched: bool,
}

/// What kind of change a period without a writable primary ended in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Change {
    Failover,
    Switchover,
}

/// Per Redis, what its rounds saw.
#[derive(Debug)]
struct Rounds {
    writable: bool,
    unwritable_since: Option<Instant>,
    change: Option<Change>,
    unwritable: Duration,
    last_round: Option<SystemTime>,
    failovers: BTreeMap<&'static str, u64>,
    switchovers: u64,
    failover_seconds: Histogram,
    switchover_seconds: Histogram,
}

impl Default for Rounds {
    fn default() -> Self {
        Rounds {
            writable: false,
            unwritable_since: None,
            change: None,
            unwritable: Duration::ZERO,
            last_round: None,
            failovers: BTreeMap::new(),
            switchovers: 0,
            failover_seconds: Histogram::new(DURATION_BUCKETS),
            switchover_seconds: Histogram::new(DURATION_BUCKETS),
        }
    }
}

/// The value of the `cause` label of `podkeeper_redis_failovers_total`;
/// `None` for the first primary of a new Redis, which is no failover.
fn cause_label(cause: Cause) -> Option<&'static str> {
    Some(match cause {
        Cause::NoRecord => return None,
        Cause::PrimaryGone => "primary_gone",
        Cause::PrimaryRestarted => "primary_restarted",
        Cause::PrimaryUnreachable => "primary_unreachable",
        Cause::PrimaryStopped => "primary_stopped",
        Cause::PrimaryDemoted => "primary_demoted",
    })
}

impl Rounds {
    /// Counts one round seen at `now` (`wall`: the same instant, for the
    /// last round's timestamp). A period without a writable primary is
    /// closed by the first round that finds one, before this round's own
    /// actions open another.
    fn seen(&mut self, round: RoundSeen, now: Instant, wall: SystemTime) {
        self.last_round = Some(wall);
        self.writable = round.writable;
        match (round.writable, self.unwritable_since) {
            (true, Some(since)) => {
                let took = now.saturating_duration_since(since);
                self.unwritable += took;
                match self.change.take() {
                    Some(Change::Failover) => self.failover_seconds.observe(took.as_secs_f64()),
                    Some(Change::Switchover) => self.switchover_seconds.observe(took.as_secs_f64()),
                    None => {}
                }
                self.unwritable_since = None;
            }
            (false, None) => self.unwritable_since = Some(now),
            _ => {}
        }
        if let Some(cause) = round.promoted.and_then(cause_label) {
            *self.failovers.entry(cause).or_default() += 1;
            self.change = Some(Change::Failover);
            self.unwritable_since.get_or_insert(now);
        }
        if round.switched {
            self.switchovers += 1;
            // A promotion in the same period says more of it.
            self.change.get_or_insert(Change::Switchover);
            self.unwritable_since.get_or_insert(now);
        }
    }

    /// Seconds without a writable primary, the open period included.
    fn unwritable_seconds(&self, now: Instant) -> f64 {
        let open = self
            .unwritable_since
            .map_or(Duration::ZERO, |s| now.saturating_duration_since(s));
        (self.unwritable + open).as_secs_f64()
    }
}

/// One tracked Redis.
#[derive(Debug)]
struct Tracked {
    namespace: String,
    name: String,
    memory: Weak<Memory>,
    rounds: Rounds,
}

/// The metrics of every Redis this operator reconciles; a collector the
/// registry asks at each scrape.
#[derive(Debug, Default)]
pub struct RedisMetrics {
    tracked: Mutex<BTreeMap<String, Tracked>>,
}

impl RedisMetrics {
    fn tracked(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Tracked>> {
        self.tracked.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts a round of the Redis `uid`, whose members `memory` observes.
    pub fn round(
        &self,
        uid: &str,
        namespace: &str,
        name: &str,
        memory: &Arc<Memory>,
        seen: RoundSeen,
    ) {
        let mut tracked = self.tracked();
        let t = tracked.entry(uid.to_string()).or_insert_with(|| Tracked {
            namespace: namespace.to_string(),
            name: name.to_string(),
            memory: Weak::new(),
            rounds: Rounds::default(),
        });
        if !std::ptr::eq(t.memory.as_ptr(), Arc::as_ptr(memory)) {
            t.memory = Arc::downgrade(memory);
        }
        t.rounds.seen(seen, Instant::now(), SystemTime::now());
    }

    /// The Redis `uid` is gone: its series go.
    pub fn forget(&self, uid: &str) {
        self.tracked().remove(uid);
    }
}

/// One member as a scrape shows it.
#[derive(Debug, PartialEq)]
struct MemberView {
    pod: String,
    info: Option<ReplicationInfo>,
    /// Replicas: the bytes and seconds behind, as their primary reports.
    lag: Option<(i64, i64)>,
}

/// The members of one Redis from its observer's latest samples. A
/// replica's lag is what the primary it follows reports of it (the offset
/// it acknowledged, seconds since its last acknowledgement).
fn members(samples: &[Latest]) -> Vec<MemberView> {
    fn answered(l: &Latest) -> Option<&ReplicationInfo> {
        l.sample.result.as_ref().ok()
    }
    let primary_at = |host: &str, port: u16| {
        samples
            .iter()
            .filter(|l| l.ip == host && l.port == port)
            .find_map(answered)
            .filter(|p| p.role == Role::Primary)
    };
    samples
        .iter()
        .map(|l| {
            let info = answered(l).cloned();
            let lag = info.as_ref().and_then(|i| {
                let p = primary_at(i.master_host.as_deref()?, i.master_port?)?;
                let seen = p.replica(&l.ip, l.port)?;
                Some((
                    (p.master_repl_offset - seen.offset).max(0),
                    seen.lag_seconds,
                ))
            });
            MemberView {
                pod: l.pod.clone(),
                info,
                lag,
            }
        })
        .collect()
}

/// One Redis as a scrape shows it.
struct RedisView<'a> {
    namespace: &'a str,
    name: &'a str,
    members: Vec<MemberView>,
    rounds: &'a Rounds,
}

type Labels<'a> = Vec<(&'static str, &'a str)>;

/// Writes one metric family: its descriptor, then a sample per label set.
fn family<'a, V>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    metric_type: MetricType,
    samples: impl IntoIterator<Item = (Labels<'a>, V)>,
) -> Result<(), std::fmt::Error>
where
    V: EncodeMetric,
{
    let mut samples = samples.into_iter().peekable();
    if samples.peek().is_none() {
        return Ok(());
    }
    let mut metric = encoder.encode_descriptor(name, help, None, metric_type)?;
    for (labels, value) in samples {
        value.encode(metric.encode_family(&labels)?)?;
    }
    Ok(())
}

fn gauge<N>(v: N) -> ConstGauge<N> {
    ConstGauge::new(v)
}

impl RedisView<'_> {
    fn labels(&self) -> Labels<'_> {
        vec![("namespace", self.namespace), ("redis", self.name)]
    }

    fn member<'a>(&'a self, m: &'a MemberView) -> Labels<'a> {
        let mut l = self.labels();
        l.push(("pod", &m.pod));
        l
    }

    /// `(labels, value)` per member that answered and reported `value`.
    fn per_member<'a, T>(
        &'a self,
        value: impl Fn(&ReplicationInfo) -> Option<T> + 'a,
    ) -> impl Iterator<Item = (Labels<'a>, T)> + 'a {
        self.members.iter().filter_map(move |m| {
            let v = value(m.info.as_ref()?)?;
            Some((self.member(m), v))
        })
    }
}

impl RedisMetrics {
    fn encode_views(
        views: &[RedisView<'_>],
        now: Instant,
        encoder: &mut DescriptorEncoder,
    ) -> Result<(), std::fmt::Error> {
        use MetricType::{Counter, Gauge};
        // Per member.
        family(
            encoder,
            "redis_up",
            "Whether the member answered the operator's last INFO",
            Gauge,
            views.iter().flat_map(|v| {
                v.members
                    .iter()
                    .map(|m| (v.member(m), gauge(i64::from(m.info.is_some()))))
            }),
        )?;
        family(
            encoder,
            "redis_instance_info",
            "The member's role (master or slave, as Redis names them), 1",
            Gauge,
            views.iter().flat_map(|v| {
                v.members.iter().filter_map(|m| {
                    let mut l = v.member(m);
                    l.push((
                        "role",
                        match m.info.as_ref()?.role {
                            Role::Primary => "master",
                            Role::Replica => "slave",
                        },
                    ));
                    Some((l, gauge(1i64)))
                })
            }),
        )?;
        family(
            encoder,
            "redis_master_link_up",
            "Replicas: whether the link to the primary is up",
            Gauge,
            views.iter().flat_map(|v| {
                v.per_member(|i| (i.role == Role::Replica).then(|| gauge(i64::from(i.link_up))))
            }),
        )?;
        family(
            encoder,
            "redis_master_repl_offset",
            "The member's replication offset, in bytes",
            Gauge,
            views
                .iter()
                .flat_map(|v| v.per_member(|i| Some(gauge(i.offset())))),
        )?;
        family(
            encoder,
            "podkeeper_redis_replica_lag_bytes",
            "Replicas: bytes of the primary's replication stream not yet acknowledged",
            Gauge,
            views.iter().flat_map(|v| {
                v.members
                    .iter()
                    .filter_map(|m| Some((v.member(m), gauge(m.lag?.0))))
            }),
        )?;
        family(
            encoder,
            "podkeeper_redis_replica_lag_seconds",
            "Replicas: seconds since the primary last heard the replica acknowledge",
            Gauge,
            views.iter().flat_map(|v| {
                v.members
                    .iter()
                    .filter_map(|m| Some((v.member(m), gauge(m.lag?.1))))
            }),
        )?;
        let vital = |f: fn(&ReplicationInfo) -> Option<u64>| {
            views
                .iter()
                .flat_map(move |v| v.per_member(f))
                .collect::<Vec<_>>()
        };
        for (name, help, metric_type, value) in [
            (
                "redis_memory_used_bytes",
                "Memory the member's redis-server has allocated (used_memory)",
                Gauge,
                (|i: &ReplicationInfo| i.vitals.used_memory) as fn(&ReplicationInfo) -> Option<u64>,
            ),
            (
                "redis_memory_max_bytes",
                "The member's maxmemory (0: no limit)",
                Gauge,
                |i| i.vitals.maxmemory,
            ),
            (
                "redis_connected_clients",
                "Client connections to the member",
                Gauge,
                |i| i.vitals.connected_clients,
            ),
            (
                "redis_commands_processed",
                "Commands the member's process has run",
                Counter,
                |i| i.vitals.commands_processed,
            ),
            (
                "redis_evicted_keys",
                "Keys the member's process evicted to stay under maxmemory",
                Counter,
                |i| i.vitals.evicted_keys,
            ),
            (
                "redis_expired_keys",
                "Keys the member's process expired",
                Counter,
                |i| i.vitals.expired_keys,
            ),
        ] {
            match metric_type {
                Counter => family(
                    encoder,
                    name,
                    help,
                    Counter,
                    vital(value)
                        .into_iter()
                        .map(|(l, v)| (l, ConstCounter::new(v))),
                )?,
                _ => family(
                    encoder,
                    name,
                    help,
                    Gauge,
                    vital(value).into_iter().map(|(l, v)| (l, gauge(v))),
                )?,
            }
        }
        let keyspace: Vec<(Labels<'_>, String, u64, u64)> = views
            .iter()
            .flat_map(|v| {
                v.members.iter().flat_map(move |m| {
                    m.info.iter().flat_map(move |i| {
                        i.vitals
                            .keyspace
                            .iter()
                            .map(move |k| (v.member(m), format!("db{}", k.db), k.keys, k.expires))
                    })
                })
            })
            .collect();
        family(
            encoder,
            "redis_db_keys",
            "Keys in each database of the member",
            Gauge,
            keyspace.iter().map(|(l, db, keys, _)| {
                let mut l = l.clone();
                l.push(("db", db.as_str()));
                (l, gauge(*keys))
            }),
        )?;
        family(
            encoder,
            "redis_db_keys_expiring",
            "Keys with an expiry in each database of the member",
            Gauge,
            keyspace.iter().map(|(l, db, _, expires)| {
                let mut l = l.clone();
                l.push(("db", db.as_str()));
                (l, gauge(*expires))
            }),
        )?;
        // Per Redis.
        family(
            encoder,
            "podkeeper_redis_writable_primary",
            "Whether the last round found the recorded primary answering as a primary, not in a FAILOVER",
            Gauge,
            views
                .iter()
                .map(|v| (v.labels(), gauge(i64::from(v.rounds.writable)))),
        )?;
        family(
            encoder,
            "podkeeper_redis_no_writable_primary_seconds",
            "Seconds the rounds found no writable primary, since the operator started",
            Counter,
            views.iter().map(|v| {
                (
                    v.labels(),
                    ConstCounter::new(v.rounds.unwritable_seconds(now)),
                )
            }),
        )?;
        family(
            encoder,
            "podkeeper_redis_last_round_timestamp_seconds",
            "When the operator last ran a round of the Redis (Unix time)",
            Gauge,
            views.iter().filter_map(|v| {
                let at = v.rounds.last_round?.duration_since(UNIX_EPOCH).ok()?;
                Some((v.labels(), gauge(at.as_secs_f64())))
            }),
        )?;
        family(
            encoder,
            "podkeeper_redis_failovers",
            "Replicas promoted because the primary failed, by cause",
            Counter,
            views.iter().flat_map(|v| {
                v.rounds.failovers.iter().map(|(cause, n)| {
                    let mut l = v.labels();
                    l.push(("cause", cause));
                    (l, ConstCounter::new(*n))
                })
            }),
        )?;
        family(
            encoder,
            "podkeeper_redis_switchovers",
            "Planned handovers of the primary role (FAILOVER sent)",
            Counter,
            views
                .iter()
                .map(|v| (v.labels(), ConstCounter::new(v.rounds.switchovers))),
        )?;
        family(
            encoder,
            "podkeeper_redis_failover_duration_seconds",
            "From the first round without a writable primary to the first with one, for failovers",
            MetricType::Histogram,
            views
                .iter()
                .map(|v| (v.labels(), v.rounds.failover_seconds.clone())),
        )?;
        family(
            encoder,
            "podkeeper_redis_switchover_duration_seconds",
            "From the FAILOVER sent to the first round with a writable primary, for switchovers",
            MetricType::Histogram,
            views
                .iter()
                .map(|v| (v.labels(), v.rounds.switchover_seconds.clone())),
        )
    }
}

impl Collector for RedisMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let mut tracked = self.tracked();
        // A Redis whose memory is gone (its object deleted, this operator
        // no longer its leader's) shows nothing more.
        tracked.retain(|_, t| t.memory.strong_count() > 0);
        let views: Vec<RedisView<'_>> = tracked
            .values()
            .map(|t| RedisView {
                namespace: &t.namespace,
                name: &t.name,
                members: t
                    .memory
                    .upgrade()
                    .map(|m| members(&m.observer.samples()))
                    .unwrap_or_default(),
                rounds: &t.rounds,
            })
            .collect();
        Self::encode_views(&views, Instant::now(), &mut encoder)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::redis::replication::info::{parse_replication, parse_vitals};
    use crate::redis::replication::observer::Sample;
    use prometheus_client::registry::Registry;

    fn seen(writable: bool) -> RoundSeen {
        RoundSeen {
            writable,
            ..RoundSeen::default()
        }
    }

    fn count(h: &Histogram) -> (u64, f64) {
        // The histogram as a scrape shows it: its _count and _sum.
        let mut r = Registry::default();
        r.register("h", "h", h.clone());
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        let value = |suffix: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(&format!("h_{suffix} ")))
                .unwrap()
                .parse::<f64>()
                .unwrap()
        };
        (value("count") as u64, value("sum"))
    }

    #[test]
    fn a_failover_is_counted_by_cause_and_timed_from_the_first_round_without_a_primary() {
        let t0 = Instant::now();
        let wall = SystemTime::now();
        let at = |s: u64| t0 + Duration::from_secs(s);
        let mut r = Rounds::default();
        r.seen(seen(true), at(0), wall);
        // The primary goes silent at 1 s; promoted at 3 s; writable at 4 s.
        r.seen(seen(false), at(1), wall);
        r.seen(seen(false), at(2), wall);
        r.seen(
            RoundSeen {
                promoted: Some(Cause::PrimaryGone),
                ..seen(false)
            },
            at(3),
            wall,
        );
        assert!((r.unwritable_seconds(at(3)) - 2.0).abs() < 1e-9);
        r.seen(seen(true), at(4), wall);
        r.seen(seen(true), at(9), wall);
        assert_eq!(r.failovers.get("primary_gone"), Some(&1));
        assert_eq!(count(&r.failover_seconds), (1, 3.0));
        assert_eq!(count(&r.switchover_seconds).0, 0);
        assert!((r.unwritable_seconds(at(9)) - 3.0).abs() < 1e-9);
        assert!(r.writable);
    }

    #[test]
    fn a_switchover_is_timed_from_the_failover_sent_and_a_first_primary_is_no_failover() {
        let t0 = Instant::now();
        let wall = SystemTime::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut r = Rounds::default();
        // A new Redis: no primary, then the first is promoted.
        r.seen(seen(false), at(0), wall);
        r.seen(
            RoundSeen {
                promoted: Some(Cause::NoRecord),
                ..seen(false)
            },
            at(100),
            wall,
        );
        r.seen(seen(true), at(200), wall);
        assert!(r.failovers.is_empty());
        assert_eq!(count(&r.failover_seconds).0, 0);
        // A switchover sent by a round that found the primary writable.
        r.seen(
            RoundSeen {
                switched: true,
                ..seen(true)
            },
            at(1000),
            wall,
        );
        r.seen(seen(false), at(1200), wall);
        r.seen(seen(true), at(1500), wall);
        assert_eq!(r.switchovers, 1);
        let (n, sum) = count(&r.switchover_seconds);
        assert_eq!(n, 1);
        assert!((sum - 0.5).abs() < 1e-9, "{sum}");
    }

    fn latest(pod: &str, ip: &str, replication: Option<&str>, vitals: &str) -> Latest {
        let result = match replication {
            Some(text) => Ok(ReplicationInfo {
                vitals: Box::new(parse_vitals(vitals)),
                ..parse_replication(text, format!("run-{pod}")).unwrap()
            }),
            None => Err(Arc::new(
                crate::redis::replication::error::ClientError::Timeout {
                    addr: format!("{ip}:6379"),
                    command: "INFO",
                },
            )),
        };
        Latest {
            pod: pod.into(),
            ip: ip.into(),
            port: 6379,
            sample: Arc::new(Sample {
                asked: tokio::time::Instant::now(),
                result,
            }),
        }
    }

    /// A Redis of three members: `a` primary, `b` a replica 500 bytes and
    /// 2 s behind, `c` silent.
    fn three() -> Vec<Latest> {
        let primary = "role:master\r\nconnected_slaves:1\r\n\
            slave0:ip=10.0.0.2,port=6379,state=online,offset=1000,lag=2\r\n\
            master_replid:h\r\nmaster_repl_offset:1500\r\n";
        let replica = "role:slave\r\nmaster_host:10.0.0.1\r\nmaster_port:6379\r\n\
            master_link_status:up\r\nmaster_sync_in_progress:0\r\nslave_repl_offset:1000\r\n\
            connected_slaves:0\r\nmaster_replid:h\r\nmaster_repl_offset:1000\r\n";
        let vitals = "used_memory:2048\r\nmaxmemory:4096\r\nconnected_clients:3\r\n\
            total_commands_processed:77\r\nevicted_keys:0\r\nexpired_keys:5\r\n\
            db0:keys=1500,expires=2\r\n";
        vec![
            latest("a", "10.0.0.1", Some(primary), vitals),
            latest("b", "10.0.0.2", Some(replica), vitals),
            latest("c", "10.0.0.3", None, ""),
        ]
    }

    #[test]
    fn a_replicas_lag_is_what_its_primary_reports() {
        let m = members(&three());
        assert_eq!(m[0].lag, None);
        assert_eq!(m[1].lag, Some((500, 2)));
        assert_eq!((m[2].info.is_some(), m[2].lag), (false, None));
    }

    /// A collector over fixed samples, to render what a scrape shows.
    #[derive(Debug)]
    struct Fixed(Vec<Latest>, Rounds);

    impl Collector for Fixed {
        fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
            let views = [RedisView {
                namespace: "ns",
                name: "cache",
                members: members(&self.0),
                rounds: &self.1,
            }];
            RedisMetrics::encode_views(&views, Instant::now(), &mut encoder)
        }
    }

    fn render(registry: &Registry) -> String {
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, registry).unwrap();
        text
    }

    #[test]
    fn a_scrape_shows_every_member_by_pod_in_redis_exporters_names() {
        let mut rounds = Rounds::default();
        rounds.seen(seen(true), Instant::now(), SystemTime::now());
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Fixed(three(), rounds)));
        let text = render(&registry);
        for line in [
            r#"redis_up{namespace="ns",redis="cache",pod="a"} 1"#,
            r#"redis_up{namespace="ns",redis="cache",pod="c"} 0"#,
            r#"redis_instance_info{namespace="ns",redis="cache",pod="a",role="master"} 1"#,
            r#"redis_instance_info{namespace="ns",redis="cache",pod="b",role="slave"} 1"#,
            r#"redis_master_link_up{namespace="ns",redis="cache",pod="b"} 1"#,
            r#"redis_master_repl_offset{namespace="ns",redis="cache",pod="a"} 1500"#,
            r#"podkeeper_redis_replica_lag_bytes{namespace="ns",redis="cache",pod="b"} 500"#,
            r#"podkeeper_redis_replica_lag_seconds{namespace="ns",redis="cache",pod="b"} 2"#,
            r#"redis_memory_used_bytes{namespace="ns",redis="cache",pod="a"} 2048"#,
            r#"redis_memory_max_bytes{namespace="ns",redis="cache",pod="b"} 4096"#,
            r#"redis_connected_clients{namespace="ns",redis="cache",pod="a"} 3"#,
            r#"redis_commands_processed_total{namespace="ns",redis="cache",pod="a"} 77"#,
            r#"redis_expired_keys_total{namespace="ns",redis="cache",pod="a"} 5"#,
            r#"redis_db_keys{namespace="ns",redis="cache",pod="a",db="db0"} 1500"#,
            r#"redis_db_keys_expiring{namespace="ns",redis="cache",pod="b",db="db0"} 2"#,
            r#"podkeeper_redis_writable_primary{namespace="ns",redis="cache"} 1"#,
            r#"podkeeper_redis_switchovers_total{namespace="ns",redis="cache"} 0"#,
            r#"podkeeper_redis_failover_duration_seconds_count{namespace="ns",redis="cache"} 0"#,
            "# TYPE redis_commands_processed counter",
        ] {
            assert!(text.contains(line), "{line} not in\n{text}");
        }
        // The silent member reports nothing but redis_up; the primary no lag.
        assert!(!text.contains(r#"pod="c",role"#));
        assert!(!text.contains(r#"replica_lag_bytes{namespace="ns",redis="cache",pod="a"}"#));
        assert!(text.contains("podkeeper_redis_last_round_timestamp_seconds{"));
    }

    #[test]
    fn series_per_member_and_per_redis_are_as_the_operations_guide_says() {
        let mut rounds = Rounds::default();
        let t0 = Instant::now();
        rounds.seen(seen(true), t0, SystemTime::now());
        let mut registry = Registry::default();
        registry.register_collector(Box::new(Fixed(three(), rounds)));
        let text = render(&registry);
        let samples: Vec<&str> = text.lines().filter(|l| !l.starts_with('#')).collect();
        let of = |pod: &str| {
            samples
                .iter()
                .filter(|l| l.contains(&format!("pod=\"{pod}\"")))
                .count()
        };
        // docs/operations.md, "Cardinality": 11 for a primary, 14 for a
        // replica (one database holding keys), 1 for a silent member; 30
        // per Redis before any failover (at most 5 more, one per cause).
        assert_eq!((of("a"), of("b"), of("c")), (11, 14, 1), "{text}");
        assert_eq!(samples.len() - 26, 30, "{text}");
    }

    #[test]
    fn a_redis_s_series_go_with_it() {
        let metrics = Arc::new(RedisMetrics::default());
        let mut registry = Registry::default();
        registry.register_collector(Box::new(metrics.clone()));
        let (a, b) = (Arc::new(Memory::default()), Arc::new(Memory::default()));
        metrics.round("uid-a", "ns", "a", &a, seen(true));
        metrics.round("uid-b", "ns", "b", &b, seen(false));
        let text = render(&registry);
        assert!(text.contains(r#"podkeeper_redis_writable_primary{namespace="ns",redis="a"} 1"#));
        assert!(text.contains(r#"podkeeper_redis_writable_primary{namespace="ns",redis="b"} 0"#));
        // Deleted: its memory dropped, or forgotten by its cleanup.
        drop(a);
        metrics.forget("uid-b");
        let text = render(&registry);
        assert!(!text.contains(r#"redis="a""#), "{text}");
        assert!(!text.contains(r#"redis="b""#), "{text}");
    }
}
