// Counts the ATen ops a process dispatches, by name and by thread (the main thread, where the
// engine commits, aggregates and evaluates, or a worker, where jobs train), and prints them at
// exit: on CPU, the count of a step's or an evaluation's kernel-launching ops (all but views)
// tells how many kernels it launches on CUDA, where a small model's time is its launches.
// Only top-level ops count (not the ops an op calls). Build against the libtorch fl uses:
//   T=$(readlink -f .libtorch); g++ -O1 -shared -fPIC -std=c++17 -I$T/include \
//     -I$T/include/torch/csrc/api/include fl-bench/scripts/op_count.cpp -o /tmp/libopcount.so \
//     -L$T/lib -ltorch_cpu -lc10
// then, with FL_OPS_ON set (it is read at every op, so a build may also set and unset it
// around the part to count):
//   FL_OPS_ON=1 LD_PRELOAD=/tmp/libopcount.so target/release/fl run EXPERIMENT --device cpu --workers 1
// Lines read `OPS <count> <main|work> <op>`.
#include <ATen/record_function.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace {
std::mutex mu;
std::map<std::string, long>* counts;
thread_local int depth = 0;

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  if (depth++ == 0 && std::getenv("FL_OPS_ON") != nullptr) {
    std::lock_guard<std::mutex> guard(mu);
    (*counts)[std::string(gettid() == getpid() ? "main " : "work ") + fn.name()]++;
  }
  return nullptr;
}

void on_end(const at::RecordFunction&, at::ObserverContext*) { depth--; }

void print_counts() {
  long total = 0;
  for (const auto& [name, n] : *counts) {
    std::fprintf(stderr, "OPS %8ld %s\n", n, name.c_str());
    total += n;
  }
  std::fprintf(stderr, "OPS %8ld all TOTAL\n", total);
}

__attribute__((constructor)) void install() {
  counts = new std::map<std::string, long>();
  at::addGlobalCallback(at::RecordFunctionCallback(on_start, on_end).scopes({at::RecordScope::FUNCTION}));
  std::atexit(print_counts);
}
}  // namespace
