//! `cargo xtask bench [ARGS…]`: the `fl-bench` benchmarks.

use anyhow::Result;

use crate::util::{cargo, run as run_cmd};

pub fn run(args: &[String]) -> Result<()> {
    crate::setup::run()?;
    run_cmd(cargo().args(["bench", "-p", "fl-bench"]).args(args))
}
