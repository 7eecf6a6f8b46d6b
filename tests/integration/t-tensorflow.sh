# Users' own TensorFlow programs on the local cluster, with real TensorFlow
# (pinned tensorflow-cpu and tf-keras in .venv): ParameterServerStrategy
# with Keras and with a custom loop, a TF1 between-graph program with the
# classic flags, and the failures pstrain-run must turn into a clean end.

tf_train=$PSTRAIN_SRCDIR/scripts/tf-train.sh
examples=$PSTRAIN_SRCDIR/examples/tensorflow
export PSTRAIN_RUN=$PSTRAIN_BUILDDIR/launcher/pstrain-run

# Programs of this test's jobs still running anywhere.
tf_left() { pgrep -f "$examples/" || true; }
expect_nothing_left() {
  local i
  for i in $(seq 1 20); do [ -z "$(tf_left)" ] && return 0; sleep 0.5; done
  fail "TensorFlow processes of the job are still running: $(tf_left | tr '\n' ' ')"
}
# tf_pid ROLE INDEX: the pid of that task's program.
tf_pid() {
  local p env
  # The program (python3 .../examples/...), not pstrain-run, whose command line names it too.
  for p in $(pgrep -f "^[^ ]*python3 $examples/"); do
    env=$({ tr '\0' '\n' <"/proc/$p/environ"; } 2>/dev/null) || continue
    grep -qx "PSTRAIN_ROLE=$1" <<<"$env" && grep -qx "PSTRAIN_TASK_INDEX=$2" <<<"$env" && { echo "$p"; return 0; }
  done
  return 1
}
# wait_for_line FILE TEXT SECONDS
wait_for_line() {
  local i
  for i in $(seq 1 $(($3 * 2))); do grep -q "$2" "$1" 2>/dev/null && return 0; sleep 0.5; done
  fail "no '$2' in $1 after $3 s: $(tail -n 5 "$1" 2>/dev/null | tr '\n' ' ')"
}

# submit_tf SBATCH_FLAGS... -- TF_TRAIN_ARGS...: submits tf-train.sh with
# output in job.out; sets $id.
submit_tf() {
  local flags=()
  while [ "$1" != -- ]; do flags+=("$1"); shift; done
  shift
  run sbatch --parsable -N3 "${flags[@]}" -o "$PWD/job.out" "$tf_train" "$@"
  expect_rc 0
  id=$out
}
# finish_tf [SECONDS]: waits for the job, keeps its output in the log; sets
# $job_state and $result (the chief's JSON line, or "").
finish_tf() {
  wait_job "$id" "${1:-600}"
  cat job.out >>"$TEST_LOG"
  result=$(grep '^{"event": "done"' job.out | tail -n 1 || true)
}

test_pss_keras_fit_reaches_085_and_leaves_nothing_behind() {
  local venv id result
  venv=$(python_env tensorflow)
  submit_tf --ps=2 --workers=2 --chief -- "$venv/bin/python3" "$examples/pss_keras.py"
  finish_tf
  expect_eq "$job_state" COMPLETED "job state"
  [ -n "$result" ] || fail "the chief printed no result"
  python3 -c "import json,sys; r=json.loads(sys.argv[1]); sys.exit(0 if r['test_accuracy'] >= 0.85 else 1)" "$result" ||
    fail "test accuracy below 0.85: $result"
  grep -qE "pstrain-run\[chief 0\]: chief 0 \(n[0-9]+\) ended with exit status 0: ending the step's other tasks" job.out ||
    fail "pstrain-run did not say the chief ended the step"
  expect_nothing_left
  expect_nodes_idle
}

test_pss_custom_loop_survives_a_killed_worker() {
  local venv id pid result
  venv=$(python_env tensorflow)
  submit_tf --ps=2 --workers=2 --chief -- "$venv/bin/python3" "$examples/pss_custom_loop.py" --steps 2000
  # Mid-run (training has begun), kill -9 worker 1's program.
  wait_for_line job.out "pss_custom_loop: step" 300
  pid=$(tf_pid worker 1) || fail "worker 1's program is not running"
  kill -9 "$pid"
  echo "killed worker 1 (pid $pid)" >>"$TEST_LOG"
  finish_tf
  expect_eq "$job_state" COMPLETED "job state"
  grep -qE "worker 1 \(n[0-9]+\) ended with signal 9 \(Killed\); the job goes on without it" job.out ||
    fail "pstrain-run did not say that worker 1 was lost and tolerated"
  python3 -c "import json,sys; r=json.loads(sys.argv[1]); sys.exit(0 if r['global_step'] >= 2000 and r['test_accuracy'] >= 0.8 else 1)" \
    "$result" || fail "training did not complete its steps: $result"
  expect_nothing_left
}

test_between_graph_classic_flags_learns_the_line_and_checkpoints() {
  local venv id result
  venv=$(python_env tensorflow)
  mkdir -p ckpt
  submit_tf --ps=2 --workers=2 -- --classic-flags "$venv/bin/python3" "$examples/between_graph.py" --checkpoint-dir "$PWD/ckpt"
  finish_tf
  expect_eq "$job_state" COMPLETED "job state"
  python3 -c "import json,sys; r=json.loads(sys.argv[1]); sys.exit(0 if abs(r['weight'] - 2) < 0.05 and abs(r['bias'] - 10) < 0.05 else 1)" \
    "$result" || fail "y = 2x + 10 not learnt within 0.05: $result"
  ls ckpt/model.ckpt-*.index >/dev/null 2>&1 || fail "the chief wrote no checkpoint to the shared path: $(ls ckpt)"
  expect_nothing_left
}

test_a_killed_ps_fails_the_job_within_30s_naming_it() {
  local venv id pid t0
  venv=$(python_env tensorflow)
  submit_tf --ps=2 --workers=2 --chief -- "$venv/bin/python3" "$examples/pss_keras.py" --steps 100000
  wait_for_line job.out "Epoch 1/" 300
  pid=$(tf_pid ps 1) || fail "ps 1's program is not running"
  kill -9 "$pid"
  t0=$SECONDS
  finish_tf 60
  [ $((SECONDS - t0)) -le 30 ] || fail "the job took $((SECONDS - t0)) s to end after ps 1 was killed"
  [ "$job_state" != COMPLETED ] || fail "the job COMPLETED without its ps"
  grep -qE "pstrain-run\[ps 1\]: error: ps 1 \(n[0-9]+\) ended with signal 9 \(Killed\): the job cannot go on without its ps tasks" job.out ||
    fail "no line named the killed ps"
  expect_nothing_left
  expect_nodes_idle
}

test_pstrain_run_outside_a_ps_step_says_what_to_do() {
  run env -u PSTRAIN_ROLE "$PSTRAIN_RUN" -- true
  expect_rc 2
  expect_contains "pstrain-run: error: PSTRAIN_ROLE is not set: run pstrain-run under srun --ps=N --workers=M"
  run "$PSTRAIN_RUN" --bogus -- true
  expect_rc 2
  expect_contains "unknown option '--bogus': see pstrain-run --help"
  run "$PSTRAIN_RUN" --late-start soon -- true
  expect_rc 2
  expect_contains "pstrain-run: error: --late-start soon: give whole seconds from 0 to 3600"
  run srun -N1 --ps=1 --workers=1 "$PSTRAIN_RUN" -- /nonexistent/program
  expect_fail
  expect_contains "cannot run '/nonexistent/program': No such file or directory"
  # A decider that fails makes the step fail with its status.
  run srun -N2 --ps=1 --workers=1 "$PSTRAIN_RUN" -- bash -c '[ "$PSTRAIN_ROLE" = ps ] && exec sleep 600; exit 3'
  expect_rc 3
  expect_contains ", the chief) ended with exit status 3: ending the step's other tasks"
  expect_contains "pstrain-run[ps 0]: ps 0 (n"
}

# The program's checkpoint directory: this submission's own, private, the
# same in every task; another submission (the same directory, the same
# script) gets another.
test_tf_train_gives_each_submission_its_own_private_checkpoint_directory() {
  local prog='[ "$PSTRAIN_ROLE" = ps ] && exec sleep 600; echo "dir=$PSTRAIN_CHECKPOINT_DIR mode=$(stat -c %a "$PSTRAIN_CHECKPOINT_DIR")"'
  local first second
  submit_tf --ps=1 --workers=2 -- bash -c "$prog"
  finish_tf 120
  expect_eq "$job_state" COMPLETED "job state"
  first=$(grep -m 1 '^dir=' job.out || true)
  [[ "$first" =~ ^dir=$PWD/pstrain-checkpoints/[^/]+-$id-[0-9]{8}T[0-9]{6}-[0-9a-f]{8}\ mode=700$ ]] ||
    fail "the program's PSTRAIN_CHECKPOINT_DIR: '$first' (expected $PWD/pstrain-checkpoints/<cluster>-$id-<submission>, mode 700)"
  expect_eq "$(grep '^dir=' job.out | sort -u | wc -l)" 1 "directories seen by the job's two workers"
  rm -f job.out
  submit_tf --ps=1 --workers=2 -- bash -c "$prog"
  finish_tf 120
  second=$(grep -m 1 '^dir=' job.out || true)
  [ -n "$second" ] && [ "$second" != "$first" ] || fail "a second submission got the first's directory: $second"
}

# A node that starts its task late (here the ps's pstrain-run starts 3 s
# after the others) misses a step's end sent before it caught it: the
# chief's pstrain-run sends it again until the step is --late-start old.
test_a_ps_that_starts_after_the_chief_ended_is_still_stopped() {
  local id late=$PWD/late-pstrain-run
  printf '#!/bin/bash\n[ "$PSTRAIN_ROLE" = ps ] && sleep 3\nexec %q "$@"\n' "$PSTRAIN_RUN" >"$late"
  chmod +x "$late"
  PSTRAIN_RUN=$late submit_tf --ps=1 --workers=2 -- --late-start 8 bash -c '[ "$PSTRAIN_ROLE" = ps ] && exec sleep 600; echo done'
  finish_tf 60
  expect_eq "$job_state" COMPLETED "job state"
  grep -q "pstrain-run\[ps 0\]: ps 0 (n[0-9]*): the step is ending: its program stopped" job.out ||
    fail "the late ps was not stopped by the step's end"
}

# Preemption as in train.sh: SIGTERM to the steps, the chief's program ends on
# it (143), tf-train.sh requeues the job.
test_sigterm_to_the_step_requeues_the_job() {
  local venv id i
  venv=$(python_env tensorflow)
  submit_tf --ps=1 --workers=1 --chief -- "$venv/bin/python3" "$examples/pss_keras.py" --steps 100000
  wait_for_line job.out "Epoch 1/" 300
  scancel --signal=TERM "$id"
  for i in $(seq 1 120); do
    scontrol show job "$id" | grep -q 'Restarts=1' && break
    sleep 0.5
  done
  scancel "$id"
  finish_tf 60
  grep -qE "pstrain-run\[chief 0\]: chief 0 \(n[0-9]+\) ended with signal 15 \(Terminated\) after the step was sent signal 15" job.out ||
    fail "pstrain-run did not say the chief stopped on the step's SIGTERM"
  grep -q "tf-train.sh: the chief stopped on SIGTERM: requeueing job $id" job.out || fail "tf-train.sh did not requeue"
  expect_eq "$(scontrol show job "$id" | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p')" 1 "restarts"
  expect_nothing_left
}
