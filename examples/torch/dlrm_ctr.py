"""A DLRM-style click-through model with its embedding tables on pstrain's
parameter servers.

    pstrain datagen ctr --samples 200000 ctr-data
    sbatch --ps=2 --workers=2 torch-train.sh python3 dlrm_ctr.py --data ctr-data --sync
    python3 dlrm_ctr.py --data ctr-data --single-process   # torch's own tables, in one process

The data are Criteo-style TSV lines (what `pstrain datagen ctr` writes: a
0/1 label, 13 integer features, 26 categorical ones as hex ids, a blank for
a missing value, several ids separated by commas in a multi-hot field); the
train-*.tsv files are for training, test.tsv for the AUC.

The model: each categorical field has its own pstrain.torch.EmbeddingBag
(rows on the ps tasks, created on first use, ids hashed to a ps, Adagrad on
each row; a multi-hot field is summed), the 13 numeric features (log(1 + x))
go through a bottom MLP to the same width, and the 27 vectors meet in the
interaction: their pairwise dot products beside the bottom MLP's output
(--interaction dot, DLRM's), or all of them side by side (concat).  A top MLP
gives the click's logit.  The dense layers train with Adam on the ps tasks
through pstrain.torch.DistributedOptimizer.  The chief prints one JSON line
as its last: {"event": "done", "global_step", "test_auc", "test_logloss", ...}.
"""

import argparse
import glob
import json
import math
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

NUMERIC, CATEGORICAL = 13, 26
BLANK = -1  # the id of a blank categorical field (all 64 bits set): an id of its own


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data", required=True, help="a directory from `pstrain datagen ctr DIR`")
    p.add_argument("--steps", type=int, default=1000, help="updates to apply (the global step to reach)")
    p.add_argument("--batch-size", type=int, default=256, help="samples per worker and step")
    p.add_argument("--dim", type=int, default=16, help="width of every embedding row")
    p.add_argument("--interaction", choices=("dot", "concat"), default="dot")
    p.add_argument("--lr", type=float, default=1e-3, help="Adam's learning rate for the dense layers")
    p.add_argument("--table-lr", type=float, default=0.05, help="Adagrad's learning rate for the rows")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--sync", dest="sync", action="store_true", default=True)
    mode.add_argument("--async", dest="sync", action="store_false")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="torch threads of each task")
    p.add_argument("--log-every", type=int, default=200)
    p.add_argument(
        "--single-process",
        action="store_true",
        help="train here with torch.nn.EmbeddingBag and torch.optim instead, no parameter server",
    )
    p.add_argument(
        "--device",
        default="cpu",
        help="--single-process: where it trains (cuda for a GPU); a worker trains on pstrain.init()'s device",
    )
    args = p.parse_args(argv)
    for name in ("steps", "batch_size", "dim", "threads"):
        if getattr(args, name) < 1:
            p.error("--%s must be at least 1" % name.replace("_", "-"))
    return args


class CtrData:
    """Parsed lines: labels [N], numeric [N, 13] (log(1 + x)), and per field
    the flat int64 ids with each sample's offset (EmbeddingBag's input)."""

    def __init__(self, paths, shard=0, num_shards=1):
        labels, numeric, ids = [], [], [[] for _ in range(CATEGORICAL)]
        counts = [[] for _ in range(CATEGORICAL)]
        line_no = 0
        for path in paths:
            with open(path) as f:
                for n, line in enumerate(f, 1):
                    line = line.rstrip("\r\n")
                    if not line:
                        continue
                    line_no += 1
                    if (line_no - 1) % num_shards != shard:
                        continue
                    cols = line.split("\t")
                    if len(cols) != 1 + NUMERIC + CATEGORICAL or cols[0] not in ("0", "1"):
                        sys.exit(
                            "dlrm_ctr: %s:%d: not a Criteo-style line (a 0/1 label, 13 integers, 26 hex ids): "
                            "make the data with `pstrain datagen ctr DIR`" % (path, n)
                        )
                    labels.append(float(cols[0]))
                    numeric.append([_numeric(c) for c in cols[1 : 1 + NUMERIC]])
                    for field, text in enumerate(cols[1 + NUMERIC :]):
                        bag = [BLANK] if not text else [_signed(int(h, 16)) for h in text.split(",")]
                        ids[field].extend(bag)
                        counts[field].append(len(bag))
        self.labels = torch.tensor(labels)
        self.numeric = torch.tensor(numeric, dtype=torch.float32).reshape(-1, NUMERIC)
        self.ids = [torch.tensor(v, dtype=torch.int64) for v in ids]
        # starts[f][i]: where sample i's ids begin in ids[f] (one more at the end)
        self.starts = [torch.tensor([0] + c, dtype=torch.int64).cumsum(0) for c in counts]

    def __len__(self):
        return len(self.labels)

    def batch(self, idx):
        """(numeric, [(ids, offsets)] per field, labels) of the samples idx."""
        bags = []
        for ids, starts in zip(self.ids, self.starts):
            begin, end = starts[idx], starts[idx + 1]
            lengths = end - begin
            offsets = torch.zeros(len(idx), dtype=torch.int64)
            offsets[1:] = lengths.cumsum(0)[:-1]
            # the ids of every sample's bag, one after the other
            flat = ids[torch.arange(int(lengths.sum())) + torch.repeat_interleave(begin - offsets, lengths)]
            bags.append((flat, offsets))
        return self.numeric[idx], bags, self.labels[idx]


def _numeric(text):
    if not text:
        return 0.0
    x = int(text)
    return math.log1p(x) if x >= 0 else -math.log1p(-x)


def _signed(x):
    """A 64-bit id as the int64 with the same bits."""
    return x - (1 << 64) if x >= 1 << 63 else x


def mlp(sizes):
    layers = []
    for a, b in zip(sizes, sizes[1:]):
        layers += [nn.Linear(a, b), nn.ReLU()]
    return nn.Sequential(*layers[:-1])


class DLRM(nn.Module):
    """Bottom MLP, one table per categorical field, interaction, top MLP."""

    def __init__(self, tables, dim, interaction):
        super().__init__()
        self.tables = nn.ModuleList(tables)
        self.bottom = mlp([NUMERIC, 64, dim])
        self.interaction = interaction
        n = CATEGORICAL + 1
        width = dim + n * (n - 1) // 2 if interaction == "dot" else n * dim
        self.top = mlp([width, 64, 1])

    def forward(self, numeric, bags):
        dense = F.relu(self.bottom(numeric))
        vectors = [dense] + [table(ids, offsets) for table, (ids, offsets) in zip(self.tables, bags)]
        if self.interaction == "concat":
            z = torch.cat(vectors, 1)
        else:
            t = torch.stack(vectors, 1)  # [B, 27, dim]
            dots = torch.bmm(t, t.transpose(1, 2))  # [B, 27, 27]
            i, j = torch.triu_indices(t.shape[1], t.shape[1], offset=1)
            z = torch.cat([dense, dots[:, i, j]], 1)
        return self.top(z).squeeze(1)


class LocalTable(nn.Module):
    """--single-process: torch's EmbeddingBag over the ids seen in the data
    (every id given a row up front; pstrain's tables make them on first use)."""

    def __init__(self, ids, dim):
        super().__init__()
        self.register_buffer("known", torch.unique(ids))  # moves with the model to its device
        self.bag = nn.EmbeddingBag(len(self.known), dim, mode="sum", sparse=True)
        nn.init.uniform_(self.bag.weight, -0.05, 0.05)

    def forward(self, ids, offsets):
        return self.bag(torch.searchsorted(self.known, ids), offsets)


def auc(scores, labels):
    """Area under the ROC curve; ties count one half."""
    scores, labels = np.asarray(scores, dtype=np.float64), np.asarray(labels)
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    ranks = np.empty(len(s))
    i = 0
    while i < len(s):  # average ranks of ties
        j = i
        while j + 1 < len(s) and s[j + 1] == s[i]:
            j += 1
        ranks[i : j + 1] = (i + j) / 2 + 1
        i = j + 1
    pos = labels[order] == 1
    n_pos, n_neg = pos.sum(), len(s) - pos.sum()
    if n_pos == 0 or n_neg == 0:
        return 0.5
    return float((ranks[pos].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))


def on(device, numeric, bags, y):
    """A batch on the worker's device (its GPU, when torch-train.sh gave it one)."""
    if device is None or device.type == "cpu":
        return numeric, bags, y
    return numeric.to(device), [(i.to(device), o.to(device)) for i, o in bags], y.to(device)


@torch.no_grad()
def evaluate(model, test, device=None):
    model.eval()
    scores = []
    for i in range(0, len(test), 2048):
        numeric, bags, _ = on(device, *test.batch(torch.arange(i, min(i + 2048, len(test)))))
        scores.append(torch.sigmoid(model(numeric, bags)).cpu())
    model.train()
    p = torch.cat(scores).clamp(1e-7, 1 - 1e-7)
    y = test.labels
    logloss = -(y * p.log() + (1 - y) * (1 - p).log()).mean().item()
    return auc(p.numpy(), y.numpy()), logloss


def batches(n, batch_size, seed, salt):
    g = torch.Generator().manual_seed(seed * 1000 + salt)
    while True:
        order = torch.randperm(n, generator=g)
        for i in range(0, n - batch_size + 1, batch_size):
            yield order[i : i + batch_size]


def files(data_dir):
    train = sorted(glob.glob(os.path.join(data_dir, "*.tsv")))
    train = [f for f in train if os.path.basename(f) != "test.tsv"]
    test = os.path.join(data_dir, "test.tsv")
    if not train or not os.path.exists(test):
        sys.exit(
            "dlrm_ctr: %s has no train-*.tsv and test.tsv: make them with `pstrain datagen ctr %s`"
            % (data_dir, data_dir)
        )
    return train, test


class HalfwayClock:
    """The steady state of the benchmarks: samples/s over the last half of
    the steps (from the first step at or past half of them to the end), the
    device's queued work waited for at both ends."""

    def __init__(self, steps, device):
        self.half, self.device = steps // 2, device
        self.t0 = self.step0 = None

    def _now(self):
        if self.device is not None and self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        return time.time()

    def mark(self, step):
        if self.t0 is None and step >= self.half:
            self.t0, self.step0 = self._now(), step

    def samples_per_sec(self, step, samples_per_step):
        if self.t0 is None or step <= self.step0:
            return float("nan")
        return (step - self.step0) * samples_per_step / max(self._now() - self.t0, 1e-9)


def result_line(step, seconds, samples, test_auc, logloss, ps, workers, mode, steady):
    return {
        "event": "done",
        "global_step": step,
        "test_auc": round(test_auc, 4),
        "test_logloss": round(logloss, 4),
        "train_seconds": round(seconds, 2),
        "samples_per_sec": round(samples / max(seconds, 1e-9), 1),
        "steady_samples_per_sec": round(steady, 1),
        "ps": ps,
        "workers": workers,
        "mode": mode,
    }


def train_single(args):
    train_files, test_file = files(args.data)
    train, test = CtrData(train_files), CtrData([test_file])
    torch.manual_seed(args.seed)
    device = torch.device(args.device)
    tables = [LocalTable(torch.cat([a, b]), args.dim) for a, b in zip(train.ids, test.ids)]
    model = DLRM(tables, args.dim, args.interaction).to(device)
    dense = [p for n, p in model.named_parameters() if not n.startswith("tables.")]
    rows = [p for n, p in model.named_parameters() if n.startswith("tables.")]
    opt, table_opt = (
        torch.optim.Adam(dense, lr=args.lr),
        torch.optim.Adagrad(rows, lr=args.table_lr, initial_accumulator_value=0.1),
    )
    it, t0, clock = batches(len(train), args.batch_size, args.seed, 0), time.time(), HalfwayClock(args.steps, device)
    for step in range(1, args.steps + 1):
        clock.mark(step - 1)
        numeric, bags, y = on(device, *train.batch(next(it)))
        opt.zero_grad()
        table_opt.zero_grad()
        loss = F.binary_cross_entropy_with_logits(model(numeric, bags), y)
        loss.backward()
        opt.step()
        table_opt.step()
        if args.log_every and step % args.log_every == 0:
            print("dlrm_ctr[single]: step %d/%d loss %.4f" % (step, args.steps, loss.item()), flush=True)
    steady = clock.samples_per_sec(args.steps, args.batch_size)
    seconds = time.time() - t0
    return result_line(
        args.steps,
        seconds,
        args.steps * args.batch_size,
        *evaluate(model, test, device),
        0,
        1,
        "single-process",
        steady,
    )


def train_distributed(args):
    import pstrain
    from pstrain.torch import DistributedOptimizer, EmbeddingBag

    ctx = pstrain.init()
    name = "dlrm_ctr[worker %d]" % ctx.task_index
    train_files, test_file = files(args.data)
    train = CtrData(train_files, ctx.task_index, ctx.num_workers)  # this worker's shard
    test = CtrData([test_file]) if ctx.is_chief else None
    torch.manual_seed(args.seed)
    tables = [
        EmbeddingBag(args.dim, mode="sum", optimizer="adagrad", lr=args.table_lr, init_range=0.05, seed=args.seed + f)
        for f in range(CATEGORICAL)
    ]
    # The worker's GPU when torch-train.sh gave it one (--gres=gpu:N): the
    # dense layers train there, the tables' rows of each batch are copied
    # there, and the optimizer stages the parameters.
    device = torch.device(ctx.device)
    model = DLRM(tables, args.dim, args.interaction).to(device)
    opt = DistributedOptimizer(
        model.named_parameters(), optimizer="adam", lr=args.lr, sync=args.sync, context=ctx, embeddings=tables
    )
    it, t0, mine = batches(len(train), args.batch_size, args.seed, ctx.task_index), time.time(), 0
    clock = HalfwayClock(args.steps, device)
    per_step = args.batch_size * (ctx.num_workers if args.sync else 1)
    # The chief stops at --steps and ends training; the others go on until
    # it has (a worker that left early would be a lost one to the ps).
    while not opt.done and (opt.global_step < args.steps or not ctx.is_chief):
        clock.mark(opt.global_step)
        numeric, bags, y = on(device, *train.batch(next(it)))
        opt.zero_grad()
        try:
            loss = F.binary_cross_entropy_with_logits(model(numeric, bags), y)
        except pstrain.PeerError:
            # The rows of a step begun after the chief's shutdown: the ps
            # tasks may have gone before answering (only a dense push is
            # answered "done").  Past --steps that is the end, not a loss.
            if ctx.is_chief or opt.global_step < args.steps:
                raise
            break
        loss.backward()
        opt.step()
        mine += 1
        if ctx.is_chief and args.log_every and mine % args.log_every == 0:
            print("%s: step %d/%d loss %.4f" % (name, opt.global_step, args.steps, loss.item()), flush=True)
    seconds = time.time() - t0
    if not ctx.is_chief:
        print("%s: stopped at global step %d after %d steps of its own" % (name, opt.global_step, mine), flush=True)
        return None
    step = opt.global_step
    steady = clock.samples_per_sec(step, per_step)
    test_auc, logloss = evaluate(model, test, device)  # reads the rows from the ps tasks: before they end
    opt.finish()  # the chief ends training: the ps tasks' servers exit, and the job ends with this program
    samples = step * args.batch_size * (ctx.num_workers if args.sync else 1)
    return result_line(
        step,
        seconds,
        samples,
        test_auc,
        logloss,
        ctx.num_ps,
        ctx.num_workers,
        "sync" if args.sync else "async",
        steady,
    )


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    result = train_single(args) if args.single_process else train_distributed(args)
    if result:
        print(json.dumps(result), flush=True)


if __name__ == "__main__":
    try:
        main()
    except Exception as e:  # pstrain's errors (pstrain.Error) name the task and the fix: one line
        if type(e).__module__.split(".")[0] != "pstrain":
            raise
        # Named as the task's other lines are: which worker says what it lost.
        role, index = os.environ.get("PSTRAIN_ROLE"), os.environ.get("PSTRAIN_TASK_INDEX")
        sys.exit("%s%s: error: %s" % ("dlrm_ctr", "[%s %s]" % (role, index) if role and index else "", e))
