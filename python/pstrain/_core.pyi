"""Type stubs of pstrain._core, the pybind11 bindings of libpstrain-ps.

Use them through the pstrain package (pstrain.Client, pstrain.init, ...).
"""

from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

import numpy as np
import numpy.typing as npt

Ticket = int

class Error(RuntimeError):
    """pstrain's errors: one line naming the problem and the fix."""

class PeerError(Error):
    """An error from or about one peer."""

    peer: str
    """The peer it is about: "ps 0 (n1)"."""

class Client:
    """A worker's client of the PS tasks.

    The client owns two exchange buffers of the flat vector of every
    tensor: values arrive in ``params``, pushes send ``grads``.  Between a
    call and the ``wait`` of its ticket, the range it names belongs to the
    library.  A client belongs to the thread that calls it.
    """

    def param(self, name: str) -> npt.NDArray[np.float32]:
        """A float32 view (no copy) of tensor ``name``'s values, with its shape."""
    def grad(self, name: str) -> npt.NDArray[np.float32]:
        """A float32 view (no copy) of tensor ``name``'s gradient, with its shape."""
    @property
    def params(self) -> npt.NDArray[np.float32]:
        """The whole flat values buffer (a view)."""
    @property
    def grads(self) -> npt.NDArray[np.float32]:
        """The whole flat gradients buffer (a view)."""
    @property
    def tensor_names(self) -> List[str]:
        """The tensors' names, in the flat vector's order."""
    def pull(self, name: Optional[str] = None) -> Ticket:
        """Starts pulling tensor ``name``'s values (None: every tensor)."""
    def push(
        self, name: Union[None, str, Sequence[str]] = None, position: int = 0, skip: bool = False, bucket: bool = False
    ) -> Ticket:
        """Starts pushing tensor ``name``'s gradient (None: every tensor; a
        list of names: those tensors, next to each other in the vector); the
        reply brings the new values.  Sync: the reply comes when the step is
        applied, or, for a bucket (a list of tensors every worker pushes
        alike, each step's buckets all pushed before any is waited for),
        when every worker's gradient of that bucket is in.
        ``skip``: the gradient has inf or NaN (a loss scaler's overflow) and
        nothing of it is applied; sync: its whole step is skipped on every PS
        (no update, the global step stays).  ``bucket``: one bucket of an
        overlapped step, whose buckets cover every tensor once; async: each
        PS applies it on arrival as the step's one optimizer update and
        counts the step (global step, staleness bound) once its buckets are
        in."""
    def wait(self, ticket: Ticket) -> None:
        """Completes a ticket; releases the GIL while it waits.  Raises PeerError."""
    def test(self, ticket: Ticket) -> bool:
        """True when the ticket has completed; never waits."""
    def step(self, position: int = 0) -> None:
        """Pushes every gradient and waits for the new values (sync: the step barrier)."""
    def pull_rows(self, table: int, keys: npt.NDArray[Any], out: npt.NDArray[np.float32]) -> Ticket:
        """Starts pulling the rows of ``keys`` (1-D uint64 or int64) of table
        ``table`` into ``out`` (C-contiguous float32, len(keys) * dim, kept
        alive until the ticket completes)."""
    def lookup_rows(self, table: int, keys: npt.NDArray[Any], out: npt.NDArray[np.float32]) -> Ticket:
        """pull_rows for evaluation: rows an update reached, zeros for the others."""
    def push_rows(self, table: int, keys: npt.NDArray[Any], grads: npt.NDArray[np.float32]) -> Ticket:
        """Starts one update of the rows of unique ``keys`` with ``grads``."""
    def stats(self) -> List[Dict[str, Any]]:
        """Each PS's step, bytes_received, bytes_sent and workers' counters."""
    @property
    def global_step(self) -> int:
        """PS 0's global step, as of the last reply."""
    def leave(self) -> None:
        """This worker's program ends before the chief ended the job: every PS
        lets it go instead of counting it lost, and a sync step from then on
        aggregates the live workers' gradients (not the chief's: it calls
        ``shutdown``).  The client cannot be used after it.  Releases the GIL."""
    @property
    def done(self) -> bool:
        """A reply said training is done."""
    @property
    def stopped(self) -> bool:
        """A reply said training stopped for preemption."""
    @property
    def restored_step(self) -> Optional[int]:
        """The snapshot step the PS tasks restored, or None."""
    @property
    def live_workers(self) -> Tuple[int, int]:
        """(alive, rank): PS 0's count of the workers it has not lost and this
        worker's rank among them, as of its last values reply."""

class ChiefClient(Client):
    """The chief's client: a Client that starts, saves and ends the job."""

    def init(self) -> Ticket:
        """Starts the PS tasks from ``params``."""
    def restore(self, step: int) -> Ticket:
        """Every PS restores its snapshot of ``step``; the values arrive in ``params``."""
    def snapshot(self, step: int) -> List[Dict[str, Any]]:
        """Asks every PS for a snapshot at ``step``: outcome ("taken", "moved_on",
        "failed"), step, bytes and checksum per PS.  Releases the GIL."""
    def shutdown(self, stop: bool = False) -> None:
        """Ends training on every PS (``stop``: for preemption).  Releases the GIL."""

class Context:
    """This task of the job (see pstrain.init)."""

    @property
    def role(self) -> str:
        """ "ps" or "worker"."""
    @property
    def task_index(self) -> int:
        """The index within the role."""
    @property
    def num_workers(self) -> int: ...
    @property
    def num_ps(self) -> int: ...
    @property
    def is_chief(self) -> bool:
        """Worker 0."""
    @property
    def name(self) -> str:
        """ "worker 1"."""
    @property
    def source(self) -> str:
        """Where the role came from."""
    @property
    def worker_names(self) -> List[str]:
        """How each worker is named in errors."""
    @property
    def device(self) -> str:
        """ "cuda:0" for a worker given a GPU (CUDA_VISIBLE_DEVICES), else "cpu"."""
    def connect(
        self,
        tensors: Sequence[Tuple[str, Any]],
        settings: Any = None,
        timeout: float = 600.0,
        share_memory: bool = True,
        wire_precision: str = "fp32",
    ) -> Client:
        """A client of the PS tasks for these (name, shape) tensors."""

def connect_task(
    timeout: float = 60.0,
    heartbeat_interval: float = 5.0,
    ps_hosts: Optional[str] = None,
    worker_hosts: Optional[str] = None,
    job_name: Optional[str] = None,
    task_index: Optional[int] = None,
) -> Context:
    """Finds this task's role and connects it (see pstrain.init)."""

def shard_of_key(key: int, num_ps: int) -> int:
    """The PS (of num_ps) that holds the rows of ``key``."""
