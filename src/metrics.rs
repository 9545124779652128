//! Prometheus metrics, named as controller-runtime names them so that
//! existing dashboards work unchanged. Every label takes values from a fixed
//! set (controller names, results, operations), so cardinality is bounded.
//! Kinds add collectors of their own (the Redis metrics,
//! [`crate::redis::metrics`]) with [`Metrics::with_collectors`].

use std::sync::Arc;

use prometheus_client::collector::Collector;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ControllerLabel {
    controller: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ResultLabels {
    controller: &'static str,
    result: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ErrorLabels {
    controller: &'static str,
    reason: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OperationLabels {
    controller: &'static str,
    operation: &'static str,
}

/// The operator's metrics and the registry that renders them.
pub struct Metrics {
    registry: Registry,
    reconcile_total: Family<ResultLabels, Counter>,
    reconcile_errors: Family<ErrorLabels, Counter>,
    reconcile_time: Family<ControllerLabel, Histogram>,
    pods_created: Family<ControllerLabel, Counter>,
    pods_deleted: Family<ControllerLabel, Counter>,
    pod_failures: Family<OperationLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let mut registry = Registry::default();
        let reconcile_total = Family::<ResultLabels, Counter>::default();
        let reconcile_errors = Family::<ErrorLabels, Counter>::default();
        let reconcile_time = Family::<ControllerLabel, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 16))
        });
        let pods_created = Family::<ControllerLabel, Counter>::default();
        let pods_deleted = Family::<ControllerLabel, Counter>::default();
        let pod_failures = Family::<OperationLabels, Counter>::default();
        {
            let cr = registry.sub_registry_with_prefix("controller_runtime");
            cr.register(
                "reconcile",
                "Total number of reconciliations per controller, by result",
                reconcile_total.clone(),
            );
            cr.register(
                "reconcile_errors",
                "Total number of reconciliation errors per controller, by reason",
                reconcile_errors.clone(),
            );
            cr.register(
                "reconcile_time_seconds",
                "Length of time per reconciliation per controller",
                reconcile_time.clone(),
            );
        }
        {
            let pk = registry.sub_registry_with_prefix("podkeeper");
            pk.register("pods_created", "Pods created", pods_created.clone());
            pk.register("pods_deleted", "Pods deleted", pods_deleted.clone());
            pk.register(
                "pod_operation_failures",
                "Failed Pod creates and deletes, by operation",
                pod_failures.clone(),
            );
        }
        Metrics {
            registry,
            reconcile_total,
            reconcile_errors,
            reconcile_time,
            pods_created,
            pods_deleted,
            pod_failures,
        }
    }
}

impl Metrics {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The operator's metrics and, at each scrape, what `collectors` say.
    pub fn with_collectors(collectors: Vec<Box<dyn Collector>>) -> Arc<Self> {
        let mut m = Self::default();
        for c in collectors {
            m.registry.register_collector(c);
        }
        Arc::new(m)
    }

    /// `result` is `success`, `requeue` or `error`.
    pub fn reconciled(&self, controller: &'static str, result: &'static str, seconds: f64) {
        self.reconcile_total
            .get_or_create(&ResultLabels { controller, result })
            .inc();
        self.reconcile_time
            .get_or_create(&ControllerLabel { controller })
            .observe(seconds);
    }

    pub fn reconcile_error(&self, controller: &'static str, reason: &'static str) {
        self.reconcile_errors
            .get_or_create(&ErrorLabels { controller, reason })
            .inc();
    }

    pub fn pods_created(&self, controller: &'static str) {
        self.pods_created
            .get_or_create(&ControllerLabel { controller })
            .inc();
    }

    pub fn pods_deleted(&self, controller: &'static str) {
        self.pods_deleted
            .get_or_create(&ControllerLabel { controller })
            .inc();
    }

    pub fn pod_operation_failed(&self, controller: &'static str, operation: &'static str) {
        self.pod_failures
            .get_or_create(&OperationLabels {
                controller,
                operation,
            })
            .inc();
    }

    /// The Prometheus text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut out, &self.registry);
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_controller_runtime_names() {
        let m = Metrics::default();
        m.reconciled("redis", "success", 0.01);
        m.reconcile_error("redis", "kube");
        m.pods_created("redis");
        let text = m.render();
        assert!(
            text.contains(
                r#"controller_runtime_reconcile_total{controller="redis",result="success"} 1"#
            ),
            "{text}"
        );
        assert!(text.contains(
            r#"controller_runtime_reconcile_errors_total{controller="redis",reason="kube"} 1"#
        ));
        assert!(text.contains("controller_runtime_reconcile_time_seconds_bucket"));
        assert!(text.contains(r#"podkeeper_pods_created_total{controller="redis"} 1"#));
    }
}
