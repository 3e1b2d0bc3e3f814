//! `cargo xtask test [ARGS…]`: every test of the workspace, after setup (the end-to-end tests
//! train on the real MNIST that setup fetches).

use anyhow::Result;

use crate::util::{cargo, run as run_cmd};

pub fn run(args: &[String]) -> Result<()> {
    super::setup::run()?;
    run_cmd(cargo().args(["test", "--workspace", "--release"]).args(args))
}
