"""One worker of tests/python/test_checkpoint.py's jobs: trains a small
model with a DistributedOptimizer whose checkpoints go through the job's
`pstrain serve` tasks, and prints one JSON line (the chief)."""

import json
import os
import sys

import torch

from pstrain.torch import DistributedOptimizer

torch.set_num_threads(1)
steps, directory = int(sys.argv[1]), sys.argv[2]
torch.manual_seed(0)
if os.environ.get("CKPT_TEST_MODEL") == "changed":
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 3))
else:
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))
opt = DistributedOptimizer(model.named_parameters(), optimizer="adam", lr=0.01, sync=True, checkpoint_dir=directory)
before = [p.detach().flatten().tolist() for p in model.parameters()]
g = torch.Generator().manual_seed(1)
x, y = torch.randn(16, 4, generator=g), torch.randint(0, 3, (16,), generator=g)
for _ in range(steps):
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
saved = opt.save({"epoch": 3, "note": "the chief's own"}) if steps > 0 else None
print(
    json.dumps(
        {
            "restored": opt.restored_step,
            "state": opt.worker_state(),
            "saved": saved,
            "before": before,
            "after": [p.detach().flatten().tolist() for p in model.parameters()],
        }
    ),
    flush=True,
)
opt.finish()
