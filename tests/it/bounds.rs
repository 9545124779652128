//! The rollout bounds, checked at every Pod event of every owner.
//!
//! A [`Recorder`] follows every Pod, Redis and Application event of a
//! namespace from the moment it starts; [`Recorder::check`] replays them in
//! resourceVersion order and checks, at each Pod event, what a Deployment
//! promises:
//!
//! - **surge**: a Pod that appears never makes its owner's live Pods (not
//!   terminating, not finished) more than `replicas + maxSurge`;
//! - **availability**: the operator never takes a Ready Pod away (deleting
//!   it) when that leaves fewer than `replicas - maxUnavailable` Ready live
//!   Pods, unless the owner is being deleted or uses Recreate;
//! - **Recreate**: a Pod appears only when no Pod of another template is left,
//!   terminating ones included;
//! - **in place**: the operator never changes a Ready Pod's container images
//!   or resources (an in-place update, which makes it unavailable until it
//!   settles on the new spec) when that leaves fewer than `replicas -
//!   max(maxUnavailable, the kind's in-place unavailability)` Ready live
//!   Pods. A Pod updated in place counts as Ready only once its containers
//!   report the new image and are ready (podkeeper's own
//!   `engine::inplace::settled`).
//!
//! Live Pods can only rise through a Pod appearing, and Ready ones can only
//! fall through a Pod going (kwok never turns a Ready Pod unready), so these
//! checks see every moment a bound could be broken. The Pods the test itself
//! deletes ([`Recorder::deleted_by_test`]) lower availability legitimately
//! and are not held against the operator; the operator must still not take a
//! second one away while availability is short, once it can have seen the
//! first go ([`VIEW_LAG`]): a deletion planned on a view that still showed
//! the Pod races the test, as it would with a Deployment.
//!
//! The operator acts on its cache of the owner, which may lag a spec change
//! by a moment: a Pod event is held to the loosest bound among the owner's
//! spec versions current within [`SPEC_LAG`] before it (by resourceVersion
//! and by the time the recorder saw each version end). Lowering replicas
//! thus leaves the live count above the new bound until the operator's
//! deletions come; that is a scale-down, not a broken promise.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use futures::TryStreamExt;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::api::{ListParams, WatchEvent, WatchParams};
use kube::{Api, ResourceExt};
use podkeeper::api::{Application, Redis};
use podkeeper::podset::inplace;
use serde::de::DeserializeOwned;

use crate::harness::{TestEnv, is_ready};

/// How long the operator may act on a spec version after it was replaced.
pub const SPEC_LAG: Duration = Duration::from_secs(5);

/// How far the operator's view of Pods may lag when it acts: a Ready Pod
/// the test deleted this recently may still count as Ready in the view an
/// operator deletion was planned on.
pub const VIEW_LAG: Duration = Duration::from_secs(1);

const TEMPLATE_HASH: &str = "podkeeper.dev/template-hash";

/// What one version of an owner's spec allows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    pub replicas: i32,
    pub max_surge: i32,
    pub max_unavailable: i32,
    pub recreate: bool,
    /// Pods an in-place update may take down at once.
    pub in_place_unavailable: i32,
}

impl Limits {
    /// A Redis rolls one Pod at a time: maxSurge 1, maxUnavailable 0; with
    /// 2 or more replicas it updates one Pod at a time in place.
    pub fn of_redis(r: &Redis) -> Self {
        Limits {
            replicas: r.spec.replicas,
            max_surge: 1,
            max_unavailable: 0,
            recreate: false,
            in_place_unavailable: i32::from(r.spec.replicas >= 2),
        }
    }

    /// Deployment's arithmetic: percentages of replicas, surge rounded up
    /// and unavailability down; both 0 means unavailability 1; Recreate
    /// surges nothing and may take every Pod down.
    pub fn of_application(a: &Application) -> Self {
        let d = &a.spec.deployment;
        let replicas = d.replicas.unwrap_or(1);
        let strategy = d.strategy.as_ref();
        if strategy.and_then(|s| s.type_.as_deref()) == Some("Recreate") {
            return Limits {
                replicas,
                max_surge: 0,
                max_unavailable: replicas,
                recreate: true,
                in_place_unavailable: 0,
            };
        }
        let rolling = strategy.and_then(|s| s.rolling_update.as_ref());
        let resolve = |v: Option<&IntOrString>, round_up: bool| match v {
            None => scaled(25, replicas, round_up),
            Some(IntOrString::Int(n)) => *n,
            Some(IntOrString::String(s)) => {
                let pct: i32 = s.trim_end_matches('%').parse().expect("a percentage");
                scaled(pct, replicas, round_up)
            }
        };
        let max_surge = resolve(rolling.and_then(|r| r.max_surge.as_ref()), true);
        let mut max_unavailable = resolve(rolling.and_then(|r| r.max_unavailable.as_ref()), false);
        if max_surge == 0 && max_unavailable == 0 {
            max_unavailable = 1;
        }
        Limits {
            replicas,
            max_surge,
            max_unavailable,
            recreate: false,
            in_place_unavailable: 0,
        }
    }

    fn most_live(&self) -> i32 {
        self.replicas + self.max_surge
    }

    fn fewest_ready(&self) -> i32 {
        self.replicas - self.max_unavailable
    }

    fn fewest_ready_in_place(&self) -> i32 {
        self.replicas - self.max_unavailable.max(self.in_place_unavailable)
    }
}

fn scaled(pct: i32, replicas: i32, round_up: bool) -> i32 {
    let n = pct * replicas;
    if round_up { (n + 99) / 100 } else { n / 100 }
}

/// What the checks need of a Pod.
#[derive(Clone, Debug)]
struct PodFacts {
    name: String,
    owner: Option<String>,
    hash: Option<String>,
    ready: bool,
    terminating: bool,
    finished: bool,
    /// The containers' images and resources in the spec.
    spec: String,
}

impl PodFacts {
    fn of(p: &Pod) -> Self {
        let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
        PodFacts {
            name: p.name_any(),
            owner: p
                .owner_references()
                .iter()
                .find(|r| r.controller == Some(true))
                .map(|r| r.uid.clone()),
            hash: p.labels().get(TEMPLATE_HASH).cloned(),
            ready: is_ready(p)
                && (inplace::updated_in_place(p).is_none()
                    || inplace::updated_in_place(p)
                        != p.labels().get(TEMPLATE_HASH).map(String::as_str)
                    || inplace::settled(p)),
            terminating: p.metadata.deletion_timestamp.is_some(),
            finished: matches!(phase, Some("Succeeded" | "Failed")),
            spec: p
                .spec
                .iter()
                .flat_map(|s| &s.containers)
                .map(|c| format!("{:?} {:?}", c.image, c.resources))
                .collect::<Vec<_>>()
                .join("; "),
        }
    }

    fn live(&self) -> bool {
        !self.terminating && !self.finished
    }

    fn describe(&self) -> String {
        let state = if self.finished {
            "finished"
        } else if self.terminating {
            "terminating"
        } else if self.ready {
            "ready"
        } else {
            "not ready"
        };
        format!(
            "{} [{}] {state}",
            self.name,
            self.hash.as_deref().unwrap_or("-")
        )
    }
}

#[derive(Clone, Debug)]
enum What {
    /// A Pod as it is now; `gone` for a DELETED event.
    Pod { facts: PodFacts, gone: bool },
    /// An owner's spec as it is now; `None` once it is being deleted.
    Owner {
        uid: String,
        name: String,
        limits: Option<Limits>,
    },
}

#[derive(Clone, Debug)]
struct Record {
    /// 0 for what the initial lists showed.
    rv: u64,
    seen: Instant,
    what: What,
}

#[derive(Default)]
struct Shared {
    records: Vec<Record>,
    deleted_by_test: BTreeSet<String>,
    errors: Vec<String>,
}

/// Follows a namespace's Pods and owners; see the module documentation.
pub struct Recorder {
    shared: Arc<Mutex<Shared>>,
    started: Instant,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Recorder {
    /// Lists the namespace's Pods, Redis and Applications and follows every
    /// change after those lists.
    pub async fn start(env: &TestEnv) -> Self {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let started = Instant::now();
        let pods = follow(env.api::<Pod>(), shared.clone(), |p: &Pod, gone| {
            Some(What::Pod {
                facts: PodFacts::of(p),
                gone,
            })
        })
        .await;
        let redis = follow(env.api::<Redis>(), shared.clone(), |r: &Redis, gone| {
            owner(r, gone, Limits::of_redis)
        })
        .await;
        let apps = follow(
            env.api::<Application>(),
            shared.clone(),
            |a: &Application, gone| owner(a, gone, Limits::of_application),
        )
        .await;
        Recorder {
            shared,
            started,
            tasks: vec![pods, redis, apps],
        }
    }

    /// The test deleted this Pod itself.
    pub fn deleted_by_test(&self, pod: &str) {
        let mut shared = self.shared.lock().unwrap();
        shared.deleted_by_test.insert(pod.to_string());
    }

    /// Replays everything seen so far and checks the bounds at each Pod
    /// event.
    pub fn check(&self) -> Report {
        let shared = self.shared.lock().unwrap();
        let mut records = shared.records.clone();
        // Watches of different kinds arrive interleaved as they will; the
        // resourceVersions (etcd revisions here) give the order things
        // happened in.
        records.sort_by_key(|r| r.rv);
        let mut report = replay(&records, &shared.deleted_by_test, self.started);
        report.violations.extend(shared.errors.iter().cloned());
        report
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn owner<K: ResourceExt>(obj: &K, gone: bool, limits: impl Fn(&K) -> Limits) -> Option<What> {
    let terminating = gone || obj.meta().deletion_timestamp.is_some();
    Some(What::Owner {
        uid: obj.uid()?,
        name: format!(
            "{} {}",
            std::any::type_name::<K>().rsplit("::").next()?,
            obj.name_any()
        ),
        limits: (!terminating).then(|| limits(obj)),
    })
}

/// Lists, records the list at rv 0, then watches from the list's
/// resourceVersion in a task, resuming where it left off when a watch ends.
async fn follow<K>(
    api: Api<K>,
    shared: Arc<Mutex<Shared>>,
    to_record: impl Fn(&K, bool) -> Option<What> + Send + 'static,
) -> tokio::task::JoinHandle<()>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    let list = api.list(&ListParams::default()).await.expect("list");
    let mut rv = list.metadata.resource_version.clone().expect("list rv");
    {
        let now = Instant::now();
        let mut s = shared.lock().unwrap();
        for obj in &list.items {
            if let Some(what) = to_record(obj, false) {
                s.records.push(Record {
                    rv: 0,
                    seen: now,
                    what,
                });
            }
        }
    }
    tokio::spawn(async move {
        let params = WatchParams::default();
        loop {
            let mut stream = match api.watch(&params, &rv).await {
                Ok(s) => Box::pin(s),
                Err(e) => {
                    shared
                        .lock()
                        .unwrap()
                        .errors
                        .push(format!("the recorder's watch failed: {e}"));
                    return;
                }
            };
            loop {
                let ev = match stream.try_next().await {
                    Ok(Some(ev)) => ev,
                    // The server ended the watch: resume from the last rv.
                    Ok(None) => break,
                    Err(e) => {
                        eprintln!("the recorder's watch broke ({e}); resuming");
                        break;
                    }
                };
                let (obj, gone) = match ev {
                    WatchEvent::Added(o) | WatchEvent::Modified(o) => (o, false),
                    WatchEvent::Deleted(o) => (o, true),
                    WatchEvent::Bookmark(b) => {
                        rv = b.metadata.resource_version;
                        continue;
                    }
                    WatchEvent::Error(e) => {
                        // 410 Gone: events were lost; the record would lie.
                        shared
                            .lock()
                            .unwrap()
                            .errors
                            .push(format!("the recorder lost events: {e:?}"));
                        return;
                    }
                };
                let Some(obj_rv) = obj.meta().resource_version.clone() else {
                    continue;
                };
                let seen = Instant::now();
                if let Some(what) = to_record(&obj, gone) {
                    shared.lock().unwrap().records.push(Record {
                        rv: obj_rv.parse().expect("a numeric resourceVersion"),
                        seen,
                        what,
                    });
                }
                rv = obj_rv;
            }
        }
    })
}

/// What a replay found.
#[derive(Debug, Default)]
pub struct Report {
    /// Pod events replayed.
    pub pod_events: usize,
    /// Per owner name (a name reused by a new object shares the entry).
    pub owners: BTreeMap<String, OwnerStats>,
    pub violations: Vec<String>,
}

/// What one owner went through, to show a test exercised what it meant to.
#[derive(Debug, Default, Clone)]
pub struct OwnerStats {
    pub pod_events: usize,
    /// The most live Pods at once.
    pub most_live: usize,
    /// The fewest Ready live Pods after its first Pod event.
    pub fewest_ready: usize,
    /// The most live Pods not (yet) Ready at once.
    pub most_unready: usize,
    /// The most terminating Pods at once.
    pub most_terminating: usize,
    /// Changes of a Pod's container images or resources (in place).
    pub in_place_updates: usize,
}

impl Report {
    /// Panics, naming every broken bound and what led to it.
    pub fn assert_held(&self, context: &str) {
        assert!(
            self.violations.is_empty(),
            "{context}: {} violation(s) of the rollout bounds over {} Pod events:\n\n{}",
            self.violations.len(),
            self.pod_events,
            self.violations.join("\n\n")
        );
    }

    /// The stats of the one owner whose name ends with `name`.
    pub fn owner(&self, name: &str) -> OwnerStats {
        self.owners
            .iter()
            .find(|(k, _)| k.ends_with(&format!(" {name}")))
            .map(|(_, v)| v.clone())
            .unwrap_or_default()
    }
}

/// One owner's spec versions: (from rv, seen, limits).
type Versions = Vec<(u64, Instant, Option<Limits>)>;

/// The versions a Pod event at (`rv`, `seen`) may have been acted on with:
/// the one current at `rv`, and any earlier one replaced less than
/// [`SPEC_LAG`] before `seen`.
fn versions_at(versions: &Versions, rv: u64, seen: Instant) -> Vec<Option<Limits>> {
    let upto: Vec<_> = versions.iter().filter(|(from, _, _)| *from <= rv).collect();
    let mut out = Vec::new();
    for (i, (_, _, limits)) in upto.iter().enumerate() {
        let replaced = upto.get(i + 1).map(|(_, at, _)| *at);
        match replaced {
            None => out.push(*limits),
            Some(at) if at + SPEC_LAG >= seen => out.push(*limits),
            Some(_) => {}
        }
    }
    out
}

fn replay(records: &[Record], deleted_by_test: &BTreeSet<String>, started: Instant) -> Report {
    let mut versions: BTreeMap<String, Versions> = BTreeMap::new();
    let mut names: BTreeMap<String, String> = BTreeMap::new();
    for r in records {
        if let What::Owner { uid, name, limits } = &r.what {
            names.insert(uid.clone(), name.clone());
            let v = versions.entry(uid.clone()).or_default();
            if v.last().map(|(_, _, l)| l) != Some(limits) {
                v.push((r.rv, r.seen, *limits));
            }
        }
    }
    let mut report = Report::default();
    let mut pods: BTreeMap<String, BTreeMap<String, PodFacts>> = BTreeMap::new();
    // When the test took a Ready live Pod away, per owner.
    let mut taken_by_test: BTreeMap<String, Vec<Instant>> = BTreeMap::new();
    let mut history: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for r in records {
        let What::Pod { facts, gone } = &r.what else {
            continue;
        };
        let Some(uid) = facts.owner.clone() else {
            continue;
        };
        let listed = r.rv == 0;
        if !listed {
            report.pod_events += 1;
        }
        let owned = pods.entry(uid.clone()).or_default();
        let before = owned.get(&facts.name).cloned();
        if *gone {
            owned.remove(&facts.name);
        } else {
            owned.insert(facts.name.clone(), facts.clone());
        }
        let took_ready =
            before.as_ref().is_some_and(|b| b.live() && b.ready) && (*gone || !facts.live());
        let changed_in_place = !*gone
            && facts.live()
            && before
                .as_ref()
                .is_some_and(|b| b.live() && b.spec != facts.spec);
        let took_ready_in_place = changed_in_place && before.as_ref().is_some_and(|b| b.ready);
        let by_test = deleted_by_test.contains(&facts.name);
        if took_ready && by_test {
            taken_by_test.entry(uid.clone()).or_default().push(r.seen);
        }
        let live = owned.values().filter(|p| p.live()).count();
        let ready = owned.values().filter(|p| p.live() && p.ready).count();
        let owner_name = names
            .get(&uid)
            .cloned()
            .unwrap_or_else(|| format!("owner {uid}"));
        let stats = report.owners.entry(owner_name.clone()).or_default();
        if !listed {
            stats.pod_events += 1;
        }
        if changed_in_place {
            stats.in_place_updates += 1;
        }
        stats.most_live = stats.most_live.max(live);
        stats.most_unready = stats.most_unready.max(live - ready);
        let terminating = owned.values().filter(|p| p.terminating).count();
        stats.most_terminating = stats.most_terminating.max(terminating);
        stats.fewest_ready = if stats.pod_events <= 1 {
            ready
        } else {
            stats.fewest_ready.min(ready)
        };
        let what = if *gone {
            "gone".to_string()
        } else {
            facts.describe()
        };
        let lines = history.entry(uid.clone()).or_default();
        let external = if deleted_by_test.contains(&facts.name) {
            " (deleted by the test)"
        } else {
            ""
        };
        lines.push(format!(
            "  rv {:>7} +{:>7.3}s {:<40} -> live {live}, ready {ready}{external}",
            r.rv,
            r.seen.saturating_duration_since(started).as_secs_f64(),
            if *gone {
                format!("{} {what}", facts.name)
            } else {
                what
            },
        ));

        // What the initial list showed is added one Pod at a time: no
        // moment of its own.
        let Some(owner_versions) = versions.get(&uid).filter(|_| !listed) else {
            continue;
        };
        let current = versions_at(owner_versions, r.rv, r.seen);
        // Being deleted (now or within the lag): cleanup takes everything.
        if current.iter().any(Option::is_none) || current.is_empty() {
            continue;
        }
        let current: Vec<Limits> = current.into_iter().flatten().collect();
        let mut broken = Vec::new();
        let appeared = !*gone && facts.live() && before.is_none();
        if appeared {
            let most = current.iter().map(Limits::most_live).max().unwrap();
            if live as i32 > most {
                broken.push(format!(
                    "{} appeared with {live} live Pods; replicas + maxSurge allows {most}",
                    facts.name
                ));
            }
            if current.iter().all(|l| l.recreate) {
                let blocking: Vec<String> = owned
                    .values()
                    .filter(|p| !p.finished && p.hash != facts.hash)
                    .map(PodFacts::describe)
                    .collect();
                if !blocking.is_empty() {
                    broken.push(format!(
                        "Recreate: {} appeared while Pods of another template remain: {}",
                        facts.name,
                        blocking.join(", ")
                    ));
                }
            }
        }
        if took_ready && !by_test && !current.iter().any(|l| l.recreate) {
            let fewest = current.iter().map(Limits::fewest_ready).min().unwrap();
            // Ready Pods the test took away a moment ago may still be in
            // the view the operator decided on.
            let unseen = taken_by_test.get(&uid).map_or(0, |at| {
                at.iter().filter(|t| **t + VIEW_LAG >= r.seen).count()
            });
            if ((ready + unseen) as i32) < fewest {
                broken.push(format!(
                    "the operator took Ready {} away, leaving {ready} Ready ({unseen} more taken by the test within {VIEW_LAG:?}); \
                     replicas - maxUnavailable requires {fewest}",
                    facts.name
                ));
            }
        }
        if took_ready_in_place {
            let fewest = current
                .iter()
                .map(Limits::fewest_ready_in_place)
                .min()
                .unwrap();
            // As for deletions: Ready Pods the test took away a moment ago
            // may still be in the view the operator decided on.
            let unseen = taken_by_test.get(&uid).map_or(0, |at| {
                at.iter().filter(|t| **t + VIEW_LAG >= r.seen).count()
            });
            if ((ready + unseen) as i32) < fewest {
                broken.push(format!(
                    "the operator updated Ready {} in place, leaving {ready} Ready ({unseen} more taken by the test within {VIEW_LAG:?}); \
                     replicas - max(maxUnavailable, in-place unavailability) requires {fewest}",
                    facts.name
                ));
            }
        }
        for b in broken {
            let mut text = format!(
                "{owner_name} at rv {}: {b}\n  spec versions then: {:?}\n  its last Pod events:\n",
                r.rv, current
            );
            let tail = &lines[lines.len().saturating_sub(25)..];
            for l in tail {
                let _ = writeln!(text, "{l}");
            }
            report.violations.push(text);
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod(name: &str, hash: &str, ready: bool, terminating: bool) -> What {
        What::Pod {
            facts: PodFacts {
                name: name.into(),
                owner: Some("u".into()),
                hash: Some(hash.into()),
                ready,
                terminating,
                finished: false,
                spec: "image-a".into(),
            },
            gone: false,
        }
    }

    fn run(whats: Vec<What>, limits: Limits, external: &[&str]) -> Report {
        run_at(
            whats.into_iter().map(|w| (w, 0)).collect(),
            limits,
            external,
        )
    }

    /// Each event `ms` after the start.
    fn run_at(whats: Vec<(What, u64)>, limits: Limits, external: &[&str]) -> Report {
        let t = Instant::now();
        let mut records = vec![Record {
            rv: 1,
            seen: t,
            what: What::Owner {
                uid: "u".into(),
                name: "Redis r".into(),
                limits: Some(limits),
            },
        }];
        for (i, (what, ms)) in whats.into_iter().enumerate() {
            records.push(Record {
                rv: 10 + i as u64,
                seen: t + Duration::from_millis(ms),
                what,
            });
        }
        let external = external.iter().map(|s| s.to_string()).collect();
        replay(&records, &external, t)
    }

    const ROLLING: Limits = Limits {
        replicas: 2,
        max_surge: 1,
        max_unavailable: 0,
        recreate: false,
        in_place_unavailable: 1,
    };

    #[test]
    fn a_surge_past_the_bound_is_caught() {
        let r = run(
            vec![
                pod("a", "old", true, false),
                pod("b", "old", true, false),
                pod("c", "new", false, false),
                pod("d", "new", false, false),
            ],
            ROLLING,
            &[],
        );
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert!(r.violations[0].contains("d appeared with 4 live Pods"));
    }

    #[test]
    fn taking_a_ready_pod_below_the_floor_is_caught_unless_the_test_did() {
        let whats = vec![
            pod("a", "old", true, false),
            pod("b", "old", true, false),
            pod("c", "new", false, false),
            pod("a", "old", true, true),
        ];
        let r = run(whats.clone(), ROLLING, &[]);
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert!(r.violations[0].contains("took Ready a away, leaving 1 Ready"));
        assert!(run(whats, ROLLING, &["a"]).violations.is_empty());
    }

    #[test]
    fn a_deletion_racing_the_tests_own_is_not_held_against_the_operator() {
        // 2 Ready of 2 and a surge Pod Ready too; the test takes a away, and
        // the operator, on a view that still had a, takes b.
        let at = |b_ms| {
            vec![
                (pod("a", "old", true, false), 0),
                (pod("b", "old", true, false), 0),
                (pod("c", "new", true, false), 0),
                (pod("a", "old", true, true), 100),
                (pod("b", "old", true, true), b_ms),
            ]
        };
        assert!(run_at(at(150), ROLLING, &["a"]).violations.is_empty());
        // Long after a went, it had seen it.
        let late = run_at(at(100 + 2 * VIEW_LAG.as_millis() as u64), ROLLING, &["a"]);
        assert_eq!(late.violations.len(), 1, "{:?}", late.violations);
    }

    #[test]
    fn recreate_waits_for_terminating_pods_of_the_old_template() {
        let recreate = Limits {
            replicas: 1,
            max_surge: 0,
            max_unavailable: 1,
            recreate: true,
            in_place_unavailable: 0,
        };
        let r = run(
            vec![
                pod("a", "old", true, false),
                pod("a", "old", true, true),
                pod("b", "new", false, false),
            ],
            recreate,
            &[],
        );
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert!(r.violations[0].contains("a [old] terminating"));
    }

    #[test]
    fn deployment_arithmetic() {
        let app = |strategy: serde_json::Value, replicas: i32| -> Application {
            serde_json::from_value(serde_json::json!({
                "apiVersion": "podkeeper.dev/v1", "kind": "Application",
                "metadata": {"name": "a"},
                "spec": {"deployment": {"replicas": replicas, "strategy": strategy,
                  "selector": {"matchLabels": {"app": "a"}},
                  "template": {"spec": {"containers": [{"name": "c", "image": "i"}]}}}}
            }))
            .unwrap()
        };
        let l = Limits::of_application(&app(serde_json::json!({}), 6));
        assert_eq!((l.max_surge, l.max_unavailable), (2, 1));
        let l = Limits::of_application(&app(
            serde_json::json!({"rollingUpdate": {"maxSurge": "25%", "maxUnavailable": 1}}),
            6,
        ));
        assert_eq!((l.max_surge, l.max_unavailable), (2, 1));
        let l = Limits::of_application(&app(
            serde_json::json!({"rollingUpdate": {"maxSurge": 0, "maxUnavailable": "10%"}}),
            3,
        ));
        assert_eq!((l.max_surge, l.max_unavailable), (0, 1));
        assert!(Limits::of_application(&app(serde_json::json!({"type": "Recreate"}), 3)).recreate);
    }

    fn updated(name: &str, ready: bool) -> What {
        let What::Pod { mut facts, gone } = pod(name, "h2", ready, false) else {
            unreachable!()
        };
        facts.spec = "image-b".into();
        What::Pod { facts, gone }
    }

    #[test]
    fn in_place_updates_are_held_to_their_own_bound() {
        let three = Limits {
            replicas: 3,
            ..ROLLING
        };
        let start = || {
            vec![
                pod("a", "h1", true, false),
                pod("b", "h1", true, false),
                pod("c", "h1", true, false),
            ]
        };
        // One at a time: fine.
        let mut one = start();
        one.extend([
            updated("a", false),
            updated("a", true),
            updated("b", false),
            updated("b", true),
        ]);
        let r = run(one, three, &[]);
        assert!(r.violations.is_empty(), "{:?}", r.violations);
        assert_eq!(r.owner("r").in_place_updates, 2);
        // Two at once: caught.
        let mut two = start();
        two.extend([updated("a", false), updated("b", false)]);
        let r = run(two, three, &[]);
        assert_eq!(r.violations.len(), 1, "{:?}", r.violations);
        assert!(r.violations[0].contains("in place"), "{}", r.violations[0]);
    }
}
