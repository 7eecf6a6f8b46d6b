"""TF2 ParameterServerStrategy with a custom training loop
(ClusterCoordinator.schedule/join), on Slurm with pstrain:

    sbatch --ps=2 --workers=2 --chief tf-train.sh python3 pss_custom_loop.py

The coordinator (the chief) schedules steps on whichever worker is free; a
worker that dies is tolerated (its steps are rescheduled on the others),
and pstrain-run keeps the job going without it.  784-100-10 MLP on
Fashion-MNIST, Adam; the chief prints one JSON line.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")

import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion_mnist  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=fashion_mnist.DEFAULT_DIR)
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--steps-per-call", type=int, default=10, help="training steps in one scheduled function")
    p.add_argument("--learning-rate", type=float, default=1e-3)
    a = p.parse_args()

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("worker", "ps"):
        tf.distribute.Server(
            resolver.cluster_spec(),
            job_name=resolver.task_type,
            task_index=resolver.task_id,
            protocol=resolver.rpc_layer or "grpc",
            start=True,
        ).join()
        return
    if resolver.task_type != "chief":
        sys.exit(
            "pss_custom_loop.py: task type %r: ParameterServerStrategy needs a chief, submit with --chief"
            % resolver.task_type
        )

    fashion_mnist.check(a.data_dir)
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
        step_count = tf.Variable(0, dtype=tf.int64)
    loss_fn = tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True, reduction=tf.keras.losses.Reduction.NONE)

    def dataset_fn():
        images, labels = fashion_mnist.arrays(a.data_dir, "train")
        return (
            tf.data.Dataset.from_tensor_slices((images, labels)).shuffle(10000).repeat().batch(a.batch_size).prefetch(2)
        )

    @tf.function
    def per_worker_dataset_fn():
        return strategy.distribute_datasets_from_function(lambda _: dataset_fn())

    iterators = iter(coordinator.create_per_worker_dataset(per_worker_dataset_fn))

    @tf.function
    def train_calls(iterator):
        def one_step(images, labels):
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_fn(labels, model(images, training=True)))
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            step_count.assign_add(1)
            return loss

        loss = tf.constant(0.0)
        for _ in tf.range(a.steps_per_call):
            loss = strategy.run(one_step, args=next(iterator))
        return loss

    calls = a.steps // a.steps_per_call
    start = time.time()
    for i in range(calls):
        coordinator.schedule(train_calls, args=(iterators,))
        if (i + 1) % 50 == 0:
            coordinator.join()
            print("pss_custom_loop: step %d" % int(step_count.numpy()), flush=True)
    coordinator.join()
    seconds = time.time() - start

    images, labels = fashion_mnist.arrays(a.data_dir, "test")
    local = tf.keras.Sequential(
        [tf.keras.layers.Input(shape=(784,)), tf.keras.layers.Dense(100, activation="relu"), tf.keras.layers.Dense(10)]
    )
    local.set_weights(model.get_weights())
    predicted = tf.argmax(local(images), axis=1, output_type=tf.int32)
    accuracy = float(tf.reduce_mean(tf.cast(predicted == labels, tf.float32)))
    steps = int(step_count.numpy())
    print(
        json.dumps(
            {
                "event": "done",
                "program": "pss_custom_loop",
                "global_step": steps,
                "test_accuracy": round(accuracy, 4),
                "train_seconds": round(seconds, 2),
                "samples_per_sec": round(steps * a.batch_size / seconds, 1),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
