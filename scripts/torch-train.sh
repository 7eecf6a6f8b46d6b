#!/bin/bash
# torch-train.sh — the job script to copy for your own PyTorch program on
# pstrain's parameter servers (the pstrain Python package, pstrain.torch).
#
#   sbatch --ps=2 --workers=4 torch-train.sh python3 my_model.py [ARGS...]
#   sbatch --ps=1 --workers=2 torch-train.sh --checkpoint-dir /shared/ckpt python3 my_model.py
#   sbatch --ps=1 --workers=2 --gres=gpu:2 torch-train.sh python3 my_model.py
#
# With --gres=gpu:N (or --gpus-per-task) the SPANK plugin gives each worker
# its share of the GPUs on its node in CUDA_VISIBLE_DEVICES and the ps
# tasks none; the program's pstrain.init() says its device (ctx.device:
# "cuda:0" or "cpu").
# The ps tasks run pstrain's own server, `pstrain serve` (no model flags: the
# chief's hello says the shapes, the optimizer, sync or async and the
# tables); the worker tasks run the program, whose pstrain.init() joins the
# step over PMIx (srun --mpi=pmix).  Every task runs under pstrain-run:
#   - the chief (worker 0) decides: when its program exits, the other tasks
#     are ended and the job's status is the chief's;
#   - a ps task that dies ends the job within seconds, with a line naming
#     it; a ps whose server the chief shut down waits for the chief;
#   - a worker killed by a signal (its node lost, kill -9, the OOM killer)
#     does not end the job: pstrain's servers go on with the workers left,
#     as for pstrain's own workers; a worker that exits with an error (a bad
#     input, a bug, which would come back) ends it.  --worker-failures
#     tolerate goes on after both, fail after neither.
#   - a program of an elastic job (pstrain.torch's elastic=True) started
#     later, outside the step, with PSTRAIN_JOIN=$PSTRAIN_CHECKPOINT_DIR/join
#     PSTRAIN_JOIN_INDEX=I takes lost worker I's place: ps 0 writes that
#     file while the job runs (pstrain-python(3)).
#
# Options before the program (the rest is the program and its arguments):
#   --checkpoint-dir DIR  where the ps tasks write their checkpoint shards
#                         (a path every node shares); default
#                         $PSTRAIN_CHECKPOINT_DIR, else
#                         pstrain-checkpoints/<cluster>-<job id>-<submission>
#                         in the submit directory: this job's own, which a
#                         requeued job keeps and a new submission does not
#   --stall-timeout SECONDS, --threads N
#                         passed to pstrain serve (see pstrain(1))
#   --worker-failures MODE, --grace SECONDS, --late-start SECONDS
#                         passed to pstrain-run (see pstrain-run(1))
# The server is $PSTRAIN_BIN when set (a build tree's trainer/pstrain), else
# pstrain on PATH; pstrain-run is $PSTRAIN_RUN, else on PATH.  The program
# finds the checkpoint directory in $PSTRAIN_CHECKPOINT_DIR.
#
# Preemption: on SIGTERM (preemption, scontrol requeue, or --signal=TERM@120
# two minutes before the time limit) every task gets SIGTERM; a chief that
# then exits 143 (pstrain.torch checkpoints and does) makes this script
# requeue the job.  Set PSTRAIN_REQUEUE=0 to exit instead.
#
#SBATCH --job-name=torch-train
#SBATCH --output=torch-train-%j.out
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --signal=TERM@120
set -euo pipefail

usage="sbatch --ps=N --workers=M torch-train.sh [--checkpoint-dir DIR] python3 my_model.py [ARGS...]"
if [ -z "${PSTRAIN_NUM_PS:-}" ]; then
  echo "torch-train.sh: no --ps/--workers: submit it as $usage" >&2
  exit 2
fi
if [ -n "${PSTRAIN_CHIEF:-}" ]; then
  echo "torch-train.sh: --chief is for TensorFlow's ParameterServerStrategy: a PyTorch job's chief is worker 0: submit it without --chief" >&2
  exit 2
fi

serve_opts=() run_opts=(--worker-failures=tolerate-killed) checkpoint_dir=${PSTRAIN_CHECKPOINT_DIR:-}
while [ $# -gt 0 ]; do
  case "$1" in
    --checkpoint-dir | --stall-timeout | --threads | --worker-failures | --grace | --late-start)
      [ $# -ge 2 ] || { echo "torch-train.sh: $1 needs a value: $usage" >&2; exit 2; }
      set -- "$1=$2" "${@:3}" ;;
    --checkpoint-dir=*) checkpoint_dir=${1#*=}; shift ;;
    --stall-timeout=* | --threads=*) serve_opts+=("$1"); shift ;;
    --worker-failures=* | --grace=* | --late-start=*) run_opts+=("$1"); shift ;;
    --) shift; break ;;
    -*) echo "torch-train.sh: unknown option '$1': give --checkpoint-dir, --stall-timeout, --threads, --worker-failures, --grace or --late-start before the program" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [ $# -eq 0 ]; then
  echo "torch-train.sh: no program: $usage" >&2
  exit 2
fi
# The server and the launcher: a build tree's ($PSTRAIN_BIN, $PSTRAIN_RUN), else PATH.
serve=${PSTRAIN_BIN:-$(command -v pstrain || true)}
if [ -z "$serve" ] || [ ! -x "$serve" ]; then
  echo "torch-train.sh: pstrain not found (the ps tasks run pstrain serve): install pstrain (make install) or export PSTRAIN_BIN=/path/to/pstrain" >&2
  exit 2
fi
run=${PSTRAIN_RUN:-$(command -v pstrain-run || true)}
if [ -z "$run" ] || [ ! -x "$run" ]; then
  echo "torch-train.sh: pstrain-run not found: install pstrain (make install) or export PSTRAIN_RUN=/path/to/pstrain-run" >&2
  exit 2
fi
if [ -z "$checkpoint_dir" ]; then
  # This job's own: another submission, also under the same job id, gets another.
  checkpoint_dir=${SLURM_SUBMIT_DIR:-$PWD}/pstrain-checkpoints/${SLURM_CLUSTER_NAME:-cluster}-${SLURM_JOB_ID:-manual}${PSTRAIN_SUBMISSION:+-$PSTRAIN_SUBMISSION}
fi
(umask 077 && mkdir -p "$checkpoint_dir") || {
  echo "torch-train.sh: cannot make the checkpoint directory $checkpoint_dir: give --checkpoint-dir DIR, a writable path every node shares" >&2
  exit 2
}
export PSTRAIN_CHECKPOINT_DIR=$checkpoint_dir
serve_cmd=("$serve" serve --checkpoint-dir "$checkpoint_dir" "${serve_opts[@]}")

echo "torch-train.sh: job ${SLURM_JOB_ID:-?} (restart ${SLURM_RESTART_COUNT:-0}): $PSTRAIN_NUM_PS ps + $PSTRAIN_NUM_WORKERS workers on ${SLURM_JOB_NODELIST:-?}, checkpoints $checkpoint_dir: $*"
shell_signalled=0
trap 'shell_signalled=1; echo "torch-train.sh: SIGTERM: waiting for the tasks to stop" >&2' TERM
# srun through pstrain-srun ($PSTRAIN_SRUN, else PATH; plain srun where
# neither is): a task's end that srun never heard (its node's link down at
# that moment) would leave the job RUNNING with nothing running.
srun=${PSTRAIN_SRUN:-$(command -v pstrain-srun || echo srun)}
set +e
# Each task's program: the ps tasks exec the server (its first $1 words),
# the workers the user's program (the rest).  exec: pstrain-run watches the
# server or the program itself, and names how it ended.
# shellcheck disable=SC2016  # expanded by the task's bash
task='n=$1; shift; if [ "$PSTRAIN_ROLE" = ps ]; then exec "${@:1:n}"; fi; shift "$n"; exec "$@"'
# --kill-on-bad-exit: a task whose pstrain-run itself dies ends the step.
"$srun" --mpi=pmix --kill-on-bad-exit=1 "$run" --ps-may-finish "${run_opts[@]}" -- \
  /bin/bash -c "$task" torch-task "${#serve_cmd[@]}" "${serve_cmd[@]}" "$@" &
srun_pid=$!
while :; do
  wait "$srun_pid"
  rc=$?
  kill -0 "$srun_pid" 2>/dev/null || break
done
set -e
if [ "$rc" -eq 143 ] && [ "$shell_signalled" = 0 ] && [ "${PSTRAIN_REQUEUE:-1}" != 0 ] && [ -n "${SLURM_JOB_ID:-}" ]; then
  echo "torch-train.sh: the chief stopped on SIGTERM: requeueing job $SLURM_JOB_ID"
  scontrol requeue "$SLURM_JOB_ID" || echo "torch-train.sh: scontrol requeue $SLURM_JOB_ID failed: resubmit this job" >&2
  exit 0
fi
exit "$rc"
