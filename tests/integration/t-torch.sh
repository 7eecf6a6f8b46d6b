# shellcheck shell=bash disable=SC2154  # $pstrain, $job_state, $out and $rc come from lib.sh
# Users' own PyTorch programs on the local cluster, with real PyTorch (the
# pinned torch of python/requirements-torch.txt in .venv) and the pstrain
# package built against this build tree (make check builds it into
# tests/python/pkg): torch-train.sh runs pstrain serve in the ps tasks and
# the program in the workers.  The examples/torch programs against the same
# model trained in one process, the DLRM model on 1 PS and on 2, a worker
# and a ps killed, and bad input ending the job with one clear line.

torch_train=$PSTRAIN_SRCDIR/scripts/torch-train.sh
examples=$PSTRAIN_SRCDIR/examples/torch
bad_input=$PSTRAIN_SRCDIR/tests/integration/torch_bad_input.py
as_users_write=$PSTRAIN_SRCDIR/tests/integration/torch_as_users_write.py
export PSTRAIN_RUN=$PSTRAIN_BUILDDIR/launcher/pstrain-run
export PSTRAIN_BIN=$PSTRAIN_BUILDDIR/trainer/pstrain

# torch_python: the venv's python3 with torch, on stdout; exports the
# PYTHONPATH of the package built against this tree (the jobs inherit it).
torch_python() {
  local venv pkg=$PSTRAIN_BUILDDIR/tests/python/pkg
  venv=$(python_env torch)
  ls "$pkg"/pstrain/_core*.so >/dev/null 2>&1 ||
    fail "pstrain's Python package is not built in $pkg: run make check (tests/python/run-python-tests builds it)"
  echo "$venv/bin/python3"
}
use_package() { export PYTHONPATH=$PSTRAIN_BUILDDIR/tests/python/pkg; }

# Processes of this test's jobs still running anywhere: the programs and the servers.
torch_left() { pgrep -f "$examples/|$bad_input|$as_users_write|$PSTRAIN_BIN serve" || true; }
expect_nothing_left() {
  local _
  for _ in $(seq 1 20); do [ -z "$(torch_left)" ] && return 0; sleep 0.5; done
  fail "processes of the job are still running: $(torch_left | tr '\n' ' ')"
}
# task_pid PATTERN ROLE INDEX: the pid of that task's process matching PATTERN.
task_pid() {
  local p env
  for p in $(pgrep -f "$1"); do
    env=$({ tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null) || continue
    grep -qx "PSTRAIN_ROLE=$2" <<<"$env" && grep -qx "PSTRAIN_TASK_INDEX=$3" <<<"$env" && { echo "$p"; return 0; }
  done
  return 1
}
wait_for_line() {  # wait_for_line FILE TEXT SECONDS
  local _
  for _ in $(seq 1 $(($3 * 2))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.5; done
  fail "no '$2' in $1 after $3 s: $(tail -n 5 "$1" 2>/dev/null | tr '\n' ' ')"
}

# submit_torch OUT SBATCH_FLAGS... -- TORCH_TRAIN_ARGS...: submits
# torch-train.sh with its output in OUT; sets $id.
submit_torch() {
  local output=$1 flags=()
  shift
  while [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  run sbatch --parsable -N3 "${flags[@]}" -o "$PWD/$output" "$torch_train" --threads 1 "$@"
  expect_rc 0
  id=$out
}
# finish_torch OUT [SECONDS]: waits for the job, keeps its output in the
# log; sets $job_state and $result (the chief's JSON line, or "").
finish_torch() {
  wait_job "$id" "${2:-300}"
  { echo "--- $1"; cat "$1"; } >>"$TEST_LOG"
  result=$(grep '^{"event": "done"' "$1" | tail -n 1 || true)
}
json() { python3 -c "import json,sys; print(json.loads(sys.argv[1])['$2'])" "$1"; }

# The CNN's settings: Adagrad, whose steps shrink as it goes, so that the
# accuracy at the end depends little on the order the batches came in (with
# Adam at a fixed rate, four orders of the same 1000 steps ended 0.009
# apart; with these, within 0.001 at 2000 steps).
cnn_args=(--optimizer adagrad --lr 0.05 --batch-size 64 --log-every 250)

# The distributed run reaches the accuracy of the same model, seed and steps
# in one process (--as-workers 2: the batches two workers draw and, async,
# the one update of delay each of them computes its gradients with) less
# 0.005.  Async runs 8000 steps: at 4000 the job's accuracy varied from run
# to run by 0.008 (0.8564-0.8638 against the single process's 0.8664); at
# 8000 it came out 0.8724 and 0.8779 against 0.8691.
cnn_against_single_process() {  # MODE STEPS
  local py mode=$1 steps=$2 single id result
  py=$(torch_python)
  # The single process beside the job (its result does not depend on the
  # time it takes, and the job's only on the order it takes).
  OMP_NUM_THREADS=1 "$py" "$examples/cnn_fashion_mnist.py" --single-process --as-workers 2 "--$mode" --steps "$steps" \
    "${cnn_args[@]}" >single.out 2>&1 &
  local single_pid=$!
  use_package
  submit_torch job.out --ps=1 --workers=2 -- "$py" "$examples/cnn_fashion_mnist.py" "--$mode" --steps "$steps" "${cnn_args[@]}"
  finish_torch job.out
  wait "$single_pid" || fail "the single-process run failed: $(tail -n 3 single.out)"
  single=$(last_json <single.out)
  expect_eq "$job_state" COMPLETED "job state"
  [ -n "$result" ] || fail "the chief printed no result"
  echo "single process: $single; pstrain: $result" >>"$TEST_LOG"
  expect_eq "$(json "$result" mode)" "$mode" "mode"
  expect_at_least "$(json "$result" global_step)" "$steps" "global step"
  expect_at_least "$(json "$result" test_accuracy)" "$(python3 -c "print($(json "$single" test_accuracy) - 0.005)")" \
    "test accuracy against the single process's $(json "$single" test_accuracy)"
  grep -qE "pstrain-run\[worker 0\]: worker 0 \(n[0-9]+, the chief\) ended with exit status 0: ending the step's other tasks" job.out ||
    fail "pstrain-run did not say the chief ended the step"
  grep -qE "pstrain-run\[ps 0\]: ps 0 \(n[0-9]+\) ended with exit status 0: its server was shut down" job.out ||
    fail "pstrain serve did not end on the chief's shutdown"
  expect_nothing_left
  expect_nodes_idle
}

test_cnn_sync_on_1_ps_2_workers_reaches_the_single_process_accuracy() { cnn_against_single_process sync 1000; }
test_cnn_async_on_1_ps_2_workers_reaches_the_single_process_accuracy() { cnn_against_single_process async 8000; }

# 1 PS against 2: the same sync training (same seed, same shards, the ps
# average the same two gradients a step), sharded differently.  Nothing the
# model computes depends on where a row or a slice lives (a row's first
# value comes from the table's seed and the id alone), so the AUC must
# agree; 0.001 leaves room for a different order of float sums only (here
# both gave 0.7038, the same log loss too, against the data's best 0.785).
test_dlrm_on_1_ps_and_on_2_ps_reaches_the_same_auc() {
  local py id result auc1 auc2 oracle
  py=$(torch_python)
  run "$pstrain" datagen ctr --samples 30000 --seed 7 --lines-per-file 10000 ctr
  expect_rc 0
  oracle=$(json "$out" oracle_auc)
  use_package
  for ps in 1 2; do
    submit_torch "job$ps.out" --ps=$ps --workers=2 -- "$py" "$examples/dlrm_ctr.py" --data "$PWD/ctr" --sync --steps 300 \
      --batch-size 128 --log-every 100
    finish_torch "job$ps.out"
    expect_eq "$job_state" COMPLETED "job state with $ps ps"
    [ -n "$result" ] || fail "the chief printed no result with $ps ps"
    expect_eq "$(json "$result" ps)" "$ps" "ps tasks"
    eval "auc$ps=$(json "$result" test_auc)"
  done
  echo "AUC: 1 ps $auc1, 2 ps $auc2, the data's best $oracle" >>"$TEST_LOG"
  expect_at_least "$auc1" 0.6 "AUC with 1 ps (it learnt nothing)"
  python3 -c "import sys; sys.exit(0 if abs($auc1 - $auc2) <= 0.001 else 1)" ||
    fail "AUC with 1 ps $auc1 and with 2 ps $auc2 differ by more than 0.001"
  expect_nothing_left
  expect_nodes_idle
}

# cnn_job_losing_worker_1 PYTHON FLAGS...: a 1 PS + 2 workers job of the
# cnn example with FLAGS; worker 1's program is killed (-9) once the chief
# trains.  The job must complete, pstrain-run saying the loss is
# tolerated, and the chief must print its result (in $result).
cnn_job_losing_worker_1() {
  local py=$1 pid; shift
  submit_torch job.out --ps=1 --workers=2 -- "$py" "$examples/cnn_fashion_mnist.py" "$@" "${cnn_args[@]}"
  wait_for_line job.out "cnn_fashion_mnist\[worker 0\]: step" 240
  pid=$(task_pid "^[^ ]*python3 $examples/" worker 1) || fail "worker 1's program is not running"
  kill -9 "$pid"
  echo "killed worker 1 (pid $pid)" >>"$TEST_LOG"
  finish_torch job.out
  expect_eq "$job_state" COMPLETED "job state"
  grep -qE "worker 1 \(n[0-9]+\) ended with signal 9 \(Killed\); the job goes on without it" job.out ||
    fail "pstrain-run did not say that worker 1 was lost and tolerated"
  [ -n "$result" ] || fail "the chief printed no result"
}

test_a_worker_killed_in_async_training_does_not_stop_it() {
  local py result
  py=$(torch_python)
  use_package
  # A staleness bound: the lost worker, the slowest, holds nobody back.
  cnn_job_losing_worker_1 "$py" --async --max-staleness 2 --steps 3000
  expect_at_least "$(json "$result" global_step)" 3000 "global step"
  expect_at_least "$(json "$result" test_accuracy)" 0.8 "test accuracy"
  grep -qE "pstrain\[ps 0\]: the chief's max_staleness 2: the fastest worker led the slowest by at most [0-3] steps" job.out ||
    fail "ps 0 did not end with the chief's staleness bound, or the bound let a worker lead by more than 3"
  expect_nothing_left
  expect_nodes_idle
}

# --elastic, sync: worker 1 killed; each step then aggregates the chief's
# gradient alone, the chief's ElasticSampler re-splits and gives it the
# whole training set (the line prints the sampler's own split and size),
# and the job completes.
test_a_worker_killed_in_elastic_sync_training_does_not_stop_it() {
  local py result
  py=$(torch_python)
  use_package
  cnn_job_losing_worker_1 "$py" --sync --elastic --steps 1500
  grep -qE "pstrain\[ps 0\]: warning: lost worker 1 \(n[0-9]+\) \(.*\): elastic sync training goes on, aggregating 1 gradients per step" job.out ||
    fail "ps 0 did not say that it aggregates the chief's gradient alone"
  grep -qE "cnn_fashion_mnist\[worker 0\]: data: re-split among the 1 live workers of 2 at global step [0-9]+: shard 0 of 1 \(60000 images\)" job.out ||
    fail "the chief's ElasticSampler did not give it the whole training set"
  expect_at_least "$(json "$result" global_step)" 1500 "global step"
  expect_at_least "$(json "$result" test_accuracy)" 0.8 "test accuracy"
  expect_nothing_left
  expect_nodes_idle
}

# --elastic, sync, under torch-train.sh (PMIx): ps 0 writes the join file
# into the checkpoint directory; worker 1 killed, and the same program
# started outside the step with PSTRAIN_JOIN and PSTRAIN_JOIN_INDEX=1 takes
# its place (the step's key, the PS's listener): the PS aggregates 2
# gradients a step again, the joined program ends with the job, and the
# join file goes with it.
test_a_program_started_with_pstrain_join_takes_a_lost_workers_place() {
  local py pid joiner joined_rc i
  py=$(torch_python)
  use_package
  local program=("$py" "$examples/cnn_fashion_mnist.py" --sync --elastic --steps 3000 "${cnn_args[@]}")
  submit_torch job.out --ps=1 --workers=2 -- --checkpoint-dir "$PWD/ckpt" "${program[@]}"
  wait_for_line job.out "cnn_fashion_mnist\[worker 0\]: step" 240
  [ -f ckpt/join ] || fail "ps 0 wrote no join file into the checkpoint directory"
  grep -q "PSTRAIN_JOIN=$PWD/ckpt/join PSTRAIN_JOIN_INDEX=I takes lost worker I's place" job.out ||
    fail "ps 0 did not say how a program joins"
  pid=$(task_pid "^[^ ]*python3 $examples/" worker 1) || fail "worker 1's program is not running"
  kill -9 "$pid"
  wait_for_line job.out "lost worker 1" 60
  # On n3 (its namespace on a --netns cluster), outside the job's step.
  local on_n3=()
  [ ! -f "$(dirname "$SLURM_CONF")/netns" ] || on_n3=(ip netns exec pstn3)
  "${on_n3[@]}" env -u SLURM_CONF PSTRAIN_JOIN="$PWD/ckpt/join" PSTRAIN_JOIN_INDEX=1 timeout 300 "${program[@]}" \
    >joined.out 2>&1 &
  joiner=$!
  finish_torch job.out
  wait $joiner && joined_rc=0 || joined_rc=$?
  { echo "--- joined.out (exit status $joined_rc)"; cat joined.out; } >>"$TEST_LOG"
  expect_eq "$job_state" COMPLETED "job state"
  expect_eq "$joined_rc" 0 "exit status of the joined program"
  grep -qE "pstrain\[ps 0\]: worker 1 \(n[0-9]+\) joined again: elastic sync training aggregates 2 gradients per step" job.out ||
    fail "ps 0 did not take the joined program in"
  grep -qE "cnn_fashion_mnist\[worker 1\]: stopped at global step 3000 after [1-9][0-9]* steps of its own" joined.out ||
    fail "the joined program trained no step"
  expect_at_least "$(json "$result" global_step)" 3000 "global step"
  [ ! -e ckpt/join ] || fail "the join file outlived the job"
  expect_nothing_left
  expect_nodes_idle
}

test_a_killed_ps_ends_the_job_within_30s_naming_it() {
  local py id pid t0
  py=$(torch_python)
  use_package
  submit_torch job.out --ps=2 --workers=2 -- "$py" "$examples/cnn_fashion_mnist.py" --async --steps 1000000 "${cnn_args[@]}"
  wait_for_line job.out "cnn_fashion_mnist\[worker 0\]: step" 240
  pid=$(task_pid "^$PSTRAIN_BIN serve" ps 1) || fail "ps 1's server is not running"
  kill -9 "$pid"
  t0=$SECONDS
  finish_torch job.out 60
  [ $((SECONDS - t0)) -le 30 ] || fail "the job took $((SECONDS - t0)) s to end after ps 1 was killed"
  [ "$job_state" != COMPLETED ] || fail "the job COMPLETED without its ps"
  grep -qE "pstrain-run\[ps 1\]: error: ps 1 \(n[0-9]+\) ended with signal 9 \(Killed\): the job cannot go on without its ps tasks: ending the step" job.out ||
    fail "no line named the killed ps"
  expect_nothing_left
  expect_nodes_idle
}

# A program as users write it (torch_as_users_write.py): pstrain.init() for
# its index, DistributedOptimizer without context= (the same context: one
# bootstrap), and the end of the program without finish().  Worker 1 stops
# after 20 steps and leaves as its program ends; the chief trains on alone
# (sync: each step then aggregates its gradient) to step 40, and its exit
# ends the job: COMPLETED, on one node and on three.
program_without_finish() {  # NODES
  local py
  py=$(torch_python)
  use_package
  submit_torch job.out --ps=1 --workers=2 "-N$1" -- "$py" "$as_users_write" --steps 40 --worker-steps 20 --print-device
  finish_torch job.out 180
  [ "$job_state" = COMPLETED ] || fail "the job ended $job_state, not COMPLETED"
  # No GPU asked for: the program is told the cpu.
  expect_eq "$(grep -c '^device: worker [01] cpu CUDA_VISIBLE_DEVICES=<unset>$' job.out)" 2 "workers told the cpu"
  expect_eq "$(json "$result" global_step)" 40 "the chief's global step"
  grep -qE "pstrain\[ps 0\]: worker 1 \(n[0-9]+\) left \(its program ended\): sync training aggregates 1 gradients per step from global step 20 \(was 2\)" job.out ||
    fail "ps 0 did not say that worker 1 left at global step 20"
  grep -qE "lost worker [0-9]" job.out && fail "a worker that ended its program was counted lost"
  expect_nothing_left
  expect_nodes_idle
}
# torch-train.sh with GPUs (the test cluster's, names only): on one node
# with --gres=gpu:2, the plugin gives each worker one of them (and the ps
# task none, t-plugin.sh), and ctx.device tells the program cuda:0.
test_torch_train_sh_with_gpus_gives_each_worker_one_and_tells_the_program() {
  local py
  py=$(torch_python)
  use_package
  submit_torch job.out --ps=1 --workers=2 -N1 --gres=gpu:2 -- "$py" "$as_users_write" --steps 10 --print-device
  finish_torch job.out 180
  [ "$job_state" = COMPLETED ] || fail "the job ended $job_state, not COMPLETED"
  grep -qx "device: worker 0 cuda:0 CUDA_VISIBLE_DEVICES=0" job.out || fail "worker 0 was not told cuda:0 with GPU 0"
  grep -qx "device: worker 1 cuda:0 CUDA_VISIBLE_DEVICES=1" job.out || fail "worker 1 was not told cuda:0 with GPU 1"
  expect_nothing_left
  expect_nodes_idle
}

test_a_program_that_ends_without_finish_completes_on_one_node() { program_without_finish 1; }
test_a_program_that_ends_without_finish_completes_on_three_nodes() { program_without_finish 3; }

# Both workers train every step and end without finish(): whichever ends
# first, the job COMPLETES and no worker is counted lost.
test_workers_that_end_together_without_finish_complete_the_job() {
  local py
  py=$(torch_python)
  use_package
  submit_torch job.out --ps=1 --workers=2 -- "$py" "$as_users_write" --steps 40
  finish_torch job.out 180
  [ "$job_state" = COMPLETED ] || fail "the job ended $job_state, not COMPLETED"
  expect_eq "$(json "$result" global_step)" 40 "the chief's global step"
  grep -qE "lost worker [0-9]" job.out && fail "a worker that ended its program was counted lost"
  expect_nothing_left
  expect_nodes_idle
}

# A second bootstrap in one process, asked of the library itself (not
# through pstrain.init(), which returns the first context): refused at once
# in one line naming the fix, and the job trains on.
test_a_second_bootstrap_in_one_process_is_refused_in_one_line() {
  local py
  py=$(torch_python)
  use_package
  submit_torch job.out --ps=1 --workers=2 -- "$py" "$as_users_write" --steps 20 --second-bootstrap
  finish_torch job.out 180
  [ "$job_state" = COMPLETED ] || fail "the job ended $job_state, not COMPLETED"
  expect_eq "$(grep -c "^refused: worker [01] bootstrapped once already in this process (it joined its step, or failed to): a second bootstrap would wait for peers that never join it: keep the first connection" job.out)" 2 "workers whose second bootstrap was refused"
  expect_nothing_left
  expect_nodes_idle
}

# The same program whose worker 1 raises half-way: a crash, not a leave:
# the job fails naming worker 1.
test_a_worker_whose_program_crashes_is_lost_and_named() {
  local py
  py=$(torch_python)
  use_package
  submit_torch job.out --ps=1 --workers=2 -- "$py" "$as_users_write" --steps 400 --crash-worker 1
  finish_torch job.out 180
  [ "$job_state" != COMPLETED ] || fail "the job COMPLETED though worker 1 crashed"
  # Its PS names it lost, or its pstrain-run ends the step naming it first.
  grep -qE "pstrain\[ps 0\]: error: lost worker 1 \(n[0-9]+\)|pstrain-run\[worker 1\]: error: worker 1 \(n[0-9]+\) ended with" job.out ||
    fail "neither ps 0 nor pstrain-run named the crashed worker 1"
  grep -q "RuntimeError: worker 1 crashed at step" job.out || fail "the program's own error is not in the output"
  grep -q "left (its program ended)" job.out && fail "a crashed worker was taken to have left"
  expect_nothing_left
  expect_nodes_idle
}

# Worker 1 never joins the bootstrap (its program sleeps before
# pstrain.init()): the others' init(timeout=10) ends within the timeout
# and a few seconds, whatever PMIx's own timeout does (across nodes
# Slurm's mpi/pmix waited over 5 minutes), and the job with it.
bootstrap_that_a_task_never_joins() {  # NODES
  local py t0
  py=$(torch_python)
  use_package
  t0=$SECONDS
  submit_torch job.out --ps=1 --workers=2 "-N$1" -- "$py" "$as_users_write" --absent-worker 1 --timeout 10
  finish_torch job.out 240
  [ $((SECONDS - t0)) -le 90 ] || fail "the job took $((SECONDS - t0)) s to end; the bootstrap's timeout was 10 s"
  [ "$job_state" != COMPLETED ] || fail "the job COMPLETED without worker 1"
  grep -q "pstrain.Error: bootstrap: the PMIx fence did not complete within 10s" job.out ||
    fail "the chief did not say that the bootstrap timed out"
  expect_nothing_left
  expect_nodes_idle
}
test_a_bootstrap_that_a_task_never_joins_ends_on_one_node() { bootstrap_that_a_task_never_joins 1; }
test_a_bootstrap_that_a_task_never_joins_ends_on_three_nodes() { bootstrap_that_a_task_never_joins 3; }

# Bad input: the job fails, one line says what is wrong, nothing is left.
bad_input_case() {  # CASE EXPECTED_TEXT
  local py id result
  py=$(torch_python)
  use_package
  submit_torch job.out --ps=1 --workers=2 -- "$py" "$bad_input" --case "$1"
  finish_torch job.out 120
  [ "$job_state" = FAILED ] || fail "the job ended $job_state, not FAILED"
  [ -z "$result" ] || fail "the job trained: $result"
  out=$(grep -E "^torch_bad_input: error: " job.out || true)
  [ "$(printf '%s\n' "$out" | grep -c .)" -ge 1 ] || fail "no error line from the program"
  expect_contains "$2"
  grep -q '^Traceback' job.out && fail "a traceback instead of one line"
  expect_nothing_left
  expect_nodes_idle
}

test_a_parameter_shape_that_differs_between_workers_is_one_clear_error() {
  # The library compares sizes (the wire carries no names): the line counts the parameters.
  bad_input_case shape "refused this worker's hello: a model of 139 parameters where the chief's has 130: do all tasks build the same model?"
}

test_a_non_contiguous_parameter_is_one_clear_error() {
  bad_input_case noncontiguous "parameter '2.weight' is not contiguous: make it so (p.data = p.data.contiguous())"
}

# A checkpoint of a 10-output model, then a run of an 11-output one from it.
test_a_model_changed_between_runs_is_one_clear_error() {
  local py id result step
  py=$(torch_python)
  use_package
  mkdir ckpt
  submit_torch job1.out --ps=1 --workers=2 -- --checkpoint-dir "$PWD/ckpt" "$py" "$bad_input" --case changed --width 10 --save
  finish_torch job1.out 120
  expect_eq "$job_state" COMPLETED "the first run's state"
  out=$(grep '^{"event": "saved"' job1.out || true)
  expect_contains '"outcomes": ["taken"]'
  step=$(json "$out" step)
  run "$pstrain" checkpoint seal "$PWD/ckpt" "$step" --mode sync \
    --receipts "$(python3 -c "import json,sys; print(json.dumps(json.loads(sys.argv[1])['receipts']))" "$out")"
  expect_rc 0
  submit_torch job2.out --ps=1 --workers=2 -- --checkpoint-dir "$PWD/ckpt" "$py" "$bad_input" --case changed --width 11 --restore "$step"
  finish_torch job2.out 120
  [ "$job_state" = FAILED ] || fail "the changed model's run ended $job_state, not FAILED"
  out=$(cat job2.out)
  expect_contains "holds 130 parameters but the chief's model has 139"
  expect_nothing_left
  expect_nodes_idle
}

# scontrol requeue of a running job: SIGTERM makes the chief save through
# the ps tasks and stop the job (143); the requeued job (the same
# default checkpoint directory) restores that checkpoint and completes.
test_a_requeued_job_resumes_from_the_chiefs_checkpoint() {
  local py i step result dir
  py=$(torch_python)
  use_package
  submit_torch job.out --ps=1 --workers=2 -- "$py" "$examples/cnn_fashion_mnist.py" --async --steps 2500 \
    --save-every 1000 "${cnn_args[@]}"
  wait_for_line job.out "cnn_fashion_mnist\[worker 0\]: step" 240
  scontrol requeue "$id"
  # Slurm holds a requeued job for two minutes: release it.
  for i in $(seq 1 150); do
    scontrol show job "$id" | grep -q 'Restarts=1' && scontrol show job "$id" | grep -q 'JobState=PENDING' && break
    sleep 0.2
  done
  scontrol update JobId="$id" StartTime=now
  finish_torch job.out 300
  expect_eq "$job_state" COMPLETED "job state"
  expect_eq "$(scontrol show job "$id" | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p')" 1 "restarts"
  step=$(sed -n 's/^pstrain: preempted: saved the checkpoint at global step \([0-9]*\);.*/\1/p' job.out | head -n 1)
  [ -n "$step" ] || fail "the chief did not say it saved on SIGTERM"
  out=$(cat job.out)
  expect_contains "cnn_fashion_mnist[worker 0]: restored from the checkpoint at global step $step"
  # The default directory is this submission's own, as private as its shards.
  dir=$(ls -d "$PWD"/pstrain-checkpoints/*-"$id"-* 2>/dev/null | head -n 1)
  [ -n "$dir" ] || fail "no default checkpoint directory pstrain-checkpoints/<cluster>-$id-<submission> in $PWD"
  expect_eq "$(stat -c %a "$dir")" 700 "mode of the default checkpoint directory"
  [ -n "$result" ] || fail "the chief printed no result"
  expect_at_least "$(json "$result" global_step)" 2500 "global step"
  expect_at_least "$(json "$result" test_accuracy)" 0.8 "test accuracy"
  expect_nothing_left
  expect_nodes_idle
}

test_torch_train_sh_outside_a_ps_job_says_what_to_do() {
  run env -u PSTRAIN_NUM_PS "$torch_train" python3 x.py
  expect_rc 2
  expect_eq "$out" "torch-train.sh: no --ps/--workers: submit it as sbatch --ps=N --workers=M torch-train.sh [--checkpoint-dir DIR] python3 my_model.py [ARGS...]" "error line"
  run env PSTRAIN_NUM_PS=1 PSTRAIN_NUM_WORKERS=1 "$torch_train"
  expect_rc 2
  expect_contains "torch-train.sh: no program: sbatch --ps=N --workers=M torch-train.sh"
  run env PSTRAIN_NUM_PS=1 PSTRAIN_NUM_WORKERS=1 "$torch_train" --bogus python3 x.py
  expect_rc 2
  expect_contains "torch-train.sh: unknown option '--bogus': give --checkpoint-dir, --stall-timeout, --threads, --worker-failures, --grace or --late-start before the program"
  run env PSTRAIN_NUM_PS=1 PSTRAIN_NUM_WORKERS=1 "$torch_train" --threads
  expect_rc 2
  expect_contains "torch-train.sh: --threads needs a value"
  run env PSTRAIN_NUM_PS=1 PSTRAIN_NUM_WORKERS=1 PSTRAIN_CHIEF=1 "$torch_train" python3 x.py
  expect_rc 2
  expect_contains "a PyTorch job's chief is worker 0: submit it without --chief"
  run env PSTRAIN_NUM_PS=1 PSTRAIN_NUM_WORKERS=1 PSTRAIN_BIN=/nonexistent "$torch_train" python3 x.py
  expect_rc 2
  expect_contains "torch-train.sh: pstrain not found (the ps tasks run pstrain serve): install pstrain (make install) or export PSTRAIN_BIN=/path/to/pstrain"
}
