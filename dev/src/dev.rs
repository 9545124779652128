//! `podkeeper-dev dev`: the operator for development. With no cluster
//! configured and no flag that says which: on kind (real containers) where
//! a Docker engine answers, else on the local control plane, whose Pods
//! kwok simulates, which `dev` says at start.

use std::time::Duration;

use futures::FutureExt;
use tokio::io::AsyncReadExt;

use crate::cli::{DEFAULT_NODES, DevArgs};
use crate::localcluster::{ClusterOptions, LocalCluster};
use podkeeper::operator;

/// True when a kubeconfig or in-cluster config is available.
async fn cluster_configured() -> bool {
    std::env::var_os("KUBECONFIG").is_some()
        || std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
        || std::env::var_os("HOME")
            .is_some_and(|h| std::path::Path::new(&h).join(".kube/config").exists())
}

/// Where `dev` runs the operator when `--kind` does not say.
#[derive(Debug, PartialEq)]
enum Target {
    /// The cluster of the kubeconfig (or in-cluster config).
    Configured,
    /// A kind cluster, as `dev --kind`: a Docker engine answers.
    Kind,
    /// The local control plane with kwok nodes, and why.
    Local(WhyLocal),
}

#[derive(Debug, PartialEq)]
enum WhyLocal {
    /// A flag that only means the local control plane.
    Flag(&'static str),
    NoEngine,
    /// An engine answers but kind's images cannot be built here.
    Missing(Vec<&'static str>),
}

/// The flag given that asks for the local control plane, if any.
fn local_flag(args: &DevArgs) -> Option<&'static str> {
    [
        (args.local, "--local"),
        (args.cluster_only, "--cluster-only"),
        (args.kubeconfig.is_some(), "--kubeconfig"),
        (args.nodes.is_some(), "--nodes"),
        (args.raise_qps_limits, "--raise-qps-limits"),
    ]
    .into_iter()
    .find_map(|(given, flag)| given.then_some(flag))
}

/// The choice, asking `engine` and `missing` only when it comes to them
/// (so a flag or a configured cluster costs no `docker` call). Pure but for
/// those.
fn choose(
    flag: Option<&'static str>,
    configured: bool,
    engine: impl FnOnce() -> bool,
    missing: impl FnOnce() -> Vec<&'static str>,
) -> Target {
    if let Some(flag) = flag {
        return Target::Local(WhyLocal::Flag(flag));
    }
    if configured {
        return Target::Configured;
    }
    if !engine() {
        return Target::Local(WhyLocal::NoEngine);
    }
    match missing() {
        m if m.is_empty() => Target::Kind,
        m => Target::Local(WhyLocal::Missing(m)),
    }
}

/// What `dev` says on stderr before it starts the local control plane:
/// why this cluster, that its Pods are simulated, and how to get real ones.
fn local_notice(why: &WhyLocal) -> String {
    let because = match why {
        WhyLocal::Flag(flag) => format!("{flag} given"),
        WhyLocal::NoEngine => "no Docker engine answers `docker version`".to_string(),
        WhyLocal::Missing(m) => format!(
            "a Docker engine answers, but kind's images cannot be built here without {}",
            m.join(", ")
        ),
    };
    let real = match why {
        WhyLocal::Missing(_) => {
            "podkeeper: for real containers, provide what is missing (debootstrap, \
             libseccomp-dev and pkg-config are Debian packages, which `.ci/run` installs; the \
             first build runs as root), then `cargo run -- dev` runs on kind"
        }
        _ => {
            "podkeeper: for real containers, run `cargo run -- dev --kind` with a Docker engine \
             running (`.ci/docker-engine.sh` starts one, as root); plain `cargo run -- dev` \
             does so whenever an engine answers and no cluster is configured"
        }
    };
    format!(
        "podkeeper: starting the local control plane ({because}).\n\
         podkeeper: its Pods are SIMULATED by kwok: they are scheduled, Running and Ready, but \
         no container runs in them, so no redis-server answers and a Redis here has no primary \
         (its status says `Simulated`).\n{real}"
    )
}

pub async fn run(args: DevArgs) -> Result<(), crate::Error> {
    let stop = stop_signal(args.exit_on_stdin_eof).shared();
    if args.kind {
        return crate::kind::dev::run(args, stop).await;
    }
    let flag = local_flag(&args);
    let configured = flag.is_none() && cluster_configured().await;
    let target = tokio::task::spawn_blocking(move || {
        choose(
            flag,
            configured,
            || crate::kind::preflight::engine_answers(crate::kind::preflight::ENGINE_TIMEOUT),
            crate::kind::preflight::missing_for_a_first_build,
        )
    })
    .await
    .map_err(|e| crate::Error::Other(format!("the Docker check panicked: {e}")))?;
    let why = match target {
        Target::Configured => {
            let client = operator::client_from_env().await?;
            eprintln!("podkeeper: using the configured cluster; installing CRDs");
            operator::install_crds(&client).await?;
            return Ok(operator::run(client, args.operator.with_dev_defaults(), stop).await?);
        }
        Target::Kind => {
            eprintln!(
                "podkeeper: a Docker engine answers: running the operator against the kind \
                 cluster `{}`, whose Pods are real containers (as `dev --kind`; `dev --local` \
                 starts the local control plane, with simulated Pods, instead). A first start \
                 builds kind's images from source, in minutes (progress below); later starts \
                 take seconds.",
                args.kind_name
            );
            return crate::kind::dev::run(args, stop).await;
        }
        Target::Local(why) => why,
    };
    eprintln!("{}", local_notice(&why));

    let nodes = args.nodes.unwrap_or(DEFAULT_NODES);
    let cluster = tokio::select! {
        c = LocalCluster::start(ClusterOptions { nodes, raise_qps_limits: args.raise_qps_limits, audit_log: false, ..Default::default() }) => c?,
        _ = stop.clone() => return Ok(()),
    };
    serve(&args, cluster, stop).await
}

async fn serve(
    args: &DevArgs,
    mut cluster: LocalCluster,
    stop: futures::future::Shared<impl Future<Output = ()> + Send + 'static>,
) -> Result<(), crate::Error> {
    let kubeconfig = match &args.kubeconfig {
        Some(path) => {
            cluster.write_kubeconfig(path)?;
            path.clone()
        }
        None => cluster.kubeconfig_path().to_path_buf(),
    };
    let client = cluster.client().await?;
    operator::install_crds(&client).await?;
    println!("podkeeper: cluster ready; point kubectl at it with:");
    println!("  export KUBECONFIG={}", kubeconfig.display());
    println!(
        "podkeeper: its Pods are simulated (no container runs); e.g. kubectl apply -f samples/redis.yaml"
    );
    println!("podkeeper: ready");

    let work = async {
        if args.cluster_only {
            stop.clone().await;
            Ok(())
        } else {
            let operator_args = args.operator.clone().with_dev_defaults();
            Ok(operator::run(client, operator_args, stop.clone()).await?)
        }
    };
    let result = tokio::select! {
        r = work => r,
        e = cluster.wait_for_component_exit() => Err(crate::Error::LocalCluster(e)),
    };
    eprintln!("podkeeper: stopping the local cluster");
    tokio::time::timeout(Duration::from_secs(30), cluster.shutdown())
        .await
        .ok();
    result
}

/// Ctrl-C, SIGTERM, or (for the test harness) standard input closing.
async fn stop_signal(watch_stdin: bool) {
    let stdin_closed = async {
        if watch_stdin {
            let mut stdin = tokio::io::stdin();
            let mut buf = [0u8; 64];
            while let Ok(n) = stdin.read(&mut buf).await {
                if n == 0 {
                    break;
                }
            }
        } else {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        _ = operator::shutdown_signal() => {},
        _ = stdin_closed => {},
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    fn dev_args(argv: &[&str]) -> DevArgs {
        let cli = crate::cli::Cli::parse_from(["podkeeper-dev", "dev"].iter().chain(argv));
        match cli.command {
            crate::cli::Command::Dev(args) => args,
            _ => panic!("dev"),
        }
    }

    #[test]
    fn a_flag_of_the_local_cluster_keeps_it_whatever_docker_says() {
        for argv in [
            &["--local"][..],
            &["--cluster-only"],
            &["--kubeconfig", "/tmp/kc"],
            &["--nodes", "5"],
        ] {
            let flag = local_flag(&dev_args(argv));
            assert_eq!(flag, Some(argv[0]), "{argv:?}");
            let target = choose(
                flag,
                true,
                || panic!("no docker call for {argv:?}"),
                || panic!("no build check for {argv:?}"),
            );
            assert_eq!(target, Target::Local(WhyLocal::Flag(argv[0])));
        }
        assert_eq!(local_flag(&dev_args(&[])), None);
    }

    #[test]
    fn without_flags_a_configured_cluster_then_docker_decide() {
        let unasked = || panic!("not asked");
        assert_eq!(choose(None, true, unasked, Vec::new), Target::Configured);
        assert_eq!(choose(None, false, || true, Vec::new), Target::Kind);
        assert_eq!(
            choose(None, false, || false, || panic!("not asked")),
            Target::Local(WhyLocal::NoEngine)
        );
        assert_eq!(
            choose(None, false, || true, || vec!["debootstrap"]),
            Target::Local(WhyLocal::Missing(vec!["debootstrap"]))
        );
    }

    #[test]
    fn the_local_notice_says_pods_are_simulated_and_how_to_get_real_ones() {
        for why in [
            WhyLocal::Flag("--local"),
            WhyLocal::NoEngine,
            WhyLocal::Missing(vec!["debootstrap", "pkg-config"]),
        ] {
            let notice = local_notice(&why);
            assert!(notice.contains("SIMULATED by kwok"), "{notice}");
            assert!(notice.contains("no redis-server answers"), "{notice}");
            match why {
                WhyLocal::Flag(_) => assert!(notice.contains("(--local given)"), "{notice}"),
                WhyLocal::NoEngine => assert!(notice.contains("no Docker engine"), "{notice}"),
                WhyLocal::Missing(_) => {
                    assert!(
                        notice.contains("without debootstrap, pkg-config"),
                        "{notice}"
                    )
                }
            }
            if !matches!(why, WhyLocal::Missing(_)) {
                assert!(
                    notice.contains("`cargo run -- dev --kind`")
                        && notice.contains(".ci/docker-engine.sh"),
                    "{notice}"
                );
            }
        }
    }
}
