// Feasibility of CUDA-graph capture for fl's cohort step through libtorch's C++ API (the path a
// tch shim would take): capture the kdd23 cell's forward + backward + SGD update for a cohort
// of k clients (MLP 784-200-10, batch 128, dropout) once, replay it, and compare with eager
// steps. Built on the GPU machine against its torch wheel in 15 s (2026-11-27, H200):
//   TORCH=$(python3 -c 'import torch,os;print(os.path.dirname(torch.__file__))')
//   g++ -O2 -std=c++17 cuda_graph_demo.cpp -o graph_demo -D_GLIBCXX_USE_CXX11_ABI=1 \
//     -I$TORCH/include -I$TORCH/include/torch/csrc/api/include -I/usr/local/cuda/include \
//     -L$TORCH/lib -Wl,-rpath,$TORCH/lib -ltorch -ltorch_cpu -ltorch_cuda -lc10 -lc10_cuda \
//     -L$TORCH/../nvidia/cu13/lib -Wl,-rpath,$TORCH/../nvidia/cu13/lib -l:libcudart.so.13
//   ./graph_demo 10    # k=10: eager 0.690 ms, graph replay 0.165 ms
//   ./graph_demo 670   # k=670: eager 3.943 ms, graph replay 3.910 ms
#include <torch/torch.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <chrono>
#include <cstdio>

int main(int argc, char** argv) {
  int64_t k = argc > 1 ? atoll(argv[1]) : 10, b = 128;
  auto opt = torch::TensorOptions().device(torch::kCUDA).dtype(torch::kFloat);
  auto x = torch::rand({k, b, 784}, opt);
  auto y = torch::randint(10, {k * b}, opt.dtype(torch::kLong));
  auto w1 = (torch::randn({k, 200, 784}, opt) * 0.01).requires_grad_();
  auto b1 = torch::zeros({k, 200}, opt).requires_grad_();
  auto w2 = (torch::randn({k, 10, 200}, opt) * 0.01).requires_grad_();
  auto b2 = torch::zeros({k, 10}, opt).requires_grad_();
  auto mask = (torch::rand({k, 200, 784}, opt) > 0.5).to(torch::kFloat);
  auto lr = torch::full({k, 1, 1}, 0.01, opt);
  auto step = [&]() {
    auto h = torch::baddbmm(b1.unsqueeze(1), x, w1.transpose(1, 2));
    h = torch::relu(h * (torch::rand_like(h) > 0.5).to(torch::kFloat) * 2.0);
    auto logits = torch::baddbmm(b2.unsqueeze(1), h, w2.transpose(1, 2));
    auto loss = torch::nn::functional::cross_entropy(logits.reshape({-1, 10}), y,
        torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum)) / b;
    auto g = torch::autograd::grad({loss}, {w1, b1, w2, b2});
    torch::NoGradGuard ng;
    w1.addcmul_(g[0] * mask, lr, -1);
    b1.addcmul_(g[1], lr.squeeze(-1), -1);
    w2.addcmul_(g[2], lr, -1);
    b2.addcmul_(g[3], lr.squeeze(-1), -1);
  };
  auto time_ms = [&](auto f, int reps) {
    for (int i = 0; i < 3; i++) f();
    torch::cuda::synchronize();
    auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < reps; i++) f();
    torch::cuda::synchronize();
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
  };
  double eager = time_ms(step, 200);
  auto stream = c10::cuda::getStreamFromPool();
  at::cuda::CUDAGraph graph;
  {
    c10::cuda::CUDAStreamGuard guard(stream);
    for (int i = 0; i < 3; i++) step();
    torch::cuda::synchronize();
    graph.capture_begin();
    step();
    graph.capture_end();
  }
  double replay = time_ms([&]() { graph.replay(); }, 500);
  printf("k=%ld: eager %.3f ms, graph replay %.3f ms (libtorch C++ API)\n", (long)k, eager, replay);
}
