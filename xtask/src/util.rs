//! Helpers shared by the xtask commands: the workspace root and running child processes.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, Result, bail};

pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).parent().expect("xtask lives in the workspace").to_path_buf()
}

/// Runs `cmd` with inherited output; fails with the command line if it fails.
pub fn run(cmd: &mut Command) -> Result<()> {
    let line = format!("{cmd:?}");
    let status = cmd.status().with_context(|| format!("starting {line}"))?;
    if !status.success() {
        bail!("{line} failed ({status})");
    }
    Ok(())
}

/// `cargo` with the workspace as working directory.
pub fn cargo() -> Command {
    let mut cmd = Command::new(std::env::var("CARGO").unwrap_or_else(|_| "cargo".into()));
    cmd.current_dir(workspace_root());
    cmd
}
