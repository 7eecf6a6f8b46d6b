"""bench/chaos: pstrain jobs under random faults on a --netns cluster, and
invariants checked after every job (issue 50).

  bench/chaos [--minutes M] [--seed S] [--dir DIR] [--kinds sync,async,torch]
              [--baselines FILE] [--cluster-dir DIR] ...

First fault-free runs of each job kind (their test accuracies and the first
one's times are the baseline: one run of a sync job, whose accuracy is a
function of its seed, --async-baselines of an async one, whose update order
follows timing; --baselines FILE reuses and extends those of an earlier run
with the same job flags), then jobs of each kind in turn for M minutes, each with faults
drawn from the seed (chaos_faults.py), then the checks (chaos_checks.py).
Each job checkpoints into DIR/NN-KIND/ckpt, a tmpfs of its own (512 MB,
mounted under the cluster's CLUSTER_DIR/shared, which every node sees, and
unmounted after the job: the full and readonly faults act on it), and the
newest complete checkpoint of a pstrain job is resumed by a standalone
process for 20 steps (DIR/NN-KIND/resume.txt).  One line per fault, a
table by fault kind, exit status 0 when no invariant failed, 1 otherwise.  Every job's output (and a copy with the seconds since
submission in front of each line) is kept under DIR/NN-KIND/.

Needs a built tree and a cluster started with
  scripts/pstrain-cluster start --netns --dir DIR --port P
(SLURM_CONF exported, else --cluster-dir names it).  Run as root (the
faults signal the jobs' processes and set links down).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import List, Optional

sys.path.insert(0, str(Path(__file__).resolve().parent))

from chaos_checks import (  # noqa: E402
    OUTCOMES,
    decide,
    inspect_checkpoints,
    left_behind,
    memory_growth,
    newest_step,
    nodes_not_idle,
    rss_kb,
)
from chaos_faults import KINDS, Event, Injector, draw_plan, job_processes, job_tasks  # noqa: E402
from chaos_jobs import (  # noqa: E402
    ACTIVE,
    PSTRAIN,
    REPO,
    STEP_RE,
    Follower,
    cancel,
    done_line,
    job_kinds,
    job_state,
    pending_restart,
    release,
    submit,
)

# Seconds a requeue adds to a job's bound: its tasks checkpoint and exit,
# Slurm requeues it, and it starts and bootstraps again.
REQUEUE_SECONDS = 90


def say(*parts) -> None:
    print(*parts, flush=True)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=10, help="chaos time, after the baselines (default 10)")
    p.add_argument("--seed", type=int, default=None, help="draws every fault (default: from the clock, printed)")
    p.add_argument("--dir", default=None, help="logs of every job (default: a new temporary directory)")
    p.add_argument("--kinds", default=None, help="job kinds in turn (default: sync,async,torch where torch is there)")
    p.add_argument("--faults", default=",".join(KINDS), help="fault kinds to draw from (default: all)")
    p.add_argument("--baselines", default=None, help="JSON of fault-free runs to reuse and extend")
    p.add_argument("--cluster-dir", default=None, help="the cluster's state directory (default: from SLURM_CONF)")
    p.add_argument("--sync-steps", type=int, default=30000)
    p.add_argument("--async-steps", type=int, default=30000)
    p.add_argument("--torch-steps", type=int, default=3000)
    p.add_argument("--torch-save-every", type=int, default=250)
    p.add_argument("--checkpoint-steps", type=int, default=1000)
    p.add_argument("--log-every", type=int, default=500)
    p.add_argument("--stall-timeout", type=int, default=60)
    p.add_argument("--tolerance", type=float, default=0.01, help="test accuracy against the baseline's")
    p.add_argument(
        "--async-baselines",
        type=int,
        default=5,
        help="fault-free async runs whose accuracies, spread by timing, make its baseline (default 5)",
    )
    p.add_argument(
        "--slack",
        type=float,
        default=150,
        help="seconds a job may take beyond 1.5 x its baseline and its faults' durations before it counts as hung",
    )
    p.add_argument("--plan-only", action="store_true", help="print the jobs and faults the seed draws, run nothing")
    return p.parse_args(argv)


class Run:
    def __init__(self, opts):
        self.opts = opts
        self.dir = Path(opts.dir or tempfile.mkdtemp(prefix="pstrain-chaos."))
        self.dir.mkdir(parents=True, exist_ok=True)
        self.kinds = job_kinds(opts)
        wanted = opts.kinds.split(",") if opts.kinds else ["sync", "async", "torch"]
        missing = [k for k in wanted if k not in self.kinds]
        if opts.kinds and missing:
            sys.exit(
                f"chaos: job kind {','.join(missing)} is not available (torch needs .venv with torch and "
                f"tests/python/pkg built): choose from {','.join(self.kinds)}"
            )
        self.order = [k for k in wanted if k in self.kinds]
        self.fault_kinds = tuple(k for k in opts.faults.split(",") if k)
        self.rng = random.Random(opts.seed)
        self.jobs: List[dict] = []
        self.count = 0
        self.baselines_file = Path(opts.baselines) if opts.baselines else self.dir / "baselines.json"
        self.baselines = json.loads(self.baselines_file.read_text()) if self.baselines_file.exists() else {}
        self.injector: Optional[Injector] = None
        self.current: Optional[str] = None
        self.shared = self.dir / "mnt"

    # ------------------------------------------------------------ one job
    def run_job(self, kind_name: str, events: List[Event], baseline: Optional[dict]) -> dict:
        kind = self.kinds[kind_name]
        self.count += 1
        jobdir = self.dir / f"{self.count:02d}-{kind_name}{'' if events else '-fault-free'}"
        tag = f"chaos{os.getpid()}x{self.count}"
        ckpt = jobdir / "ckpt"
        # The checkpoint directory on a filesystem of its own, which the
        # full and readonly faults fill and remount: a tmpfs mounted under
        # the cluster's DIR/shared, which every node of a --netns cluster
        # sees (pstrain-cluster(1)); DIR/NN-KIND/ckpt names it.
        jobdir.mkdir(parents=True, exist_ok=True)
        mnt = self.shared / f"chaos-{tag}"
        mnt.mkdir(parents=True, exist_ok=True)
        mounted = (
            subprocess.run(["mount", "-t", "tmpfs", "-o", "size=512m,mode=0700", "tmpfs", str(mnt)]).returncode == 0
        )
        ckpt.unlink(missing_ok=True)
        ckpt.symlink_to(mnt)
        self.injector.ckpt, self.injector.fill_left = (mnt if mounted else None), False
        t0 = time.monotonic()
        jobid = submit(kind, jobdir, tag)
        self.current = self.injector.jobid = jobid
        faults = [f for e in events for f in e.faults]
        base_total = baseline["seconds"] if baseline else None
        # A requeue: the tasks' checkpoint and exit, the job's start again.
        requeues = REQUEUE_SECONDS * sum(1 for f in faults if f.kind == "requeue")
        bound = (
            (1.5 * base_total + sum(f.duration for f in faults) + requeues + self.opts.slack) if base_total else 900.0
        )
        say(
            f"{time.strftime('%H:%M:%S')} job {jobid} {kind_name}{' (fault-free)' if not events else ''}: "
            f"{len(faults)} fault(s) planned, bound {bound:.0f} s, log {jobdir}/job.out"
        )
        follower = Follower(jobdir / "job.out", t0)
        first_step, due, state, code, src = None, [], "", "", ""
        hung, next_state, job_state_at_bound = False, 0.0, ""
        restarts: List[dict] = []  # each time the job was requeued and started again
        # The PS processes' resident memory, every 2 s from the first step.
        rss, who, next_rss = {}, {}, 0.0
        while True:
            now = time.monotonic()
            if first_step is not None and now >= next_rss:
                next_rss = now + 2.0
                for task in job_tasks(tag):
                    if task.role == "ps" and (kb := rss_kb(task.pid)) is not None:
                        rss.setdefault(task.pid, []).append((now, kb))
                        who[task.pid] = f"ps {task.index} ({task.node}, pid {task.pid})"
            for t, line in follower.poll():
                if first_step is None and STEP_RE.search(line):
                    first_step = t
                    due = [(t + e.at * baseline["train_seconds"], e) for e in events] if baseline else []
            for when, e in [d for d in due if d[0] <= now]:
                due.remove((when, e))
                for f in e.faults:
                    try:
                        self.injector.fire(f, tag)
                    except Exception as err:
                        f.skipped = f"could not inject: {err}"
                    say(f"  {f.wall} fired {f.kind} {f.target}{(': skipped, ' + f.skipped) if f.skipped else ''}")
            self.injector.undo_due(now)
            if now >= next_state:
                state, code, src = job_state(jobid)
                next_state = now + 1.0
                if state not in ACTIVE:
                    break
                if state == "PENDING" and (count := pending_restart(jobid)) > len(restarts):
                    self.restarted(jobid, count, now, ckpt, faults, restarts)
            if now - t0 > bound:
                hung = True
                job_state_at_bound = state or "running"
                say(f"  job {jobid} still {state} after {bound:.0f} s: hung; cancelling it")
                cancel(jobid)
                for _ in range(60):
                    time.sleep(1)
                    state, code, src = job_state(jobid)
                    if state not in ACTIVE:
                        break
                break
            time.sleep(0.2)
        end = time.monotonic()
        self.injector.undo_all()
        self.current = None
        time.sleep(1.0)
        follower.poll()
        follower.close()
        for e in [d[1] for d in due]:  # the job ended first
            for f in e.faults:
                f.skipped = f.skipped or "the job had ended"
        job = {
            "id": jobid,
            "kind": kind_name,
            "dir": str(jobdir),
            "lines": follower.lines,
            "end": end,
            "start": t0,
            "first_step": first_step,
            "state": state,
            "exit": code,
            "state_from": src,
            "hung": hung,
            "bound": bound,
            "state_at_bound": job_state_at_bound,
            "done": done_line(follower.lines),
            "faults": faults,
            "restarts": restarts,
        }
        # What is left on the machine.
        for pid, _, _ in job_processes(tag):  # a task still stopped must be able to end
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
        extra = []
        left = left_behind(tag)
        if left:
            extra.append("processes left behind: " + "; ".join(left))
            for pid, _, _ in job_processes(tag):
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        job["ckpt_lost"] = False
        if ckpt.is_dir():
            problems, listing = inspect_checkpoints(str(ckpt))
            (jobdir / "inspect.txt").write_text(listing)
            if problems:
                job["ckpt_lost"] = True
                extra.extend(problems)
            elif kind.script.endswith("/train.sh"):
                problem = resume_check(ckpt, jobdir, listing)
                if problem:
                    job["ckpt_lost"] = True
                    extra.append(problem)
        if mounted:
            subprocess.run(["umount", "-l", str(mnt)])
        self.injector.ckpt = None
        extra.extend(nodes_not_idle())
        grew, job["ps_memory"] = memory_growth(rss, who)
        extra.extend(grew)
        failures = decide(job, faults, baseline, self.opts.tolerance) + extra
        job["failures"] = failures
        acc = job["done"].get("test_accuracy") if job["done"] else None
        accs = baseline.get("accuracies") or [baseline["accuracy"]] if baseline else []
        base_acc = f" (fault-free {min(accs)}{'' if len(accs) == 1 else f'-{max(accs)}'})" if accs else ""
        say(
            f"  job {jobid} {kind_name}: {state} {code} ({src}) after {end - t0:.0f} s, test accuracy {acc}{base_acc}"
            f", {len(failures)} invariant(s) failed"
        )
        if job["ps_memory"]:
            say(f"  PS resident memory, second quarter -> last quarter: {'; '.join(job['ps_memory'])}")
        for f in faults:
            if f.fired is None or f.skipped:
                say(
                    f"  {f.wall or '--:--:--'}  {f.kind:<5}  {f.target or f.describe():<48}  not fired: "
                    f"{f.skipped or 'the job had ended'}"
                )
                continue
            secs = f"{f.seconds:.1f} s to {f.seconds_to}" if f.seconds is not None else "-"
            say(f"  {f.wall}  {f.kind:<5}  {f.target:<48}  {f.outcome:<16}  {secs}")
            if f.note:
                say(f"      {f.note}")
        for x in failures:
            say(f"    FAILED: {x}")
        self.jobs.append(job)
        (jobdir / "result.json").write_text(
            json.dumps(
                {k: v for k, v in job.items() if k not in ("lines", "faults")}
                | {
                    "faults": [
                        {**{k: v for k, v in vars(f).items() if k != "tasks"}, "tasks": sorted(f.tasks)} for f in faults
                    ]
                },
                indent=1,
                default=str,
            )
        )
        return job

    def restarted(self, jobid: str, count: int, now: float, ckpt: Path, faults, restarts: List[dict]) -> None:
        """The job is pending after a requeue (its tasks are gone): notes the
        newest complete checkpoint, which it must resume, and starts it again."""
        newest = newest_step(str(ckpt))
        release(jobid)
        restarts.append({"at": now, "count": count, "newest": newest})
        fault = next(
            (f for f in faults if f.kind == "requeue" and f.fired and not f.skipped and f.restarted is None), None
        )
        if fault is not None:
            fault.restarted, fault.newest = now, newest
        since = f" {now - fault.fired:.1f} s after the requeue" if fault is not None else " (not requeued by a fault)"
        say(
            f"  {time.strftime('%H:%M:%S')} job {jobid} pending again{since}, restart {count}: started now; "
            f"newest complete checkpoint {'none' if newest is None else f'at global step {newest}'}"
        )

    # ------------------------------------------------------------ baselines
    def baseline(self, kind_name: str) -> Optional[dict]:
        """The kind's fault-free runs: their accuracies (one per run, as many
        as the kind asks for) and the times of the first."""
        kind = self.kinds[kind_name]
        key = kind.key()
        b = self.baselines.get(kind_name)
        if not b or b.get("key") != key:
            b = None
        accuracies = b.get("accuracies", [b["accuracy"]]) if b else []
        jobs = b.get("jobs", [b["job"]]) if b else []
        while len(accuracies) < kind.baseline_runs or not b:
            n = len(accuracies) + 1
            say(f"{time.strftime('%H:%M:%S')} baseline: a fault-free {kind_name} job ({n} of {kind.baseline_runs})")
            job = self.run_job(kind_name, [], None)
            if job["failures"] or not job["done"] or job["first_step"] is None:
                say(f"chaos: the fault-free {kind_name} job failed: see {job['dir']}/job.out")
                return None
            accuracies.append(job["done"].get("test_accuracy"))
            jobs.append(job["id"])
            if not b:
                b = {
                    "key": key,
                    "seconds": round(job["end"] - job["start"], 1),
                    "train_seconds": round(job["end"] - job["first_step"], 1),
                    "date": time.strftime("%Y-%m-%d %H:%M:%S"),
                }
            b.update(job=jobs[0], jobs=jobs, accuracy=accuracies[0], accuracies=accuracies)
            self.baselines[kind_name] = b
            self.baselines_file.write_text(json.dumps(self.baselines, indent=1))
        return b

    # ------------------------------------------------------------ the table
    def table(self) -> List[str]:
        rows = []
        head = ["fault", "injected", *OUTCOMES, "in a job with a failed invariant", "s to step/end: median (max)"]
        rows.append("| " + " | ".join(head) + " |")
        rows.append("|" + "---|" * len(head))
        for kind in KINDS:
            fs = [(j, f) for j in self.jobs for f in j["faults"] if f.kind == kind and f.fired and not f.skipped]
            secs = [f.seconds for _, f in fs if f.seconds is not None]
            cells = [kind, str(len(fs))] + [str(sum(1 for _, f in fs if f.outcome == o)) for o in OUTCOMES]
            cells.append(str(sum(1 for j, _ in fs if j["failures"])))
            cells.append(f"{statistics.median(secs):.1f} ({max(secs):.1f})" if secs else "-")
            rows.append("| " + " | ".join(cells) + " |")
        return rows

    def main(self) -> int:
        o = self.opts
        say(
            f"chaos: seed {o.seed}; replay with: bench/chaos --seed {o.seed} --minutes {o.minutes:g}"
            f"{' --kinds ' + o.kinds if o.kinds else ''}{' --faults ' + o.faults if o.faults != ','.join(KINDS) else ''}"
        )
        say(f"chaos: job kinds {','.join(self.order)}; faults {','.join(self.fault_kinds)}; logs in {self.dir}")
        if o.plan_only:
            for i in range(12):
                k = self.order[i % len(self.order)]
                for e in draw_plan(self.rng, self.kinds[k].shape, self.fault_kinds):
                    say(
                        f"job {i + 1} {k}: at {e.at:.3f} of training: "
                        + " + ".join(f"{f.kind} {f.describe()}" for f in e.faults)
                    )
            return 0
        conf = os.environ.get("SLURM_CONF")
        cluster_dir = o.cluster_dir or (str(Path(conf).parent.parent) if conf else "/tmp/chaos-cluster")
        os.environ["SLURM_CONF"] = str(Path(cluster_dir) / "etc" / "slurm.conf")
        if not Path(os.environ["SLURM_CONF"]).exists():
            sys.exit(
                f"chaos: no cluster in {cluster_dir}: start one with scripts/pstrain-cluster start --netns "
                f"--dir {cluster_dir}"
            )
        if not (Path(cluster_dir) / "etc" / "netns").exists():
            self.fault_kinds = tuple(k for k in self.fault_kinds if k not in ("link", "shape"))
            say("chaos: not a --netns cluster: no link or shape faults")
        # Link faults stay shorter than half of Slurm's SlurmdTimeout (draw_fault).
        r = subprocess.run(["scontrol", "show", "config"], capture_output=True, text=True, timeout=30)
        m = re.search(r"^SlurmdTimeout\s*=\s*(\d+)", r.stdout, re.M)
        for kind in self.kinds.values():
            kind.shape["slurmd_timeout"] = int(m.group(1)) if m else 300
        self.injector = Injector(str(REPO / "scripts" / "pstrain-cluster"), cluster_dir, say)
        # Where the jobs' checkpoint filesystems are mounted (a --netns
        # cluster's nodes see what is mounted there; a plain one's run here).
        self.shared = Path(cluster_dir) / "shared"
        failed_baseline = False
        bases = {}
        for k in self.order:
            bases[k] = self.baseline(k)
            failed_baseline |= bases[k] is None
        for k, b in bases.items():
            if b:
                accs = b["accuracies"]
                acc = f"{accs[0]}" if len(accs) == 1 else f"{min(accs)}-{max(accs)} in {len(accs)} runs"
                say(
                    f"chaos: baseline {k}: test accuracy {acc}, {b['seconds']} s "
                    f"({b['train_seconds']} s from the first step), job {b['job']} of {b['date']}"
                )
        order = [k for k in self.order if bases[k]]
        t_end = time.monotonic() + o.minutes * 60
        i = 0
        while order and time.monotonic() < t_end:
            k = order[i % len(order)]
            events = draw_plan(self.rng, self.kinds[k].shape, self.fault_kinds)
            self.run_job(k, events, bases[k])
            i += 1
        say("")
        say(f"chaos: seed {o.seed}, {i} jobs under faults in {o.minutes:g} minutes, logs in {self.dir}")
        for row in self.table():
            say(row)
        bad = [j for j in self.jobs if j["failures"]]
        for j in bad:
            say(f"job {j['id']} {j['kind']} ({j['dir']}):")
            for x in j["failures"]:
                say(f"  {x}")
        return 1 if bad or failed_baseline else 0

    def cleanup(self) -> None:
        if self.injector:
            self.injector.undo_all()
        if self.current:
            cancel(self.current)
        if self.injector and self.injector.ckpt is not None:  # interrupted during a job
            subprocess.run(["umount", "-l", str(self.injector.ckpt)])


def resume_check(ckpt: Path, jobdir: Path, listing: str) -> str:
    """The newest complete checkpoint of a pstrain job resumes: a copy of the
    directory trained on for 20 steps by one standalone process (the job's
    model and optimizer); "" when it does, else what went wrong."""
    m = re.search(r"newest complete: (ckpt-(\d+)\.json)", listing)
    if not m:
        return ""
    step = int(m.group(2))
    copy = jobdir / "resume-ckpt"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(ckpt, copy, ignore=shutil.ignore_patterns(".chaos-fill"))
    cmd = [
        str(PSTRAIN),
        "--standalone",
        "--device",
        "cpu",
        "--threads",
        "1",
        "--seed",
        "11",
        "--optimizer",
        "adam",
        "--learning-rate",
        "0.001",
        "--checkpoint-dir",
        str(copy),
        "--train-steps",
        str(step + 20),
        "--log-every",
        "10",
    ]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    (jobdir / "resume.txt").write_text(" ".join(cmd) + "\n" + r.stdout + r.stderr)
    shutil.rmtree(copy, ignore_errors=True)
    if r.returncode != 0 or f"(global step {step}," not in r.stdout + r.stderr:
        tail = (r.stdout + r.stderr).strip().splitlines()[-1:] or [""]
        return f"the newest complete checkpoint ({m.group(1)}) did not resume: exit {r.returncode}: {tail[0]}"
    return ""


def main(argv=None) -> int:
    opts = parse_args(argv)
    if opts.seed is None:
        opts.seed = int(time.time()) % 100000
    run = Run(opts)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    try:
        return run.main()
    except KeyboardInterrupt:
        say("chaos: interrupted")
        for row in run.table():
            say(row)
        return 130
    finally:
        run.cleanup()


if __name__ == "__main__":
    sys.exit(main())
