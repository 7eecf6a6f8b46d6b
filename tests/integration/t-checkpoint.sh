# Checkpoints on the local cluster: what is written, kill -9 during writes,
# resume at the checkpoint's step, SIGTERM and requeue of an sbatch job,
# restore with another number of PS tasks, and every bad input.

train_sh=$PSTRAIN_SRCDIR/scripts/train.sh
export OMP_NUM_THREADS=1
# the newest complete checkpoint's step, from `pstrain checkpoint inspect`;
# empty when there is none (inspect then exits 1): the callers say so.
newest_step() { "$pstrain" checkpoint inspect "$1" | sed -n 's/^newest complete: .* (global step \([0-9]*\),.*/\1/p' || true; }
adam=(--optimizer adam --learning-rate 0.001 --device cpu)
job() {  # job PS WORKERS pstrain-args...
  local ps=$1 workers=$2; shift 2
  RUN_TIMEOUT=${RUN_TIMEOUT:-300} run srun -N3 -n $((ps + workers)) --ps="$ps" --workers="$workers" --mpi=pmix "$pstrain" "$@"
}
same_number() {  # same_number A B WHAT: equal to float tolerance
  python3 -c "import sys; a, b = float(sys.argv[1]), float(sys.argv[2]); sys.exit(0 if abs(a - b) <= 1e-6 * max(1, abs(b)) else 1)" "$1" "$2" ||
    fail "$3: $1 differs from $2"
}
# pids of this test's pstrain tasks (not the srun, timeout and env that launched them)
tagged_tasks() { job_tasks | awk '$2 != "" {print $1}'; }

test_checkpoints_are_written_private_and_pruned() {
  job 1 2 "${adam[@]}" --sync-replicas --train-steps 500 --checkpoint-dir "$PWD/ckpt" --save-checkpoint-steps 100 --keep-checkpoints 2 \
    --metrics-file "$PWD/metrics.jsonl"
  expect_rc 0
  expect_eq "$(python3 -c "import json; print([e['global_step'] for e in map(json.loads, open('metrics.jsonl')) if e['event'] == 'checkpoint'])")" \
    "[100, 200, 300, 400, 500]" "checkpoint events in the metrics file"
  expect_contains "checkpoint at global step 100 saved: $PWD/ckpt/ckpt-0000000100.json (1 shards"
  expect_contains "checkpoint at global step 500 saved"
  expect_eq "$(stat -c %a ckpt)" 700 "mode of the checkpoint directory"
  expect_eq "$(stat -c %a metrics.jsonl)" 600 "mode of the metrics file"
  expect_eq "$(find ckpt -type f -printf '%m\n' | sort -u | tr '\n' ' ')" "600 " "mode of the checkpoint files (and events)"
  expect_eq "$(find ckpt -type d -printf '%m\n' | sort -u | tr '\n' ' ')" "700 " "mode of the checkpoint directory and events/"
  # (events/: the TensorBoard files, beside the checkpoints by default.)
  expect_eq "$(cd ckpt && ls | tr '\n' ' ')" "ckpt-0000000400.json ckpt-0000000400.shard-0-of-1 ckpt-0000000500.json ckpt-0000000500.shard-0-of-1 events " \
    "files kept with --keep-checkpoints 2"
  run "$pstrain" checkpoint inspect ckpt
  expect_rc 0
  expect_contains "complete, checksums good"
  expect_contains "newest complete: ckpt-0000000500.json (global step 500, 784-100-10 mlp, sync)"
}

test_kill_9_during_checkpoint_writes_never_loses_the_last_one() {
  # A 1.9 M-parameter model with Adam: 22 MB per checkpoint, written every
  # step by 2 PS tasks, so kills often land in the middle of a write.
  local args=(--hidden-units 1024,1024 "${adam[@]}" --sync-replicas --train-steps 100000 --checkpoint-dir "$PWD/ckpt"
    --save-checkpoint-steps 1 --keep-checkpoints 3)
  # At least 10 kills, more (up to 30) until one has landed in a write.
  local kill kills=0 previous=none interrupted=0 newest
  for kill in $(seq 1 30); do
    [ "$kill" -le 10 ] || [ "$interrupted" -eq 0 ] || break
    export TEST_TAG=$RANDOM$RANDOM
    : >job.out
    PSTRAIN_TEST_TAG=$TEST_TAG timeout 200 srun -N3 -n4 --ps=2 --workers=2 --mpi=pmix \
      env PSTRAIN_TEST_TAG=$TEST_TAG "$pstrain" "${args[@]}" >job.out 2>&1 &
    local srun_pid=$! i saves=0
    for i in $(seq 1 200); do
      saves=$(grep -c 'checkpoint at global step [0-9]* saved' job.out || true)  # grep -c exits 1 on a count of 0
      [ "$saves" -ge 2 ] && break
      sleep 0.1
    done
    cat job.out >>"$TEST_LOG"
    [ "$saves" -ge 2 ] || { kill "$srun_pid" 2>/dev/null || true; fail "kill $kill: the job wrote no checkpoint"; }
    if [ "$previous" = none ]; then
      grep -q 'initialised 784-1024-1024-10 mlp' job.out || fail "kill $kill: the first job did not start afresh"
    else
      grep -q "restored 784-1024-1024-10 mlp from $PWD/ckpt/ckpt-$(printf %010d "$previous").json" job.out ||
        fail "kill $kill: the job did not restore the newest complete checkpoint (step $previous)"
    fi
    sleep "0.$((RANDOM % 200 + 10))"
    # Best effort: a task that ended between the listing and the kill is no error.
    kill -9 $(tagged_tasks) 2>/dev/null || true
    kills=$((kills + 1))
    local srun_rc
    wait "$srun_pid" && srun_rc=0 || srun_rc=$?
    [ "$srun_rc" -ne 0 ] || fail "kill $kill: srun exited with status 0 after kill -9 of its tasks"
    newest=$(newest_step ckpt)
    [ -n "$newest" ] || fail "kill $kill: no complete checkpoint left: $("$pstrain" checkpoint inspect ckpt | tail -n 3)"
    # a write was under way: files of a newer step than the newest manifest
    if ls ckpt | grep -v '\.json$' | sed -n 's/^ckpt-\([0-9]*\)\..*/\1/p' | awk -v n="$newest" '$1 + 0 > n + 0 {f = 1} END {exit !f}'; then
      interrupted=$((interrupted + 1))
    fi
    echo "kill $kill: newest complete checkpoint at step $newest" >>"$TEST_LOG"
    previous=$newest
  done
  echo "$interrupted of $kills kills interrupted a checkpoint write" >>"$TEST_LOG"
  [ "$interrupted" -ge 1 ] || fail "no kill landed during a checkpoint write"
  # and the last one still finishes the training
  job 2 2 "${args[@]/100000/$((previous + 5))}"
  expect_rc 0
  expect_contains "restored 784-1024-1024-10 mlp from $PWD/ckpt/ckpt-$(printf %010d "$previous").json"
  expect_eq "$(field "$(last_json <<<"$out")" global_step)" "$((previous + 5))" "global_step after the kills"
}

test_killed_job_resumes_at_the_checkpoint_and_reaches_the_same_accuracy() {
  local args=(--hidden-units 256,128 "${adam[@]}" --sync-replicas --train-steps 3000 --save-checkpoint-steps 500)
  job 1 2 "${args[@]}" --checkpoint-dir "$PWD/straight"
  expect_rc 0
  local straight
  straight=$(last_json <<<"$out")
  export TEST_TAG=$RANDOM$RANDOM
  PSTRAIN_TEST_TAG=$TEST_TAG timeout 200 srun -N3 --ps=1 --workers=2 --mpi=pmix \
    env PSTRAIN_TEST_TAG=$TEST_TAG "$pstrain" "${args[@]}" --checkpoint-dir "$PWD/ckpt" >job.out 2>&1 &
  local srun_pid=$! i
  for i in $(seq 1 300); do
    grep -q 'checkpoint at global step 1000 saved' job.out && break
    sleep 0.1
  done
  grep -q 'checkpoint at global step 1000 saved' job.out || { kill "$srun_pid" 2>/dev/null || true; fail "no checkpoint at step 1000"; }
  sleep 0.3
  kill -9 $(tagged_tasks)
  local srun_rc
  wait "$srun_pid" && srun_rc=0 || srun_rc=$?
  [ "$srun_rc" -ne 0 ] || fail "srun exited with status 0 after kill -9 of its tasks"
  cat job.out >>"$TEST_LOG"
  local killed_at c
  killed_at=$(grep -o 'step [0-9]*/3000' job.out | tail -n 1 | grep -o '[0-9]*' | head -n 1) || true  # for the log only
  c=$(newest_step ckpt)
  echo "killed after step ${killed_at:-?}; newest checkpoint at step $c" >>"$TEST_LOG"
  [ "$c" -ge 1000 ] && [ "$c" -lt 3000 ] || fail "newest checkpoint at step $c"
  job 1 2 "${args[@]}" --checkpoint-dir "$PWD/ckpt"
  expect_rc 0
  expect_contains "restored 784-256-128-10 mlp from $PWD/ckpt/ckpt-$(printf %010d "$c").json (global step $c,"
  expect_contains "shard [0, 235146) of 235146 parameters (940.6 KB), sync mode aggregating 2 of 2 workers, restored from the checkpoint at global step $c"
  local resumed
  resumed=$(last_json <<<"$out")
  expect_eq "$(field "$resumed" global_step)" 3000 "global_step"
  # Sync training resumes the data order too: the same numbers as the
  # uninterrupted run, well within the accuracy band.
  echo "uninterrupted: $straight; resumed: $resumed" >>"$TEST_LOG"
  same_number "$(field "$resumed" test_accuracy)" "$(field "$straight" test_accuracy)" "test accuracy after the resume"
  expect_at_least "$(field "$resumed" test_accuracy)" 0.87 "test accuracy after the resume"
}

# sbatch train.sh, SIGTERM by $1 once training runs; the job must
# checkpoint, come back (requeued) and complete at --train-steps.  $2 is
# the checkpoint directory: "default" is train.sh's own for this job
# (--resume own: the requeued job must still resume it).
signal_sbatch_job() {
  export PSTRAIN=$pstrain
  local dir_args=(--checkpoint-dir "$PWD/ckpt") dir=$PWD/ckpt
  [ "${2:-}" != default ] || dir_args=()
  run sbatch --parsable --ps=1 --workers=2 -o "$PWD/job.out" "$train_sh" --device cpu --sync-replicas --train-steps 4000 \
    --log-every 200 "${dir_args[@]}"
  expect_rc 0
  local id=$out i
  for i in $(seq 1 300); do
    grep -q 'step [0-9]*/4000' job.out 2>/dev/null && break
    sleep 0.1
  done
  grep -q 'step [0-9]*/4000' job.out || { scancel "$id" || true; fail "the job did not start training"; }
  case $1 in
    scancel) scancel --signal=TERM "$id" ;;
    requeue) scontrol requeue "$id" ;;
  esac
  # Slurm holds a requeued job for two minutes: release it now.
  for i in $(seq 1 100); do
    scontrol show job "$id" | grep -q 'Restarts=1' && scontrol show job "$id" | grep -q 'JobState=PENDING' && break
    sleep 0.2
  done
  # Meanwhile squeue shows where it stopped, not its last progress line.
  local comment
  comment=$(squeue -h -j "$id" -o %k)
  echo "comment while pending: $comment" >>"$TEST_LOG"
  case "$comment" in
    "stopped at step "*" by SIGTERM, checkpoint saved: resumes from it when requeued") ;;
    *) scancel "$id" || true; fail "the comment of the pending requeued job is '$comment'" ;;
  esac
  scontrol update JobId="$id" StartTime=now
  wait_job "$id" 300
  cat job.out >>"$TEST_LOG"
  expect_eq "$job_state" COMPLETED "job state"
  expect_eq "$(scontrol show job "$id" | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p')" 1 "restarts"
  out=$(cat job.out)
  local step
  step=$(sed -n 's/.*SIGTERM at global step \([0-9]*\):.*/\1/p' job.out | head -n 1)
  [ -n "$step" ] || fail "no SIGTERM line in the job output"
  expect_contains "checkpoint at global step $step saved"
  expect_contains "exiting with status 143 so that a requeued job resumes"
  [ "${2:-}" != default ] || dir=$(sed -n 's/^train\.sh: job .*, checkpoints \(.*\)$/\1/p' job.out | head -n 1)
  expect_eq "$(sed -n 's/^train\.sh: job .*, checkpoints \(.*\)$/\1/p' job.out | sort -u)" "$dir" "the checkpoint directory of both starts"
  local manifest
  manifest=$dir/ckpt-$(printf %010d "$step").json
  expect_contains "restored 784-100-10 mlp from $manifest (global step $step,"
  local done
  done=$(last_json job.out)
  expect_eq "$(field "$done" global_step)" 4000 "global_step of the final line"
  # The final line counts the first segment's training too (its time is in the manifest).
  local before
  before=$(python3 -c "import json, sys; print(json.load(open(sys.argv[1]))['trained']['milliseconds'] / 1000)" "$manifest")
  python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) > float(sys.argv[2]) > 0 else 1)" "$(field "$done" train_seconds)" "$before" ||
    fail "train_seconds $(field "$done" train_seconds) does not count the $before s before the requeue"
}

test_scancel_signal_term_checkpoints_requeues_and_completes() {
  signal_sbatch_job scancel
  expect_contains "train.sh: pstrain stopped after a checkpoint: requeueing job"
}

test_scontrol_requeue_checkpoints_and_completes() {
  # train.sh's default directory: --resume own, and the requeued job is the same job.
  signal_sbatch_job requeue default
  expect_contains "train.sh: SIGTERM: waiting for pstrain to checkpoint and stop"
}

# Stops and starts the test cluster again with the same directory, port and
# nodes: its controller forgets every job, and job ids start again at 1.
restart_cluster() {
  local conf=$SLURM_CONF port nodes gpus plugin netns_args=()
  port=$(sed -n 's/^SlurmctldPort=//p' "$conf")
  nodes=$(grep -c '^NodeName=' "$conf")
  gpus=$(sed -n 's/^NodeName=.* Gres=gpu:\([0-9]*\).*/\1/p' "$conf" | head -n 1)
  plugin=$(awk '{print $2; exit}' "$(dirname "$conf")/plugstack.conf")
  [ "$(cluster_mode)" = plain ] || netns_args=(--netns)
  cluster stop >>"$TEST_LOG" 2>&1 || fail "pstrain-cluster stop failed"
  cluster start --port "$port" --nodes "$nodes" ${gpus:+--gpus-per-node "$gpus"} --plugin "$plugin" "${netns_args[@]}" \
    >>"$TEST_LOG" 2>&1 || fail "pstrain-cluster start failed after stop: see $TEST_LOG"
}

# The output of the last start of job $1's train.sh in pstrain-$1.out
# (appended to by every job of that id).
last_start_of() { awk '/^train\.sh: job /{text = ""} {text = text $0 "\n"} END {printf "%s", text}' "pstrain-$1.out"; }

# A job that healed (ps 0 killed with -9, a spare took its place) and
# completed ends COMPLETED under train.sh, though srun's status is the
# killed task's 137: a pipeline waiting with --dependency=afterok goes on.
test_a_job_that_healed_under_train_sh_ends_completed() {
  export PSTRAIN=$pstrain TEST_TAG=$RANDOM$RANDOM
  export PSTRAIN_TEST_TAG=$TEST_TAG
  run sbatch --parsable -N3 --ps=1 --workers=2 --ps-spares=1 -o "$PWD/job.out" "$train_sh" --device cpu \
    --sync-replicas --train-steps 2000 --log-every 250 --seed 11 --save-checkpoint-steps 200 --checkpoint-dir "$PWD/ckpt"
  expect_rc 0
  local id=$out i pid
  for i in $(seq 1 480); do
    grep -q 'step [0-9]*/2000' job.out 2>/dev/null && break
    sleep 0.25
  done
  pid=$(job_tasks | awk '$2 == "ps" && $3 == 0 {print $1}')
  [ -n "$pid" ] || fail "ps 0 is not running: $(tail -n 5 job.out 2>/dev/null | tr '\n' ' ')"
  kill -9 "$pid"
  wait_job "$id" 300
  { echo "--- job.out"; cat job.out; } >>"$TEST_LOG"
  [ "$job_state" = COMPLETED ] || fail "the healed job ended $job_state, not COMPLETED"
  grep -q "pstrain\[ps 1\]: taking the place of lost ps 0" job.out || fail "the spare did not take ps 0's place"
  grep -q "train.sh: srun exited 137 (a task of the step ended badly: see its lines above), and the chief completed training" job.out ||
    fail "train.sh did not say why the job succeeded although srun exited non-zero"
  expect_eq "$(field "$(last_json job.out)" global_step)" 2000 "global_step of the chief's final line"
  grep -q '"event":"done"' ckpt/metrics.jsonl || fail "no done event in the metrics file"
  expect_nodes_idle
}

test_a_job_id_seen_before_trains_anew_in_its_own_directory() {
  export PSTRAIN=$pstrain
  local args=(--device cpu --sync-replicas --train-steps 200 --log-every 100)
  restart_cluster
  run sbatch --parsable --ps=1 --workers=2 "$train_sh" "${args[@]}"
  expect_rc 0
  local first=$out
  wait_job "$first" 300
  expect_eq "$job_state" COMPLETED "state of the first job"
  # The controller starts afresh: the same submission gets the same job id.
  restart_cluster
  run sbatch --parsable --ps=1 --workers=2 "$train_sh" "${args[@]}"
  expect_rc 0
  local second=$out
  wait_job "$second" 300
  cat "pstrain-$second.out" >>"$TEST_LOG"
  expect_eq "$job_state" COMPLETED "state of the second job"
  expect_eq "$second" "$first" "job id after the controller started afresh"
  out=$(last_start_of "$second")
  local dirs
  dirs=$(sed -n 's/^train\.sh: job .*, checkpoints \(.*\)$/\1/p' "pstrain-$second.out")
  [ "$(sort -u <<<"$dirs" | wc -l)" -eq 2 ] || fail "the two jobs $first used one checkpoint directory: $dirs"
  case "$(tail -n 1 <<<"$dirs")" in
    "$PWD/pstrain-checkpoints/pstrain-$second-"*) ;;
    *) fail "the default directory is $(tail -n 1 <<<"$dirs"), not pstrain-checkpoints/<cluster>-<job id>-<submission>" ;;
  esac
  expect_contains "initialised 784-100-10 mlp"
  expect_not_contains "restored"
  local done
  done=$(last_json <<<"$out")
  expect_eq "$(field "$done" global_step)" 200 "global_step of the second job"
  expect_at_least "$(field "$done" samples_per_sec)" 1 "samples/s of the second job (it trained)"
  expect_at_least "$(field "$done" test_accuracy)" 0.5 "test accuracy of the second job"
}

test_resume_own_refuses_another_jobs_checkpoint() {
  job 1 2 "${adam[@]}" --sync-replicas --train-steps 100 --checkpoint-dir "$PWD/ckpt"
  expect_rc 0
  local events metrics writer
  events=$(ls ckpt/events)
  metrics=$(md5sum <ckpt/metrics.jsonl)
  writer=$(python3 -c "import json, sys; j = json.load(open(sys.argv[1]))['job']; print(f\"cluster {j['cluster']}, job {j['job_id']}, submission {j['submission']} (submitted {j['submit_time']})\")" ckpt/ckpt-0000000100.json)
  job 1 2 "${adam[@]}" --sync-replicas --train-steps 200 --checkpoint-dir "$PWD/ckpt" --resume own
  expect_rc 1
  expect_contains "pstrain[worker 0]: error: $PWD/ckpt holds another job's checkpoint, ckpt-0000000100.json at global step 100 written by $writer; --resume own resumes only this job's (cluster pstrain, job "
  expect_contains "): train in a fresh --checkpoint-dir, or, to continue that run on purpose, name this directory with --checkpoint-dir (or PSTRAIN_CHECKPOINT_DIR for train.sh) without --resume own"
  expect_not_contains "initialised"
  expect_not_contains '{"event":"done"'
  # Nothing written into the other run's directory.
  expect_eq "$(ls ckpt/events)" "$events" "TensorBoard files after the refused run"
  expect_eq "$(md5sum <ckpt/metrics.jsonl)" "$metrics" "metrics file after the refused run"
  expect_nodes_idle
  # Named without --resume own, the directory is continued on purpose.
  job 1 2 "${adam[@]}" --sync-replicas --train-steps 200 --checkpoint-dir "$PWD/ckpt"
  expect_rc 0
  expect_contains "restored 784-100-10 mlp from $PWD/ckpt/ckpt-0000000100.json (global step 100,"
}

test_a_checkpoint_already_at_train_steps_trains_nothing_and_says_so() {
  job 1 2 "${adam[@]}" --sync-replicas --train-steps 100 --checkpoint-dir "$PWD/ckpt"
  expect_rc 0
  local events metrics t0=$SECONDS
  events=$(ls ckpt/events)
  metrics=$(md5sum <ckpt/metrics.jsonl)
  RUN_TIMEOUT=90 job 1 2 "${adam[@]}" --sync-replicas --train-steps 100 --checkpoint-dir "$PWD/ckpt"
  expect_rc 0
  echo "ended in $((SECONDS - t0)) s" >>"$TEST_LOG"
  expect_contains "pstrain[worker 0]: $PWD/ckpt/ckpt-0000000100.json is at global step 100, which is --train-steps 100: nothing to train; raise --train-steps to train on from it, or give a fresh --checkpoint-dir to train anew"
  expect_not_contains '{"event":"done"'
  expect_not_contains "error"
  expect_eq "$(grep -c 'nothing to train' <<<"$out")" 1 "lines saying there is nothing to train"
  expect_eq "$(ls ckpt/events)" "$events" "TensorBoard files after the run that trained nothing"
  expect_eq "$(md5sum <ckpt/metrics.jsonl)" "$metrics" "metrics file after the run that trained nothing"
  expect_nodes_idle
}

# A job that restores --checkpoint-dir and trains one more step at a
# learning rate too small to move a float: its final line evaluates the
# restored parameters.  (A restore already at --train-steps trains and
# evaluates nothing.)
evaluate_restored() {  # evaluate_restored PS WORKERS STEP pstrain-args...
  local ps=$1 workers=$2 step=$3; shift 3
  job "$ps" "$workers" "$@" --train-steps $((step + 1)) --learning-rate 1e-30
}

test_restore_with_another_number_of_ps_tasks() {
  local args=("${adam[@]}" --sync-replicas --checkpoint-dir "$PWD/ckpt")
  job 1 2 "${args[@]}" --train-steps 300
  expect_rc 0
  local one two
  one=$(field "$(last_json <<<"$out")" test_cross_entropy)
  evaluate_restored 2 2 300 "${args[@]}"
  expect_rc 0
  expect_contains "shard [39755, 79510) of 79510 parameters (159.0 KB), sync mode aggregating 2 of 2 workers, restored from the checkpoint at global step 300"
  same_number "$(field "$(last_json <<<"$out")" test_cross_entropy)" "$one" "1-PS checkpoint restored by 2 PS"
  job 2 2 "${args[@]}" --train-steps 400
  expect_rc 0
  two=$(field "$(last_json <<<"$out")" test_cross_entropy)
  "$pstrain" checkpoint inspect ckpt | grep -q '^ *400 .*  2 .*complete' || fail "no 2-shard checkpoint at step 400"
  evaluate_restored 1 2 400 "${args[@]}"
  expect_rc 0
  expect_contains "shard [0, 79510) of 79510 parameters (318.0 KB), sync mode aggregating 2 of 2 workers, restored from the checkpoint at global step 400"
  same_number "$(field "$(last_json <<<"$out")" test_cross_entropy)" "$two" "2-PS checkpoint restored by 1 PS"
}

test_standalone_and_distributed_checkpoints_restore_each_other() {
  run "$pstrain" --standalone "${adam[@]}" --train-steps 200 --checkpoint-dir "$PWD/ckpt"
  expect_rc 0
  local standalone
  standalone=$(field "$(last_json <<<"$out")" test_cross_entropy)
  evaluate_restored 1 2 200 "${adam[@]}" --sync-replicas --checkpoint-dir "$PWD/ckpt"
  expect_rc 0
  expect_contains "restored from the checkpoint at global step 200"
  same_number "$(field "$(last_json <<<"$out")" test_cross_entropy)" "$standalone" "standalone checkpoint restored by a job"
}

# Two checkpoints (100, 200) of the default model with 1 PS.
two_checkpoints() {
  job 1 2 "${adam[@]}" --sync-replicas --train-steps 200 --save-checkpoint-steps 100 --checkpoint-dir "$PWD/ckpt"
  expect_rc 0
}
resume_expecting_fallback() {  # resume_expecting_fallback PROBLEM
  job 1 2 "${adam[@]}" --sync-replicas --train-steps 300 --checkpoint-dir "$PWD/ckpt"
  expect_rc 0
  expect_contains "warning: skipping the checkpoint at global step 200 in $PWD/ckpt: $1; using an older one"
  expect_contains "restored 784-100-10 mlp from $PWD/ckpt/ckpt-0000000100.json (global step 100,"
  expect_eq "$(field "$(last_json <<<"$out")" global_step)" 300 "global_step"
}

test_flipped_byte_in_the_newest_shard_falls_back() {
  two_checkpoints
  python3 - ckpt/ckpt-0000000200.shard-0-of-1 <<'EOF'
import sys
with open(sys.argv[1], "r+b") as f:
    f.seek(100000); b = f.read(1); f.seek(100000); f.write(bytes([b[0] ^ 0x10]))
EOF
  run "$pstrain" checkpoint inspect ckpt
  expect_rc 0
  expect_contains "ckpt-0000000200.shard-0-of-1 is corrupt (checksum mismatch)"
  expect_contains "newest complete: ckpt-0000000100.json"
  resume_expecting_fallback "ckpt-0000000200.shard-0-of-1 is corrupt (checksum mismatch)"
}

test_truncated_shard_falls_back() {
  two_checkpoints
  local size
  size=$(stat -c %s ckpt/ckpt-0000000200.shard-0-of-1)
  truncate -s 200000 ckpt/ckpt-0000000200.shard-0-of-1
  resume_expecting_fallback "ckpt-0000000200.shard-0-of-1 is truncated (200000 of $size bytes)"
}

test_manifest_naming_a_missing_shard_falls_back() {
  two_checkpoints
  rm ckpt/ckpt-0000000200.shard-0-of-1
  resume_expecting_fallback "ckpt-0000000200.shard-0-of-1 is missing (No such file or directory)"
}

test_no_usable_checkpoint_fails_clearly() {
  job 1 2 "${adam[@]}" --sync-replicas --train-steps 100 --checkpoint-dir "$PWD/ckpt"
  expect_rc 0
  local size
  size=$(stat -c %s ckpt/ckpt-0000000100.shard-0-of-1)
  truncate -s 1000 ckpt/ckpt-0000000100.shard-0-of-1
  job 1 2 "${adam[@]}" --sync-replicas --train-steps 200 --checkpoint-dir "$PWD/ckpt"
  expect_rc 1
  expect_contains "error: no usable checkpoint in $PWD/ckpt: the checkpoint at global step 100 in $PWD/ckpt: ckpt-0000000100.shard-0-of-1 is truncated (1000 of $size bytes); using an older one: move the directory away to start from scratch"
  expect_nodes_idle
}

test_checkpoint_of_another_model_is_refused() {
  job 1 2 "${adam[@]}" --sync-replicas --train-steps 100 --checkpoint-dir "$PWD/ckpt"
  expect_rc 0
  job 1 2 "${adam[@]}" --sync-replicas --train-steps 200 --checkpoint-dir "$PWD/ckpt" --hidden-units 50
  expect_rc 1
  expect_contains "pstrain[worker 0]: error: the checkpoint at global step 100 in $PWD/ckpt holds the model '784-100-10 mlp' (79510 parameters) but this job builds '784-50-10 mlp' (39760 parameters): use the same --model (and --hidden-units) and data, or another --checkpoint-dir"
  expect_not_contains "training, 200 steps"
  expect_nodes_idle
}

test_unwritable_or_missing_checkpoint_dir_fails_before_training() {
  job 1 2 "${adam[@]}" --train-steps 100 --checkpoint-dir /nonexistent/ckpt
  expect_rc 1
  expect_contains "error: cannot create checkpoint directory /nonexistent/ckpt: its parent does not exist: create it or choose a --checkpoint-dir on a shared filesystem this job can write"
  expect_not_contains "initialised"
  mkdir ro
  mount -t tmpfs -o ro,size=1m tmpfs ro || fail "cannot mount a read-only tmpfs for the test"
  job 1 2 "${adam[@]}" --train-steps 100 --checkpoint-dir "$PWD/ro"
  umount ro
  expect_rc 1
  expect_contains "error: checkpoint directory $PWD/ro is not writable: Read-only file system: choose a --checkpoint-dir"
  expect_not_contains "initialised"
  expect_nodes_idle
}

test_full_disk_fails_that_checkpoint_and_keeps_the_previous() {
  mkdir small
  # room for two checkpoints of 954 KB, not three
  mount -t tmpfs -o size=2500k tmpfs small || fail "cannot mount a small tmpfs for the test"
  job 1 2 "${adam[@]}" --sync-replicas --train-steps 400 --save-checkpoint-steps 100 --checkpoint-dir "$PWD/small"
  local inspect
  inspect=$("$pstrain" checkpoint inspect small; ls -a small)
  umount small
  echo "$inspect" >>"$TEST_LOG"
  expect_rc 1
  expect_contains "pstrain[ps 0]: error: checkpoint at global step 300 failed: cannot write $PWD/small/ckpt-0000000300.shard-0-of-1.tmp."
  expect_contains "No space left on device: free space there or choose another --checkpoint-dir; the previous checkpoint is intact"
  expect_contains "error: the final checkpoint was not written"
  expect_eq "$(field "$(last_json <<<"$out")" global_step)" 400 "the final line is still printed"
  case "$inspect" in *"newest complete: ckpt-0000000200.json"*) ;; *) fail "the previous checkpoint is not intact: $inspect" ;; esac
  case "$inspect" in *.tmp.*) fail "a temporary file was left behind: $inspect" ;; esac
}

# The checkpoint directory made read-only mid-run (a filesystem remounted
# after an error, a storage failover) and writable again before the end:
# the checkpoints meanwhile fail with one line naming the fix, training goes
# on, and the final checkpoint is written (exit 0).
test_read_only_checkpoint_dir_mid_run_fails_those_checkpoints_and_goes_on() {
  mkdir small
  mount -t tmpfs -o size=64m tmpfs small || fail "cannot mount a small tmpfs for the test"
  trap 'umount -l "$PWD/small" 2>/dev/null || true' EXIT
  "$pstrain" --standalone --threads 1 "${adam[@]}" --train-steps 10000 --log-every 1000 \
    --save-checkpoint-steps 1000 --checkpoint-dir "$PWD/small" --metrics-file "$PWD/metrics.jsonl" \
    --tensorboard-dir "$PWD/events" >run.log 2>&1 &
  local job=$! i
  for i in $(seq 1 120); do
    grep -q 'checkpoint at global step [0-9]* saved' run.log && break
    sleep 0.25
  done
  # (The metrics and TensorBoard files elsewhere: a remount is refused while
  # a file is open for writing there; a checkpoint's own are tried again.)
  for i in $(seq 1 80); do
    mount -o remount,ro small 2>/dev/null && break
    sleep 0.1
  done
  [ "$i" -lt 80 ] || { kill $job; wait $job; umount small; fail "cannot remount the tmpfs read-only"; }
  for i in $(seq 1 120); do
    grep -q 'Read-only file system' run.log && break
    sleep 0.25
  done
  mount -o remount,rw small
  wait $job && rc=0 || rc=$?
  out=$(cat run.log)
  local inspect
  inspect=$("$pstrain" checkpoint inspect small 2>&1) || true
  umount small
  printf '%s\n[exit status %d]\n%s\n' "$out" "$rc" "$inspect" >>"$TEST_LOG"
  expect_rc 0
  expect_contains "Read-only file system: remount it read-write or choose another --checkpoint-dir; the previous checkpoint is intact"
  # Tried again at the next multiple of --save-checkpoint-steps, not at
  # every step (a few seconds read-only at ~2000 steps/s: a few lines).
  local failed
  failed=$(grep -c 'Read-only file system' <<<"$out")
  [ "$failed" -le 20 ] || fail "$failed lines of failed checkpoints in a few seconds: tried again at every step"
  expect_contains "checkpoint at global step 10000 saved"
  expect_eq "$(field "$(last_json <<<"$out")" global_step)" 10000 "global_step"
  case "$inspect" in *"newest complete: ckpt-0000010000.json"*) ;; *) fail "the final checkpoint is not complete: $inspect" ;; esac
}

test_bad_checkpoint_flags() {
  run "$pstrain" --standalone --keep-checkpoints 0
  expect_rc 2
  expect_contains "pstrain: error: --keep-checkpoints: Value 0 not in range 1 to 1000000: see pstrain --help"
  run "$pstrain" --standalone --save-checkpoint-secs -5
  expect_rc 2
  expect_contains "--save-checkpoint-secs"
  run "$pstrain" --standalone --resume mine
  expect_rc 2
  expect_eq "$out" "pstrain: error: --resume: mine not in {any,own}: see pstrain --help" "--resume mine"
  run "$pstrain" --standalone --resume own --train-steps 10 --checkpoint-dir "$PWD/ckpt"
  expect_rc 1
  expect_contains "pstrain[standalone]: error: --resume own: this run is not in a Slurm job (SLURM_JOB_ID is unset), so no checkpoint in $PWD/ckpt is its own: run it under sbatch or srun, or pass --resume any to resume whatever is there"
  run "$pstrain" checkpoint inspect "$PWD/none"
  expect_rc 1
  expect_contains "pstrain checkpoint: error: cannot read checkpoint directory $PWD/none: No such file or directory"
}
