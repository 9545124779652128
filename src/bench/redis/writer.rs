//! The load client of the Redis measurements (pure): the bash script a client
//! Pod of our Redis image runs, the log it writes, and what the log says.
//!
//! The script writes sequential keys `w1`, `w2`, ... (value: the number)
//! through one address (the `<name>` Service's ClusterIP), one redis-cli per
//! write, so that every write opens a new connection and follows the Service
//! to whichever Pod holds the primary label. Each write is pipelined as
//! `SET`, `WAIT n timeout` and `INFO server`, whose `run_id` names the
//! redis-server process that took the write (a restarted container gets a
//! new one). One log line per attempt:
//!
//! `<start> <end> <key> <accepted 0|1> <replicas that acknowledged|-> <run_id|->`
//!
//! with `start`/`end` in seconds since the epoch (bash's `$EPOCHREALTIME`,
//! microseconds; the Pods share the host's clock). It stops when
//! `/tmp/stop` exists.

use std::collections::BTreeMap;

use serde::Serialize;

/// Where the script writes its log, and the file that stops it.
pub const LOG: &str = "/tmp/writes.log";
pub const STOP: &str = "/tmp/stop";

/// The writer script, for `bash -c`: writes through `host:port`, asking
/// `WAIT replicas timeout_ms` after each `SET` (`replicas` 0: no WAIT).
pub fn script(host: &str, port: u16, replicas: u32, timeout_ms: u32) -> String {
    format!(
        r#"rm -f {STOP}; : > {LOG}; i=0
while [ ! -e {STOP} ]; do
  i=$((i+1)); t0=$EPOCHREALTIME
  out=$(printf 'SET w%d %d\r\nWAIT {replicas} {timeout_ms}\r\nINFO server\r\n' $i $i | timeout 3 redis-cli -h {host} -p {port} 2>/dev/null)
  t1=$EPOCHREALTIME
  s=${{out%%$'\n'*}}; rest=${{out#*$'\n'}}; acks=${{rest%%$'\n'*}}; acks=${{acks%$'\r'}}
  case $acks in ''|*[!0-9]*) acks=-;; esac
  rid=-; case $out in *run_id:*) rid=${{out#*run_id:}}; rid=${{rid%%[$'\r\n']*}};; esac
  ok=0; [ "$s" = OK ] && ok=1
  echo "$t0 $t1 $i $ok $acks $rid" >> {LOG}
  [ $ok = 1 ] || sleep 0.02
done
echo done >> {LOG}"#
    )
}

/// A script that prints, one line per key, the value of `w1` ..= `wN`
/// (an empty line for a missing key), pipelined into one redis-cli.
pub fn read_back_script(host: &str, port: u16, n: u64) -> String {
    format!(
        "for ((i=1;i<={n};i++)); do printf 'GET w%d\\r\\n' $i; done | redis-cli -h {host} -p {port}"
    )
}

/// One write attempt.
#[derive(Clone, Debug, PartialEq)]
pub struct Attempt {
    pub start: f64,
    pub end: f64,
    pub key: u64,
    /// `SET` answered `OK`.
    pub accepted: bool,
    /// What `WAIT` answered, if it did.
    pub acks: Option<u32>,
    pub run_id: Option<String>,
}

/// Parses the writer's log; the unfinished last line (the script may be
/// writing it) and the final `done` are skipped.
pub fn parse(log: &str) -> Vec<Attempt> {
    log.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Attempt> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let [start, end, key, ok, acks, rid] = f.as_slice() else {
        return None;
    };
    Some(Attempt {
        start: start.parse().ok()?,
        end: end.parse().ok()?,
        key: key.parse().ok()?,
        accepted: match *ok {
            "1" => true,
            "0" => false,
            _ => return None,
        },
        acks: acks.parse().ok(),
        run_id: (*rid != "-").then(|| rid.to_string()),
    })
}

/// Whether the writer had finished (its log ends with `done`).
pub fn finished(log: &str) -> bool {
    log.lines().last() == Some("done")
}

/// Accepted writes that `WAIT` confirmed on at least `replicas` replicas.
pub fn acknowledged(attempts: &[Attempt], replicas: u32) -> Vec<u64> {
    attempts
        .iter()
        .filter(|a| a.accepted && a.acks.is_some_and(|n| n >= replicas))
        .map(|a| a.key)
        .collect()
}

/// Acknowledged keys that the read-back (one line per key from `w1`, as
/// [`read_back_script`] prints) does not have with their value.
pub fn lost(acknowledged: &[u64], read_back: &str) -> Vec<u64> {
    let values: Vec<&str> = read_back.lines().map(|l| l.trim_end_matches('\r')).collect();
    acknowledged
        .iter()
        .copied()
        .filter(|k| values.get(*k as usize - 1).copied() != Some(k.to_string().as_str()))
        .collect()
}

/// The longest time between two accepted writes (from the end of one to the
/// end of the next) among `attempts` whose end lies in `[from, to]`, and
/// when it started. `None` with fewer than two.
pub fn longest_pause(attempts: &[Attempt], from: f64, to: f64) -> Option<(f64, f64)> {
    let ends: Vec<f64> = attempts
        .iter()
        .filter(|a| a.accepted && a.end >= from && a.end <= to)
        .map(|a| a.end)
        .collect();
    ends.windows(2)
        .map(|w| (w[1] - w[0], w[0]))
        .max_by(|a, b| a.0.total_cmp(&b.0))
}

/// The first accepted write that ended after `after` on a server not in
/// `excluded` (run ids).
pub fn first_accepted_after<'a>(
    attempts: &'a [Attempt],
    after: f64,
    excluded: &[&str],
) -> Option<&'a Attempt> {
    attempts.iter().find(|a| {
        a.accepted
            && a.end > after
            && a.run_id
                .as_deref()
                .is_some_and(|r| !excluded.contains(&r))
    })
}

/// The client's check for two primaries: with one writer and one write at a
/// time, the servers that accept its writes must take turns, each in one
/// unbroken stretch. A server that accepts writes again after another one
/// did was a primary at the same time as that one (it was never demoted in
/// between, or it would have refused them, or it restarted with a new run
/// id). Returns each return, as (server, the one it overlapped, key).
pub fn overlapping_primaries(attempts: &[Attempt]) -> Vec<(String, String, u64)> {
    let mut seen: BTreeMap<&str, ()> = BTreeMap::new();
    let mut current: Option<&str> = None;
    let mut overlaps = Vec::new();
    for a in attempts.iter().filter(|a| a.accepted) {
        let Some(rid) = a.run_id.as_deref() else {
            continue;
        };
        if current == Some(rid) {
            continue;
        }
        if seen.contains_key(rid) {
            overlaps.push((
                rid.to_string(),
                current.unwrap_or_default().to_string(),
                a.key,
            ));
        }
        seen.insert(rid, ());
        current = Some(rid);
    }
    overlaps
}

/// What a writer saw over a stretch of time.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    pub attempts: usize,
    pub accepted: usize,
    pub acknowledged: usize,
    /// Accepted / attempted.
    pub success_ratio: f64,
    /// Longest gap between accepted writes, seconds.
    pub longest_pause_s: f64,
    /// Distinct servers that accepted writes.
    pub servers: usize,
}

pub fn summarize(attempts: &[Attempt], replicas: u32) -> Summary {
    let accepted = attempts.iter().filter(|a| a.accepted).count();
    let mut servers: Vec<&str> = attempts
        .iter()
        .filter(|a| a.accepted)
        .filter_map(|a| a.run_id.as_deref())
        .collect();
    servers.sort();
    servers.dedup();
    Summary {
        attempts: attempts.len(),
        accepted,
        acknowledged: acknowledged(attempts, replicas).len(),
        success_ratio: if attempts.is_empty() {
            0.0
        } else {
            accepted as f64 / attempts.len() as f64
        },
        longest_pause_s: longest_pause(attempts, f64::MIN, f64::MAX).map_or(0.0, |p| p.0),
        servers: servers.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn a(end: f64, key: u64, ok: bool, acks: Option<u32>, rid: &str) -> Attempt {
        Attempt {
            start: end - 0.01,
            end,
            key,
            accepted: ok,
            acks,
            run_id: (rid != "-").then(|| rid.to_string()),
        }
    }

    #[test]
    fn the_log_parses_and_an_unfinished_line_is_skipped() {
        let log = "1.5 1.6 1 1 1 abc\n1.7 1.8 2 0 - -\n1.9 2.0 3 1 0 def\n2.1 2.";
        let got = parse(log);
        assert_eq!(
            got,
            vec![
                a(1.6, 1, true, Some(1), "abc"),
                a(1.8, 2, false, None, "-"),
                a(2.0, 3, true, Some(0), "def"),
            ]
            .into_iter()
            .zip([1.5, 1.7, 1.9])
            .map(|(mut x, s)| {
                x.start = s;
                x
            })
            .collect::<Vec<_>>()
        );
        assert!(!finished(log));
        assert!(finished("1 2 1 1 1 a\ndone\n"));
        assert_eq!(acknowledged(&got, 1), vec![1]);
        assert_eq!(acknowledged(&got, 0), vec![1, 3]);
    }

    #[test]
    fn lost_keys_are_the_acknowledged_ones_missing_or_wrong() {
        // w1 = 1, w2 missing, w3 = 7 (wrong), w4 = 4.
        let read = "1\r\n\r\n7\n4\n";
        assert_eq!(lost(&[1, 2, 3, 4], read), vec![2, 3]);
        assert_eq!(lost(&[1, 4, 5], read), vec![5]);
    }

    #[test]
    fn pauses_are_gaps_between_accepted_writes() {
        let w = [
            a(1.0, 1, true, Some(1), "x"),
            a(1.1, 2, false, None, "-"),
            a(3.5, 3, true, Some(1), "y"),
            a(3.6, 4, true, Some(1), "y"),
        ];
        let (len, at) = longest_pause(&w, 0.0, 10.0).unwrap();
        assert!((len - 2.5).abs() < 1e-9 && at == 1.0);
        assert_eq!(longest_pause(&w, 3.0, 10.0).map(|p| p.1), Some(3.5));
        assert_eq!(first_accepted_after(&w, 0.5, &["x"]).unwrap().key, 3);
        assert!(first_accepted_after(&w, 0.5, &["x", "y"]).is_none());
        let s = summarize(&w, 1);
        assert_eq!((s.attempts, s.accepted, s.acknowledged, s.servers), (4, 3, 3, 2));
        assert!((s.success_ratio - 0.75).abs() < 1e-9);
    }

    #[test]
    fn a_server_that_accepts_writes_again_after_another_overlapped_it() {
        let turns = [
            a(1.0, 1, true, Some(1), "x"),
            a(2.0, 2, true, Some(1), "y"),
            a(3.0, 3, false, None, "x"),
            a(4.0, 4, true, Some(1), "z"),
        ];
        assert!(overlapping_primaries(&turns).is_empty());
        let split = [
            a(1.0, 1, true, Some(1), "x"),
            a(2.0, 2, true, Some(0), "y"),
            a(3.0, 3, true, Some(1), "x"),
        ];
        assert_eq!(
            overlapping_primaries(&split),
            vec![("x".to_string(), "y".to_string(), 3)]
        );
    }

    #[test]
    fn the_script_pipelines_set_wait_and_info_through_one_address() {
        let s = script("10.96.0.5", 6379, 1, 1000);
        assert!(s.contains("WAIT 1 1000"));
        assert!(s.contains("redis-cli -h 10.96.0.5 -p 6379"));
        assert!(s.contains(LOG) && s.contains(STOP));
        assert!(read_back_script("h", 1, 3).contains("i<=3"));
    }
}
