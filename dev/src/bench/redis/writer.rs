//! The load client of the Redis measurements (pure): the bash script a client
//! Pod of our Redis image runs, the log it writes, and what the log says.
//!
//! The script writes sequential keys `w1`, `w2`, ... (value: the number)
//! through one address (the `<name>` Service's ClusterIP), one TCP
//! connection per write (bash's `/dev/tcp`), so that every write follows the
//! Service to whichever Pod holds the primary label. Each write is pipelined
//! as `SET`, `WAIT n timeout`, `INFO server replication` and `QUIT` on that
//! one connection: the `WAIT` answer is about that `SET`, and `run_id` and
//! `master_replid` name the redis-server process that took it and its term
//! as a primary (a promotion, a restart or an empty start gives a new
//! `master_replid`). redis-cli is not used for the writes: reading commands
//! from a pipe, it reconnects and resends on a dropped connection, which
//! could put the `WAIT` on another server than the `SET`. One log line per
//! attempt:
//!
//! `<start> <end> <key> <accepted 0|1> <replicas that acknowledged|-> <run_id|-> <master_replid|-> <why refused|->`
//!
//! where *why refused* is `noreply` (no connection, or no answer within the
//! 3 s) or the error's first word (`READONLY`, `LOADING`, `NOAUTH`, ...).
//! When [`PASSWORD_FILE`] exists, each write logs in with its content first.
//!
//! with `start`/`end` in seconds since the epoch (bash's `$EPOCHREALTIME`,
//! microseconds; the Pods share the host's clock). A write is acknowledged
//! only if `SET` answered `+OK` and `WAIT` answered a count on the same
//! connection. It stops when [`STOP`] exists.
//!
//! The log is on the client Pod's emptyDir ([`DIR`]), which lives as long as
//! the Pod, through any number of container restarts, and the client
//! container's command ([`client_command`]) starts the writer again after a
//! restart: it resumes after the last key of the log (a line `resumed
//! <time> <last key>` marks the gap), so no attempt recorded before is lost
//! and no key is written with another value.

use std::collections::BTreeSet;

use serde::Serialize;

/// The client Pod's emptyDir, where everything below lives.
pub const DIR: &str = "/ledger";
/// Where the script writes its log, and the file that stops it.
pub const LOG: &str = "/ledger/writes.log";
pub const STOP: &str = "/ledger/stop";
/// The script a restarted client container starts again, and the lock that
/// keeps it to one writer at a time.
pub const SCRIPT: &str = "/ledger/writer.sh";
pub const LOCK: &str = "/ledger/writer.lock";
/// The clients' password, if the file exists: each write logs in with it
/// first (`AUTH`), read again at every attempt, as a client that reloads
/// its configuration. Letters, digits and punctuation without spaces; or
/// `<user> <password>` for a user of `spec.users` (`AUTH user password`).
pub const PASSWORD_FILE: &str = "/ledger/password";
/// The CA a TLS Redis's members are verified against: when the file
/// exists, each write goes over TLS (`openssl s_client`, the server's
/// certificate verified against it and, when [`TLS_NAME_FILE`] exists, for
/// the name it holds), and the read-back too (`redis-cli --tls`). Read
/// again at every attempt.
pub const TLS_CA_FILE: &str = "/ledger/ca.crt";
pub const TLS_NAME_FILE: &str = "/ledger/tls-name";

/// The client container's command: it starts the writer of [`SCRIPT`]
/// again if one was started and had not finished (its log does not end
/// with `done`), then sleeps. With the Pod's restartPolicy Always, a
/// container that dies or fails to start is started again, and its writer
/// with it.
pub fn client_command() -> String {
    format!(
        r#"if [ -e {SCRIPT} ] && [ "$(tail -n 1 {LOG} 2>/dev/null)" != done ]; then setsid bash {SCRIPT} >/dev/null 2>&1 </dev/null & fi; exec sleep infinity"#
    )
}

/// The writer script, for `bash`: writes through `host:port`, asking
/// `WAIT replicas timeout_ms` after each `SET`; each attempt gives up after
/// 3 s (connection, `WAIT` and all). It appends to [`LOG`], after the last
/// key there, and exits at once if another writer holds [`LOCK`]; starting
/// afresh is the caller's (remove the log and [`STOP`] first).
pub fn script(host: &str, port: u16, replicas: u32, timeout_ms: u32) -> String {
    keyed_script("w", host, port, replicas, timeout_ms)
}

/// [`script`] with keys `<prefix>1`, `<prefix>2`, ... (two writers at once
/// must not share keys).
pub fn keyed_script(prefix: &str, host: &str, port: u16, replicas: u32, timeout_ms: u32) -> String {
    attempts_script(
        prefix,
        &Target::Fixed {
            host: host.into(),
            port,
        },
        replicas,
        timeout_ms,
    )
}

/// The Sentinel-aware writer: [`script`]'s loop, log and stop file, but
/// each attempt first asks the Sentinels at `sentinels` (IPs, in that
/// order, each on `sentinel_port`) `SENTINEL get-master-addr-by-name
/// master` on a connection of its own (bash's `/dev/tcp`, 1 s at most per
/// Sentinel; it reads the answer's lines and closes, as Sentinel 7.0 has no
/// `QUIT`) and writes to the address the first one that knows the master
/// gives, as a Sentinel client discovers its master. An attempt no Sentinel
/// answers is logged refused `NOMASTER`. The 3 s of an attempt count from
/// the write's own connection; its start and end include the questions.
pub fn sentinel_script(
    prefix: &str,
    sentinels: &[String],
    sentinel_port: u16,
    master: &str,
    replicas: u32,
    timeout_ms: u32,
) -> String {
    attempts_script(
        prefix,
        &Target::Sentinels {
            ips: sentinels.to_vec(),
            port: sentinel_port,
            master: master.into(),
        },
        replicas,
        timeout_ms,
    )
}

/// Where a writer's attempts go.
enum Target {
    /// One address (a Service's ClusterIP).
    Fixed { host: String, port: u16 },
    /// The master the Sentinels name, asked before every attempt.
    Sentinels {
        ips: Vec<String>,
        port: u16,
        master: String,
    },
}

/// The writer's loop (see the module's documentation) against `target`.
fn attempts_script(prefix: &str, target: &Target, replicas: u32, timeout_ms: u32) -> String {
    // `resolve` runs at the start of each attempt and may set `out` to a
    // refusal instead of writing; `connect` is the inner bash's `/dev/tcp`
    // address, whose arguments follow the key ($0) in `args`.
    let (resolve, connect, args) = match target {
        Target::Fixed { host, port } => (String::new(), format!("{host}/{port}"), String::new()),
        Target::Sentinels { ips, port, master } => (
            format!(
                r#"
  h=; p=
  for s in {ips}; do
    a=$(timeout 1 bash -c 'exec 3<>/dev/tcp/$0/{port} || exit 1; printf "SENTINEL get-master-addr-by-name {master}\r\n" >&3; read -r l <&3; echo "$l"; case $l in \*2*) for k in 1 2 3 4; do read -r l <&3; echo "$l"; done;; esac' $s 2>/dev/null)
    read -r -d '' -a m <<< "${{a//$'\r'/}}"
    if [ "${{m[0]}}" = '*2' ]; then h=${{m[2]}}; p=${{m[4]}}; break; fi
  done
  [ -n "$h" ] || out=-NOMASTER"#,
                ips = ips.join(" "),
            ),
            "$1/$2".to_string(),
            " $h $p".to_string(),
        ),
    };
    // `host:port` for openssl, from bash's `host/port`.
    let tls_connect = connect.replacen('/', ":", 1);
    // Over TLS, the requests go on openssl's standard input (it keeps the
    // connection after their end, until the server closes it at QUIT).
    let write = format!(
        r#"out=$(pw=$pw tls=$tls timeout 3 bash -c 'req() {{ [ -z "$pw" ] || printf "AUTH %s\r\n" "$pw"; printf "SET {prefix}%d %d\r\nWAIT {replicas} {timeout_ms}\r\nINFO server replication\r\nQUIT\r\n" $0 $0; }}; if [ -n "$tls" ]; then req "$@" | openssl s_client -quiet -verify_return_error -CAfile {TLS_CA_FILE} $tls -connect {tls_connect}; else exec 3<>/dev/tcp/{connect} || exit 1; req >&3; cat <&3; fi' $i{args} 2>/dev/null)"#
    );
    let write = if resolve.is_empty() {
        write
    } else {
        format!("[ -z \"$h\" ] || {write}")
    };
    format!(
        r#"exec 9>>{LOCK}; flock -n 9 || exit 0
: >> {LOG}; i=0
while read -r _ _ k _; do case $k in ''|*[!0-9]*) ;; *) i=$k;; esac; done < <(tail -n 3 {LOG})
[ $i = 0 ] || printf '\nresumed %s %d\n' $EPOCHREALTIME $i >> {LOG}
while [ ! -e {STOP} ]; do
  i=$((i+1)); t0=$EPOCHREALTIME{resolve}
  pw=; [ -r {PASSWORD_FILE} ] && pw=$(< {PASSWORD_FILE})
  tls=; if [ -r {TLS_CA_FILE} ]; then tls=-quiet; [ -r {TLS_NAME_FILE} ] && tls="-verify_hostname $(< {TLS_NAME_FILE})"; fi
  {write}
  t1=$EPOCHREALTIME
  out=${{out//$'\r'/}}
  [ -z "$pw" ] || out=${{out#*$'\n'}}
  s=${{out%%$'\n'*}}; rest=${{out#*$'\n'}}; acks=${{rest%%$'\n'*}}; acks=${{acks#:}}
  case $acks in ''|*[!0-9]*) acks=-;; esac
  rid=-; case $out in *run_id:*) rid=${{out#*run_id:}}; rid=${{rid%%$'\n'*}};; esac
  term=-; case $out in *master_replid:*) term=${{out#*master_replid:}}; term=${{term%%$'\n'*}};; esac
  ok=0; why=-; [ "$s" = +OK ] && ok=1
  if [ $ok = 0 ]; then why=${{s%% *}}; why=${{why#-}}; [ -n "$why" ] || why=noreply; fi
  echo "$t0 $t1 $i $ok $acks $rid $term $why" >> {LOG}
  [ $ok = 1 ] || sleep 0.02
done
echo done >> {LOG}"#
    )
}

/// A script that prints, one line per key, the value of `w1` ..= `wN`
/// (an empty line for a missing key), pipelined into one redis-cli.
pub fn read_back_script(host: &str, port: u16, n: u64) -> String {
    keyed_read_back_script("w", host, port, n)
}

/// [`read_back_script`] of the keys `<prefix>1` ..= `<prefix>N` (logged
/// in with [`PASSWORD_FILE`]'s password where it exists).
pub fn keyed_read_back_script(prefix: &str, host: &str, port: u16, n: u64) -> String {
    format!(
        "u=; if [ -r {PASSWORD_FILE} ]; then read -r a b < {PASSWORD_FILE}; if [ -n \"$b\" ]; then u=\"--user $a\"; a=$b; fi; export REDISCLI_AUTH=$a; fi; \
         tls=; [ -r {TLS_CA_FILE} ] && tls=\"--tls --cacert {TLS_CA_FILE}\"; \
         for ((i=1;i<={n};i++)); do printf 'GET {prefix}%d\\r\\n' $i; done | redis-cli $tls $u -h {host} -p {port}"
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
    /// The server's `master_replid` after the write: its term as primary.
    pub term: Option<String>,
    /// Why it was refused: `noreply` or the error's first word.
    pub refused: Option<String>,
}

/// Parses the writer's log; the unfinished last line (the script may be
/// writing it) and the final `done` are skipped.
pub fn parse(log: &str) -> Vec<Attempt> {
    log.lines().filter_map(parse_line).collect()
}

fn parse_line(line: &str) -> Option<Attempt> {
    let f: Vec<&str> = line.split_whitespace().collect();
    let [start, end, key, ok, acks, rid, term, why] = f.as_slice() else {
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
        term: (*term != "-").then(|| term.to_string()),
        refused: (*why != "-").then(|| why.to_string()),
    })
}

/// How the attempts that ended in `[from, to]` were refused: each reason
/// with its count, most frequent first.
pub fn refusals(attempts: &[Attempt], from: f64, to: f64) -> Vec<(String, usize)> {
    let mut counts = std::collections::BTreeMap::<&str, usize>::new();
    for a in attempts.iter().filter(|a| a.end >= from && a.end <= to) {
        if let Some(why) = a.refused.as_deref() {
            *counts.entry(why).or_default() += 1;
        }
    }
    let mut out: Vec<(String, usize)> = counts
        .into_iter()
        .map(|(k, n)| (k.to_string(), n))
        .collect();
    out.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    out
}

/// The attempts that ended between `from` and `to`, one short line each
/// (start and end in seconds after `from`, what came of it, the server's
/// run id prefix): where the time of a slow failover went.
pub fn timeline(attempts: &[Attempt], from: f64, to: f64) -> Vec<String> {
    attempts
        .iter()
        .filter(|a| a.end >= from && a.start <= to)
        .map(|a| {
            let outcome = match (&a.refused, a.accepted) {
                (Some(why), _) => why.clone(),
                (None, true) => format!("OK acks={}", a.acks.map_or("-".into(), |n| n.to_string())),
                (None, false) => "not accepted".into(),
            };
            let server = a.run_id.as_deref().map_or("-", |r| &r[..r.len().min(8)]);
            format!(
                "{:+.2}..{:+.2} {outcome} @{server}",
                a.start - from,
                a.end - from
            )
        })
        .collect()
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
    let values: Vec<&str> = read_back
        .lines()
        .map(|l| l.trim_end_matches('\r'))
        .collect();
    acknowledged
        .iter()
        .copied()
        .filter(|k| values.get(*k as usize - 1).copied() != Some(k.to_string().as_str()))
        .collect()
}

/// The longest time between two consecutive accepted writes (from the end
/// of one to the end of the next) that overlaps `[from, to]`, and when it
/// started: a pause that began before `from` or lasted past `to` counts
/// whole. `None` without two accepted writes around or in the window.
pub fn longest_pause(attempts: &[Attempt], from: f64, to: f64) -> Option<(f64, f64)> {
    let mut ends: Vec<f64> = attempts
        .iter()
        .filter(|a| a.accepted)
        .map(|a| a.end)
        .collect();
    ends.sort_by(f64::total_cmp);
    ends.windows(2)
        .filter(|w| w[1] >= from && w[0] <= to)
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
        a.accepted && a.end > after && a.run_id.as_deref().is_some_and(|r| !excluded.contains(&r))
    })
}

/// The client's check for two primaries: with one writer and one write at a
/// time, the primary terms that accept its writes must take turns, each in
/// one unbroken stretch. A term is a server process (`run_id`) with one
/// `master_replid`; a promotion gives the server a new `master_replid`, and
/// a demoted server refuses writes. So a term that accepts writes again
/// after another term did was a primary all along, at the same time as that
/// one. Returns each such return, as (run id of the server that came back,
/// run id of the one it overlapped, key). Writes without a run id or term
/// are skipped.
pub fn overlapping_primaries(attempts: &[Attempt]) -> Vec<(String, String, u64)> {
    let mut seen: BTreeSet<(&str, &str)> = BTreeSet::new();
    let mut current: Option<(&str, &str)> = None;
    let mut overlaps = Vec::new();
    for a in attempts.iter().filter(|a| a.accepted) {
        let (Some(rid), Some(term)) = (a.run_id.as_deref(), a.term.as_deref()) else {
            continue;
        };
        if current == Some((rid, term)) {
            continue;
        }
        if !seen.insert((rid, term)) {
            overlaps.push((
                rid.to_string(),
                current.map_or("", |c| c.0).to_string(),
                a.key,
            ));
        }
        current = Some((rid, term));
    }
    overlaps
}

/// What the writer saw of one unplanned failover.
#[derive(Clone, Debug, PartialEq)]
pub struct Failover {
    /// From `killed_at` to the end of the first write the new primary
    /// accepted, s.
    pub to_new_primary_s: f64,
    /// From the end of the old primary's last accepted write to that of the
    /// new one's first, s.
    pub client_gap_s: f64,
    /// Writes accepted after `killed_at` and before the new primary's first
    /// by a server that is neither (say the restarted, empty old one).
    pub accepted_elsewhere: usize,
}

/// The failover from server `old` to `new` (run ids) after a kill issued
/// at `killed_at`; `None` if the new primary accepted no write after it.
pub fn failover(attempts: &[Attempt], killed_at: f64, old: &str, new: &str) -> Option<Failover> {
    let accepted = || attempts.iter().filter(|a| a.accepted);
    let first_new = accepted().find(|a| a.end > killed_at && a.run_id.as_deref() == Some(new))?;
    let accepted_elsewhere = accepted()
        .filter(|a| a.end > killed_at && a.end < first_new.end)
        .filter(|a| !a.run_id.as_deref().is_some_and(|r| r == old || r == new))
        .count();
    let last_old = accepted()
        .rfind(|a| a.end < first_new.end && a.run_id.as_deref() == Some(old))
        .map_or(killed_at, |a| a.end);
    Some(Failover {
        to_new_primary_s: first_new.end - killed_at,
        client_gap_s: first_new.end - last_old,
        accepted_elsewhere,
    })
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

    /// An attempt ending at `end`; `rid` "x" or "x/2" (server x in its
    /// second term; "x" is "x/1"), "-" for none.
    fn a(end: f64, key: u64, ok: bool, acks: Option<u32>, rid: &str) -> Attempt {
        let (run, term) = rid.split_once('/').unwrap_or((rid, "1"));
        Attempt {
            start: end - 0.01,
            end,
            key,
            accepted: ok,
            acks,
            run_id: (run != "-").then(|| run.to_string()),
            term: (run != "-").then(|| format!("{run}-{term}")),
            refused: (!ok).then(|| "noreply".to_string()),
        }
    }

    #[test]
    fn the_log_parses_and_an_unfinished_line_is_skipped() {
        let log = "1.5 1.6 1 1 1 abc abc-1 -\n1.7 1.8 2 0 - - - noreply\n1.9 2.0 3 1 0 def def-1 -\n2.1 2.";
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
        assert!(finished("1 2 1 1 1 a a-1 -\ndone\n"));
        assert_eq!(acknowledged(&got, 1), vec![1]);
        assert_eq!(acknowledged(&got, 0), vec![1, 3]);
    }

    #[test]
    fn a_write_accepted_without_a_wait_answer_is_not_acknowledged() {
        // The connection closed after +OK (the server was killed).
        let got =
            parse("1.0 1.1 1 1 - - - -\n1.2 1.3 2 0 - - - READONLY\n1.4 1.5 3 0 - - - noreply\n");
        assert_eq!(got.len(), 3);
        assert!(got[0].accepted && got[0].acks.is_none() && got[0].run_id.is_none());
        assert_eq!(got[1].refused.as_deref(), Some("READONLY"));
        assert_eq!(
            refusals(&got, 0.0, 2.0),
            vec![("READONLY".to_string(), 1), ("noreply".to_string(), 1)]
        );
        assert!(refusals(&got, 1.35, 2.0) == vec![("noreply".to_string(), 1)]);
        assert_eq!(acknowledged(&got, 1), Vec::<u64>::new());
        assert!(overlapping_primaries(&got).is_empty());
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
        assert_eq!(longest_pause(&w, 3.55, 10.0).map(|p| p.1), Some(3.5));
        assert_eq!(first_accepted_after(&w, 0.5, &["x"]).unwrap().key, 3);
        assert!(first_accepted_after(&w, 0.5, &["x", "y"]).is_none());
        let s = summarize(&w, 1);
        assert_eq!(
            (s.attempts, s.accepted, s.acknowledged, s.servers),
            (4, 3, 3, 2)
        );
        assert!((s.success_ratio - 0.75).abs() < 1e-9);
        assert!((s.longest_pause_s - 2.5).abs() < 1e-9);
    }

    #[test]
    fn a_pause_that_straddles_the_window_counts_whole() {
        let w = [
            a(1.0, 1, true, Some(1), "x"),
            a(5.0, 2, true, Some(1), "y"),
            a(5.1, 3, true, Some(1), "y"),
        ];
        // No write accepted inside [2, 4]: the pause is the whole 4 s.
        let (len, at) = longest_pause(&w, 2.0, 4.0).unwrap();
        assert!((len - 4.0).abs() < 1e-9 && at == 1.0);
        assert!((longest_pause(&w, 0.0, 1.5).unwrap().0 - 4.0).abs() < 1e-9);
        assert!((longest_pause(&w, 5.05, 9.0).unwrap().0 - 0.1).abs() < 1e-9);
        assert_eq!(longest_pause(&w, 6.0, 9.0), None);
    }

    #[test]
    fn a_term_that_accepts_writes_again_after_another_overlapped_it() {
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
        // x demoted (refuses writes) and promoted again: a new term.
        let back = [
            a(1.0, 1, true, Some(1), "x"),
            a(2.0, 2, true, Some(1), "y"),
            a(3.0, 3, true, Some(1), "x/2"),
        ];
        assert!(overlapping_primaries(&back).is_empty());
    }

    #[test]
    fn a_failover_is_timed_from_the_kill_and_from_the_old_primarys_last_write() {
        let w = [
            a(0.5, 1, true, Some(1), "old"),
            // The kill is issued at 1.0; the old primary still takes one.
            a(1.2, 2, true, Some(1), "old"),
            a(1.5, 3, false, None, "-"),
            a(2.0, 4, true, Some(0), "restarted"),
            a(2.5, 5, false, None, "-"),
            a(4.0, 6, true, Some(1), "new"),
            a(4.1, 7, true, Some(1), "new"),
        ];
        let f = failover(&w, 1.0, "old", "new").unwrap();
        assert!((f.to_new_primary_s - 3.0).abs() < 1e-9);
        assert!((f.client_gap_s - 2.8).abs() < 1e-9);
        assert_eq!(f.accepted_elsewhere, 1);
        assert_eq!(failover(&w, 5.0, "old", "new"), None);
        // No write of the old primary before: the gap starts at the kill.
        let f = failover(&w[5..], 1.0, "old", "new").unwrap();
        assert!((f.client_gap_s - 3.0).abs() < 1e-9);
    }

    #[test]
    fn the_script_pipelines_set_wait_info_and_quit_on_one_connection() {
        let s = script("10.96.0.5", 6379, 1, 1000);
        assert!(s.contains("WAIT 1 1000"));
        assert!(s.contains("/dev/tcp/10.96.0.5/6379"));
        assert!(s.contains(r"INFO server replication\r\nQUIT\r\n"));
        assert!(!s.contains("redis-cli"));
        assert!(s.contains(LOG) && s.contains(STOP));
        assert!(read_back_script("h", 1, 3).contains("i<=3"));
    }

    #[test]
    fn the_sentinel_script_asks_each_sentinel_in_turn_then_writes_to_the_master_named() {
        let ips = ["10.244.1.7".to_string(), "10.244.2.8".to_string()];
        let s = sentinel_script("w", &ips, 26379, "anchor", 1, 1000);
        assert!(s.contains("for s in 10.244.1.7 10.244.2.8; do"));
        assert!(s.contains("/dev/tcp/$0/26379"));
        // Sentinel 7.0 has no QUIT: the answer's five lines are read.
        assert!(s.contains(
            r#"printf "SENTINEL get-master-addr-by-name anchor\r\n" >&3; read -r l <&3;"#
        ));
        assert!(s.contains(r"case $l in \*2*) for k in 1 2 3 4; do read -r l <&3;"));
        // The first Sentinel that knows the master (a two-element array
        // answer) ends the questions; the write goes to what it named.
        assert!(s.contains(r#"if [ "${m[0]}" = '*2' ]; then h=${m[2]}; p=${m[4]}; break; fi"#));
        assert!(s.contains("/dev/tcp/$1/$2") && s.contains("' $i $h $p 2>/dev/null)"));
        assert!(s.contains(r#"[ -n "$h" ] || out=-NOMASTER"#));
        assert!(s.contains(r#"[ -z "$h" ] || out=$(pw=$pw tls=$tls timeout 3 bash -c"#));
        // The same write, log and stop file as the Service writer's.
        assert!(s.contains(r"WAIT 1 1000\r\nINFO server replication\r\nQUIT\r\n"));
        assert!(s.contains(LOG) && s.contains(STOP) && s.contains("flock -n 9"));
        assert!(!s.contains("redis-cli"));
        let fixed = script("10.96.0.5", 6379, 1, 1000);
        assert!(!fixed.contains("SENTINEL") && !fixed.contains("NOMASTER"));
        assert!(fixed.contains(
            "t0=$EPOCHREALTIME\n  pw=; [ -r /ledger/password ] && pw=$(< /ledger/password)\n"
        ));
        assert!(
            fixed.contains("else exec 3<>/dev/tcp/10.96.0.5/6379 || exit 1; req >&3; cat <&3; fi")
        );
        assert!(fixed.contains("-connect 10.96.0.5:6379;"));
        // A refusal for want of a master parses like any other.
        let got = parse("1.0 1.1 1 0 - - - NOMASTER\n");
        assert_eq!(refusals(&got, 0.0, 2.0), vec![("NOMASTER".to_string(), 1)]);
    }

    #[test]
    fn the_script_resumes_its_log_and_the_marks_of_a_restart_parse_as_nothing() {
        let s = script("h", 6379, 1, 1000);
        // It neither truncates the log nor removes the stop file: a
        // restarted container's writer carries on where the last one was.
        assert!(!s.contains(&format!(": > {LOG}")) && !s.contains(&format!("rm -f {STOP}")));
        assert!(s.contains("flock -n 9") && s.contains(LOCK));
        assert!(
            client_command().contains(SCRIPT) && client_command().ends_with("exec sleep infinity")
        );
        let log = "1.0 1.1 1 1 1 a a-1 -\n1.2 1.3 2 1 1 a a-1 -\n\nresumed 9.0 2\n9.1 9.2 3 1 1 a a-1 -\n";
        let got = parse(log);
        assert_eq!(got.iter().map(|a| a.key).collect::<Vec<_>>(), vec![1, 2, 3]);
        assert_eq!(acknowledged(&got, 1), vec![1, 2, 3]);
        assert!(!finished(log));
    }
}
