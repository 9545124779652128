//! The benchmark's report: JSON for machines, Markdown for people.

use std::collections::BTreeMap;

use serde::Serialize;

use super::measure::{Percentiles, is_write};

/// Time to converge N×R Pods, for one contender.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Convergence {
    pub name: String,
    pub pods: usize,
    pub all_exist_s: f64,
    pub all_ready_s: f64,
    /// Every owner's status shows its Pods ready (controllers only).
    pub status_ready_s: Option<f64>,
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
    /// From the first scale request until every owner has one Pod left and
    /// its status says so.
    pub scale_down_s: f64,
    /// From the first delete call until every owner and Pod is gone.
    pub delete_s: f64,
    /// Owners checked for "gone only after its Pods", and violations.
    pub order_checked: usize,
    pub order_violations: usize,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct Report {
    pub objects: usize,
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
        "podkeeper bench: {} objects x {} replicas = {} Pods; Kubernetes v{}, etcd v{}, kwok v{}, 3 kwok nodes.\n\n",
        r.objects,
        r.replicas,
        r.objects * r.replicas,
        r.kubernetes,
        r.etcd,
        r.kwok
    );
    out.push_str("### Convergence\n\n| contender | all Pods exist (s) | all Pods Ready (s) | every status ready (s) | controller's requests |\n|---|---|---|---|---|\n");
    for s in &r.convergence {
        out.push_str(&format!(
            "| {} | {:.2} | {:.2} | {} | {} |\n",
            s.name,
            s.all_exist_s,
            s.all_ready_s,
            opt(s.status_ready_s),
            requests_summary(&s.requests)
        ));
    }
    if let [pk, rs, ceiling, rest @ ..] = &r.convergence[..] {
        out.push_str(&format!(
            "\nRatios (below 1: podkeeper faster): podkeeper/ReplicaSet: exist {}, ready {}, status {}; podkeeper/ceiling: exist {}, ready {}",
            ratio(pk.all_exist_s, rs.all_exist_s),
            ratio(pk.all_ready_s, rs.all_ready_s),
            ratio(pk.status_ready_s.unwrap_or(0.0), rs.status_ready_s.unwrap_or(0.0)),
            ratio(pk.all_exist_s, ceiling.all_exist_s),
            ratio(pk.all_ready_s, ceiling.all_ready_s),
        ));
        if let Some(default) = rest.first() {
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
            s.name,
            s.phases.created_to_bound.p50 * 1e3,
            s.phases.created_to_bound.p99 * 1e3,
            s.phases.bound_to_ready.p50 * 1e3,
            s.phases.bound_to_ready.p99 * 1e3
        ));
    }
    if let Some(pk) = r.convergence.first() {
        out.push_str("\npodkeeper's requests while converging: ");
        let list: Vec<String> = pk
            .requests
            .iter()
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        out.push_str(&list.join(", "));
        out.push('\n');
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
            r.idle
                .requests
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        }
    ));
    out.push_str(&format!(
        "\n### The operator process\n\nConvergence: {:.1} CPU s, peak RSS {:.1} MiB. Idle: {:.2} CPU s over the window, RSS {:.1} MiB.\n",
        r.operator.convergence_cpu_s,
        r.operator.convergence_peak_rss_mib,
        r.operator.idle_cpu_s,
        r.operator.idle_rss_mib
    ));
    out.push_str("\n### Scale-down (R to 1) and deletion\n\n| contender | scale down (s) | delete all (s) | owners gone only after their Pods |\n|---|---|---|---|\n");
    for t in &r.teardown {
        out.push_str(&format!(
            "| {} | {:.2} | {:.2} | {} of {} |\n",
            t.name,
            t.scale_down_s,
            t.delete_s,
            t.order_checked - t.order_violations,
            t.order_checked
        ));
    }
    out
}
