//! promtool, to test the alerting rules of `manifests/monitoring/`
//! (`promtool test rules`): built from the Prometheus module into
//! podkeeper's cache like the other Go tools, with every service-discovery
//! plugin left out (`remove_all_sd`: promtool's rule tests need none, and
//! they are most of its build).

use std::path::PathBuf;

use crate::localcluster::Error;
use crate::localcluster::binaries::{self, GoBuild, build_if_missing};

/// The Prometheus Go module's version (Prometheus 3 publishes its module
/// as v0.3xx.y).
pub const PROMETHEUS_MODULE: &str = "0.316.0";

/// promtool, built if missing (progress on stderr).
pub fn ensure_promtool() -> Result<PathBuf, Error> {
    let root = binaries::cache_root();
    let mut b = GoBuild::new(
        format!("promtool-v{PROMETHEUS_MODULE}"),
        &[format!(
            "github.com/prometheus/prometheus v{PROMETHEUS_MODULE}"
        )],
        &["github.com/prometheus/prometheus/cmd/promtool"],
    );
    b.tags = vec!["remove_all_sd".into()];
    Ok(build_if_missing(&root, b)?.join("promtool"))
}
