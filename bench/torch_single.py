#!/usr/bin/python3
"""One process, one thread: the same training as `pstrain --standalone`
(an MLP on Fashion-MNIST, Adam, batch 100, shuffled epochs) in PyTorch, for
bench/single-process.  Benchmark only.

  torch_single.py [--steps N] [--hidden 100[,100...]] [--batch 100] [--lr 0.001] [--data DIR] [--autocast]

--autocast: the forward pass under torch.autocast("cpu", dtype=torch.bfloat16),
PyTorch's CPU mixed precision (its matrix products in bf16 through oneDNN,
float32 weights and optimizer), beside pstrain --precision bf16.

Prints one JSON line: samples_per_sec over the timed steps (after 50
warm-up steps), test_accuracy after training.
"""
import argparse
import json
import time

import torch

from torch_ps import load, make_model


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--hidden", default="100")
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--autocast", action="store_true")
    a = p.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(1)
    x, y, tx, ty = load(a.data)
    model = make_model([int(h) for h in a.hidden.split(",")])
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(1)
    order, pos = torch.randperm(len(x), generator=gen), 0
    warmup = 50
    start = None
    for step in range(a.steps + warmup):
        if step == warmup:
            start = time.perf_counter()
        if pos + a.batch > len(order):
            order, pos = torch.randperm(len(x), generator=gen), 0
        idx = order[pos:pos + a.batch]
        pos += a.batch
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast):
            loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        opt.step()
    seconds = time.perf_counter() - start
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast):
        acc = (model(tx).argmax(1) == ty).float().mean().item()
    print(json.dumps({"samples_per_sec": a.steps * a.batch / seconds, "test_accuracy": round(acc, 4),
                      "torch": torch.__version__, "threads": torch.get_num_threads(), "autocast": a.autocast}))


if __name__ == "__main__":
    main()
