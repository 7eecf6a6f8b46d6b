"""The steady-state timer of the PyTorch (and other Python) sides of the
benchmarks, the twin of bench/steady_state.py for pstrain: samples/s over
the last half of a run's steps, from the first step boundary at or after
step N/2 (N: the run's steps) to its end, so that a slowdown that builds up
as training goes (denormal numbers in the optimizer's state) shows in the
figure, and both sides of a comparison time the same steps.

  timer = Steady(steps)
  ... in the training loop, before each step: timer.mark(updates_done)
  ... at the end: fields = timer.fields(updates_done, samples_per_update)

`updates_done` counts what pstrain's global_step counts (updates applied:
in sync, one per averaged set of batches; in async, one per batch), so a
program gives the global step it knows (from its PS) or its own step.
fields() is a dict for the program's JSON line: steady_samples_per_sec,
steady_from_step, steady_to_step, steady (N >= 3000, the benchmarks' rule).

flush_denormal(on): torch.set_flush_denormal(True) when on (the
--flush-denormal flag of the torch programs).  It sets the calling thread's
MXCSR (FTZ and DAZ); a thread started after it inherits it (Linux copies
the floating-point environment into a new thread), one started before does
not.  So the programs call it first, before torch.distributed, rpc or
pstrain start their threads: with one intra-op thread torch computes
forward, backward and the optimizer in the main thread, and gloo's and the
rpc server's threads come later.
"""

import time

STEADY_STEPS = 3000


class Steady:
    def __init__(self, steps):
        self.steps, self.half = steps, steps // 2
        self.t0, self.step0 = None, None

    def mark(self, done):
        if self.t0 is None and done >= self.half:
            self.t0, self.step0 = time.perf_counter(), done

    def fields(self, done, samples_per_update):
        if self.t0 is None or done <= self.step0:
            return {
                "steady_samples_per_sec": float("nan"),
                "steady_from_step": self.step0,
                "steady_to_step": done,
                "steady": False,
            }
        seconds = time.perf_counter() - self.t0
        return {
            "steady_samples_per_sec": (done - self.step0) * samples_per_update / seconds,
            "steady_from_step": self.step0,
            "steady_to_step": done,
            "steady": self.steps >= STEADY_STEPS,
        }


def flush_denormal(on):
    import torch

    if on and not torch.set_flush_denormal(True):
        raise SystemExit("--flush-denormal: torch.set_flush_denormal(True) is not supported on this CPU")
    return bool(on)
