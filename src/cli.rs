//! Command-line interface.

use std::path::PathBuf;

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
    /// Seconds a leader's Lease stays valid without renewal.
    #[arg(long, default_value_t = 15, value_parser = clap::value_parser!(u64).range(2..))]
    pub leader_election_lease_duration: u64,
    /// Where /metrics is served ("0" disables).
    #[arg(long, default_value = "0.0.0.0:8080")]
    pub metrics_bind_address: String,
    /// Where /livez, /healthz and /readyz are served ("0" disables).
    #[arg(long, default_value = "0.0.0.0:8081")]
    pub health_probe_bind_address: String,
    /// Reconciles running at once, per kind. Requests for objects waiting
    /// their turn are merged, so under load one reconcile (and one status
    /// write) covers many Pod changes, as with the ReplicaSet controller's
    /// five workers.
    #[arg(long, env = "PODKEEPER_CONCURRENT_RECONCILES", default_value_t = 5, value_parser = clap::value_parser!(u16).range(1..))]
    pub concurrent_reconciles: u16,
}
