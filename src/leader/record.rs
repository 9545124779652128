//! The pure part of leader election: what to write to the Lease, decided
//! from the record last read, this candidate's identity and its own clock.
//!
//! As in client-go's leaderelection, a candidate never compares another
//! holder's `renewTime` with its own wall clock (clocks differ between
//! nodes): it notes, by its own monotonic clock, when it last saw the record
//! change, and counts the other holder's lease from there.

use std::time::{Duration, Instant};

use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;

/// The three durations of leader election, as in client-go and
/// controller-runtime (15 s, 10 s and 2 s by default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Timing {
    /// How long a Lease stays valid for the others after its last renewal.
    pub lease_duration: Duration,
    /// How long a leader keeps acting without a successful renewal.
    pub renew_deadline: Duration,
    /// How often a leader renews and a standby looks at the Lease.
    pub retry_period: Duration,
}

/// A standby waits up to this factor of the retry period between looks
/// (jitter, so that standbys do not look in step).
pub const JITTER: f64 = 1.2;

impl Timing {
    /// Checks that a leader stops acting before its Lease can expire for the
    /// others, and that it gets more than one try at renewing in time.
    pub fn validate(&self) -> Result<(), String> {
        if self.retry_period.is_zero() {
            return Err("the leader-election retry period must be positive".into());
        }
        if self.lease_duration <= self.renew_deadline {
            return Err(format!(
                "the leader-election lease duration ({:?}) must be longer than the renew deadline ({:?})",
                self.lease_duration, self.renew_deadline
            ));
        }
        if self.renew_deadline.as_secs_f64() <= JITTER * self.retry_period.as_secs_f64() {
            return Err(format!(
                "the leader-election renew deadline ({:?}) must be longer than {JITTER} times the retry period ({:?})",
                self.renew_deadline, self.retry_period
            ));
        }
        Ok(())
    }

    /// `leaseDurationSeconds` as written to the Lease (rounded up).
    pub fn lease_seconds(&self) -> i32 {
        let millis = self.lease_duration.as_millis();
        i32::try_from(millis.div_ceil(1000)).unwrap_or(i32::MAX)
    }
}

/// The part of a Lease record whose change shows that its holder is alive.
#[derive(Clone, Debug, PartialEq)]
struct Fingerprint {
    holder: Option<String>,
    renew_time: Option<MicroTime>,
    transitions: Option<i32>,
}

impl Fingerprint {
    fn of(spec: &LeaseSpec) -> Self {
        Fingerprint {
            holder: holder(spec).map(str::to_string),
            renew_time: spec.renew_time.clone(),
            transitions: spec.lease_transitions,
        }
    }
}

/// The record a candidate last read, and when (by its own clock) it last
/// saw it change.
#[derive(Clone, Debug)]
pub struct Observation {
    fingerprint: Fingerprint,
    changed_at: Instant,
}

impl Observation {
    /// Notes `spec`, read at `now`; keeps the earlier time if the record has
    /// not changed since `previous`.
    pub fn note(previous: Option<Observation>, spec: &LeaseSpec, now: Instant) -> Observation {
        let fingerprint = Fingerprint::of(spec);
        match previous {
            Some(p) if p.fingerprint == fingerprint => p,
            _ => Observation {
                fingerprint,
                changed_at: now,
            },
        }
    }
}

/// The holder, if the Lease has one (an empty identity is none).
pub fn holder(spec: &LeaseSpec) -> Option<&str> {
    spec.holder_identity.as_deref().filter(|h| !h.is_empty())
}

/// What a candidate does with the Lease it has read.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Write this record: a renewal of this candidate's own Lease, or the
    /// acquisition of a free or expired one.
    Write(LeaseSpec),
    /// Another candidate holds a valid Lease.
    HeldBy(String),
}

/// The record a new Lease is created with.
pub fn fresh(identity: &str, timing: &Timing, wall: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: Some(identity.to_string()),
        lease_duration_seconds: Some(timing.lease_seconds()),
        acquire_time: Some(MicroTime(wall)),
        renew_time: Some(MicroTime(wall)),
        lease_transitions: Some(0),
        ..Default::default()
    }
}

/// Decides, from `spec` as last read (and `observed` of it), what
/// `identity` writes at `now` (monotonic) and `wall` (its clock, written
/// into the record for humans and other tools).
pub fn decide(
    spec: &LeaseSpec,
    observed: &Observation,
    identity: &str,
    timing: &Timing,
    now: Instant,
    wall: Timestamp,
) -> Decision {
    let mine = holder(spec) == Some(identity);
    if !mine && let Some(other) = holder(spec) {
        let seconds = spec
            .lease_duration_seconds
            .and_then(|s| u64::try_from(s).ok())
            .unwrap_or(timing.lease_duration.as_secs());
        let valid_until = observed.changed_at + Duration::from_secs(seconds);
        if now < valid_until {
            return Decision::HeldBy(other.to_string());
        }
    }
    let mut next = spec.clone();
    next.holder_identity = Some(identity.to_string());
    next.lease_duration_seconds = Some(timing.lease_seconds());
    next.renew_time = Some(MicroTime(wall));
    if !mine {
        next.acquire_time = Some(MicroTime(wall));
        next.lease_transitions = Some(spec.lease_transitions.unwrap_or(0) + 1);
    }
    Decision::Write(next)
}

/// The record a stopping leader leaves: no holder, so that a standby
/// acquires it at its next look, and a one-second duration for tools that
/// only look at the times.
pub fn released(spec: &LeaseSpec, wall: Timestamp) -> LeaseSpec {
    LeaseSpec {
        holder_identity: None,
        lease_duration_seconds: Some(1),
        acquire_time: Some(MicroTime(wall)),
        renew_time: Some(MicroTime(wall)),
        lease_transitions: spec.lease_transitions,
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn timing() -> Timing {
        Timing {
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    fn wall(s: i64) -> Timestamp {
        Timestamp::from_second(1_800_000_000 + s).unwrap()
    }

    fn held_by(who: &str, renewed: i64, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(who.into()),
            lease_duration_seconds: Some(15),
            acquire_time: Some(MicroTime(wall(0))),
            renew_time: Some(MicroTime(wall(renewed))),
            lease_transitions: Some(transitions),
            ..Default::default()
        }
    }

    #[test]
    fn the_defaults_are_valid_and_bad_combinations_are_refused() {
        assert_eq!(timing().validate(), Ok(()));
        let mut t = timing();
        t.renew_deadline = t.lease_duration;
        assert!(t.validate().unwrap_err().contains("renew deadline"));
        let mut t = timing();
        t.retry_period = Duration::from_millis(8400);
        assert!(t.validate().unwrap_err().contains("retry period"));
        let mut t = timing();
        t.retry_period = Duration::ZERO;
        assert!(t.validate().is_err());
    }

    #[test]
    fn lease_seconds_round_up() {
        let mut t = timing();
        t.lease_duration = Duration::from_millis(4500);
        assert_eq!(t.lease_seconds(), 5);
    }

    #[test]
    fn a_valid_lease_of_another_is_left_alone_until_it_expires_by_our_clock() {
        let t0 = Instant::now();
        let spec = held_by("a", 100, 3);
        let seen = Observation::note(None, &spec, t0);
        // The renewTime is far in the past by our wall clock: irrelevant.
        let at = |secs| t0 + Duration::from_secs(secs);
        assert_eq!(
            decide(&spec, &seen, "b", &timing(), at(14), wall(10_000)),
            Decision::HeldBy("a".into())
        );
        let Decision::Write(next) = decide(&spec, &seen, "b", &timing(), at(15), wall(10_000))
        else {
            panic!("an expired Lease is taken");
        };
        assert_eq!(next.holder_identity.as_deref(), Some("b"));
        assert_eq!(next.lease_transitions, Some(4));
        assert_eq!(next.acquire_time, Some(MicroTime(wall(10_000))));
        assert_eq!(next.renew_time, Some(MicroTime(wall(10_000))));
    }

    #[test]
    fn a_renewal_seen_restarts_the_count_and_an_unchanged_record_does_not() {
        let t0 = Instant::now();
        let at = |secs| t0 + Duration::from_secs(secs);
        let seen = Observation::note(None, &held_by("a", 100, 3), t0);
        let same = Observation::note(Some(seen.clone()), &held_by("a", 100, 3), at(10));
        assert_eq!(same.changed_at, t0);
        let renewed = Observation::note(Some(same), &held_by("a", 102, 3), at(12));
        assert_eq!(renewed.changed_at, at(12));
        assert_eq!(
            decide(
                &held_by("a", 102, 3),
                &renewed,
                "b",
                &timing(),
                at(20),
                wall(0)
            ),
            Decision::HeldBy("a".into())
        );
    }

    #[test]
    fn a_released_lease_is_taken_at_once() {
        let t0 = Instant::now();
        let spec = released(&held_by("a", 100, 3), wall(101));
        assert_eq!(spec.holder_identity, None);
        assert_eq!(spec.lease_transitions, Some(3));
        let seen = Observation::note(None, &spec, t0);
        let Decision::Write(next) = decide(&spec, &seen, "b", &timing(), t0, wall(101)) else {
            panic!("a released Lease is free");
        };
        assert_eq!(next.holder_identity.as_deref(), Some("b"));
        assert_eq!(next.lease_duration_seconds, Some(15));
        assert_eq!(next.lease_transitions, Some(4));
        // An empty identity is no holder either.
        let mut empty = held_by("", 100, 3);
        empty.lease_duration_seconds = Some(15);
        let seen = Observation::note(None, &empty, t0);
        assert!(matches!(
            decide(&empty, &seen, "b", &timing(), t0, wall(101)),
            Decision::Write(_)
        ));
    }

    #[test]
    fn the_holder_renews_keeping_its_acquire_time_and_transitions() {
        let t0 = Instant::now();
        let spec = held_by("a", 100, 3);
        let seen = Observation::note(None, &spec, t0);
        let Decision::Write(next) = decide(&spec, &seen, "a", &timing(), t0, wall(102)) else {
            panic!("the holder renews");
        };
        assert_eq!(next.acquire_time, Some(MicroTime(wall(0))));
        assert_eq!(next.renew_time, Some(MicroTime(wall(102))));
        assert_eq!(next.lease_transitions, Some(3));
    }

    #[test]
    fn a_new_lease_is_held_by_its_creator() {
        let spec = fresh("a", &timing(), wall(5));
        assert_eq!(spec.holder_identity.as_deref(), Some("a"));
        assert_eq!(spec.lease_duration_seconds, Some(15));
        assert_eq!(spec.lease_transitions, Some(0));
    }
}
