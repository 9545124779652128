use clap::Parser;
use podkeeper::cli::{Cli, Command};

/// mimalloc instead of glibc's malloc: a profile of the operator scaling
/// down 200 Redis spent a quarter of its CPU in glibc's malloc and free
/// (`malloc_consolidate` among them), decoding watch events and building
/// requests (BENCHMARKS.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::process::ExitCode {
    let cli = Cli::parse();
    podkeeper::telemetry::init(cli.log_format);
    // The operator runs on one thread: its work
    // is a stream of small steps (watch events, reconciles, requests), and
    // on the multi-threaded runtime its workers kept parking and waking one
    // another. Over the benchmark's scale-down the kernel's thread switches
    // were 16 % of its CPU samples, 6 % on one thread, and its CPU fell by a
    // sixth (BENCHMARKS.md). One core is far above what it uses (1.2 CPU s
    // to converge 200 Redis of 3).
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build();
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("podkeeper: starting the async runtime: {e}");
            return std::process::ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Run(args) => podkeeper::operator::run_from_env(args).await,
            Command::Restore(args) => podkeeper::backup::restore::run(&args)
                .await
                .map_err(podkeeper::Error::Other),
            Command::Upload(args) => podkeeper::backup::upload::run(&args)
                .await
                .map_err(podkeeper::Error::Other),
            Command::Crd { out_dir } => podkeeper::api::print_all(out_dir.as_deref()),
        }
    });
    match result {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("podkeeper: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}
