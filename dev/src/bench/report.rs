//! The benchmark's report: JSON for machines, Markdown for people.

use std::collections::BTreeMap;

use serde::Serialize;

use super::measure::{Percentiles, is_write};

/// Who is measured.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Role {
    #[default]
    Podkeeper,
    ReplicaSet,
    Ceiling,
    ReplicaSetDefaultQps,
}

/// Time to converge N×R Pods, for one contender.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Convergence {
    pub name: String,
    pub role: Role,
    /// 1 for the first round.
    pub round: u32,
    pub pods: usize,
    pub all_exist_s: f64,
    pub all_ready_s: f64,
    /// Every owner's status shows its Pods ready (controllers only).
    pub status_ready_s: Option<f64>,
    /// Every owner's Services exist (controllers only): podkeeper applies a
    /// Redis's two Services itself, beside its Pods; the bench's driver
    /// creates the ReplicaSet's before it waits for any Pod.
    pub services_s: Option<f64>,
    /// The controller's API requests during the stage, by verb and resource.
    pub requests: BTreeMap<String, u64>,
    /// Where each Pod's time went, as the watch saw it.
    pub phases: Phases,
}

/// Per-Pod latencies: from first seen to bound by the scheduler, and from
/// bound to Ready (kwok's part).
#[derive(Clone, Debug, Default, Serialize)]
pub struct Phases {
    pub created_to_bound: Percentiles,
    pub bound_to_ready: Percentiles,
}

/// Self-healing latency after `kubectl delete pod`.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Healing {
    pub name: String,
    pub samples: usize,
    /// From the delete call returning until the replacement exists.
    pub exists: Percentiles,
    /// ... until the replacement is Ready.
    pub ready: Percentiles,
}

/// The operator's requests while nothing changes.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Idle {
    pub window_s: f64,
    pub requests: BTreeMap<String, u64>,
    /// Writes other than the leader-election Lease.
    pub object_writes: u64,
    pub lease_writes: u64,
    /// Each of those object writes: verb, resource, object and body.
    pub writes: Vec<String>,
}

/// The operator process's resources.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Usage {
    pub convergence_cpu_s: f64,
    pub convergence_peak_rss_mib: f64,
    pub idle_cpu_s: f64,
    pub idle_rss_mib: f64,
}

/// Scale-down and deletion, for one contender.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Teardown {
    pub name: String,
    pub role: Role,
    pub round: u32,
    /// From the first scale request until every owner has one Pod left and
    /// its status says so.
    pub scale_down_s: f64,
    /// From the first delete call until every owner and Pod is gone.
    pub delete_s: f64,
    /// Owners checked for "gone only after its Pods", and violations.
    pub order_checked: usize,
    pub order_violations: usize,
    /// The controller's API requests while scaling down, and while
    /// deleting.
    pub scale_down_requests: BTreeMap<String, u64>,
    pub delete_requests: BTreeMap<String, u64>,
    /// The scaled-down Pods, as the watch saw them (seconds): from the
    /// first scale request to Terminating (the controller's delete), and
    /// from Terminating to gone (kwok's removal).
    pub scale_down_to_terminating: Percentiles,
    pub terminating_to_gone: Percentiles,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub objects: usize,
    pub rounds: u32,
    pub replicas: usize,
    pub kubernetes: String,
    pub etcd: String,
    pub kwok: String,
    pub convergence: Vec<Convergence>,
    pub healing: Vec<Healing>,
    pub idle: Idle,
    pub operator: Usage,
    pub teardown: Vec<Teardown>,
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "-".into()
    }
}

/// Event writes (creates and patches, core and events.k8s.io alike) in
/// `requests`, per 1000 owner objects.
pub fn events_per_1000(requests: &BTreeMap<String, u64>, objects: usize) -> f64 {
    let writes: u64 = requests
        .iter()
        .filter(|(k, _)| {
            let mut words = k.split(' ');
            matches!(words.next(), Some("create" | "patch" | "update"))
                && words.next() == Some("events")
        })
        .map(|(_, v)| v)
        .sum();
    if objects == 0 {
        return 0.0;
    }
    writes as f64 * 1000.0 / objects as f64
}

/// The median, least and greatest of `values`.
fn spread(values: &[f64]) -> Option<(f64, f64, f64)> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    let median = if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    };
    Some((median, v[0], v[n - 1]))
}

fn opt(v: Option<f64>) -> String {
    v.map(|v| format!("{v:.2}")).unwrap_or_else(|| "-".into())
}

fn requests_summary(requests: &BTreeMap<String, u64>) -> String {
    if requests.is_empty() {
        return "-".into();
    }
    let total: u64 = requests.values().sum();
    let writes: u64 = requests
        .iter()
        .filter(|(k, _)| is_write(k))
        .map(|(_, v)| v)
        .sum();
    format!("{total} ({writes} writes)")
}

/// Displays a report as Markdown tables.
pub struct Markdown<'a>(pub &'a Report);

impl std::fmt::Display for Markdown<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&markdown(self.0))
    }
}

fn markdown(r: &Report) -> String {
    let mut out = format!(
        "podkeeper bench: {} objects x {} replicas = {} Pods, {} round(s); Kubernetes v{}, etcd v{}, kwok v{}, 3 kwok nodes.\n\n",
        r.objects,
        r.replicas,
        r.objects * r.replicas,
        r.rounds.max(1),
        r.kubernetes,
        r.etcd,
        r.kwok
    );
    let label = |name: &str, round: u32| {
        if r.rounds > 1 {
            format!("{name}, round {round}")
        } else {
            name.to_string()
        }
    };
    let find = |role: Role, round: u32| {
        r.convergence
            .iter()
            .find(|c| c.role == role && c.round == round)
    };
    let teardown = |role: Role, round: u32| {
        r.teardown
            .iter()
            .find(|t| t.role == role && t.round == round)
    };
    out.push_str("### Convergence\n\n| contender | all Pods exist (s) | all Pods Ready (s) | every status ready (s) | every Service exists (s) | controller's requests |\n|---|---|---|---|---|---|\n");
    for s in &r.convergence {
        out.push_str(&format!(
            "| {} | {:.2} | {:.2} | {} | {} | {} |\n",
            label(&s.name, s.round),
            s.all_exist_s,
            s.all_ready_s,
            opt(s.status_ready_s),
            opt(s.services_s),
            requests_summary(&s.requests)
        ));
    }
    if let (Some(pk), Some(rs)) = (find(Role::Podkeeper, 1), find(Role::ReplicaSet, 1)) {
        out.push_str(&format!(
            "\nRatios of the first round (below 1: podkeeper faster): podkeeper/ReplicaSet: exist {}, ready {}, status {}",
            ratio(pk.all_exist_s, rs.all_exist_s),
            ratio(pk.all_ready_s, rs.all_ready_s),
            ratio(pk.status_ready_s.unwrap_or(0.0), rs.status_ready_s.unwrap_or(0.0)),
        ));
        if let Some(ceiling) = find(Role::Ceiling, 1) {
            out.push_str(&format!(
                "; podkeeper/ceiling: exist {}, ready {}",
                ratio(pk.all_exist_s, ceiling.all_exist_s),
                ratio(pk.all_ready_s, ceiling.all_ready_s),
            ));
        }
        if let Some(default) = find(Role::ReplicaSetDefaultQps, 1) {
            out.push_str(&format!(
                "; podkeeper/ReplicaSet at default QPS: exist {}, ready {}",
                ratio(pk.all_exist_s, default.all_exist_s),
                ratio(pk.all_ready_s, default.all_ready_s),
            ));
        }
        out.push_str(".\n");
    }
    out.push_str("\nPer Pod, as the watch saw it (p50 / p99, ms):\n\n| contender | created to bound (scheduler) | bound to Ready (kwok) |\n|---|---|---|\n");
    for s in &r.convergence {
        out.push_str(&format!(
            "| {} | {:.0} / {:.0} | {:.0} / {:.0} |\n",
            label(&s.name, s.round),
            s.phases.created_to_bound.p50 * 1e3,
            s.phases.created_to_bound.p99 * 1e3,
            s.phases.bound_to_ready.p50 * 1e3,
            s.phases.bound_to_ready.p99 * 1e3
        ));
    }
    if let Some(pk) = find(Role::Podkeeper, 1) {
        out.push_str(&format!(
            "\npodkeeper's requests while converging: {}\n",
            list(&pk.requests)
        ));
    }
    if let Some(rs) = find(Role::ReplicaSet, 1) {
        out.push_str(&format!(
            "\nThe ReplicaSet controller's requests while converging: {}\n",
            list(&rs.requests)
        ));
    }
    out.push_str("\n### Self-healing (delete one Pod at a time)\n\n| contender | samples | exists p50/p90/p99 (ms) | Ready p50/p90/p99 (ms) |\n|---|---|---|---|\n");
    let ms = |p: &Percentiles| {
        format!(
            "{:.0} / {:.0} / {:.0}",
            p.p50 * 1e3,
            p.p90 * 1e3,
            p.p99 * 1e3
        )
    };
    for h in &r.healing {
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            h.name,
            h.samples,
            ms(&h.exists),
            ms(&h.ready)
        ));
    }
    out.push_str(&format!(
        "\n### Idle cost ({:.0} s, everything converged)\n\nWrites to objects: {}; Lease renewals (leader election): {}; all requests: {}.\n",
        r.idle.window_s,
        r.idle.object_writes,
        r.idle.lease_writes,
        if r.idle.requests.is_empty() {
            "none".to_string()
        } else {
            list(&r.idle.requests)
        }
    ));
    for w in &r.idle.writes {
        out.push_str(&format!("- {w}\n"));
    }
    out.push_str(&format!(
        "\n### The operator process\n\nConvergence: {:.1} CPU s, peak RSS {:.1} MiB. Idle: {:.2} CPU s over the window, RSS {:.1} MiB.\n",
        r.operator.convergence_cpu_s,
        r.operator.convergence_peak_rss_mib,
        r.operator.idle_cpu_s,
        r.operator.idle_rss_mib
    ));
    out.push_str("\n### Scale-down (R to 1) and deletion\n\n| contender | scale down (s) | requests | delete all (s) | requests | owners gone only after their Pods |\n|---|---|---|---|---|---|\n");
    for t in &r.teardown {
        out.push_str(&format!(
            "| {} | {:.2} | {} | {:.2} | {} | {} of {} |\n",
            label(&t.name, t.round),
            t.scale_down_s,
            requests_summary(&t.scale_down_requests),
            t.delete_s,
            requests_summary(&t.delete_requests),
            t.order_checked - t.order_violations,
            t.order_checked
        ));
    }
    for t in r.teardown.iter().filter(|t| t.round == 1) {
        out.push_str(&format!(
            "\n{}'s requests while scaling down: {}\n",
            t.name,
            list(&t.scale_down_requests)
        ));
    }
    out.push_str("\nEach scaled-down Pod as the watch saw it (p50 / p90 / p99, ms):\n\n| contender | first scale request to Terminating (the controller's delete) | Terminating to gone (kwok) |\n|---|---|---|\n");
    for t in &r.teardown {
        out.push_str(&format!(
            "| {} | {} | {} |\n",
            label(&t.name, t.round),
            ms(&t.scale_down_to_terminating),
            ms(&t.terminating_to_gone)
        ));
    }
    out.push_str("\n### Events per 1000 objects\n\nEvent writes (creates and patches) by the controller, from the audit log.\n\n| contender | converge | scale down | delete |\n|---|---|---|---|\n");
    for s in r
        .convergence
        .iter()
        .filter(|c| matches!(c.role, Role::Podkeeper | Role::ReplicaSet))
    {
        let t = teardown(s.role, s.round);
        let per = |m: Option<&BTreeMap<String, u64>>| {
            m.map(|m| format!("{:.0}", events_per_1000(m, r.objects)))
                .unwrap_or_else(|| "-".into())
        };
        out.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            label(&s.name, s.round),
            per(Some(&s.requests)),
            per(t.map(|t| &t.scale_down_requests)),
            per(t.map(|t| &t.delete_requests)),
        ));
    }
    out.push_str("\n### podkeeper / ReplicaSet, per round (below 1: podkeeper faster)\n\n| round | all Pods exist | all Pods Ready | every status ready | every Service exists | scale down | delete all |\n|---|---|---|---|---|---|---|\n");
    let mut columns: [Vec<f64>; 6] = Default::default();
    for round in 1..=r.rounds.max(1) {
        let (Some(pk), Some(rs)) = (find(Role::Podkeeper, round), find(Role::ReplicaSet, round))
        else {
            continue;
        };
        let mut values = vec![
            pk.all_exist_s / rs.all_exist_s,
            pk.all_ready_s / rs.all_ready_s,
            pk.status_ready_s.unwrap_or(f64::NAN) / rs.status_ready_s.unwrap_or(f64::NAN),
            pk.services_s.unwrap_or(f64::NAN) / rs.services_s.unwrap_or(f64::NAN),
        ];
        match (
            teardown(Role::Podkeeper, round),
            teardown(Role::ReplicaSet, round),
        ) {
            (Some(a), Some(b)) => {
                values.push(a.scale_down_s / b.scale_down_s);
                values.push(a.delete_s / b.delete_s);
            }
            _ => values.extend([f64::NAN, f64::NAN]),
        }
        let cells: Vec<String> = values
            .iter()
            .map(|v| {
                if v.is_finite() {
                    format!("{v:.2}")
                } else {
                    "-".into()
                }
            })
            .collect();
        out.push_str(&format!("| {round} | {} |\n", cells.join(" | ")));
        for (column, v) in columns.iter_mut().zip(values) {
            column.push(v);
        }
    }
    if r.rounds > 1 {
        let cells: Vec<String> = columns
            .iter()
            .map(|c| match spread(c) {
                Some((median, lo, hi)) => format!("{median:.2} ({lo:.2}-{hi:.2})"),
                None => "-".into(),
            })
            .collect();
        out.push_str(&format!(
            "| median (least-greatest) | {} |\n",
            cells.join(" | ")
        ));
    }
    out
}

fn list(requests: &BTreeMap<String, u64>) -> String {
    requests
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_count_creates_and_patches_of_either_api() {
        let requests: BTreeMap<String, u64> = [
            ("create events", 300),
            ("patch events", 100),
            ("create pods", 3000),
            ("list events", 7),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        assert_eq!(events_per_1000(&requests, 2000), 200.0);
        assert_eq!(events_per_1000(&requests, 0), 0.0);
    }

    #[test]
    fn spread_is_median_least_greatest() {
        assert_eq!(spread(&[3.0, 1.0, 2.0]), Some((2.0, 1.0, 3.0)));
        assert_eq!(
            spread(&[4.0, 1.0, f64::NAN, 2.0, 3.0]),
            Some((2.5, 1.0, 4.0))
        );
        assert_eq!(spread(&[]), None);
    }
}
