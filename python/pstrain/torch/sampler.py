"""A worker's shard of a dataset, re-split when the workers alive change.

:class:`ElasticSampler` reads the split (alive, rank) from its source (the
:class:`DistributedOptimizer`'s ``live_workers``) before each index it
yields; its state (the pass, the items drawn of it, the split) comes out of
:meth:`ElasticSampler.state_dict` and goes back with
:meth:`ElasticSampler.load_state_dict`, as torch's stateful samplers do, so
a program that saves it with a checkpoint resumes its pass.  Used from the
thread that iterates it (a DataLoader with ``num_workers=0``).
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, Optional, Tuple

import torch

from pstrain import Error


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

    :meth:`state_dict` and :meth:`load_state_dict` save and restore where
    it is: the next ``iter()`` after a load resumes the saved pass after
    the items it had drawn (a pass whose split differs now goes on with the
    new shard, as a re-split does).
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
        self._pass: Optional[int] = None  # the pass under way (None: between passes)
        self._drawn = 0  # items of the pass's current order yielded
        self._resume: Optional[Tuple[Tuple[int, int], int]] = None  # (split, drawn) load_state_dict gave

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

    def state_dict(self) -> Dict[str, Any]:
        """Where the sampler is: ``epoch``, the pass under way (else the
        next one), ``drawn``, the items of its current order yielded (0
        between passes), ``split`` (alive, rank) of that order (None before
        any pass), ``resplits``, and the settings it was made with
        (``length``, ``shuffle``, ``seed``)."""
        under_way = self._pass is not None
        return {
            "length": self.length,
            "shuffle": bool(self.shuffle),
            "seed": self.seed,
            "epoch": self._pass if under_way else self.epoch,
            "drawn": self._drawn if under_way else 0,
            "split": list(self._split) if self._split is not None else None,
            "resplits": self.resplits,
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        """Takes back what :meth:`state_dict` gave; the next pass resumes it.
        A state of another dataset length, order or seed is refused in one
        line: the resumed pass would draw other items."""
        for key in ("length", "shuffle", "seed"):
            mine = getattr(self, key)
            if key in state and state[key] != mine:
                raise Error(
                    f"ElasticSampler.load_state_dict: the state's {key} is {state[key]!r}, this sampler's "
                    f"{mine!r}: make the sampler as the saved one was"
                )
        self.epoch = int(state.get("epoch", 0))
        self.resplits = int(state.get("resplits", 0))
        split = state.get("split")
        self._split = (int(split[0]), int(split[1])) if split is not None else None
        drawn = int(state.get("drawn", 0))
        self._resume = (self._split, drawn) if self._split is not None and drawn > 0 else None
        self._pass, self._drawn = None, 0

    def _shard(self, split: Tuple[int, int]) -> range:
        alive, rank = split
        if rank >= self.length:
            raise Error(
                f"ElasticSampler: worker rank {rank} of {alive} has no items of {self.length}: "
                "give a dataset with at least as many items as workers"
            )
        return range(rank, self.length, alive)

    def _order(self, split: Tuple[int, int], epoch: int) -> torch.Tensor:
        alive, rank = split
        mine = torch.tensor(self._shard(split))
        if not self.shuffle:
            return mine
        g = torch.Generator().manual_seed(
            (self.seed * 1000003 + epoch * 8191 + self.resplits * 131071 + alive * 127 + rank) % (2**63)
        )
        return mine[torch.randperm(len(mine), generator=g)]

    def __len__(self) -> int:
        return len(self._shard(self.split()))

    def __iter__(self) -> Iterator[int]:
        epoch = self.epoch
        self.epoch += 1  # a pass left halfway does not make the next one repeat it
        split, i = self.split(), 0
        if self._resume is not None:
            (split, i), self._resume = self._resume, None
        self._split, self._pass = split, epoch
        order = self._order(split, epoch)
        while i < len(order):
            now = self.split()
            if now != split:
                split = self._split = now
                self.resplits += 1
                order, i = self._order(split, epoch), 0
            self._drawn = i + 1
            yield int(order[i])
            i += 1
        self._pass, self._drawn = None, 0
