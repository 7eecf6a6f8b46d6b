"""TF2 ParameterServerStrategy with Keras model.fit, on Slurm with pstrain:

    sbatch --ps=2 --workers=2 --chief tf-train.sh python3 pss_keras.py

The SPANK plugin gives every task its TF_CONFIG; ps and worker tasks run a
tf.distribute.Server and join() forever, the chief coordinates training and
evaluates, and pstrain-run ends the others when the chief is done.
784-100-10 MLP on Fashion-MNIST, Adam; the chief prints one JSON line.
"""

import argparse
import json
import os
import sys
import time

os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")  # Keras 3 has no parameter-server training
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("GRPC_FAIL_FAST", "use_caller")

import tensorflow as tf  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fashion_mnist  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--data-dir", default=fashion_mnist.DEFAULT_DIR)
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--steps", type=int, default=2400, help="training steps in all")
    p.add_argument("--steps-per-epoch", type=int, default=300)
    p.add_argument("--steps-per-execution", type=int, default=20)
    p.add_argument("--learning-rate", type=float, default=1e-3)
    a = p.parse_args()

    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()
    if resolver.task_type in ("worker", "ps"):
        server = tf.distribute.Server(
            resolver.cluster_spec(),
            job_name=resolver.task_type,
            task_index=resolver.task_id,
            protocol=resolver.rpc_layer or "grpc",
            start=True,
        )
        server.join()  # never returns: pstrain-run ends it when the chief is done
        return
    if resolver.task_type != "chief":
        sys.exit(
            "pss_keras.py: task type %r: ParameterServerStrategy needs a chief, submit with --chief"
            % resolver.task_type
        )

    fashion_mnist.check(a.data_dir)
    strategy = tf.distribute.ParameterServerStrategy(resolver)
    with strategy.scope():
        model = tf.keras.Sequential(
            [
                tf.keras.layers.Input(shape=(784,)),
                tf.keras.layers.Dense(100, activation="relu"),
                tf.keras.layers.Dense(10),
            ]
        )
        model.compile(
            optimizer=tf.keras.optimizers.Adam(a.learning_rate),
            loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            steps_per_execution=a.steps_per_execution,
        )

    def dataset_fn(context):
        images, labels = fashion_mnist.arrays(a.data_dir, "train")
        ds = tf.data.Dataset.from_tensor_slices((images, labels))
        ds = ds.shard(context.num_input_pipelines, context.input_pipeline_id)
        return ds.shuffle(10000, seed=context.input_pipeline_id).repeat().batch(a.batch_size).prefetch(2)

    epochs = max(1, a.steps // a.steps_per_epoch)
    start = time.time()
    model.fit(
        tf.keras.utils.experimental.DatasetCreator(dataset_fn),
        epochs=epochs,
        steps_per_epoch=a.steps_per_epoch,
        verbose=2,
    )
    seconds = time.time() - start

    # Evaluate here, on the chief, with the trained values.
    images, labels = fashion_mnist.arrays(a.data_dir, "test")
    logits = tf.keras.Sequential(
        [tf.keras.layers.Input(shape=(784,)), tf.keras.layers.Dense(100, activation="relu"), tf.keras.layers.Dense(10)]
    )
    logits.set_weights(model.get_weights())
    predicted = tf.argmax(logits(images), axis=1, output_type=tf.int32)
    accuracy = float(tf.reduce_mean(tf.cast(predicted == labels, tf.float32)))
    steps = epochs * a.steps_per_epoch
    print(
        json.dumps(
            {
                "event": "done",
                "program": "pss_keras",
                "global_step": steps,
                "test_accuracy": round(accuracy, 4),
                "train_seconds": round(seconds, 2),
                "samples_per_sec": round(steps * a.batch_size / seconds, 1),
                "ps": len(resolver.cluster_spec().as_dict().get("ps", [])),
                "workers": len(resolver.cluster_spec().as_dict().get("worker", [])),
            }
        ),
        flush=True,
    )


if __name__ == "__main__":
    main()
