"""The reference of benchmark (a) of `cargo xtask bench`: FedAvg on MNIST as a plain PyTorch loop,
on the same torch wheel as the Rust side and the same thread count. 10 clients with an IID
split, each round every client trains a copy of the global MLP 784-200-10 for one epoch of SGD
(batch 64, lr 0.05, momentum 0.5) on inputs normalised as our reader does, the server averages the copies weighted by samples and
evaluates on the test set (batches of 1000). Prints `seconds <value>` for the rounds alone
(data loading excluded, as on the Rust side) and `accuracy <value>`."""

import argparse
import os
import time

import torch
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--data", required=True, help="directory holding the four MNIST IDX files")
p.add_argument("--threads", type=int, default=1)
p.add_argument("--device", default="cpu")
p.add_argument("--clients", type=int, default=10)
p.add_argument("--rounds", type=int, default=10)
args = p.parse_args()
torch.set_num_threads(args.threads)
torch.manual_seed(1)
dev = torch.device(args.device)


def idx(name, offset):
    with open(os.path.join(args.data, name), "rb") as f:
        return torch.frombuffer(bytearray(f.read()), dtype=torch.uint8, offset=offset)


def images(name):
    return ((idx(name, 16).float() / 255.0 - 0.1307) / 0.3081).reshape(-1, 1, 28, 28).to(dev)


def labels(name):
    return idx(name, 8).long().to(dev)


x, y = images("train-images-idx3-ubyte"), labels("train-labels-idx1-ubyte")
tx, ty = images("t10k-images-idx3-ubyte"), labels("t10k-labels-idx1-ubyte")
parts = torch.randperm(len(y), device=dev).chunk(args.clients)


def mlp():
    return torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(784, 200), torch.nn.ReLU(), torch.nn.Linear(200, 10)).to(dev)


def local(global_state, part):
    model = mlp()
    model.load_state_dict(global_state)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.5)
    order = part[torch.randperm(len(part), device=dev)]
    for begin in range(0, len(order), 64):
        batch = order[begin : begin + 64]
        loss = F.cross_entropy(model(x[batch]), y[batch])
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.state_dict()


server = mlp()
start = time.perf_counter()
for _ in range(args.rounds):
    states = [local(server.state_dict(), part) for part in parts]
    weights = [len(part) / len(y) for part in parts]
    server.load_state_dict({k: sum(w * s[k] for w, s in zip(weights, states)) for k in states[0]})
    with torch.no_grad():
        correct = sum((server(tx[b : b + 1000]).argmax(1) == ty[b : b + 1000]).sum() for b in range(0, len(ty), 1000))
    accuracy = correct.item() / len(ty)
elapsed = time.perf_counter() - start
print(f"seconds {elapsed}")
print(f"accuracy {accuracy}")
