//! `cargo xtask setup`: makes a fresh machine ready, idempotently.
//!
//! libtorch 2.11.0 comes from the PyPI wheel `torch==2.11.0` (it carries the CUDA libraries,
//! so the same build runs on a GPU machine), installed with pip into the user cache outside the
//! checkout, where every clone reuses it. `.libtorch` in the workspace links to it; cargo's
//! `[env]` points `LIBTORCH` there unless the user set `LIBTORCH` themselves. MNIST and
//! Fashion-MNIST (the fedasmu smoke reproduction's data) are fetched into the data cache by the
//! `fl` binary itself.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};

use crate::util::{cargo, run as run_cmd, workspace_root};

pub const TORCH_VERSION: &str = "2.11.0";

pub fn run() -> Result<()> {
    let libtorch = ensure_libtorch()?;
    eprintln!("libtorch: {}", libtorch.display());
    if let Err(e) = ensure_cuda_crt(&libtorch) {
        eprintln!("warning: CUDA graphs will not be built ({e:#}); CUDA steps run eagerly");
    }
    for dataset in ["mnist", "fashion-mnist"] {
        run_cmd(cargo().args(["run", "--release", "--quiet", "-p", "fl-cli", "--", "data", "fetch", dataset]))
            .with_context(|| format!("fetching {dataset}"))?;
    }
    Ok(())
}

/// The libtorch directory in use (with `lib/` and `include/`).
fn ensure_libtorch() -> Result<PathBuf> {
    let ours = workspace_root().join(".libtorch");
    // Cargo's `[env]` sets LIBTORCH to `.libtorch` for this process too; only another value
    // is the user's own libtorch.
    if let Some(dir) = std::env::var_os("LIBTORCH").filter(|d| Path::new(d) != ours) {
        let dir = PathBuf::from(dir);
        if !dir.join("lib").is_dir() {
            bail!("LIBTORCH={} has no lib/ directory; unset it to let setup install libtorch", dir.display());
        }
        return Ok(dir);
    }
    let site = fl_build::cache_dir().join(format!("torch-{TORCH_VERSION}"));
    let torch = site.join("torch");
    if !site.join(".complete").exists() {
        install_wheel(&site)?;
    }
    link(&torch, &ours)?;
    Ok(torch)
}

fn install_wheel(site: &Path) -> Result<()> {
    let partial = PathBuf::from(format!("{}.partial", site.display()));
    if partial.exists() {
        std::fs::remove_dir_all(&partial).with_context(|| format!("removing {}", partial.display()))?;
    }
    if site.exists() {
        std::fs::remove_dir_all(site).with_context(|| format!("removing incomplete {}", site.display()))?;
    }
    std::fs::create_dir_all(site.parent().expect("cache dir")).context("creating the cache directory")?;
    eprintln!("installing torch=={TORCH_VERSION} (libtorch and its CUDA libraries, ~4.6 GB) into {}", site.display());
    run_cmd(
        Command::new(python()?)
            .args(["-m", "pip", "install", "--quiet", "--no-cache-dir", "--disable-pip-version-check"])
            .args(["--root-user-action=ignore", "--target"])
            .arg(&partial)
            .arg(format!("torch=={TORCH_VERSION}")),
    )
    .context("installing the torch wheel with pip")?;
    if !partial.join("torch/lib/libtorch_cpu.so").exists() {
        bail!("the torch wheel installed into {} has no torch/lib/libtorch_cpu.so", partial.display());
    }
    // Python-only dependencies of the wheel that libtorch never loads (Triton alone is 0.6 GB):
    // CI shares a disk with little room.
    for unused in ["triton", "sympy", "networkx", "setuptools"] {
        let dir = partial.join(unused);
        if dir.exists() {
            std::fs::remove_dir_all(&dir).with_context(|| format!("removing {}", dir.display()))?;
        }
    }
    std::fs::write(partial.join(".complete"), TORCH_VERSION)?;
    std::fs::rename(&partial, site).with_context(|| format!("moving {} into place", partial.display()))?;
    Ok(())
}

/// The CUDA compiler's `crt/` headers that `cuda_runtime.h` includes and the torch wheel lacks
/// (headers only, 0.1 MB), so that fl-core builds its CUDA-graph shim; only beside a CUDA
/// libtorch.
fn ensure_cuda_crt(libtorch: &Path) -> Result<()> {
    let dir = fl_build::cuda_crt_dir();
    let cuda = libtorch.join("lib/libtorch_cuda.so").exists();
    if !cuda || dir.join(".complete").exists() {
        return Ok(());
    }
    let partial = PathBuf::from(format!("{}.partial", dir.display()));
    for stale in [&partial, &dir] {
        if stale.exists() {
            std::fs::remove_dir_all(stale).with_context(|| format!("removing {}", stale.display()))?;
        }
    }
    run_cmd(
        Command::new(python()?)
            .args(["-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check"])
            .args(["--root-user-action=ignore", "--target"])
            .arg(&partial)
            .arg(format!("nvidia-cuda-crt=={}", fl_build::CUDA_CRT_VERSION)),
    )
    .context("installing the nvidia-cuda-crt headers with pip")?;
    std::fs::write(partial.join(".complete"), fl_build::CUDA_CRT_VERSION)?;
    std::fs::rename(&partial, &dir).with_context(|| format!("moving {} into place", partial.display()))?;
    Ok(())
}

/// The Python interpreter pip runs under.
fn python() -> Result<&'static str> {
    ["python3", "python"]
        .into_iter()
        .find(|p| Command::new(p).arg("--version").output().is_ok_and(|o| o.status.success()))
        .context("no python3 found: libtorch is installed from the torch wheel with pip; install python3 and pip")
}

/// Points `link` at `target`, replacing a stale link.
fn link(target: &Path, link: &Path) -> Result<()> {
    if std::fs::read_link(link).is_ok_and(|t| t == target) {
        return Ok(());
    }
    if link.symlink_metadata().is_ok() {
        std::fs::remove_file(link).with_context(|| format!("removing stale {}", link.display()))?;
    }
    std::os::unix::fs::symlink(target, link)
        .with_context(|| format!("linking {} to {}", link.display(), target.display()))
}
