"""Checkpoints of a PyTorch job through `pstrain serve` tasks: real
processes on this machine (TF_CONFIG on 127.0.0.1, the build tree's
pstrain as $PSTRAIN_BIN): a checkpoint saved with 2 ps tasks restores onto
1 with the chief's own state, and a changed model is refused in one line."""

import json
import os
import random
import socket
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PSTRAIN = os.environ.get("PSTRAIN_BIN", "")


def free_ports(n):
    """n ports free now, below the kernel's ephemeral range: a port the
    kernel handed out (bind to 0) and that was closed again may be taken
    by the next outgoing connection's local end (the worker's to ps 0)
    before ps 1 listens on it."""
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        low = int(f.read().split()[0])
    rng = random.Random()
    ports = []
    while len(ports) < n:
        port = rng.randrange(10000, max(low, 10001))
        if port in ports:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    return ports


def run_job(num_ps, steps, directory, env_extra=None, timeout=120):
    """Runs num_ps `pstrain serve` tasks and one worker (the chief);
    returns (the chief's exit status, its stdout, its stderr)."""
    ports = free_ports(num_ps + 1)
    cluster = {"ps": ["127.0.0.1:%d" % p for p in ports[:num_ps]], "worker": ["127.0.0.1:%d" % ports[-1]]}
    env = dict(os.environ, PSTRAIN_LOG_FORMAT="text", **(env_extra or {}))
    env.pop("SLURM_JOB_ID", None)

    def tf_config(kind, index):
        return dict(env, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": kind, "index": index}}))

    servers = [
        subprocess.Popen(
            [PSTRAIN, "serve", "--checkpoint-dir", directory, "--bootstrap-timeout", "30"],
            env=tf_config("ps", i),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i in range(num_ps)
    ]
    chief = subprocess.Popen(
        [sys.executable, os.path.join(HERE, "ckpt_worker.py"), str(steps), directory],
        env=tf_config("worker", 0),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        out, err = chief.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        chief.kill()
        out, err = chief.communicate()
        err = "the chief did not finish within %d s\n%s" % (timeout, err)
    finally:
        for s in servers:
            try:
                _, ps_err = s.communicate(timeout=30 if chief.returncode == 0 else 5)
            except subprocess.TimeoutExpired:
                s.kill()
                _, ps_err = s.communicate()
            if chief.returncode != 0 and ps_err:
                err += "\n" + ps_err
    return chief.returncode, out, err


@unittest.skipUnless(PSTRAIN and os.access(PSTRAIN, os.X_OK), "PSTRAIN_BIN names no pstrain to run: skipped")
class CheckpointTest(unittest.TestCase):
    def test_a_checkpoint_of_two_ps_tasks_restores_onto_one_with_the_chiefs_state(self):
        with tempfile.TemporaryDirectory() as d:
            rc, out, err = run_job(2, 4, d)
            self.assertEqual(rc, 0, err)
            first = json.loads(out.strip().splitlines()[-1])
            self.assertIsNone(first["restored"])
            self.assertEqual(first["saved"], 4)
            listing = subprocess.run([PSTRAIN, "checkpoint", "inspect", d], capture_output=True, text=True)
            self.assertEqual(listing.returncode, 0, listing.stdout + listing.stderr)
            self.assertIn("complete, checksums good", listing.stdout)
            rc, out, err = run_job(1, 0, d)
            self.assertEqual(rc, 0, err)
            second = json.loads(out.strip().splitlines()[-1])
            self.assertEqual(second["restored"], 4)
            self.assertEqual(second["state"], {"epoch": 3, "note": "the chief's own"})
            for saved, restored in zip(first["after"], second["before"]):
                self.assertEqual(saved, restored)

    def test_a_model_changed_between_runs_is_refused_in_one_line(self):
        with tempfile.TemporaryDirectory() as d:
            rc, _, err = run_job(1, 2, d)
            self.assertEqual(rc, 0, err)
            rc, out, err = run_job(1, 2, d, {"CKPT_TEST_MODEL": "changed"})
            self.assertNotEqual(rc, 0)
            lines = [line for line in err.splitlines() if "holds another model" in line]
            self.assertEqual(len(lines), 1, err)
            self.assertIn(
                "the checkpoint at global step 2 in %s holds another model: its tensor '0.weight' [8, 4] "
                "is '0.weight' [16, 4] here: use the model that wrote it, or another checkpoint "
                "directory" % d,
                lines[0],
            )


if __name__ == "__main__":
    unittest.main()
