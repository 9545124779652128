//! Monitoring as code (`manifests/monitoring/`): the alerting rules fire
//! when, and only when, `alerts_test.yaml` says, under `promtool test
//! rules` (promtool from Debian's prometheus package); every alert has
//! a test; the dashboard and rules read only metrics the operator serves
//! (the kind test `kind_metrics::` checks them against a real scrape); the
//! component renders with kustomize.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::Command;

fn monitoring() -> &'static Path {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/manifests/monitoring"))
}

fn yaml(file: &str) -> serde_yaml_ng::Value {
    let text = std::fs::read_to_string(monitoring().join(file)).unwrap();
    serde_yaml_ng::from_str(&text).unwrap()
}

/// The names of the alerts in the PrometheusRule.
fn alerts() -> BTreeSet<String> {
    yaml("prometheusrule.yaml")["spec"]["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap())
        .filter_map(|r| Some(r["alert"].as_str()?.to_string()))
        .collect()
}

fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?} failed:\n{text}");
    text
}

#[test]
fn the_alerts_fire_as_their_tests_say_under_promtool() {
    let promtool = podkeeper_dev::monitoring::ensure_promtool()
        .unwrap_or_else(|e| panic!("building promtool: {e}"));
    // promtool reads a rule file: the PrometheusRule's spec.
    let dir = tempfile::tempdir().unwrap();
    let rules = dir.path().join("prometheusrule.rules.yaml");
    std::fs::write(
        &rules,
        serde_yaml_ng::to_string(&yaml("prometheusrule.yaml")["spec"]).unwrap(),
    )
    .unwrap();
    let tests = dir.path().join("alerts_test.yaml");
    std::fs::copy(monitoring().join("alerts_test.yaml"), &tests).unwrap();
    let checked = run(Command::new(&promtool).args(["check", "rules"]).arg(&rules));
    eprintln!("{checked}");
    let tested = run(Command::new(&promtool).args(["test", "rules"]).arg(&tests));
    eprintln!("{tested}");
    assert!(tested.contains("SUCCESS"), "{tested}");

    // Every alert is tested.
    let tested: BTreeSet<String> = yaml("alerts_test.yaml")["tests"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|t| t["alert_rule_test"].as_sequence().unwrap())
        .map(|a| a["alertname"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(alerts(), tested, "alerts without a test, or tests of none");
}

#[test]
fn the_component_renders_with_kustomize_into_a_podmonitor_rules_and_a_dashboard() {
    let text = run(Command::new("kubectl").arg("kustomize").arg(monitoring()));
    let kinds: BTreeSet<String> = serde_yaml_ng::Deserializer::from_str(&text)
        .map(|d| {
            let v: serde_yaml_ng::Value = serde::Deserialize::deserialize(d).unwrap();
            v["kind"].as_str().unwrap().to_string()
        })
        .collect();
    assert_eq!(
        kinds,
        ["ConfigMap", "PodMonitor", "PrometheusRule"]
            .map(String::from)
            .into(),
        "{text}"
    );
    // The dashboard is JSON Grafana can load: panels, each with a query.
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(monitoring().join("dashboard.json")).unwrap(),
    )
    .unwrap();
    let panels = dashboard["panels"].as_array().unwrap();
    assert!(!panels.is_empty());
    for p in panels {
        assert!(
            p["targets"][0]["expr"]
                .as_str()
                .is_some_and(|e| !e.is_empty()),
            "{p}"
        );
    }
}
