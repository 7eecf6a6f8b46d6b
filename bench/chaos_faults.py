"""Faults for bench/chaos: what is drawn from the seed, how a task of a job is
found, and how each fault is done and undone.

A job's plan is drawn before the job starts, from the run's random.Random
alone, so the same seed draws the same plans in the same order whatever the
timing: events at a fraction of the job's fault-free training time after its
first progress line, each of one fault or, sometimes, two at once.  A fault
names its target as the job sees it (ps 1, worker 1, the chief, node n2), and
the process behind it is looked up when the fault fires: every process of a
chaos job carries PSTRAIN_CHAOS_TAG in its environment (sbatch passes the
submitting environment on), and each task its PSTRAIN_ROLE and
PSTRAIN_TASK_INDEX (the SPANK plugin's, spank-pstrain(8)).

Kinds: kill (SIGKILL of a ps task, a worker or the chief), stop (SIGSTOP for
5-90 s, then SIGCONT), link (a node's link down for 5-60 s, and at most half
the cluster's SlurmdTimeout, pstrain-cluster link), shape (5% loss and 2 ms delay on every link for 30 s, pstrain-cluster
shape), full (the job's checkpoint directory, a tmpfs of its own, filled to
the last byte for 10-60 s), readonly (that tmpfs remounted read-only for
10-60 s), slurmctld (the controller restarted: pstrain-cluster restart),
slurmd (one node's slurmd restarted), requeue (scontrol requeue of the
running job: Slurm sends SIGTERM to its tasks, the chief checkpoints, and the
job comes back; bench/chaos starts it again as soon as it is pending instead
of after Slurm's two-minute requeue delay, and checks that it resumes from
the newest complete checkpoint).  The kinds added last come last, so that a
run limited to the kinds before them (--faults) draws what it drew before
they were added.
"""

from __future__ import annotations

import errno
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

KINDS = ("kill", "stop", "link", "shape", "full", "readonly", "slurmctld", "slurmd", "requeue")
# The checkpoint directory's faults: they take no task down.
DISK_KINDS = ("full", "readonly")
# Slurm's daemons restarted: a running job must not notice.
DAEMON_KINDS = ("slurmctld", "slurmd")
# Faults of the whole job or of one shared thing: never two of a kind at once.
ONE_AT_A_TIME = ("link", "shape", *DISK_KINDS, *DAEMON_KINDS, "requeue")
ROLES = ("ps", "worker", "chief")
# The processes that are a task's work (the trainer, pstrain serve, a user's
# Python program), before their launchers (pstrain-run, bash, srun).
WORK_COMMS = ("pstrain", "python")


@dataclass
class Task:
    pid: int
    role: str
    index: int
    node: str
    comm: str


@dataclass
class Fault:
    kind: str
    role: Optional[str] = None  # ps or worker (the chief is worker 0)
    index: Optional[int] = None
    node: Optional[str] = None  # link
    duration: float = 0.0  # stop, link, shape: seconds until undone
    # Set when it fires.
    fired: Optional[float] = None  # time.monotonic()
    wall: str = ""
    target: str = ""
    pid: Optional[int] = None
    # (role, index) of every task it may take down: the one killed or
    # stopped, or every task on the node whose link went down.
    tasks: Set[Tuple[str, int]] = field(default_factory=set)
    skipped: str = ""
    undone: Optional[float] = None
    # requeue: when the job was pending again and started at once, and the
    # newest complete checkpoint then (None: there was none).
    restarted: Optional[float] = None
    newest: Optional[int] = None
    # Decided after the job.
    outcome: str = ""
    seconds: Optional[float] = None
    seconds_to: str = ""
    note: str = ""

    def describe(self) -> str:
        if self.kind in ("kill", "stop"):
            who = "the chief (worker 0)" if (self.role, self.index) == ("worker", 0) else f"{self.role} {self.index}"
            return who if self.kind == "kill" else f"{who} for {self.duration:.0f} s"
        if self.kind == "link":
            return f"{self.node} for {self.duration:.0f} s"
        if self.kind == "full":
            return f"checkpoint directory full for {self.duration:.0f} s"
        if self.kind == "readonly":
            return f"checkpoint directory read-only for {self.duration:.0f} s"
        if self.kind == "slurmctld":
            return "slurmctld restarted"
        if self.kind == "slurmd":
            return f"slurmd of {self.node} restarted"
        if self.kind == "requeue":
            return "the job requeued"
        return f"5% loss, 2 ms delay, every link, {self.duration:.0f} s"


@dataclass
class Event:
    at: float  # fraction of the job's fault-free training time after its first step line
    faults: List[Fault]


def draw_fault(rng, shape: dict, exclude: Tuple[str, ...] = ()) -> Fault:
    """One fault for a job of shape {"ps": tasks counting spares, "workers": W, "nodes": N}."""
    kind = rng.choice([k for k in KINDS if k not in exclude])
    if kind in ("kill", "stop"):
        role = rng.choice(ROLES)
        if role == "chief":
            role, index = "worker", 0
        elif role == "ps":
            index = rng.randrange(shape["ps"])
        else:
            index = rng.randrange(1, shape["workers"]) if shape["workers"] > 1 else 0
        duration = rng.uniform(5, 90) if kind == "stop" else 0.0
        return Fault(kind, role=role, index=index, duration=round(duration, 1))
    if kind == "link":
        # Shorter than half the cluster's SlurmdTimeout: a node away for
        # longer is one Slurm sets DOWN (NODE_FAIL), another fault.
        longest = min(60.0, shape.get("slurmd_timeout", 300) / 2)
        return Fault(kind, node=f"n{rng.randrange(1, shape['nodes'] + 1)}", duration=round(rng.uniform(5, longest), 1))
    if kind in DISK_KINDS:
        return Fault(kind, duration=round(rng.uniform(10, 60), 1))
    if kind in ("slurmctld", "requeue"):
        return Fault(kind)
    if kind == "slurmd":
        return Fault(kind, node=f"n{rng.randrange(1, shape['nodes'] + 1)}")
    return Fault("shape", duration=30.0)


def draw_plan(rng, shape: dict, kinds_allowed: Tuple[str, ...] = KINDS) -> List[Event]:
    """One or two events; an event is two faults at once one time in four."""
    exclude = tuple(k for k in KINDS if k not in kinds_allowed)
    events = []
    for _ in range(rng.choice((1, 1, 2))):
        at = round(rng.uniform(0.1, 0.75), 3)
        first = draw_fault(rng, shape, exclude)
        faults = [first]
        if rng.random() < 0.25:
            # Not the same network or disk fault twice at once (one shaper,
            # one cable, one filesystem).
            again = exclude + ((first.kind,) if first.kind in ONE_AT_A_TIME else ())
            if any(k not in again for k in KINDS):
                faults.append(draw_fault(rng, shape, again))
        events.append(Event(at, faults))
    return sorted(events, key=lambda e: e.at)


def job_processes(tag: str) -> List[Tuple[int, str, Dict[str, str]]]:
    """(pid, comm, environment) of every process carrying PSTRAIN_CHAOS_TAG=tag."""
    needle = f"PSTRAIN_CHAOS_TAG={tag}".encode()
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            raw = Path(f"/proc/{name}/environ").read_bytes()
            if needle not in raw.split(b"\0"):
                continue
            comm = Path(f"/proc/{name}/comm").read_text().strip()
            state = Path(f"/proc/{name}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state == "Z":
            continue
        env = {}
        for item in raw.split(b"\0"):
            k, _, v = item.partition(b"=")
            if k.startswith((b"PSTRAIN_", b"SLURM")):
                env[k.decode(errors="replace")] = v.decode(errors="replace")
        found.append((int(name), comm, env))
    return found


def job_tasks(tag: str) -> List[Task]:
    """The work process of each task of the job (one per role and index)."""
    best: Dict[Tuple[str, int], Task] = {}
    for pid, comm, env in job_processes(tag):
        role, index = env.get("PSTRAIN_ROLE"), env.get("PSTRAIN_TASK_INDEX")
        if not role or index is None or not index.isdigit() or not comm.startswith(WORK_COMMS):
            continue
        if comm.startswith("pstrain-"):  # pstrain-run: the launcher, not the work
            continue
        key = (role, int(index))
        task = Task(pid, role, int(index), env.get("SLURMD_NODENAME", "?"), comm)
        # Of a process and its children with the same environment, the newest.
        if key not in best or pid > best[key].pid:
            best[key] = task
    return sorted(best.values(), key=lambda t: (t.role, t.index))


class Injector:
    """Does and undoes faults on one cluster; remembers what is to be undone."""

    def __init__(self, cluster_script: str, cluster_dir: str, log):
        self.cluster_script = cluster_script
        self.cluster_dir = cluster_dir
        self.log = log
        self.pending: List[Tuple[float, Fault]] = []  # (when, fault) to undo
        self.ckpt: Optional[Path] = None  # the current job's checkpoint directory (a tmpfs)
        self.jobid: Optional[str] = None  # the current job's
        self.fill_left = False  # a full fault's file that could not go while read-only

    def cluster(self, *args: str) -> str:
        cmd = [self.cluster_script, *args, "--dir", self.cluster_dir]
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        if r.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)}: exit {r.returncode}: {r.stderr.strip()}")
        return r.stderr.strip()

    def busy(self, fault: Fault) -> bool:
        """A fault of the same kind on the same thing is still in force."""
        return any(
            p.kind == fault.kind
            and (p.kind == "shape" or (p.node, p.role, p.index) == (fault.node, fault.role, fault.index))
            for _, p in self.pending
        )

    def fire(self, fault: Fault, tag: str) -> None:
        fault.fired = time.monotonic()
        fault.wall = time.strftime("%H:%M:%S")
        if self.busy(fault):
            fault.target, fault.skipped = fault.describe(), "the same fault is still in force"
            return
        tasks = job_tasks(tag)
        if fault.kind in ("kill", "stop"):
            task = next((t for t in tasks if (t.role, t.index) == (fault.role, fault.index)), None)
            fault.target = fault.describe()
            if task is None:
                fault.skipped = f"no process of {fault.role} {fault.index} left"
                return
            fault.pid, fault.tasks = task.pid, {(task.role, task.index)}
            fault.target += f" (pid {task.pid} {task.comm}, {task.node})"
            try:
                os.kill(task.pid, signal.SIGKILL if fault.kind == "kill" else signal.SIGSTOP)
            except ProcessLookupError:
                fault.skipped = f"pid {task.pid} of {fault.role} {fault.index} was gone"
                return
        elif fault.kind in DISK_KINDS:
            fault.target = f"{fault.describe()} ({self.ckpt})"
            if self.ckpt is None:
                fault.skipped = "the job has no checkpoint directory of its own"
                return
            if fault.kind == "full":
                fill(self.ckpt / ".chaos-fill")
            else:
                remount(self.ckpt, "ro")
        elif fault.kind in DAEMON_KINDS:
            fault.target = fault.describe()
            self.cluster("restart", "slurmctld" if fault.kind == "slurmctld" else fault.node)
        elif fault.kind == "requeue":
            # Every task goes: a line of any of them may name another as lost.
            fault.tasks = {(t.role, t.index) for t in tasks}
            fault.target = f"job {self.jobid} requeued ({len(tasks)} tasks)"
            r = subprocess.run(["scontrol", "requeue", str(self.jobid)], capture_output=True, text=True, timeout=60)
            if r.returncode != 0:
                fault.skipped = f"scontrol requeue {self.jobid}: {r.stderr.strip()}"
        elif fault.kind == "link":
            on_node = [t for t in tasks if t.node == fault.node]
            fault.tasks = {(t.role, t.index) for t in on_node}
            names = ", ".join(f"{t.role} {t.index}" for t in on_node) or "no task"
            fault.target = f"{fault.describe()} ({names})"
            self.cluster("link", fault.node, "down")
        else:
            fault.target = fault.describe()
            self.cluster("shape", "--delay", "2ms", "--loss", "5%")
        if fault.duration:
            self.pending.append((fault.fired + fault.duration, fault))

    def undo(self, fault: Fault) -> None:
        fault.undone = time.monotonic()
        try:
            if fault.kind == "stop" and fault.pid:
                try:
                    os.kill(fault.pid, signal.SIGCONT)
                except ProcessLookupError:
                    pass
            elif fault.kind == "link":
                self.cluster("link", fault.node, "up")
            elif fault.kind == "full" and self.ckpt is not None:
                try:
                    (self.ckpt / ".chaos-fill").unlink(missing_ok=True)
                except OSError as e:  # read-only meanwhile: removed when it is writable again
                    if e.errno != errno.EROFS:
                        raise
                    self.fill_left = True
            elif fault.kind == "readonly" and self.ckpt is not None:
                remount(self.ckpt, "rw")
                if self.fill_left:
                    (self.ckpt / ".chaos-fill").unlink(missing_ok=True)
                    self.fill_left = False
            elif fault.kind == "shape":
                self.cluster("shape")
        except Exception as e:  # keep undoing the others
            self.log(f"chaos: undoing {fault.kind} {fault.target}: {e}")

    def undo_due(self, now: float) -> None:
        due = [p for p in self.pending if p[0] <= now]
        self.pending = [p for p in self.pending if p[0] > now]
        for _, fault in due:
            self.undo(fault)

    def undo_all(self) -> None:
        pending, self.pending = self.pending, []
        for _, fault in pending:
            self.undo(fault)


def fill(path: Path) -> None:
    """Writes path until its filesystem has no byte left (ENOSPC)."""
    chunk = b"\0" * (1 << 20)
    with open(path, "wb", buffering=0) as f:
        while True:
            try:
                f.write(chunk)
            except OSError as e:
                if e.errno != errno.ENOSPC:
                    raise
                if len(chunk) == 1:
                    return
                chunk = chunk[: len(chunk) // 2]


def remount(mountpoint: Path, how: str) -> None:
    """mount -o remount,ro|rw; read-only is refused (EBUSY) while a file is
    open for writing there (a checkpoint being written): tried again for 10 s."""
    deadline = time.monotonic() + 10
    while True:
        r = subprocess.run(["mount", "-o", f"remount,{how}", str(mountpoint)], capture_output=True, text=True)
        if r.returncode == 0:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"mount -o remount,{how} {mountpoint}: {r.stderr.strip()}")
        time.sleep(0.2)
