#!/bin/bash
# train.sh — the pstrain job script to copy and adapt.
#
#   sbatch --ps=1 --workers=2 train.sh [pstrain flags...]
#
# The SPANK plugin gives the job N+M tasks (with the cli_filter) and every
# task its role; the srun below inherits --ps/--workers from sbatch.  The
# trainer bootstraps over PMIx: no ports to choose.  Flags after the script
# name go to pstrain (see pstrain --help), e.g.
#   sbatch --ps=1 --workers=2 train.sh --sync-replicas --train-steps 6000
#
#SBATCH --job-name=pstrain
#SBATCH --output=pstrain-%j.out
#SBATCH --open-mode=append
set -euo pipefail

if [ -z "${PSTRAIN_NUM_PS:-}" ]; then
  echo "train.sh: no --ps/--workers: submit it as sbatch --ps=N --workers=M train.sh" >&2
  exit 2
fi
# The trainer: $PSTRAIN (exported by scripts/quickstart for a build tree), else PATH.
pstrain=${PSTRAIN:-$(command -v pstrain || true)}
if [ -z "$pstrain" ] || [ ! -x "$pstrain" ]; then
  echo "train.sh: pstrain not found: install it (make install) or export PSTRAIN=/path/to/pstrain" >&2
  exit 2
fi
data_dir=${PSTRAIN_DATA_DIR:-/usr/share/datasets/fashion-mnist}
# One BLAS thread per task unless the job asked for more CPUs per task.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-${SLURM_CPUS_PER_TASK:-1}}

echo "train.sh: job ${SLURM_JOB_ID:-?}: $PSTRAIN_NUM_PS ps + $PSTRAIN_NUM_WORKERS workers on ${SLURM_JOB_NODELIST:-?}, data $data_dir"
exec srun --mpi=pmix "$pstrain" --data-dir "$data_dir" "$@"
