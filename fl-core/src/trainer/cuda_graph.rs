//! CUDA graphs of cohort steps: a step is captured once and replayed as one launch.
//!
//! A small model's cohort step is a hundred tiny kernels whose launches, not their arithmetic,
//! set the step time on a GPU (0.77 ms a step on an H200 for the kdd23 cell, where the
//! arithmetic takes microseconds). Replaying a captured graph launches them all at once. The
//! shim (`fl-core/cuda/graph.cpp`) drives libtorch's own `at::cuda::CUDAGraph`, so the caching
//! allocator gives the captured tensors a private pool, one per worker thread: a step writes its
//! results into tensors allocated before capture, so whatever it allocates is scratch that every
//! graph the thread captures, replayed one at a time on one stream, can share. It is built only where libtorch has
//! its CUDA backend and the CUDA headers are at hand ([`available`]).
//!
//! A captured step reads everything that changes between steps from device memory (the step
//! index, the noise counter) and writes its results in place: a replay repeats the recorded
//! kernels on the same addresses, and host values baked in at capture would repeat too.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::error::{Error, Result};

/// Whether this build can capture CUDA graphs.
pub fn available() -> bool {
    cfg!(fl_cuda_graphs)
}

/// Graphs captured, and replays launched, in this process: a run's report gives them, which
/// shows how well its steps reuse their graphs. Nothing else reads them.
static CAPTURED: AtomicU64 = AtomicU64::new(0);
static REPLAYED: AtomicU64 = AtomicU64::new(0);

/// Graphs captured and replays launched in this process so far.
pub fn counts() -> (u64, u64) {
    (CAPTURED.load(Ordering::Relaxed), REPLAYED.load(Ordering::Relaxed))
}

#[cfg(fl_cuda_graphs)]
#[allow(unsafe_code)] // reason: the shim's C interface.
mod ffi {
    use std::ffi::{CStr, c_char, c_int};

    #[repr(C)]
    pub struct FlStream {
        _private: [u8; 0],
    }

    #[repr(C)]
    pub struct FlGraph {
        _private: [u8; 0],
    }

    unsafe extern "C" {
        fn fl_graph_error() -> *const c_char;
        pub fn fl_stream_new(out: *mut *mut FlStream) -> c_int;
        pub fn fl_stream_enter(s: *mut FlStream) -> c_int;
        pub fn fl_stream_leave(s: *mut FlStream) -> c_int;
        pub fn fl_stream_free(s: *mut FlStream);
        pub fn fl_graph_new(out: *mut *mut FlGraph) -> c_int;
        pub fn fl_graph_begin(g: *mut FlGraph, s: *mut FlStream) -> c_int;
        pub fn fl_graph_end(g: *mut FlGraph, s: *mut FlStream) -> c_int;
        pub fn fl_graph_replay(g: *mut FlGraph) -> c_int;
        pub fn fl_graph_free(g: *mut FlGraph);
    }

    /// The shim's status as a result, with its message on failure.
    pub fn check(status: c_int, what: &str) -> Result<(), String> {
        if status == 0 {
            return Ok(());
        }
        // SAFETY: the shim returns a NUL-terminated string owned by this thread's error slot.
        let message = unsafe { CStr::from_ptr(fl_graph_error()) }.to_string_lossy().into_owned();
        Err(format!("{what}: {message}"))
    }
}

/// Runs `f` with this thread's capture stream, created at the first call: every cohort the
/// thread trains captures on it, into its one memory pool.
pub fn with_thread_stream<R>(f: impl FnOnce(&mut CaptureStream) -> Result<R>) -> Result<R> {
    thread_local! {
        static STREAM: std::cell::RefCell<Option<CaptureStream>> = const { std::cell::RefCell::new(None) };
    }
    STREAM.with_borrow_mut(|stream| {
        if stream.is_none() {
            *stream = Some(CaptureStream::new()?);
        }
        f(stream.as_mut().expect("created above"))
    })
}

/// A side stream steps are captured on, with the memory pool of its graphs.
pub struct CaptureStream {
    #[cfg(fl_cuda_graphs)]
    raw: *mut ffi::FlStream,
}

/// One captured step.
pub struct Graph {
    #[cfg(fl_cuda_graphs)]
    raw: *mut ffi::FlGraph,
}

fn shim_error(message: String) -> Error {
    Error::component("cuda-graph", format!("{message} ([trainer] cuda_graphs = false runs the steps eagerly)"))
}

#[cfg(fl_cuda_graphs)]
#[allow(unsafe_code)] // reason: the FFI of the shim; each pointer is owned by one value here.
mod imp {
    use super::ffi::{self, check};
    use super::{CaptureStream, Graph, shim_error};
    use crate::error::Result;

    impl CaptureStream {
        /// A side stream and a memory pool on the current CUDA device.
        pub fn new() -> Result<Self> {
            let mut raw = std::ptr::null_mut();
            // SAFETY: the shim writes a fresh pointer on success.
            check(unsafe { ffi::fl_stream_new(&mut raw) }, "creating a capture stream").map_err(shim_error)?;
            Ok(CaptureStream { raw })
        }

        /// Runs `step` twice on the side stream: eagerly (it executes, and warms up what
        /// libtorch initialises lazily), then under capture (it is recorded, not executed).
        pub fn capture(&mut self, mut step: impl FnMut()) -> Result<Graph> {
            // SAFETY: `self.raw` is live; enter and leave pair up on this thread.
            check(unsafe { ffi::fl_stream_enter(self.raw) }, "entering the capture stream").map_err(shim_error)?;
            let captured = (|| {
                step();
                let mut raw = std::ptr::null_mut();
                // SAFETY: as above; the graph pointer is owned by the returned Graph.
                check(unsafe { ffi::fl_graph_new(&mut raw) }, "creating a graph")?;
                let graph = Graph { raw };
                check(unsafe { ffi::fl_graph_begin(graph.raw, self.raw) }, "beginning a capture")?;
                step();
                check(unsafe { ffi::fl_graph_end(graph.raw, self.raw) }, "ending a capture")?;
                Ok(graph)
            })();
            // SAFETY: as above.
            let left = check(unsafe { ffi::fl_stream_leave(self.raw) }, "leaving the capture stream");
            let graph = captured.map_err(shim_error)?;
            left.map_err(shim_error)?;
            super::CAPTURED.fetch_add(1, super::Ordering::Relaxed);
            Ok(graph)
        }
    }

    impl Drop for CaptureStream {
        fn drop(&mut self) {
            // SAFETY: created by fl_stream_new, freed once.
            unsafe { ffi::fl_stream_free(self.raw) }
        }
    }

    impl Graph {
        /// Launches the captured kernels once on the current stream.
        pub fn replay(&self) -> Result<()> {
            super::REPLAYED.fetch_add(1, super::Ordering::Relaxed);
            // SAFETY: `self.raw` is a captured graph.
            check(unsafe { ffi::fl_graph_replay(self.raw) }, "replaying a graph").map_err(shim_error)
        }
    }

    impl Drop for Graph {
        fn drop(&mut self) {
            // SAFETY: created by fl_graph_new, freed once.
            unsafe { ffi::fl_graph_free(self.raw) }
        }
    }

    // SAFETY: the shim's objects are plain heap objects that any one thread may use at a time.
    unsafe impl Send for CaptureStream {}
    unsafe impl Send for Graph {}
}

#[cfg(not(fl_cuda_graphs))]
mod imp {
    use super::{CaptureStream, Graph, shim_error};
    use crate::error::Result;

    const MISSING: &str = "this build has no CUDA graphs (see fl_build::compile_cuda_graphs)";

    impl CaptureStream {
        /// Fails: no CUDA graphs in this build.
        pub fn new() -> Result<Self> {
            Err(shim_error(MISSING.into()))
        }

        /// Fails: no CUDA graphs in this build.
        pub fn capture(&mut self, _step: impl FnMut()) -> Result<Graph> {
            Err(shim_error(MISSING.into()))
        }
    }

    impl Graph {
        /// Fails: no CUDA graphs in this build.
        pub fn replay(&self) -> Result<()> {
            Err(shim_error(MISSING.into()))
        }
    }
}
