"""A small CNN on Fashion-MNIST, trained on pstrain's parameter servers.

    sbatch --ps=1 --workers=2 torch-train.sh python3 cnn_fashion_mnist.py --sync
    sbatch --ps=1 --workers=2 --gres=gpu:2 torch-train.sh python3 cnn_fashion_mnist.py --sync   # a GPU per worker
    python3 cnn_fashion_mnist.py --single-process      # the same model with torch.optim, for comparison

The model is conv(5x5, 8)-relu-maxpool, conv(5x5, 16)-relu-maxpool, then one
linear layer to the 10 classes.  Its parameters live on the ps tasks:
pstrain.torch.DistributedOptimizer sends each step's gradients there, the
optimizer (--optimizer, Adam by default) runs on the ps tasks, and the new parameters come back
into the same tensors.  The chief (worker 0) initialises the parameters from
--seed, evaluates on the test set when --steps updates have been applied,
prints one JSON line as its last line and shuts the servers down, which ends
the job.  Each worker reads every --num-workers-th training image (its shard)
and shuffles it per epoch from --seed.  A worker that torch-train.sh gave a
GPU (pstrain.init()'s ctx.device) trains there: the optimizer stages the
parameters through the ps exchange's pinned host buffers.

--single-process trains the same model from the same seed for the same
number of updates in this one process, with torch.optim, drawing its
batches as --as-workers W workers would: with --sync one update takes the
next batch of every worker's shard (the ps averages their gradients, which is
the gradient of their union), with --async the shards take turns, one batch
an update, and each gradient is computed on parameters --staleness updates
old (default W-1: what each of W async workers sees, as the job's done line
reports in staleness_mean).  So `--single-process --as-workers 2 --sync`
reproduces the data of a 2-worker sync job exactly, `--as-workers 2 --async`
its async counterpart's data and delay, and their accuracies are the ones
those jobs should reach.
"""

import argparse
import collections
import copy
import gzip
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

DEFAULT_DATA = os.environ.get("PSTRAIN_DATA_DIR", "/usr/share/datasets/fashion-mnist")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=1000, help="updates to apply (the global step to reach)")
    p.add_argument("--batch-size", type=int, default=64, help="images per worker and step")
    p.add_argument(
        "--optimizer",
        choices=("adam", "adagrad", "momentum", "sgd"),
        default="adam",
        help="run on the ps tasks (--single-process: torch.optim's of the same name)",
    )
    p.add_argument("--lr", type=float, default=1e-3, help="the optimizer's learning rate")
    mode = p.add_mutually_exclusive_group()
    mode.add_argument(
        "--sync",
        dest="sync",
        action="store_true",
        default=True,
        help="each update averages one gradient of every worker (default)",
    )
    mode.add_argument("--async", dest="sync", action="store_false", help="every gradient is applied on arrival")
    p.add_argument(
        "--max-staleness",
        type=int,
        default=None,
        metavar="N",
        help="--async: a worker more than N steps ahead of the slowest waits for it (default: no bound)",
    )
    p.add_argument(
        "--elastic",
        action="store_true",
        help="a lost worker does not end a --sync job, a restarted one is taken back, and the workers "
        "alive re-split the training images among them (pstrain.torch.ElasticSampler)",
    )
    p.add_argument("--data", default=DEFAULT_DATA, help="the Fashion-MNIST IDX files (gzipped or not)")
    p.add_argument("--seed", type=int, default=1, help="the initial parameters and each worker's shuffles")
    p.add_argument("--threads", type=int, default=1, help="torch threads of each task")
    p.add_argument("--log-every", type=int, default=200, help="a progress line every this many steps (0: none)")
    p.add_argument(
        "--save-every",
        type=int,
        default=0,
        help="the chief checkpoints every this many global steps through the ps tasks (0: only on "
        "SIGTERM); a job that finds a checkpoint resumes from it",
    )
    p.add_argument(
        "--single-process", action="store_true", help="train here with torch.optim.Adam instead, no parameter server"
    )
    p.add_argument(
        "--as-workers",
        type=int,
        default=1,
        metavar="W",
        help="--single-process: draw the batches as W workers of a --sync or --async job would",
    )
    p.add_argument(
        "--staleness",
        type=int,
        default=None,
        metavar="S",
        help="--single-process --async: compute each gradient on the parameters of S updates before "
        "(default: --as-workers less 1)",
    )
    args = p.parse_args(argv)
    for name in ("steps", "batch_size", "threads", "as_workers"):
        if getattr(args, name) < 1:
            p.error("--%s must be at least 1" % name.replace("_", "-"))
    if not args.lr > 0:
        p.error("--lr must be positive")
    if args.staleness is None:
        args.staleness = args.as_workers - 1 if not args.sync else 0
    if args.staleness < 0:
        p.error("--staleness must be at least 0")
    return args


def read_idx(data_dir, stem):
    """An IDX file as a uint8 array (its magic number's dimensions), gzipped or not."""
    for name in (stem + ".gz", stem):
        path = os.path.join(data_dir, name)
        if os.path.exists(path):
            with (gzip.open if name.endswith(".gz") else open)(path, "rb") as f:
                raw = f.read()
            dims = raw[3]
            shape = [int.from_bytes(raw[4 + 4 * i : 8 + 4 * i], "big") for i in range(dims)]
            return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)
    sys.exit(
        "cnn_fashion_mnist: no %s(.gz) in %s: give --data DIR with the Fashion-MNIST IDX files "
        "(Debian: apt-get install dataset-fashion-mnist)" % (stem, data_dir)
    )


def load(data_dir, split):
    """(images float32 [N, 1, 28, 28] in [0, 1], labels int64 [N])."""
    prefix = "train" if split == "train" else "t10k"
    images = read_idx(data_dir, prefix + "-images-idx3-ubyte")
    labels = read_idx(data_dir, prefix + "-labels-idx1-ubyte")
    x = torch.from_numpy(images.astype(np.float32) / 255.0).unsqueeze(1)
    return x, torch.from_numpy(labels.astype(np.int64))


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 5)  # 28 -> 24, pooled to 12
        self.conv2 = nn.Conv2d(8, 16, 5)  # 12 -> 8, pooled to 4
        self.fc = nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc(x.flatten(1))


def batches(n, batch_size, seed, shard, num_shards):
    """Index batches of this shard (every num_shards-th sample), reshuffled each epoch, forever."""
    mine = torch.arange(shard, n, num_shards)
    g = torch.Generator().manual_seed(seed * 1000 + shard)
    while True:
        order = mine[torch.randperm(len(mine), generator=g)]
        for i in range(0, len(order) - batch_size + 1, batch_size):
            yield order[i : i + batch_size]


def elastic_batches(sampler, batch_size):
    """Index batches of this worker's shard among the workers alive, forever: re-split when they change."""
    batch = []
    while True:
        for i in sampler:
            batch.append(i)
            if len(batch) == batch_size:
                yield torch.tensor(batch)
                batch = []


@torch.no_grad()
def evaluate(model, x, y):
    """(accuracy, mean cross entropy) on the whole set."""
    model.eval()
    correct, loss = 0, 0.0
    for i in range(0, len(x), 1000):
        logits = model(x[i : i + 1000])
        loss += F.cross_entropy(logits, y[i : i + 1000], reduction="sum").item()
        correct += (logits.argmax(1) == y[i : i + 1000]).sum().item()
    model.train()
    return correct / len(x), loss / len(x)


def progress(prefix, step, steps, loss, t0, samples):
    dt = max(time.time() - t0, 1e-9)
    print("%s: step %d/%d loss %.4f %.0f samples/s" % (prefix, step, steps, loss, samples / dt), flush=True)


def local_optimizer(name, params, lr):
    """torch.optim's optimizer that does what pstrain's of that name does on the ps."""
    if name == "adam":
        return torch.optim.Adam(params, lr=lr)
    if name == "adagrad":
        return torch.optim.Adagrad(params, lr=lr, initial_accumulator_value=0.1)
    return torch.optim.SGD(params, lr=lr, momentum=0.9 if name == "momentum" else 0.0)


def train_single(args, model, train, test):
    """The same model, seed and number of updates, with torch.optim in this process."""
    opt = local_optimizer(args.optimizer, model.parameters(), args.lr)
    x, y = train
    t0, loss = time.time(), float("nan")
    w = args.as_workers
    shards = [batches(len(x), args.batch_size, args.seed, i, w) for i in range(w)]
    # async: the gradient of the parameters `staleness` updates before, as
    # an async worker computes it on what it pulled while others pushed.
    stale = copy.deepcopy(model) if not args.sync and args.staleness > 0 else None
    history = collections.deque()
    for step in range(1, args.steps + 1):
        # sync: one batch of every shard (their mean gradient); async: the shards take turns
        idx = torch.cat([next(it) for it in shards]) if args.sync else next(shards[(step - 1) % w])
        opt.zero_grad()
        if stale is None:
            out = F.cross_entropy(model(x[idx]), y[idx])
            out.backward()
        else:
            history.append([p.detach().clone() for p in model.parameters()])
            with torch.no_grad():
                for s, v in zip(stale.parameters(), history[0]):
                    s.copy_(v)
            if len(history) > args.staleness:
                history.popleft()
            stale.zero_grad()
            out = F.cross_entropy(stale(x[idx]), y[idx])
            out.backward()
            for p, s in zip(model.parameters(), stale.parameters()):
                p.grad = s.grad.clone()
        opt.step()
        loss = out.item()
        if args.log_every and step % args.log_every == 0:
            progress("cnn_fashion_mnist[single]", step, args.steps, loss, t0, step * len(idx))
    seconds = time.time() - t0
    acc, xent = evaluate(model, *test)
    samples = args.steps * args.batch_size * (w if args.sync else 1)
    return {
        "event": "done",
        "global_step": args.steps,
        "test_accuracy": round(acc, 4),
        "test_cross_entropy": round(xent, 4),
        "train_seconds": round(seconds, 2),
        "samples_per_sec": round(samples / seconds, 1),
        "ps": 0,
        "workers": w,
        "mode": "single-process " + ("sync" if args.sync else "async"),
        "staleness": 0 if args.sync else args.staleness,
    }


def train_distributed(args, model, train, test):
    import pstrain
    from pstrain.torch import DistributedOptimizer

    ctx = pstrain.init()
    name = "cnn_fashion_mnist[worker %d]" % ctx.task_index
    # The worker's GPU when torch-train.sh gave it one (--gres=gpu:N): the
    # model and the data go there, and the optimizer stages the parameters.
    device = torch.device(ctx.device)
    model.to(device)
    train = tuple(t.to(device) for t in train)
    test = tuple(t.to(device) for t in test)
    # The chief's parameters (from --seed) are the ones on the ps tasks; every
    # worker starts from them.
    opt = DistributedOptimizer(
        model.named_parameters(),
        optimizer=args.optimizer,
        lr=args.lr,
        sync=args.sync,
        max_staleness=args.max_staleness,
        elastic=args.elastic,
        context=ctx,
    )
    if opt.restored_step is not None and ctx.is_chief:
        print("%s: restored from the checkpoint at global step %d" % (name, opt.restored_step), flush=True)
    x, y = train
    sampler = None
    if args.elastic:
        from pstrain.torch import ElasticSampler

        sampler = ElasticSampler(len(x), opt, seed=args.seed)
        it = elastic_batches(sampler, args.batch_size)
    else:
        it = batches(len(x), args.batch_size, args.seed, ctx.task_index, ctx.num_workers)
    resplits, samples, last_step = 0, 0, opt.global_step
    t0, loss, mine = time.time(), float("nan"), 0
    saved = opt.global_step // args.save_every if args.save_every else 0
    # The chief stops at --steps and ends training; the others go on until
    # it has (a worker that left early would be a lost one to the ps).
    while not opt.done and (opt.global_step < args.steps or not ctx.is_chief):
        idx = next(it)
        opt.zero_grad()
        out = F.cross_entropy(model(x[idx]), y[idx])
        out.backward()
        opt.step()
        loss, mine = out.item(), mine + 1
        # In sync mode a step aggregates one batch of every live worker.
        samples += (opt.global_step - last_step) * args.batch_size * (opt.live_workers[0] if args.sync else 1)
        last_step = opt.global_step
        if sampler is not None and sampler.resplits != resplits:
            resplits = sampler.resplits
            alive, rank = sampler.split()
            print(
                "%s: data: re-split among the %d live workers of %d at global step %d: shard %d of %d (%d images)"
                % (name, alive, ctx.num_workers, opt.global_step, rank, alive, len(sampler)),
                flush=True,
            )
        if ctx.is_chief and args.log_every and mine % args.log_every == 0:
            progress(name, opt.global_step, args.steps, loss, t0, opt.global_step * args.batch_size)
        if ctx.is_chief and args.save_every and opt.global_step // args.save_every > saved:
            saved = opt.global_step // args.save_every
            try:
                print("%s: checkpoint at global step %d saved" % (name, opt.save()), flush=True)
            except pstrain.PeerError:
                raise
            except pstrain.Error as e:
                # Not written (a full or read-only disk): the previous one is
                # intact, and training goes on, as pstrain's own trainer does.
                print("%s: warning: %s; training goes on" % (name, e), flush=True)
    seconds = time.time() - t0
    if not ctx.is_chief:
        print("%s: stopped at global step %d after %d steps of its own" % (name, opt.global_step, mine), flush=True)
        return None
    step = opt.global_step
    # How stale the applied gradients were (async: updates between a worker's pull and its push).
    counts = [w for ps in opt.stats() for w in ps["workers"]]
    applied = max(sum(w["gradients"] for w in counts), 1)
    staleness = (round(sum(w["staleness_sum"] for w in counts) / applied, 2), max(w["staleness_max"] for w in counts))
    opt.finish()  # the chief ends training: the ps tasks' servers exit, and the job ends with this program
    acc, xent = evaluate(model, *test)
    workers = ctx.num_workers
    result = {
        "event": "done",
        "global_step": step,
        "test_accuracy": round(acc, 4),
        "test_cross_entropy": round(xent, 4),
        "train_seconds": round(seconds, 2),
        "samples_per_sec": round(samples / max(seconds, 1e-9), 1),
        "ps": ctx.num_ps,
        "workers": workers,
        "mode": "sync" if args.sync else "async",
        "staleness_mean": staleness[0],
        "staleness_max": staleness[1],
    }
    return result


def main(argv=None):
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    model = CNN()
    train, test = load(args.data, "train"), load(args.data, "test")
    result = (
        train_single(args, model, train, test) if args.single_process else train_distributed(args, model, train, test)
    )
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
        sys.exit("%s%s: error: %s" % ("cnn_fashion_mnist", "[%s %s]" % (role, index) if role and index else "", e))
