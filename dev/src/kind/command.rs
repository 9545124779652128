//! `podkeeper-dev kind ...`: the blocking builds run off the async runtime.

use crate::cli::KindCommand;

use super::{UpOptions, cluster, tools};

pub async fn run(command: KindCommand) -> Result<(), crate::Error> {
    tokio::task::spawn_blocking(move || run_blocking(command))
        .await
        .map_err(|e| crate::Error::Other(format!("kind command panicked: {e}")))?
        .map_err(crate::Error::from)
}

fn run_blocking(command: KindCommand) -> Result<(), super::Error> {
    match command {
        KindCommand::Up { cluster, workers } => {
            let path = super::up(&UpOptions {
                name: cluster.name,
                workers,
            })?;
            println!("{}", path.display());
        }
        KindCommand::NodeImage => println!("{}", super::ensure_node_image()?.0),
        KindCommand::Images => {
            for name in super::ensure_workload_images()? {
                println!("{name}");
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
