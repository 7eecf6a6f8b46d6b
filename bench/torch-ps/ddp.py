"""PyTorch DDP over gloo: 2 workers (ranks 0 and 1), the CNN, Adam 0.001,
batch 64 a worker, one thread a process.  Rank 0 prints one JSON line:
samples_per_sec over the steps after the warm-up (both workers' samples),
steady_samples_per_sec over the last half (steps N/2 to N: the figure
bench/torch-ps/run compares) and the test accuracy.  DDP is synchronous
only (its all-reduce runs in backward's hooks): it has no async row.
--flush-denormal: torch.set_flush_denormal(True) in each rank's thread
before gloo starts (forward, backward and Adam run there; gloo's threads,
started after it, inherit it).

  ddp.py --rank R --world 2 --port P [--steps N] [--warmup W] [--flush-denormal]
"""

import argparse
import os
import time

import torch
import torch.distributed as dist

import common


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--flush-denormal", action="store_true")
    a = p.parse_args()
    common.one_thread()
    flush = common.flush_denormal(a.flush_denormal)
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(a.port))
    dist.init_process_group("gloo", rank=a.rank, world_size=a.world)
    x, y, tx, ty, source = common.load_images()
    model = torch.nn.parallel.DistributedDataParallel(common.make_cnn())
    opt = torch.optim.Adam(model.parameters(), lr=common.LR)
    loss_fn = torch.nn.CrossEntropyLoss()
    batches = common.Batches(x, y, a.rank, a.world)
    t0 = None
    steady = common.Steady(a.steps)
    for step in range(a.steps):
        steady.mark(step)
        if step == a.warmup:
            t0 = time.perf_counter()
        bx, by = batches.next()
        opt.zero_grad()
        loss_fn(model(bx), by).backward()  # the all-reduce runs in backward's hooks
        opt.step()
    seconds = time.perf_counter() - t0
    last_half = steady.fields(a.steps, common.BATCH * a.world)
    if a.rank == 0:
        common.report(
            framework="torch-ddp-gloo",
            mode="sync",
            workers=a.world,
            steps=a.steps,
            warmup=a.warmup,
            samples_per_sec=(a.steps - a.warmup) * common.BATCH * a.world / seconds,
            **last_half,
            flush_denormal=flush,
            test_accuracy=common.accuracy(model.module, tx, ty),
            data=source,
            torch=torch.__version__,
        )
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
