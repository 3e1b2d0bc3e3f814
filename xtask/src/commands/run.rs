//! `cargo xtask run [ARGS…]`: the main job, the quickstart experiment on real MNIST, into
//! `runs/quickstart/` (replacing the previous quickstart run: `--force`).

use anyhow::Result;

use crate::util::{cargo, run as run_cmd};

pub fn run(args: &[String]) -> Result<()> {
    crate::setup::run()?;
    run_cmd(
        cargo()
            .args([
                "run",
                "--release",
                "--quiet",
                "-p",
                "fl-cli",
                "--",
                "run",
                "experiments/quickstart.toml",
                "--force",
            ])
            .args(args),
    )
}
