//! `podkeeper-dev dev --kind`: the operator, run here, against a kind cluster
//! whose Pods are real containers (created on first use and kept, so the
//! next start takes seconds).

use k8s_openapi::api::apps::v1::Deployment;
use kube::Api;
use kube::config::{KubeConfigOptions, Kubeconfig};

use crate::cli::DevArgs;
use podkeeper::cli::RedisConnect;
use podkeeper::operator;

use super::{UpOptions, versions};

/// Where `kubectl apply -k manifests/` puts the operator.
const DEPLOYED: (&str, &str) = ("podkeeper-system", "podkeeper");

pub async fn run(
    args: DevArgs,
    stop: impl Future<Output = ()> + Send + 'static,
) -> Result<(), crate::Error> {
    let opts = UpOptions {
        name: args.kind_name.clone(),
        workers: args.kind_workers,
        object_store: args.object_store,
        network_policies: false,
    };
    let name = opts.name.clone();
    let path = tokio::task::spawn_blocking(move || super::up(&opts))
        .await
        .map_err(|e| crate::Error::Other(format!("kind up panicked: {e}")))??;
    let kubeconfig =
        Kubeconfig::read_from(&path).map_err(|e| crate::Error::Config(e.to_string()))?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .map_err(|e| crate::Error::Config(e.to_string()))?;
    let client = kube::Client::try_from(config)?;
    refuse_beside_a_deployed_operator(&client, &name).await?;
    operator::install_crds(&client).await?;
    if let Some(dest) = &args.kubeconfig {
        std::fs::copy(&path, dest)
            .map_err(|e| crate::Error::Other(format!("writing {}: {e}", dest.display())))?;
    }
    let nodes = 1 + args.kind_workers;
    println!("podkeeper: kind cluster `{name}` ready ({nodes} nodes); point kubectl at it with:");
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
    println!(
        "podkeeper: PersistentVolumeClaims without a class bind through the default StorageClass `{}` (local-path-provisioner)",
        super::storage::STORAGE_CLASS
    );
    if args.object_store {
        println!(
            "podkeeper: object store (S3, versitygw v{}, path-style, region {}) at {} from inside the cluster; its keys:",
            versions::VERSITYGW,
            super::object_store::REGION,
            super::object_store::endpoint()
        );
        println!("  {}", super::object_store::credentials_hint());
    }
    println!(
        "podkeeper: the cluster stays after Ctrl-C; `cargo run -- kind down --name {name}` (podkeeper-dev) deletes it"
    );
    println!("podkeeper: ready");
    let mut operator_args = args.operator.with_dev_defaults();
    // Pod IPs do not route from this machine into kind's Pod network.
    operator_args
        .redis_connect
        .get_or_insert(RedisConnect::PortForward);
    Ok(operator::run(client, operator_args, stop).await?)
}

/// Two operators on one cluster would both reconcile every object (and
/// each count only its own creates): `just e2e` and `just deploy` leave one
/// running in the cluster that `dev --kind` uses by default.
async fn refuse_beside_a_deployed_operator(
    client: &kube::Client,
    cluster: &str,
) -> Result<(), crate::Error> {
    let (namespace, name) = DEPLOYED;
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    let replicas = api
        .get_opt(name)
        .await?
        .map(|d| d.spec.replicas.unwrap_or(1));
    match replicas {
        Some(n) if n > 0 => Err(crate::Error::Other(format!(
            "kind cluster `{cluster}` runs the deployed operator (Deployment {namespace}/{name}, \
             {n} replicas, from `just e2e` or `just deploy`); a second operator would reconcile \
             the same objects. Use a cluster of its own (`cargo run -- dev --kind --kind-name \
             podkeeper-dev`), or remove the deployed one first (`just undeploy`, or scale it to 0)"
        ))),
        _ => Ok(()),
    }
}
