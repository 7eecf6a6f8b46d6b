"""Reads a `pstrain datagen ctr` data set (Criteo's TSV: label, I1-I13,
C1-C26) into arrays, cached beside it as torch-ps.npz:
  dense [N, 13] float32: log(1 + max(x, 0)), a blank is 0;
  keys  [N, 26] int64: field f's hex id h as the key (f << 32) | h, a
        blank as (f << 32) | 0xffffffff (one "missing" key a field): the
        ids of the 26 fields never collide, so one table holds them all;
  index [N, 26] int64: the same keys numbered 0.. (for a table of rows
        that must be sized in advance);
  label [N] float32; and `train`, the number of training lines (the test
  lines, test.tsv, follow them).

  ctr_data.py DIR   (prints what it made)
"""

import glob
import os
import sys

import numpy as np

MISSING = 0xFFFFFFFF


def parse(paths):
    labels, dense, keys = [], [], []
    for path in paths:
        with open(path) as f:
            for line in f:
                v = line.rstrip("\n").split("\t")
                labels.append(float(v[0]))
                dense.append([float(x) if x else 0.0 for x in v[1:14]])
                keys.append([(i << 32) | (int(x.split(",")[0], 16) if x else MISSING) for i, x in enumerate(v[14:40])])
    return (
        np.array(labels, np.float32),
        np.log1p(np.maximum(np.array(dense, np.float32), 0)),
        np.array(keys, np.int64),
    )


def load(data):
    cache = os.path.join(data, "torch-ps.npz")
    if not os.path.exists(cache):
        train = sorted(glob.glob(os.path.join(data, "train-*.tsv")))
        if not train:
            sys.exit("ctr_data: no train-*.tsv in %s: make it with pstrain datagen ctr --samples N %s" % (data, data))
        ly, ld, lk = parse(train)
        ty, td, tk = parse([os.path.join(data, "test.tsv")])
        keys = np.concatenate([lk, tk])
        _, index = np.unique(keys, return_inverse=True)
        np.savez(
            cache + ".tmp.npz",
            label=np.concatenate([ly, ty]),
            dense=np.concatenate([ld, td]),
            keys=keys,
            index=index.reshape(keys.shape).astype(np.int64),
            train=np.int64(len(ly)),
        )
        os.replace(cache + ".tmp.npz", cache)
    z = np.load(cache)
    return {k: z[k] for k in z.files}


def auc(labels, scores):
    """Area under the ROC curve (ties share their average rank)."""
    order = np.argsort(scores, kind="mergesort")
    s = scores[order]
    ranks = np.empty(len(s))
    _, first, counts = np.unique(s, return_index=True, return_counts=True)
    for f, c in zip(first, counts):
        ranks[f : f + c] = f + (c + 1) / 2.0
    pos = labels[order] > 0.5
    n1 = pos.sum()
    n0 = len(s) - n1
    return float((ranks[pos].sum() - n1 * (n1 + 1) / 2.0) / (n1 * n0))


if __name__ == "__main__":
    d = load(sys.argv[1])
    print("%d lines (%d training), %d distinct keys" % (len(d["label"]), d["train"], d["index"].max() + 1))
