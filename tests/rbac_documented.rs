//! The RBAC the manifests grant is the RBAC docs/operations.md documents,
//! rule for rule: every (API group, resource) with the same verbs, each
//! with its reason, and nothing the manifests do not grant.

use std::collections::BTreeMap;
use std::path::Path;

/// (API group, resource) -> verbs, sorted.
type Grants = BTreeMap<(String, String), Vec<String>>;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// What a Role or ClusterRole manifest grants.
fn granted(file: &str) -> Grants {
    let text = std::fs::read_to_string(root().join(file)).unwrap();
    let role = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| serde::Deserialize::deserialize(d).unwrap())
        .find(|d: &serde_yaml_ng::Value| matches!(d["kind"].as_str(), Some("Role" | "ClusterRole")))
        .unwrap_or_else(|| panic!("{file} holds no Role"));
    let mut out = Grants::new();
    for rule in role["rules"].as_sequence().unwrap() {
        let list = |key: &str| -> Vec<String> {
            rule[key]
                .as_sequence()
                .unwrap()
                .iter()
                .map(|v| v.as_str().unwrap().to_string())
                .collect()
        };
        let mut verbs = list("verbs");
        verbs.sort();
        for group in list("apiGroups") {
            for resource in list("resources") {
                let old = out.insert((group.clone(), resource), verbs.clone());
                assert!(old.is_none(), "{file}: a resource granted twice");
            }
        }
    }
    out
}

/// What the table under `heading` (a line of docs/operations.md) says is
/// granted, each row with a reason.
fn documented(heading: &str) -> Grants {
    let text = std::fs::read_to_string(root().join("docs/operations.md")).unwrap();
    let table = text
        .split_once(heading)
        .unwrap_or_else(|| panic!("docs/operations.md has no {heading:?}"))
        .1;
    let mut out = Grants::new();
    for line in table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2)
    {
        let cells: Vec<&str> = line.trim_matches('|').split(" | ").map(str::trim).collect();
        assert_eq!(cells.len(), 4, "{line}");
        assert!(cells[3].len() > 10, "a rule without its reason: {line}");
        let group = if cells[0] == "\"\"" { "" } else { cells[0] };
        let split = |cell: &str| -> Vec<String> {
            let mut v: Vec<String> = cell.split(", ").map(str::to_string).collect();
            v.sort();
            v
        };
        for resource in split(cells[1]) {
            out.insert((group.to_string(), resource), split(cells[2]));
        }
    }
    out
}

#[test]
fn every_rule_the_manifests_grant_is_documented_with_its_reason_and_no_other() {
    assert_eq!(
        documented("ClusterRole `podkeeper`"),
        granted("manifests/rbac/cluster_role.yaml")
    );
    assert_eq!(
        documented("Role `podkeeper-leader-election`"),
        granted("manifests/rbac/leader_election_role.yaml")
    );
}
