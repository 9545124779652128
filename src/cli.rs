//! Command-line interface.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "podkeeper",
    version,
    about = "A finalizer-driven operator that manages bare Pods for Redis and Application resources"
)]
pub struct Cli {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true, env = "PODKEEPER_LOG_FORMAT")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Clone, Copy, Debug, ValueEnum, PartialEq, Eq)]
pub enum LogFormat {
    Text,
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator for development. With no cluster configured (or with
    /// --local, --cluster-only or --kubeconfig) it first starts a local
    /// control plane with kwok nodes and installs the CRDs.
    Dev(DevArgs),
    /// Run the operator against the cluster from KUBECONFIG, ~/.kube/config
    /// or the in-cluster service account.
    Run(RunArgs),
    /// Benchmark convergence against the ReplicaSet controller and the API
    /// server's ceiling, on a local control plane (use a release build).
    Bench(BenchArgs),
    /// Failover, switchover, image rollout and scale-down of a Redis on a
    /// kind cluster with the operator deployed, measured by a client Pod
    /// writing through the Service (`just bench-redis`).
    BenchRedis(crate::bench::redis::BenchRedisArgs),
    /// kind clusters with real containers, on machines that cannot pull
    /// images: everything is built from Go modules and Debian packages.
    Kind {
        #[command(subcommand)]
        command: KindCommand,
    },
    /// Print every CustomResourceDefinition as YAML.
    Crd {
        /// Write one file per CRD, and a kustomization, into this directory.
        #[arg(long)]
        out_dir: Option<PathBuf>,
    },
}

#[derive(Debug, Subcommand)]
pub enum KindCommand {
    /// Build what is missing, create the cluster unless it exists, set up
    /// its Pod network and load the Redis and httpd images; prints the path
    /// of its kubeconfig.
    Up {
        #[command(flatten)]
        cluster: KindClusterArgs,
        /// Worker nodes besides the control plane.
        #[arg(long, default_value_t = 2)]
        workers: u32,
    },
    /// Build the node image and everything in it; prints its tag.
    NodeImage,
    /// Build the workload images (Redis, httpd); prints their names.
    Images,
    /// Load Docker images into the cluster.
    Load {
        #[command(flatten)]
        cluster: KindClusterArgs,
        /// Image names.
        #[arg(required = true)]
        images: Vec<String>,
    },
    /// Delete the cluster.
    Down {
        #[command(flatten)]
        cluster: KindClusterArgs,
    },
    /// Print the path of the kind binary (built from its Go module if
    /// missing).
    Bin,
}

#[derive(Debug, Args, Clone)]
pub struct KindClusterArgs {
    /// Name of the kind cluster.
    #[arg(long, default_value = "podkeeper")]
    pub name: String,
}

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Number of owner objects (Redis, ReplicaSets).
    #[arg(long, default_value_t = 1000)]
    pub objects: usize,
    /// Replicas of each.
    #[arg(long, default_value_t = 3)]
    pub replicas: usize,
    /// Pods deleted, one at a time, to time self-healing.
    #[arg(long, default_value_t = 200)]
    pub heal: usize,
    /// Seconds of idle time over which the operator's requests are counted.
    #[arg(long, default_value_t = 60)]
    pub idle_seconds: u64,
    /// A small run (20 x 3, 10 heals, 5 s idle), as a smoke test.
    #[arg(long)]
    pub quick: bool,
    /// Rounds of converge and tear down, podkeeper and the ReplicaSet
    /// controller in turn (the order alternating), for the spread of their
    /// ratios; heal and idle run in the first round only.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..))]
    pub rounds: u32,
    /// Only podkeeper and the ReplicaSet controller: no ceiling, no
    /// controller-manager at its default QPS.
    #[arg(long)]
    pub head_to_head: bool,
}

#[derive(Debug, Args)]
pub struct DevArgs {
    /// Number of simulated (kwok) nodes in the local cluster.
    #[arg(long, default_value_t = 3)]
    pub nodes: u32,
    /// Write the local cluster's admin kubeconfig to this path.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Start the local cluster (and install the CRDs) without the operator.
    #[arg(long)]
    pub cluster_only: bool,
    /// Start a local cluster even when a kubeconfig is configured.
    #[arg(long)]
    pub local: bool,
    /// Run the operator against a kind cluster with real containers
    /// (`podkeeper kind up`: built and created on first use, then kept)
    /// instead of the local control plane.
    #[arg(long, conflicts_with_all = ["local", "cluster_only", "nodes"])]
    pub kind: bool,
    /// With --kind: the kind cluster's name. `just e2e` deploys the
    /// operator into `podkeeper`; dev refuses to run beside it.
    #[arg(long, default_value = "podkeeper", requires = "kind")]
    pub kind_name: String,
    /// With --kind: worker nodes besides the control plane, when the
    /// cluster is created.
    #[arg(long, default_value_t = 2, requires = "kind")]
    pub kind_workers: u32,
    /// Raise the QPS limits of the local control plane (for benchmarks).
    #[arg(long, hide = true)]
    pub raise_qps_limits: bool,
    /// Shut down when standard input closes (used by the test harness, so
    /// that the cluster dies with the process that started it).
    #[arg(long, hide = true)]
    pub exit_on_stdin_eof: bool,
    #[command(flatten)]
    pub operator: RunArgs,
}

#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    /// Watch only this namespace (default: all namespaces).
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub namespace: Option<String>,
    /// Elect a leader with a coordination.k8s.io Lease, so that only one
    /// replica reconciles at a time.
    #[arg(long)]
    pub leader_elect: bool,
    /// Namespace of the leader-election Lease (default: $POD_NAMESPACE).
    #[arg(long, env = "POD_NAMESPACE")]
    pub leader_election_namespace: Option<String>,
    /// Name of the leader-election Lease.
    #[arg(long, default_value = "podkeeper-leader")]
    pub leader_election_id: String,
    /// Seconds a leader's Lease stays valid without renewal (how long a
    /// standby waits before it takes over from a leader that died).
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(2..))]
    pub leader_election_lease_duration: u64,
    /// How long the leader keeps acting without renewing its Lease; past it,
    /// the process stops (and exits with an error), before the Lease can
    /// expire for a standby. Shorter than the lease duration. "10s", "1500ms".
    #[arg(long, default_value = "10s", value_parser = parse_duration)]
    pub leader_election_renew_deadline: Duration,
    /// How often the leader renews and a standby looks at the Lease.
    #[arg(long, default_value = "2s", value_parser = parse_duration)]
    pub leader_election_retry_period: Duration,
    /// Where /metrics is served ("0" disables) [default: 0.0.0.0:8080; for
    /// `dev`, a free port on 127.0.0.1].
    #[arg(long)]
    pub metrics_bind_address: Option<String>,
    /// Where /livez, /healthz and /readyz are served ("0" disables)
    /// [default: 0.0.0.0:8081; for `dev`, a free port on 127.0.0.1].
    #[arg(long)]
    pub health_probe_bind_address: Option<String>,
    /// Reconciles running at once, per kind. Requests for objects waiting
    /// their turn are merged, so under load one reconcile (and one status
    /// write) covers many Pod changes. Ten, twice the ReplicaSet
    /// controller's five workers: a Redis reconcile also waits on its
    /// members over the network (up to the replication timeouts), and with
    /// five the benchmark's Pods were created 1.27x slower than the
    /// ReplicaSet controller's, with ten 1.04x (BENCHMARKS.md).
    #[arg(long, env = "PODKEEPER_CONCURRENT_RECONCILES", default_value_t = 10, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrent_reconciles: u16,
    /// How the operator reaches redis-server in each Redis Pod: `pod-ip`
    /// over the Pod network (the operator runs in the cluster), or
    /// `port-forward` through the API server (it runs outside, where Pod
    /// IPs do not route; needs `create pods/portforward`) [default: pod-ip;
    /// for `dev --kind`, port-forward].
    #[arg(long, value_enum)]
    pub redis_connect: Option<RedisConnect>,
    /// Print the metrics and probe URLs on standard output once they are
    /// served (`dev` does).
    #[arg(skip)]
    pub print_endpoints: bool,
}

/// See [`RunArgs::redis_connect`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum RedisConnect {
    PodIp,
    PortForward,
}

impl RunArgs {
    /// The metrics address, `run`'s default if none was given.
    pub fn metrics_address(&self) -> &str {
        self.metrics_bind_address
            .as_deref()
            .unwrap_or("0.0.0.0:8080")
    }

    /// The probe address, `run`'s default if none was given.
    pub fn probe_address(&self) -> &str {
        self.health_probe_bind_address
            .as_deref()
            .unwrap_or("0.0.0.0:8081")
    }

    /// `dev`'s defaults: loopback, on ports the kernel picks, so that a
    /// busy 8080 never stops a developer; the URLs are printed.
    pub fn with_dev_defaults(mut self) -> Self {
        for address in [
            &mut self.metrics_bind_address,
            &mut self.health_probe_bind_address,
        ] {
            address.get_or_insert_with(|| "127.0.0.1:0".to_string());
        }
        self.print_endpoints = true;
        self
    }

    /// The leader-election durations.
    pub fn leader_election_timing(&self) -> crate::leader::Timing {
        crate::leader::Timing {
            lease_duration: Duration::from_secs(self.leader_election_lease_duration),
            renew_deadline: self.leader_election_renew_deadline,
            retry_period: self.leader_election_retry_period,
        }
    }
}

/// A duration such as "10s", "1500ms", "1m" or "2" (seconds).
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration such as 10s or 1500ms"))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        _ => {
            return Err(format!(
                "unknown unit {unit:?} in {text:?} (use ms, s or m)"
            ));
        }
    };
    Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_go_flags() {
        assert_eq!(parse_duration("10s"), Ok(Duration::from_secs(10)));
        assert_eq!(parse_duration("1500ms"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("1m"), Ok(Duration::from_secs(60)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("0.5s"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("10h").is_err());
        assert!(parse_duration("s").is_err());
        assert!(parse_duration("").is_err());
    }

    #[test]
    fn run_keeps_its_ports_and_dev_moves_to_free_loopback_ports() {
        let run = Cli::parse_from(["podkeeper", "run"]);
        let Command::Run(args) = run.command else {
            panic!("run")
        };
        assert_eq!(args.metrics_address(), "0.0.0.0:8080");
        assert_eq!(args.probe_address(), "0.0.0.0:8081");
        assert!(!args.print_endpoints);
        assert_eq!(args.leader_election_renew_deadline, Duration::from_secs(10));
        assert_eq!(args.leader_election_retry_period, Duration::from_secs(2));
        let dev = Cli::parse_from(["podkeeper", "dev"]);
        let Command::Dev(args) = dev.command else {
            panic!("dev")
        };
        let args = args.operator.with_dev_defaults();
        assert_eq!(args.metrics_address(), "127.0.0.1:0");
        assert_eq!(args.probe_address(), "127.0.0.1:0");
        assert!(args.print_endpoints);
        let chosen = Cli::parse_from(["podkeeper", "dev", "--metrics-bind-address", ":9090"]);
        let Command::Dev(args) = chosen.command else {
            panic!("dev")
        };
        assert_eq!(args.operator.with_dev_defaults().metrics_address(), ":9090");
    }

    #[test]
    fn kind_flags_of_dev_need_kind_and_redis_connect_defaults_to_none() {
        assert!(Cli::try_parse_from(["podkeeper", "dev", "--kind-name", "x"]).is_err());
        let dev = Cli::parse_from([
            "podkeeper",
            "dev",
            "--kind",
            "--kind-name",
            "mine",
            "--kind-workers",
            "0",
        ]);
        let Command::Dev(args) = dev.command else {
            panic!("dev")
        };
        assert_eq!((args.kind_name.as_str(), args.kind_workers), ("mine", 0));
        assert_eq!(args.operator.redis_connect, None);
        let run = Cli::parse_from(["podkeeper", "run", "--redis-connect", "port-forward"]);
        let Command::Run(args) = run.command else {
            panic!("run")
        };
        assert_eq!(args.redis_connect, Some(RedisConnect::PortForward));
    }
}
