#!/bin/bash
# tf-train.sh — the job script to copy for your own TensorFlow
# parameter-server program.
#
#   sbatch --ps=2 --workers=2 --chief tf-train.sh python3 my_model.py [ARGS...]
#   sbatch --ps=2 --workers=2 tf-train.sh --classic-flags python3 my_tf1_model.py
#
# Every task runs the program under pstrain-run with the TF_CONFIG the SPANK
# plugin made from the allocation (ParameterServerStrategy, or with
# --classic-flags the --ps_hosts --worker_hosts --job_name --task_index of
# between-graph TF1 programs).  When the chief (--chief, else worker 0)
# exits, the ps and worker tasks that join() forever are ended, and the
# job's status is the chief's.  A ps task that dies ends the job at once.
# pstrain-run options (--classic-flags, --worker-failures, --grace,
# --late-start) may
# come before the program.  The Python is $PSTRAIN_PYTHON when set (e.g. a
# virtual environment's bin/python3 as the program), else what is on PATH.
#
# Checkpoints: the program finds its job's own directory, made 0700, in
# $PSTRAIN_CHECKPOINT_DIR (for Keras BackupAndRestore, a
# tf.train.CheckpointManager or --checkpoint-dir): when not already set,
# pstrain-checkpoints/<cluster>-<job id>-<submission> in the submit
# directory, which a requeued job keeps and a new submission (also under a
# job id a reset controller gives again, or another cluster's job of the
# same id in a shared home directory) does not.
#
# Preemption: on SIGTERM (preemption, scontrol requeue, or --signal=TERM@120
# two minutes before the time limit) every task's program gets SIGTERM; a
# chief that then exits 143 (killed by it, or sys.exit(143) after its own
# checkpoint, e.g. Keras BackupAndRestore) makes this script requeue the
# job.  Set PSTRAIN_REQUEUE=0 to exit instead.
#
#SBATCH --job-name=tf-train
#SBATCH --output=tf-train-%j.out
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --signal=TERM@120
set -euo pipefail

if [ -z "${PSTRAIN_NUM_PS:-}" ]; then
  echo "tf-train.sh: no --ps/--workers: submit it as sbatch --ps=N --workers=M [--chief] tf-train.sh PROGRAM [ARGS...]" >&2
  exit 2
fi
if [ $# -eq 0 ]; then
  echo "tf-train.sh: no program: sbatch --ps=N --workers=M [--chief] tf-train.sh python3 my_model.py [ARGS...]" >&2
  exit 2
fi
# pstrain-run: $PSTRAIN_RUN (a build tree's launcher/pstrain-run), else PATH.
run=${PSTRAIN_RUN:-$(command -v pstrain-run || true)}
if [ -z "$run" ] || [ ! -x "$run" ]; then
  echo "tf-train.sh: pstrain-run not found: install pstrain (make install) or export PSTRAIN_RUN=/path/to/pstrain-run" >&2
  exit 2
fi
run_opts=()
while [ $# -gt 0 ]; do
  case "$1" in
    --classic-flags) run_opts+=("$1"); shift ;;
    --worker-failures|--grace|--late-start) run_opts+=("$1" "${2:?$1 needs a value}"); shift 2 ;;
    --worker-failures=*|--grace=*|--late-start=*) run_opts+=("$1"); shift ;;
    --) shift; break ;;
    *) break ;;
  esac
done

if [ -z "${PSTRAIN_CHECKPOINT_DIR:-}" ]; then
  PSTRAIN_CHECKPOINT_DIR=${SLURM_SUBMIT_DIR:-$PWD}/pstrain-checkpoints/${SLURM_CLUSTER_NAME:-cluster}-${SLURM_JOB_ID:-manual}${PSTRAIN_SUBMISSION:+-$PSTRAIN_SUBMISSION}
fi
(umask 077 && mkdir -p "$PSTRAIN_CHECKPOINT_DIR") || {
  echo "tf-train.sh: cannot make the checkpoint directory $PSTRAIN_CHECKPOINT_DIR: export PSTRAIN_CHECKPOINT_DIR=DIR, a writable path every node shares" >&2
  exit 2
}
export PSTRAIN_CHECKPOINT_DIR

echo "tf-train.sh: job ${SLURM_JOB_ID:-?} (restart ${SLURM_RESTART_COUNT:-0}): ${PSTRAIN_CHIEF:+chief + }$PSTRAIN_NUM_PS ps + $PSTRAIN_NUM_WORKERS workers on ${SLURM_JOB_NODELIST:-?}, checkpoints $PSTRAIN_CHECKPOINT_DIR: $*"
shell_signalled=0
trap 'shell_signalled=1; echo "tf-train.sh: SIGTERM: waiting for the tasks to stop" >&2' TERM
# srun through pstrain-srun ($PSTRAIN_SRUN, else PATH; plain srun where
# neither is): a task's end that srun never heard (its node's link down at
# that moment) would leave the job RUNNING with nothing running.
srun=${PSTRAIN_SRUN:-$(command -v pstrain-srun || echo srun)}
set +e
# --kill-on-bad-exit: a task whose pstrain-run itself dies ends the step.
"$srun" --kill-on-bad-exit=1 "$run" "${run_opts[@]}" -- "$@" &
srun_pid=$!
while :; do
  wait "$srun_pid"
  rc=$?
  kill -0 "$srun_pid" 2>/dev/null || break
done
set -e
if [ "$rc" -eq 143 ] && [ "$shell_signalled" = 0 ] && [ "${PSTRAIN_REQUEUE:-1}" != 0 ] && [ -n "${SLURM_JOB_ID:-}" ]; then
  echo "tf-train.sh: the chief stopped on SIGTERM: requeueing job $SLURM_JOB_ID"
  scontrol requeue "$SLURM_JOB_ID" || echo "tf-train.sh: scontrol requeue $SLURM_JOB_ID failed: resubmit this job" >&2
  exit 0
fi
exit "$rc"
