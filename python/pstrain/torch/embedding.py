"""Embedding tables whose rows live on the PS tasks.

A table is a ``torch.nn.Module`` that holds its settings
(:class:`pstrain.Table`) and, once a :class:`DistributedOptimizer` was
given it (``embeddings=[...]``), the client and its index among that
optimizer's tables.  Each forward pulls the batch's unique ids once;
``step()`` collects each table's push (:meth:`_Table._push`) before the
dense one.  Ids on a GPU get their rows (and the output) there; the rows'
gradients come back to the host through autograd.  Used from the training
thread only.
"""

from __future__ import annotations

from typing import Any, List, Optional, Tuple

import numpy as np
import torch

import pstrain
from pstrain import Error


def _keys(ids: torch.Tensor) -> np.ndarray:
    """ids (int64) as the uint64 keys the library takes (the same bits)."""
    return ids.numpy().view(np.uint64)


class _Table(torch.nn.Module):
    """What EmbeddingBag and Embedding share: the table's settings, its
    client, the rows pulled by each forward and their gradients."""

    def __init__(self, dim: int, optimizer: str = "adagrad", lr: float = 0.05, **table: Any) -> None:
        super().__init__()
        self.table = pstrain.Table(dim=int(dim), optimizer=optimizer, lr=lr, **table)
        self.dim = int(dim)
        self._client: Optional[pstrain.Client] = None
        self._index = -1
        self._pending: List[Tuple[torch.Tensor, torch.Tensor]] = []  # (unique ids, rows with grad)

    def _attach(self, client: pstrain.Client, index: int) -> None:
        self._client, self._index = client, index

    def _rows(self, ids: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
        """The batch's rows: (rows of the unique ids, each id's place in them)."""
        if self._client is None:
            raise Error(
                "this embedding table has no client yet: give it to the DistributedOptimizer "
                "(embeddings=[...]) before the first forward"
            )
        if ids.dtype != torch.int64:
            raise Error(f"embedding ids must be an int64 tensor, got {ids.dtype}: pass ids.long()")
        flat = ids.detach().reshape(-1).cpu()
        unique, place = torch.unique(flat, return_inverse=True)
        unique = unique.contiguous()
        # Ids on a GPU: the rows come to the host (pinned, so their copy to
        # the device is DMA), and autograd takes their gradients back.
        device = ids.device
        rows = torch.empty((unique.numel(), self.dim), dtype=torch.float32, pin_memory=device.type == "cuda")
        learning = self.training and torch.is_grad_enabled()
        read = self._client.pull_rows if learning else self._client.lookup_rows
        self._client.wait(read(self._index, _keys(unique), rows.numpy()))
        if learning:
            rows.requires_grad_(True)
            self._pending.append((unique, rows))
        place = place.reshape(ids.shape)
        if device.type == "cpu":
            return rows, place
        return rows.to(device, non_blocking=True), place.to(device, non_blocking=True)

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
    for evaluation and records nothing.  The table is trained by the
    :class:`DistributedOptimizer` it is given to (``embeddings=[...]``).
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
    :class:`pstrain.Table`'s; the :class:`DistributedOptimizer` it is given
    to (``embeddings=[...]``) trains it."""

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        """The rows of ``ids``, [..., dim]."""
        rows, place = self._rows(ids)
        return torch.nn.functional.embedding(place, rows)

    def extra_repr(self) -> str:
        return f"dim={self.dim}, optimizer={self.table.optimizer!r}, lr={self.table.lr}"
