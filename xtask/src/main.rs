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

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = match args.first().map(String::as_str) {
        Some("setup") => setup::run(),
        Some("run") => commands::run::run(&args[1..]),
        Some("test") => commands::test::run(&args[1..]),
        Some("bench") => commands::bench::run(&args[1..]),
        Some("reproduce") => reproduce::run(&args[1..]),
        Some("-h" | "--help" | "help") | None => {
            println!(
                "usage: cargo xtask <setup | run [ARGS…] | test [ARGS…] | bench [ARGS…] | reproduce PAPER [OPTIONS]>"
            );
            Ok(())
        }
        Some(other) => {
            Err(anyhow::anyhow!("unknown xtask command `{other}`; expected setup, run, test, bench or reproduce"))
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
