//! The benchmark at its smallest size, so that it never rots.

use std::process::Command;

use crate::harness::BIN;

#[test]
fn bench_quick_runs_all_three_stages_and_writes_its_report() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(BIN)
        .args(["bench", "--quick"])
        .current_dir(dir.path())
        .output()
        .expect("run podkeeper bench");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bench failed: {}\n{}",
        stdout,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("| podkeeper (Redis) |"), "{stdout}");
    assert!(stdout.contains("podkeeper/ReplicaSet"), "{stdout}");
    let json = std::fs::read_to_string(dir.path().join("target/bench/convergence.json")).unwrap();
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();
    let stages = report["stages"].as_array().unwrap();
    assert_eq!(stages.len(), 3);
    for s in stages {
        assert_eq!(s["pods"], 60);
        let (exist, ready) = (
            s["all_exist_s"].as_f64().unwrap(),
            s["all_ready_s"].as_f64().unwrap(),
        );
        assert!(exist > 0.0 && ready >= exist, "{s}");
    }
}
