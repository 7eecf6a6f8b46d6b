"""Reads pstrain's TensorBoard event files with TensorBoard's own reader and
checks every scalar against the run's metrics JSONL.

usage: check_tensorboard.py EVENTS_DIR METRICS_JSONL TAG...

Every tag, step and value TensorBoard reads must be one the metrics file
holds (compared as the float32 TensorBoard stores), each of the metrics
file's scalars must be there (after a sync rollback, a "ps_replaced" event
with "rolled_back_from", only the values logged since for the steps trained
again: TensorBoard forgets the earlier ones at pstrain's SessionLog START), and each TAG named (a regular expression)
must match at least one tag.  Prints one summary line; exits 1 with the
differences otherwise.
"""

import json
import re
import struct
import sys

from tensorboard.backend.event_processing import event_accumulator, plugin_event_accumulator
from tensorboard.util import tensor_util


def f32(x):
    return struct.unpack("f", struct.pack("f", x))[0]


def expected_scalars(metrics_path):
    """(tag, step) -> value, from the metrics events as pstrain(1) documents them."""
    out = {}

    def add(tag, step, obj, field):
        v = obj.get(field)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            out[(tag, step)] = f32(v)

    for line in open(metrics_path):
        e = json.loads(line)
        step, kind = e.get("global_step"), e.get("event")
        if kind == "ps_replaced" and e.get("rolled_back_from"):
            # Recorded at the first step after the rollback: every step from
            # there on is trained, and logged, again.
            for key in [k for k in out if k[1] >= step]:
                del out[key]
        if kind == "progress":
            add("loss/train", step, e, "loss")
            add("accuracy/train", step, e, "train_accuracy")
            add("samples_per_sec", step, e, "samples_per_sec")
            add("learning_rate", step, e, "learning_rate")
        elif kind == "eval":
            add("accuracy/test", step, e, "test_accuracy")
            add("cross_entropy/test", step, e, "test_cross_entropy")
            add("mse/test", step, e, "test_mse")
        elif kind == "cluster":
            for w in e["workers"]:
                add("worker/%d/steps_per_sec" % w["worker"], step, w, "steps_per_sec")
                add("worker/%d/staleness" % w["worker"], step, w, "staleness")
            add("stale_gradients", step, e, "stale_gradients")
            for p in e["ps"]:
                add("ps/%d/received_bytes_per_sec" % p["ps"], step, p, "received_bytes_per_sec")
                add("ps/%d/sent_bytes_per_sec" % p["ps"], step, p, "sent_bytes_per_sec")
    return out


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    events_dir, metrics_path, wanted = sys.argv[1], sys.argv[2], sys.argv[3:]
    # The legacy reader, and the one `tensorboard --logdir` serves from
    # (they differ in when a SessionLog START drops earlier steps: the
    # server's takes a run's first START as its beginning): both must read
    # what the metrics say.
    legacy = event_accumulator.EventAccumulator(events_dir, size_guidance={event_accumulator.SCALARS: 0})
    legacy.Reload()
    read = {}
    for tag in legacy.Tags()["scalars"]:
        for s in legacy.Scalars(tag):
            if (tag, s.step) in read:
                sys.exit("tensorboard: %s has two values at step %d" % (tag, s.step))
            read[(tag, s.step)] = s.value
    server = plugin_event_accumulator.EventAccumulator(events_dir, size_guidance={plugin_event_accumulator.TENSORS: 0})
    server.Reload()
    served = {}
    for tag in server.Tags()["tensors"]:
        for e in server.Tensors(tag):
            if (tag, e.step) in served:
                sys.exit("tensorboard (the server's reader): %s has two values at step %d" % (tag, e.step))
            served[(tag, e.step)] = f32(tensor_util.make_ndarray(e.tensor_proto).item())
    if served != read:
        diff = sorted(set(served.items()) ^ set(read.items()))[:20]
        sys.exit("tensorboard: the server's reader and the legacy one read different scalars: %s" % diff)
    expected = expected_scalars(metrics_path)
    problems = []
    for key in sorted(set(expected) - set(read)):
        problems.append("missing in the events: %s at step %d = %r" % (key[0], key[1], expected[key]))
    for key in sorted(set(read) - set(expected)):
        problems.append("not in the metrics: %s at step %d = %r" % (key[0], key[1], read[key]))
    for key in sorted(set(read) & set(expected)):
        if read[key] != expected[key]:
            problems.append("%s at step %d: events %r, metrics %r" % (key[0], key[1], read[key], expected[key]))
    tags = sorted({t for t, _ in read})
    for pattern in wanted:
        if not any(re.fullmatch(pattern, t) for t in tags):
            problems.append("no tag matches %s (tags: %s)" % (pattern, ", ".join(tags)))
    if problems:
        print("\n".join(problems[:40]))
        sys.exit(1)
    print("tensorboard: %d scalars in %d tags match the metrics: %s" % (len(read), len(tags), ", ".join(tags)))


if __name__ == "__main__":
    main()
