"""bench/chaos's judgement, on jobs made up here: what a requeue must do
(resume from the newest complete checkpoint, or end naming a disk fault in
force when it started again), what counts as growing memory, and the
plans a seed draws (CI's seed 13 must draw what it always drew)."""

from __future__ import annotations

import random
import sys
import unittest
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from chaos_checks import decide, memory_growth  # noqa: E402
from chaos_faults import KINDS, Fault, draw_plan  # noqa: E402

BASE = {"accuracy": 0.88, "seconds": 50.0, "train_seconds": 48.0}
DONE = '{"event":"done","global_step":30000,"test_accuracy":0.88}'


def job(lines, faults, state="COMPLETED", exit_code="0:0", restarts=()):
    return {
        "lines": lines,
        "end": 100.0,
        "faults": faults,
        "state": state,
        "exit": exit_code,
        "state_from": "scontrol",
        "hung": False,
        "bound": 300.0,
        "done": {"global_step": 30000, "test_accuracy": 0.88} if state == "COMPLETED" else None,
        "ckpt_lost": False,
        "restarts": list(restarts),
    }


def hit(fault, *tasks):
    """fault, having taken down `tasks` ((role, index) pairs) when it fired."""
    fault.tasks = set(tasks)
    return fault


def ended(lines, faults, restarts=()):
    """decide() on a job that ended FAILED 1:0 with `faults`; its failures."""
    return decide(job(lines, faults, "FAILED", "1:0", restarts), faults, BASE, 0.01)


def requeue(at=10.0, restarted=15.0, newest=21000):
    f = Fault("requeue", fired=at, target="job 7 requeued (5 tasks)", restarted=restarted, newest=newest)
    f.tasks = {("ps", 0), ("ps", 1), ("ps", 2), ("worker", 0), ("worker", 1)}
    return f


def run_lines(resumed_from):
    return [
        (5.0, "pstrain[worker 0]: step 21000/30000 loss 0.06"),
        (5.1, "pstrain[worker 0]: checkpoint at global step 21000 saved: /c/ckpt-0000021000.json (2 shards)"),
        (10.2, "pstrain[worker 0]: SIGTERM at global step 21601: saving a checkpoint, then stopping every task"),
        (
            16.0,
            f"pstrain[worker 0]: restored 784-100-10 mlp from /c/ckpt-00000{resumed_from}.json "
            f"(global step {resumed_from}, saved 2026 by 2 ps tasks); sync training to step 30000",
        ),
        (17.0, "pstrain[worker 0]: step 22000/30000 loss 0.06"),
        (60.0, DONE),
    ]


class Requeue(unittest.TestCase):
    def test_a_job_that_resumed_from_the_newest_checkpoint_was_requeued(self):
        f = requeue()
        failures = decide(
            job(run_lines(21000), [f], restarts=[{"at": 15.0, "count": 1, "newest": 21000}]), [f], BASE, 0.01
        )
        self.assertEqual(failures, [])
        self.assertEqual(f.outcome, "requeued")
        self.assertEqual(f.note, "resumed from global step 21000, the newest complete checkpoint")

    def test_resuming_an_older_checkpoint_fails(self):
        f = requeue()
        failures = decide(
            job(run_lines(20000), [f], restarts=[{"at": 15.0, "count": 1, "newest": 21000}]), [f], BASE, 0.01
        )
        self.assertEqual(len(failures), 1)
        self.assertIn(
            "resumed from global step 20000, not from the newest complete checkpoint (global step 21000)", failures[0]
        )

    def test_a_spares_restore_is_not_the_jobs_resume(self):
        f = requeue()
        lines = [x for x in run_lines(21000) if "restored" not in x[1]]
        lines.insert(
            3,
            (
                16.0,
                "pstrain[worker 0]: ps 1 restored by a spare from /c/ckpt-0000021000.json "
                "(global step 21000): about 0 updates of its shard lost",
            ),
        )
        failures = decide(job(lines, [f], restarts=[{"at": 15.0, "count": 1, "newest": 21000}]), [f], BASE, 0.01)
        self.assertEqual(len(failures), 1)
        self.assertIn("no line says the job resumed from it", failures[0])

    def test_a_requeued_job_that_ends_fails_unless_a_disk_fault_was_in_force_when_it_started_again(self):
        lines = run_lines(21000)[:3] + [
            (
                16.0,
                "pstrain[worker 0]: error: checkpoint directory /c is not writable: Read-only file system: "
                "choose a --checkpoint-dir on a shared filesystem this job can write",
            ),
        ]
        restarts = [{"at": 15.0, "count": 1, "newest": 21000}]
        f = requeue()
        failures = ended(lines, [f], restarts)
        self.assertEqual(len(failures), 1)
        self.assertIn("a requeued job must come back and complete", failures[0])
        f, ro = requeue(), Fault("readonly", fired=9.0, duration=42.0, target="read-only")
        failures = ended(lines, [f, ro], restarts)
        self.assertEqual(failures, [])
        self.assertEqual(f.outcome, "ended naming it")
        self.assertTrue(f.note.startswith("started again while checkpoint directory read-only for 42 s"))


class Unnamed(unittest.TestCase):
    def test_a_disk_fault_nothing_met_in_a_job_another_fault_ended_went_on(self):
        # Worker 1 stopped for 66 s ends the sync job; the checkpoint
        # directory went read-only 3 s later, and training, stalled, tried
        # no checkpoint before the end.
        stop = hit(
            Fault("stop", role="worker", index=1, duration=66.0, fired=10.0, target="worker 1 for 66 s"), ("worker", 1)
        )
        ro = Fault("readonly", duration=55.0, fired=13.0, target="read-only for 55 s")
        lines = [
            (9.0, "pstrain[worker 0]: step 7500/30000 loss 0.15"),
            (41.0, "pstrain[worker 0]: error: ps 0 (n1) ended the job: it lost worker 1 (n2)"),
            (42.0, "pstrain[ps 0]: error: lost worker 1 (n2) (silent for 30 s ...): sync training aggregates 2"),
        ]
        failures = ended(lines, [stop, ro])
        self.assertEqual(failures, [])
        self.assertEqual((stop.outcome, ro.outcome), ("ended naming it", "went on"))

    def test_faults_before_a_requeue_that_a_disk_fault_then_ended_went_on(self):
        # Worker 1 stopped and slurmctld restarted; 6 s later the job is
        # requeued and starts again while its directory is read-only.
        stop = hit(
            Fault("stop", role="worker", index=1, duration=58.0, fired=10.0, target="worker 1 for 58 s"), ("worker", 1)
        )
        ctld = Fault("slurmctld", fired=10.0, target="slurmctld restarted")
        ro = Fault("readonly", duration=31.0, fired=16.0, target="read-only for 31 s")
        rq = requeue(at=16.0, restarted=21.0, newest=500)
        rq.tasks = {("ps", 0), ("worker", 0), ("worker", 1)}
        lines = [
            (9.0, "cnn_fashion_mnist: step 500/3000 loss 0.5"),
            (22.0, "pstrain[ps 0]: error: checkpoint directory /c is not writable: Read-only file system: choose"),
        ]
        restarts = [{"at": 21.0, "count": 1, "newest": 500}]
        faults = [stop, ctld, ro, rq]
        failures = ended(lines, faults, restarts)
        self.assertEqual(failures, [])
        self.assertEqual([f.outcome for f in faults], ["went on", "went on", "ended naming it", "ended naming it"])

    def test_loss_and_a_daemon_restart_while_a_cut_off_chief_stalls_training_went_on(self):
        # The torch job's chief cut off for 27 s (named by the worker that
        # lost it, with its own name: the example's error lines carry it),
        # loss and delay on every link 2 s later, and n1's slurmd restarted.
        link = hit(Fault("link", node="n2", duration=27.0, fired=10.0, target="n2 for 27 s (worker 0)"), ("worker", 0))
        slurmd = Fault("slurmd", node="n1", fired=13.0, target="slurmd of n1 restarted")
        lines = [
            (9.0, "cnn_fashion_mnist[worker 0]: step 1600/3000 loss 0.35"),
            (40.0, "cnn_fashion_mnist[worker 0]: error: lost ps 0 (n1): silent for 30 s (heartbeats every 5 s)"),
            (40.2, "cnn_fashion_mnist[worker 1]: error: ps 0 (n1) ended the job: it lost worker 0 (n2, the chief)"),
        ]
        shape = Fault("shape", duration=30.0, fired=12.0, target="5% loss, 2 ms delay, every link, 30 s")
        faults = [link, shape, slurmd]
        failures = ended(lines, faults)
        self.assertEqual(failures, [])
        self.assertEqual([f.outcome for f in faults], ["ended naming it", "went on", "went on"])

    def test_a_line_naming_an_untouched_task_fails(self):
        # As above, but the line of the cut-off chief without its name: it
        # cannot be told from a task that was not cut off.
        link = hit(Fault("link", node="n2", duration=27.0, fired=10.0, target="n2 for 27 s (worker 0)"), ("worker", 0))
        lines = [
            (9.0, "cnn_fashion_mnist[worker 0]: step 1600/3000 loss 0.35"),
            (40.0, "cnn_fashion_mnist: error: lost ps 0 (n1): silent for 30 s (heartbeats every 5 s)"),
        ]
        failures = ended(lines, [link])
        self.assertIn("the first line naming a lost task names ps 0, which no fault touched", failures[0])

    def test_a_stopped_spare_while_a_cut_off_worker_ends_the_job_is_ended_by_another(self):
        # Worker 1 cut off for 39 s ends the sync job (named); the spare,
        # stopped 5 s after the cut, took nothing down that anyone saw.
        link = hit(Fault("link", node="n2", duration=39.0, fired=10.0, target="n2 for 39 s (worker 1)"), ("worker", 1))
        stop = hit(Fault("stop", role="ps", index=2, duration=27.0, fired=15.0, target="ps 2 for 27 s"), ("ps", 2))
        lines = [
            (9.0, "pstrain[worker 0]: step 7500/30000 loss 0.15"),
            (40.0, "pstrain[ps 1]: error: lost worker 1 (n2) (silent for 30 s ...): sync training aggregates 2"),
            (43.0, "pstrain[ps 2]: error: lost worker 0 (n1, the chief) while this spare waited: Endpoint timeout"),
        ]
        failures = ended(lines, [link, stop])
        self.assertEqual(failures, [])
        self.assertEqual((link.outcome, stop.outcome), ("ended naming it", "ended by another"))

    def test_a_disk_fault_alone_that_ends_a_job_unnamed_fails(self):
        ro = Fault("readonly", duration=55.0, fired=13.0, target="read-only for 55 s")
        lines = [(9.0, "pstrain[worker 0]: step 7500/30000 loss 0.15")]
        failures = ended(lines, [ro])
        self.assertEqual(len(failures), 1)
        self.assertIn("no line names the checkpoint directory's error", failures[0])


class Accuracy(unittest.TestCase):
    """A completed job's accuracy against its fault-free runs: one value for
    a sync job, the range several async runs reached for an async one."""

    def judged(self, accuracy, baseline):
        j = job([(60.0, DONE)], [])
        j["done"]["test_accuracy"] = accuracy
        return decide(j, [], baseline, 0.01)

    def test_one_fault_free_run_allows_the_tolerance_either_side(self):
        self.assertEqual(self.judged(0.8705, BASE), [])
        failures = self.judged(0.8695, BASE)
        self.assertEqual(failures, ["test accuracy 0.8695 against 0.88 fault-free (tolerance 0.01)"])

    def test_several_fault_free_runs_allow_the_tolerance_beyond_their_range(self):
        base = dict(BASE, accuracy=0.8855, accuracies=[0.8855, 0.8766, 0.8821])
        self.assertEqual(self.judged(0.8727, base), [])
        self.assertEqual(self.judged(0.8950, base), [])
        failures = self.judged(0.8660, base)
        self.assertEqual(failures, ["test accuracy 0.866 against 0.8766-0.8855 in 3 runs fault-free (tolerance 0.01)"])
        self.assertEqual(len(self.judged(0.8960, base)), 1)


class Memory(unittest.TestCase):
    def series(self, values, every=2.0):
        return [(i * every, kb) for i, kb in enumerate(values)]

    def test_flat_memory_passes_and_is_summarised(self):
        failures, summary = memory_growth({7: self.series([27000] * 40)}, {7: "ps 0 (n1, pid 7)"})
        self.assertEqual(failures, [])
        self.assertEqual(summary, ["ps 0 (n1, pid 7) 26->26 MB over 78 s"])

    def test_memory_that_keeps_growing_fails(self):
        failures, _ = memory_growth({7: self.series([27000 + 2000 * i for i in range(40)])}, {7: "ps 0"})
        self.assertEqual(len(failures), 1)
        self.assertIn("ps 0: its resident memory grew from", failures[0])

    def test_a_start_that_grows_then_stays_passes(self):
        failures, _ = memory_growth({7: self.series([10000 + 1700 * i for i in range(10)] + [27000] * 30)}, {7: "ps"})
        self.assertEqual(failures, [])

    def test_a_series_too_short_is_not_judged(self):
        failures, summary = memory_growth({7: self.series([1000 * (i + 1) for i in range(10)])}, {7: "ps"})
        self.assertEqual((failures, summary), ([], []))


class Plans(unittest.TestCase):
    def test_ci_seed_13_draws_what_it_always_drew(self):
        # scripts/run-tests: bench/chaos --seed 13 --faults kill,stop,link,shape,full,readonly
        rng = random.Random(13)
        shape = {"ps": 3, "workers": 2, "nodes": 3, "slurmd_timeout": 60}
        allowed = ("kill", "stop", "link", "shape", "full", "readonly")
        first = [(e.at, [(f.kind, f.duration) for f in e.faults]) for e in draw_plan(rng, shape, allowed)]
        second = [(e.at, [(f.kind, f.role, f.index) for f in e.faults]) for e in draw_plan(rng, shape, allowed)]
        self.assertEqual(first, [(0.289, [("readonly", 50.1)])])
        self.assertEqual(second[0], (0.25, [("stop", "ps", 2), ("full", None, None)]))
        self.assertEqual(second[1], (0.584, [("kill", "worker", 1)]))

    def test_a_plan_of_one_whole_job_kind_never_doubles_it(self):
        rng = random.Random(7)
        for _ in range(200):
            for e in draw_plan(rng, {"ps": 3, "workers": 2, "nodes": 3}, ("requeue",)):
                self.assertEqual([f.kind for f in e.faults], ["requeue"])

    def test_every_kind_is_drawn(self):
        rng = random.Random(1)
        seen = {
            f.kind for _ in range(300) for e in draw_plan(rng, {"ps": 3, "workers": 2, "nodes": 3}) for f in e.faults
        }
        self.assertEqual(seen, set(KINDS))


if __name__ == "__main__":
    unittest.main()
