//! Builds fl-core's CUDA-graph shim (`fl-core/cuda/graph.cpp`) against libtorch's own
//! `at::cuda::CUDAGraph`, where libtorch has its CUDA backend and the CUDA headers are at hand.
//!
//! The torch wheel carries the CUDA runtime's headers but not the compiler's `crt/` headers that
//! `cuda_runtime.h` includes; `cargo xtask setup` installs those (the `nvidia-cuda-crt` wheel,
//! headers only) into the user cache, and a CUDA toolkit's `include/` serves as well. Without
//! them the shim is not built, the `fl_cuda_graphs` cfg stays off and steps run eagerly.

use std::path::{Path, PathBuf};

/// The `nvidia-cuda-crt` wheel `cargo xtask setup` installs for the torch wheel's CUDA 13.
pub const CUDA_CRT_VERSION: &str = "13.0.88";

/// Where `cargo xtask setup` installs the CUDA compiler's `crt/` headers.
pub fn cuda_crt_dir() -> PathBuf {
    crate::cache_dir().join(format!("cuda-crt-{CUDA_CRT_VERSION}"))
}

/// Compiles `source` (a path relative to the calling crate) into a static library and links it
/// with libtorch's CUDA libraries; emits `cfg(fl_cuda_graphs)` when it did. Returns whether it
/// did.
pub fn compile_cuda_graphs(source: &str) -> bool {
    println!("cargo::rustc-check-cfg=cfg(fl_cuda_graphs)");
    println!("cargo:rerun-if-changed={source}");
    println!("cargo:rerun-if-env-changed=CUDA_HOME");
    // Once setup installed the headers, their directory; before, the cache directory, which
    // gains an entry when setup installs them.
    let watched = [cuda_crt_dir(), crate::cache_dir()].into_iter().find(|d| d.is_dir());
    if let Some(dir) = watched {
        println!("cargo:rerun-if-changed={}", dir.display());
    }
    let Some(lib) = crate::libtorch_lib_dir() else { return false };
    let lib = lib.canonicalize().unwrap_or(lib);
    let Some(torch) = lib.parent().map(Path::to_path_buf) else { return false };
    let include = torch.join("include");
    let cuda_libs = ["libtorch_cuda.so", "libc10_cuda.so"].iter().all(|l| lib.join(l).exists());
    if !cuda_libs || !include.join("ATen/cuda/CUDAGraph.h").exists() {
        return false; // A CPU-only libtorch: nothing to capture.
    }
    let toolkit = std::env::var_os("CUDA_HOME").map(|h| PathBuf::from(h).join("include"));
    let candidates: Vec<PathBuf> = [
        toolkit,
        torch.parent().map(|site| site.join("nvidia/cu13/include")),
        Some(cuda_crt_dir().join("nvidia/cu13/include")),
        Some(PathBuf::from("/usr/local/cuda/include")),
    ]
    .into_iter()
    .flatten()
    .filter(|d| d.is_dir())
    .collect();
    let runtime = candidates.iter().find(|d| d.join("cuda_runtime_api.h").exists());
    let crt = candidates.iter().find(|d| d.join("crt/host_config.h").exists());
    let (Some(runtime), Some(crt)) = (runtime, crt) else {
        println!(
            "cargo:warning=CUDA graphs not built: no CUDA headers with crt/host_config.h (run `cargo xtask setup`, or set CUDA_HOME); CUDA steps run eagerly"
        );
        return false;
    };
    let built = cc::Build::new()
        .cpp(true)
        .std("c++17")
        .file(source)
        .define("_GLIBCXX_USE_CXX11_ABI", "1")
        .include(&include)
        .include(runtime)
        .include(crt)
        .warnings(false)
        .try_compile("fl_cuda_graph");
    if let Err(e) = built {
        println!("cargo:warning=CUDA graphs not built ({e}); CUDA steps run eagerly");
        return false;
    }
    println!("cargo:rustc-link-search=native={}", lib.display());
    for dylib in ["torch_cuda", "c10_cuda", "c10"] {
        println!("cargo:rustc-link-lib=dylib={dylib}");
    }
    println!("cargo:rustc-cfg=fl_cuda_graphs");
    true
}
