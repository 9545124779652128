use clap::Parser;
use podkeeper_dev::cli::{Cli, Command};

/// The operator's allocator, so that `dev` and the benchmarks measure the
/// operator as the image ships it (see the operator's `main.rs`).
/// (`--features glibc-malloc`: glibc's, for heap profilers that hook malloc.)
#[cfg(not(feature = "glibc-malloc"))]
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    podkeeper::telemetry::init(cli.log_format);
    // `dev` and `run` run the operator, on one thread as `podkeeper run`
    // does; the other commands keep every core.
    let runtime = match cli.command {
        Command::Dev(_) | Command::Run(_) => tokio::runtime::Builder::new_current_thread(),
        _ => tokio::runtime::Builder::new_multi_thread(),
    }
    .enable_all()
    .build();
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("podkeeper-dev: starting the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Dev(args) => podkeeper_dev::dev::run(args).await,
            Command::Run(args) => Ok(podkeeper::operator::run_from_env(args).await?),
            Command::Bench(args) => podkeeper_dev::bench::run(args).await.map(|_| ()),
            Command::BenchRedis(args) => podkeeper_dev::bench::redis::run(args).await,
            Command::Kind { command } => podkeeper_dev::kind::command::run(command).await,
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("podkeeper-dev: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
