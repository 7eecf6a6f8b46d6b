"""Programs that give pstrain.torch bad input, for t-torch.sh: each must end
the job with one clear error line.

  --case shape           worker 1's last layer has 11 outputs, the chief's 10
  --case noncontiguous   a parameter that is a transposed view
"""
import argparse
import json
import sys

import torch
from torch import nn

import pstrain
from pstrain.torch import DistributedOptimizer

p = argparse.ArgumentParser()
p.add_argument("--case", choices=("shape", "noncontiguous"), required=True)
args = p.parse_args()

def main():
    ctx = pstrain.init()
    torch.manual_seed(1)
    width = 10
    if args.case == "shape" and ctx.task_index == 1:
        width = 11
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, width))
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


try:
    main()
except pstrain.Error as e:  # one line, as the examples do
    sys.exit("torch_bad_input: error: %s" % e)
