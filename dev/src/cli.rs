//! Command-line interface of the dev tools.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use podkeeper::cli::{LogFormat, RunArgs};

#[derive(Debug, Parser)]
#[command(
    name = "podkeeper-dev",
    version,
    about = "podkeeper's dev tools: a local control plane, kind clusters built from source, benchmarks"
)]
pub struct Cli {
    /// Log format.
    #[arg(long, value_enum, default_value_t = LogFormat::Text, global = true, env = "PODKEEPER_LOG_FORMAT")]
    pub log_format: LogFormat,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator for development. With --local, --cluster-only,
    /// --kubeconfig or --nodes, on a local control plane with kwok nodes
    /// (simulated Pods: no container runs); else on the configured cluster
    /// if there is one; else on kind (real containers, as --kind) where a
    /// Docker engine answers, and on the local control plane where none
    /// does.
    Dev(DevArgs),
    /// Benchmark convergence against the ReplicaSet controller and the API
    /// server's ceiling, on a local control plane (use a release build).
    /// PODKEEPER_BENCH_OPERATOR_WRAPPER="heaptrack -o /tmp/hp" runs the
    /// operator under a profiler (build with `--features glibc-malloc`).
    Bench(BenchArgs),
    /// Failover, switchover, image rollout and scale-down of a Redis on a
    /// kind cluster with the operator deployed, measured by a client Pod
    /// writing through the Service (`just bench-redis`).
    BenchRedis(crate::bench::redis::BenchRedisArgs),
    /// The operator exactly as `podkeeper run` runs it (same library,
    /// allocator and runtime): the process `bench` starts and measures, so
    /// that a benchmark never runs a stale operator binary.
    #[command(hide = true)]
    Run(RunArgs),
    /// kind clusters with real containers, on machines that cannot pull
    /// images: everything is built from Go modules and Debian packages.
    Kind {
        #[command(subcommand)]
        command: KindCommand,
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
        /// Deploy an S3-compatible object store (versitygw) too, at
        /// http://object-store.podkeeper-objects.svc:80, its keys in Secret
        /// podkeeper-objects/object-store-credentials.
        #[arg(long)]
        object_store: bool,
        /// Enforce NetworkPolicies (kube-network-policies on every node).
        #[arg(long)]
        network_policies: bool,
    },
    /// Build the node image and everything in it; prints its tag.
    NodeImage,
    /// Build the workload images (Redis, httpd); prints their names.
    Images {
        /// The object store's image (versitygw) too.
        #[arg(long)]
        object_store: bool,
    },
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

/// kwok nodes of `dev`'s local cluster unless `--nodes` says.
pub const DEFAULT_NODES: u32 = 3;

#[derive(Debug, Args)]
pub struct DevArgs {
    /// Number of simulated (kwok) nodes in the local cluster (default 3);
    /// implies the local cluster.
    #[arg(long)]
    pub nodes: Option<u32>,
    /// Write the local cluster's admin kubeconfig to this path.
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// Start the local cluster (and install the CRDs) without the operator.
    #[arg(long)]
    pub cluster_only: bool,
    /// Start a local cluster (kwok nodes, simulated Pods) even when a
    /// kubeconfig is configured or a Docker engine answers.
    #[arg(long)]
    pub local: bool,
    /// Run the operator against a kind cluster with real containers
    /// (`podkeeper-dev kind up`: built and created on first use, then kept)
    /// instead of the local control plane, even where a cluster is
    /// configured. Without a configured cluster, plain `dev` does so
    /// whenever a Docker engine answers.
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
    /// With --kind: deploy an S3-compatible object store (versitygw) into
    /// the cluster too (`kind up --object-store`).
    #[arg(long, requires = "kind")]
    pub object_store: bool,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_moves_the_operator_to_free_loopback_ports_unless_told() {
        let dev = Cli::parse_from(["podkeeper-dev", "dev"]);
        let Command::Dev(args) = dev.command else {
            panic!("dev")
        };
        let args = args.operator.with_dev_defaults();
        assert_eq!(args.metrics_address(), "127.0.0.1:0");
        assert_eq!(args.probe_address(), "127.0.0.1:0");
        assert!(args.print_endpoints);
        let chosen = Cli::parse_from(["podkeeper-dev", "dev", "--metrics-bind-address", ":9090"]);
        let Command::Dev(args) = chosen.command else {
            panic!("dev")
        };
        assert_eq!(args.operator.with_dev_defaults().metrics_address(), ":9090");
    }

    #[test]
    fn kind_flags_of_dev_need_kind_and_redis_connect_defaults_to_none() {
        assert!(Cli::try_parse_from(["podkeeper-dev", "dev", "--kind-name", "x"]).is_err());
        let dev = Cli::parse_from([
            "podkeeper-dev",
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
        assert!(!args.object_store);
    }

    #[test]
    fn the_object_store_is_asked_for_by_kind_up_and_dev_kind() {
        assert!(Cli::try_parse_from(["podkeeper-dev", "dev", "--object-store"]).is_err());
        let dev = Cli::parse_from(["podkeeper-dev", "dev", "--kind", "--object-store"]);
        let Command::Dev(args) = dev.command else {
            panic!("dev")
        };
        assert!(args.object_store);
        let up = Cli::parse_from(["podkeeper-dev", "kind", "up", "--object-store"]);
        let Command::Kind {
            command: KindCommand::Up { object_store, .. },
        } = up.command
        else {
            panic!("kind up")
        };
        assert!(object_store);
    }
}
