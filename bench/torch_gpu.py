#!/usr/bin/python3
"""PyTorch on one GPU, the same training as `pstrain --standalone --device
cuda` (784-1024-1024-10 or the cnn preset on Fashion-MNIST, standardised
pixels, Adam, shuffled epochs), for bench/gpu-vs-torch.  Benchmark only.

  torch_gpu.py [--model mlp|cnn] [--steps N] [--batch 100] [--lr 0.001] [--data DIR]
               [--device cuda] [--autocast] [--ps sync|async]

FP32 with TF32 off (cuBLAS and cuDNN), as pstrain computes; --autocast:
the forward pass under torch.autocast(device, dtype=torch.bfloat16),
PyTorch's mixed precision, beside pstrain --precision bf16.  The training
set lives on the device, as pstrain's batches are gathered there; each
step draws the next batch of a shuffled epoch.  cuDNN picks its
algorithms by its heuristics (torch.backends.cudnn.benchmark off), as
pstrain's do.

--ps sync|async: the same program with pstrain.torch's
DistributedOptimizer instead of torch.optim.Adam (Adam on the ps tasks,
the model staged through the exchange's pinned buffers): the task's role
from TF_CONFIG (bench/gpu-vs-torch starts `pstrain serve` beside it); the
chief prints the JSON line and ends the job.

Prints one JSON line: steady_samples_per_sec over the last half (steps
N/2 to N: bench/steady_timer.py, the device synchronised at both ends),
the figure bench/gpu-vs-torch compares, and test_accuracy after training.
--device cpu runs the same program on the CPU (what the tests check
without a GPU).
"""

import argparse
import json

import torch
from steady_timer import Steady
from torch_cnn import make_cnn
from torch_ps import load, make_model


def accuracy(model, x, y, batch):
    model.eval()
    correct = 0
    with torch.no_grad():
        for i in range(0, len(x), batch):
            correct += (model(x[i : i + batch]).argmax(1) == y[i : i + batch]).sum().item()
    model.train()
    return correct / len(x)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", choices=["mlp", "cnn"], default="mlp")
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch", type=int, default=100)
    p.add_argument("--lr", type=float, default=0.001)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    p.add_argument("--device", default="cuda")
    p.add_argument("--autocast", action="store_true")
    p.add_argument("--ps", choices=["sync", "async"])
    a = p.parse_args()
    dev = torch.device(a.device)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    torch.manual_seed(1)
    x, y, tx, ty = (t.to(dev) for t in load(a.data))
    if a.model == "cnn":
        x, tx = x.reshape(-1, 1, 28, 28), tx.reshape(-1, 1, 28, 28)
        model = make_cnn().to(dev)
    else:
        model = make_model([1024, 1024]).to(dev)
    if a.ps:
        import pstrain
        from pstrain.torch import DistributedOptimizer

        ctx = pstrain.init()
        opt = DistributedOptimizer(
            model.named_parameters(), optimizer="adam", lr=a.lr, sync=a.ps == "sync", context=ctx
        )
    else:
        opt = torch.optim.Adam(model.parameters(), lr=a.lr)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator(device=dev).manual_seed(1)
    order, pos = torch.randperm(len(x), generator=gen, device=dev), 0
    steady = Steady(a.steps)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for i in range(a.steps):
        if i == a.steps // 2:
            sync()
        steady.mark(i)
        if pos + a.batch > len(x):
            order, pos = torch.randperm(len(x), generator=gen, device=dev), 0
        rows = order[pos : pos + a.batch]
        pos += a.batch
        if a.ps:
            opt.zero_grad()  # a CPU model's gradients are views of the exchange buffer: kept, zeroed
        else:
            opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=a.autocast):
            loss = loss_fn(model(x[rows]), y[rows])
        loss.backward()
        opt.step()
    sync()
    out = steady.fields(a.steps, a.batch)
    if a.ps and not ctx.is_chief:
        opt.finish()
        return
    out.update(
        {
            "model": a.model,
            "batch": a.batch,
            "autocast": a.autocast,
            "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
            "torch": torch.__version__,
            "ps": a.ps,
            "test_accuracy": accuracy(model, tx, ty, 1000),
        }
    )
    if a.ps:
        opt.finish()
    print(json.dumps(out))


if __name__ == "__main__":
    main()
