//! The one place that pins the versions of the local control plane.
//!
//! Changing a version here changes the cache key, so the next run builds the
//! new binaries once and keeps the old ones untouched.

/// Kubernetes release whose kube-apiserver, kube-controller-manager and
/// kube-scheduler are built. Must match the `v1_XX` feature of k8s-openapi in
/// Cargo.toml.
pub const KUBERNETES: &str = "1.37.2";

/// etcd release (`go.etcd.io/etcd/server/v3`).
pub const ETCD: &str = "3.6.16";

/// kwok release (`sigs.k8s.io/kwok`), which simulates nodes and kubelets.
pub const KWOK: &str = "0.8.0";

/// The Go language version written into the wrapper modules.
pub const GO_DIRECTIVE: &str = "1.26.0";

/// `v0.X.Y`, the version of the staging modules (k8s.io/api, ...) that belong
/// to [`KUBERNETES`].
pub fn staging_version() -> String {
    let rest = KUBERNETES
        .split_once('.')
        .map(|(_, r)| r)
        .unwrap_or(KUBERNETES);
    format!("v0.{rest}")
}

/// `(major, minor)` of [`KUBERNETES`], as `kubectl version` reports them.
pub fn kubernetes_major_minor() -> (&'static str, &'static str) {
    let mut parts = KUBERNETES.split('.');
    (parts.next().unwrap_or("1"), parts.next().unwrap_or("0"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn staging_version_follows_kubernetes() {
        assert_eq!(staging_version(), format!("v0.{}", &KUBERNETES[2..]));
        let (major, minor) = kubernetes_major_minor();
        assert_eq!(
            format!("{major}.{minor}"),
            KUBERNETES.rsplit_once('.').unwrap().0
        );
    }
}
