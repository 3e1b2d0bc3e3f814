"""The floor of one kdd23 cohort step on a GPU, measured with the machine's own PyTorch: the
same batched step fl takes (MLP 784-200-10, dropout 0.5 before the ReLU, an elementwise
gradient mask on fc1.weight, plain SGD, `k` clients of batch `b` stacked along a client
dimension), written the idiomatic PyTorch way, timed eagerly and as a replayed CUDA graph;
then the parts that fl computes differently: the counter-hash dropout noise (int64 as fl
has it, and an int32 form), torch's own generator for comparison, and the fc1 batched
product in float32 and TF32. Prints ms per step; run from anywhere:
    python3 fl-bench/scripts/step_floor.py [k ...]
"""

import sys

import torch
import torch.nn.functional as F

dev = torch.device("cuda")
torch.manual_seed(0)


def timed(f, reps=50):
    for _ in range(3):
        f()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        f()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def step_fn(k, b):
    data = torch.rand(60_000, 784, device=dev)
    labels = torch.randint(10, (60_000,), device=dev)
    w1 = (torch.randn(k, 200, 784, device=dev) * 0.01).requires_grad_()
    b1 = torch.zeros(k, 200, device=dev, requires_grad=True)
    w2 = (torch.randn(k, 10, 200, device=dev) * 0.01).requires_grad_()
    b2 = torch.zeros(k, 10, device=dev, requires_grad=True)
    params = [w1, b1, w2, b2]
    mask = (torch.rand(k, 200, 784, device=dev) > 0.5).float()
    lr = torch.full((k, 1, 1), 0.01, device=dev)
    index = torch.randint(60_000, (k * b,), device=dev)
    loss_sum = torch.zeros(k, device=dev)

    def step():
        x = data.index_select(0, index).view(k, b, 784)
        y = labels.index_select(0, index)
        h = torch.baddbmm(b1.unsqueeze(1), x, w1.transpose(1, 2))
        h = F.relu(F.dropout(h, 0.5, training=True))
        logits = torch.baddbmm(b2.unsqueeze(1), h, w2.transpose(1, 2))
        per = F.cross_entropy(logits.reshape(-1, 10), y, reduction="none").view(k, b).mean(1)
        loss_sum.add_(per.detach())
        grads = torch.autograd.grad(per.sum(), params)
        with torch.no_grad():
            w1.addcmul_(grads[0] * mask, lr, value=-1)
            b1.addcmul_(grads[1], lr.squeeze(-1), value=-1)
            w2.addcmul_(grads[2], lr, value=-1)
            b2.addcmul_(grads[3], lr.squeeze(-1), value=-1)

    return step


def graphed(step):
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(3):
            step()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        step()
    return g.replay


LOW32 = 0xFFFFFFFF


def hash64(x):
    def mul32(x, c):
        hi = ((x * (c >> 16)) & 0xFFFF) * 65536
        return (hi + x * (c & 0xFFFF)) & LOW32

    def xs(x, s):
        return x ^ (x >> s)

    x = xs(x & LOW32, 16)
    x = xs(mul32(x, 0x7FEB352D), 15)
    return xs(mul32(x, 0x846CA68B), 16)


def as_i32(c):
    return c - (1 << 32) if c >= 1 << 31 else c


def hash32(x):
    def xs(x, s):
        return x ^ ((x >> s) & ((1 << (32 - s)) - 1))

    x = xs(x, 16)
    x = xs(x * as_i32(0x7FEB352D), 15)
    return xs(x * as_i32(0x846CA68B), 16)


def noise64(keys, n):
    x = torch.arange(n, device=dev, dtype=torch.int64)
    x = hash64(hash64(x ^ keys) ^ keys)
    return x.float() * (1.0 / 4294967296.0)


def noise32(keys, n):
    x = torch.arange(n, device=dev, dtype=torch.int32)
    x = hash32(hash32(x ^ keys) ^ keys)
    return ((x >> 8) & 0xFFFFFF).float() * (1.0 / 16777216.0)


def main():
    ks = [int(a) for a in sys.argv[1:]] or [10, 670]
    print(torch.cuda.get_device_name(), torch.__version__)
    # The int32 hash must equal the int64 one on its low 32 bits.
    probe = torch.randint(0, 1 << 31, (1 << 20,), device=dev)
    same = (hash64(probe) & LOW32) == (hash32(probe.int()).long() & LOW32)
    print(f"int32 hash equals int64 hash: {bool(same.all())}")
    b = 128
    for k in ks:
        step = step_fn(k, b)
        eager = timed(step)
        graph = timed(graphed(step_fn(k, b)))
        print(f"k={k} b={b}: step eager {eager:.3f} ms, CUDA graph {graph:.3f} ms")
        n = b * 200
        keys64 = torch.randint(0, 1 << 32, (k, 1), device=dev)
        keys32 = keys64.to(torch.int32)
        gen = torch.Generator(device=dev)
        print(
            f"  dropout noise [{k}, {n}]: int64 hash {timed(lambda: noise64(keys64, n)):.3f} ms, "
            f"int32 hash {timed(lambda: noise32(keys32, n)):.3f} ms, "
            f"torch.rand {timed(lambda: torch.rand(k, n, device=dev, generator=gen)):.3f} ms"
        )
        x = torch.rand(k, b, 784, device=dev)
        w = torch.rand(k, 784, 200, device=dev)
        torch.backends.cuda.matmul.allow_tf32 = False
        f32 = timed(lambda: torch.bmm(x, w))
        torch.backends.cuda.matmul.allow_tf32 = True
        tf32 = timed(lambda: torch.bmm(x, w))
        torch.backends.cuda.matmul.allow_tf32 = False
        print(f"  fc1 bmm [{k},{b},784]x[{k},784,200]: fp32 {f32:.3f} ms, tf32 {tf32:.3f} ms")


main()
