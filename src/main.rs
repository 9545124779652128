use clap::Parser;
use podkeeper::cli::{Cli, Command};

/// mimalloc instead of glibc's malloc: a profile of the operator scaling
/// down 200 Redis spent a quarter of its CPU in glibc's malloc and free
/// (`malloc_consolidate` among them), decoding watch events and building
/// requests (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    podkeeper::telemetry::init(cli.log_format);
    let result = match cli.command {
        Command::Dev(args) => podkeeper::dev::run(args).await,
        Command::Run(args) => podkeeper::operator::run_from_env(args).await,
        Command::Bench(args) => podkeeper::bench::run(args).await.map(|_| ()),
        Command::BenchRedis(args) => podkeeper::bench::redis::run(args).await,
        Command::Kind { command } => podkeeper::kind::command::run(command).await,
        Command::Crd { out_dir } => podkeeper::crd::print_all(out_dir.as_deref()),
    };
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("podkeeper: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
