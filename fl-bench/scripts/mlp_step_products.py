"""How fast one CPU core can take a step of benchmark (a) at best: times, on one thread with the
machine's own PyTorch, the two products of the MLP's first layer that every batch-64 step of
(a) computes (the forward 64x784 . 784x200 and the weight gradient 200x64 . 64x784), the
momentum update of that weight (in two ops), the batch's row gather, and a 2048^3 product for
the core's peak. Prints microseconds and GFLOP/s. What (a) may spend a step beyond the two
products to reach a ratio R against the PyTorch loop's T seconds is
(T / R - evaluation) / 4700 - products, 4700 being the steps each of the two cores takes
(10 rounds x 10 clients x 94 steps, over 2 workers). Run from anywhere:
    python3 fl-bench/scripts/mlp_step_products.py
"""

import time

import torch

torch.set_num_threads(1)
torch.manual_seed(0)


def micros(f, calls=2000):
    for _ in range(100):
        f()
    start = time.perf_counter()
    for _ in range(calls):
        f()
    return (time.perf_counter() - start) / calls * 1e6


x, w, dh = torch.randn(64, 784), torch.randn(200, 784), torch.randn(64, 200)
h, g, v = torch.empty(64, 200), torch.empty(200, 784), torch.zeros(200, 784)
data, rows = torch.randn(6000, 784), torch.randperm(6000)[:64]
flops = 2 * 64 * 784 * 200
forward = micros(lambda: torch.mm(x, w.t(), out=h))
gradient = micros(lambda: torch.mm(dh.t(), x, out=g))
update = micros(lambda: (v.mul_(0.5).add_(g), w.sub_(v, alpha=0.05)))
gather = micros(lambda: data.index_select(0, rows))
a, b = torch.randn(2048, 2048), torch.randn(2048, 2048)
peak = 2 * 2048**3 / micros(lambda: torch.mm(a, b), calls=5) / 1e3
print(f"forward product   {forward:7.1f} us  {flops / forward / 1e3:6.1f} GFLOP/s")
print(f"weight gradient   {gradient:7.1f} us  {flops / gradient / 1e3:6.1f} GFLOP/s")
print(f"momentum update   {update:7.1f} us")
print(f"row gather        {gather:7.1f} us")
print(f"2048^3 product    {peak:7.1f} GFLOP/s on one core")
