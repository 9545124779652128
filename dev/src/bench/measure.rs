//! Pure helpers of the benchmark: percentiles, process statistics from
//! /proc, request counts from the apiserver's audit log, and the deletion
//! order check.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use serde::Serialize;

use super::clock::Gone;

/// Latency percentiles in seconds (nearest rank).
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Percentiles {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub max: f64,
}

/// Nearest-rank percentiles of `samples` (which need not be sorted).
pub fn percentiles(samples: &[f64]) -> Percentiles {
    let mut sorted = samples.to_vec();
    sorted.sort_by(f64::total_cmp);
    let rank = |p: f64| -> f64 {
        if sorted.is_empty() {
            return 0.0;
        }
        let n = sorted.len();
        let index = ((p / 100.0) * n as f64).ceil() as usize;
        sorted[index.clamp(1, n) - 1]
    };
    Percentiles {
        p50: rank(50.0),
        p90: rank(90.0),
        p99: rank(99.0),
        max: rank(100.0),
    }
}

/// CPU time and memory of a process, from /proc.
#[derive(Clone, Copy, Debug, Default)]
pub struct ProcSample {
    /// User plus system CPU seconds since the process started.
    pub cpu_s: f64,
    /// Resident set size now, MiB.
    pub rss_mib: f64,
    /// Peak resident set size since start (or since [`reset_peak`]), MiB.
    pub peak_rss_mib: f64,
}

/// Reads `/proc/PID/stat` and `/proc/PID/status`.
pub fn proc_sample(pid: u32, clock_ticks: f64) -> Option<ProcSample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    parse_proc(&stat, &status, clock_ticks)
}

fn parse_proc(stat: &str, status: &str, clock_ticks: f64) -> Option<ProcSample> {
    // Fields after the command name (which may hold spaces) in parentheses:
    // state is field 3, utime 14 and stime 15.
    let rest = &stat[stat.rfind(')')? + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    let kib = |key: &str| -> Option<f64> {
        status
            .lines()
            .find(|l| l.starts_with(key))?
            .split_whitespace()
            .nth(1)?
            .parse()
            .ok()
    };
    Some(ProcSample {
        cpu_s: (utime + stime) / clock_ticks,
        rss_mib: kib("VmRSS:")? / 1024.0,
        peak_rss_mib: kib("VmHWM:")? / 1024.0,
    })
}

/// Resets the process's peak RSS (VmHWM) to its current RSS.
pub fn reset_peak(pid: u32) {
    let _ = std::fs::write(format!("/proc/{pid}/clear_refs"), "5");
}

/// Clock ticks per second (`getconf CLK_TCK`, 100 on Linux in practice).
pub fn clock_ticks() -> f64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// The audit log's size now; requests logged after it are read with
/// [`audit_since`].
pub fn audit_mark(path: &Path) -> u64 {
    std::fs::metadata(path).map(|m| m.len()).unwrap_or(0)
}

/// The audit log from byte `offset` on (only that part is read: the log
/// grows to hundreds of megabytes over a full run).
pub fn audit_since(path: &Path, offset: u64) -> String {
    use std::io::{Read, Seek, SeekFrom};
    let mut bytes = Vec::new();
    if let Ok(mut file) = std::fs::File::open(path)
        && file.seek(SeekFrom::Start(offset)).is_ok()
    {
        let _ = file.read_to_end(&mut bytes);
    }
    String::from_utf8_lossy(&bytes).into_owned()
}

/// One request of the audit log.
struct Request {
    /// "verb resource" (with "/subresource" when there is one).
    key: String,
    resource: String,
    object: String,
    body: Option<serde_json::Value>,
    /// The API server's response code, where the audit log has it.
    code: Option<u64>,
}

/// The requests in audit-log `lines` whose User-Agent contains
/// `user_agent`, once per request (audit ID).
fn requests(lines: &str, user_agent: &str) -> Vec<Request> {
    // Where each audit ID's request is in `out`: its later stages add
    // the response code.
    let mut seen: HashMap<String, usize> = HashMap::new();
    let mut out: Vec<Request> = Vec::new();
    for line in lines.lines() {
        let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else {
            continue;
        };
        let agent = event["userAgent"].as_str().unwrap_or_default();
        if !agent.contains(user_agent) {
            continue;
        }
        let id = event["auditID"].as_str().unwrap_or_default().to_string();
        let code = event["responseStatus"]["code"].as_u64();
        if let Some(&at) = seen.get(&id) {
            out[at].code = out[at].code.or(code);
            continue;
        }
        seen.insert(id, out.len());
        let verb = event["verb"].as_str().unwrap_or("?");
        let o = &event["objectRef"];
        let resource = o["resource"]
            .as_str()
            .unwrap_or_else(|| event["requestURI"].as_str().unwrap_or("?"))
            .to_string();
        let sub = o["subresource"]
            .as_str()
            .map(|s| format!("/{s}"))
            .unwrap_or_default();
        out.push(Request {
            key: format!("{verb} {resource}{sub}"),
            object: format!(
                "{}/{}",
                o["namespace"].as_str().unwrap_or_default(),
                o["name"].as_str().unwrap_or_default()
            ),
            resource,
            body: Some(event["requestObject"].clone()).filter(|b| !b.is_null()),
            code,
        });
    }
    out
}

/// Counts the requests in audit-log `lines` whose User-Agent contains
/// `user_agent`, once per request (audit ID), keyed by "verb resource"
/// (with "/subresource" when there is one).
pub fn count_requests(lines: &str, user_agent: &str) -> BTreeMap<String, u64> {
    let mut counts = BTreeMap::new();
    for r in requests(lines, user_agent) {
        *counts.entry(r.key).or_insert(0) += 1;
    }
    counts
}

/// The writes in audit-log `lines` by `user_agent`, other than to Leases,
/// once per request: "verb resource namespace/name -> code", with the
/// request body where the audit policy logged it.
pub fn object_writes(lines: &str, user_agent: &str) -> Vec<String> {
    requests(lines, user_agent)
        .into_iter()
        .filter(|r| is_write(&r.key) && r.resource != "leases")
        .map(|r| {
            let code = r.code.map_or("?".to_string(), |c| c.to_string());
            match r.body {
                Some(body) => format!("{} {} -> {code}: {body}", r.key, r.object),
                None => format!("{} {} -> {code}", r.key, r.object),
            }
        })
        .collect()
}

/// Whether a request key from [`count_requests`] is a write.
pub fn is_write(key: &str) -> bool {
    matches!(
        key.split(' ').next(),
        Some("create" | "update" | "patch" | "delete" | "deletecollection")
    )
}

/// The order guarantee of deletion: every owner's delete event comes after
/// the delete events of all of its Pods. Returns (owners checked, owners
/// whose deletion came before one of their Pods' or could not be ordered).
pub fn deletion_order(owners: &[Gone], pods: &[Gone]) -> (usize, usize) {
    let mut last_pod: HashMap<&str, Option<u64>> = HashMap::new();
    for pod in pods {
        if let Some(owner) = pod.owner.as_deref() {
            let slot = last_pod.entry(owner).or_insert(Some(0));
            *slot = match (*slot, pod.resource_version) {
                (Some(a), Some(b)) => Some(a.max(b)),
                _ => None,
            };
        }
    }
    let mut violations = 0;
    for owner in owners {
        let ok = match (owner.resource_version, last_pod.get(owner.uid.as_str())) {
            (Some(_), None) => true,
            (Some(owner_rv), Some(Some(pod_rv))) => owner_rv > *pod_rv,
            _ => false,
        };
        if !ok {
            violations += 1;
        }
    }
    (owners.len(), violations)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let samples: Vec<f64> = (1..=100).rev().map(f64::from).collect();
        let p = percentiles(&samples);
        assert_eq!((p.p50, p.p90, p.p99, p.max), (50.0, 90.0, 99.0, 100.0));
        let p = percentiles(&[3.0]);
        assert_eq!((p.p50, p.p99), (3.0, 3.0));
        assert_eq!(percentiles(&[]), Percentiles::default());
        let p = percentiles(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 10.0]);
        assert_eq!((p.p50, p.p90, p.p99), (5.0, 9.0, 10.0));
    }

    #[test]
    fn parses_proc_files() {
        let stat = "4242 (pod keeper) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 9 0 100 1000 200";
        let status = "Name:\tpodkeeper\nVmHWM:\t   20480 kB\nVmRSS:\t   10240 kB\n";
        let s = parse_proc(stat, status, 100.0).unwrap();
        assert_eq!(s.cpu_s, 3.0);
        assert_eq!(s.rss_mib, 10.0);
        assert_eq!(s.peak_rss_mib, 20.0);
    }

    #[test]
    fn counts_each_request_once_by_verb_and_resource() {
        let log = r#"{"auditID":"a","stage":"ResponseStarted","verb":"watch","userAgent":"podkeeper/0.1.0","objectRef":{"resource":"pods"}}
{"auditID":"a","stage":"ResponseComplete","verb":"watch","userAgent":"podkeeper/0.1.0","objectRef":{"resource":"pods"}}
{"auditID":"b","stage":"ResponseComplete","verb":"patch","userAgent":"podkeeper/0.1.0","objectRef":{"resource":"redis","subresource":"status"}}
{"auditID":"c","stage":"ResponseComplete","verb":"update","userAgent":"podkeeper/0.1.0","objectRef":{"resource":"leases"}}
{"auditID":"d","stage":"ResponseComplete","verb":"create","userAgent":"kube-controller-manager/v1.37.2","objectRef":{"resource":"pods"}}
not json
"#;
        let counts = count_requests(log, "podkeeper/");
        assert_eq!(
            counts.into_iter().collect::<Vec<_>>(),
            vec![
                ("patch redis/status".to_string(), 1),
                ("update leases".to_string(), 1),
                ("watch pods".to_string(), 1)
            ]
        );
        assert!(is_write("patch redis/status"));
        assert_eq!(
            object_writes(
                r#"{"auditID":"b","verb":"patch","userAgent":"podkeeper/0.1.0","objectRef":{"resource":"redises","subresource":"status","namespace":"ns","name":"r1"},"requestObject":{"status":{"readyReplicas":3}}}
{"auditID":"b","verb":"patch","userAgent":"podkeeper/0.1.0","objectRef":{"resource":"redises","subresource":"status","namespace":"ns","name":"r1"},"responseStatus":{"code":409}}
{"auditID":"c","verb":"update","userAgent":"podkeeper/0.1.0","objectRef":{"resource":"leases","namespace":"ns","name":"podkeeper"}}
{"auditID":"e","verb":"delete","userAgent":"podkeeper/0.1.0","objectRef":{"resource":"pods","namespace":"ns","name":"p"}}
{"auditID":"f","verb":"get","userAgent":"podkeeper/0.1.0","objectRef":{"resource":"pods","namespace":"ns","name":"p"}}"#,
                "podkeeper/"
            ),
            vec![
                r#"patch redises/status ns/r1 -> 409: {"status":{"readyReplicas":3}}"#.to_string(),
                "delete pods ns/p -> ?".to_string()
            ]
        );
        assert!(!is_write("watch pods"));
        assert!(!is_write("list pods"));
    }

    fn gone(uid: &str, owner: Option<&str>, rv: Option<u64>) -> Gone {
        Gone {
            uid: uid.into(),
            namespace: "ns".into(),
            owner: owner.map(Into::into),
            resource_version: rv,
            terminating_at: None,
            at: None,
        }
    }

    #[test]
    fn an_owner_deleted_before_its_pods_is_a_violation() {
        let pods = [
            gone("p1", Some("a"), Some(10)),
            gone("p2", Some("a"), Some(12)),
            gone("p3", Some("b"), Some(20)),
            gone("p4", Some("c"), None),
        ];
        let owners = [
            gone("a", None, Some(13)),
            gone("b", None, Some(19)),
            gone("c", None, Some(30)),
            gone("d", None, Some(5)),
            gone("e", None, None),
        ];
        // a after its Pods; b before one; c unordered; d had no Pods; e unknown.
        assert_eq!(deletion_order(&owners, &pods), (5, 3));
    }
}
