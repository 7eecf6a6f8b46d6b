"""The tests' LocalCluster: PS tasks in threads of the test process over the
library's loopback transport (no Slurm, no UCX), and LocalContext, a worker
of it shaped as a :class:`pstrain.Context` for
:class:`pstrain.torch.DistributedOptimizer`.

A test harness, not part of the pstrain package: tests/python/run-python-tests
builds its extension (``_local_cluster``, tests/python/local_cluster.cpp)
against the build tree beside ``pstrain._core`` and puts both, with this
file, in tests/python/pkg; nothing installs them.
"""

from __future__ import annotations

from typing import Any, Dict, Optional, Sequence, Tuple

import _local_cluster

from pstrain import Client, Error, Settings, Shape, _settings_dict, _tensors

__all__ = ["LocalCluster", "LocalContext"]


class LocalContext:
    """Worker ``task_index`` of a :class:`LocalCluster`, shaped as a :class:`Context`."""

    def __init__(self, cluster: "LocalCluster", task_index: int) -> None:
        self.cluster = cluster
        self.role = "worker"
        self.task_index = task_index
        self.num_workers = cluster.num_workers
        self.num_ps = cluster.num_ps
        self.is_chief = task_index == 0
        self.name = f"worker {task_index}"
        self.source = "LocalCluster"
        self.worker_names = [f"worker {w}" for w in range(cluster.num_workers)]

    def connect(
        self,
        tensors: Sequence[Tuple[str, Shape]],
        settings: Optional[Settings] = None,
        timeout: float = 60.0,
        share_memory: bool = True,
        wire_precision: Optional[str] = None,
    ) -> Client:
        """A client for this worker (see :meth:`LocalCluster.connect`)."""
        return self.cluster.connect(self.task_index, tensors, settings, timeout, share_memory, wire_precision)


class LocalCluster:
    """PS tasks in threads of this process, over the library's loopback.

    ``settings=None``: the servers take the settings from the chief's
    hello; otherwise they start with these (and the chief's must agree).
    Use it as a context manager: leaving it ends the servers.  Clients it
    made stay valid objects, but talk to nothing once it is closed.
    """

    def __init__(
        self,
        num_ps: int = 1,
        num_workers: int = 1,
        settings: Optional[Settings] = None,
        share_memory: bool = True,
        wire_precision: str = "fp32",
    ) -> None:
        self.num_ps = num_ps
        self.num_workers = num_workers
        self._core = _local_cluster.LocalCluster(
            num_ps, num_workers, _settings_dict(settings), share_memory, wire_precision
        )

    def connect(
        self,
        index: int,
        tensors: Sequence[Tuple[str, Shape]],
        settings: Optional[Settings] = None,
        timeout: float = 60.0,
        share_memory: bool = True,
        wire_precision: Optional[str] = None,
    ) -> Client:
        """A client for worker ``index`` (0 is the chief: a :class:`ChiefClient`);
        ``wire_precision``: the servers' (the cluster's) unless given."""
        return self._core.connect(
            index, _tensors(tensors), _settings_dict(settings), timeout, share_memory, wire_precision
        )

    def context(self, index: int) -> LocalContext:
        """Worker ``index``'s context, for :class:`pstrain.torch.DistributedOptimizer`."""
        if not 0 <= index < self.num_workers:
            raise Error(
                f"worker {index} is not in this LocalCluster of {self.num_workers} workers: use 0..{self.num_workers - 1}"
            )
        return LocalContext(self, index)

    def server_stats(self, index: int) -> Dict[str, Any]:
        """PS ``index``'s global step, stale gradients, rows pulled and pushed, and its error ('' if none)."""
        return self._core.server_stats(index)

    def kill_ps(self, index: int) -> None:
        """PS ``index`` dies: its workers see it fail."""
        self._core.kill_ps(index)

    def kill_worker(self, index: int) -> None:
        """Worker ``index`` dies: the PS tasks see it fail."""
        self._core.kill_worker(index)

    def close(self) -> None:
        """Ends the servers and waits for their threads."""
        self._core.close()

    def __enter__(self) -> "LocalCluster":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
