"""TensorFlow's side of bench/vs-tensorflow: the 784-100-10 MLP on
Fashion-MNIST, batch 100, Adam 0.001, 1 ps + 2 workers, run by pstrain-run
in a `srun --ps=1 --workers=2 [--chief]` step.

  --mode async: TF2 ParameterServerStrategy (a chief coordinating, custom
                loop with ClusterCoordinator.schedule), gRPC;
  --mode sync:  TF1 between-graph SyncReplicasOptimizer (TensorFlow's only
                synchronous parameter-server path), gRPC, --classic-flags.

The chief evaluates on the test set every --eval-every steps (the time spent
evaluating is not counted) and prints one JSON line: samples_per_sec over
the whole run, steady_samples_per_sec over the last half of the global
steps (from the first step boundary at or after N/2 to the last step, sync:
before the session's close, which samples_per_sec's time holds; evaluation
not counted: the figure bench/vs-tensorflow compares, the same window as
bench/steady_state.py --exclude-eval reads from pstrain's metrics), with
steady_from_step and steady_to_step, and the training seconds until the
test accuracy first reached --target.  TensorFlow flushes denormals to
zero in its own threads: there is no --flush-denormal here.
"""

import argparse
import gzip
import json
import os
import sys
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

DATA = os.environ.get("PSTRAIN_DATA_DIR", "/usr/share/datasets/fashion-mnist")


def idx(name):
    with gzip.open(os.path.join(DATA, name + ".gz")) as f:
        data = np.frombuffer(f.read(), np.uint8)
    return data[16:].reshape(-1, 784).astype(np.float32) / 255.0 if "images" in name else data[8:].astype(np.int32)


def accuracy(weights, images, labels):
    w1, b1, w2, b2 = weights
    hidden = np.maximum(images @ w1 + b1, 0)
    return float(np.mean(np.argmax(hidden @ w2 + b2, axis=1) == labels))


class clock:
    """Training time, evaluation excluded; the first time the target was met."""

    def __init__(self, target):
        self.target, self.train, self.to_target, self.last = target, 0.0, None, time.time()

    def evaluated(self, acc, eval_start):
        self.train += eval_start - self.last
        if self.to_target is None and acc >= self.target:
            self.to_target = self.train
        self.last = time.time()

    def stop(self):
        self.train += time.time() - self.last
        self.last = time.time()

    def now(self):
        return self.train + time.time() - self.last

    def mark(self, step, half):
        """The training seconds at the first step boundary at or after `half`."""
        if getattr(self, "half_at", None) is None and step >= half:
            self.half_at = (int(step), self.now())


def report(mode, steps, batch, c, acc):
    step0, t0 = getattr(c, "half_at", None) or (steps, c.train)
    # The end: the last step's (sync: before the session's close, which the whole run's figure holds).
    t1 = getattr(c, "end_at", c.train)
    steady = (steps - step0) * batch / (t1 - t0) if steps > step0 and t1 > t0 else float("nan")
    print(
        json.dumps(
            {
                "event": "done",
                "mode": mode,
                "global_step": steps,
                "test_accuracy": round(acc, 4),
                "train_seconds": round(c.train, 3),
                "samples_per_sec": round(steps * batch / c.train, 1),
                "steady_samples_per_sec": round(steady, 1),
                "steady_from_step": step0,
                "steady_to_step": steps,
                "steady": steps >= 3000,
                "seconds_to_target": None if c.to_target is None else round(c.to_target, 3),
            }
        ),
        flush=True,
    )


def run_async(a):
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("worker", "ps"):
        tf.distribute.Server(
            resolver.cluster_spec(),
            job_name=resolver.task_type,
            task_index=resolver.task_id,
            protocol="grpc",
            start=True,
        ).join()
        return
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.coordinator.ClusterCoordinator(strategy)
    with strategy.scope():
        model = tf.keras.Sequential(
            [
                tf.keras.layers.Input(shape=(784,)),
                tf.keras.layers.Dense(100, activation="relu"),
                tf.keras.layers.Dense(10),
            ]
        )
        optimizer = tf.keras.optimizers.Adam(a.learning_rate)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=tf.keras.losses.Reduction.NONE)
    data = os.path.join(DATA, "train-images-idx3-ubyte.gz"), os.path.join(DATA, "train-labels-idx1-ubyte.gz")

    def dataset_fn(_):
        def read(path, skip):
            raw = tf.io.decode_compressed(tf.io.read_file(path), compression_type="GZIP")
            return tf.io.decode_raw(raw, tf.uint8)[skip:]

        images = tf.cast(tf.reshape(read(data[0], 16), [-1, 784]), tf.float32) / 255.0
        labels = tf.cast(read(data[1], 8), tf.int32)
        return (
            tf.data.Dataset.from_tensor_slices((images, labels)).shuffle(10000).repeat().batch(a.batch_size).prefetch(2)
        )

    @tf.function
    def per_worker():
        return strategy.distribute_datasets_from_function(dataset_fn)

    iterators = iter(coordinator.create_per_worker_dataset(per_worker))

    @tf.function
    def steps(iterator):
        def one(images, labels):
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_fn(labels, model(images, training=True)))
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))

        for _ in tf.range(a.steps_per_call):
            strategy.run(one, args=next(iterator))

    test_x, test_y = idx("t10k-images-idx3-ubyte"), idx("t10k-labels-idx1-ubyte")
    c = clock(a.target)
    done = 0
    acc = 0.0
    while done < a.steps:
        c.mark(done, a.steps // 2)
        for _ in range(a.eval_every // a.steps_per_call):
            coordinator.schedule(steps, args=(iterators,))
        coordinator.join()
        done += a.eval_every
        t = time.time()
        acc = accuracy([v.numpy() for v in model.weights], test_x, test_y)
        c.evaluated(acc, t)
    report("async", done, a.batch_size, c, acc)


def run_sync(a):
    v1 = tf.compat.v1
    v1.disable_eager_execution()
    cluster = tf.train.ClusterSpec({"ps": a.ps_hosts.split(","), "worker": a.worker_hosts.split(",")})
    server = v1.train.Server(cluster, job_name=a.job_name, task_index=a.task_index)
    if a.job_name == "ps":
        server.join()
        return
    workers, chief = len(a.worker_hosts.split(",")), a.task_index == 0
    with v1.device(v1.train.replica_device_setter(worker_device="/job:worker/task:%d" % a.task_index, cluster=cluster)):
        global_step = v1.train.get_or_create_global_step()
        x = v1.placeholder(tf.float32, [None, 784])
        y = v1.placeholder(tf.int32, [None])
        w1 = v1.get_variable("w1", [784, 100], initializer=v1.glorot_uniform_initializer())
        b1 = v1.get_variable("b1", [100], initializer=v1.zeros_initializer())
        w2 = v1.get_variable("w2", [100, 10], initializer=v1.glorot_uniform_initializer())
        b2 = v1.get_variable("b2", [10], initializer=v1.zeros_initializer())
        logits = tf.matmul(tf.nn.relu(tf.matmul(x, w1) + b1), w2) + b2
        loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits))
        opt = v1.train.SyncReplicasOptimizer(
            v1.train.AdamOptimizer(a.learning_rate), replicas_to_aggregate=workers, total_num_replicas=workers
        )
        train_op = opt.minimize(loss, global_step=global_step)
    train_x, train_y = idx("train-images-idx3-ubyte"), idx("train-labels-idx1-ubyte")
    test_x, test_y = idx("t10k-images-idx3-ubyte"), idx("t10k-labels-idx1-ubyte")
    rng = np.random.default_rng(a.task_index)
    config = v1.ConfigProto(device_filters=["/job:ps", "/job:worker/task:%d" % a.task_index])
    hooks = [opt.make_session_run_hook(chief), v1.train.StopAtStepHook(last_step=a.steps)]
    c = clock(a.target)
    acc, step = 0.0, 0
    with v1.train.MonitoredTrainingSession(
        master=server.target,
        is_chief=chief,
        hooks=hooks,
        config=config,
        save_checkpoint_secs=None,
        save_summaries_steps=None,
        log_step_count_steps=0,
        stop_grace_period_secs=2,
    ) as sess:
        c.last = time.time()
        while not sess.should_stop():
            c.mark(step, a.steps // 2)
            rows = rng.integers(0, len(train_y), a.batch_size)
            _, step = sess.run([train_op, global_step], feed_dict={x: train_x[rows], y: train_y[rows]})
            if chief and step > 0 and step % a.eval_every == 0 and not sess.should_stop():
                t = time.time()
                acc = accuracy(sess.run([w1, b1, w2, b2]), test_x, test_y)
                c.evaluated(acc, t)
        c.end_at = c.now()
    if chief:
        c.stop()
        report("sync", a.steps, a.batch_size * workers, c, acc)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mode", choices=["sync", "async"], required=True)
    p.add_argument("--steps", type=int, default=3000)
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--learning-rate", type=float, default=0.001)
    p.add_argument("--eval-every", type=int, default=100)
    p.add_argument("--steps-per-call", type=int, default=10)
    p.add_argument("--target", type=float, default=0.85)
    p.add_argument("--ps_hosts", default="")
    p.add_argument("--worker_hosts", default="")
    p.add_argument("--job_name", default="")
    p.add_argument("--task_index", type=int, default=0)
    a = p.parse_args()
    (run_sync if a.mode == "sync" else run_async)(a)


if __name__ == "__main__":
    sys.exit(main())
