"""A PyTorch program as users write it, for t-torch.sh: pstrain.init() for
the task's index (its shard of the data), then DistributedOptimizer without
context=, a loop of --steps steps, and the end of the program without
opt.finish().

  --worker-steps S   every worker but the chief stops after S steps
                     (default: --steps): its program ends before the job
  --crash-worker K   worker K raises at step --steps / 2 (an uncaught
                     exception: its PS tasks count it lost and name it)
  --absent-worker K  worker K never calls pstrain.init() (it sleeps): the
                     others' bootstrap ends within --timeout
  --second-bootstrap every worker also asks the library itself for a second
                     bootstrap, which must be refused in one line (printed)
  --print-device     every worker prints ctx.device and its
                     CUDA_VISIBLE_DEVICES (the model stays on the CPU: the
                     test cluster's GPUs are names only)
"""

import argparse
import json
import os
import time

import torch
from torch import nn

import pstrain
from pstrain.torch import DistributedOptimizer

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=40)
p.add_argument("--worker-steps", type=int)
p.add_argument("--crash-worker", type=int)
p.add_argument("--absent-worker", type=int)
p.add_argument("--timeout", type=float, default=60.0)
p.add_argument("--second-bootstrap", action="store_true")
p.add_argument("--print-device", action="store_true")
args = p.parse_args()

me = int(os.environ.get("PSTRAIN_TASK_INDEX", "0"))
if args.absent_worker == me:
    time.sleep(600)

ctx = pstrain.init(timeout=args.timeout)
if args.print_device:
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "<unset>")
    print(f"device: {ctx.name} {ctx.device} CUDA_VISIBLE_DEVICES={visible}", flush=True)
if args.second_bootstrap:
    try:
        pstrain._core.connect_task(args.timeout, 5.0, None, None, None, None)
        raise SystemExit("a second bootstrap in one process was not refused")
    except pstrain.Error as e:
        print(f"refused: {e}", flush=True)
torch.manual_seed(ctx.task_index)
x, y = torch.randn(64, 4), torch.randn(64, 2)
model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
opt = DistributedOptimizer(model.named_parameters(), optimizer="sgd", lr=0.05, sync=True)
assert opt.context is pstrain.init(), "init() gave the process a second context"
steps = args.steps if ctx.is_chief or args.worker_steps is None else args.worker_steps
for step in range(steps):
    if args.crash_worker == ctx.task_index and step == args.steps // 2:
        raise RuntimeError(f"worker {ctx.task_index} crashed at step {step}")
    opt.zero_grad()
    nn.functional.mse_loss(model(x), y).backward()
    opt.step()
if ctx.is_chief:
    print(json.dumps({"event": "done", "global_step": opt.global_step}), flush=True)
