//! `podkeeper dev --kind`: the operator, run here, against a kind cluster
//! whose Pods are real containers (created on first use and kept, so the
//! next start takes seconds).

use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::cli::DevArgs;
use crate::operator;

use super::{UpOptions, versions};

pub async fn run(args: DevArgs) -> Result<(), crate::Error> {
    let opts = UpOptions {
        name: "podkeeper".into(),
        workers: 2,
    };
    let path = tokio::task::spawn_blocking(move || super::up(&opts))
        .await
        .map_err(|e| crate::Error::Other(format!("kind up panicked: {e}")))??;
    let kubeconfig =
        Kubeconfig::read_from(&path).map_err(|e| crate::Error::Config(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| crate::Error::Config(e.to_string()))?;
    let client = kube::Client::try_from(config)?;
    operator::install_crds(&client).await?;
    if let Some(dest) = &args.kubeconfig {
        std::fs::copy(&path, dest)
            .map_err(|e| crate::Error::Other(format!("writing {}: {e}", dest.display())))?;
    }
    println!(
        "podkeeper: kind cluster `podkeeper` ready (1 control plane, 2 workers); point kubectl at it with:"
    );
    println!(
        "  export KUBECONFIG={}",
        args.kubeconfig.as_ref().unwrap_or(&path).display()
    );
    println!(
        "podkeeper: images loaded for real containers: {} and {}, e.g.",
        versions::REDIS_IMAGE,
        versions::HTTPD_IMAGE
    );
    println!("  kubectl apply -f samples/redis-kind.yaml");
    println!("podkeeper: the cluster stays after Ctrl-C; `podkeeper kind down` deletes it");
    println!("podkeeper: ready");
    operator::run(client, args.operator, operator::shutdown_signal()).await
}
