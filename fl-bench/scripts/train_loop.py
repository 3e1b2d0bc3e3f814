"""The reference loop for `cargo bench -p fl-bench --bench vs_pytorch`: one client's local
epochs of an MLP 784-200-10 with plain mini-batch SGD, written the idiomatic PyTorch way, on
the same torch wheel the Rust side links. Prints `samples_per_s <value>`."""

import argparse
import time

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--samples", type=int, default=6000)
p.add_argument("--epochs", type=int, default=5)
p.add_argument("--batch", type=int, default=32)
p.add_argument("--lr", type=float, default=0.05)
args = p.parse_args()

torch.set_num_threads(1)
torch.manual_seed(0)
x = torch.rand(args.samples, 1, 28, 28)
y = torch.randint(10, (args.samples,))


def epoch():
    model = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 200), torch.nn.ReLU(), torch.nn.Linear(200, 10))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr)
    perm = torch.randperm(args.samples)
    total = torch.zeros(())
    for begin in range(0, args.samples, args.batch):
        idx = perm[begin : begin + args.batch]
        loss = F.cross_entropy(model(x[idx]), y[idx])
        total += loss.detach()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return total.item()


epoch()  # warm-up
start = time.perf_counter()
for _ in range(args.epochs):
    epoch()
elapsed = time.perf_counter() - start
print(f"samples_per_s {args.samples * args.epochs / elapsed}")
