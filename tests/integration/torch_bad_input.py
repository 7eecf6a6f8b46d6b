"""Programs that give pstrain bad input, for t-torch.sh: each must end the
job with one clear error line.

  --case shape           worker 1's last layer has 11 outputs, the chief's 10
  --case noncontiguous   a parameter that is a transposed view
  --case changed         the model of --width W: with --save the chief
                         snapshots it at the end (pstrain checkpoint seal
                         makes that a checkpoint); with --restore STEP it
                         starts from that checkpoint instead (pstrain's
                         client: pstrain.torch has no restore of its own yet)
"""

import argparse
import json
import sys

import torch
from torch import nn

import pstrain
from pstrain.torch import DistributedOptimizer

p = argparse.ArgumentParser()
p.add_argument("--case", choices=("shape", "noncontiguous", "changed"), required=True)
p.add_argument("--width", type=int, default=10)
p.add_argument("--save", action="store_true")
p.add_argument("--restore", type=int)
args = p.parse_args()


def model_of(width):
    torch.manual_seed(1)
    return nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, width))


def train_torch(ctx, width):
    model = model_of(width)
    if args.case == "noncontiguous":
        # A weight kept transposed: its storage is [in, out], its view [out, in].
        model[2].weight = nn.Parameter(torch.randn(8, width).t())
    opt = DistributedOptimizer(model.named_parameters(), optimizer="sgd", lr=0.1, context=ctx)
    x, y = torch.randn(32, 4), torch.randn(32, width)
    while not opt.done and (opt.global_step < 20 or not ctx.is_chief):
        opt.zero_grad()
        nn.functional.mse_loss(model(x), y).backward()
        opt.step()
    if ctx.is_chief:
        print(json.dumps({"event": "done", "global_step": opt.global_step}), flush=True)
    opt.finish()


def train_saved(ctx, width):
    """The same model through pstrain's client, started from a checkpoint or saved into one."""
    model = model_of(width)
    settings = pstrain.Settings(optimizer=pstrain.Optimizer("sgd", lr=0.1))
    client = ctx.connect(tensors=[(n, tuple(p.shape)) for n, p in model.named_parameters()], settings=settings)
    if ctx.is_chief and args.restore is not None:
        client.wait(client.restore(args.restore))
    elif ctx.is_chief:
        for n, p in model.named_parameters():
            client.param(n)[...] = p.detach().numpy()
        client.wait(client.init())
    else:
        client.wait(client.pull())
    while not client.done and (client.global_step < 20 or not ctx.is_chief):
        client.grads.fill(0.01)
        client.step()
    if ctx.is_chief:
        step = client.global_step
        if args.save:
            outcomes = client.snapshot(step)
            receipts = [{"bytes": o["bytes"], "checksum": o["checksum"], "step": o["step"]} for o in outcomes]
            print(
                json.dumps(
                    {"event": "saved", "step": step, "outcomes": [o["outcome"] for o in outcomes], "receipts": receipts}
                ),
                flush=True,
            )
        print(json.dumps({"event": "done", "global_step": step}), flush=True)
        client.shutdown()


def main():
    ctx = pstrain.init()
    width = 11 if args.case == "shape" and ctx.task_index == 1 else args.width
    (train_saved if args.case == "changed" else train_torch)(ctx, width)


try:
    main()
except pstrain.Error as e:  # one line, as the examples do
    sys.exit("torch_bad_input: error: %s" % e)
