use clap::Parser;
use podkeeper::cli::{Cli, Command};

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
