//! `podkeeper dev`: the operator for development, on a local control plane
//! when no cluster is configured.

use std::time::Duration;

use futures::FutureExt;
use tokio::io::AsyncReadExt;

use crate::cli::DevArgs;
use crate::localcluster::{ClusterOptions, LocalCluster};
use podkeeper::operator;

/// True when a kubeconfig or in-cluster config is available.
async fn cluster_configured() -> bool {
    std::env::var_os("KUBECONFIG").is_some()
        || std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
        || std::env::var_os("HOME")
            .is_some_and(|h| std::path::Path::new(&h).join(".kube/config").exists())
}

pub async fn run(args: DevArgs) -> Result<(), crate::Error> {
    let stop = stop_signal(args.exit_on_stdin_eof).shared();
    if args.kind {
        return crate::kind::dev::run(args, stop).await;
    }
    let local =
        args.local || args.cluster_only || args.kubeconfig.is_some() || !cluster_configured().await;
    if !local {
        let client = operator::client_from_env().await?;
        eprintln!("podkeeper: using the configured cluster; installing CRDs");
        operator::install_crds(&client).await?;
        return Ok(operator::run(client, args.operator.with_dev_defaults(), stop).await?);
    }

    let cluster = tokio::select! {
        c = LocalCluster::start(ClusterOptions { nodes: args.nodes, raise_qps_limits: args.raise_qps_limits, audit_log: false, ..Default::default() }) => c?,
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
