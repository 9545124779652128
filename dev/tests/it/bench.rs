//! The benchmark at its smallest size, so that it never rots, and so that
//! its two guarantees are checked on every run: an idle operator writes
//! nothing, and no owner is deleted before its Pods.

use std::process::Command;

use crate::DEV_BIN;

#[test]
fn bench_quick_runs_every_stage_idles_without_writes_and_deletes_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(DEV_BIN)
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
    for section in [
        "### Convergence",
        "### Self-healing",
        "### Idle cost",
        "### The operator process",
        "### Scale-down",
        "podkeeper/ReplicaSet",
    ] {
        assert!(stdout.contains(section), "{section} missing:\n{stdout}");
    }
    let json = std::fs::read_to_string(dir.path().join("target/bench/report.json")).unwrap();
    let report: serde_json::Value = serde_json::from_str(&json).unwrap();

    let convergence = report["convergence"].as_array().unwrap();
    assert_eq!(convergence.len(), 4, "{report}");
    for s in convergence {
        assert_eq!(s["pods"], 60);
        let (exist, ready) = (
            s["all_exist_s"].as_f64().unwrap(),
            s["all_ready_s"].as_f64().unwrap(),
        );
        assert!(exist > 0.0 && ready >= exist, "{s}");
    }
    // The audit log attributes each controller's requests to it: at least
    // one create per Pod.
    for s in [&convergence[0], &convergence[1]] {
        assert!(s["requests"]["create pods"].as_u64().unwrap() >= 60, "{s}");
    }

    let healing = report["healing"].as_array().unwrap();
    assert_eq!(healing.len(), 2);
    for h in healing {
        assert_eq!(h["samples"], 10);
        assert!(
            h["ready"]["p50"].as_f64().unwrap() >= h["exists"]["p50"].as_f64().unwrap(),
            "{h}"
        );
    }

    let idle = &report["idle"];
    assert_eq!(idle["object_writes"], 0, "an idle operator wrote: {idle}");

    for t in report["teardown"].as_array().unwrap() {
        assert_eq!(t["order_checked"], 20, "{t}");
        assert_eq!(t["order_violations"], 0, "{t}");
    }
    assert!(
        report["operator"]["convergence_peak_rss_mib"]
            .as_f64()
            .unwrap()
            > 1.0
    );
}
