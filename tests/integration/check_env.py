#!/usr/bin/env python3
"""Checks the environment the SPANK plugin gave every task of a step.

Reads lines printed by each task (see ENV_PRINTER in t-plugin.sh):
    rank=R node=NODE role=ROLE index=I cluster=JSON tf=JSON
and checks them against where Slurm really ran each rank (SLURM_PROCID,
SLURMD_NODENAME): ranks 0..P-1 are ps 0..P-1, the rest workers in rank
order; every task holds the same cluster spec; the spec's host of each
role/index is the node that rank ran on; TF_CONFIG has TensorFlow's shape.
Exit 0 when all holds, else 1 with one line per problem.
Usage: check_env.py NUM_PS NUM_WORKERS < lines
"""

import json
import sys


def main() -> int:
    num_ps, num_workers = int(sys.argv[1]), int(sys.argv[2])
    tasks = {}
    for line in sys.stdin:
        line = line.strip()
        if not line.startswith("rank="):
            continue
        fields = dict(part.split("=", 1) for part in line.split(" ", 5))
        tasks[int(fields["rank"])] = fields
    problems = []
    total = num_ps + num_workers
    if sorted(tasks) != list(range(total)):
        problems.append(f"expected ranks 0..{total - 1}, got {sorted(tasks)}")
        print("\n".join(problems))
        return 1
    specs = {t["cluster"] for t in tasks.values()}
    if len(specs) != 1:
        problems.append(f"tasks disagree on PSTRAIN_CLUSTER: {specs}")
    spec = json.loads(tasks[0]["cluster"])
    if len(spec["ps"]) != num_ps or len(spec["worker"]) != num_workers:
        problems.append(f"spec sizes {len(spec['ps'])}/{len(spec['worker'])}, expected {num_ps}/{num_workers}")
    addresses = spec["ps"] + spec["worker"]
    if len(set(addresses)) != len(addresses):
        problems.append(f"two tasks share an address: {addresses}")
    for rank, t in tasks.items():
        role, index = ("ps", rank) if rank < num_ps else ("worker", rank - num_ps)
        if t["role"] != role or int(t["index"]) != index:
            problems.append(f"rank {rank}: role {t['role']} {t['index']}, expected {role} {index}")
            continue
        host = spec[role][index].rsplit(":", 1)[0]
        if host != t["node"]:
            problems.append(f"rank {rank} ({role} {index}) ran on {t['node']} but the spec says {host}")
        tf = json.loads(t["tf"])
        if tf.get("cluster") != spec or tf.get("task") != {"type": role, "index": index}:
            problems.append(f"rank {rank}: TF_CONFIG {t['tf']} does not match")
    print("\n".join(problems) if problems else f"ok: {total} tasks")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
