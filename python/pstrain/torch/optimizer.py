"""The optimizer of a PyTorch program whose updates run on the PS tasks.

:class:`DistributedOptimizer` connects the client, starts the job (the
chief initialises or restores the PS tasks, every other worker pulls),
and runs each step: the tables' row pushes, then the dense push, then the
wait for the new values.  Its collaborators: :class:`.views.ParameterViews`
(the parameters as views of the exchange buffers) or
:class:`.staging.StagedParameters` (a GPU model's, staged through them),
:class:`.preemption.Checkpoints` (checkpoints and SIGTERM), the tables of
:mod:`.embedding`.  An optimizer is used from one thread (the training
loop's); the at-exit finish runs on the interpreter's exit.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
import weakref
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

import torch

import pstrain
from pstrain import Error

from .embedding import _Table
from .preemption import Checkpoints, Preempted
from .staging import FIRST_BUCKET_BYTES, StagedParameters
from .views import ParameterViews

# Optimizers that finish() at the interpreter's exit, unless finished before.
_unfinished: weakref.WeakSet[DistributedOptimizer] = weakref.WeakSet()


@atexit.register
def _finish_at_exit() -> None:
    """A program that ends without finish() ends as if it had called it; one
    that ends with an uncaught exception (the interpreter printed it and set
    sys.last_value) crashed: its PS tasks count it lost, as for a signal."""
    if getattr(sys, "last_value", None) is not None:
        return
    for opt in list(_unfinished):
        try:
            opt.finish()
        except Error as e:
            print(f"pstrain: at exit: {e}", file=sys.stderr)


class DistributedOptimizer:
    """A torch-style optimizer whose updates run on pstrain's PS tasks.

    ``DistributedOptimizer(model.named_parameters(), optimizer="adam",
    lr=1e-3, sync=True, replicas_to_aggregate=None, context=None,
    embeddings=None, **optimizer_kwargs)``: ``optimizer`` is ``"sgd"``,
    ``"momentum"``, ``"adagrad"`` or ``"adam"`` with the fields of
    :class:`pstrain.Optimizer` as keywords; ``sync``: every step aggregates
    ``replicas_to_aggregate`` gradients (None: every worker);
    ``max_staleness`` (async): a worker more than that many steps ahead of
    the slowest waits for it (None: no bound; 0: lock-step); ``elastic``:
    a sync job goes on without a lost worker other than the chief, and a
    restarted worker takes a lost one's place (see :class:`pstrain.Settings`);
    ``context``:
    this task (None: :func:`pstrain.init`); ``embeddings``: the
    :class:`EmbeddingBag` and :class:`Embedding` tables trained with it, in
    the order every worker gives (None or empty: none; a table not given to
    an optimizer has no client, and its forward says so);
    ``wire_precision``: ``"fp32"`` (None: the default) or ``"bf16"``, what
    gradients and values travel as (see :meth:`pstrain.Context.connect`);
    ``staged``: whether the parameters keep their own storage (None: when
    the model is on a GPU); ``bucket_cap_mb``: a staged model's gradient
    buckets, in MB (None: the first up to 1 MB, the others up to 25, as
    DDP's).

    On construction the client connects; the chief copies its parameters
    in and initialises the PS tasks, every other worker starts from the PS
    values.  A CPU model's parameters then become views of the exchange
    buffers (``.data`` and ``.grad``), so a step copies nothing. A model on
    a GPU (or any with ``staged=True``) keeps its storage: backward copies
    its gradients to the (pinned) exchange buffer bucket by bucket as it
    produces them, and ``step()`` copies the new values back, which the
    next forward waits for on the GPU (:mod:`.staging`); gradient clipping
    between backward and ``step()`` and ``zero_grad(set_to_none=True)``
    work there. ``step()`` pushes such a model's gradient bucket by bucket
    (sync: without backup workers), each as soon as its copies are done,
    and each PS applies a bucket (sync: once every worker's is in; async: on
    arrival, every bucket of the step as its one update) and answers it
    while the next ones come, the values bit for bit those of one push;
    each bucket's values go back to the device as soon as its reply is in. A step that
    GradScaler skips pushes every bucket as skipped. Every worker must give the same parameters (names, shapes,
    order).

    Checkpoints (``checkpoint_dir``, default ``$PSTRAIN_CHECKPOINT_DIR``,
    which torch-train.sh sets; the ps tasks' ``pstrain serve
    --checkpoint-dir`` must be the same shared path): the chief restores the
    newest complete checkpoint there instead of initialising
    (:attr:`restored_step`, :meth:`worker_state`), refusing one of another
    model; :meth:`save` takes one.  On SIGTERM (preemption, ``scontrol
    requeue``, the time limit's ``--signal``) the next :meth:`step` of the
    chief saves (with ``preemption_state()``'s dict, when given) and stops
    the job, and every worker's ``step`` then raises :class:`Preempted` (a
    ``SystemExit``: the program exits with status 143, which
    torch-train.sh turns into a requeue).

    Mixed precision: under ``torch.autocast`` the parameters (the PS's
    masters) stay float32. With ``torch.amp.GradScaler``, ``scaler.step(opt)``
    calls :meth:`step` every time (``_step_supports_amp_scaling``): the
    gradients are unscaled before the push (unless ``scaler.unscale_(opt)``
    did it, e.g. for clipping), and a step whose gradients hold inf or NaN
    is pushed as skipped, so the PS tasks apply nothing of it, on every
    worker alike in sync training (each worker's scaler keeps its own
    scale). :attr:`param_groups` is what the scaler reads.

    A program may end without :meth:`finish`: at the interpreter's exit an
    unfinished optimizer finishes (the chief ends the job; another worker
    leaves it, and its PS tasks let it go instead of counting it lost),
    unless the program ends with an uncaught exception.
    """

    # torch.amp.GradScaler then calls step() itself (with grad_scale and
    # found_inf set) instead of leaving a step with inf out: the PS must hear
    # of it, or a sync step would wait for this worker.
    _step_supports_amp_scaling = True

    def __init__(
        self,
        named_parameters: Iterable[Tuple[str, torch.nn.Parameter]],
        optimizer: str = "adam",
        lr: float = 1e-3,
        sync: bool = True,
        replicas_to_aggregate: Optional[int] = None,
        context: Any = None,
        max_staleness: Optional[int] = None,
        elastic: bool = False,
        embeddings: Optional[Sequence[_Table]] = None,
        checkpoint_dir: Optional[str] = None,
        keep_checkpoints: int = 5,
        preemption_state: Any = None,
        wire_precision: Optional[str] = None,
        staged: Optional[bool] = None,
        bucket_cap_mb: Optional[float] = None,
        **optimizer_kwargs: Any,
    ) -> None:
        named = list(named_parameters)
        if staged is None:
            staged = any(isinstance(p, torch.Tensor) and p.device.type != "cpu" for _, p in named)
        if bucket_cap_mb is not None and not (bucket_cap_mb > 0):
            raise Error(f"bucket_cap_mb={bucket_cap_mb}: give the buckets' size in MB (more than 0), or leave it out")
        if bucket_cap_mb is not None and not staged:
            raise Error(
                "bucket_cap_mb: a CPU model's parameters are views of the exchange buffers and push once; "
                "give staged=True (or a model on a GPU) to push in buckets"
            )
        if not staged:
            self._params: Any = ParameterViews(named)
        elif bucket_cap_mb is None:
            self._params = StagedParameters(named)
        else:
            cap = int(bucket_cap_mb * (1 << 20))
            self._params = StagedParameters(named, first_bucket_bytes=min(cap, FIRST_BUCKET_BYTES), bucket_bytes=cap)
        self.embeddings = list(embeddings) if embeddings is not None else []
        for t in self.embeddings:
            if not isinstance(t, _Table):
                raise Error(
                    f"embeddings=[...] takes pstrain.torch.EmbeddingBag and Embedding tables, got "
                    f"{type(t).__name__}: pass the model's tables"
                )
        self.settings = pstrain.Settings(
            optimizer=pstrain.Optimizer(optimizer, lr=lr, **optimizer_kwargs),
            sync=sync,
            replicas_to_aggregate=replicas_to_aggregate or 0,
            max_staleness=max_staleness,
            elastic=elastic,
            tables=[t.table for t in self.embeddings],
        )
        directory = checkpoint_dir if checkpoint_dir is not None else os.environ.get("PSTRAIN_CHECKPOINT_DIR")
        self._checkpoints = Checkpoints(directory, keep_checkpoints, preemption_state)
        self.restored_step: Optional[int] = None
        self._sync = bool(sync)
        self._started = time.monotonic()
        self.context = context if context is not None else pstrain.init()
        # Staged: each bucket is pushed as soon as its copies are done and
        # each PS applies it while the next come (sync: once every worker's
        # is in; async: on arrival; not with backup workers, whose step
        # aggregates whole shards, nor for one bucket).
        self._bucketed = (
            isinstance(self._params, StagedParameters)
            and (not self._sync or not replicas_to_aggregate or replicas_to_aggregate >= self.context.num_workers)
            and len(self._params.buckets) > 1
        )
        self.position = 0  # this worker's place in its data, kept with snapshots
        # wire_precision None: the connect()'s default ("fp32"; the tests' LocalCluster: its own).
        extra = {} if wire_precision is None else {"wire_precision": wire_precision}
        self.client = self.context.connect(tensors=self._params.tensors(), settings=self.settings, **extra)
        for i, t in enumerate(self.embeddings):
            t._attach(self.client, i)
        self._start()
        self._finished = False
        _unfinished.add(self)
        if self.checkpoint_dir:
            self._checkpoints.catch_termination()

    # The checkpoint settings, as given (or from $PSTRAIN_CHECKPOINT_DIR).
    @property
    def checkpoint_dir(self) -> Optional[str]:
        return self._checkpoints.directory

    @property
    def keep_checkpoints(self) -> int:
        return self._checkpoints.keep

    @property
    def preemption_state(self) -> Any:
        return self._checkpoints.preemption_state

    def _start(self) -> None:
        """The chief initialises the PS tasks with its values (or restores
        the newest checkpoint); every worker then takes the PS values, and
        its parameters become views (or take the values, staged)."""
        c = self.client
        if self.context.is_chief:
            step = self._checkpoints.latest(self._params.tensors())
            if step is not None:
                c.wait(c.restore(step))
                self.restored_step = step
            else:
                self._params.copy_in(c)
                c.wait(c.init())
        else:
            c.wait(c.pull())
            self.restored_step = c.restored_step
        self._params.attach(c)

    def save(self, state: Optional[Dict[str, Any]] = None) -> Optional[int]:
        """The chief: a checkpoint of the PS tasks' shards and tables at the
        current global step in ``checkpoint_dir``, with ``state`` (the
        chief's own, e.g. its schedulers' ``state_dict()``s) beside it;
        returns its step.  Other workers: nothing (None).  Raises
        :class:`pstrain.Error` naming what failed (the previous checkpoint
        is then intact)."""
        if not self.context.is_chief:
            return None
        return self._checkpoints.save(
            self.client,
            self._params.tensors(),
            sync=self._sync,
            tables=bool(self.embeddings),
            state=state,
            trained_seconds=time.monotonic() - self._started,
        )

    def worker_state(self) -> Optional[Dict[str, Any]]:
        """The chief's own state saved with the checkpoint it restored (what
        it gave :meth:`save`), or None."""
        if not self.context.is_chief:
            return None
        return self._checkpoints.worker_state(self.restored_step)

    def _on_preemption(self) -> None:
        """The chief saves, stops the job and raises Preempted; the other
        workers go on until a reply says the job stopped (leaving at once
        would end a sync step without them before the chief saves)."""
        if not self.context.is_chief or self._finished:
            return
        step = self.save(self._checkpoints.state_to_save())
        print(
            f"pstrain: preempted: saved the checkpoint at global step {step}; the job stops for a requeue",
            flush=True,
        )
        self._finished = True
        self.client.shutdown(stop=True)
        raise Preempted()

    @property
    def param_groups(self) -> List[Dict[str, Any]]:
        """One group: the parameters and the table rows this step pulled
        (what ``torch.amp.GradScaler`` unscales and checks for inf)."""
        rows = [r for t in self.embeddings for _, r in t._pending]
        return [{"params": [p for _, p in self._params.named] + rows}]

    def _unscaled(self) -> bool:
        """Under GradScaler.step: the gradients unscaled (unless unscale_()
        did it); whether they hold inf or NaN, so the step is skipped."""
        scale = getattr(self, "grad_scale", None)
        found_inf = getattr(self, "found_inf", None)
        skip = found_inf is not None and bool(found_inf.item())
        if scale is not None and not skip:
            inverse = scale.double().reciprocal().float()
            with torch.no_grad():
                for p in self.param_groups[0]["params"]:
                    if p.grad is not None:
                        p.grad.mul_(inverse.to(p.grad.device))
        return skip

    def zero_grad(self, set_to_none: bool = False) -> None:
        """Zeroes every gradient (in the exchange buffer, in place; staged:
        the parameters' own, or sets them to None)."""
        self._params.zero_grad(self.client, set_to_none)

    def step(self, closure: Any = None) -> Optional[torch.Tensor]:
        """Sends the gradients (each table's rows first, then the dense
        ones) and waits for the new values (sync: the step barrier).
        Under ``GradScaler.step``, unscaled first, or pushed as skipped when
        they hold inf or NaN. Raises :class:`Preempted` once the job
        stopped for preemption."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._checkpoints.preempted:
            self._on_preemption()
        if self.client.stopped:
            raise Preempted()  # the chief stopped the job for preemption
        if self.client.done:
            return loss  # the chief ended training: nothing more is sent
        skip = self._unscaled()
        if self._bucketed:
            self._step_in_buckets(skip)
            if self.client.stopped:
                raise Preempted()
            return loss
        self._params.before_push(self.client)
        tickets = self._push_rows(skip)
        tickets.append(self.client.push(position=self.position, skip=skip))
        for t in tickets:
            self.client.wait(t)
        self._params.arrived(self.client)
        self.position += 1
        if self.client.stopped:
            raise Preempted()
        return loss

    def _push_rows(self, skip: bool) -> List[Any]:
        """Each table's rows of this step pushed first (none when the step
        is skipped: their gradients hold inf or NaN); their tickets."""
        if skip:
            for e in self.embeddings:
                e._pending = []
            return []
        return [t for t in (e._push() for e in self.embeddings) if t is not None]

    def _step_in_buckets(self, skip: bool) -> None:
        """The overlapped sync step: each table's rows, then the dense
        gradient bucket by bucket, each as soon as its copies are done; each
        bucket's values go to the device as soon as its reply is in.  A
        skipped step pushes every bucket as skipped, and no rows."""
        tickets = self._push_rows(skip)
        buckets = self._params.push_buckets(self.client, self.position, skip)
        for t in tickets:
            self.client.wait(t)
        for b, t in buckets:
            self.client.wait(t)
            self._params.bucket_arrived(b)
        self._params.end_step()
        self.position += 1

    @property
    def done(self) -> bool:
        """The chief ended training."""
        return bool(self.client.done)

    @property
    def global_step(self) -> int:
        """The PS tasks' global step, as of the last reply."""
        return int(self.client.global_step)

    @property
    def live_workers(self) -> Tuple[int, int]:
        """(alive, rank): the workers PS 0 has not lost and this worker's
        rank among them, as of the last step.  With ``elastic=True`` a
        worker that sees it change re-splits its data, for example with
        ``DistributedSampler(data, num_replicas=alive, rank=rank)``."""
        alive, rank = self.client.live_workers
        return int(alive), int(rank)

    def stats(self) -> List[dict]:
        """Every PS's counters (see :meth:`pstrain.Client.stats`)."""
        return self.client.stats()

    def finish(self) -> None:
        """The chief ends training on every PS; another worker that training
        has not ended for leaves the job (every PS lets it go instead of
        counting it lost, and sync steps go on with the others).  Called at
        the interpreter's exit for an optimizer not finished by then, unless
        the program ends with an uncaught exception: a worker that crashed is
        lost and named, and a crashed chief ends the job."""
        if self._finished:
            return
        self._finished = True
        self._params.release()
        if self.context.is_chief:
            self.client.shutdown()
        else:
            # Also once a reply said done: another PS may not have said so
            # yet (async, a push of the chief's behind), and would count it lost.
            self.client.leave()

    def __enter__(self) -> DistributedOptimizer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()
