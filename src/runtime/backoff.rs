//! Per-object backoff, the one count of an object's failures: kube-runtime
//! has none of its own (kube-rs/kube#1916). A failed reconcile waits 0.5 s,
//! doubling to a minute, with jitter; a success starts the count over.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use kube::Resource;
use kube::runtime::controller::Action;
use rand::RngExt;

use crate::runtime::Error;

/// Failures per object (kind, namespace, name) since its last success.
#[derive(Default)]
pub struct Backoff {
    failures: Mutex<HashMap<(&'static str, String, String), u32>>,
}

impl Backoff {
    /// The error policy of every controller: logs real failures, then
    /// backs off per object (kube-runtime has none): [`backoff_delay`];
    /// cleanup that is only waiting for Pods retries every second.
    pub fn failed<K: Resource>(&self, kind: &'static str, obj: &K, error: &Error) -> Action {
        if error.is_waiting() {
            return Action::requeue(Duration::from_secs(1));
        }
        let meta = obj.meta();
        let namespace = meta.namespace.clone().unwrap_or_default();
        let name = meta.name.clone().unwrap_or_default();
        tracing::warn!(%namespace, %name, %error, "reconcile failed");
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        let n = failures.entry((kind, namespace, name)).or_insert(0);
        *n = n.saturating_add(1);
        let jitter = rand::rng().random_range(0.8..1.2);
        Action::requeue(backoff_delay(*n, jitter))
    }

    /// Forgets the failure count after a successful reconcile.
    pub fn succeeded(&self, kind: &'static str, namespace: &str, name: &str) {
        let mut failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures.remove(&(kind, namespace.to_string(), name.to_string()));
    }

    /// The failures counted for an object.
    pub fn failures(&self, kind: &'static str, namespace: &str, name: &str) -> Option<u32> {
        let failures = self.failures.lock().unwrap_or_else(|e| e.into_inner());
        failures
            .get(&(kind, namespace.to_string(), name.to_string()))
            .copied()
    }
}

/// The first wait after a failure.
pub const BACKOFF_MIN: Duration = Duration::from_millis(500);
/// The longest wait between retries.
pub const BACKOFF_MAX: Duration = Duration::from_secs(60);

/// The wait before retry number `failures` (1 for the first): 0.5 s
/// doubling up to 60 s, times `jitter` (0.8 to 1.2, so that objects that
/// failed together do not retry together), never over 60 s.
pub fn backoff_delay(failures: u32, jitter: f64) -> Duration {
    let exp = failures.saturating_sub(1).min(16);
    let base = BACKOFF_MIN.saturating_mul(1u32 << exp).min(BACKOFF_MAX);
    base.mul_f64(jitter.clamp(0.5, 1.5)).min(BACKOFF_MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_from_half_a_second_to_a_minute() {
        let secs = |n| backoff_delay(n, 1.0).as_secs_f64();
        assert_eq!([secs(1), secs(2), secs(3), secs(4)], [0.5, 1.0, 2.0, 4.0]);
        assert_eq!(secs(8), 60.0);
        assert_eq!(secs(1000), 60.0);
        assert_eq!(backoff_delay(1, 0.8), Duration::from_millis(400));
        assert_eq!(
            backoff_delay(100, 1.2),
            BACKOFF_MAX,
            "jitter stays under the cap"
        );
    }
}
