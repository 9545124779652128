//! `podkeeper-dev kind ...`: the blocking builds run off the async runtime.

use crate::cli::KindCommand;

use super::{UpOptions, cluster, object_store, tools, versions};

pub async fn run(command: KindCommand) -> Result<(), crate::Error> {
    tokio::task::spawn_blocking(move || run_blocking(command))
        .await
        .map_err(|e| crate::Error::Other(format!("kind command panicked: {e}")))?
        .map_err(crate::Error::from)
}

fn run_blocking(command: KindCommand) -> Result<(), super::Error> {
    match command {
        KindCommand::Up {
            cluster,
            workers,
            object_store,
            network_policies,
        } => {
            let path = super::up(&UpOptions {
                name: cluster.name,
                workers,
                object_store,
                network_policies,
            })?;
            if object_store {
                // On stderr: stdout is the kubeconfig's path alone, for scripts.
                super::progress(&format!(
                    "object store (S3, versitygw v{}, path-style, region {}) at {} from inside the cluster; its keys: {}",
                    versions::VERSITYGW,
                    object_store::REGION,
                    object_store::endpoint(),
                    object_store::credentials_hint()
                ));
            }
            println!("{}", path.display());
        }
        KindCommand::NodeImage => println!("{}", super::ensure_node_image()?.0),
        KindCommand::Images { object_store } => {
            for name in super::ensure_workload_images()? {
                println!("{name}");
            }
            if object_store {
                println!("{}", super::ensure_object_store_image()?);
            }
        }
        KindCommand::Load { cluster, images } => {
            cluster::load(&tools::ensure_kind()?, &cluster.name, &images)?
        }
        KindCommand::Down { cluster } => cluster::delete(&tools::ensure_kind()?, &cluster.name)?,
        KindCommand::Bin => println!("{}", tools::ensure_kind()?.display()),
    }
    Ok(())
}
