#!/usr/bin/python3
"""A parameter server on PyTorch's gloo backend, for comparison with pstrain.

The same job as `pstrain` with 1 PS and M workers: a flat parameter vector
on the PS (rank 0) with the optimizer, workers (ranks 1..M) each training on
their shard of Fashion-MNIST; every step a worker sends its gradient and gets
the new parameters back.  Sync: the PS averages one gradient of every worker
per step.  Async: it applies each gradient on arrival.  Benchmark only.

  torch_ps.py --rank R --world W --port P [--sync] [--steps N] [--hidden 100]
              [--batch 100] [--lr 0.001] [--data DIR] [--flush-denormal]

Worker 1 prints one JSON line like pstrain's chief: samples_per_sec over
the whole run (worker 1's first step to the last, as before), and
steady_samples_per_sec over the last half of the global steps (from the
first reply at or after step N/2 to the end: bench/steady_timer.py), the
figure the benchmarks compare, with steady_from_step, steady_to_step.
--flush-denormal: torch.set_flush_denormal(True) first in every rank (the
PS's Adam runs in its main thread; gloo's threads, started after it,
inherit it); the line's flush_denormal says which.
"""

import argparse
import gzip
import json
import os
import struct
import time

import numpy as np
import torch
import torch.distributed as dist
from steady_timer import Steady, flush_denormal


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    (magic,) = struct.unpack(">I", data[:4])
    dims = magic & 0xFF
    shape = struct.unpack(">" + "I" * dims, data[4 : 4 + 4 * dims])
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(data_dir):
    x = read_idx(os.path.join(data_dir, "train-images-idx3-ubyte.gz")).reshape(-1, 784).astype(np.float32) / 255.0
    y = read_idx(os.path.join(data_dir, "train-labels-idx1-ubyte.gz")).astype(np.int64)
    tx = read_idx(os.path.join(data_dir, "t10k-images-idx3-ubyte.gz")).reshape(-1, 784).astype(np.float32) / 255.0
    ty = read_idx(os.path.join(data_dir, "t10k-labels-idx1-ubyte.gz")).astype(np.int64)
    mean, std = x.mean(), x.std()
    return (
        torch.from_numpy((x - mean) / std),
        torch.from_numpy(y),
        torch.from_numpy((tx - mean) / std),
        torch.from_numpy(ty),
    )


def make_model(hidden):
    layers, width = [], 784
    for h in hidden:
        layers += [torch.nn.Linear(width, h), torch.nn.ReLU()]
        width = h
    layers.append(torch.nn.Linear(width, 10))
    return torch.nn.Sequential(*layers)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--sync", action="store_true")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--hidden", default="100")
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--master", default="127.0.0.1", help="rank 0's address (another node's on a --netns cluster)")
    p.add_argument("--flush-denormal", action="store_true", help="torch.set_flush_denormal(True) in every rank")
    a = p.parse_args()
    torch.set_num_threads(1)
    flush = flush_denormal(a.flush_denormal)
    torch.manual_seed(a.seed)
    os.environ.update(MASTER_ADDR=a.master, MASTER_PORT=str(a.port))
    dist.init_process_group("gloo", rank=a.rank, world_size=a.world)
    model = make_model([int(h) for h in a.hidden.split(",")])
    flat = torch.nn.utils.parameters_to_vector(model.parameters()).detach()
    n = flat.numel()
    workers = a.world - 1
    # The element after the parameters says whether training is done, the last one the global step.
    reply = torch.zeros(n + 2)

    if a.rank == 0:
        param = torch.nn.Parameter(flat.clone())
        opt = torch.optim.Adam([param], lr=a.lr)
        reply[:n] = param.data
        for w in range(1, a.world):
            dist.send(reply, dst=w)
        grads = [torch.zeros(n) for _ in range(a.world)]
        step = 0
        if a.sync:
            while step < a.steps:
                for w in range(1, a.world):
                    dist.recv(grads[w], src=w)
                param.grad = torch.stack(grads[1:]).mean(0)
                opt.step()
                step += 1
                reply[:n] = param.data
                reply[n] = 1.0 if step >= a.steps else 0.0
                reply[n + 1] = step
                for w in range(1, a.world):
                    dist.send(reply, dst=w)
        else:
            finished = 0
            while finished < workers:
                src = dist.recv(grads[0])
                if step < a.steps:
                    param.grad = grads[0]
                    opt.step()
                    step += 1
                reply[:n] = param.data
                reply[n] = 1.0 if step >= a.steps else 0.0
                reply[n + 1] = step
                if step >= a.steps:
                    finished += 1
                dist.send(reply, dst=src)
        dist.barrier()
        return

    x, y, tx, ty = load(a.data)
    shard = torch.arange(a.rank - 1, x.shape[0], workers)
    gen = torch.Generator().manual_seed(a.seed * 1000 + a.rank)
    order, pos = shard[torch.randperm(len(shard), generator=gen)], 0
    dist.recv(reply, src=0)
    loss_fn = torch.nn.CrossEntropyLoss()
    t0 = time.time()
    local = 0
    steady = Steady(a.steps)
    while reply[n] == 0.0:
        steady.mark(int(reply[n + 1]))
        torch.nn.utils.vector_to_parameters(reply[:n], model.parameters())
        if pos + a.batch > len(order):
            order, pos = shard[torch.randperm(len(shard), generator=gen)], 0
        idx = order[pos : pos + a.batch]
        pos += a.batch
        model.zero_grad()
        loss = loss_fn(model(x[idx]), y[idx])
        loss.backward()
        g = torch.cat([q.grad.reshape(-1) for q in model.parameters()])
        dist.send(g, dst=0)
        dist.recv(reply, src=0)
        local += 1
    seconds = time.time() - t0
    samples_per_step = a.batch * (workers if a.sync else 1)
    last_half = steady.fields(int(reply[n + 1]), samples_per_step)
    if a.rank == 1:
        torch.nn.utils.vector_to_parameters(reply[:n], model.parameters())
        with torch.no_grad():
            acc = (model(tx).argmax(1) == ty).float().mean().item()
        samples = a.steps * samples_per_step
        print(
            json.dumps(
                {
                    "event": "done",
                    "global_step": a.steps,
                    "test_accuracy": acc,
                    "train_seconds": seconds,
                    "samples_per_sec": samples / seconds,
                    **last_half,
                    "flush_denormal": flush,
                    "ps": 1,
                    "workers": workers,
                    "mode": "sync" if a.sync else "async",
                    "framework": "pytorch-gloo",
                }
            ),
            flush=True,
        )
    dist.barrier()


if __name__ == "__main__":
    main()
