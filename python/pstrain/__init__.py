"""pstrain for Python: a worker's client of pstrain's parameter servers.

The package is thin over the C++ library libpstrain-ps (the extension
``pstrain._core``):

* :func:`init` connects this task of a Slurm job (``srun --mpi=pmix`` with
  ``--ps=N --workers=M``, the classic flags, or ``TF_CONFIG``) and returns
  its :class:`Context`;
* :meth:`Context.connect` gives a worker its :class:`Client` (the chief a
  :class:`ChiefClient`): named dense tensors pushed and pulled with tickets,
  embedding rows by key, the PS tasks' counters;
* :mod:`pstrain.torch` trains PyTorch models with it.

Errors are :class:`Error` (one line naming the problem and the fix) and
:class:`PeerError`, whose ``peer`` names the task it is about.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import _core
from ._core import ChiefClient, Client, Context, Error, PeerError

__all__ = [
    "ChiefClient",
    "Client",
    "Context",
    "Error",
    "Optimizer",
    "PeerError",
    "Settings",
    "Table",
    "init",
    "shard_of_key",
]

Error.__module__ = "pstrain"
PeerError.__module__ = "pstrain"

Shape = Union[int, Tuple[int, ...]]


@dataclass
class Optimizer:
    """The dense parameters' optimizer, run on the PS tasks.

    ``name`` is ``"sgd"``, ``"momentum"``, ``"adagrad"`` or ``"adam"``; the
    other fields are used by the optimizers they name.
    """

    name: str = "sgd"
    lr: float = 0.01
    momentum: float = 0.9
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8
    adagrad_initial: float = 0.1

    def __post_init__(self) -> None:
        _check_adagrad_initial(self.name, self.adagrad_initial, "Optimizer")


def _check_adagrad_initial(optimizer: str, value: float, what: str) -> None:
    # Adagrad divides by the root of its accumulator: one that starts at 0
    # turns a zero gradient into 0/0 (TensorFlow refuses it too).
    if optimizer == "adagrad" and not value > 0:
        raise Error(
            f"{what}(adagrad_initial={value}): Adagrad's accumulators must start above 0 "
            "(a zero gradient would divide 0 by 0): pass a small positive value, e.g. 1e-8, or the default 0.1"
        )


@dataclass
class Table:
    """An embedding table whose rows live on the PS tasks.

    ``optimizer`` is the row-wise lazy optimizer (``"adagrad"``, ``"adam"``,
    ``"ftrl"``); new rows are uniform in ``[-init_range, init_range]`` from
    ``(seed, key)``; a key gets a row at its ``admit_after``-th pull, rows
    unseen for ``evict_after`` steps are dropped, and a PS holds at most
    ``max_rows`` rows of the table (0: no limit).
    """

    dim: int = 16
    optimizer: str = "adagrad"
    lr: float = 0.05
    init_range: float = 0.05
    seed: int = 1
    admit_after: int = 0
    evict_after: int = 0
    max_rows: int = 0
    l1: float = 0.0
    l2: float = 0.0
    ftrl_beta: float = 0.0
    beta1: float = 0.9
    beta2: float = 0.999
    epsilon: float = 1e-8
    adagrad_initial: float = 0.1

    def __post_init__(self) -> None:
        _check_adagrad_initial(self.optimizer, self.adagrad_initial, "Table")


@dataclass
class Settings:
    """How the PS tasks train, as the chief says it in its hello.

    ``sync``: the PS tasks aggregate ``replicas_to_aggregate`` gradients per
    step (0: every worker; fewer leaves backup workers) and apply their
    average; otherwise each gradient is applied on arrival, and with
    ``max_staleness`` N a worker more than N pushes ahead of the slowest
    live worker gets its reply once the slowest catches up (0: lock-step;
    None: no bound; each PS counts pushes, so push each PS's shard whole).
    ``elastic``: workers leave and come back: a sync job goes on without a
    lost worker other than the chief (fewer gradients per step), and a
    restarted worker takes a lost one's place.
    Every worker passes the same settings; the chief's are sent.
    """

    optimizer: Optimizer = field(default_factory=Optimizer)
    sync: bool = False
    replicas_to_aggregate: int = 0
    max_staleness: Optional[int] = None
    elastic: bool = False
    tables: List[Table] = field(default_factory=list)


def _settings_dict(settings: Optional[Settings]) -> Optional[Dict[str, Any]]:
    if settings is None:
        return None
    if not isinstance(settings, Settings):
        raise Error("settings must be a pstrain.Settings: pass pstrain.Settings(optimizer=..., sync=..., tables=[...])")
    return asdict(settings)


def _tensors(tensors: Sequence[Tuple[str, Shape]]) -> List[Tuple[str, Tuple[int, ...]]]:
    out = []
    for t in tensors:
        if not isinstance(t, (tuple, list)) or len(t) != 2:
            raise Error("tensors must be (name, shape) pairs, e.g. ('fc.weight', (10, 784))")
        name, shape = t
        out.append((str(name), (int(shape),) if isinstance(shape, int) else tuple(int(d) for d in shape)))
    return out


def _join_file(path: str, index: int, how: str) -> Tuple[str, str, str]:
    """The classic flags (ps_hosts, worker_hosts) and the step's key that join
    file ``path`` gives worker ``index``: the file ``pstrain serve``'s ps 0
    (or pstrain's chief) writes into the checkpoint directory of a running
    elastic job under PMIx.  ``how`` names the setting in errors."""
    try:
        with open(path) as f:
            lines = f.read().splitlines()
    except OSError as e:
        raise Error(
            f"{how}={path}: cannot read the join file: {e.strerror}: give the file the job's ps 0 wrote into its "
            "checkpoint directory (DIR/join), while the job runs"
        ) from None
    if len(lines) < 4 or not lines[0].startswith("# pstrain join file"):
        raise Error(f"{how}={path} is not a pstrain join file: give the job's DIR/join, written while it runs")
    ps, workers, key = lines[1].split(), lines[2].split(), lines[3].split()
    if len(ps) < 2 or ps[0] != "ps" or len(workers) != 2 or workers[0] != "workers" or len(key) != 2 or key[0] != "key":
        raise Error(f"{how}={path} is not a pstrain join file: give the job's DIR/join, written while it runs")
    try:
        count = int(workers[1])
    except ValueError:
        raise Error(
            f"{how}={path} is not a pstrain join file: give the job's DIR/join, written while it runs"
        ) from None
    if not 1 <= index < count:
        raise Error(
            f"{how}={path}: give the index of the lost worker whose place to take, 1 to {count - 1} (worker 0 is "
            "the chief: a lost chief ends the job)"
        )
    import socket

    here = socket.gethostname()
    hosts = ",".join(f"{here if w == index else 'joined'}:1" for w in range(count))
    return ",".join(ps[1:]), hosts, key[1]


def init(
    timeout: float = 60.0,
    heartbeat_interval: float = 5.0,
    ps_hosts: Optional[str] = None,
    worker_hosts: Optional[str] = None,
    job_name: Optional[str] = None,
    task_index: Optional[int] = None,
    join: Optional[str] = None,
) -> Context:
    """Finds this task's role and connects it to its peers.

    The role comes from, in order: ``srun --mpi=pmix`` with pstrain's Slurm
    plugin (``--ps=N --workers=M``), the classic arguments (``ps_hosts``,
    ``worker_hosts``, ``job_name``, ``task_index``), or ``TF_CONFIG``; a
    process started outside the job's step gives ``join`` (or
    ``$PSTRAIN_JOIN``) instead.  ``join``: the join file a
    running elastic job's ps 0 wrote into its checkpoint directory
    (``torch-train.sh``'s ``$PSTRAIN_CHECKPOINT_DIR/join``); this process
    takes the place of lost worker ``task_index`` (or
    ``$PSTRAIN_JOIN_INDEX``), authenticated with the step's key, as
    ``pstrain --join`` does for pstrain's own workers.  ``timeout``: seconds
    for every peer to appear; ``heartbeat_interval``: seconds between
    heartbeats (0: none).  Raises :class:`Error` when nothing gives a role,
    a join file or index is wrong, or a peer is missing.  Releases the GIL
    while it connects.

    A process joins its step once: later calls return the same context
    (a second bootstrap would wait for peers that never join it), and a
    later call that gives other arguments raises :class:`Error`.
    """
    import os

    global _the_context, _the_arguments
    arguments = (ps_hosts, worker_hosts, job_name, task_index, join)
    if _the_context is not None:
        if any(a is not None for a in arguments) and arguments != _the_arguments:
            raise Error(
                "pstrain.init() joined this process to its step already, with other arguments: a process joins once; "
                "call init() with the first call's arguments or none (it returns the same context)"
            )
        return _the_context

    how = "join"
    if join is None and os.environ.get("PSTRAIN_JOIN"):
        join, how = os.environ["PSTRAIN_JOIN"], "PSTRAIN_JOIN"
    if join is not None:
        if task_index is None:
            index = os.environ.get("PSTRAIN_JOIN_INDEX", "")
            if not index.isdigit():
                raise Error(
                    f"{how}={join}: give the index of the lost worker whose place to take: task_index=I, or "
                    "PSTRAIN_JOIN_INDEX=I"
                )
            task_index = int(index)
        if ps_hosts is not None or worker_hosts is not None or job_name is not None:
            raise Error(f"{how}={join} gives the job's hosts: leave out ps_hosts, worker_hosts and job_name")
        ps_hosts, worker_hosts, key = _join_file(join, task_index, how)
        job_name = "worker"
        os.environ["PSTRAIN_AUTH_KEY"] = key
        os.environ.pop("PSTRAIN_AUTH_KEY_FILE", None)
    context = _core.connect_task(timeout, heartbeat_interval, ps_hosts, worker_hosts, job_name, task_index)
    _the_context, _the_arguments = context, arguments
    return context


# init()'s context, once it has joined (and the arguments it was given).
_the_context: Optional[Context] = None
_the_arguments: Tuple[Any, ...] = ()


def _connect(
    self: Context,
    tensors: Sequence[Tuple[str, Shape]],
    settings: Optional[Settings] = None,
    timeout: float = 600.0,
    share_memory: bool = True,
    wire_precision: str = "fp32",
) -> Client:
    """A client of the PS tasks for the model's tensors, in order.

    ``tensors``: ``(name, shape)`` pairs; every worker gives the same.
    ``settings``: how the PS tasks train (the chief sends them; every
    worker passes the same).  ``timeout``: seconds after which a silent PS
    is lost.  ``wire_precision``: ``"fp32"``, or ``"bf16"``: gradients,
    values and rows travel as bfloat16, half the bytes (the PS tasks keep
    float32; every worker must say the same, ``pstrain serve`` takes the
    chief's).  The chief (worker 0) gets a :class:`ChiefClient`.
    """
    return _context_connect(self, _tensors(tensors), _settings_dict(settings), timeout, share_memory, wire_precision)


_context_connect = Context.connect
Context.connect = _connect  # type: ignore[method-assign]


def _device(self: Context) -> str:
    """The device this task computes on, for ``model.to(ctx.device)``:
    ``"cuda:0"`` for a worker that ``CUDA_VISIBLE_DEVICES`` gives a GPU
    (pstrain's Slurm plugin gives each worker its share of the GPUs Slurm
    allocated on its node, ``--gres=gpu:N``, the first of them being
    ``cuda:0`` in the process, and the ps tasks none), else ``"cpu"``.  It
    reads the environment only: whether CUDA works is the program's
    framework's to say."""
    import os

    if self.role != "worker":
        return "cpu"
    first = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if not first or first.startswith("-") or first == "NoDevFiles":
        return "cpu"
    return "cuda:0"


Context.device = property(_device)  # type: ignore[attr-defined]


def shard_of_key(key: int, num_ps: int) -> int:
    """The PS (of ``num_ps``) that holds the rows of ``key`` (a 64-bit id)."""
    return _core.shard_of_key(key & 0xFFFFFFFFFFFFFFFF, num_ps)
