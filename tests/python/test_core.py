"""pstrain's core bindings over the loopback (LocalCluster, tests/python/local_cluster.py): tensors
by name, zero-copy views, tickets, rows, stats and errors."""

import gc
import os
import unittest

import numpy as np
from local_cluster import LocalCluster

import pstrain

SGD = pstrain.Settings(optimizer=pstrain.Optimizer("sgd", lr=0.5), tables=[pstrain.Table(dim=4)])
TENSORS = [("w", (2, 3)), ("b", (3,))]


class CoreTest(unittest.TestCase):
    def setUp(self):
        self.cluster = LocalCluster(num_ps=2, num_workers=1, settings=SGD)
        self.client = self.cluster.connect(0, TENSORS, settings=SGD)

    def tearDown(self):
        self.cluster.close()

    def start(self, w=1.0, b=2.0):
        self.client.param("w")[...] = w
        self.client.param("b")[...] = b
        self.client.wait(self.client.init())

    def test_the_chief_gets_a_chief_client_with_the_tensors_by_name(self):
        self.assertIsInstance(self.client, pstrain.ChiefClient)
        self.assertEqual(self.client.tensor_names, ["w", "b"])
        self.assertEqual(self.client.param("w").shape, (2, 3))
        self.assertEqual(self.client.grad("b").shape, (3,))
        self.assertEqual(self.client.params.shape, (9,))
        self.assertEqual(self.client.param("w").dtype, np.float32)

    def test_a_param_view_is_the_exchange_buffer_itself(self):
        w = self.client.param("w")
        w[1, 2] = 7.0
        self.assertEqual(self.client.params[5], 7.0)
        self.assertEqual(self.client.param("w").ctypes.data, self.client.params.ctypes.data)
        self.assertEqual(self.client.param("b").ctypes.data, self.client.params.ctypes.data + 6 * 4)

    def test_writing_a_grad_view_changes_what_push_sends(self):
        self.start()
        g = self.client.grad("w")
        g[...] = np.arange(6, dtype=np.float32).reshape(2, 3)
        self.client.wait(self.client.push("w"))
        np.testing.assert_array_equal(self.client.param("w").ravel(), 1.0 - 0.5 * np.arange(6, dtype=np.float32))
        np.testing.assert_array_equal(self.client.param("b"), [2.0, 2.0, 2.0])

    def test_a_view_keeps_the_client_alive(self):
        self.start(w=3.0)
        view = self.client.param("w")
        del self.client
        gc.collect()
        self.assertEqual(float(view[0, 0]), 3.0)
        self.assertIsNotNone(view.base)

    def test_step_pushes_everything_and_brings_the_new_values(self):
        self.start()
        self.client.grads[...] = 1.0
        self.client.step()
        np.testing.assert_array_equal(self.client.params, [0.5] * 6 + [1.5] * 3)
        self.assertEqual(self.client.global_step, 1)

    def test_a_ticket_tests_true_once_complete(self):
        self.start()
        t = self.client.pull("b")
        while not self.client.test(t):
            pass
        self.assertTrue(self.client.test(t))
        self.client.wait(t)
        np.testing.assert_array_equal(self.client.param("b"), [2.0, 2.0, 2.0])

    def test_rows_are_pulled_and_pushed_by_key(self):
        self.start()
        keys = np.array([3, 2**63 + 5, 11], dtype=np.uint64)
        rows = np.zeros((3, 4), np.float32)
        self.client.wait(self.client.pull_rows(0, keys, rows))
        self.assertTrue(np.all(np.abs(rows) <= 0.05))
        self.assertTrue(np.any(rows != 0))
        again = np.zeros((3, 4), np.float32)
        self.client.wait(self.client.pull_rows(0, keys.view(np.int64), again))
        np.testing.assert_array_equal(rows, again)
        self.client.wait(self.client.push_rows(0, keys, np.ones((3, 4), np.float32)))
        after = np.zeros((3, 4), np.float32)
        self.client.wait(self.client.lookup_rows(0, keys, after))
        self.assertTrue(np.all(after < rows))

    def test_stats_count_each_ps_step_and_workers(self):
        self.start()
        self.client.step()
        stats = self.client.stats()
        self.assertEqual(len(stats), 2)
        for s in stats:
            self.assertEqual(s["step"], 1)
            self.assertGreater(s["bytes_received"], 0)
            self.assertEqual(s["workers"][0]["gradients"], 1)

    def test_a_missing_name_is_an_error_naming_the_tensors(self):
        with self.assertRaisesRegex(pstrain.Error, r"^no tensor named 'x': connect\(\) was given 'w', 'b'$"):
            self.client.param("x")

    def test_keys_of_another_type_are_refused_with_the_fix(self):
        self.start()
        with self.assertRaisesRegex(
            pstrain.Error, r"^keys must be a 1-D C-contiguous uint64 or int64 array, got float64 \(2,\): pass"
        ):
            self.client.pull_rows(0, np.array([1.0, 2.0]), np.zeros(8, np.float32))

    def test_a_non_contiguous_out_is_refused_with_the_fix(self):
        self.start()
        out = np.zeros((2, 8), np.float32)[:, ::2]
        with self.assertRaisesRegex(
            pstrain.Error,
            r"^out must be a C-contiguous float32 array, got float32 \(2, 4\): pass numpy.ascontiguousarray",
        ):
            self.client.pull_rows(0, np.array([1, 2], np.uint64), out)

    def test_an_out_of_the_wrong_size_is_refused(self):
        self.start()
        with self.assertRaisesRegex(pstrain.Error, r"^out has 4 floats, the keys need 8 \(len\(keys\) \* dim\)"):
            self.client.pull_rows(0, np.array([1, 2], np.uint64), np.zeros(4, np.float32))

    def test_a_float64_grad_array_is_refused(self):
        self.start()
        with self.assertRaisesRegex(pstrain.Error, r"^grads must be a C-contiguous float32 array, got float64"):
            self.client.push_rows(0, np.array([1], np.uint64), np.zeros(4, np.float64))

    def test_an_unknown_table_is_refused(self):
        self.start()
        with self.assertRaisesRegex(pstrain.Error, r"^no table 1: connect\(\) was given 1 tables"):
            self.client.pull_rows(1, np.array([1], np.uint64), np.zeros(4, np.float32))


class ShapesTest(unittest.TestCase):
    def test_a_name_given_twice_is_an_error(self):
        with LocalCluster(settings=SGD) as cl:
            with self.assertRaisesRegex(pstrain.Error, r"^tensor 'w' is named twice: give each tensor its own name$"):
                cl.connect(0, [("w", 2), ("w", 3)], settings=SGD)

    def test_a_zero_dimension_is_an_error(self):
        with LocalCluster(settings=SGD) as cl:
            with self.assertRaisesRegex(
                pstrain.Error, r"^tensor 'w' has a dimension of 0: every dimension must be 1 or more$"
            ):
                cl.connect(0, [("w", (2, 0))], settings=SGD)

    def test_an_unknown_optimizer_is_an_error(self):
        bad = pstrain.Settings(optimizer=pstrain.Optimizer("lbfgs"))
        with self.assertRaises(pstrain.Error):
            LocalCluster(settings=bad)

    def test_adagrad_accumulators_that_start_at_0_are_refused_with_the_fix(self):
        for make, what in (
            (lambda: pstrain.Optimizer("adagrad", adagrad_initial=0.0), "Optimizer"),
            (lambda: pstrain.Table(dim=4, adagrad_initial=0.0), "Table"),
        ):
            with self.assertRaisesRegex(
                pstrain.Error,
                r"^%s\(adagrad_initial=0.0\): Adagrad's accumulators must start above 0 .*"
                r"pass a small positive value, e\.g\. 1e-8, or the default 0\.1$" % what,
            ):
                make()
        # Other optimizers keep no accumulator: 0 is no concern of theirs.
        self.assertEqual(pstrain.Optimizer("adam", adagrad_initial=0.0).name, "adam")


class InitTest(unittest.TestCase):
    def test_init_without_a_role_says_how_to_get_one(self):
        hidden = {
            k: os.environ.pop(k)
            for k in list(os.environ)
            if k == "TF_CONFIG" or k.startswith(("PSTRAIN_", "PMIX_", "SLURM_"))
        }
        try:
            with self.assertRaisesRegex(
                pstrain.Error, r"^no role: run under sbatch/srun --ps=N --workers=M, or set TF_CONFIG$"
            ):
                pstrain.init(timeout=2)
        finally:
            os.environ.update(hidden)

    def test_init_joins_once_and_later_calls_return_the_same_context(self):
        # A second bootstrap would wait for peers that never join it.
        calls = []
        real = pstrain._core.connect_task
        pstrain._core.connect_task = lambda *a: calls.append(a) or object()
        try:
            first = pstrain.init()
            self.assertIs(pstrain.init(), first)
            self.assertIs(pstrain.init(timeout=5), first)
            self.assertEqual(len(calls), 1)
            with self.assertRaisesRegex(
                pstrain.Error, r"^pstrain.init\(\) joined this process to its step already, with other arguments"
            ):
                pstrain.init(task_index=3)
        finally:
            pstrain._core.connect_task = real
            pstrain._the_context, pstrain._the_arguments = None, ()

    def test_the_device_is_a_workers_first_visible_gpu_else_the_cpu(self):
        class Task:
            def __init__(self, role):
                self.role = role

        device = pstrain.Context.device.fget
        before = os.environ.get("CUDA_VISIBLE_DEVICES")
        try:
            for visible, worker, ps in [
                ("3", "cuda:0", "cpu"),  # the plugin's binding: one GPU of the node's
                ("2,3", "cuda:0", "cpu"),
                ("", "cpu", "cpu"),  # what the plugin gives a ps task
                ("-1", "cpu", "cpu"),
                ("NoDevFiles", "cpu", "cpu"),
                (None, "cpu", "cpu"),
            ]:
                if visible is None:
                    os.environ.pop("CUDA_VISIBLE_DEVICES", None)
                else:
                    os.environ["CUDA_VISIBLE_DEVICES"] = visible
                self.assertEqual(device(Task("worker")), worker, f"CUDA_VISIBLE_DEVICES={visible}")
                self.assertEqual(device(Task("ps")), ps, f"CUDA_VISIBLE_DEVICES={visible}")
        finally:
            if before is None:
                os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            else:
                os.environ["CUDA_VISIBLE_DEVICES"] = before


class PeerErrorsTest(unittest.TestCase):
    def test_a_worker_with_another_model_gets_the_ps_refusal_naming_it(self):
        s = pstrain.Settings(sync=True)
        with LocalCluster(num_ps=1, num_workers=2, settings=s) as cl:
            c0 = cl.connect(0, [("w", (2, 3))], settings=s)
            c1 = cl.connect(1, [("w", (2, 4))], settings=s, timeout=5)
            c0.wait(c0.init())
            with self.assertRaises(pstrain.PeerError) as caught:
                c1.wait(c1.pull())
            self.assertEqual(caught.exception.peer, "ps 0")
            self.assertIn("a model of 8 parameters where the chief's has 6", str(caught.exception))
            self.assertIsInstance(caught.exception, pstrain.Error)

    def test_a_lost_ps_is_a_peer_error_that_names_it(self):
        with LocalCluster(num_ps=2, num_workers=1, settings=SGD) as cl:
            c = cl.connect(0, TENSORS, settings=SGD, timeout=5)
            c.wait(c.init())
            cl.kill_ps(1)
            with self.assertRaises(pstrain.PeerError) as caught:
                c.step()
            self.assertEqual(caught.exception.peer, "ps 1")


class JoinFileTest(unittest.TestCase):
    """pstrain.init(join=...): the join file a running elastic job's ps 0
    writes, read before anything connects (the integration test joins a
    running job with it)."""

    def setUp(self):
        import tempfile

        self.dir = tempfile.mkdtemp()
        self.path = os.path.join(self.dir, "join")
        with open(self.path, "w") as f:
            f.write("# pstrain join file: pstrain --join FILE --task-index I takes lost worker I's place\n")
            f.write("ps n1:40001 n2:40002\nworkers 3\nkey " + "ab" * 32 + "\n")
        self.saved = {k: os.environ.get(k) for k in ("PSTRAIN_JOIN", "PSTRAIN_JOIN_INDEX", "PSTRAIN_AUTH_KEY")}

    def tearDown(self):
        import shutil

        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
        shutil.rmtree(self.dir)

    def test_the_file_gives_the_ps_hosts_every_worker_and_the_key(self):
        ps, workers, key = pstrain._join_file(self.path, 2, "join")
        self.assertEqual(ps, "n1:40001,n2:40002")
        hosts = workers.split(",")
        self.assertEqual(len(hosts), 3)
        self.assertEqual(hosts[:2], ["joined:1", "joined:1"])
        self.assertTrue(hosts[2].endswith(":1") and hosts[2] != "joined:1", hosts[2])
        self.assertEqual(key, "ab" * 32)

    def test_a_bad_index_file_or_setting_is_one_line_naming_the_fix(self):
        with self.assertRaisesRegex(
            pstrain.Error,
            r"^join=.*/join: give the index of the lost worker whose place to take, 1 to 2 \(worker 0 is the chief",
        ):
            pstrain.init(join=self.path, task_index=0)
        with self.assertRaisesRegex(
            pstrain.Error, r"^join=.*/join: give the index of the lost worker whose place to take, 1 to 2 "
        ):
            pstrain.init(join=self.path, task_index=3)
        missing = os.path.join(self.dir, "none")
        with self.assertRaisesRegex(
            pstrain.Error, r"^join=.*/none: cannot read the join file: No such file or directory: give"
        ):
            pstrain.init(join=missing, task_index=1)
        other = os.path.join(self.dir, "other")
        with open(other, "w") as f:
            f.write("hello\n")
        with self.assertRaisesRegex(
            pstrain.Error, r"^join=.*/other is not a pstrain join file: give the job's DIR/join"
        ):
            pstrain.init(join=other, task_index=1)
        with self.assertRaisesRegex(
            pstrain.Error, r"gives the job's hosts: leave out ps_hosts, worker_hosts and job_name$"
        ):
            pstrain.init(join=self.path, task_index=1, ps_hosts="n1:1")
        os.environ["PSTRAIN_JOIN"] = self.path
        os.environ.pop("PSTRAIN_JOIN_INDEX", None)
        with self.assertRaisesRegex(
            pstrain.Error,
            r"^PSTRAIN_JOIN=.*/join: give the index of the lost worker whose place to take: task_index=I, or PSTRAIN_JOIN_INDEX=I$",
        ):
            pstrain.init()
        self.assertEqual(
            os.environ.get("PSTRAIN_AUTH_KEY"), self.saved["PSTRAIN_AUTH_KEY"], "a refused join sets no key"
        )


class WirePrecisionTest(unittest.TestCase):
    """wire_precision="bf16": values come back rounded to bfloat16, the PS keeps float32."""

    def test_bf16_values_are_rounded_and_the_ps_keeps_float32(self):
        sgd = pstrain.Settings(optimizer=pstrain.Optimizer("sgd", lr=1.0))
        with LocalCluster(settings=sgd, share_memory=False, wire_precision="bf16") as cl:
            c = cl.connect(0, [("w", (2,))], settings=sgd)
            c.param("w")[...] = [0.1, 1.0]
            c.wait(c.init())  # its reply is float32
            np.testing.assert_array_equal(c.param("w"), np.array([0.1, 1.0], dtype=np.float32))
            c.wait(c.pull())
            np.testing.assert_array_equal(c.param("w"), np.array([0.10009765625, 1.0], dtype=np.float32))
            c.grad("w")[...] = [0.0, -(2.0**-12)]
            for _ in range(32):
                c.wait(c.push("w"))
            # 1 + 32 * 2^-12 = 1 + 2^-7: bf16 holds it; a PS that kept bf16 would be at 1.
            self.assertEqual(float(c.param("w")[1]), 1.0 + 2.0**-7)
            stats = c.stats()[0]
            # 64-byte frames (the hello's with 44 bytes of settings); w's 2
            # numbers are 4 bytes each way, but in the init and its reply
            # (float32: 8).
            self.assertEqual(stats["bytes_received"], (64 + 44) + (64 + 8) + 64 + 32 * (64 + 4) + 64)
            self.assertEqual(stats["bytes_sent"], 64 + (64 + 8) + 33 * (64 + 4))

    def test_a_worker_of_another_wire_precision_is_refused_naming_both(self):
        with LocalCluster(settings=SGD, share_memory=False) as cl:
            with self.assertRaises(pstrain.PeerError) as e:
                c = cl.connect(0, TENSORS, settings=SGD, wire_precision="bf16")
                c.wait(c.init())
            self.assertIn(
                "worker 0 sends bf16 on the wire and this PS fp32: give every task of the job the same --wire-precision",
                str(e.exception),
            )

    def test_an_unknown_wire_precision_is_an_error_naming_the_words(self):
        with self.assertRaises(pstrain.Error) as e:
            LocalCluster(settings=SGD, wire_precision="fp16")
        self.assertEqual(str(e.exception), "wire_precision 'fp16' is none pstrain knows: use 'fp32' or 'bf16'")


if __name__ == "__main__":
    unittest.main()
