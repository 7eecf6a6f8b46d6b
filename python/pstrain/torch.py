"""PyTorch models on pstrain's parameter servers.

:class:`DistributedOptimizer` is used as a torch optimizer is
(``zero_grad()``, ``loss.backward()``, ``step()``), but the optimizer runs
on the PS tasks: ``step()`` sends the gradients and brings the new values
back.  Parameters and gradients live in the client's exchange buffers
(each parameter's ``.data`` and ``.grad`` are views of them), so a step
copies nothing.

:class:`EmbeddingBag` and :class:`Embedding` are embedding tables whose
rows live on the PS tasks: each forward pulls the batch's unique ids once,
autograd runs through the pulled rows, and ``step()`` pushes the rows'
summed gradients once per table.

:class:`ElasticSampler` gives a worker its shard of a dataset and re-splits
it when the workers alive change (``elastic=True``).
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import time
import weakref
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

import numpy as np
import torch

import pstrain
from pstrain import Error
from pstrain import checkpoint as _checkpoint

__all__ = ["DistributedOptimizer", "ElasticSampler", "Embedding", "EmbeddingBag"]

# Every table module made in this process, in the order they were made.
_tables: "weakref.WeakValueDictionary[int, _Table]" = weakref.WeakValueDictionary()
_made = 0


# Optimizers that finish() at the interpreter's exit, unless finished before.
_unfinished: "weakref.WeakSet[DistributedOptimizer]" = weakref.WeakSet()


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


def _keys(ids: torch.Tensor) -> np.ndarray:
    """ids (int64) as the uint64 keys the library takes (the same bits)."""
    return ids.numpy().view(np.uint64)


class _Table(torch.nn.Module):
    """What EmbeddingBag and Embedding share: the table's settings, its
    client, the rows pulled by each forward and their gradients."""

    def __init__(self, dim: int, optimizer: str = "adagrad", lr: float = 0.05, **table: Any) -> None:
        global _made
        super().__init__()
        self.table = pstrain.Table(dim=int(dim), optimizer=optimizer, lr=lr, **table)
        self.dim = int(dim)
        self._client: Optional[pstrain.Client] = None
        self._index = -1
        self._pending: List[Tuple[torch.Tensor, torch.Tensor]] = []  # (unique ids, rows with grad)
        self._order = _made
        _made += 1
        _tables[self._order] = self

    def _attach(self, client: pstrain.Client, index: int) -> None:
        self._client, self._index = client, index

    def _rows(self, ids: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The batch's rows: (rows of the unique ids, each id's place in them)."""
        if self._client is None:
            raise Error("this embedding table has no client yet: make the DistributedOptimizer before the first forward")
        if ids.dtype != torch.int64:
            raise Error(f"embedding ids must be an int64 tensor, got {ids.dtype}: pass ids.long()")
        flat = ids.detach().reshape(-1).cpu()
        unique, place = torch.unique(flat, return_inverse=True)
        unique = unique.contiguous()
        rows = torch.empty((unique.numel(), self.dim), dtype=torch.float32)
        learning = self.training and torch.is_grad_enabled()
        read = self._client.pull_rows if learning else self._client.lookup_rows
        self._client.wait(read(self._index, _keys(unique), rows.numpy()))
        if learning:
            rows.requires_grad_(True)
            self._pending.append((unique, rows))
        return rows, place.reshape(ids.shape)

    def _push(self) -> Optional[int]:
        """Starts the push of the rows' summed gradients; returns its ticket (None: nothing to push)."""
        pending, self._pending = [p for p in self._pending if p[1].grad is not None], []
        if not pending or self._client is None:
            return None
        if len(pending) == 1:
            keys, grads = pending[0][0], pending[0][1].grad
        else:
            every = torch.cat([k for k, _ in pending])
            keys, place = torch.unique(every, return_inverse=True)
            grads = torch.zeros((keys.numel(), self.dim), dtype=torch.float32)
            grads.index_add_(0, place, torch.cat([r.grad for _, r in pending]))
        grads = grads.contiguous()
        return self._client.push_rows(self._index, _keys(keys.contiguous()), grads.numpy())


class EmbeddingBag(_Table):
    """Sums or averages bags of embedding rows that live on the PS tasks.

    ``EmbeddingBag(dim, mode="sum"|"mean", optimizer="adagrad", lr=0.05,
    **table)``; the table's other settings are :class:`pstrain.Table`'s.
    ``forward(ids, offsets=None, per_sample_weights=None)`` as
    ``torch.nn.EmbeddingBag``'s: ids are any 64-bit values (int64), 2-D
    (one bag per row) or 1-D with ``offsets``.  Each forward pulls the
    batch's unique ids once; in eval mode (or without grad) it reads rows
    for evaluation and records nothing.
    """

    def __init__(self, dim: int, mode: str = "sum", optimizer: str = "adagrad", lr: float = 0.05, **table: Any) -> None:
        if mode not in ("sum", "mean"):
            raise Error(f"an EmbeddingBag's mode must be 'sum' or 'mean', got '{mode}': pass mode='sum' or mode='mean'")
        super().__init__(dim, optimizer, lr, **table)
        self.mode = mode

    def forward(
        self,
        ids: torch.Tensor,
        offsets: Optional[torch.Tensor] = None,
        per_sample_weights: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        """The bags' sums or means, [bags, dim]."""
        if ids.dim() == 1 and offsets is None:
            raise Error("1-D ids need offsets (where each bag starts): pass offsets, or 2-D ids [bags, ids per bag]")
        rows, place = self._rows(ids)
        return torch.nn.functional.embedding_bag(
            place, rows, offsets, mode=self.mode, per_sample_weights=per_sample_weights
        )

    def extra_repr(self) -> str:
        return f"dim={self.dim}, mode={self.mode!r}, optimizer={self.table.optimizer!r}, lr={self.table.lr}"


class Embedding(_Table):
    """Embedding rows that live on the PS tasks: ``forward(ids)`` maps int64
    ids ``[...]`` to ``[..., dim]``.  The table's settings are
    :class:`pstrain.Table`'s."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """The rows of ``ids``, [..., dim]."""
        rows, place = self._rows(ids)
        return torch.nn.functional.embedding(place, rows)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, optimizer={self.table.optimizer!r}, lr={self.table.lr}"


def _check_parameter(name: str, p: torch.Tensor) -> None:
    if p.dtype != torch.float32:
        raise Error(f"parameter '{name}' is {p.dtype}: pstrain trains float32 parameters; call model.float() first")
    if not p.is_contiguous():
        raise Error(f"parameter '{name}' is not contiguous: make it so (p.data = p.data.contiguous()) before the optimizer")
    if p.device.type != "cpu":
        raise Error(f"parameter '{name}' is on {p.device}: pstrain's exchange buffers are in host memory; keep the model on the cpu")


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
    this task (None: :func:`pstrain.init`); ``embeddings``: the tables
    trained with it (None: every :class:`EmbeddingBag` and
    :class:`Embedding` made in this process, in the order they were made);
    ``wire_precision``: ``"fp32"`` (None: the default) or ``"bf16"``, what
    gradients and values travel as (see :meth:`pstrain.Context.connect`).

    On construction the client connects; the chief copies its parameters
    in and initialises the PS tasks, every other worker starts from the PS
    values.  From then on each parameter's ``.data`` and ``.grad`` are views
    of the exchange buffers.  Every worker must give the same parameters
    (names, shapes, order).

    Checkpoints (``checkpoint_dir``, default ``$PSTRAIN_CHECKPOINT_DIR``,
    which torch-train.sh sets; the ps tasks' ``pstrain serve
    --checkpoint-dir`` must be the same shared path): the chief restores the
    newest complete checkpoint there instead of initialising
    (:attr:`restored_step`, :meth:`worker_state`), refusing one of another
    model; :meth:`save` takes one.  On SIGTERM (preemption, ``scontrol
    requeue``, the time limit's ``--signal``) the next :meth:`step` of the
    chief saves (with ``preemption_state()``'s dict, when given) and stops
    the job, and every worker's ``step`` then exits with status 143, which
    torch-train.sh turns into a requeue.

    A program may end without :meth:`finish`: at the interpreter's exit an
    unfinished optimizer finishes (the chief ends the job; another worker
    leaves it, and its PS tasks let it go instead of counting it lost),
    unless the program ends with an uncaught exception.
    """

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
        **optimizer_kwargs: Any,
    ) -> None:
        self._named = [(n, p) for n, p in named_parameters if isinstance(p, torch.Tensor)]
        if not self._named:
            raise Error("the model has no parameters: pass model.named_parameters()")
        for n, p in self._named:
            _check_parameter(n, p)
        self.embeddings = list(embeddings) if embeddings is not None else [t for _, t in sorted(_tables.items())]
        self.settings = pstrain.Settings(
            optimizer=pstrain.Optimizer(optimizer, lr=lr, **optimizer_kwargs),
            sync=sync,
            replicas_to_aggregate=replicas_to_aggregate or 0,
            max_staleness=max_staleness,
            elastic=elastic,
            tables=[t.table for t in self.embeddings],
        )
        self.checkpoint_dir = checkpoint_dir if checkpoint_dir is not None else os.environ.get("PSTRAIN_CHECKPOINT_DIR")
        self.keep_checkpoints = int(keep_checkpoints)
        self.preemption_state = preemption_state
        self.restored_step: Optional[int] = None
        self._sync = bool(sync)
        self._started = time.monotonic()
        self._preempted = False
        self.context = context if context is not None else pstrain.init()
        self.position = 0  # this worker's place in its data, kept with snapshots
        # wire_precision None: the connect()'s default ("fp32"; a LocalCluster's own).
        extra = {} if wire_precision is None else {"wire_precision": wire_precision}
        self.client = self.context.connect(
            tensors=[(n, tuple(p.shape) or (1,)) for n, p in self._named], settings=self.settings, **extra
        )
        for i, t in enumerate(self.embeddings):
            t._attach(self.client, i)
        self._start()
        self._finished = False
        _unfinished.add(self)
        if self.checkpoint_dir:
            self._catch_termination()

    def _start(self) -> None:
        """The chief initialises the PS tasks with its values; every worker
        then takes the PS values, and its parameters become views."""
        c = self.client
        if self.context.is_chief:
            found = _checkpoint.latest(self.checkpoint_dir) if self.checkpoint_dir else None
            if found is not None:
                _checkpoint.check_model(found, self._tensors(), self.checkpoint_dir)
                self._wait(c.restore(int(found["global_step"])))
                self.restored_step = int(found["global_step"])
            else:
                for n, p in self._named:
                    c.param(n)[...] = p.detach().numpy().reshape(c.param(n).shape)
                self._wait(c.init())
        else:
            self._wait(c.pull())
            self.restored_step = c.restored_step
        # (parameter, name, address of its values, address of its gradient) in the buffers
        self._places: List[Tuple[torch.Tensor, str, int, int]] = []
        for n, p in self._named:
            p.data = torch.from_numpy(c.param(n)).view(p.shape)
            p.grad = torch.from_numpy(c.grad(n)).view(p.shape)
            p.grad.zero_()
            self._places.append((p, n, p.data.data_ptr(), p.grad.data_ptr()))

    def _wait(self, ticket: int) -> None:
        self.client.wait(ticket)

    def _tensors(self) -> List[Tuple[str, Tuple[int, ...]]]:
        return [(n, tuple(p.shape) or (1,)) for n, p in self._named]

    def _catch_termination(self) -> None:
        """SIGTERM marks the job preempted; the next step() acts on it."""

        def preempted(signum: int, frame: Any) -> None:
            self._preempted = True

        try:
            signal.signal(signal.SIGTERM, preempted)
        except ValueError:  # not the main thread: the program handles its signals
            pass

    def save(self, state: Optional[Dict[str, Any]] = None) -> Optional[int]:
        """The chief: a checkpoint of the PS tasks' shards and tables at the
        current global step in ``checkpoint_dir``, with ``state`` (the
        chief's own, e.g. its schedulers' ``state_dict()``s) beside it;
        returns its step.  Other workers: nothing (None).  Raises
        :class:`pstrain.Error` naming what failed (the previous checkpoint
        is then intact)."""
        if not self.context.is_chief:
            return None
        if not self.checkpoint_dir:
            raise Error("save() needs a checkpoint directory: pass checkpoint_dir= (the ps tasks' pstrain serve "
                        "--checkpoint-dir) or run under torch-train.sh, which sets PSTRAIN_CHECKPOINT_DIR")
        return _checkpoint.save(
            self.client,
            self.checkpoint_dir,
            self._tensors(),
            sync=self._sync,
            tables=bool(self.embeddings),
            keep=self.keep_checkpoints,
            worker_state=state,
            trained_seconds=time.monotonic() - self._started,
        )

    def worker_state(self) -> Optional[Dict[str, Any]]:
        """The chief's own state saved with the checkpoint it restored (what
        it gave :meth:`save`), or None."""
        if self.restored_step is None or not self.checkpoint_dir or not self.context.is_chief:
            return None
        return _checkpoint.load_worker_state(self.checkpoint_dir, self.restored_step)

    def _on_preemption(self) -> None:
        """The chief saves, stops the job and exits with 143; the other
        workers go on until a reply says the job stopped (leaving at once
        would end a sync step without them before the chief saves)."""
        if not self.context.is_chief or self._finished:
            return
        state = self.preemption_state() if callable(self.preemption_state) else self.preemption_state
        step = self.save(state)
        print(f"pstrain: preempted: saved the checkpoint at global step {step}; the job stops for a requeue",
              flush=True)
        self._finished = True
        self.client.shutdown(stop=True)
        raise SystemExit(143)

    def zero_grad(self, set_to_none: bool = False) -> None:
        """Zeroes every gradient in the exchange buffer, in place."""
        if set_to_none:
            raise Error("zero_grad(set_to_none=True) is refused: the gradients live in pstrain's exchange buffer; call zero_grad()")
        self.client.grads.fill(0.0)

    def _adopt_moved(self) -> None:
        """A parameter whose .grad or .data was replaced (model.zero_grad()
        sets grads to None) goes back to its view, with its values copied.
        Each step checks the storage addresses only (no views are made)."""
        for p, n, values_at, grad_at in self._places:
            g = p.grad
            if g is None or g.data_ptr() != grad_at:
                view = self.client.grad(n)
                if g is None:
                    view.fill(0.0)
                else:
                    view[...] = g.detach().reshape(view.shape).numpy()
                p.grad = torch.from_numpy(view).view(p.shape)
            if p.data_ptr() != values_at:
                raise Error(f"parameter '{n}' was given new storage after the DistributedOptimizer was made: change a parameter in place (p.data.copy_(...))")

    def step(self, closure: Any = None) -> Optional[torch.Tensor]:
        """Sends the gradients (each table's rows first, then the dense
        ones) and waits for the new values (sync: the step barrier)."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        if self._preempted:
            self._on_preemption()
        if self.client.stopped:
            raise SystemExit(143)  # the chief stopped the job for preemption
        if self.client.done:
            return loss  # the chief ended training: nothing more is sent
        self._adopt_moved()
        tickets = [t for t in (e._push() for e in self.embeddings) if t is not None]
        tickets.append(self.client.push(position=self.position))
        for t in tickets:
            self._wait(t)
        self.position += 1
        if self.client.stopped:
            raise SystemExit(143)
        return loss

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
        if self.context.is_chief:
            self.client.shutdown()
        elif not self.client.done:
            self.client.leave()

    def __enter__(self) -> "DistributedOptimizer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()


class ElasticSampler(torch.utils.data.Sampler):
    """The indices of this worker's shard of a dataset of ``length`` items,
    re-split whenever the workers alive change.

    ``source`` is the :class:`DistributedOptimizer` (or anything with a
    ``live_workers`` pair: alive, rank).  Each pass (each ``iter()``) draws
    a new permutation of shard ``rank`` of ``alive``: every alive-th index
    from ``rank`` (shards are not padded: 9 items over 2 workers are 5 and
    4).  Before each index it looks at ``source.live_workers``; when the
    split changed (a worker of an ``elastic=True`` job was lost, or one was
    taken back), it goes on with a new permutation of its new shard, so a
    pass over the new shards covers the dataset once and a lost worker's
    items are still trained on, as pstrain's own workers do.  ``len()`` is
    the current shard's size: a pass that re-splits yields the items drawn
    before the change and then the whole new shard.  Once training is done
    (``source.done``) the split stays as it was.  Use it as
    ``DataLoader(data, batch_size=..., sampler=ElasticSampler(len(data),
    opt))`` with the loader's ``num_workers=0``: loader processes would read
    indices ahead.
    """

    def __init__(self, length: int, source: Any, shuffle: bool = True, seed: int = 0) -> None:
        if int(length) < 1:
            raise Error(f"ElasticSampler: length {length}: give the dataset's length (len(dataset)), at least 1")
        if not hasattr(source, "live_workers"):
            raise Error(f"ElasticSampler: {type(source).__name__} has no live_workers: give the DistributedOptimizer")
        self.length = int(length)
        self.source = source
        self.shuffle = shuffle
        self.seed = int(seed)
        self.epoch = 0  # passes begun (each draws a new order)
        self.resplits = 0  # changes of the split seen
        self._split: Optional[Tuple[int, int]] = None

    def split(self) -> Tuple[int, int]:
        """(alive, rank) now: the source's, before any reply the job's own,
        and once training is done the last one."""
        if self._split is not None and getattr(self.source, "done", False):
            return self._split
        alive, rank = self.source.live_workers
        if alive > 0:
            return int(alive), int(rank)
        context = getattr(self.source, "context", None)
        if context is not None:
            return int(context.num_workers), int(context.task_index)
        return 1, 0

    def set_epoch(self, epoch: int) -> None:
        """The next pass's number (as DistributedSampler's): its order."""
        self.epoch = int(epoch)

    def _shard(self, split: Tuple[int, int]) -> range:
        alive, rank = split
        if rank >= self.length:
            raise Error(f"ElasticSampler: worker rank {rank} of {alive} has no items of {self.length}: "
                        "give a dataset with at least as many items as workers")
        return range(rank, self.length, alive)

    def _order(self, split: Tuple[int, int], epoch: int) -> torch.Tensor:
        alive, rank = split
        mine = torch.tensor(self._shard(split))
        if not self.shuffle:
            return mine
        g = torch.Generator().manual_seed(
            (self.seed * 1000003 + epoch * 8191 + self.resplits * 131071 + alive * 127 + rank) % (2**63))
        return mine[torch.randperm(len(mine), generator=g)]

    def __len__(self) -> int:
        return len(self._shard(self.split()))

    def __iter__(self) -> Iterator[int]:
        epoch = self.epoch
        self.epoch += 1  # a pass left halfway does not make the next one repeat it
        split = self._split = self.split()
        order, i = self._order(split, epoch), 0
        while i < len(order):
            now = self.split()
            if now != split:
                split = self._split = now
                self.resplits += 1
                order, i = self._order(split, epoch), 0
            yield int(order[i])
            i += 1
