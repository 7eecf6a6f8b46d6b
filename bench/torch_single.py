#!/usr/bin/python3
"""One process, one thread: the same training as `pstrain --standalone`
(an MLP on Fashion-MNIST, Adam, batch 100, shuffled epochs) in PyTorch, for
bench/single-process.  Benchmark only.

  torch_single.py [--steps N] [--hidden 100[,100...]] [--batch 100] [--lr 0.001] [--data DIR] [--autocast]
                  [--flush-denormal]

--autocast: the forward pass under torch.autocast("cpu", dtype=torch.bfloat16),
PyTorch's CPU mixed precision (its matrix products in bf16 through oneDNN,
float32 weights and optimizer), beside pstrain --precision bf16.

--flush-denormal: torch.set_flush_denormal(True) first (one thread: it
covers the forward, backward and Adam).

N steps in all (this program ran N after 50 warm-up steps before).
Prints one JSON line: samples_per_sec over the steps after the first 50
(N/2 when N < 100), steady_samples_per_sec over the last half (steps N/2
to N: bench/steady_timer.py), the figure the benchmarks compare,
test_accuracy after training, flush_denormal.
"""

import argparse
import json
import time

import torch
from steady_timer import Steady, flush_denormal
from torch_ps import load, make_model


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--hidden", default="100")
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--autocast", action="store_true")
    p.add_argument("--flush-denormal", action="store_true")
    a = p.parse_args()
    if a.steps < 2:
        raise SystemExit("torch_single.py: give --steps of 2 or more")
    torch.set_num_threads(1)
    flush = flush_denormal(a.flush_denormal)
    torch.manual_seed(1)
    x, y, tx, ty = load(a.data)
    model = make_model([int(h) for h in a.hidden.split(",")])
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(1)
    order, pos = torch.randperm(len(x), generator=gen), 0
    warmup = min(50, a.steps // 2)
    start = None
    steady = Steady(a.steps)
    for step in range(a.steps):
        steady.mark(step)
        if step == warmup:
            start = time.perf_counter()
        if pos + a.batch > len(order):
            order, pos = torch.randperm(len(x), generator=gen), 0
        idx = order[pos : pos + a.batch]
        pos += a.batch
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast):
            loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
    seconds = time.perf_counter() - start
    last_half = steady.fields(a.steps, a.batch)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast):
        acc = (model(tx).argmax(1) == ty).float().mean().item()
    print(
        json.dumps(
            {
                "samples_per_sec": (a.steps - warmup) * a.batch / seconds,
                **last_half,
                "test_accuracy": round(acc, 4),
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "autocast": a.autocast,
                "flush_denormal": flush,
            }
        )
    )


if __name__ == "__main__":
    main()
