# Peer authentication: only the job's own tasks get in.

rogue=$PSTRAIN_BUILDDIR/tests/tools/ps_rogue

# A static job (1 PS + 2 workers on localhost, the classic flags) with the
# key in the environment; RUN_ROGUE=1 sends ps_rogue at the PS mid-run.
# 2400 steps: the job still trains when the rogue's last attack arrives,
# also on a loaded machine (the PS logs what it refused while it serves).
# Sets $out (the chief's output), $ps_log, $rogue_out.
static_job() {
  local base=$1 seed=$2 with_rogue=$3 spec
  spec=(--ps-hosts "localhost:$base" --worker-hosts "localhost:$((base + 1)),localhost:$((base + 2))"
        --train-steps 2400 --device cpu --sync-replicas --seed "$seed" --bootstrap-timeout 30)
  env -u SLURM_CONF timeout 150 "$pstrain" "${spec[@]}" --job_name ps --task_index 0 >ps.out 2>&1 &
  local ps=$!
  env -u SLURM_CONF timeout 150 "$pstrain" "${spec[@]}" --job-name worker --task-index 1 >w1.out 2>&1 &
  local w1=$!
  local r=""
  if [ "$with_rogue" = 1 ]; then
    # Once the job trains (the chief's first progress line), the rogue.
    ( for _ in $(seq 100); do grep -q 'step ' w0.out 2>/dev/null && break; sleep 0.1; done
      timeout 60 "$rogue" "localhost:$base" 300 >rogue.out 2>&1 ) &
    r=$!
  fi
  env -u SLURM_CONF timeout 150 "$pstrain" "${spec[@]}" --job-name worker --task-index 0 >w0.out 2>&1 && rc=0 || rc=$?
  out=$(cat w0.out)
  local ps_rc w1_rc
  wait $ps && ps_rc=0 || ps_rc=$?
  wait $w1 && w1_rc=0 || w1_rc=$?
  [ -z "$r" ] || wait $r || true
  ps_log=$(cat ps.out)
  rogue_out=$(cat rogue.out 2>/dev/null || true)
  { echo "--- ps"; cat ps.out; echo "--- worker 0"; cat w0.out; echo "--- worker 1"; cat w1.out; echo "--- rogue"; echo "$rogue_out"; } >>"$TEST_LOG"
  expect_rc 0
  expect_eq "$ps_rc" 0 "ps exit status"
  expect_eq "$w1_rc" 0 "worker 1 exit status"
}

# While a job trains, a process with a wrong key connects to its PS, then
# sends random frames without a handshake, then junk as a handshake: the
# job ends with exactly the numbers of the same job left alone, and the
# PS's log names the refused peer by its address.
test_rogue_peer_is_refused_and_the_job_goes_on() {
  local base=$((PSTRAIN_TEST_PORT + 400)) alone attacked
  export PSTRAIN_AUTH_KEY
  PSTRAIN_AUTH_KEY=$(openssl rand -hex 32)
  static_job "$base" 11 0
  alone=$(field "$(last_json <<<"$out")" test_cross_entropy)
  expect_at_least "$(field "$(last_json <<<"$out")" test_accuracy)" 0.80 "test accuracy left alone"
  static_job $((base + 10)) 11 1
  attacked=$(field "$(last_json <<<"$out")" test_cross_entropy)
  expect_eq "$attacked" "$alone" "test cross-entropy of the attacked job (same seed)"
  expect_eq "$(field "$(last_json <<<"$out")" global_step)" 2400 "global_step"
  # The rogue did what it came to do, and got nowhere.
  out=$rogue_out
  expect_contains "ps_rogue: refused: its proof does not match this job step's key"
  expect_not_contains "ACCEPTED"
  expect_contains "random frames without a handshake"
  out=$ps_log
  expect_contains "pstrain[ps 0]: warning: refused 127.0.0.1:"
  expect_contains "(it said it was worker 0 (localhost, the chief)): its proof does not match this job step's key"
  expect_contains "from a process that did not pass the handshake"
  expect_contains "handshake message"
}

# Tasks with different keys: the worker stops at once with one line; the
# PS names the refused worker when its wait ends.
test_static_tasks_with_different_keys_fail_with_one_line() {
  local base=$((PSTRAIN_TEST_PORT + 430)) spec ps ps_rc
  spec=(--ps-hosts "localhost:$base" --worker-hosts "localhost:$((base + 1))" --train-steps 50 --device cpu
        --bootstrap-timeout 6)
  env -u SLURM_CONF PSTRAIN_AUTH_KEY="$(openssl rand -hex 32)" timeout 60 "$pstrain" "${spec[@]}" --job-name ps --task-index 0 \
    >ps.out 2>&1 &
  ps=$!
  run env -u SLURM_CONF PSTRAIN_AUTH_KEY="$(openssl rand -hex 32)" "$pstrain" "${spec[@]}" --job-name worker --task-index 0
  wait $ps && ps_rc=0 || ps_rc=$?
  cat ps.out >>"$TEST_LOG"
  expect_rc 1
  expect_contains "pstrain[worker 0]: error: bootstrap: ps 0 (localhost) at localhost:$base refused this worker: its proof does not match this job step's key"
  expect_contains "every task of a job must have the same key"
  expect_eq "$ps_rc" 1 "ps exit status"
  out=$(cat ps.out)
  expect_contains "did not connect to localhost:$base within 6s"
  expect_contains "worker 0 (localhost, the chief)"
}

test_bad_keys_are_named() {
  run env -u SLURM_CONF PSTRAIN_AUTH_KEY=1234 "$pstrain" --ps-hosts localhost:1 --worker-hosts localhost:2 --job-name ps --task-index 0
  expect_rc 1
  expect_contains "PSTRAIN_AUTH_KEY must hold 64 hex digits (32 bytes), the same in every task: make one with \`openssl rand -hex 32\`"
  openssl rand -hex 32 >key
  chmod 644 key
  run env -u SLURM_CONF PSTRAIN_AUTH_KEY_FILE="$PWD/key" "$pstrain" --ps-hosts localhost:1 --worker-hosts localhost:2 --job-name ps --task-index 0
  expect_rc 1
  expect_contains "PSTRAIN_AUTH_KEY_FILE=$PWD/key can be read by others (mode 644): chmod 600 it"
  run env -u SLURM_CONF PSTRAIN_AUTH_KEY_FILE="$PWD/missing" "$pstrain" --ps-hosts localhost:1 --worker-hosts localhost:2 --job-name ps --task-index 0
  expect_rc 1
  expect_contains "PSTRAIN_AUTH_KEY_FILE=$PWD/missing: No such file or directory"
}

# A key file (mode 600) works; without any key, a static job says that
# authentication is off.
test_key_file_and_no_key() {
  local base=$((PSTRAIN_TEST_PORT + 440)) spec ps ps_rc
  openssl rand -hex 32 >key
  chmod 600 key
  spec=(--ps-hosts "localhost:$base" --worker-hosts "localhost:$((base + 1))" --train-steps 50 --device cpu --bootstrap-timeout 20)
  env -u SLURM_CONF PSTRAIN_AUTH_KEY_FILE="$PWD/key" timeout 60 "$pstrain" "${spec[@]}" --job-name ps --task-index 0 >ps.out 2>&1 &
  ps=$!
  run env -u SLURM_CONF PSTRAIN_AUTH_KEY_FILE="$PWD/key" "$pstrain" "${spec[@]}" --job-name worker --task-index 0
  wait $ps && ps_rc=0 || ps_rc=$?
  expect_rc 0
  expect_eq "$ps_rc" 0 "ps exit status"
  expect_not_contains "authentication is off"
  env -u SLURM_CONF -u PSTRAIN_AUTH_KEY timeout 60 "$pstrain" "${spec[@]}" --job-name ps --task-index 0 >ps.out 2>&1 &
  ps=$!
  run env -u SLURM_CONF -u PSTRAIN_AUTH_KEY "$pstrain" "${spec[@]}" --job-name worker --task-index 0
  wait $ps && ps_rc=0 || ps_rc=$?
  expect_rc 0
  expect_contains "pstrain[worker 0]: warning: peer authentication is off: a static cluster spec (--ps-hosts/--worker-hosts) has no key"
}

# Under srun without PMIx (TF_CONFIG, no key) the chief says once that
# authentication is off and that srun --mpi=pmix turns it on.
test_mpi_none_says_that_pmix_turns_authentication_on() {
  RUN_TIMEOUT=200 run env -u PSTRAIN_AUTH_KEY -u PSTRAIN_AUTH_KEY_FILE srun -N3 --ps=1 --workers=2 --mpi=none "$pstrain" \
    --device cpu --train-steps 20
  expect_rc 0
  expect_contains "pstrain[worker 0]: warning: peer authentication is off: a static cluster spec (TF_CONFIG) has no key; run the step with srun --mpi=pmix, which turns it on"
  expect_eq "$(printf '%s\n' "$out" | grep -c 'authentication is off')" 1 "warnings"
}

# Under srun the key comes through PMIx: nothing to set, nothing printed.
test_pmix_job_is_authenticated_without_settings() {
  run env -u PSTRAIN_AUTH_KEY srun -N3 --ps=1 --workers=2 --mpi=pmix "$pstrain" --device cpu --train-steps 100 --log-level debug
  expect_rc 0
  expect_contains "pstrain[ps 0]: worker 0 (n2, the chief) authenticated"
  expect_contains "pstrain[ps 0]: worker 1 (n3) authenticated"
  expect_not_contains "authentication is off"
}
