//! The allocator of `fl` and of every plugin binary built on this crate: mimalloc, built with
//! `override`, so that it also defines `malloc` and `free` for the whole process. libtorch
//! allocates its CPU tensors through `malloc`; the executable's definitions come first in the
//! dynamic symbol lookup, so tensors, Rust values and oneDNN's scratch memory all share it.
//!
//! Why not glibc's: a training step frees and allocates the same tensor sizes again, and glibc
//! hands many of them back to the kernel in between. Buffers above its mmap threshold (at most
//! 32 MB, a 1000-sample evaluation batch of `cnn3`) are unmapped at `free`, the heaps of worker
//! threads' arenas shrink whenever their free top passes the trim threshold, and every page
//! comes back as a page fault that zeroes it. mimalloc keeps freed pages for reuse and returns
//! them after a delay (its `purge_delay`), so a step reuses the last step's memory.
//!
//! Measured on the 2-core machine (README, performance section): the FedAvg MLP benchmark and
//! the kdd23 cell 3-6% faster, a reduced asyncnc `cnn3` run tested every round 25% faster (6 M
//! page faults to 0.09 M), VGG-11 FedDyn with one worker 4-20% faster (12 M faults to 0.8 M);
//! LeNet-5 and VGG-11 FedAvg within run-to-run noise; peak resident size 4-10% higher. The
//! metrics are the same to the bit with either allocator.
//!
//! The `mimalloc` feature (a default) brings it in; `cargo build -p fl-cli --no-default-features`
//! builds an `fl` on glibc's allocator, to compare or where mimalloc misbehaves.
//!
//! Test binaries of the other crates keep glibc (`fl_core::engine::heap_bytes_in_use` reads
//! glibc's heap statistics); this crate's own tests run under mimalloc and check that
//! libtorch's tensors bypass glibc.

#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[cfg(test)]
mod tests {
    use fl_core::tch::{Kind, Tensor};

    #[test]
    fn libtorch_allocates_its_tensors_through_mimalloc() {
        // 64 MB: above glibc's largest mmap threshold, so glibc would count it as mapped.
        let t = Tensor::ones([16, 1024, 1024], (Kind::Float, fl_core::tch::Device::Cpu));
        assert_eq!(t.sum(Kind::Double).double_value(&[]), 16.0 * 1024.0 * 1024.0);
        // glibc's heap holds nothing: neither the tensor nor anything else went through it.
        assert_eq!(fl_core::engine::heap_bytes_in_use(), None);
    }
}
