//! `cargo xtask`: project automation with few dependencies, so it builds before libtorch exists.
//!
//! - `setup`: provision libtorch (the `torch==2.11.0` wheel, into the user cache) and MNIST.
//! - `run [ARGS…]`: setup, then `fl run experiments/quickstart.toml [ARGS…]`.
//! - `test [ARGS…]`: setup, then every test of the workspace.
//! - `bench [ARGS…]`: setup, then the `fl-bench` benchmarks.
//! - `reproduce <paper> [OPTIONS]`: setup, then a paper's grid of runs and its report.

mod commands;
mod plot;
mod reproduce;
mod setup;
mod util;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "cargo xtask",
    bin_name = "cargo xtask",
    about = "Project automation: setup, run, test, bench, reproduce"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Provision libtorch (the torch==2.11.0 wheel, into the user cache) and MNIST.
    Setup,
    /// Setup, then `fl run experiments/quickstart.toml [ARGS…]`.
    Run {
        /// Passed on to `fl run`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Setup, then every test of the workspace and the smoke reproductions.
    Test {
        /// Passed on to `cargo test` (then the smoke reproductions are skipped).
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Setup, then the fl-bench benchmarks.
    Bench {
        /// Passed on to `cargo bench -p fl-bench`.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Setup, then a paper's grid of runs and its report.
    Reproduce(Box<reproduce::ReproduceArgs>),
}

fn main() -> ExitCode {
    let result = match Cli::parse().command {
        Command::Setup => setup::run(),
        Command::Run { args } => commands::run::run(&args),
        Command::Test { args } => commands::test::run(&args),
        Command::Bench { args } => commands::bench::run(&args),
        Command::Reproduce(args) => args.into_request().and_then(|request| match request {
            reproduce::Request::List => reproduce::list(),
            reproduce::Request::Reproduce(o) => reproduce::run(*o),
        }),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
