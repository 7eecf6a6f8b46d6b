"""Checkpoints of a program's job, written through pstrain's PS tasks.

The chief asks every ps task (``pstrain serve --checkpoint-dir DIR``) for a
snapshot: each writes its shard of the dense parameters, their optimizer
state and its rows of every embedding table into DIR, a path every node
shares.  ``pstrain checkpoint seal`` then writes the manifest that makes the
checkpoint exist, in the format of pstrain's own checkpoints (so ``pstrain
checkpoint inspect`` lists it, and it restores onto any number of ps
tasks).  The worker's own state (a ``state_dict``-style dict: its learning
rate schedule, its place in the data) goes beside it, written whole or not
at all, before the manifest.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from typing import Any, Dict, List, Optional, Sequence, Tuple

from pstrain import Error

__all__ = ["latest", "check_model", "save", "worker_state_path", "load_worker_state"]

Tensors = Sequence[Tuple[str, Sequence[int]]]


def _command() -> str:
    """The pstrain command that seals and lists checkpoints."""
    exe = os.environ.get("PSTRAIN_BIN") or shutil.which("pstrain")
    if not exe:
        raise Error(
            "no pstrain command to write the checkpoint's manifest with: install pstrain "
            "(its ps tasks run it) or set PSTRAIN_BIN to its path"
        )
    return exe


def _run(args: List[str]) -> Dict[str, Any]:
    """Runs ``pstrain checkpoint ARGS`` and returns its JSON line."""
    done = subprocess.run([_command(), "checkpoint", *args], capture_output=True, text=True)
    if done.returncode != 0:
        line = (done.stderr.strip().splitlines() or ["exit status %d" % done.returncode])[-1]
        raise Error(line.replace("pstrain checkpoint: error: ", ""))
    return json.loads(done.stdout.strip().splitlines()[-1])


def worker_state_path(directory: str, step: int) -> str:
    """Where the chief's own state of the checkpoint at ``step`` lies."""
    return os.path.join(directory, "ckpt-%010d.worker-state.pt" % step)


def latest(directory: str) -> Optional[Dict[str, Any]]:
    """The newest complete checkpoint of ``directory`` (what ``pstrain
    checkpoint latest`` prints), or None when there is none."""
    if not os.path.isdir(directory):
        return None
    found = _run(["latest", directory])
    return found if found.get("global_step") is not None else None


def check_model(found: Dict[str, Any], tensors: Tensors, directory: str) -> None:
    """Raises :class:`pstrain.Error` when the checkpoint ``found`` holds
    another model than ``tensors`` (names and shapes, in order)."""
    theirs = [(t.get("name"), list(t.get("shape", []))) for t in found.get("tensors", [])]
    mine = [(n, list(s)) for n, s in tensors]
    where = "the checkpoint at global step %d in %s" % (found["global_step"], directory)
    fix = "use the model that wrote it, or another checkpoint directory"
    if len(theirs) != len(mine):
        raise Error("%s holds a model of %d tensors and this one has %d: %s" % (where, len(theirs), len(mine), fix))
    for (tn, ts), (mn, ms) in zip(theirs, mine):
        if tn != mn or ts != ms:
            # The message apart from the raise: a traceback shows the raise's
            # line, and the refusal stays one line of the program's stderr.
            message = "%s holds another model: its tensor '%s' %s is '%s' %s here: %s" % (where, tn, ts, mn, ms, fix)
            raise Error(message)


def _write_whole(path: str, write: Any) -> None:
    """Writes ``path`` through a temporary file beside it, synced, then renamed."""
    directory = os.path.dirname(path) or "."
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def save(
    client: Any,
    directory: str,
    tensors: Tensors,
    *,
    sync: bool,
    tables: bool,
    keep: int = 5,
    worker_state: Optional[Dict[str, Any]] = None,
    model: str = "a PyTorch model",
    trained_seconds: float = 0.0,
    trained_samples: int = 0,
) -> int:
    """The chief's checkpoint: a snapshot on every ps task at the current
    global step (a later one when a ps task has moved on, as in async
    training), ``worker_state`` beside it (``torch.save``), then the
    manifest.  Returns the checkpoint's global step.  Raises
    :class:`pstrain.Error` naming what failed; the previous checkpoint is
    then intact."""
    import torch

    step = int(client.global_step)
    for _ in range(20):
        results = client.snapshot(step)
        for p, r in enumerate(results):
            if r["outcome"] == "failed":
                raise Error(
                    "checkpoint at global step %d failed: ps %d could not write its shard (its log says why); "
                    "the previous checkpoint is intact" % (step, p)
                )
        moved = [int(r["step"]) for r in results if r["outcome"] == "moved_on"]
        if not moved:
            break
        step = max(moved)
    else:
        raise Error("checkpoint failed: the ps tasks moved on past 20 snapshot steps; save between steps")
    if worker_state is not None:
        _write_whole(worker_state_path(directory, step), lambda f: torch.save(worker_state, f))
    receipts = [{"bytes": int(r["bytes"]), "checksum": int(r["checksum"]), "step": int(r["step"])} for r in results]
    # Each flag beside its value, as the formatter would not lay them.
    # fmt: off
    args = [
        "seal", directory, str(step),
        "--receipts", json.dumps(receipts),
        "--model", model,
        "--tensors", json.dumps([{"name": n, "shape": list(s)} for n, s in tensors]),
        "--mode", "sync" if sync else "async",
        "--keep", str(keep),
        "--trained-seconds", "%.3f" % trained_seconds,
        "--trained-samples", str(int(trained_samples)),
    ]
    # fmt: on
    if tables:
        args.append("--tables")
    _run(args)
    _prune_worker_states(directory, step)
    return step


def _prune_worker_states(directory: str, newest: int) -> None:
    """Removes the worker-state files of checkpoints pruned away (those
    whose manifest is gone), never the newest's."""
    for name in os.listdir(directory):
        if not (name.startswith("ckpt-") and name.endswith(".worker-state.pt")):
            continue
        try:
            step = int(name[5:15])
        except ValueError:
            continue
        if step != newest and not os.path.exists(os.path.join(directory, "ckpt-%010d.json" % step)):
            try:
                os.unlink(os.path.join(directory, name))
            except OSError:
                pass


def load_worker_state(directory: str, step: int) -> Optional[Dict[str, Any]]:
    """The chief's own state saved with the checkpoint at ``step``, or None."""
    import torch

    path = worker_state_path(directory, step)
    if not os.path.exists(path):
        return None
    return torch.load(path, weights_only=False)
