"""Jobs for bench/chaos: the job kinds (what is submitted, through which job
script), their submission, their output followed line by line with the time
each line was seen, and Slurm's word on how they ended.

  sync   scripts/train.sh, sbatch -N3 --ps=2 --ps-spares=1 --workers=2,
         --sync-replicas, a checkpoint every --save-checkpoint-steps
  async  the same without --sync-replicas
  torch  scripts/torch-train.sh, sbatch -N3 --ps=1 --workers=2, the CNN of
         examples/torch/cnn_fashion_mnist.py --sync, saving through the ps
         tasks every --save-every steps (the venv's torch and the package
         built into tests/python/pkg)

Every job is submitted with --requeue (as the job scripts ask, whatever the
cluster's JobRequeue) and with PSTRAIN_CHAOS_TAG in its environment, by
which its processes are found.  A job requeued (the requeue fault, or Slurm
itself) is started again as soon as it is pending (release), and its output
is followed on: the job scripts append to it.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, List, Optional, Tuple

REPO = Path(__file__).resolve().parent.parent
PSTRAIN = REPO / "trainer" / "pstrain"
STEP_RE = re.compile(r"\bstep (\d+)/(\d+)\b")
ACTIVE = ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING", "SUSPENDED", "REQUEUED", "RESIZING", "")


@dataclass
class JobKind:
    name: str
    shape: dict  # ps (counting spares), workers, nodes
    sbatch: List[str]
    script: str
    args: List[str]  # "{ckpt}": the job's checkpoint directory; "{job}": its own directory
    env: Dict[str, str] = field(default_factory=dict)
    # Fault-free runs that make its baseline: one where a run's result is a
    # function of its seed (sync: the same accuracy to the last digit), more
    # where the order of updates follows timing (async), so that the accepted
    # accuracy covers what the job reaches without any fault.
    baseline_runs: int = 1

    def command(self, ckpt: str, job: str) -> List[str]:
        return [*self.sbatch, self.script, *[a.replace("{ckpt}", ckpt).replace("{job}", job) for a in self.args]]

    def key(self) -> str:
        """What a fault-free run must share with a chaos run to be its baseline."""
        return " ".join([*self.sbatch, Path(self.script).name, *self.args])


def torch_python() -> Optional[str]:
    py = REPO / ".venv" / "bin" / "python3"
    pkg = REPO / "tests" / "python" / "pkg" / "pstrain"
    if not py.exists() or not list(pkg.glob("_core*.so")):
        return None
    r = subprocess.run([str(py), "-c", "import torch"], capture_output=True)
    return str(py) if r.returncode == 0 else None


def job_kinds(opts) -> Dict[str, JobKind]:
    common = ["--device", "cpu", "--seed", "11", "--optimizer", "adam", "--learning-rate", "0.001"]
    ps_job = ["-N3", "--ps=2", "--ps-spares=1", "--workers=2"]
    # The metrics and TensorBoard files beside the checkpoint directory, not
    # in it: a filesystem with a file open for writing cannot be remounted
    # read-only (the readonly fault).
    ckpt = [
        "--checkpoint-dir",
        "{ckpt}",
        "--save-checkpoint-steps",
        str(opts.checkpoint_steps),
        "--metrics-file",
        "{job}/metrics.jsonl",
        "--tensorboard-dir",
        "{job}/events",
    ]
    stall = ["--stall-timeout", str(opts.stall_timeout)]
    env = {"PSTRAIN": str(PSTRAIN)}
    kinds = {
        "sync": JobKind(
            "sync",
            {"ps": 3, "workers": 2, "nodes": 3},
            ps_job,
            str(REPO / "scripts" / "train.sh"),
            [
                *common,
                "--sync-replicas",
                "--train-steps",
                str(opts.sync_steps),
                "--log-every",
                str(opts.log_every),
                *ckpt,
                *stall,
            ],
            env,
        ),
        "async": JobKind(
            "async",
            {"ps": 3, "workers": 2, "nodes": 3},
            ps_job,
            str(REPO / "scripts" / "train.sh"),
            [*common, "--train-steps", str(opts.async_steps), "--log-every", str(opts.log_every), *ckpt, *stall],
            env,
            opts.async_baselines,
        ),
    }
    py = torch_python()
    if py:
        kinds["torch"] = JobKind(
            "torch",
            {"ps": 1, "workers": 2, "nodes": 3},
            ["-N3", "--ps=1", "--workers=2"],
            str(REPO / "scripts" / "torch-train.sh"),
            [
                "--threads",
                "1",
                "--checkpoint-dir",
                "{ckpt}",
                *stall,
                py,
                str(REPO / "examples" / "torch" / "cnn_fashion_mnist.py"),
                "--sync",
                "--steps",
                str(opts.torch_steps),
                "--optimizer",
                "adagrad",
                "--lr",
                "0.05",
                "--batch-size",
                "64",
                "--log-every",
                "100",
                "--save-every",
                str(opts.torch_save_every),
                "--seed",
                "1",
            ],
            {
                "PSTRAIN_BIN": str(PSTRAIN),
                "PSTRAIN_RUN": str(REPO / "launcher" / "pstrain-run"),
                "PYTHONPATH": str(REPO / "tests" / "python" / "pkg"),
            },
        )
    return kinds


class Follower:
    """A job's output file, read as it grows: (monotonic time, line) pairs,
    and a copy with the seconds since submission in front of each line."""

    def __init__(self, path: Path, t0: float):
        self.path, self.t0 = path, t0
        self.offset, self.partial = 0, b""
        self.lines: List[Tuple[float, str]] = []
        self.clock = time.time() - time.monotonic()  # wall clock less monotonic
        self.stamped = open(path.with_suffix(".ts.log"), "w")

    def poll(self) -> List[Tuple[float, str]]:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        self.offset += len(data)
        now = time.monotonic()
        *complete, self.partial = (self.partial + data).split(b"\n")
        new = [self.stamp(now, raw.decode(errors="replace")) for raw in complete]
        for t, line in new:
            self.stamped.write(f"{t - self.t0:8.2f} {line}\n")
        self.stamped.flush()
        self.lines.extend(new)
        return new

    def stamp(self, now: float, line: str) -> Tuple[float, str]:
        """A pstrain log line in JSON (PSTRAIN_LOG_FORMAT=json) as its text
        form, at the time the task wrote it; any other line at the time it
        was read (a line of a task on a node cut off reaches the file only
        when its link is back)."""
        if not line.startswith('{"time":'):
            return now, line
        try:
            d = json.loads(line)
            wall = datetime.strptime(d["time"], "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=timezone.utc).timestamp()
        except (ValueError, KeyError):
            return now, line
        level = {"error": "error: ", "warn": "warning: "}.get(d.get("level"), "")
        return min(now, wall - self.clock), f"{d.get('task', '?')}: {level}{d.get('message', '')}"

    def close(self) -> None:
        if self.partial:
            t = time.monotonic()
            line = self.partial.decode(errors="replace")
            self.lines.append((t, line))
            self.stamped.write(f"{t - self.t0:8.2f} {line}\n")
            self.partial = b""
        self.stamped.close()


def submit(kind: JobKind, jobdir: Path, tag: str) -> str:
    jobdir.mkdir(parents=True, exist_ok=True)
    env = dict(
        os.environ,
        PSTRAIN_CHAOS_TAG=tag,
        PSTRAIN_SRUN=str(REPO / "scripts" / "pstrain-srun"),
        OMP_NUM_THREADS="1",
        **kind.env,
    )
    # Each pstrain log line with the time its task wrote it (Follower.stamp).
    env["PSTRAIN_LOG_FORMAT"] = "json"
    cmd = [
        "sbatch",
        "--parsable",
        "--requeue",
        f"--job-name=chaos-{kind.name}",
        "-o",
        str(jobdir / "job.out"),
        f"--chdir={jobdir}",
        *kind.command(str(jobdir / "ckpt"), str(jobdir)),
    ]
    (jobdir / "command").write_text(" ".join(cmd) + "\n")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=60)
    if r.returncode != 0:
        raise RuntimeError(f"sbatch failed (exit {r.returncode}): {r.stderr.strip()}")
    return r.stdout.strip().split(";")[0]


def job_state(jobid: str) -> Tuple[str, str, str]:
    """(state, exit code, where it came from): sacct when accounting is on,
    else scontrol show job (the local cluster keeps no accounting; a finished
    job stays in the controller for MinJobAge, 600 s)."""
    r = subprocess.run(
        ["sacct", "-n", "-X", "-P", "-j", jobid, "-o", "State,ExitCode"], capture_output=True, text=True, timeout=30
    )
    if r.returncode == 0 and r.stdout.strip():
        state, _, code = r.stdout.strip().splitlines()[0].partition("|")
        return state.split()[0], code, "sacct"
    r = subprocess.run(["scontrol", "show", "job", jobid], capture_output=True, text=True, timeout=30)
    state = re.search(r"JobState=(\S+)", r.stdout)
    code = re.search(r"\bExitCode=(\S+)", r.stdout)
    return (state.group(1) if state else ""), (code.group(1) if code else ""), "scontrol"


def pending_restart(jobid: str) -> int:
    """The job's restart count while it is pending after a requeue, else 0."""
    r = subprocess.run(["scontrol", "show", "job", jobid], capture_output=True, text=True, timeout=30)
    state = re.search(r"JobState=(\S+)", r.stdout)
    restarts = re.search(r"\bRestarts=(\d+)", r.stdout)
    if not state or state.group(1) != "PENDING" or not restarts:
        return 0
    return int(restarts.group(1))


def release(jobid: str) -> None:
    """Starts a requeued job now, not after Slurm's requeue delay (BeginTime)."""
    subprocess.run(["scontrol", "update", f"JobId={jobid}", "StartTime=now"], capture_output=True, timeout=30)


def done_line(lines: List[Tuple[float, str]]) -> Optional[dict]:
    """The chief's last {"event":"done"} line (pstrain's, or a torch program's)."""
    for _, line in reversed(lines):
        s = line.strip()
        if s.startswith("{") and '"done"' in s:
            try:
                d = json.loads(s)
            except ValueError:
                continue
            if d.get("event") == "done":
                return d
    return None


def cancel(jobid: str) -> None:
    subprocess.run(["scancel", jobid], capture_output=True, timeout=30)
