//! The `fl` command line, as a library so that third-party plugin binaries can reuse it:
//! `fn main() -> ExitCode { fl_cli::main() }`.

#[cfg(feature = "mimalloc")]
mod allocator;
mod args;
mod commands;
mod output;
mod progress;
mod run_dir;
mod timing;

use std::process::ExitCode;

use clap::Parser;

// Plugin crates are referenced so that the linker keeps their `inventory` registrations.
use fl_algos as _;
use fl_data as _;
use fl_models as _;

pub use run_dir::{Reserved, RunDir, default_dir};

/// Parses the process arguments, runs the command, prints errors with their causes.
pub fn main() -> ExitCode {
    let cli = args::Cli::parse();
    match commands::dispatch(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
