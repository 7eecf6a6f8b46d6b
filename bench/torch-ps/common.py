"""What the programs of bench/torch-ps share: the CNN, the data, the timer.

The model is the small Fashion-MNIST CNN, the same in every program:
conv 5x5 (1 -> 16, same padding), ReLU, 2x2 max pool, conv 5x5 (16 -> 32,
same), ReLU, 2x2 max pool, a dense layer 1568 -> 10 (28 938 parameters).
pstrain's built-in model with the same layers and parameter count is
CNN_SPEC.  Every program trains with Adam (0.001) on batches of 64, one
compute thread a process, and prints one JSON line.  Steady and
flush_denormal are bench/steady_timer.py's: the last half's samples/s
(steady_samples_per_sec) and the --flush-denormal flag every program has.
"""

import gzip
import json
import os
import struct
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from steady_timer import Steady, flush_denormal  # noqa: E402,F401  (bench/steady_timer.py)

BATCH = 64
LR = 0.001
DATA = "/usr/share/datasets/fashion-mnist"
CNN_SPEC = "conv2d:16:5x5:same:relu,maxpool:2,conv2d:32:5x5:same:relu,maxpool:2,flatten,dense:10"


def make_cnn(seed=1):
    torch.manual_seed(seed)
    return torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 5, padding=2),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Conv2d(16, 32, 5, padding=2),
        torch.nn.ReLU(),
        torch.nn.MaxPool2d(2),
        torch.nn.Flatten(),
        torch.nn.Linear(32 * 7 * 7, 10),
    )


def _idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    dims = struct.unpack(">I", raw[:4])[0] & 0xFF
    shape = struct.unpack(">" + "I" * dims, raw[4 : 4 + 4 * dims])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load_images(data=DATA):
    """(train x, train y, test x, test y, source): Fashion-MNIST, normalised,
    or random data of the same shapes when the files are missing."""
    names = [
        "train-images-idx3-ubyte.gz",
        "train-labels-idx1-ubyte.gz",
        "t10k-images-idx3-ubyte.gz",
        "t10k-labels-idx1-ubyte.gz",
    ]
    if all(os.path.exists(os.path.join(data, n)) for n in names):
        x, y, tx, ty = (_idx(os.path.join(data, n)) for n in names)
        source = data
    else:
        g = np.random.default_rng(1)
        x, y = g.integers(0, 256, (60000, 28, 28), dtype=np.uint8), g.integers(0, 10, 60000)
        tx, ty = g.integers(0, 256, (10000, 28, 28), dtype=np.uint8), g.integers(0, 10, 10000)
        source = "synthetic (no data in %s)" % data
    x = x.astype(np.float32) / 255.0
    tx = tx.astype(np.float32) / 255.0
    mean, std = x.mean(), x.std()
    f = lambda a: torch.from_numpy(((a - mean) / std).reshape(-1, 1, 28, 28).copy())
    return f(x), torch.from_numpy(y.astype(np.int64)), f(tx), torch.from_numpy(ty.astype(np.int64)), source


class Batches:
    """Worker `index` of `workers`: every workers-th example, reshuffled each epoch."""

    def __init__(self, x, y, index, workers, seed=1):
        self.x, self.y = x, y
        self.shard = torch.arange(index, x.shape[0], workers)
        self.gen = torch.Generator().manual_seed(seed * 1000 + index)
        self.order, self.pos = self.shard[torch.randperm(len(self.shard), generator=self.gen)], 0

    def next(self):
        if self.pos + BATCH > len(self.order):
            self.order, self.pos = self.shard[torch.randperm(len(self.shard), generator=self.gen)], 0
        idx = self.order[self.pos : self.pos + BATCH]
        self.pos += BATCH
        return self.x[idx], self.y[idx]


def accuracy(model, tx, ty):
    with torch.no_grad():
        return (model(tx).argmax(1) == ty).float().mean().item()


def one_thread():
    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass


def report(**fields):
    print(json.dumps(fields), flush=True)


class Exchange:
    """Wall time of the exchange calls (push + wait) after the warm-up steps."""

    def __init__(self, warmup):
        self.warmup, self.calls, self.seconds = warmup, 0, 0.0

    def time(self, fn, *args):
        t = time.perf_counter()
        out = fn(*args)
        self.calls += 1
        if self.calls > self.warmup:
            self.seconds += time.perf_counter() - t
        return out

    def ms(self):
        n = self.calls - self.warmup
        return 1000.0 * self.seconds / n if n > 0 else float("nan")


def die(msg):
    sys.stderr.write(msg + "\n")
    sys.exit(1)
