#!/usr/bin/python3
"""Training samples/s of a pstrain run in its steady state, from the chief's
--metrics-file, for every benchmark script that reports pstrain's samples/s
(one reading of the file, not one a script).

  steady_state.py METRICS [--steps N] [--first W] [--last W] [--exclude-eval] [--done OUT] [--key K]
  steady_state.py --log-every N [--window W] [--eval-every E]

What the file holds (trainer/app/report.cpp): only the chief (worker 0, or
the --standalone process) writes it, one JSON object a line.  A
{"event":"progress"} line comes each time the global step crosses a
multiple of --log-every: its global_step is the step the chief saw then
(async: it may be a step or two past the multiple), its samples_per_sec
the job's samples (every worker's: global steps x batch, x the replicas
aggregated in sync) per second over the interval since the previous
progress line (the first interval runs from the chief's start, start-up
included), and elapsed_seconds when it was written.  Other lines
("cluster", "eval", ...) carry global_step and elapsed_seconds too.

A window from progress line a to progress line b (a < b) has
sum(samples_per_sec_i x (elapsed_i - elapsed_i-1)) samples for i in
(a, b], over elapsed_b - elapsed_a seconds: the interval rates weighted by
their length, so the same in sync and async without knowing the batch or
the replicas.  With --exclude-eval, the seconds of every evaluation inside
the window (an "eval" line's elapsed_seconds less that of the line of the
same step before it: --log-every must divide --eval-every) are taken out of the time, as TensorFlow's side of bench/vs-tensorflow
does (its evaluation is not counted).

Prints one JSON line:
  steady_samples_per_sec  the last half: from the first progress line at or
                          after step N/2 (N: --steps, else the last progress
                          line's step) to the last progress line;
  from_step, to_step, seconds   that window;
  steps (N), steady (N >= 3000: the benchmarks' rule for a steady state);
  with --first W: first_samples_per_sec, first_from_step, first_to_step:
                  from the first progress line (the interval before it
                  holds the start-up) to the first at or after step W;
  with --last W:  last_samples_per_sec, last_from_step, last_to_step: from
                  the first progress line at or after step N - W to the last;
  with both:      last_over_first.
--done OUT: the fields of the last {"event":"done"} line of OUT (the run's
stdout: test_accuracy, train_seconds, samples_per_sec over the whole run,
...) go into the line too, the steady ones beside them.
--key K prints only that field's value.

--log-every N prints the --log-every to give a run of N steps so that its
progress lines fall on step N/2 (a divisor of N/2, about 40 lines a run),
and with --window W also on W and N - W (a divisor of W and N); with
--eval-every E, one that divides E too (for --exclude-eval).
"""

import argparse
import json
import math
import sys

STEADY_STEPS = 3000


def log_every(n, window=None, eval_every=None):
    base = window if window else max(n // 2, 1)
    cap = max(1, base // 10) if window else max(1, n // 40)
    for d in range(min(cap, base), 0, -1):
        if base % d == 0 and (not window or n % d == 0):
            return math.gcd(d, eval_every) if eval_every else d
    return 1


def progress_lines(path):
    events = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line.startswith("{"):
                continue
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    return events


def window(events, lo, hi, exclude_eval):
    """(samples/s, from_step, to_step, seconds) over the progress lines from the
    first at or after step lo to the last at or before step hi (hi None: the last)."""
    prog = [(i, e) for i, e in enumerate(events) if e.get("event") == "progress"]
    start = next((k for k, (_, e) in enumerate(prog) if e["global_step"] >= lo), None)
    if start is None:
        return None
    end = (
        len(prog) - 1
        if hi is None
        else next((k for k, (_, e) in enumerate(prog) if e["global_step"] >= hi), len(prog) - 1)
    )
    if end <= start:
        return None
    samples = 0.0
    for k in range(start + 1, end + 1):
        dt = prog[k][1]["elapsed_seconds"] - prog[k - 1][1]["elapsed_seconds"]
        samples += prog[k][1]["samples_per_sec"] * dt
    seconds = prog[end][1]["elapsed_seconds"] - prog[start][1]["elapsed_seconds"]
    if exclude_eval:
        first, last = prog[start][0], prog[end][0]
        for i in range(first + 1, last):
            if events[i].get("event") == "eval":
                if events[i - 1].get("global_step") != events[i].get("global_step"):
                    sys.exit(
                        "steady_state.py: the evaluation at step %s has no line of its own step before it: "
                        "give the run a --log-every that divides its --eval-every" % events[i].get("global_step")
                    )
                seconds -= events[i]["elapsed_seconds"] - events[i - 1]["elapsed_seconds"]
    if seconds <= 0:
        return None
    return samples / seconds, prog[start][1]["global_step"], prog[end][1]["global_step"], seconds


def steady(path, steps=None, exclude_eval=False):
    """The steady fields of a metrics file (as the JSON line prints them), or
    None when it has too few progress lines; for other scripts to import."""
    events = progress_lines(path)
    prog = [e for e in events if e.get("event") == "progress"]
    if len(prog) < 2:
        return None
    n = steps or prog[-1]["global_step"]
    w = window(events, n // 2, None, exclude_eval)
    if w is None:
        return None
    return dict(
        steady_samples_per_sec=w[0],
        from_step=w[1],
        to_step=w[2],
        seconds=round(w[3], 4),
        steps=n,
        steady=n >= STEADY_STEPS,
    )


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("metrics", nargs="?")
    p.add_argument("--steps", type=int, help="the run's --train-steps (default: the last progress line's step)")
    p.add_argument("--first", type=int)
    p.add_argument("--last", type=int)
    p.add_argument("--exclude-eval", action="store_true")
    p.add_argument("--done", metavar="OUT")
    p.add_argument("--key")
    p.add_argument("--log-every", type=int, metavar="N")
    p.add_argument("--window", type=int)
    p.add_argument("--eval-every", type=int)
    a = p.parse_args()
    if a.log_every is not None:
        print(log_every(a.log_every, a.window, a.eval_every))
        return 0
    if not a.metrics:
        p.error("give a metrics file (pstrain --metrics-file), or --log-every N")
    try:
        events = progress_lines(a.metrics)
    except OSError as e:
        sys.exit("steady_state.py: %s: %s: give the --metrics-file the run wrote" % (a.metrics, e.strerror))
    prog = [e for e in events if e.get("event") == "progress"]
    if len(prog) < 2:
        sys.exit(
            "steady_state.py: %s: %d progress lines: the run needs --log-every below half its steps"
            % (a.metrics, len(prog))
        )
    n = a.steps or prog[-1]["global_step"]
    out = {}
    if a.done:
        try:
            with open(a.done) as f:
                lines = [line for line in f if line.startswith("{") and '"event":"done"' in line]
        except OSError as e:
            sys.exit("steady_state.py: %s: %s" % (a.done, e.strerror))
        if not lines:
            sys.exit('steady_state.py: %s: no final {"event":"done"} line: the run failed' % a.done)
        out.update(json.loads(lines[-1]))
    w = steady(a.metrics, n, a.exclude_eval)
    if w is None:
        sys.exit("steady_state.py: %s: no two progress lines in steps %d..%d" % (a.metrics, n // 2, n))
    out.update(w)
    if a.first:
        f = window(events, 0, a.first, a.exclude_eval)
        out.update(
            first_samples_per_sec=f[0] if f else math.nan,
            first_from_step=f[1] if f else None,
            first_to_step=f[2] if f else None,
        )
    if a.last:
        f = window(events, n - a.last, None, a.exclude_eval)
        out.update(
            last_samples_per_sec=f[0] if f else math.nan,
            last_from_step=f[1] if f else None,
            last_to_step=f[2] if f else None,
        )
    if a.first and a.last:
        first, last = out["first_samples_per_sec"], out["last_samples_per_sec"]
        out["last_over_first"] = last / first if first and first == first and last == last else math.nan
    if a.key:
        print(out[a.key])
    else:
        print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
