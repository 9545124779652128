//! NetworkPolicy enforcement in a kind cluster, on request (`kind up
//! --network-policies`): kube-router as a firewall only (built from its Go
//! module, [`super::tools::ensure_network_policies_tool`]; its image,
//! [`super::images::network_policies_image`]), one Pod per node on the host
//! network, deployed from our own manifest (`network_policies/daemonset.yaml`).
//! Our Pod network (ptp) routes every Pod's traffic through its node's
//! netfilter, where kube-router's iptables rules and ipsets filter it.
//!
//! [`install`] is idempotent (server-side apply); it waits until every
//! node runs it.

use super::{Error, cluster, versions as v};

/// The manifest, with an `@IMAGE@` placeholder.
const MANIFEST: &str = include_str!("network_policies/daemonset.yaml");

/// Its DaemonSet, in kube-system.
pub const DAEMON_SET: &str = "network-policies";

/// The manifest for `image`. Pure.
fn manifest(image: &str) -> String {
    MANIFEST.replace("@IMAGE@", image)
}

/// Deploys it into cluster `name` and waits until every node runs it.
pub fn install(name: &str) -> Result<(), Error> {
    super::progress(&format!(
        "NetworkPolicies enforced by kube-router v{} (firewall only) on every node",
        v::KUBE_ROUTER
    ));
    cluster::apply(name, &manifest(&v::network_policies_image()))?;
    cluster::control_plane_kubectl(
        name,
        &[
            "-n",
            "kube-system",
            "rollout",
            "status",
            &format!("daemonset/{DAEMON_SET}"),
            "--timeout=300s",
        ],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_manifest_runs_the_built_image_privileged_on_the_host_network_of_every_node() {
        let m = manifest("registry.example/knp:v1");
        assert!(!m.contains("@IMAGE@"));
        let docs: Vec<serde_yaml_ng::Value> = serde_yaml_ng::Deserializer::from_str(&m)
            .map(serde::Deserialize::deserialize)
            .collect::<Result<_, _>>()
            .unwrap();
        let ds = docs
            .iter()
            .find(|d| d["kind"] == "DaemonSet")
            .expect("a DaemonSet");
        assert_eq!(ds["metadata"]["name"], DAEMON_SET);
        let spec = &ds["spec"]["template"]["spec"];
        assert_eq!(spec["hostNetwork"], true);
        assert_eq!(spec["tolerations"][0]["operator"], "Exists");
        let c = &spec["containers"][0];
        assert_eq!(c["image"], "registry.example/knp:v1");
        assert_eq!(c["securityContext"]["privileged"], true);
        assert!(docs.iter().any(|d| d["kind"] == "ClusterRole"));
    }
}
