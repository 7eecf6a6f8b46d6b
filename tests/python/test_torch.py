"""pstrain.torch with real PyTorch over the loopback (LocalCluster, tests/python/local_cluster.py):
the DistributedOptimizer against torch.optim on the averaged gradient, the
embedding tables against torch.nn.EmbeddingBag, and bad input."""

import copy
import sys
import threading
import unittest

import numpy as np
import torch
from local_cluster import LocalCluster

import pstrain
import pstrain.torch
from pstrain.torch import DistributedOptimizer, ElasticSampler, Embedding, EmbeddingBag
from pstrain.torch.staging import StagedParameters, bucket_plan

torch.set_num_threads(1)


def small_model(seed=0):
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 3))


def batch(seed=1, n=8):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(n, 4, generator=g), torch.randint(0, 3, (n,), generator=g)


def run_workers(num_workers, target):
    """Runs target(k) for each worker on its own thread; re-raises the first error."""
    errors = []

    def guarded(k):
        try:
            target(k)
        except BaseException as e:  # noqa: B902 - handed to the test's thread
            errors.append(e)

    threads = [threading.Thread(target=guarded, args=(k,)) for k in range(num_workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    if errors:
        raise errors[0]


class DenseTest(unittest.TestCase):
    steps = 5

    def reference(self, model, make_optimizer, x, y):
        opt = make_optimizer(model.parameters())
        for _ in range(self.steps):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        return model

    def distributed(self, model, sync, x, y, num_workers=2, **optimizer):
        models = [copy.deepcopy(model) for _ in range(num_workers)]
        if num_workers > 1:
            with torch.no_grad():  # worker 1 starts from the PS values, not its own
                for p in models[1].parameters():
                    p.add_(1.0)
        share = len(x) // num_workers
        trained = threading.Barrier(num_workers)
        self.live_workers = {}
        self.sampled = {}
        with LocalCluster(num_ps=2, num_workers=num_workers) as cl:

            def work(k):
                m = models[k]
                opt = DistributedOptimizer(
                    m.named_parameters(), sync=sync, context=cl.context(k), embeddings=[], **optimizer
                )
                xs, ys = x[k * share : (k + 1) * share], y[k * share : (k + 1) * share]
                for _ in range(self.steps):
                    opt.zero_grad()
                    torch.nn.functional.cross_entropy(m(xs), ys).backward()
                    opt.step()
                self.live_workers[k] = opt.live_workers
                self.bucketed = opt._bucketed
                self.sampled[k] = sorted(ElasticSampler(9, opt, seed=3))
                trained.wait(60)  # the chief ends the job after every worker's last step
                if k == 0:
                    stats = opt.stats()[0]
                    self.global_step = stats["step"]
                    self.worker_stats = stats["workers"]
                    self.settings = opt.settings
                    opt.finish()

            run_workers(num_workers, work)
        return models

    def assert_same(self, a, b, atol):
        for (n, p), q in zip(a.named_parameters(), b.parameters()):
            np.testing.assert_allclose(p.detach().numpy(), q.detach().numpy(), atol=atol, rtol=0, err_msg=n)

    def test_two_sync_workers_with_sgd_equal_sgd_on_the_averaged_gradient(self):
        x, y = batch()
        model = small_model()
        expected = self.reference(copy.deepcopy(model), lambda p: torch.optim.SGD(p, lr=0.1), x, y)
        got = self.distributed(model, True, x, y, optimizer="sgd", lr=0.1)
        self.assertEqual(self.global_step, self.steps)
        self.assert_same(got[0], expected, 1e-6)
        self.assert_same(got[1], expected, 1e-6)

    def test_two_sync_workers_with_adam_equal_adam_on_the_averaged_gradient(self):
        x, y = batch()
        model = small_model()
        expected = self.reference(copy.deepcopy(model), lambda p: torch.optim.Adam(p, lr=0.01), x, y)
        got = self.distributed(model, True, x, y, optimizer="adam", lr=0.01)
        self.assert_same(got[0], expected, 1e-5)
        self.assert_same(got[1], expected, 1e-5)

    def test_two_async_workers_apply_every_gradient(self):
        x, y = batch(n=64)
        model = small_model()
        before = torch.nn.functional.cross_entropy(model(x), y).item()
        got = self.distributed(model, False, x, y, optimizer="sgd", lr=0.2)
        self.assertEqual(self.global_step, 2 * self.steps)
        after = torch.nn.functional.cross_entropy(got[0](x), y).item()
        self.assertLess(after, before)

    def test_async_workers_in_lock_step_with_max_staleness_0(self):
        x, y = batch(n=64)
        got = self.distributed(small_model(), False, x, y, optimizer="sgd", lr=0.2, max_staleness=0, elastic=True)
        self.assertEqual(self.global_step, 2 * self.steps)
        self.assertEqual((self.settings.max_staleness, self.settings.elastic), (0, True))
        self.assertEqual(self.live_workers, {0: (2, 0), 1: (2, 1)})
        # Each worker's pass over a dataset of 9: its own half, once each.
        self.assertEqual(self.sampled, {0: [0, 2, 4, 6, 8], 1: [1, 3, 5, 7]})
        # Lock-step: a worker's gradient is at most one update (the other's) old.
        self.assertLessEqual(max(w["staleness_max"] for w in self.worker_stats), 1)
        self.assert_same(got[0], got[1], 0)

    def test_parameters_and_grads_are_views_of_the_exchange_buffers(self):
        model = small_model()
        with LocalCluster() as cl:
            opt = DistributedOptimizer(
                model.named_parameters(), optimizer="sgd", lr=0.1, sync=False, context=cl.context(0), embeddings=[]
            )
            for n, p in model.named_parameters():
                self.assertEqual(p.data_ptr(), opt.client.param(n).ctypes.data, n)
                self.assertEqual(p.grad.data_ptr(), opt.client.grad(n).ctypes.data, n)
            x, y = batch()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            w = model[0].weight
            self.assertEqual(w.grad.data_ptr(), opt.client.grad("0.weight").ctypes.data)
            expected = (w.detach() - 0.1 * w.grad).clone()
            opt.step()
            self.assertEqual(w.data_ptr(), opt.client.param("0.weight").ctypes.data)
            np.testing.assert_allclose(w.detach().numpy(), expected.numpy(), atol=1e-7)
            opt.zero_grad()
            self.assertEqual(float(opt.client.grads.__abs__().max()), 0.0)
            opt.finish()

    def test_model_zero_grad_that_sets_none_still_steps_right(self):
        model = small_model()
        with LocalCluster() as cl:
            opt = DistributedOptimizer(
                model.named_parameters(), optimizer="sgd", lr=0.1, sync=False, context=cl.context(0), embeddings=[]
            )
            model.zero_grad()  # torch's default: grads set to None
            x, y = batch()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            expected = (model[2].bias.detach() - 0.1 * model[2].bias.grad).clone()
            opt.step()
            np.testing.assert_allclose(model[2].bias.detach().numpy(), expected.numpy(), atol=1e-7)
            self.assertEqual(model[2].bias.grad.data_ptr(), opt.client.grad("2.bias").ctypes.data)
            opt.finish()


class StagedTest(unittest.TestCase):
    """A model that keeps its own storage (staged=True on the CPU: the
    schedule a model on a GPU runs, with plain copies standing in for the
    copy streams)."""

    steps = DenseTest.steps
    reference = DenseTest.reference
    distributed = DenseTest.distributed
    assert_same = DenseTest.assert_same

    def test_the_buckets_go_last_tensor_first_up_to_their_caps(self):
        self.assertEqual(bucket_plan([4, 4, 4, 4], first_cap=8, cap=12), [[3, 2], [1, 0]])
        self.assertEqual(bucket_plan([4, 100, 4, 4, 4], first_cap=8, cap=8), [[4, 3], [2], [1], [0]])
        self.assertEqual(bucket_plan([40], first_cap=8, cap=8), [[0]])
        self.assertEqual(bucket_plan([1, 2, 3]), [[2, 1, 0]])

    def test_staged_sync_and_async_workers_end_where_views_end_bit_for_bit(self):
        x, y = batch(n=64)
        for sync, optimizer in ((True, dict(optimizer="adam", lr=0.01)), (False, dict(optimizer="sgd", lr=0.2))):
            with self.subTest(sync=sync):
                views = self.distributed(small_model(), sync, x, y, num_workers=1, **optimizer)
                staged = self.distributed(small_model(), sync, x, y, num_workers=1, staged=True, **optimizer)
                self.assert_same(staged[0], views[0], 0)
        x, y = batch()
        expected = self.reference(small_model(), lambda p: torch.optim.Adam(p, lr=0.01), x, y)
        got = self.distributed(small_model(), True, x, y, staged=True, optimizer="adam", lr=0.01)
        self.assert_same(got[0], expected, 1e-5)
        self.assert_same(got[1], expected, 1e-5)

    # The overlapped sync step: a staged model's gradient pushed bucket by
    # bucket (here four of the small model's tensors, one bucket across the
    # two PS tasks' shards), each PS applying a bucket as soon as both
    # workers' are in: the values of one push, bit for bit.
    def test_sync_buckets_end_where_one_push_ends_bit_for_bit(self):
        x, y = batch(n=64)
        views = self.distributed(small_model(), True, x, y, optimizer="adam", lr=0.01)
        self.assertFalse(self.bucketed)
        got = self.distributed(
            small_model(), True, x, y, staged=True, bucket_cap_mb=100 / (1 << 20), optimizer="adam", lr=0.01
        )
        self.assertTrue(self.bucketed)
        self.assertEqual(self.global_step, self.steps)
        self.assert_same(got[0], views[0], 0)
        self.assert_same(got[1], views[0], 0)

    # The overlapped async step: one worker's staged model pushes bucket by
    # bucket, each PS applying every bucket on arrival as the step's one
    # Adam update: the values of one push, bit for bit, and one global step
    # a step, not a bucket.
    def test_async_buckets_end_where_one_push_ends_bit_for_bit(self):
        x, y = batch(n=64)
        views = self.distributed(small_model(), False, x, y, num_workers=1, optimizer="adam", lr=0.01)
        got = self.distributed(
            small_model(),
            False,
            x,
            y,
            num_workers=1,
            staged=True,
            bucket_cap_mb=100 / (1 << 20),
            optimizer="adam",
            lr=0.01,
        )
        self.assertTrue(self.bucketed)
        self.assertEqual(self.global_step, self.steps)
        self.assertEqual(self.worker_stats[0]["gradients"], self.steps)
        self.assert_same(got[0], views[0], 0)

    def test_bucket_cap_mb_is_for_staged_models_and_above_0(self):
        with LocalCluster(num_ps=1, num_workers=1) as cl:
            for kwargs, said in (
                (dict(bucket_cap_mb=1), "give staged=True (or a model on a GPU) to push in buckets"),
                (dict(bucket_cap_mb=0, staged=True), "bucket_cap_mb=0: give the buckets' size in MB"),
            ):
                with self.subTest(**kwargs), self.assertRaises(pstrain.Error) as e:
                    DistributedOptimizer(small_model().named_parameters(), context=cl.context(0), **kwargs)
                self.assertIn(said, str(e.exception))

    def test_backward_copies_each_bucket_once_it_is_complete_last_layer_first(self):
        torch.manual_seed(0)
        model = torch.nn.Sequential(*(torch.nn.Linear(16, 16) for _ in range(4)))
        with LocalCluster() as cl:
            ctx = cl.context(0)
            params = StagedParameters(model.named_parameters(), first_bucket_bytes=1100, bucket_bytes=2200)
            # 8 tensors (weights 1024 bytes, biases 64), the last first: 3.bias
            # and 3.weight (1088 bytes), then layers 2 and 1 (2176), then 0.
            self.assertEqual(params.buckets, [[7, 6], [5, 4, 3, 2], [1, 0]])
            client = ctx.connect(tensors=params.tensors(), settings=pstrain.Settings(sync=False))
            params.copy_in(client)
            client.wait(client.init())
            params.attach(client)
            # While backward computes the first layer's gradient, the last
            # layers' buckets are in the buffer already.
            seen = []
            model[0].weight.register_hook(lambda g: seen.append(list(params.copied_order)))
            torch.nn.functional.mse_loss(model(torch.randn(4, 16)), torch.zeros(4, 16)).backward()
            self.assertEqual(seen, [[0, 1]])
            self.assertEqual(params.copied_order, [0, 1, 2])
            for n, p in model.named_parameters():
                np.testing.assert_array_equal(client.grad(n), p.grad.numpy(), err_msg=n)
            params.release()
            client.shutdown()

    def test_clipping_between_backward_and_step_is_what_the_push_sends(self):
        x, y = batch()
        reference = small_model()
        sgd = torch.optim.SGD(reference.parameters(), lr=0.5)
        model = small_model()
        with LocalCluster() as cl:
            opt = DistributedOptimizer(
                model.named_parameters(), optimizer="sgd", lr=0.5, sync=False, context=cl.context(0), staged=True
            )
            for _ in range(3):
                for m, o in ((model, opt), (reference, sgd)):
                    o.zero_grad()
                    torch.nn.functional.cross_entropy(m(x), y).backward()
                    torch.nn.utils.clip_grad_norm_(m.parameters(), 0.05)  # in place, after the hooks copied
                    o.step()
            opt.finish()
        self.assert_same(model, reference, 1e-7)

    def test_set_to_none_and_a_parameter_backward_never_reached_step_right(self):
        model = small_model()
        spare = torch.nn.Linear(2, 2)  # in the optimizer, never in a forward
        named = [*model.named_parameters(), *(("spare." + n, p) for n, p in spare.named_parameters())]
        before = [p.detach().clone() for p in spare.parameters()]
        with LocalCluster() as cl:
            opt = DistributedOptimizer(named, optimizer="sgd", lr=0.1, sync=False, context=cl.context(0), staged=True)
            x, y = batch()
            for _ in range(2):
                opt.zero_grad(set_to_none=True)
                self.assertIsNone(model[2].bias.grad)
                torch.nn.functional.cross_entropy(model(x), y).backward()
                expected = (model[2].bias.detach() - 0.1 * model[2].bias.grad).clone()
                opt.step()
                np.testing.assert_allclose(model[2].bias.detach().numpy(), expected.numpy(), atol=1e-7)
            opt.finish()
        for p, b in zip(spare.parameters(), before):
            np.testing.assert_array_equal(p.detach().numpy(), b.numpy())

    def test_a_compiled_model_steps_as_the_eager_one_staged_or_not(self):
        x, y = batch()
        eager = self.distributed(small_model(), True, x, y, num_workers=1, optimizer="sgd", lr=0.1)[0]
        for staged in (False, True):
            with self.subTest(staged=staged):
                model = small_model()
                compiled = torch.compile(model, backend="aot_eager")  # AOTAutograd's graphs, no code generation
                with LocalCluster() as cl:
                    opt = DistributedOptimizer(
                        model.named_parameters(),
                        optimizer="sgd",
                        lr=0.1,
                        sync=True,
                        context=cl.context(0),
                        staged=staged,
                    )
                    for _ in range(self.steps):
                        opt.zero_grad()
                        torch.nn.functional.cross_entropy(compiled(x), y).backward()
                        opt.step()
                    opt.finish()
                self.assert_same(model, eager, 0)

    def test_a_parameter_on_a_device_it_cannot_stage_is_refused(self):
        model = torch.nn.Linear(2, 2, device="meta")
        with self.assertRaisesRegex(
            pstrain.Error, r"^parameter 'weight' is on meta: pstrain stages cpu and cuda parameters; move the model$"
        ):
            DistributedOptimizer(model.named_parameters(), context=object())

    @unittest.skipUnless(torch.cuda.is_available(), "no CUDA device")
    def test_a_model_on_the_gpu_trains_as_on_the_cpu(self):
        x, y = batch(n=64)
        cpu = self.distributed(small_model(), True, x, y, optimizer="adam", lr=0.01)
        gpu = self.distributed(small_model().cuda(), True, x.cuda(), y.cuda(), optimizer="adam", lr=0.01)
        for (n, p), q in zip(gpu[0].named_parameters(), cpu[0].parameters()):
            self.assertEqual(p.device.type, "cuda", n)
            np.testing.assert_allclose(p.detach().cpu().numpy(), q.detach().numpy(), atol=1e-5, rtol=0, err_msg=n)


class MixedPrecisionTest(unittest.TestCase):
    """torch.amp.GradScaler with DistributedOptimizer: gradients unscaled
    before the push, a step with inf or NaN skipped on every worker alike."""

    steps = DenseTest.steps
    assert_same = DenseTest.assert_same

    def scaled_run(self, num_workers, x, y, optimizer, overflow=None, clip=None, staged=False, **extra):
        """Each worker's model after `steps` scaler steps; worker k's loss
        is inf at its step `overflow[k]` (a gradient overflow)."""
        models = [small_model() for _ in range(num_workers)]
        share = len(x) // num_workers
        self.global_steps = {}
        with LocalCluster(num_ps=2, num_workers=num_workers) as cl:

            def work(k):
                m = models[k]
                opt = DistributedOptimizer(
                    m.named_parameters(),
                    optimizer=optimizer,
                    lr=0.01,
                    sync=True,
                    context=cl.context(k),
                    staged=staged,
                    **extra,
                )
                scaler = torch.amp.GradScaler("cpu", init_scale=2.0**10)
                xs, ys = x[k * share : (k + 1) * share], y[k * share : (k + 1) * share]
                for step in range(self.steps):
                    opt.zero_grad()
                    loss = torch.nn.functional.cross_entropy(m(xs), ys)
                    if overflow and overflow.get(k) == step:
                        loss = loss * float("inf")
                    scaler.scale(loss).backward()
                    if clip is not None:
                        scaler.unscale_(opt)
                        torch.nn.utils.clip_grad_norm_(m.parameters(), clip)
                    scaler.step(opt)
                    scaler.update()
                self.global_steps[k] = opt.global_step
                if k == 0:
                    opt.finish()

            run_workers(num_workers, work)
        return models

    def reference(self, x, y, optimizer, skipped=(), clip=None):
        """The optimizer on the whole batch (the workers' averaged
        gradient), the skipped steps left out."""
        model = small_model()
        opt = (torch.optim.Adam if optimizer == "adam" else torch.optim.SGD)(model.parameters(), lr=0.01)
        for step in range(self.steps):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(x), y).backward()
            if clip is not None:
                torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
            if step not in skipped:
                opt.step()
        return model

    # SGD where the scale would show: Adam's update hardly depends on it.
    def test_scaled_gradients_are_unscaled_before_the_push(self):
        x, y = batch()
        for staged in (False, True):
            with self.subTest(staged=staged):
                got = self.scaled_run(2, x, y, "sgd", staged=staged)
                self.assertEqual(self.global_steps, {0: self.steps, 1: self.steps})
                self.assert_same(got[0], self.reference(x, y, "sgd"), 1e-6)

    def test_an_overflow_on_one_worker_skips_the_step_on_every_ps_and_worker(self):
        x, y = batch()
        got = self.scaled_run(2, x, y, "adam", overflow={1: 2})
        # The step of worker 1's overflow applied nothing, Adam's state neither.
        self.assertEqual(self.global_steps, {0: self.steps - 1, 1: self.steps - 1})
        expected = self.reference(x, y, "adam", skipped={2})
        self.assert_same(got[0], expected, 1e-5)
        self.assert_same(got[1], expected, 1e-5)

    # Buckets: the scaler's step unscales before any bucket goes, a clipped
    # gradient goes as clipped, and the overflow's worker pushes every
    # bucket as skipped, so that no PS applies any bucket of that step.
    def test_bucketed_staged_steps_unscale_clip_and_skip_as_one_push_does(self):
        x, y = batch()
        tiny = 100 / (1 << 20)
        got = self.scaled_run(2, x, y, "adam", overflow={1: 2}, staged=True, bucket_cap_mb=tiny)
        self.assertEqual(self.global_steps, {0: self.steps - 1, 1: self.steps - 1})
        expected = self.reference(x, y, "adam", skipped={2})
        self.assert_same(got[0], expected, 1e-5)
        self.assert_same(got[1], expected, 1e-5)
        got = self.scaled_run(1, x, y, "sgd", clip=0.05, staged=True, bucket_cap_mb=tiny)
        self.assert_same(got[0], self.reference(x, y, "sgd", clip=0.05), 1e-6)

    def test_unscale_then_clip_then_step_unscales_once(self):
        x, y = batch()
        got = self.scaled_run(1, x, y, "sgd", clip=0.05)
        self.assert_same(got[0], self.reference(x, y, "sgd", clip=0.05), 1e-6)


class LeaveTest(unittest.TestCase):
    def test_a_worker_that_ends_leaves_and_sync_training_goes_on_with_the_chief(self):
        # Not elastic: a lost worker would end the job; one that left does not.
        models = [small_model(), small_model()]
        x, y = batch(n=8)
        self.step = None
        with LocalCluster(num_ps=1, num_workers=2) as cl:

            def work(k):
                m = models[k]
                opt = DistributedOptimizer(
                    m.named_parameters(), sync=True, context=cl.context(k), embeddings=[], optimizer="sgd", lr=0.1
                )
                for _ in range(2 if k else 4):
                    opt.zero_grad()
                    torch.nn.functional.cross_entropy(m(x), y).backward()
                    opt.step()
                if k == 0:
                    self.step = opt.stats()[0]["step"]
                opt.finish()  # worker 1: leaves; the chief: ends the job

            run_workers(2, work)
        self.assertEqual(self.step, 4)

    def test_at_exit_unfinished_optimizers_finish_unless_the_program_crashed(self):
        class Unfinished:
            finished = 0

            def finish(self):
                self.finished += 1

        opt = Unfinished()
        pstrain.torch.optimizer._unfinished.add(opt)
        try:
            sys.last_value = ValueError("an uncaught exception")
            pstrain.torch.optimizer._finish_at_exit()
            self.assertEqual(opt.finished, 0)
            del sys.last_value
            pstrain.torch.optimizer._finish_at_exit()
            self.assertEqual(opt.finished, 1)
        finally:
            pstrain.torch.optimizer._unfinished.discard(opt)
            if hasattr(sys, "last_value"):
                del sys.last_value


class Membership:
    """What ElasticSampler reads of a DistributedOptimizer: (alive, rank)."""

    def __init__(self, alive, rank):
        self.live_workers = (alive, rank)


class ElasticSamplerTest(unittest.TestCase):
    def test_a_pass_of_every_rank_covers_the_dataset_once(self):
        for alive in (1, 2, 3, 7):
            seen = sorted(i for rank in range(alive) for i in ElasticSampler(20, Membership(alive, rank), seed=5))
            self.assertEqual(seen, list(range(20)), alive)

    def test_a_worker_lost_mid_pass_makes_the_others_take_the_new_split(self):
        # Worker 1 of 3 lost after 2 items: worker 2 becomes rank 1 of 2 and
        # goes on with a new order of the odd items.
        source = Membership(3, 2)
        sampler = ElasticSampler(12, source, seed=1)
        it = iter(sampler)
        first = [next(it), next(it)]
        self.assertTrue(all(i % 3 == 2 for i in first), first)
        source.live_workers = (2, 1)
        rest = list(it)
        self.assertEqual(sorted(rest), [1, 3, 5, 7, 9, 11])
        self.assertEqual((sampler.epoch, sampler.resplits), (1, 1))
        self.assertEqual(len(sampler), 6)

    def test_each_pass_is_a_new_order_and_the_same_seed_the_same_order(self):
        a, b = ElasticSampler(50, Membership(2, 0), seed=7), ElasticSampler(50, Membership(2, 0), seed=7)
        first, second = list(a), list(a)
        self.assertNotEqual(first, second)
        self.assertEqual(sorted(first), sorted(second))
        self.assertEqual(first, list(b))
        self.assertEqual(list(ElasticSampler(6, Membership(2, 1), shuffle=False)), [1, 3, 5])
        # A pass left halfway: the next one draws another order, not the same head again.
        c = ElasticSampler(50, Membership(2, 0), seed=7)
        next(iter(c))
        self.assertEqual(list(c), second)

    def test_the_split_stays_once_training_is_done(self):
        # Workers that leave after the chief ended training are lost to the
        # PS, and its last replies count fewer: no re-split for them.
        source = Membership(2, 1)
        sampler = ElasticSampler(10, source, seed=2)
        it = iter(sampler)
        next(it)
        source.done, source.live_workers = True, (1, 0)
        self.assertEqual(sorted(set(it)) and sampler.resplits, 0)

    def test_a_pass_saved_halfway_resumes_after_its_drawn_items(self):
        sampler = ElasticSampler(20, Membership(2, 1), seed=3)
        whole = list(ElasticSampler(20, Membership(2, 1), seed=3))
        it = iter(sampler)
        drawn = [next(it) for _ in range(4)]
        state = sampler.state_dict()
        self.assertEqual((state["epoch"], state["drawn"], state["split"]), (0, 4, [2, 1]))
        again = ElasticSampler(20, Membership(2, 1), seed=3)
        again.load_state_dict(state)
        self.assertEqual(drawn + list(again), whole)
        self.assertEqual((again.state_dict()["epoch"], again.state_dict()["drawn"]), (1, 0))
        fresh = ElasticSampler(20, Membership(2, 1), seed=3)
        list(fresh)
        self.assertEqual(list(again), list(fresh))

    def test_a_state_whose_split_changed_goes_on_with_the_new_shard(self):
        sampler = ElasticSampler(12, Membership(3, 2), seed=1)
        it = iter(sampler)
        next(it)
        again = ElasticSampler(12, Membership(2, 1), seed=1)
        again.load_state_dict(sampler.state_dict())
        self.assertEqual(sorted(again), [1, 3, 5, 7, 9, 11])
        self.assertEqual(again.resplits, 1)

    def test_a_state_of_another_sampler_is_refused(self):
        state = ElasticSampler(10, Membership(1, 0), seed=2).state_dict()
        with self.assertRaisesRegex(
            pstrain.Error, r"^ElasticSampler.load_state_dict: the state's length is 10, this sampler's 11: make"
        ):
            ElasticSampler(11, Membership(1, 0), seed=2).load_state_dict(state)

    def test_bad_input_is_one_clear_error(self):
        with self.assertRaisesRegex(pstrain.Error, "length 0: give the dataset's length"):
            ElasticSampler(0, Membership(1, 0))
        with self.assertRaisesRegex(pstrain.Error, "has no live_workers: give the DistributedOptimizer"):
            ElasticSampler(10, object())
        with self.assertRaisesRegex(pstrain.Error, "rank 3 of 4 has no items of 3"):
            list(ElasticSampler(3, Membership(4, 3)))


class BadInputTest(unittest.TestCase):
    def test_zero_grad_set_to_none_is_refused(self):
        with LocalCluster() as cl:
            opt = DistributedOptimizer(small_model().named_parameters(), context=cl.context(0), embeddings=[])
            with self.assertRaisesRegex(
                pstrain.Error,
                r"^zero_grad\(set_to_none=True\) is refused: .*call zero_grad\(\), or pass staged=True to the "
                r"DistributedOptimizer$",
            ):
                opt.zero_grad(set_to_none=True)
            opt.finish()

    def test_a_float64_parameter_is_refused(self):
        model = small_model().double()
        with self.assertRaisesRegex(
            pstrain.Error, r"^parameter '0.weight' is torch.float64: .*call model.float\(\) first$"
        ):
            DistributedOptimizer(model.named_parameters(), context=object(), embeddings=[])

    def test_a_non_contiguous_parameter_is_refused(self):
        model = small_model()
        model[0].weight.data = model[0].weight.data.t().contiguous().t()
        with self.assertRaisesRegex(pstrain.Error, r"^parameter '0.weight' is not contiguous: "):
            DistributedOptimizer(model.named_parameters(), context=object(), embeddings=[])

    def test_workers_with_different_models_are_told_so(self):
        with LocalCluster(num_workers=2) as cl:
            outcome = {}

            def work(k):
                model = small_model() if k == 0 else torch.nn.Linear(4, 2)
                try:
                    DistributedOptimizer(model.named_parameters(), context=cl.context(k), embeddings=[])
                except pstrain.PeerError as e:
                    outcome[k] = e

            run_workers(2, work)
            self.assertIn(1, outcome)
            self.assertRegex(
                str(outcome[1]), r"^ps 0 refused this worker's hello: a model of 10 parameters where the chief's has 67"
            )
            self.assertEqual(outcome[1].peer, "ps 0")


class EmbeddingTest(unittest.TestCase):
    def connect(self, cl, tables, head):
        return DistributedOptimizer(
            head.named_parameters(), optimizer="sgd", lr=0.1, sync=False, context=cl.context(0), embeddings=tables
        )

    def rows_of(self, opt, table, ids):
        keys = np.asarray(ids, dtype=np.int64)
        out = np.zeros((len(keys), table.dim), np.float32)
        opt.client.wait(opt.client.pull_rows(0, keys, out))
        return out

    def check_against_torch(self, mode, ids, offsets=None, weights=None, device="cpu"):
        table = EmbeddingBag(4, mode=mode, optimizer="adagrad", lr=0.5, init_range=0.5)
        head = torch.nn.Linear(4, 1)
        ids, offsets, weights = (None if t is None else t.to(device) for t in (ids, offsets, weights))
        with LocalCluster(num_ps=2) as cl:
            opt = self.connect(cl, [table], head)
            out = table(ids, offsets, weights)  # the first pull makes the rows
            self.assertEqual(out.device.type, device)
            unique = sorted(set(ids.reshape(-1).tolist()))
            before = self.rows_of(opt, table, unique)
            ref = torch.nn.EmbeddingBag(len(unique), 4, mode=mode, device=device)
            with torch.no_grad():
                ref.weight.copy_(torch.from_numpy(before))
            index = torch.tensor([unique.index(i) for i in ids.reshape(-1).tolist()], device=device)
            expected = ref(index.reshape(ids.shape), offsets, weights)
            torch.testing.assert_close(out, expected, atol=1e-6, rtol=0)
            out.pow(2).sum().backward()
            expected.pow(2).sum().backward()
            opt.step()
            g = ref.weight.grad.cpu().numpy()
            after = self.rows_of(opt, table, unique)
            # Adagrad on the PS: a = 0.1 + g^2; w -= lr g / sqrt(a)
            np.testing.assert_allclose(after, before - 0.5 * g / np.sqrt(0.1 + g * g), atol=1e-6)
            opt.finish()

    def test_embedding_bag_sum_equals_torch_forward_and_backward(self):
        self.check_against_torch("sum", torch.tensor([[3, 9, 3], [2**40, -7, 9]]))

    def test_embedding_bag_mean_equals_torch_forward_and_backward(self):
        self.check_against_torch("mean", torch.tensor([1, 2, 3, 2, 5]), offsets=torch.tensor([0, 2]))

    def test_embedding_bag_sum_with_weights_equals_torch(self):
        self.check_against_torch(
            "sum", torch.tensor([4, 4, 6]), offsets=torch.tensor([0, 1]), weights=torch.tensor([0.5, 2.0, -1.0])
        )

    @unittest.skipUnless(torch.cuda.is_available(), "no CUDA device")
    def test_ids_on_the_gpu_give_the_rows_there_and_their_gradients_back(self):
        self.check_against_torch("sum", torch.tensor([[3, 9, 3], [2**40, -7, 9]]), device="cuda")
        self.check_against_torch("mean", torch.tensor([1, 2, 3, 2, 5]), offsets=torch.tensor([0, 2]), device="cuda")

    def test_a_batch_with_repeated_ids_pulls_and_pushes_each_key_once(self):
        table = EmbeddingBag(4, mode="sum")
        head = torch.nn.Linear(4, 1)
        with LocalCluster(num_ps=2) as cl:
            opt = self.connect(cl, [table], head)
            ids = torch.tensor([[5, 5, 7], [7, 5, 9], [9, 9, 9]])
            head(table(ids)).sum().backward()
            pulled = sum(cl.server_stats(p)["keys_pulled"] for p in range(2))
            self.assertEqual(pulled, 3)
            opt.step()
            pushed = sum(cl.server_stats(p)["keys_pushed"] for p in range(2))
            self.assertEqual(pushed, 3)
            opt.finish()

    def test_the_row_cap_admission_and_eviction_apply_to_a_modules_table(self):
        capped = EmbeddingBag(2, mode="sum", max_rows=2, init_range=0.5)
        admitted = EmbeddingBag(2, mode="sum", admit_after=2, init_range=0.5)
        evicted = EmbeddingBag(2, mode="sum", evict_after=2, init_range=0.5, lr=0.5)
        head = torch.nn.Linear(2, 1)
        with LocalCluster(num_ps=1) as cl:
            opt = DistributedOptimizer(
                head.named_parameters(),
                optimizer="sgd",
                lr=0.1,
                sync=False,
                context=cl.context(0),
                embeddings=[capped, admitted, evicted],
            )
            # At most 2 rows: the third key of the batch reads as zeros.
            rows = capped(torch.tensor([[1], [2], [3]]))
            self.assertTrue(bool(rows[:2].ne(0).any()))
            self.assertTrue(bool(rows[2].eq(0).all()), rows)
            # A key gets its row at its second pull.
            self.assertTrue(bool(admitted(torch.tensor([[7]])).eq(0).all()))
            self.assertTrue(bool(admitted(torch.tensor([[7]])).ne(0).any()))
            # A row trained once, then unseen for more than 2 steps, is dropped
            # and made anew from (seed, key): its first values come back.
            first = evicted(torch.tensor([[11]])).detach().clone()
            evicted(torch.tensor([[11]])).sum().backward()
            opt.step()
            trained = evicted(torch.tensor([[11]])).detach().clone()
            self.assertFalse(torch.equal(trained, first))
            for _ in range(4):
                opt.zero_grad()
                evicted(torch.tensor([[12]])).sum().backward()
                opt.step()
            torch.testing.assert_close(evicted(torch.tensor([[11]])).detach(), first, atol=0, rtol=0)
            opt.finish()

    def test_embedding_maps_ids_to_rows_with_their_shape(self):
        table = Embedding(3)
        head = torch.nn.Linear(3, 1)
        with LocalCluster() as cl:
            opt = self.connect(cl, [table], head)
            ids = torch.tensor([[1, 2], [2, 8]])
            out = table(ids)
            self.assertEqual(tuple(out.shape), (2, 2, 3))
            torch.testing.assert_close(out[0, 1], out[1, 0])
            rows = self.rows_of(opt, table, [8])
            self.assertEqual(rows.shape, (1, 3))
            opt.finish()

    def test_two_sync_workers_with_a_table_end_with_the_same_rows_and_parameters(self):
        steps = 4
        tables = [EmbeddingBag(4, mode="mean", lr=0.3) for _ in range(2)]
        torch.manual_seed(3)
        heads = [torch.nn.Linear(4, 1) for _ in range(2)]
        ids = torch.tensor([[1, 2, 3], [3, 4, 4], [5, 1, 2], [6, 6, 7]])
        y = torch.tensor([[1.0], [0.0], [1.0], [0.0]])
        seen = {}
        trained = threading.Barrier(2)
        with LocalCluster(num_ps=2, num_workers=2) as cl:

            def work(k):
                opt = DistributedOptimizer(
                    heads[k].named_parameters(),
                    optimizer="sgd",
                    lr=0.1,
                    sync=True,
                    context=cl.context(k),
                    embeddings=[tables[k]],
                )
                part = slice(2 * k, 2 * k + 2)
                for _ in range(steps):
                    opt.zero_grad()
                    out = heads[k](tables[k](ids[part]))
                    torch.nn.functional.binary_cross_entropy_with_logits(out, y[part]).backward()
                    opt.step()
                seen[k] = (self.rows_of(opt, tables[k], range(1, 8)), opt.stats())
                trained.wait(60)
                opt.finish()

            run_workers(2, work)
        np.testing.assert_array_equal(seen[0][0], seen[1][0])
        for a, b in zip(heads[0].parameters(), heads[1].parameters()):
            np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())
        self.assertEqual([s["step"] for s in seen[0][1]], [steps, steps])

    def test_an_unknown_bag_mode_is_refused(self):
        with self.assertRaisesRegex(pstrain.Error, r"^an EmbeddingBag's mode must be 'sum' or 'mean', got 'max': pass"):
            EmbeddingBag(4, mode="max")

    def test_a_table_used_before_the_optimizer_is_an_error(self):
        table = EmbeddingBag(4)
        with self.assertRaisesRegex(
            pstrain.Error,
            r"^this embedding table has no client yet: give it to the DistributedOptimizer \(embeddings=\[\.\.\.\]\)",
        ):
            table(torch.tensor([[1, 2]]))

    def test_only_the_tables_given_are_trained(self):
        given, other = EmbeddingBag(2, mode="sum"), EmbeddingBag(3, mode="sum")
        with LocalCluster() as cl:
            opt = self.connect(cl, [given], torch.nn.Linear(2, 1))
            self.assertEqual([t.dim for t in opt.settings.tables], [2])
            given(torch.tensor([[1, 2]]))
            with self.assertRaisesRegex(pstrain.Error, r"^this embedding table has no client yet"):
                other(torch.tensor([[1, 2]]))
            opt.finish()
        with LocalCluster() as cl:
            opt = DistributedOptimizer(torch.nn.Linear(2, 1).named_parameters(), context=cl.context(0))
            self.assertEqual(opt.embeddings, [])
            self.assertEqual(opt.settings.tables, [])
            opt.finish()

    def test_embeddings_take_tables_only(self):
        with self.assertRaisesRegex(
            pstrain.Error,
            r"^embeddings=\[\.\.\.\] takes pstrain.torch.EmbeddingBag and Embedding tables, got Linear: pass",
        ):
            DistributedOptimizer(
                torch.nn.Linear(2, 1).named_parameters(), context=object(), embeddings=[torch.nn.Linear(1, 1)]
            )


class PreemptedTest(unittest.TestCase):
    def test_preempted_is_a_system_exit_with_status_143(self):
        e = pstrain.torch.Preempted()
        self.assertIsInstance(e, SystemExit)
        self.assertEqual(e.code, 143)


if __name__ == "__main__":
    unittest.main()
