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
    /// Run the operator against the cluster from KUBECONFIG, ~/.kube/config
    /// or the in-cluster service account.
    Run(RunArgs),
    /// Restore a member's data directory from a backup: the init container
    /// of the members of a Redis being restored (`spec.restore`). The
    /// store's credentials come from AWS_ACCESS_KEY_ID and
    /// AWS_SECRET_ACCESS_KEY.
    Restore(RestoreArgs),
    /// Upload an RDB file (say from `redis-cli --rdb`) into a bucket, checked
    /// as a backup is, to restore a Redis from it (`spec.restore.source`).
    /// Credentials from AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
    Upload(UploadArgs),
    /// Print every CustomResourceDefinition as YAML.
    Crd {
        /// Write one file per CRD, and a kustomization, into this directory.
        #[arg(long)]
        out_dir: Option<PathBuf>,
    },
}

/// An object in an S3-compatible bucket (`restore`, `upload`).
#[derive(Debug, Args, Clone)]
pub struct ObjectArgs {
    /// The store's endpoint (`http(s)://host[:port]`).
    #[arg(long)]
    pub endpoint: String,
    #[arg(long)]
    pub bucket: String,
    #[arg(long, default_value = "us-east-1")]
    pub region: String,
    /// The object's key.
    #[arg(long)]
    pub key: String,
}

#[derive(Debug, Args, Clone)]
pub struct RestoreArgs {
    #[command(flatten)]
    pub object: ObjectArgs,
    /// The SHA-256 the object must have (lower-case hex).
    #[arg(long)]
    pub sha256: String,
    /// redis-server's data directory.
    #[arg(long, default_value = "/data")]
    pub dir: PathBuf,
    #[arg(long, default_value = "dump.rdb")]
    pub dbfilename: String,
    /// With `appendonly yes`: `appenddirname` (the backup becomes the base
    /// of a new append-only file).
    #[arg(long, requires = "aof_file")]
    pub aof_dir: Option<String>,
    /// With `appendonly yes`: `appendfilename`.
    #[arg(long, requires = "aof_dir")]
    pub aof_file: Option<String>,
    /// Where a failure's reason is written (the container's termination
    /// message).
    #[arg(long)]
    pub termination_log: Option<PathBuf>,
}

#[derive(Debug, Args, Clone)]
pub struct UploadArgs {
    #[command(flatten)]
    pub object: ObjectArgs,
    /// The RDB file.
    #[arg(long)]
    pub file: PathBuf,
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
    /// The image of the `restore` init container of a Redis being restored
    /// from a backup (`spec.restore`): this operator's own. Default: the
    /// image of the operator's Pod (read once at start, from POD_NAME and
    /// POD_NAMESPACE).
    #[arg(long, env = "PODKEEPER_RESTORE_IMAGE")]
    pub restore_image: Option<String>,
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
    fn run_keeps_its_ports_and_the_dev_defaults_move_to_free_loopback_ports() {
        let run = Cli::parse_from(["podkeeper", "run"]);
        let Command::Run(args) = run.command else {
            panic!("run")
        };
        assert_eq!(args.metrics_address(), "0.0.0.0:8080");
        assert_eq!(args.probe_address(), "0.0.0.0:8081");
        assert!(!args.print_endpoints);
        assert_eq!(args.leader_election_renew_deadline, Duration::from_secs(10));
        assert_eq!(args.leader_election_retry_period, Duration::from_secs(2));
        assert_eq!(args.redis_connect, None);
        let args = args.with_dev_defaults();
        assert_eq!(args.metrics_address(), "127.0.0.1:0");
        assert_eq!(args.probe_address(), "127.0.0.1:0");
        assert!(args.print_endpoints);
        let chosen = Cli::parse_from(["podkeeper", "run", "--metrics-bind-address", ":9090"]);
        let Command::Run(args) = chosen.command else {
            panic!("run")
        };
        assert_eq!(args.with_dev_defaults().metrics_address(), ":9090");
        let run = Cli::parse_from(["podkeeper", "run", "--redis-connect", "port-forward"]);
        let Command::Run(args) = run.command else {
            panic!("run")
        };
        assert_eq!(args.redis_connect, Some(RedisConnect::PortForward));
    }

    #[test]
    fn the_operator_binary_has_no_dev_tool_commands() {
        for command in ["dev", "bench", "bench-redis", "kind"] {
            assert!(
                Cli::try_parse_from(["podkeeper", command]).is_err(),
                "{command}"
            );
        }
    }
}
