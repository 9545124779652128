//! `podkeeper dev` as a new user runs it: on a machine where something
//! already listens on 8080 and 8081.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use kube::Api;
use kube::api::PostParams;
use podkeeper::api::Redis;
use serde_json::json;

use crate::DEV_BIN;
use crate::harness::{TestEnv, cluster, http_get, logs_dir, wait_for};

const TIMEOUT: Duration = Duration::from_secs(90);

/// Kills the process if the test fails before it stops it.
pub struct Guard(pub Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Holds `port` on all interfaces unless something else already does;
/// either way the port is busy afterwards.
fn occupy(port: u16) -> Option<std::net::TcpListener> {
    let held = std::net::TcpListener::bind(("0.0.0.0", port)).ok();
    assert!(
        std::net::TcpListener::bind(("0.0.0.0", port)).is_err(),
        "port {port} is busy"
    );
    held
}

/// The port of a printed URL such as `http://127.0.0.1:PORT/metrics`.
pub fn loopback_port(url: &str) -> u16 {
    let authority = url
        .strip_prefix("http://")
        .and_then(|rest| rest.split('/').next())
        .unwrap_or_else(|| panic!("not an http URL: {url}"));
    let (host, port) = authority.rsplit_once(':').expect("host:port");
    assert_eq!(host, "127.0.0.1", "dev serves on loopback only: {url}");
    port.parse().expect("a port")
}

/// Starts `podkeeper ARGS` (killed with this process, through setpriv
/// where there is one) with KUBECONFIG set to `kubeconfig` or unset, its
/// stderr in `log`; returns it, its stdin (closing it stops a
/// `--exit-on-stdin-eof` dev) and its stdout lines as they come.
pub fn spawn_dev(
    args: &[&str],
    kubeconfig: Option<&Path>,
    log: &Path,
) -> (
    Guard,
    std::process::ChildStdin,
    tokio::sync::mpsc::UnboundedReceiver<String>,
) {
    let stderr = std::fs::File::create(log).expect("dev log");
    let mut cmd = if Path::new("/usr/bin/setpriv").exists() {
        let mut c = Command::new("/usr/bin/setpriv");
        c.args(["--pdeathsig", "KILL", "--", DEV_BIN]);
        c
    } else {
        Command::new(DEV_BIN)
    };
    match kubeconfig {
        Some(path) => cmd.env("KUBECONFIG", path),
        None => cmd.env_remove("KUBECONFIG"),
    };
    let mut child = cmd
        .args(args)
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("RUST_LOG", "info")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(stderr)
        .spawn()
        .expect("spawn podkeeper");
    let stdin = child.stdin.take().expect("piped stdin");
    let stdout = child.stdout.take().expect("piped stdout");
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (Guard(child), stdin, rx)
}

/// Reads dev's stdout until it has printed where its metrics and probes
/// are (both on loopback); returns their ports and every line so far.
pub async fn endpoints(
    rx: &mut tokio::sync::mpsc::UnboundedReceiver<String>,
    log: &Path,
    timeout: Duration,
) -> (u16, u16, Vec<String>) {
    let (mut metrics, mut probes) = (None, None);
    let mut printed = Vec::new();
    while metrics.is_none() || probes.is_none() {
        let line = tokio::time::timeout(timeout, rx.recv())
            .await
            .unwrap_or_else(|_| panic!("dev printed its URLs within {timeout:?}: {printed:?}"))
            .unwrap_or_else(|| {
                panic!(
                    "dev exited; stdout: {printed:?}; log:\n{}",
                    std::fs::read_to_string(log).unwrap_or_default()
                )
            });
        if let Some(url) = line.strip_prefix("podkeeper: metrics at ") {
            metrics = Some(loopback_port(url));
        }
        if let Some(rest) = line.strip_prefix("podkeeper: probes at ") {
            probes = Some(loopback_port(rest.split_whitespace().next().unwrap()));
        }
        printed.push(line);
    }
    (metrics.unwrap(), probes.unwrap(), printed)
}

#[tokio::test]
#[cfg_attr(
    feature = "kind-e2e",
    ignore = "local-only: it runs its own `podkeeper dev` and counts the Pods that process creates; on kind the deployed operator reconciles the same namespace and creates some of them"
)]
async fn dev_serves_metrics_and_probes_on_free_loopback_ports_when_8080_is_busy() {
    let env = TestEnv::new("dev-ports").await;
    let _busy = (occupy(8080), occupy(8081));
    let log = logs_dir().join(format!("dev-{}.log", env.namespace));
    // With a kubeconfig configured, `dev` installs the CRDs there and runs
    // the operator against it; --namespace keeps it off other tests' objects.
    let (dev, stdin, mut rx) = spawn_dev(
        &["dev", "--exit-on-stdin-eof", "--namespace", &env.namespace],
        Some(&cluster().kubeconfig_path),
        &log,
    );
    let (metrics, probes, _) = endpoints(&mut rx, &log, TIMEOUT).await;
    assert_ne!(metrics, 8080);
    assert_ne!(probes, 8081);

    wait_for("/readyz to turn ready", TIMEOUT, || async {
        http_get(probes, "/readyz").filter(|(code, _)| *code == 200)
    })
    .await;
    let api: Api<Redis> = env.api();
    let redis = serde_json::from_value(json!({
        "apiVersion": "podkeeper.dev/v1", "kind": "Redis",
        "metadata": {"name": "dev"}, "spec": {"replicas": 2}
    }))
    .unwrap();
    api.create(&PostParams::default(), &redis).await.unwrap();
    wait_for("the Redis to be ready", TIMEOUT, || async {
        let s = api.get("dev").await.ok()?.status?;
        (s.ready_replicas == 2).then_some(())
    })
    .await;
    assert_created(metrics, 2);

    // Closing stdin stops it, cleanly.
    stop(dev, stdin, &log, TIMEOUT).await;
}

/// dev's /metrics counts `n` Redis Pods created.
pub fn assert_created(metrics: u16, n: usize) {
    let (code, body) = http_get(metrics, "/metrics").expect("dev serves /metrics");
    assert_eq!(code, 200);
    assert!(
        body.contains(&format!(
            r#"podkeeper_pods_created_total{{controller="redis"}} {n}"#
        )),
        "{body}"
    );
}

/// Closes dev's stdin and waits for it to exit successfully.
pub async fn stop(mut dev: Guard, stdin: std::process::ChildStdin, log: &Path, timeout: Duration) {
    drop(stdin);
    let status = wait_for("dev to exit", timeout, || {
        let status = dev.0.try_wait().ok().flatten();
        async move { status }
    })
    .await;
    assert!(
        status.success(),
        "dev exited with {status}; log:\n{}",
        std::fs::read_to_string(log).unwrap_or_default()
    );
}

/// `dev --local` says at start, on stderr, that the local cluster's Pods
/// are simulated and how to get real ones; once the cluster is up, stdout
/// says it again beside the KUBECONFIG to use. (Plain `dev` goes to kind
/// where a Docker engine answers; `--local` never does.)
#[tokio::test]
#[cfg_attr(
    feature = "kind-e2e",
    ignore = "local-only: it starts a local control plane of its own beside the kind cluster"
)]
async fn dev_local_says_at_start_that_its_pods_are_simulated_and_how_to_get_real_ones() {
    let log = logs_dir().join(format!("dev-local-{}.log", std::process::id()));
    let (dev, stdin, mut rx) = spawn_dev(
        &[
            "dev",
            "--local",
            "--cluster-only",
            "--nodes",
            "1",
            "--exit-on-stdin-eof",
        ],
        None,
        &log,
    );
    let notice = wait_for("the notice on stderr", TIMEOUT, || async {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        text.contains("for real containers").then_some(text)
    })
    .await;
    assert!(
        notice.contains("podkeeper: starting the local control plane (--local given)")
            && notice.contains("Pods are SIMULATED by kwok")
            && notice.contains("no redis-server answers")
            && notice.contains("`cargo run -- dev --kind` with a Docker engine")
            && notice.contains(".ci/docker-engine.sh"),
        "{notice}"
    );
    let mut printed = Vec::new();
    while !printed.iter().any(|l: &String| l == "podkeeper: ready") {
        let line = tokio::time::timeout(crate::harness::patience(TIMEOUT * 2), rx.recv())
            .await
            .unwrap_or_else(|_| panic!("dev printed `ready`: {printed:?}"))
            .unwrap_or_else(|| {
                panic!(
                    "dev exited; stdout: {printed:?}; log:\n{}",
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            });
        printed.push(line);
    }
    assert!(
        printed
            .iter()
            .any(|l| l.starts_with("podkeeper: its Pods are simulated")),
        "{printed:?}"
    );
    stop(dev, stdin, &log, TIMEOUT).await;
}
