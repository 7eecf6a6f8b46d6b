# The README's commands, run as written: every command block of its
# "Using it" section (and that section's subsections) and of "The
# parameter-server library", in order, from a
# scratch directory, with pstrain installed into /usr/local as
# scripts/quickstart installs it, and STEPS/SAMPLES small (the README says
# so).  Each block runs as one bash script that stops at its first failing
# command; a job a block submits is waited for before the block's next line
# runs, as a person would, and must end COMPLETED with its done line.  So
# the README cannot name a file that is not there, a flag pstrain refuses
# or a command that needs more than it says.

readme_install() {
  # What quickstart does: make install into the default prefix.
  make -C "$PSTRAIN_BUILDDIR" install >>"$TEST_LOG" 2>&1 || fail "make install failed: see $TEST_LOG"
  [ -x /usr/local/bin/pstrain ] || fail "make install put no pstrain in /usr/local/bin"
  ldconfig
}

# The shell functions a block runs with: sbatch waits for the job it
# submitted (and records it), tensorboard serves on a free loopback port
# until it says where, then stops.
readme_shims() {
  cat <<'SHIMS'
sbatch() {
  local out id state
  out=$(command sbatch "$@") || return
  printf '%s\n' "$out"
  id=$(printf '%s\n' "$out" | sed -n 's/^Submitted batch job \([0-9]*\).*/\1/p')
  [ -n "$id" ] || return 0
  echo "$id" >>"$README_JOBS"
  while :; do
    state=$(scontrol show job "$id" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | head -n 1) || true
    case "$state" in PENDING|RUNNING|CONFIGURING|COMPLETING|SUSPENDED|REQUEUED|"") sleep 1 ;; *) break ;; esac
  done
  echo "(job $id: $state)"
}
tensorboard() {
  local log=$PWD/tensorboard.log
  command tensorboard "$@" --host 127.0.0.1 --port 0 >"$log" 2>&1 &
  local pid=$! i
  for i in $(seq 1 60); do
    if grep -q 'http://127.0.0.1:[0-9]' "$log"; then kill "$pid"; wait "$pid" 2>/dev/null; cat "$log"; return 0; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 1
  done
  kill "$pid" 2>/dev/null; cat "$log"; return 1
}
SHIMS
}

test_readme_using_it_commands_run_as_written() {
  readme_install
  local venv
  venv=$(python_env tensorboard)
  local blocks=$PWD/blocks home=$PWD/home work=$PWD/home/work
  mkdir -p "$home" "$work"
  export README_JOBS=$PWD/jobs
  : >"$README_JOBS"
  python3 "$PSTRAIN_SRCDIR/tests/integration/readme_blocks.py" "$PSTRAIN_SRCDIR/README.md" "$blocks" "Using it" \
    "The parameter-server library" \
    >blocks.list || fail "cannot read the README's blocks"
  [ "$(wc -l <blocks.list)" -ge 5 ] || fail "only $(wc -l <blocks.list) command blocks in the README's Using it section"
  readme_shims >shims.sh
  local block first
  local -a list
  mapfile -t list <blocks.list
  for block in "${list[@]}"; do
    first=${block#*$'\t'} block=${block%%$'\t'*}
    echo "--- $(basename "$block"): $first" >>"$TEST_LOG"
    case "$first" in
      # quickstart's cluster: the cluster under test stands in for it.
      "export SLURM_CONF="*) echo "(the test cluster, $SLURM_CONF, stands in for it)" >>"$TEST_LOG"; continue ;;
    esac
    cat "$block" >>"$TEST_LOG"
    RUN_TIMEOUT=900 run env -u PSTRAIN -u PSTRAIN_CHECKPOINT_DIR -u PSTRAIN_DATA_DIR \
      HOME="$home" STEPS=40 SAMPLES=20000 PATH="/usr/local/bin:$venv/bin:$PATH" \
      bash -c "cd '$work' && source '$PWD/shims.sh' && set -e && source '$block'" </dev/null
    [ "$rc" -eq 0 ] || fail "README block '$first' failed (exit $rc): $(printf '%s' "$out" | tail -n 3 | tr '\n' ' ')"
  done
  # Every job a block submitted completed and printed its result.
  local id n=0
  while read -r id; do
    n=$((n + 1))
    local log=$work/pstrain-$id.out
    [ -f "$log" ] || fail "job $id wrote no $log"
    grep -q '^{"event":"done"' "$log" || fail "job $id printed no done line: $(tail -n 3 "$log" | tr '\n' ' ')"
    ! grep -q 'error' "$log" || fail "job $id logged an error: $(grep error "$log" | head -n 2 | tr '\n' ' ')"
  done <"$README_JOBS"
  [ "$n" -ge 4 ] || fail "the README's blocks submitted $n jobs, expected at least 4"
  local unfinished
  unfinished=$(grep '^(job [0-9]*: ' "$TEST_LOG" | grep -v ': COMPLETED)$' || true)
  [ -z "$unfinished" ] || fail "a job of the README did not complete: $unfinished"
}
