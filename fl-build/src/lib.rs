//! Build-script helper shared by every crate that links libtorch.
//!
//! `torch-sys` tells the linker where libtorch is but not the loader, and it links
//! `libtorch_cuda` in a way the linker drops as "not needed" (then `--device cuda` finds no
//! GPU). A crate's `build.rs` calls [`link_libtorch`] so that its binaries, tests, examples and
//! benches run without `LD_LIBRARY_PATH` and really load the CUDA backend where it exists.
//! Link arguments do not propagate between packages, hence one call per package.
//!
//! It also names the user cache (libtorch, datasets), shared with `xtask`, which must not
//! depend on libtorch itself.

mod cuda_graphs;
mod paths;

pub use cuda_graphs::{CUDA_CRT_VERSION, compile_cuda_graphs, cuda_crt_dir};
pub use paths::{cache_dir, data_dir};

use std::path::PathBuf;

/// Emits the cargo directives; call it from `build.rs`.
pub fn link_libtorch() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-env-changed=LIBTORCH_LIB");
    let Some(lib) = libtorch_lib_dir() else {
        println!("cargo:warning=LIBTORCH is not set; run `cargo xtask setup` (binaries will need LD_LIBRARY_PATH)");
        return;
    };
    // `$ORIGIN` in libtorch's own rpath must resolve against the real location, not a symlink.
    let lib = lib.canonicalize().unwrap_or(lib);
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    if lib.join("libtorch_cuda.so").exists() {
        // Link arguments come after the libraries on the linker's command line, so this
        // records libtorch_cuda as needed even though no symbol of ours references it.
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed");
        println!("cargo:rustc-link-arg=-L{}", lib.display());
        println!("cargo:rustc-link-arg=-ltorch_cuda");
    }
}

pub(crate) fn libtorch_lib_dir() -> Option<PathBuf> {
    if let Some(lib) = std::env::var_os("LIBTORCH_LIB") {
        return Some(PathBuf::from(lib).join("lib"));
    }
    std::env::var_os("LIBTORCH").map(|root| PathBuf::from(root).join("lib"))
}
