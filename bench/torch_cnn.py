#!/usr/bin/python3
"""The cnn preset in PyTorch, one thread, for bench/vs-torch-cnn.  Benchmark only.

torch_cnn.py step [--steps N] [--batch 100] [--lr 0.001] [--data DIR] [--autocast] [--flush-denormal]
    trains conv2d:32:5x5:relu,maxpool:2,conv2d:64:5x5:relu,maxpool:2,flatten,
    dense:1024:relu,dropout:0.4,dense:10 with Adam on Fashion-MNIST as
    `pstrain --standalone --model cnn` does (standardised pixels, shuffled
    epochs), N steps in all (N after 10 warm-up steps before); one JSON
    line: samples_per_sec over the steps after the first 10 (N/2 when N < 20),
    steady_samples_per_sec over the last half (steps N/2 to N:
    bench/steady_timer.py), the figure bench/vs-torch-cnn and
    bench/bf16-vs-autocast compare.  --autocast: the forward pass under
    torch.autocast("cpu", dtype=torch.bfloat16), PyTorch's CPU mixed
    precision, beside pstrain --precision bf16.  --flush-denormal:
    torch.set_flush_denormal(True) first (one thread: it covers the
    whole step).
torch_cnn.py layers [--repeat R] [--batch 100]
    forward + backward milliseconds of each layer (median of R passes after
    3 warm-up passes), the layers bench/layer-times times, as one JSON line.
"""

import argparse
import json
import statistics
import time

import torch
from steady_timer import Steady, flush_denormal
from torch_ps import load


def make_cnn():
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 32, 5, padding=2),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(32, 64, 5, padding=2),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(3136, 1024),
        torch.nn.ReLU(),
        torch.nn.Dropout(0.4),
        torch.nn.Linear(1024, 10),
    )


def step(a):
    torch.manual_seed(1)
    x, y, _, _ = load(a.data)
    x = x.reshape(-1, 1, 28, 28)
    model = make_cnn()
    opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator().manual_seed(1)
    order, pos = torch.randperm(len(x), generator=gen), 0
    warmup, start = min(10, a.steps // 2), None
    steady = Steady(a.steps)
    for i in range(a.steps):
        steady.mark(i)
        if i == warmup:
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
    print(
        json.dumps(
            {
                "samples_per_sec": (a.steps - warmup) * a.batch / seconds,
                **last_half,
                "steps": a.steps,
                "autocast": a.autocast,
                "flush_denormal": a.flush_denormal,
            }
        )
    )


def median_ms(repeat, fn):
    for _ in range(3):
        fn()
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def layers(a):
    n = a.batch
    torch.manual_seed(1)
    out = {}

    def time_layer(name, module, shape, first=False):
        x = torch.randn(*shape) * 0.1
        x.requires_grad_(not first)
        y = module(x)
        dy = torch.randn_like(y)

        def run():
            for p in module.parameters():
                p.grad = None
            if x.grad is not None:
                x.grad = None
            module(x).backward(dy)

        out[name] = median_ms(a.repeat, run)

    # conv1 is the first layer: its input needs no gradient, as in training.
    time_layer(
        "conv1", torch.nn.Sequential(torch.nn.Conv2d(1, 32, 5, padding=2), torch.nn.ReLU()), (n, 1, 28, 28), first=True
    )
    time_layer("conv2", torch.nn.Sequential(torch.nn.Conv2d(32, 64, 5, padding=2), torch.nn.ReLU()), (n, 32, 14, 14))
    time_layer("pool1", torch.nn.MaxPool2d(2), (n, 32, 28, 28))
    time_layer("pool2", torch.nn.MaxPool2d(2), (n, 64, 14, 14))
    time_layer("dense1", torch.nn.Sequential(torch.nn.Linear(3136, 1024), torch.nn.ReLU()), (n, 3136))
    time_layer("dense2", torch.nn.Linear(1024, 10), (n, 1024))
    time_layer("dropout", torch.nn.Dropout(0.4).train(), (n, 1024))
    logits = torch.randn(n, 10, requires_grad=True)
    labels = torch.arange(n) % 10
    loss_fn = torch.nn.CrossEntropyLoss()

    def xent():
        logits.grad = None
        loss_fn(logits, labels).backward()

    out["softmax_xent"] = median_ms(a.repeat, xent)
    print(json.dumps(out))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("what", choices=["step", "layers"])
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--repeat", type=int, default=21)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--autocast", action="store_true")
    p.add_argument("--flush-denormal", action="store_true")
    a = p.parse_args()
    if a.what == "step" and a.steps < 2:
        raise SystemExit("torch_cnn.py: give --steps of 2 or more")
    torch.set_num_threads(1)
    flush_denormal(a.flush_denormal)
    step(a) if a.what == "step" else layers(a)


if __name__ == "__main__":
    main()
