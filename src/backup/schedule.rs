//! Scheduled backups, pure: when the next backup is due from a Redis's
//! `spec.backup.schedule`, what it is called, and which finished backups
//! its `retention` lets go. The scheduler (`scheduler.rs`) does the I/O.
//!
//! The schedule keeps no state of its own: the newest scheduled backup's
//! `podkeeper.dev/scheduled-at` says which occurrence was taken last, and a
//! backup's name is made from its occurrence, so an operator that restarts
//! (or two that overlap for a moment) makes each backup once.

use std::str::FromStr;

use croner::Cron;
use k8s_openapi::jiff::{SignedDuration, Timestamp, tz::TimeZone};

use crate::api::backup::{BackupRetention, phase};

/// Parses a schedule (five fields, or six with seconds first), in UTC.
pub fn parse(schedule: &str) -> Result<Cron, String> {
    Cron::from_str(schedule)
        .map_err(|e| format!("schedule {schedule:?} is not a cron expression: {e}"))
}

/// The latest occurrence of `cron` at or before `now` that is later than
/// `after` (the occurrence taken last, or when the schedule was first
/// seen): the backup to take now, if one is due. Occurrences missed in
/// between are not made up one by one; only the latest is taken.
pub fn due(cron: &Cron, after: Timestamp, now: Timestamp) -> Option<Timestamp> {
    let latest = cron
        .find_previous_occurrence(&now.to_zoned(TimeZone::UTC), true)
        .ok()?
        .timestamp();
    (latest > after).then_some(latest)
}

/// The first occurrence after `now`: when to look again.
pub fn next(cron: &Cron, now: Timestamp) -> Option<Timestamp> {
    cron.find_next_occurrence(&now.to_zoned(TimeZone::UTC), false)
        .ok()
        .map(|z| z.timestamp())
}

/// The name of the backup made for the occurrence `at`:
/// `<redis>-<YYYYMMDDhhmmss>` (UTC).
pub fn backup_name(redis: &str, at: Timestamp) -> String {
    format!("{redis}-{}", at.strftime("%Y%m%d%H%M%S"))
}

/// `keepFor`: a whole number of hours, days or weeks (`36h`, `30d`, `8w`).
pub fn keep_for(s: &str) -> Result<SignedDuration, String> {
    let bad = || {
        format!("retention.keepFor {s:?} is not a number of hours, days or weeks (36h, 30d, 8w)")
    };
    let (n, unit) = s.split_at(s.len().checked_sub(1).ok_or_else(bad)?);
    let n: i64 = n.parse().map_err(|_| bad())?;
    let hours = match unit {
        "h" => 1,
        "d" => 24,
        "w" => 24 * 7,
        _ => return Err(bad()),
    };
    if n < 1 {
        return Err(bad());
    }
    Ok(SignedDuration::from_hours(n * hours))
}

/// A backup the schedule made, as pruning sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Made {
    pub name: String,
    /// The occurrence it was made for.
    pub at: Timestamp,
    pub phase: String,
}

/// The finished backups `retention` lets go, oldest first. A backup stays
/// if `keepLast` keeps it (one of the newest N completed, or a failed one
/// newer than the oldest of those) or `keepFor` does (made within that
/// long); the newest completed backup and the newest of all always stay,
/// and a backup not yet finished is never pruned.
pub fn prune(
    made: &[Made],
    retention: &BackupRetention,
    now: Timestamp,
) -> Result<Vec<String>, String> {
    let keep_for = retention.keep_for.as_deref().map(keep_for).transpose()?;
    let mut newest_first: Vec<&Made> = made.iter().collect();
    newest_first.sort_by(|a, b| b.at.cmp(&a.at).then_with(|| b.name.cmp(&a.name)));
    let mut completed_newer = 0u32;
    let mut pruned = Vec::new();
    for (i, m) in newest_first.into_iter().enumerate() {
        let completed = m.phase == phase::COMPLETED;
        let finished = completed || m.phase == phase::FAILED;
        let by_count = retention.keep_last.is_some_and(|n| completed_newer < n);
        let by_age = keep_for.is_some_and(|d| now.duration_since(m.at) < d);
        // The newest completed backup, and the newest of all (the
        // schedule counts its next occurrence from it).
        let newest = i == 0 || (completed && completed_newer == 0);
        if finished && !by_count && !by_age && !newest {
            pruned.push(m.name.clone());
        }
        if completed {
            completed_newer += 1;
        }
    }
    pruned.reverse();
    Ok(pruned)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: &str) -> Timestamp {
        s.parse().unwrap()
    }

    fn made(name: &str, at: &str, phase: &str) -> Made {
        Made {
            name: name.into(),
            at: t(at),
            phase: phase.into(),
        }
    }

    #[test]
    fn the_latest_missed_occurrence_is_due_once() {
        let daily = parse("0 3 * * *").unwrap();
        let seen = t("2026-12-01T10:00:00Z");
        // Before the first 03:00 after the schedule was seen: nothing.
        assert_eq!(due(&daily, seen, t("2026-12-02T02:59:59Z")), None);
        assert_eq!(
            due(&daily, seen, t("2026-12-02T03:00:00Z")),
            Some(t("2026-12-02T03:00:00Z"))
        );
        // Taken: not due again until the next day.
        let taken = t("2026-12-02T03:00:00Z");
        assert_eq!(due(&daily, taken, t("2026-12-02T20:00:00Z")), None);
        // Three days missed (operator down): only the latest is taken.
        assert_eq!(
            due(&daily, taken, t("2026-12-05T09:00:00Z")),
            Some(t("2026-12-05T03:00:00Z"))
        );
        assert_eq!(
            next(&daily, t("2026-12-05T03:00:00Z")),
            Some(t("2026-12-06T03:00:00Z"))
        );
    }

    #[test]
    fn six_fields_count_seconds_and_bad_schedules_say_why() {
        let every_20s = parse("*/20 * * * * *").unwrap();
        assert_eq!(
            next(&every_20s, t("2026-12-07T05:00:01Z")),
            Some(t("2026-12-07T05:00:20Z"))
        );
        let e = parse("61 * * * *").unwrap_err();
        assert!(e.contains("61 * * * *"), "{e}");
        assert!(parse("* * * *").is_err());
    }

    #[test]
    fn names_carry_the_occurrence() {
        assert_eq!(
            backup_name("cache", t("2026-12-07T03:00:00Z")),
            "cache-20261207030000"
        );
    }

    #[test]
    fn keep_for_takes_hours_days_and_weeks_only() {
        assert_eq!(keep_for("36h"), Ok(SignedDuration::from_hours(36)));
        assert_eq!(keep_for("2w"), Ok(SignedDuration::from_hours(336)));
        for bad in ["", "d", "0d", "3m", "-1d", "1.5d"] {
            assert!(keep_for(bad).is_err(), "{bad}");
        }
    }

    fn retention(keep_last: Option<u32>, keep_for: Option<&str>) -> BackupRetention {
        BackupRetention {
            keep_last,
            keep_for: keep_for.map(str::to_string),
        }
    }

    #[test]
    fn keep_last_counts_completed_backups_and_keeps_newer_failures() {
        let list = [
            made("r-1", "2026-12-01T03:00:00Z", phase::COMPLETED),
            made("r-2", "2026-12-02T03:00:00Z", phase::FAILED),
            made("r-3", "2026-12-03T03:00:00Z", phase::COMPLETED),
            made("r-4", "2026-12-04T03:00:00Z", phase::FAILED),
            made("r-5", "2026-12-05T03:00:00Z", phase::COMPLETED),
            made("r-6", "2026-12-06T03:00:00Z", phase::RUNNING),
        ];
        let now = t("2026-12-06T03:00:05Z");
        assert_eq!(
            prune(&list, &retention(Some(2), None), now),
            Ok(vec!["r-1".into(), "r-2".into()])
        );
        assert_eq!(
            prune(&list, &retention(Some(1), None), now),
            Ok(vec!["r-1".into(), "r-2".into(), "r-3".into(), "r-4".into()])
        );
        assert_eq!(prune(&list, &retention(Some(5), None), now), Ok(vec![]));
    }

    #[test]
    fn keep_for_keeps_recent_ones_and_the_newest_completed_always_stays() {
        let list = [
            made("r-1", "2026-12-01T03:00:00Z", phase::COMPLETED),
            made("r-2", "2026-12-02T03:00:00Z", phase::FAILED),
            made("r-3", "2026-12-05T03:00:00Z", phase::FAILED),
        ];
        // Everything older than two days: but r-1 is the only completed.
        let now = t("2026-12-06T12:00:00Z");
        assert_eq!(
            prune(&list, &retention(None, Some("2d")), now),
            Ok(vec!["r-2".into()])
        );
        // Both rules: kept if either keeps it.
        let more = [
            made("r-1", "2026-12-01T03:00:00Z", phase::COMPLETED),
            made("r-2", "2026-12-02T03:00:00Z", phase::COMPLETED),
            made("r-3", "2026-12-06T03:00:00Z", phase::COMPLETED),
        ];
        assert_eq!(
            prune(&more, &retention(Some(1), Some("5d")), now),
            Ok(vec!["r-1".into()])
        );
        assert!(prune(&more, &retention(None, Some("1x")), now).is_err());
    }
}
