"""The CNN on pstrain's PS through pstrain.torch: one worker task of a job
whose ps tasks are `pstrain serve` (the role comes from TF_CONFIG, as the
driver sets it).  DistributedOptimizer with Adam 0.001 on the PS, sync or
async; training ends when the PS's global step reaches --steps (the chief
then ends the job).  The chief prints one JSON line: samples_per_sec after
its warm-up steps (updates applied x batch, x workers in sync),
steady_samples_per_sec over the last half (from the first step at which it
sees global step N/2 to the end: the figure bench/torch-ps/run compares),
the test accuracy, and the ms per step of opt.step() (the exchange: push +
wait, with what the Python layer does around them).  --flush-denormal:
torch.set_flush_denormal(True) in this worker's thread (the optimizer runs
on the PS, pstrain's own).

  TF_CONFIG=... ps_torch.py [--sync] [--steps N] [--warmup W] [--flush-denormal]
"""

import argparse
import time

import torch

import common
import pstrain
from pstrain.torch import DistributedOptimizer


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sync", action="store_true")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--flush-denormal", action="store_true")
    a = p.parse_args()
    common.one_thread()
    flush = common.flush_denormal(a.flush_denormal)
    ctx = pstrain.init()
    x, y, tx, ty, source = common.load_images()
    model = common.make_cnn()
    opt = DistributedOptimizer(model.named_parameters(), optimizer="adam", lr=common.LR, sync=a.sync, context=ctx)
    loss_fn = torch.nn.CrossEntropyLoss()
    batches = common.Batches(x, y, ctx.task_index, ctx.num_workers)
    exchange = common.Exchange(a.warmup)
    local, t0, g0 = 0, None, 0
    steady = common.Steady(a.steps)
    # The chief stops at --steps updates and ends the job; the others go on until it has.
    while not opt.done and not (ctx.is_chief and opt.global_step >= a.steps):
        steady.mark(opt.global_step)
        if local == a.warmup:
            t0, g0 = time.perf_counter(), opt.global_step
        bx, by = batches.next()
        opt.zero_grad()
        loss_fn(model(bx), by).backward()
        exchange.time(opt.step)
        local += 1
    seconds = time.perf_counter() - t0
    per_update = common.BATCH * (ctx.num_workers if a.sync else 1)
    last_half = steady.fields(opt.global_step, per_update)
    if ctx.is_chief:
        samples = (opt.global_step - g0) * per_update
        acc = common.accuracy(model, tx, ty)
        opt.finish()
        common.report(
            framework="pstrain.torch",
            mode="sync" if a.sync else "async",
            workers=ctx.num_workers,
            ps=ctx.num_ps,
            steps=a.steps,
            warmup=a.warmup,
            global_step=opt.global_step,
            samples_per_sec=samples / seconds,
            **last_half,
            flush_denormal=flush,
            test_accuracy=acc,
            exchange_ms=exchange.ms(),
            data=source,
            torch=torch.__version__,
        )


if __name__ == "__main__":
    main()
