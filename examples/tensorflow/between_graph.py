"""A TF1-style between-graph program (tf.compat.v1 graph mode) as many
clusters still run them, on Slurm with pstrain:

    sbatch --ps=2 --workers=2 tf-train.sh --classic-flags python3 between_graph.py --checkpoint-dir DIR

It takes the classic --ps_hosts --worker_hosts --job_name --task_index flags
(pstrain-run --classic-flags passes them), places variables on the ps tasks
with replica_device_setter, aggregates 2 gradients a step with
SyncReplicasOptimizer, and trains in a MonitoredTrainingSession whose chief
(worker 0) writes checkpoints to --checkpoint-dir.  It learns y = 2x + 10;
the chief prints one JSON line with the weight and bias.
"""

import argparse
import json
import os

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402

v1 = tf.compat.v1


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--ps_hosts", required=True)
    p.add_argument("--worker_hosts", required=True)
    p.add_argument("--job_name", required=True, choices=["ps", "worker"])
    p.add_argument("--task_index", type=int, required=True)
    p.add_argument("--chief_hosts", default="")
    p.add_argument("--checkpoint-dir", required=True, help="a path every node shares")
    p.add_argument("--steps", type=int, default=1500)
    p.add_argument("--batch-size", type=int, default=50)
    p.add_argument("--learning-rate", type=float, default=0.05)
    a = p.parse_args()

    v1.disable_eager_execution()
    cluster = tf.train.ClusterSpec({"ps": a.ps_hosts.split(","), "worker": a.worker_hosts.split(",")})
    server = v1.train.Server(cluster, job_name=a.job_name, task_index=a.task_index)
    if a.job_name == "ps":
        server.join()  # forever: pstrain-run ends it when the chief is done
        return
    workers = len(a.worker_hosts.split(","))
    is_chief = a.task_index == 0

    with v1.device(v1.train.replica_device_setter(worker_device="/job:worker/task:%d" % a.task_index, cluster=cluster)):
        global_step = v1.train.get_or_create_global_step()
        x = v1.placeholder(tf.float32, [None])
        y = v1.placeholder(tf.float32, [None])
        w = v1.get_variable("weight", [], initializer=v1.zeros_initializer())
        b = v1.get_variable("bias", [], initializer=v1.zeros_initializer())
        loss = tf.reduce_mean(tf.square(w * x + b - y))
        opt = v1.train.SyncReplicasOptimizer(
            v1.train.GradientDescentOptimizer(a.learning_rate),
            replicas_to_aggregate=workers,
            total_num_replicas=workers,
        )
        train_op = opt.minimize(loss, global_step=global_step)

    hooks = [opt.make_session_run_hook(is_chief), v1.train.StopAtStepHook(last_step=a.steps)]
    rng = np.random.default_rng(a.task_index)
    config = v1.ConfigProto(device_filters=["/job:ps", "/job:worker/task:%d" % a.task_index])
    with v1.train.MonitoredTrainingSession(
        master=server.target,
        is_chief=is_chief,
        checkpoint_dir=a.checkpoint_dir,
        hooks=hooks,
        config=config,
        save_checkpoint_steps=500,
        stop_grace_period_secs=5,
        log_step_count_steps=0,
    ) as sess:
        weight = bias = float("nan")
        while not sess.should_stop():
            xs = rng.uniform(-1, 1, a.batch_size).astype(np.float32)
            ys = 2 * xs + 10 + rng.normal(0, 0.1, a.batch_size).astype(np.float32)
            _, weight, bias = sess.run([train_op, w, b], feed_dict={x: xs, y: ys})
    if is_chief:
        print(
            json.dumps(
                {
                    "event": "done",
                    "program": "between_graph",
                    "global_step": a.steps,
                    "weight": round(float(weight), 4),
                    "bias": round(float(bias), 4),
                    "checkpoint": v1.train.latest_checkpoint(a.checkpoint_dir),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
