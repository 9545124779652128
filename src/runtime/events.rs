//! Events (events.k8s.io/v1) that say what happened in them.
//!
//! kube-runtime's `Recorder` folds every Event with the same reason into one
//! series and keeps the first note, so after a scale-up, a heal and another
//! scale-up `kubectl describe` showed `Created 3 pods: <the first three>
//! (x3)`. This recorder makes a series only of Events whose note is
//! identical (same object, type, reason, action and note, within
//! [`SERIES_WINDOW`]); any other Event is its own object with its own note.
//!
//! A flood budget per object and reason, like client-go's spam filter:
//! [`BURST`] writes, then one per [`REFILL`]. What is over budget is logged
//! and dropped. Per reason, so that an hour of refused creates
//! (`FailedCreate`) does not silence the `SuccessfulCreate` that follows. The decision is pure ([`EventBook::decide`]); [`EventRecorder`]
//! is the I/O around it.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::{Api, Client};
use rand::RngExt;
use tracing::debug;

/// Writes per object and reason before the budget applies.
pub const BURST: u32 = 25;
/// After the burst, one write per object and reason per this interval.
pub const REFILL: Duration = Duration::from_secs(300);
/// Identical Events this close together form a series.
pub const SERIES_WINDOW: Duration = Duration::from_secs(6 * 60);
/// The Event API refuses notes over 1 kB.
const MAX_NOTE: usize = 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum EventType {
    Normal,
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// One Event as asked for.
#[derive(Clone, Copy, Debug)]
pub struct What<'a> {
    pub type_: EventType,
    pub reason: &'a str,
    pub action: &'a str,
    pub note: &'a str,
}

/// What to do with one Event.
#[derive(Debug, PartialEq)]
pub enum Decision {
    /// A new Event object with this name.
    Create { name: String },
    /// The same note again: count it in the existing Event's series.
    Series { name: String, count: i32 },
    /// Over the object's flood budget.
    Drop,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Key {
    regarding: String,
    type_: EventType,
    reason: String,
    action: String,
    note: String,
}

struct Seen {
    name: String,
    count: i32,
    last: Instant,
}

struct Bucket {
    tokens: f64,
    at: Instant,
}

/// Series and budgets; pure bookkeeping, the clock passed in.
#[derive(Default)]
pub struct EventBook {
    series: HashMap<Key, Seen>,
    budgets: HashMap<String, Bucket>,
}

impl EventBook {
    /// Decides what to write for an Event about `regarding` (an object uid
    /// or other stable key) at `now`; `fresh_name` names a new Event.
    pub fn decide(
        &mut self,
        regarding: &str,
        what: What<'_>,
        now: Instant,
        fresh_name: impl FnOnce() -> String,
    ) -> Decision {
        self.series
            .retain(|_, s| now.saturating_duration_since(s.last) < SERIES_WINDOW);
        if self.budgets.len() > 4096 {
            self.budgets
                .retain(|_, b| refilled(b, now) < f64::from(BURST));
        }
        let budget_key = format!("{regarding}/{}", what.reason);
        let bucket = self.budgets.entry(budget_key).or_insert(Bucket {
            tokens: f64::from(BURST),
            at: now,
        });
        bucket.tokens = refilled(bucket, now);
        bucket.at = now;
        if bucket.tokens < 1.0 {
            return Decision::Drop;
        }
        bucket.tokens -= 1.0;
        let key = Key {
            regarding: regarding.to_string(),
            type_: what.type_,
            reason: what.reason.to_string(),
            action: what.action.to_string(),
            note: what.note.to_string(),
        };
        match self.series.get_mut(&key) {
            Some(seen) => {
                seen.count += 1;
                seen.last = now;
                Decision::Series {
                    name: seen.name.clone(),
                    count: seen.count,
                }
            }
            None => {
                let name = fresh_name();
                self.series.insert(
                    key,
                    Seen {
                        name: name.clone(),
                        count: 1,
                        last: now,
                    },
                );
                Decision::Create { name }
            }
        }
    }
}

fn refilled(b: &Bucket, now: Instant) -> f64 {
    let gained = now.saturating_duration_since(b.at).as_secs_f64() / REFILL.as_secs_f64();
    (b.tokens + gained).min(f64::from(BURST))
}

/// Records Events for podkeeper.
pub struct EventRecorder {
    client: Client,
    controller: String,
    instance: String,
    book: Mutex<EventBook>,
}

impl EventRecorder {
    /// `instance` identifies this process (reportingInstance); the
    /// controller name when none is given.
    pub fn new(client: Client, controller: &str, instance: Option<String>) -> Self {
        EventRecorder {
            client,
            controller: controller.to_string(),
            instance: instance
                .filter(|i| !i.is_empty())
                .unwrap_or_else(|| controller.to_string())
                .chars()
                .take(128)
                .collect(),
            book: Mutex::new(EventBook::default()),
        }
    }

    /// Records one Event about `regarding`; a failure to record is logged,
    /// never returned.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) {
        let note = truncate(note);
        let key = regarding
            .uid
            .clone()
            .or_else(|| regarding.name.clone())
            .unwrap_or_default();
        let decision = self.book.lock().unwrap_or_else(|e| e.into_inner()).decide(
            &key,
            What {
                type_,
                reason,
                action,
                note: &note,
            },
            Instant::now(),
            || event_name(regarding.name.as_deref().unwrap_or("podkeeper")),
        );
        let namespace = regarding.namespace.as_deref().unwrap_or("default");
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let now = MicroTime(Timestamp::now());
        let result = match decision {
            Decision::Drop => {
                debug!(reason, %note, "event dropped: over the flood budget");
                return;
            }
            Decision::Create { name } => {
                let event = Event {
                    metadata: ObjectMeta {
                        name: Some(name),
                        namespace: Some(namespace.to_string()),
                        ..Default::default()
                    },
                    action: Some(action.to_string()),
                    reason: Some(reason.to_string()),
                    note: Some(note),
                    type_: Some(type_.as_str().to_string()),
                    event_time: Some(now),
                    regarding: Some(regarding.clone()),
                    reporting_controller: Some(self.controller.clone()),
                    reporting_instance: Some(self.instance.clone()),
                    ..Default::default()
                };
                api.create(&PostParams::default(), &event).await.map(|_| ())
            }
            Decision::Series { name, count } => {
                let patch = serde_json::json!({
                    "series": EventSeries { count, last_observed_time: now }
                });
                api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await
                    .map(|_| ())
            }
        };
        if let Err(e) = result {
            debug!(error = %e, reason, "could not record event");
        }
    }
}

/// `<object>.<16 hex digits>`, as kubectl and client-go name Events.
fn event_name(object: &str) -> String {
    let suffix: u64 = rand::rng().random();
    let object: String = object.chars().take(200).collect();
    format!("{object}.{suffix:016x}")
}

fn truncate(mut note: String) -> String {
    if note.len() > MAX_NOTE {
        let mut end = MAX_NOTE - 3;
        while !note.is_char_boundary(end) {
            end -= 1;
        }
        note.truncate(end);
        note.push_str("...");
    }
    note
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decide(book: &mut EventBook, note: &str, now: Instant, n: &mut u32) -> Decision {
        book.decide(
            "uid-1",
            What {
                type_: EventType::Normal,
                reason: "SuccessfulCreate",
                action: "Create",
                note,
            },
            now,
            || {
                *n += 1;
                format!("ev{n}")
            },
        )
    }

    #[test]
    fn only_identical_notes_form_a_series() {
        let mut book = EventBook::default();
        let t = Instant::now();
        let mut n = 0;
        assert_eq!(
            decide(&mut book, "Created pod: a", t, &mut n),
            Decision::Create { name: "ev1".into() }
        );
        assert_eq!(
            decide(&mut book, "Created pod: b", t, &mut n),
            Decision::Create { name: "ev2".into() }
        );
        assert_eq!(
            decide(&mut book, "Created pod: a", t, &mut n),
            Decision::Series {
                name: "ev1".into(),
                count: 2
            }
        );
        // Long after, the same note is a new Event.
        let later = t + SERIES_WINDOW + Duration::from_secs(1);
        assert_eq!(
            decide(&mut book, "Created pod: a", later, &mut n),
            Decision::Create { name: "ev3".into() }
        );
    }

    #[test]
    fn a_flood_is_cut_to_the_budget_per_object() {
        let mut book = EventBook::default();
        let t = Instant::now();
        let mut n = 0;
        let written = (0..100)
            .filter(|i| decide(&mut book, &format!("note {i}"), t, &mut n) != Decision::Drop)
            .count();
        assert_eq!(written, BURST as usize);
        // Another object has its own budget.
        let other = book.decide(
            "uid-2",
            What {
                type_: EventType::Normal,
                reason: "SuccessfulCreate",
                action: "Create",
                note: "x",
            },
            t,
            || "other".into(),
        );
        assert_eq!(
            other,
            Decision::Create {
                name: "other".into()
            }
        );
        // Another reason for the same object has its own budget too.
        let failed = book.decide(
            "uid-1",
            What {
                type_: EventType::Warning,
                reason: "FailedCreate",
                action: "Create",
                note: "x",
            },
            t,
            || "failed".into(),
        );
        assert_eq!(
            failed,
            Decision::Create {
                name: "failed".into()
            }
        );
        // One more after the refill interval.
        assert_eq!(
            decide(&mut book, "late", t + REFILL / 2, &mut n),
            Decision::Drop
        );
        assert!(matches!(
            decide(&mut book, "late", t + REFILL, &mut n),
            Decision::Create { .. }
        ));
    }

    #[test]
    fn long_notes_are_cut_to_the_api_limit() {
        let note = truncate("é".repeat(1000));
        assert!(note.len() <= MAX_NOTE && note.ends_with("..."));
    }
}
