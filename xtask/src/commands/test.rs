//! `cargo xtask test [ARGS…]`: every test of the workspace, after setup (the end-to-end tests
//! train on the real MNIST that setup fetches); then, unless ARGS narrow the tests, the
//! smoke-scale reproductions, whose checks must hold.

use anyhow::Result;

use crate::util::{cargo, run as run_cmd};

/// The papers whose smoke reproduction is part of the tests.
const SMOKE: [&str; 5] = ["kdd23", "fedraa", "asyncnc", "fedasmu", "cos2p"];

pub fn run(args: &[String]) -> Result<()> {
    crate::setup::run()?;
    let mut test = cargo();
    test.args(["test", "--workspace", "--release"]).args(args);
    // Idle OpenMP workers of one test would otherwise spin on the cores the next test needs
    // (a test binary of small convolutions ran 25× slower on 2 cores).
    if std::env::var_os("OMP_WAIT_POLICY").is_none() {
        test.env("OMP_WAIT_POLICY", "passive");
    }
    run_cmd(&mut test)?;
    if args.is_empty() {
        let jobs = std::thread::available_parallelism().map_or(1, |n| n.get()).to_string();
        for paper in SMOKE {
            crate::reproduce::run_args(&[paper, "--scale", "smoke", "--jobs", &jobs])?;
        }
    }
    Ok(())
}
