"""Checkpoints and preemption of a :class:`DistributedOptimizer`'s job.

:class:`Checkpoints` is the chief's side of a checkpoint directory (the ps
tasks' ``pstrain serve --checkpoint-dir``): the checkpoint to restore at
the start, :meth:`Checkpoints.save`, the chief's own state saved with one.
It also catches SIGTERM (preemption, ``scontrol requeue``, the time
limit's ``--signal``): the handler only marks the job preempted, and the
optimizer's next ``step()`` acts on it (the chief saves, stops the job and
raises :class:`Preempted`).  Used from the training thread; the handler is
installed from the main thread only.

:class:`Preempted` is how ``step()`` ends a preempted worker: a
``SystemExit`` whose code is 143 (128 + SIGTERM), so a program that does
not catch it exits with status 143, which torch-train.sh turns into a
requeue.
"""

from __future__ import annotations

import signal
from typing import Any, Dict, List, Optional, Tuple

import pstrain
from pstrain import Error
from pstrain import checkpoint as _checkpoint

# The exit status of a preempted worker: 128 + SIGTERM, as a shell reports
# a process that SIGTERM ended.
PREEMPTED_STATUS = 143


class Preempted(SystemExit):
    """The job stopped for preemption (the chief saved a checkpoint first):
    raised by ``DistributedOptimizer.step()``; uncaught, the program exits
    with status 143."""

    def __init__(self) -> None:
        super().__init__(PREEMPTED_STATUS)


class Checkpoints:
    """The chief's checkpoints in ``directory`` (None or empty: none), and
    the preemption mark SIGTERM sets."""

    def __init__(self, directory: Optional[str], keep: int, preemption_state: Any) -> None:
        self.directory = directory
        self.keep = int(keep)
        self.preemption_state = preemption_state
        self.preempted = False  # SIGTERM came: the next step acts on it

    def latest(self, tensors: List[Tuple[str, Tuple[int, ...]]]) -> Optional[int]:
        """The step of the newest complete checkpoint to restore (None:
        none); raises :class:`pstrain.Error` for one of another model."""
        found = _checkpoint.latest(self.directory) if self.directory else None
        if found is None:
            return None
        _checkpoint.check_model(found, tensors, self.directory)
        return int(found["global_step"])

    def save(
        self,
        client: pstrain.ChiefClient,
        tensors: List[Tuple[str, Tuple[int, ...]]],
        sync: bool,
        tables: bool,
        state: Optional[Dict[str, Any]],
        trained_seconds: float,
    ) -> int:
        """A checkpoint at the current global step with ``state`` beside it;
        returns its step."""
        if not self.directory:
            raise Error(
                "save() needs a checkpoint directory: pass checkpoint_dir= (the ps tasks' pstrain serve "
                "--checkpoint-dir) or run under torch-train.sh, which sets PSTRAIN_CHECKPOINT_DIR"
            )
        return _checkpoint.save(
            client,
            self.directory,
            tensors,
            sync=sync,
            tables=tables,
            keep=self.keep,
            worker_state=state,
            trained_seconds=trained_seconds,
        )

    def worker_state(self, restored_step: Optional[int]) -> Optional[Dict[str, Any]]:
        """The chief's own state saved with the checkpoint of ``restored_step``, or None."""
        if restored_step is None or not self.directory:
            return None
        return _checkpoint.load_worker_state(self.directory, restored_step)

    def state_to_save(self) -> Optional[Dict[str, Any]]:
        """What the preemption's checkpoint keeps beside it: ``preemption_state``
        (a dict, or a function returning one)."""
        return self.preemption_state() if callable(self.preemption_state) else self.preemption_state

    def catch_termination(self) -> None:
        """SIGTERM marks the job preempted; the next step() acts on it."""

        def preempted(signum: int, frame: Any) -> None:
            self.preempted = True

        try:
            signal.signal(signal.SIGTERM, preempted)
        except ValueError:  # not the main thread: the program handles its signals
            pass
