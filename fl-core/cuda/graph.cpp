// CUDA graphs for fl's cohort steps, through libtorch's own CUDAGraph (tch does not expose it).
//
// A step is captured on a side stream, so that the caching allocator gives its tensors a private
// pool, in thread-local capture mode, so that other workers' threads using the GPU meanwhile are
// not caught by the capture. Replays run on the thread's current stream. Every function returns
// 0 on success and -1 on failure, with the message in fl_graph_error().
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAStream.h>

#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <string>

namespace {
thread_local std::string last_error;

template <typename F>
int guarded(F f) {
  try {
    f();
    return 0;
  } catch (const std::exception& e) {
    last_error = e.what();
    return -1;
  }
}
// Thread-local by default; FL_CUDA_GRAPH_CAPTURE_MODE=global or relaxed picks CUDA's others.
cudaStreamCaptureMode capture_mode() {
  const char* mode = std::getenv("FL_CUDA_GRAPH_CAPTURE_MODE");
  if (mode != nullptr && std::strcmp(mode, "global") == 0) return cudaStreamCaptureModeGlobal;
  if (mode != nullptr && std::strcmp(mode, "relaxed") == 0) return cudaStreamCaptureModeRelaxed;
  return cudaStreamCaptureModeThreadLocal;
}
}  // namespace

struct FlGraph {
  std::shared_ptr<at::cuda::CUDAGraph> graph = std::make_shared<at::cuda::CUDAGraph>();
};

// A worker thread's side stream, the stream that was current before it, and the memory pool
// all the graphs it captures share, cohort after cohort: a captured step's tensors are scratch
// (each step writes its results into tensors allocated before capture), and one thread replays
// one graph at a time on one stream. The pool is the first graph's, which the stream keeps
// (never replayed) so that the pool outlives its cohort and the next cohort reuses its memory.
struct FlStream {
  c10::cuda::CUDAStream side;
  c10::cuda::CUDAStream previous;
  std::shared_ptr<at::cuda::CUDAGraph> keeper;
};

extern "C" {
const char* fl_graph_error() { return last_error.c_str(); }

int fl_stream_new(FlStream** out) {
  return guarded([&] {
    auto current = c10::cuda::getCurrentCUDAStream();
    *out = new FlStream{c10::cuda::getStreamFromPool(false, current.device_index()), current, nullptr};
  });
}

// Makes the side stream current once the previous stream's work is done (a host wait: paid
// once per capture, not per step).
int fl_stream_enter(FlStream* s) {
  return guarded([&] {
    s->previous = c10::cuda::getCurrentCUDAStream(s->side.device_index());
    s->previous.synchronize();
    c10::cuda::setCurrentCUDAStream(s->side);
  });
}

// Waits for the side stream's work and makes the previous stream current again.
int fl_stream_leave(FlStream* s) {
  return guarded([&] {
    s->side.synchronize();
    c10::cuda::setCurrentCUDAStream(s->previous);
  });
}

void fl_stream_free(FlStream* s) { delete s; }

int fl_graph_new(FlGraph** out) {
  return guarded([&] { *out = new FlGraph{}; });
}

int fl_graph_begin(FlGraph* g, FlStream* s) {
  return guarded([&] {
    at::cuda::MempoolId_t pool = s->keeper ? s->keeper->pool() : at::cuda::MempoolId_t{0, 0};
    g->graph->capture_begin(pool, capture_mode());
  });
}

int fl_graph_end(FlGraph* g, FlStream* s) {
  return guarded([&] {
    g->graph->capture_end();
    if (!s->keeper) s->keeper = g->graph;
  });
}

int fl_graph_replay(FlGraph* g) {
  return guarded([&] { g->graph->replay(); });
}

void fl_graph_free(FlGraph* g) { delete g; }
}
