"""A DLRM-style click-through model on `pstrain datagen ctr` data.

Bottom MLP 13-64-16 (ReLU) over the integer features; the 26 categorical
fields' embeddings (dim 16); the pairwise dot products of those 27
vectors (351) beside the bottom MLP's output into a top MLP 367-64-1;
sigmoid cross-entropy.  Dense parameters: Adam 0.001; embedding rows:
row-wise Adagrad 0.05 (rows start uniform in +-0.05).  One training pass
over the training lines, each worker every W-th line; batch --batch a
worker.  The chief evaluates the test lines' AUC and prints one JSON line.

  --impl pstrain (a worker task, TF_CONFIG; ps tasks: pstrain serve): the
     fields' ids in one pstrain.torch.EmbeddingBag table (the keys of
     ctr_data.py, one id a bag: one pull and one push a step),
     DistributedOptimizer, sync or async;
  --impl local: the same model in this one process with
     torch.nn.EmbeddingBag (rows numbered in advance, sparse gradients,
     torch's Adagrad) and torch's Adam: the AUC yardstick.

  dlrm.py --impl pstrain|local --data DIR [--sync] [--batch B] [--warmup W]
"""
import argparse
import time

import numpy as np
import torch

import common
import ctr_data

DIM, FIELDS = 16, 26


def auc(labels, scores):
    """Area under the ROC curve (ties share their average rank)."""
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    ranks = np.empty(len(s))
    _, first, counts = np.unique(s, return_index=True, return_counts=True)
    for f, c in zip(first, counts):
        ranks[f:f + c] = f + (c + 1) / 2.0
    pos = labels[order] > 0.5
    n1 = pos.sum()
    n0 = len(s) - n1
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))


class DLRM(torch.nn.Module):
    def __init__(self, table):
        super().__init__()
        torch.manual_seed(1)
        self.table = table
        self.bottom = torch.nn.Sequential(torch.nn.Linear(13, 64), torch.nn.ReLU(), torch.nn.Linear(64, DIM), torch.nn.ReLU())
        pairs = (FIELDS + 1) * FIELDS // 2
        self.top = torch.nn.Sequential(torch.nn.Linear(pairs + DIM, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
        self.iu = torch.triu_indices(FIELDS + 1, FIELDS + 1, offset=1)

    def forward(self, dense, ids):
        b = dense.shape[0]
        flat = ids.reshape(-1)
        offsets = torch.arange(0, flat.numel(), dtype=torch.int64)
        emb = self.table(flat, offsets).reshape(b, FIELDS, DIM)
        x = self.bottom(dense)
        v = torch.cat([x.unsqueeze(1), emb], 1)
        dots = torch.bmm(v, v.transpose(1, 2))[:, self.iu[0], self.iu[1]]
        return self.top(torch.cat([x, dots], 1)).squeeze(1)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--impl", choices=["pstrain", "local"], required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--sync", action="store_true")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--warmup", type=int, default=20)
    a = p.parse_args()
    common.one_thread()
    d = ctr_data.load(a.data)
    n = int(d["train"])
    if a.impl == "pstrain":
        import pstrain
        from pstrain.torch import DistributedOptimizer, EmbeddingBag
        ctx = pstrain.init()
        index, workers, chief = ctx.task_index, ctx.num_workers, ctx.is_chief
        ids = torch.from_numpy(d["keys"])
        model = DLRM(EmbeddingBag(DIM, mode="sum", optimizer="adagrad", lr=0.05, init_range=0.05))
        opt = DistributedOptimizer(model.named_parameters(), optimizer="adam", lr=0.001, sync=a.sync, context=ctx)
        global_step = lambda: opt.global_step
    else:
        index, workers, chief = 0, 1, True
        ids = torch.from_numpy(d["index"])
        table = torch.nn.EmbeddingBag(int(d["index"].max()) + 1, DIM, mode="sum", sparse=True)
        torch.nn.init.uniform_(table.weight, -0.05, 0.05)
        model = DLRM(table)
        dense_opt = torch.optim.Adam([q for name, q in model.named_parameters() if not name.startswith("table.")], lr=0.001)
        table_opt = torch.optim.Adagrad([table.weight], lr=0.05, initial_accumulator_value=0.1)
        done = [0]
        global_step = lambda: done[0]
    dense, label = torch.from_numpy(d["dense"]), torch.from_numpy(d["label"])
    mine = torch.arange(index, n, workers)
    # One pass: sync, every worker's steps; async, the PS's updates (each a batch) over all the lines.
    steps = len(mine) // a.batch if (a.impl == "local" or a.sync) else n // a.batch
    loss_fn = torch.nn.BCEWithLogitsLoss()
    local, t0, g0, pos = 0, None, 0, 0
    while True:
        if a.impl == "pstrain":
            if opt.done or (chief and opt.global_step >= steps):
                break
        elif local >= steps:
            break
        if local == a.warmup:
            t0, g0 = time.perf_counter(), global_step()
        if pos + a.batch > len(mine):
            pos = 0
        rows = mine[pos:pos + a.batch]
        pos += a.batch
        if a.impl == "pstrain":
            opt.zero_grad()
            loss_fn(model(dense[rows], ids[rows]), label[rows]).backward()
            opt.step()
        else:
            dense_opt.zero_grad()
            table_opt.zero_grad()
            loss_fn(model(dense[rows], ids[rows]), label[rows]).backward()
            dense_opt.step()
            table_opt.step()
            done[0] += 1
        local += 1
    seconds = time.perf_counter() - t0
    if not chief:
        return
    g1 = global_step()
    samples = (g1 - g0) * a.batch * (workers if (a.sync and a.impl == "pstrain") else 1)
    model.eval()
    with torch.no_grad():
        t = torch.arange(n, len(label))
        scores = torch.cat([model(dense[t[i:i + 4096]], ids[t[i:i + 4096]]) for i in range(0, len(t), 4096)])
    result = auc(label[t].numpy(), scores.numpy())
    if a.impl == "pstrain":
        opt.finish()
    common.report(framework="pstrain.torch" if a.impl == "pstrain" else "torch-local", model="dlrm",
                  mode=("sync" if a.sync else "async") if a.impl == "pstrain" else "one process",
                  workers=workers, batch=a.batch, global_step=g1, samples_per_sec=samples / seconds,
                  test_auc=result, train_lines=n, test_lines=len(label) - n, torch=torch.__version__)


if __name__ == "__main__":
    main()
