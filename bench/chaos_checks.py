"""Invariants for bench/chaos, checked after every job, and the outcome of each
fault.  Pure functions of what was seen (the job's lines with the time each
was read, its faults, Slurm's state) except for the three that look at the
machine afterwards: the checkpoints (pstrain checkpoint inspect), processes
left behind, and the nodes (sinfo); and the PS processes' resident memory,
sampled while the job ran (memory_growth).

Outcomes of a fault:
  healed           the job completed, and a line after the fault says a spare
                   took a lost task's place or training went on after one
  went on          the job completed (or a step was logged after the fault
                   and before a later fault ended the job)
  requeued         the job was requeued, came back, resumed from the newest
                   complete checkpoint (or from the start, where there was
                   none) and completed
  ended naming it  the job ended without completing, and a line names the
                   task the fault took down, with a reason (a disk fault:
                   a line names the checkpoint directory's error)
  ended by another the job ended without completing, named by another
                   fault's line, before anything showed this one's effect
                   (no line names it, no step came after it)
  ended unnamed    the job ended without completing and no line names it
  hung             the job outlived its bound (and was cancelled)
  wrong            it completed with an accuracy off the fault-free runs'
                   (beyond the tolerance of the range they reached),
                   or its training completed and Slurm says it failed
  checkpoint lost  a checkpoint with a manifest fails pstrain checkpoint inspect
"""

from __future__ import annotations

import re
import statistics
import subprocess
import time
from pathlib import Path
from typing import Dict, List, Optional, Set, Tuple

from chaos_faults import DAEMON_KINDS, DISK_KINDS, Fault, job_processes
from chaos_jobs import PSTRAIN, STEP_RE

OUTCOMES = (
    "healed",
    "went on",
    "requeued",
    "ended naming it",
    "ended by another",
    "ended unnamed",
    "hung",
    "wrong",
    "checkpoint lost",
)
HEAL_RE = re.compile(r"taking the place of lost|training went on at global step|joined again")
SPARE_RE = re.compile(r"\[ps (\d+)\]: taking the place of lost ps (\d+)")
LOST_RE = re.compile(r"\blost (ps|worker) (\d+) \(([^)]*)\)")
NAMING_RES = (
    LOST_RE,
    re.compile(r"\b(ps|worker) (\d+) \(([^)]*)\) ended with"),  # pstrain-run
    re.compile(r"\bwaiting for (ps|worker) (\d+) \(([^)]*)\)"),  # a stall line
    re.compile(r"\blost (?:ps|worker) \d+ \([^)]*\) and (ps|worker) (\d+) \(([^)]*)\)"),
)
WRITER_RE = re.compile(r"^[\w-]+\[(ps|worker) (\d+)\]: ")
FAILED_LINE = re.compile(r"error:|ended with signal|made no progress")
# A checkpoint directory full or read-only, as pstrain and pstrain serve say it.
DISK_LINE = re.compile(r"No space left on device|Read-only file system")
# The documented end of a run whose final checkpoint could not be written:
# the chief's done line is printed, the job fails.
FINAL_CKPT_FAILED = "the final checkpoint was not written"
# A job that starts from a checkpoint: pstrain's chief, a torch program's
# (examples/torch); not a spare's restore of one PS's shard.
RESUMED_RES = (
    re.compile(r"\brestored (?!by a spare)\S.* from \S+ \(global step (\d+),"),
    re.compile(r"\brestored from the checkpoint at global step (\d+)"),
)


def names(line: str) -> List[Tuple[str, int]]:
    """The tasks a line names as lost (or waited for).  A PS's warning that a
    worker went after training ended, before its last reply, is not one: a
    worker told that training is done by another PS leaves them all, and
    under loss its going is seen as an endpoint timeout; the job's end,
    state and accuracy say whether anything was lost."""
    if not FAILED_LINE.search(line) and "warning: lost" not in line:
        return []
    if "warning: lost" in line and "after training ended" in line:
        return []
    found = []
    for rx in NAMING_RES:
        for m in rx.finditer(line):
            found.append((m.group(1), int(m.group(2))))
    return found


def writer(line: str) -> Optional[Tuple[str, int]]:
    """The task a line of pstrain's (or pstrain-run's) comes from."""
    m = WRITER_RE.match(line)
    return (m.group(1), int(m.group(2))) if m else None


def empty_reason(line: str) -> bool:
    """A lost-task line whose reason is empty: "lost ps 0 (n1): send failed: "."""
    m = LOST_RE.search(line)
    if not m:
        return False
    rest = line[m.end() :].strip()
    if not rest:  # "ps 1 (n1) ended the job: it lost worker 1 (n2)": the reason came first
        return "ended the job" not in line
    return rest.endswith(":") or "()" in rest


def aliases(lines: List[Tuple[float, str]]) -> Dict[int, int]:
    """A spare's own ps index -> the index of the ps whose place it took."""
    out = {}
    for _, line in lines:
        m = SPARE_RE.search(line)
        if m:
            out[int(m.group(1))] = int(m.group(2))
    return out


def touched(faults: List[Fault], alias: Dict[int, int]) -> Set[Tuple[str, int]]:
    out = set()
    for f in faults:
        for role, index in f.tasks:
            out.add((role, index))
            if role == "ps" and index in alias:
                out.add(("ps", alias[index]))
    return out


def step_after(lines, t: float) -> Optional[float]:
    return next((lt for lt, line in lines if lt > t and STEP_RE.search(line)), None)


def resumed_at(lines: List[Tuple[float, str]], t: float) -> Optional[Tuple[int, str]]:
    """The global step the job resumed from after time t, and the line."""
    for lt, line in lines:
        if lt < t:
            continue
        for rx in RESUMED_RES:
            m = rx.search(line)
            if m:
                return int(m.group(1)), line.strip()
    return None


def check_restarts(lines: List[Tuple[float, str]], restarts: List[dict], faults: List[Fault]) -> List[str]:
    """Each start after a requeue resumed from the newest complete checkpoint
    there was while the job was pending (from the start where there was
    none); notes it on the requeue fault."""
    failures = []
    for i, r in enumerate(restarts):
        nxt = restarts[i + 1]["at"] if i + 1 < len(restarts) else float("inf")
        found = resumed_at([x for x in lines if x[0] < nxt], r["at"])
        fault = next((f for f in faults if f.kind == "requeue" and f.restarted == r["at"]), None)
        what = f"restart {r['count']}"
        trained = any(r["at"] <= t < nxt and STEP_RE.search(line) for t, line in lines)
        if found is None and not trained:  # it ended before training: decide() says whether rightly
            continue
        if r["newest"] is None:
            said = "no checkpoint yet: started from the beginning"
            if found:
                failures.append(f"{what}: no complete checkpoint was there, yet it resumed: {found[1]}")
        elif found is None:
            said = ""
            failures.append(
                f"{what}: the newest complete checkpoint was at global step {r['newest']}, and no line says the job "
                "resumed from it"
            )
        elif found[0] != r["newest"]:
            said = ""
            failures.append(
                f"{what}: resumed from global step {found[0]}, not from the newest complete checkpoint "
                f"(global step {r['newest']}): {found[1]}"
            )
        else:
            said = f"resumed from global step {found[0]}, the newest complete checkpoint"
        if fault is not None and said:
            fault.note = said
    return failures


def disk_line_after_restart(lines, requeue: Fault, fired: List[Fault]) -> Optional[Tuple[float, str, str]]:
    """When a requeued job started again while a disk fault was in force:
    the first line after that naming the checkpoint directory's error
    (time, line, which fault), else None."""
    at = requeue.restarted
    if at is None:
        return None
    for f in fired:
        if (
            f.kind not in DISK_KINDS
            or f.fired > at
            or (f.undone if f.undone is not None else f.fired + f.duration) < at
        ):
            continue
        said = next(((t, line) for t, line in lines if t >= at and DISK_LINE.search(line)), None)
        if said:
            return said[0], said[1], f.describe()
    return None


def decide(job: dict, faults: List[Fault], baseline: Optional[dict], tolerance: float) -> List[str]:
    """Sets each fired fault's outcome and seconds; returns the job's failed invariants."""
    # In the order they were written (JSON log lines carry their own time).
    lines, end = sorted(job["lines"], key=lambda x: x[0]), job["end"]
    fired = [f for f in faults if f.fired is not None and not f.skipped]
    failures: List[str] = []
    done = job["done"]
    completed = job["state"] == "COMPLETED" and job["exit"] == "0:0"
    alias = aliases(lines)
    hit = touched(fired, alias)
    first = min((f.fired for f in fired), default=None)

    failures.extend(check_restarts(lines, job.get("restarts", []), fired))
    final_failed = any(FINAL_CKPT_FAILED in line for _, line in lines) and any(f.kind in DISK_KINDS for f in fired)
    # Slurm's word against the job's own.
    if done and not completed and not job["hung"] and not final_failed:
        failures.append(
            f"training completed (the chief's done line, global step {done.get('global_step')}) "
            f"but Slurm says {job['state']} {job['exit']} ({job['state_from']})"
        )
    if completed and not done:
        failures.append("COMPLETED 0:0 without the chief's done line")
    accuracy_off = None
    if completed and done and baseline and baseline.get("accuracy") is not None:
        # Within the tolerance of the range the fault-free runs reached (one
        # value for a kind whose run is a function of its seed).
        acc = done.get("test_accuracy")
        accs = baseline.get("accuracies") or [baseline["accuracy"]]
        low, high = min(accs), max(accs)
        if acc is None or acc < low - tolerance or acc > high + tolerance:
            free = f"{low}" if low == high else f"{low}-{high} in {len(accs)} runs"
            accuracy_off = f"test accuracy {acc} against {free} fault-free (tolerance {tolerance})"
            failures.append(accuracy_off)
    if job["hung"]:
        failures.append(
            f"hung: still {job.get('state_at_bound') or 'running'} {job['bound']:.0f} s after submission (the bound), "
            f"then {job['state']} {job['exit']} once cancelled; "
            f"faults: {'; '.join(f'{f.kind} {f.target}' for f in fired) or 'none'}"
        )

    # The lines that name a lost task, after the first fault.
    # A task the fault cut off names the others as lost: that is its side of it.
    naming = [
        (t, line, n)
        for t, line in lines
        if first is not None and t >= first and writer(line) not in hit
        for n in names(line)
    ]
    if not job["hung"] and naming:
        t, line, n = naming[0]
        if n not in hit:
            failures.append(
                f"the first line naming a lost task names {n[0]} {n[1]}, which no fault touched: {line.strip()}"
            )
        chief = [(t, line, n) for t, line, n in naming if "[worker 0]: error:" in line]
        if chief and chief[0][1] != line and chief[0][2] not in hit and ("worker", 0) not in hit:
            failures.append(
                f"the chief names {chief[0][2][0]} {chief[0][2][1]}, which no fault touched: {chief[0][1].strip()}"
            )
        for _, line, _ in naming:
            if empty_reason(line):
                failures.append(f"an empty reason: {line.strip()}")
                break

    for f in fired:
        nxt = step_after(lines, f.fired)
        end_of_fault = f.fired + f.duration
        if nxt is not None and (end is None or nxt <= end):
            f.seconds, f.seconds_to = nxt - f.fired, "step"
        elif end is not None:
            f.seconds, f.seconds_to = end - f.fired, "end"
        mine = [(t, line, n) for t, line, n in naming if n in touched([f], alias)]
        if job["hung"]:
            f.outcome = "hung"
        elif job["ckpt_lost"]:
            f.outcome = "checkpoint lost"
        elif accuracy_off or (done and not completed and not final_failed):
            f.outcome = "wrong"
        elif completed and f.kind == "requeue":
            f.outcome = "requeued" if f.restarted is not None else "went on"
        elif completed:
            healed = any(t >= f.fired and HEAL_RE.search(line) for t, line in lines)
            f.outcome = "healed" if healed and f.kind != "shape" else "went on"
        elif f.kind in DISK_KINDS:
            said = next(((t, line) for t, line in lines if t >= f.fired and DISK_LINE.search(line)), None)
            if said:
                f.outcome = "ended naming it"
                f.note = f"said after {said[0] - f.fired:.1f} s: {said[1].strip()}"
            else:
                f.outcome = "ended unnamed"
        elif f.kind == "requeue":
            # Only a disk fault in force when it started again may end a
            # requeued job: pstrain refuses a checkpoint directory it cannot
            # write at start-up, with a line that says so.
            said = disk_line_after_restart(lines, f, fired)
            if said:
                f.outcome = "ended naming it"
                f.note = f"started again while {said[2]}; said: {said[1].strip()}"
            else:
                f.outcome = "ended unnamed"
        elif mine:
            f.outcome = "ended naming it"
            late = mine[0][0] - f.fired
            f.note = f"named after {late:.1f} s: {mine[0][1].strip()}"
            if late > 60:
                failures.append(
                    f"{f.kind} {f.target}: the first line naming it came {late:.0f} s after the fault "
                    f"(more than 60): {mine[0][1].strip()}"
                )
        elif nxt is not None and nxt > end_of_fault and (end is None or nxt <= end):
            f.outcome = "went on"
        else:
            f.outcome = "ended unnamed"
    # A fault no line names, in a job that another fault ended (and named),
    # after which training went on: it took nothing down (a spare stopped
    # while it waited, say).  So too a disk fault while nothing tried the
    # checkpoint directory (no line says its error: training had stalled
    # on the other fault), a restart of Slurm's daemons and loss and delay
    # on the links (they take no task down), and a fault before a requeue,
    # which started every task again.
    # Otherwise nothing said why the job ended.
    for f in fired:
        if f.outcome != "ended unnamed":
            continue
        other = any(g is not f and g.outcome == "ended naming it" for g in fired)
        if other and step_after(lines, f.fired) is not None:
            f.outcome = "went on"
            f.note = "the job went on after it; another fault ended it"
        elif other and f.kind in DISK_KINDS:
            f.outcome = "went on"
            f.note = "nothing wrote to the checkpoint directory while it was in force; another fault ended the job"
        elif other and (f.kind in DAEMON_KINDS or f.kind == "shape"):
            f.outcome = "went on"
            f.note = "training had stalled on another fault, which ended the job"
        elif other and any(g.kind == "requeue" and g.restarted is not None and g.fired >= f.fired for g in fired):
            f.outcome = "went on"
            f.note = "the job was requeued after it (every task started again); another fault ended the job"
        elif other:
            # The job's end is named (the other fault's line); whether this
            # one would have ended it too cannot be seen.
            f.outcome = "ended by another"
            f.note = "another fault ended the job, and its line names what it took down, before this one showed"
        else:
            if f.kind == "requeue":
                failures.append(
                    f"requeue {f.target}: the job ended {job['state']} {job['exit']}: a requeued job must come "
                    "back and complete"
                )
                continue
            if f.kind in DAEMON_KINDS:
                failures.append(
                    f"{f.kind} {f.target}: the job ended {job['state']} {job['exit']} after it: a restart of "
                    "Slurm's daemons must leave a running job alone"
                )
                continue
            what = "the checkpoint directory's error" if f.kind in DISK_KINDS else "the task it took down"
            failures.append(f"{f.kind} {f.target}: the job ended {job['state']} {job['exit']} and no line names {what}")
    if not fired and not completed and not job["hung"]:
        failures.append(f"no fault fired, and the job ended {job['state']} {job['exit']}")
    return failures


def rss_kb(pid: int) -> Optional[int]:
    """A process's resident memory (VmRSS, kB), None once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return None


def memory_growth(
    samples: Dict[int, List[Tuple[float, int]]],
    who: Dict[int, str],
    min_span: float = 30.0,
    ratio: float = 1.2,
    slack_kb: int = 16 * 1024,
) -> Tuple[List[str], List[str]]:
    """(failures, summary) of the PS processes' resident memory over a job.
    Per process sampled for at least min_span seconds: the median of the last
    quarter of its samples against that of the second quarter (the first,
    its start and first steps, is left out); it grew when the last is above
    ratio times the other plus slack_kb."""
    failures, summary = [], []
    for pid, series in sorted(samples.items(), key=lambda kv: who.get(kv[0], "")):
        if len(series) < 8 or series[-1][0] - series[0][0] < min_span:
            continue
        q = len(series) // 4
        early = statistics.median(kb for _, kb in series[q : 2 * q])
        late = statistics.median(kb for _, kb in series[-q:])
        span = series[-1][0] - series[0][0]
        summary.append(f"{who.get(pid, pid)} {early / 1024:.0f}->{late / 1024:.0f} MB over {span:.0f} s")
        if late > ratio * early + slack_kb:
            failures.append(
                f"{who.get(pid, pid)}: its resident memory grew from {early / 1024:.0f} MB to "
                f"{late / 1024:.0f} MB over {span:.0f} s (more than {ratio:.1f}x + {slack_kb // 1024} MB)"
            )
    return failures, summary


def newest_step(ckpt: str) -> Optional[int]:
    """The global step of the newest complete checkpoint in ckpt, None when there is none."""
    r = subprocess.run([str(PSTRAIN), "checkpoint", "inspect", ckpt], capture_output=True, text=True, timeout=120)
    m = re.search(r"^newest complete: ckpt-(\d+)\.json", r.stdout, re.M)
    return int(m.group(1)) if m else None


def inspect_checkpoints(ckpt: str) -> Tuple[List[str], str]:
    """(problems of checkpoints that have a manifest, the listing)."""
    r = subprocess.run([str(PSTRAIN), "checkpoint", "inspect", ckpt], capture_output=True, text=True, timeout=120)
    listing = r.stdout + r.stderr
    problems = []
    rows = re.compile(r"^\s+(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(.*)$")
    for line in r.stdout.splitlines():
        m = rows.match(line)
        if not m:
            continue
        status = m.group(6).strip()
        if status == "complete, checksums good" or status.startswith(
            ("interrupted: shard files without a manifest", "table files without a manifest")
        ):
            continue
        problems.append(f"checkpoint at global step {m.group(1)}: {status}")
    if r.returncode != 0:
        problems.append(f"pstrain checkpoint inspect {ckpt} exited {r.returncode}: {listing.strip().splitlines()[-1:]}")
    return problems, listing


def left_behind(tag: str, wait: float = 20.0) -> List[str]:
    deadline = time.monotonic() + wait
    while True:
        procs = job_processes(tag)
        if not procs or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    return [
        f"pid {pid} {comm} {env.get('PSTRAIN_ROLE', '')} {env.get('PSTRAIN_TASK_INDEX', '')}".strip()
        for pid, comm, env in procs
    ]


def nodes_not_idle(wait: float = 90.0) -> List[str]:
    """Nodes drained at once, or not idle after wait seconds (a link that was
    down leaves a node not responding for a while)."""
    deadline = time.monotonic() + wait
    while True:
        r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N %T"], capture_output=True, text=True, timeout=30)
        states = sorted(set(r.stdout.split("\n")) - {""})
        drained = [s for s in states if "drain" in s.split()[-1].lower()]
        bad = [s for s in states if s.split()[-1].lower() != "idle"]
        if drained or not bad or time.monotonic() > deadline:
            break
        time.sleep(2)
    if not bad:
        return []
    reasons = subprocess.run(["sinfo", "-h", "-R", "-o", "%N %T %E"], capture_output=True, text=True, timeout=30)
    return [f"node not idle: {s}" for s in bad] + [f"sinfo -R: {x}" for x in reasons.stdout.splitlines() if x]
