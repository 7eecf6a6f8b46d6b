# The stall watchdog (--stall-timeout) on the local cluster: a sync job
# whose PS is stopped with SIGSTOP mid-run fails each worker within a
# bounded time, naming ps 0 and showing its threads' stacks, exit status
# 124; nothing is left running and no node is drained.  A normal job with
# the default timeout is unaffected; 0 turns the watchdog off; bad values
# are one line each.

export OMP_NUM_THREADS=1

wd_task_pid() { job_tasks | awk -v r="$1" -v i="$2" '$2 == r && $3 == i {print $1; found = 1} END {exit !found}'; }

# start_and_stop ROLE INDEX SRUN-LAYOUT... -- pstrain-args...: starts the
# job (srun -N3 with the layout given, each task's output in task-N.out),
# and once it trains stops that task with SIGSTOP.  Sets $job (srun's pid)
# and $victim.
start_and_stop() {
  local role=$1 index=$2 layout=(); shift 2
  while [ "$1" != -- ]; do layout+=("$1"); shift; done
  shift
  export TEST_TAG=$RANDOM$RANDOM
  PSTRAIN_TEST_TAG=$TEST_TAG timeout 300 srun -N3 "${layout[@]}" --mpi=pmix -o "$PWD/task-%t.out" \
    env PSTRAIN_TEST_TAG=$TEST_TAG "$pstrain" --device cpu "$@" 2>"$PWD/srun.err" &
  job=$! victim=""
  local i
  for i in $(seq 1 120); do
    grep -q 'step [0-9]*/' task-*.out 2>/dev/null && victim=$(wd_task_pid "$role" "$index") && break
    sleep 0.5
  done
  [ -n "$victim" ] || { kill $job 2>/dev/null || true; fail "the job did not start training"; }
  echo "stopping $role $index (pid $victim) with SIGSTOP" >>"$TEST_LOG"
  kill -STOP "$victim"
}

# stop_during ROLE INDEX pstrain-args...: starts a sync job (1 PS, 2
# workers), stops that task with SIGSTOP once the job trains, waits (at most
# 90 s) until it is the only task of the job left, resumes it and waits for
# srun.  Sets $out (every task's output), $rc (srun's), $srun_err and
# $elapsed (from the stop until the other tasks had exited).
stop_during() {
  local role=$1 index=$2; shift 2
  start_and_stop "$role" "$index" --ps=1 --workers=2 -- --sync-replicas --train-steps 1000000 --log-every 100 "$@"
  local i t0=$SECONDS
  for i in $(seq 1 90); do
    [ -z "$(job_tasks | awk -v v="$victim" '$1 != v && $2 != ""')" ] && break
    sleep 1
  done
  elapsed=$((SECONDS - t0))
  echo "the other tasks gone ${elapsed}s after the stop; SIGCONT to $role $index" >>"$TEST_LOG"
  kill -CONT "$victim" 2>/dev/null || true
  wait $job && rc=0 || rc=$?
  out=$(cat task-*.out)
  srun_err=$(cat srun.err)
  printf '%s\n[srun exit status %d; stderr:]\n%s\n' "$out" "$rc" "$srun_err" >>"$TEST_LOG"
  local left
  left=$(job_tasks)
  [ -z "$left" ] || fail "tasks of the job are still running: $left"
}

test_stopped_ps_fails_each_worker_naming_it_with_stacks() {
  stop_during ps 0 --stall-timeout 10
  expect_fail
  [ "$elapsed" -le 30 ] || fail "the workers took ${elapsed}s to exit after ps 0 was stopped (--stall-timeout 10)"
  local w
  for w in 1 2; do  # ranks 1 and 2: worker 0 (the chief) and worker 1
    out=$(cat "task-$w.out")
    expect_contains "pstrain[worker $((w - 1))]: error: worker $((w - 1)) (n"
    expect_contains "made no progress for 10 s, waiting for ps 0 (n1): the reply to push (global step "
    expect_contains "exiting with status 124"
    expect_contains "raise --stall-timeout from 10"
    # every thread's stack, the stalled main thread's with its function names
    expect_contains "stacks of the "
    expect_contains ", the main thread):"
    # The client's wait, as client::wait or, where the compiler made that a
    # jump, its implementation's.
    grep -Eq 'pstrain::ps::client::(impl::)?wait\(' <<<"$out" ||
      fail "expected the main thread's stack to show pstrain::ps::client::wait or client::impl::wait"
    expect_contains "pstrain::trainer::run_training_loop"
  done
  out=$srun_err
  expect_contains "task 1: Exited with exit code 124"
  expect_contains "task 2: Exited with exit code 124"
  expect_nodes_idle
}

# A stopped worker: the PS names it as the one whose gradient the sync step
# lacks (the chief, waiting for the PS, may report first or see the PS go).
test_stopped_worker_is_named_by_the_ps() {
  stop_during worker 1 --stall-timeout 10
  expect_fail
  [ "$elapsed" -le 30 ] || fail "the other tasks took ${elapsed}s to exit after worker 1 was stopped (--stall-timeout 10)"
  out=$(cat task-0.out)
  expect_contains "pstrain[ps 0]: error: ps 0 (n1) made no progress for 10 s, waiting for worker 1 (n3): the missing gradients of a sync step (global step "
  expect_contains "pstrain::ps::server::impl::serve"
  out=$srun_err
  expect_contains "task 0: Exited with exit code 124"
  expect_nodes_idle
}

test_stall_timeout_0_leaves_it_to_the_peer_timeout() {
  stop_during ps 0 --stall-timeout 0 --peer-timeout 15
  expect_fail
  expect_not_contains "made no progress"
  expect_contains "no answer from ps 0 (n1) in 15s (--peer-timeout)"
  expect_nodes_idle
}

test_a_normal_job_with_the_default_timeout_is_unaffected() {
  local dir=$PWD/ckpt
  RUN_TIMEOUT=300 run srun -N3 --ps=1 --workers=2 --mpi=pmix "$pstrain" --device cpu --sync-replicas --train-steps 600 \
    --log-every 100 --eval-every 200 --checkpoint-dir "$dir" --save-checkpoint-steps 200
  expect_rc 0
  expect_not_contains "made no progress"
  expect_not_contains "error"
  expect_eq "$(field "$(last_json <<<"$out")" global_step)" 600 "global_step"
  [ -f "$dir/ckpt-0000000600.json" ] || fail "no checkpoint at step 600 in $dir: $(ls "$dir")"
}

test_bad_stall_timeout_is_one_line() {
  local bad
  for bad in -1 abc 1e9; do
    run "$pstrain" --standalone --stall-timeout "$bad"
    expect_rc 2
    expect_contains "--stall-timeout"
    [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] || fail "--stall-timeout $bad: expected one line, got: $out"
  done
}

# A task paused past the silence limit (SIGSTOP: swap, a stuck NFS read, a
# VM paused) comes back after its peers gave it up: it must change nothing.
# pause_past_limit ROLE INDEX UNTIL pstrain-args...: starts the job (srun
# -N3), stops that task once it trains, resumes it as soon as a task's line
# matches UNTIL (it was declared lost, or replaced), waits for srun.  Sets
# $rc, $srun_err and the task-N.out files.
pause_past_limit() {
  local role=$1 index=$2 until=$3; shift 3
  start_and_stop "$role" "$index" "${layout[@]}" -- --log-every 1000 --heartbeat-interval 1 "$@"
  local i
  for i in $(seq 1 60); do
    grep -q "$until" task-*.out && break
    sleep 0.5
  done
  echo "$role $index (pid $victim) stopped, resumed after $((i / 2)) s: $(grep -h "$until" task-*.out | head -n 1)" >>"$TEST_LOG"
  # Gone already when the workers on its host killed it (a PS that maps their memory).
  kill -CONT "$victim" 2>/dev/null || echo "$role $index (pid $victim) was gone when it was to be resumed" >>"$TEST_LOG"
  wait $job && rc=0 || rc=$?
  srun_err=$(cat srun.err)
  for i in task-*.out; do printf '=== %s\n%s\n' "$i" "$(grep -v '^{"event":"metric' "$i")" >>"$TEST_LOG"; done
  printf '[srun exit status %d; stderr:]\n%s\n' "$rc" "$srun_err" >>"$TEST_LOG"
  grep -q "$until" task-*.out || fail "no line says '$until'"
  [ -z "$(job_tasks)" ] || fail "tasks of the job are still running: $(job_tasks)"
}

# Async: the PS goes on without the paused worker and never hears from it
# again; the worker, resumed, hears nothing from the PS that gave it up and
# exits 1 naming it.  Training ends at its step count with a sane accuracy.
# The job must outlast the resumed worker's own silence limit (6 s of
# listening after it resumes): with 40000 steps at this machine's 225 k
# samples/s (17.6 s) it ended first, and the worker saw the PS's endpoint
# go (Endpoint timeout); 60000 steps train for about 27 s.
test_async_worker_paused_past_the_limit_comes_back_and_changes_nothing() {
  layout=(--ps=1 --workers=2)
  pause_past_limit worker 1 "lost worker 1" --train-steps 60000
  out=$(cat task-0.out)
  expect_contains "pstrain[ps 0]: warning: lost worker 1 (n3) (silent for "
  expect_contains "going on with 1 workers"
  expect_not_contains "error"
  local done
  done=$(last_json task-1.out)
  expect_eq "$(field "$done" global_step)" 60000 "the chief's global step"
  python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= 0.85 else 1)" "$(field "$done" test_accuracy)" ||
    fail "test accuracy $(field "$done" test_accuracy) after the paused worker came back (at least 0.85)"
  out=$(cat task-2.out)
  expect_contains "pstrain[worker 1]: error: lost ps 0 (n1): silent for "
  out=$srun_err
  expect_contains "task 2: Exited with exit code 1"
  expect_not_contains "task 0: Exited"
  expect_not_contains "task 1: Exited"
  expect_nodes_idle
}

# Sync with a spare: the spare takes the paused PS's place from the last
# checkpoint, and the run ends where an uninterrupted run of the same seed
# ends.  $1: "messages" (--shared-memory off, as between hosts): the old PS,
# resumed, finds its workers gone and exits 1; "shared" (this cluster's
# nodes share one host, so the workers map ps 1's memory): perhaps stopped
# in the middle of an update that writes into their parameters, it is
# killed by them before its spare maps those (pstrain(1), Failures).
paused_ps_replaced() {
  layout=(--ps=2 --ps-spares=1 --workers=2)
  local flags=(--sync-replicas --train-steps 6000 --seed 3 --save-checkpoint-steps 500)
  [ "$1" = shared ] || flags+=(--shared-memory off)
  RUN_TIMEOUT=200 run srun -N3 "${layout[@]}" --mpi=pmix "$pstrain" --device cpu --log-every 1000 --heartbeat-interval 1 \
    "${flags[@]}" --checkpoint-dir "$PWD/clean"
  expect_rc 0
  local clean
  clean=$(last_json <<<"$out")
  pause_past_limit ps 1 "taking the place of lost ps 1" "${flags[@]}" --checkpoint-dir "$PWD/ckpt"
  out=$(cat task-*.out)
  expect_contains "pstrain[ps 2]: taking the place of lost ps 1"
  expect_contains "pstrain[worker 1]: training went on at global step "
  local done
  done=$(last_json task-2.out)
  expect_eq "$(field "$done" global_step)" 6000 "the chief's global step"
  expect_eq "$(field "$done" test_accuracy)" "$(field "$clean" test_accuracy)" "test accuracy against the uninterrupted run's"
  python3 -c "import sys; sys.exit(0 if abs(float(sys.argv[1]) - float(sys.argv[2])) <= 1e-3 else 1)" \
    "$(field "$done" test_cross_entropy)" "$(field "$clean" test_cross_entropy)" ||
    fail "test cross-entropy $(field "$done" test_cross_entropy), uninterrupted $(field "$clean" test_cross_entropy)"
  if [ "$1" = shared ]; then
    expect_contains "is lost but still ran on this host, where it maps this worker's parameters: killed it (pid $victim) before its spare takes its place"
    out=$(cat task-1.out)
    expect_not_contains "pstrain[ps 1]: error: lost worker "
    out=$srun_err
    expect_contains "task 1: Killed"
  else
    expect_not_contains "is lost but still ran on this host"
    out=$(cat task-1.out)
    expect_contains "pstrain[ps 1]: error: lost worker "
    out=$srun_err
    expect_contains "task 1: Exited with exit code 1"
  fi
  "$pstrain" checkpoint inspect ckpt >>"$TEST_LOG" 2>&1 || fail "pstrain checkpoint inspect ckpt failed"
  expect_nodes_idle
}

test_sync_ps_paused_past_the_limit_is_replaced_and_its_return_changes_nothing() {
  paused_ps_replaced messages
}

test_sync_ps_paused_past_the_limit_on_the_workers_host_is_replaced_and_killed_by_them() {
  paused_ps_replaced shared
}
