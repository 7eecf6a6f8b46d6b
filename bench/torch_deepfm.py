#!/usr/bin/python3
"""One process, one thread: pstrain's --model deepfm in PyTorch, for
bench/bf16-vs-autocast.  Benchmark only.

The same model as trainer/model/ctr_model.cpp with its defaults
(deepfm 26x16+13 128-64 sum):
  logit = wide + deep + fm
  wide  = bias + numeric . w + sum over the 26 fields of a 1-float row
          ("wide" table);
  deep  = an MLP 429-128-64 (ReLU) and a 64-1 logit layer over [the 26
          fields' 16-float rows ("deep" table), in field order; the 13
          numeric features];
  fm    = sum over field pairs f < g of <e_f, e_g> (the deep rows);
sigmoid cross-entropy, mean over the batch.  Numeric features as pstrain
reads them: log(1 + x), -log(1 - x) below 0, a blank 0.  Each field's
value is a key of its own (a blank too: one "missing" key a field).
Dense tensors (wide weights and bias zero, glorot-uniform matrices, zero
biases): Adam --lr (pstrain --optimizer adam --learning-rate);
table rows (uniform in +-0.05): Adagrad 0.5 with accumulators starting at
0.1, each row updated only when its key is in the batch (pstrain's
defaults --embedding-optimizer adagrad --embedding-learning-rate 0.5).
Batches of --batch lines in file order, wrapping around at the end of the
training lines, as pstrain's reader does; --steps updates in all.  At
test time a key no training batch held reads as zeros, as pstrain's
lookup does.

  torch_deepfm.py --data DIR [--steps 3000] [--warmup 50] [--batch 512] [--lr 0.002] [--autocast]
                  [--flush-denormal]

DIR: `pstrain datagen ctr` output (train-*.tsv, test.tsv; single-valued
fields); the parsed arrays are cached there as torch-deepfm.npz.
--autocast: the forward pass (training and test) under
torch.autocast("cpu", dtype=torch.bfloat16): the Linear layers multiply in
bf16; the rows, bags, the FM term and the loss stay FP32.
--flush-denormal: torch.set_flush_denormal(True) first (one thread: it
covers the forward, backward and both optimizers).

Prints one JSON line: samples_per_sec over the steps after --warmup,
samples_per_sec_all over every step (pstrain's final-line figure),
steady_samples_per_sec over the last half (steps N/2 to N:
bench/steady_timer.py; the figure bench/bf16-vs-autocast compares),
test_auc and test_logloss after the --steps updates, flush_denormal.
"""

import argparse
import glob
import json
import math
import os
import sys
import time
import warnings

import numpy as np
import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch-ps"))
import ctr_data  # noqa: E402  (its auc)
from steady_timer import Steady, flush_denormal  # noqa: E402

FIELDS, NUMERIC, DIM, HIDDEN = 26, 13, 16, (128, 64)


def parse(paths, keys):
    labels, dense, ids = [], [], []
    for path in paths:
        with open(path) as f:
            for line in f:
                v = line.rstrip("\r\n").split("\t")
                labels.append(float(v[0]))
                dense.append(
                    [
                        (math.log1p(int(x)) if int(x) >= 0 else -math.log1p(-int(x))) if x else 0.0
                        for x in v[1 : 1 + NUMERIC]
                    ]
                )
                line_ids = []
                for f_, x in enumerate(v[1 + NUMERIC : 1 + NUMERIC + FIELDS]):
                    if "," in x:
                        sys.exit(
                            "torch_deepfm: %s: a multi-valued field (%s): this twin reads one id a field" % (path, x)
                        )
                    k = (f_, int(x, 16) if x else -1)
                    if k not in keys:
                        keys[k] = len(keys)
                    line_ids.append(keys[k])
                ids.append(line_ids)
    return np.array(labels, np.float32), np.array(dense, np.float32), np.array(ids, np.int64)


def load(data):
    cache = os.path.join(data, "torch-deepfm.npz")
    if not os.path.exists(cache):
        train = sorted(glob.glob(os.path.join(data, "train-*.tsv")))
        if not train:
            sys.exit(
                "torch_deepfm: no train-*.tsv in %s: make it with pstrain datagen ctr --samples N %s" % (data, data)
            )
        keys = {}
        ly, ld, li = parse(train, keys)
        ty, td, ti = parse([os.path.join(data, "test.tsv")], keys)
        np.savez(
            cache + ".tmp.npz",
            label=np.concatenate([ly, ty]),
            dense=np.concatenate([ld, td]),
            ids=np.concatenate([li, ti]),
            train=np.int64(len(ly)),
            rows=np.int64(len(keys)),
        )
        os.replace(cache + ".tmp.npz", cache)
    z = np.load(cache)
    return {k: z[k] for k in z.files}


class DeepFM(torch.nn.Module):
    def __init__(self, rows):
        super().__init__()
        torch.manual_seed(1)
        self.wide_rows = torch.nn.Embedding(rows, 1, sparse=True)
        self.deep_rows = torch.nn.Embedding(rows, DIM, sparse=True)
        for t in (self.wide_rows, self.deep_rows):
            torch.nn.init.uniform_(t.weight, -0.05, 0.05)
        self.wide = torch.nn.Linear(NUMERIC, 1)
        widths = (FIELDS * DIM + NUMERIC,) + HIDDEN
        layers = []
        for a, o in zip(widths, widths[1:]):
            layers += [torch.nn.Linear(a, o), torch.nn.ReLU()]
        layers.append(torch.nn.Linear(widths[-1], 1))
        self.deep = torch.nn.Sequential(*layers)
        torch.nn.init.zeros_(self.wide.weight)
        torch.nn.init.zeros_(self.wide.bias)
        for m in self.deep:
            if isinstance(m, torch.nn.Linear):
                torch.nn.init.xavier_uniform_(m.weight)
                torch.nn.init.zeros_(m.bias)

    def forward(self, dense, ids, known=None):
        b = ids.shape[0]
        w = self.wide_rows(ids).reshape(b, FIELDS)
        e = self.deep_rows(ids)  # b x FIELDS x DIM
        if known is not None:  # test time: rows no training batch held read as zeros
            k = known[ids]
            w, e = w * k, e * k.unsqueeze(2)
        s = e.sum(1)
        fm = 0.5 * (s.pow(2).sum(1) - e.pow(2).sum((1, 2)))
        deep = self.deep(torch.cat([e.reshape(b, FIELDS * DIM), dense], 1)).squeeze(1)
        return self.wide(dense).squeeze(1) + w.sum(1) + fm + deep


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--data", required=True)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--warmup", type=int, help="default 50, or N/2 when --steps N is below 100")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--lr", type=float, default=0.002)
    p.add_argument("--autocast", action="store_true")
    p.add_argument("--flush-denormal", action="store_true")
    a = p.parse_args()
    if a.warmup is None:
        a.warmup = min(50, a.steps // 2)
    if not 0 <= a.warmup < a.steps:
        sys.exit("torch_deepfm: give --warmup below --steps")
    # torch's sparse Adagrad warns that it skips the sparse invariant checks.
    warnings.filterwarnings("ignore", message="Sparse invariant checks")
    torch.set_num_threads(1)
    torch.set_num_interop_threads(1)
    flush_denormal(a.flush_denormal)
    d = load(a.data)
    n, rows = int(d["train"]), int(d["rows"])
    dense, ids, label = torch.from_numpy(d["dense"]), torch.from_numpy(d["ids"]), torch.from_numpy(d["label"])
    model = DeepFM(rows)
    tables = [model.wide_rows.weight, model.deep_rows.weight]
    dense_opt = torch.optim.Adam([q for q in model.parameters() if all(q is not t for t in tables)], lr=a.lr)
    table_opt = torch.optim.Adagrad(tables, lr=0.5, initial_accumulator_value=0.1)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    trained = torch.zeros(rows, dtype=torch.bool)
    pos = 0
    start = t_all = None
    steady = Steady(a.steps)
    for step in range(a.steps):
        steady.mark(step)
        if step == 0:
            t_all = time.perf_counter()
        if step == a.warmup:
            start = time.perf_counter()
        lines = torch.arange(pos, pos + a.batch) % n
        pos = (pos + a.batch) % n
        batch_ids = ids[lines]
        trained[batch_ids] = True
        dense_opt.zero_grad(set_to_none=True)
        table_opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast):
            loss = loss_fn(model(dense[lines], batch_ids), label[lines])
        loss.backward()
        dense_opt.step()
        table_opt.step()
    end = time.perf_counter()
    last_half = steady.fields(a.steps, a.batch)
    t = torch.arange(n, len(label))
    known = trained.float()
    model.eval()
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast):
        z = torch.cat(
            [model(dense[t[i : i + 1024]], ids[t[i : i + 1024]], known).float() for i in range(0, len(t), 1024)]
        )
    prob = torch.sigmoid(z.double()).clamp(1e-7, 1 - 1e-7).numpy()
    y = label[t].numpy()
    logloss = float(-np.mean(np.where(y > 0.5, np.log(prob), np.log1p(-prob))))
    print(
        json.dumps(
            {
                "samples_per_sec": (a.steps - a.warmup) * a.batch / (end - start),
                "samples_per_sec_all": a.steps * a.batch / (end - t_all),
                **last_half,
                "test_auc": round(ctr_data.auc(y, prob), 4),
                "test_logloss": round(logloss, 4),
                "steps": a.steps,
                "warmup": a.warmup,
                "batch": a.batch,
                "train_lines": n,
                "test_lines": len(t),
                "rows": rows,
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "autocast": a.autocast,
                "flush_denormal": a.flush_denormal,
            }
        )
    )


if __name__ == "__main__":
    main()
