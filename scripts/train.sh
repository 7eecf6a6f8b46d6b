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
# Checkpoints and preemption: pstrain checkpoints to --checkpoint-dir
# (default $PSTRAIN_CHECKPOINT_DIR, else
# pstrain-checkpoints/<cluster>-<job id>-<submission> in the submit
# directory, which must be a path every node shares).  The default directory
# is this job's alone: <submission> is the id the SPANK plugin made at
# sbatch (PSTRAIN_SUBMISSION), which a requeued job keeps and a new
# submission does not, also when job ids repeat (a controller started
# afresh, two clusters sharing the directory), and pstrain is told
# --resume own, so it resumes only this job's own checkpoints.  A directory
# you name (--checkpoint-dir or PSTRAIN_CHECKPOINT_DIR) resumes whatever
# run checkpointed there: that is how to continue a run on purpose.  On
# SIGTERM (preemption, scontrol requeue, or --signal=TERM@120 two minutes
# before the time limit) the chief checkpoints and every task exits with
# status 143; this script then requeues the job, which resumes from the
# checkpoint.  Slurm holds a requeued job PENDING (BeginTime) for about 2
# minutes before it starts again (its requeue delay; `scontrol update
# JobId=<id> StartTime=now` starts it at once); meanwhile the job's comment
# (squeue -o %k) says at which step it stopped.  Set PSTRAIN_REQUEUE=0 to
# exit instead.  A task lost on the way that the job healed or went on
# without (a PS a spare replaced) leaves srun's status non-zero (137 for a
# kill -9): once the chief has written its "done" event into the metrics
# file (training complete, the final checkpoint safe), this script says so
# and exits 0, so that the job ends COMPLETED.
#
#SBATCH --job-name=pstrain
#SBATCH --output=pstrain-%j.out
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --signal=TERM@120
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
# Threads: each task uses the CPUs Slurm gave it (pstrain(1), --threads).

# The data and checkpoint directories: the user's flags when given (the
# banner names what pstrain will use), else the defaults.
data_dir=${PSTRAIN_DATA_DIR:-/usr/share/datasets/fashion-mnist} data_args=()
checkpoint_dir=${PSTRAIN_CHECKPOINT_DIR:-} checkpoint_args=() given_data=0 given_checkpoint=0 metrics_file=
previous=
for arg in "$@"; do
  case $previous in
    --data-dir | --data_dir) data_dir=$arg given_data=1 ;;
    --checkpoint-dir | --checkpoint_dir) checkpoint_dir=$arg given_checkpoint=1 ;;
    --metrics-file | --metrics_file) metrics_file=$arg ;;
  esac
  case $arg in
    --data-dir=* | --data_dir=*) data_dir=${arg#*=} given_data=1 ;;
    --checkpoint-dir=* | --checkpoint_dir=*) checkpoint_dir=${arg#*=} given_checkpoint=1 ;;
    --metrics-file=* | --metrics_file=*) metrics_file=${arg#*=} ;;
  esac
  previous=$arg
done
[ "$given_data" = 1 ] || data_args=(--data-dir "$data_dir")
if [ "$given_checkpoint" = 0 ]; then
  if [ -n "$checkpoint_dir" ]; then
    checkpoint_args=(--checkpoint-dir "$checkpoint_dir")
  else
    # This job's own: another submission, also under the same job id, gets another.
    checkpoint_dir=${SLURM_SUBMIT_DIR:-$PWD}/pstrain-checkpoints/${SLURM_CLUSTER_NAME:-cluster}-${SLURM_JOB_ID:-manual}${PSTRAIN_SUBMISSION:+-$PSTRAIN_SUBMISSION}
    mkdir -p "${checkpoint_dir%/*}"
    checkpoint_args=(--checkpoint-dir "$checkpoint_dir" --resume own)
  fi
fi

# The chief's metrics file (pstrain's default with a checkpoint directory):
# its "done" event, written once training completed and its final
# checkpoint is safe, says the job succeeded when srun's status says that a
# task ended badly on the way (a PS killed and replaced by a spare: 137).
metrics_file=${metrics_file:-$checkpoint_dir/metrics.jsonl}
metrics_before=$(stat -c %s "$metrics_file" 2>/dev/null || echo 0)
echo "train.sh: job ${SLURM_JOB_ID:-?} (restart ${SLURM_RESTART_COUNT:-0}): $PSTRAIN_NUM_PS ps + $PSTRAIN_NUM_WORKERS workers on ${SLURM_JOB_NODELIST:-?}, data $data_dir, checkpoints $checkpoint_dir"
# A SIGTERM to this shell (preemption, scontrol requeue) must not end it
# before srun: pstrain is checkpointing meanwhile.
shell_signalled=0
trap 'shell_signalled=1; echo "train.sh: SIGTERM: waiting for pstrain to checkpoint and stop" >&2' TERM
# srun through pstrain-srun ($PSTRAIN_SRUN, else PATH; plain srun where
# neither is): a task's end that srun never heard (its node's link down at
# that moment) would leave the job RUNNING with nothing running.
srun=${PSTRAIN_SRUN:-$(command -v pstrain-srun || echo srun)}
set +e
"$srun" --mpi=pmix "$pstrain" "${data_args[@]}" "${checkpoint_args[@]}" "$@" &
srun_pid=$!
while :; do
  wait "$srun_pid"
  rc=$?
  kill -0 "$srun_pid" 2>/dev/null || break
done
set -e
if [ "$rc" -ne 0 ] && [ "$rc" -ne 143 ] && [ -f "$metrics_file" ] &&
  tail -c +"$((metrics_before + 1))" "$metrics_file" | grep -q '"event":"done"'; then
  echo "train.sh: srun exited $rc (a task of the step ended badly: see its lines above), and the chief completed training and its final checkpoint ($metrics_file says done): the job succeeds"
  rc=0
fi
# Slurm signals this shell too when it ends the job itself (preemption,
# scontrol requeue, scancel): then it decides whether the job comes back.
# A signal to the steps only (--signal=TERM@T, scancel --signal=TERM) is
# ours to act on.
if [ "$rc" -eq 143 ] && [ "$shell_signalled" = 0 ] && [ "${PSTRAIN_REQUEUE:-1}" != 0 ] && [ -n "${SLURM_JOB_ID:-}" ]; then
  echo "train.sh: pstrain stopped after a checkpoint: requeueing job $SLURM_JOB_ID to resume from it"
  scontrol requeue "$SLURM_JOB_ID" || echo "train.sh: scontrol requeue $SLURM_JOB_ID failed: resubmit this job to resume" >&2
  exit 0
fi
exit "$rc"
