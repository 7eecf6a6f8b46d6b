"""A DLRM-style click-through model on `pstrain datagen ctr` data.

Bottom MLP 13-64-16 (ReLU) over the integer features; the 26 categorical
fields' embeddings (dim 16); the pairwise dot products of those 27
vectors (351) beside the bottom MLP's output into a top MLP 367-64-1;
sigmoid cross-entropy.  Dense parameters: Adam 0.001; embedding rows:
row-wise Adagrad 0.05 (rows start uniform in +-0.05).  One training pass
over the training lines, each worker every W-th line; batch --batch a
worker.  The chief evaluates the test lines' AUC and prints one JSON line:
samples_per_sec after --warmup steps, steady_samples_per_sec over the last
half of the pass's updates (from the first step at or after update N/2 to
the end: the figure bench/torch-ps/run compares), test_auc.
--flush-denormal: torch.set_flush_denormal(True) first in each process
(the one thread torch computes on, and the threads started after it:
gloo's, pstrain.torch's client's; pstrain's PS is a process of its own).

  --impl pstrain (a worker task, TF_CONFIG; ps tasks: pstrain serve): the
     fields' ids in one pstrain.torch.EmbeddingBag table (the keys of
     ctr_data.py, one id a bag: one pull and one push a step),
     DistributedOptimizer, sync or async;
  --impl local: the same model in this one process with
     torch.nn.EmbeddingBag (rows numbered in advance, sparse gradients,
     torch's Adagrad) and torch's Adam: the AUC yardstick;
  --impl torchrec (--rank R --world W --port P, gloo on 127.0.0.1): the
     same model on TorchRec: one EmbeddingBagConfig table shared by the 26
     features (rows numbered in advance), sharded by
     DistributedModelParallel's planner over the W CPU ranks, its rows
     updated by TorchRec's fused Adagrad (fbgemm's CPU kernels),
     the dense layers data-parallel (DDP) with Adam: synchronous, as
     TorchRec trains; rank 0 prints the line.  The test lines are scored
     by every rank (the sharded table needs them all) and gathered.

  dlrm.py --impl pstrain|local --data DIR [--sync] [--batch B] [--warmup W] [--flush-denormal]
  dlrm.py --impl torchrec --rank R --world W --port P --data DIR [--batch B] [--warmup W] [--flush-denormal]
"""

import argparse
import time

import ctr_data
import torch

import common

DIM, FIELDS = 16, 26


class DLRM(torch.nn.Module):
    def __init__(self, table):
        super().__init__()
        torch.manual_seed(1)
        self.table = table
        self.bottom = torch.nn.Sequential(
            torch.nn.Linear(13, 64), torch.nn.ReLU(), torch.nn.Linear(64, DIM), torch.nn.ReLU()
        )
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


class TorchRecDLRM(DLRM):
    """DLRM whose table is a TorchRec EmbeddingBagCollection: the ids go in
    as a KeyedJaggedTensor of the 26 features, one id a bag."""

    def __init__(self, rows):
        from torchrec import EmbeddingBagCollection, EmbeddingBagConfig

        features = [f"f{i}" for i in range(FIELDS)]
        config = EmbeddingBagConfig(
            name="ids",
            embedding_dim=DIM,
            num_embeddings=rows,
            feature_names=features,
            init_fn=lambda w: torch.nn.init.uniform_(w, -0.05, 0.05),
        )
        super().__init__(EmbeddingBagCollection(tables=[config], device=torch.device("meta")))
        self.features = features

    def forward(self, dense, ids):
        from torchrec import KeyedJaggedTensor

        b = dense.shape[0]
        kjt = KeyedJaggedTensor.from_lengths_sync(
            keys=self.features, values=ids.t().reshape(-1), lengths=torch.ones(b * FIELDS, dtype=torch.int32)
        )
        emb = self.table(kjt).values().reshape(b, FIELDS, DIM)
        x = self.bottom(dense)
        v = torch.cat([x.unsqueeze(1), emb], 1)
        dots = torch.bmm(v, v.transpose(1, 2))[:, self.iu[0], self.iu[1]]
        return self.top(torch.cat([x, dots], 1)).squeeze(1)


def torchrec_model(rows, rank, world, port):
    """The DLRM under DistributedModelParallel on `world` CPU ranks over
    gloo: the table sharded by the planner, its rows with TorchRec's fused
    Adagrad, the rest with Adam."""
    import os

    import torch.distributed as dist
    from torchrec.distributed import DistributedModelParallel
    from torchrec.optim.apply_optimizer_in_backward import apply_optimizer_in_backward
    from torchrec.optim.keyed import CombinedOptimizer, KeyedOptimizerWrapper
    from torchrec.optim.optimizers import in_backward_optimizer_filter

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    model = TorchRecDLRM(rows)
    # torch.optim.Adagrad: fbgemm's EXACT_ADAGRAD, an accumulator an element, as pstrain's rows have.
    apply_optimizer_in_backward(torch.optim.Adagrad, model.table.parameters(), {"lr": 0.05})
    dmp = DistributedModelParallel(model, device=torch.device("cpu"))
    dense = KeyedOptimizerWrapper(
        dict(in_backward_optimizer_filter(dmp.named_parameters())), lambda ps: torch.optim.Adam(ps, lr=0.001)
    )
    return dmp, CombinedOptimizer([dmp.fused_optimizer, dense])


def torchrec_scores(dmp, dense, ids, lines, rank, world, chunk=4096):
    """Every rank scores equal slices of the test lines (the last padded),
    rank 0 gets them all back in order."""
    import torch.distributed as dist

    per = -(-len(lines) // world)
    mine = lines[rank * per : (rank + 1) * per]
    mine = torch.cat([mine, lines[: per - len(mine)]]) if len(mine) < per else mine
    scores = torch.cat([dmp(dense[mine[i : i + chunk]], ids[mine[i : i + chunk]]) for i in range(0, per, chunk)])
    every = [torch.empty_like(scores) for _ in range(world)]
    dist.all_gather(every, scores)
    return torch.cat(every)[: len(lines)]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--impl", choices=["pstrain", "local", "torchrec"], required=True)
    p.add_argument("--rank", type=int, default=0)
    p.add_argument("--world", type=int, default=1)
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--data", required=True)
    p.add_argument("--sync", action="store_true")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument(
        "--adagrad-initial",
        type=float,
        default=0.1,
        help="the rows' Adagrad accumulators' start (pstrain and local; TorchRec's fused Adagrad starts at 0)",
    )
    p.add_argument("--flush-denormal", action="store_true")
    a = p.parse_args()
    common.one_thread()
    flush = common.flush_denormal(a.flush_denormal)
    d = ctr_data.load(a.data)
    n = int(d["train"])
    if a.impl == "pstrain":
        import pstrain
        from pstrain.torch import DistributedOptimizer, EmbeddingBag

        ctx = pstrain.init()
        index, workers, chief = ctx.task_index, ctx.num_workers, ctx.is_chief
        ids = torch.from_numpy(d["keys"])
        model = DLRM(
            EmbeddingBag(
                DIM, mode="sum", optimizer="adagrad", lr=0.05, init_range=0.05, adagrad_initial=a.adagrad_initial
            )
        )
        opt = DistributedOptimizer(
            model.named_parameters(), optimizer="adam", lr=0.001, sync=a.sync, context=ctx, embeddings=[model.table]
        )
        global_step = lambda: opt.global_step
    elif a.impl == "torchrec":
        index, workers, chief = a.rank, a.world, a.rank == 0
        ids = torch.from_numpy(d["index"])
        model, opt = torchrec_model(int(d["index"].max()) + 1, a.rank, a.world, a.port)
        done = [0]
        global_step = lambda: done[0]
    else:
        index, workers, chief = 0, 1, True
        ids = torch.from_numpy(d["index"])
        table = torch.nn.EmbeddingBag(int(d["index"].max()) + 1, DIM, mode="sum", sparse=True)
        torch.nn.init.uniform_(table.weight, -0.05, 0.05)
        model = DLRM(table)
        dense_opt = torch.optim.Adam(
            [q for name, q in model.named_parameters() if not name.startswith("table.")], lr=0.001
        )
        table_opt = torch.optim.Adagrad([table.weight], lr=0.05, initial_accumulator_value=a.adagrad_initial)
        done = [0]
        global_step = lambda: done[0]
    dense, label = torch.from_numpy(d["dense"]), torch.from_numpy(d["label"])
    mine = torch.arange(index, n, workers)
    # One pass: sync, every worker's steps; async, the PS's updates (each a batch) over all the lines.
    # TorchRec is synchronous: every rank the same number of steps (the smallest share's).
    if a.impl == "torchrec":
        steps = (n // workers) // a.batch
    else:
        steps = len(mine) // a.batch if (a.impl == "local" or a.sync) else n // a.batch
    loss_fn = torch.nn.BCEWithLogitsLoss()
    local, t0, g0, pos = 0, None, 0, 0
    steady = common.Steady(steps)
    while True:
        if a.impl == "pstrain":
            if opt.done or (chief and opt.global_step >= steps):
                break
        elif local >= steps:
            break
        steady.mark(global_step())
        if local == a.warmup:
            t0, g0 = time.perf_counter(), global_step()
        if pos + a.batch > len(mine):
            pos = 0
        rows = mine[pos : pos + a.batch]
        pos += a.batch
        if a.impl == "pstrain":
            opt.zero_grad()
            loss_fn(model(dense[rows], ids[rows]), label[rows]).backward()
            opt.step()
        elif a.impl == "torchrec":
            opt.zero_grad()
            loss_fn(model(dense[rows], ids[rows]), label[rows]).backward()
            opt.step()
            done[0] += 1
        else:
            dense_opt.zero_grad()
            table_opt.zero_grad()
            loss_fn(model(dense[rows], ids[rows]), label[rows]).backward()
            dense_opt.step()
            table_opt.step()
            done[0] += 1
        local += 1
    seconds = time.perf_counter() - t0
    per_update = a.batch * (workers if ((a.sync and a.impl == "pstrain") or a.impl == "torchrec") else 1)
    last_half = steady.fields(global_step(), per_update)
    t = torch.arange(n, len(label))
    if a.impl == "torchrec":
        model.eval()
        with torch.no_grad():
            scores = torchrec_scores(model, dense, ids, t, a.rank, a.world)
    if not chief:
        return
    g1 = global_step()
    samples = (g1 - g0) * per_update
    if a.impl != "torchrec":
        model.eval()
        with torch.no_grad():
            scores = torch.cat([model(dense[t[i : i + 4096]], ids[t[i : i + 4096]]) for i in range(0, len(t), 4096)])
    result = ctr_data.auc(label[t].numpy(), scores.numpy())
    if a.impl == "pstrain":
        opt.finish()
    framework = {"pstrain": "pstrain.torch", "local": "torch-local", "torchrec": "torchrec"}[a.impl]
    mode = {"pstrain": "sync" if a.sync else "async", "local": "one process", "torchrec": "sync"}[a.impl]
    common.report(
        framework=framework,
        model="dlrm",
        mode=mode,
        workers=workers,
        batch=a.batch,
        global_step=g1,
        samples_per_sec=samples / seconds,
        **last_half,
        flush_denormal=flush,
        steps=steps,
        test_auc=result,
        train_lines=n,
        test_lines=len(label) - n,
        torch=torch.__version__,
    )


if __name__ == "__main__":
    main()
