# Helpers for the integration tests, sourced by run-integration.
#
# Each test is a shell function named test_* in a t-*.sh file.  It runs in a
# subshell with its own log; `run` records a command, its output and its exit
# status there.  A test fails on the first failed `expect_*` (or `fail`),
# and on any other command that fails (the test runs under set -e): write a
# command that may fail as `cmd || true`, or capture its status and assert it.

# run CMD ARGS...: runs with a time limit; sets $out (stdout+stderr) and $rc.
run() {
  echo "\$ $*" >>"$TEST_LOG"
  out=$(timeout "${RUN_TIMEOUT:-120}" "$@" 2>&1) && rc=0 || rc=$?
  printf '%s\n[exit status %d]\n' "$out" "$rc" >>"$TEST_LOG"
  return 0
}

# python_env NAME...: the virtual environment with python/requirements-NAME.txt
# installed (scripts/pstrain-venv), on stdout.  Skips the test when PyPI
# cannot be reached, fails it when the install fails otherwise.
python_env() {
  local dir
  if dir=$("$PSTRAIN_SRCDIR/scripts/pstrain-venv" "$@" 2>>"$TEST_LOG"); then echo "$dir"; return 0; fi
  if ! python3 -c 'import urllib.request; urllib.request.urlopen("https://pypi.org/simple/pip/", timeout=15)' 2>/dev/null; then
    skip "PyPI cannot be reached: the Python packages $* cannot be installed"
  fi
  fail "scripts/pstrain-venv $* failed (PyPI is reachable): see $TEST_LOG"
}

# skip REASON: this test cannot run here (and says why); exit 77.
skip() { echo "SKIP: $*" >&2; exit 77; }

fail() {
  echo "FAILED: $*" >>"$TEST_LOG"
  echo "    $*" >&2
  exit 1
}

expect_rc() {  # expect_rc N
  [ "$rc" -eq "$1" ] || fail "expected exit status $1, got $rc: $(printf '%s' "$out" | tail -n 3 | tr '\n' ' ')"
}
expect_fail() {
  [ "$rc" -ne 0 ] || fail "expected a non-zero exit status, got 0"
}
expect_contains() {  # expect_contains TEXT
  case "$out" in *"$1"*) ;; *) fail "expected output to contain '$1', got: $(printf '%s' "$out" | tail -n 3 | tr '\n' ' ')" ;; esac
}
expect_not_contains() {
  case "$out" in *"$1"*) fail "expected output not to contain '$1'" ;; esac
}
expect_eq() {  # expect_eq ACTUAL EXPECTED WHAT
  [ "$1" = "$2" ] || fail "$3: expected '$2', got '$1'"
}

# expect_at_least ACTUAL MIN WHAT: numbers, ACTUAL >= MIN
expect_at_least() {
  python3 -c "import sys; sys.exit(0 if float(sys.argv[1]) >= float(sys.argv[2]) else 1)" "$1" "$2" ||
    fail "$3: $1 < $2"
}

pstrain=$PSTRAIN_BUILDDIR/trainer/pstrain
# The last JSON line of files (or stdin), and one field of a JSON line.
last_json() { grep '^{"' "$@" | tail -n 1; }
field() { python3 -c "import json,sys; print(json.loads(sys.argv[1])['$2'])" "$1"; }

# The pstrain processes of this test's job (started with
# PSTRAIN_TEST_TAG=$TEST_TAG), as "pid ROLE INDEX" lines; the launching
# srun, timeout and env carry the tag too, with an empty ROLE.
# A few processes in all, whatever the job's size: a job of 65 tasks on a
# busy machine took 16 s with a `tr` and three `grep`s a process.
job_tasks() {
  local files tagged
  files=$(pgrep -f "$pstrain" | sed 's|.*|/proc/&/environ|') || true
  [ -n "$files" ] || return 0
  # shellcheck disable=SC2086
  tagged=$(grep -l -a -z -x "PSTRAIN_TEST_TAG=$TEST_TAG" $files 2>/dev/null) || return 0
  # shellcheck disable=SC2086
  { printf '%s:\n' $tagged; { grep -a -z -H -E '^PSTRAIN_(ROLE|TASK_INDEX)=' $tagged 2>/dev/null || true; } | tr '\0' '\n'; } |
    awk -F'[:=]' '{ p = $1; sub("^/proc/", "", p); sub("/environ$", "", p); seen[p] = 1
                    if ($2 == "PSTRAIN_ROLE") role[p] = $3; else if ($2 == "PSTRAIN_TASK_INDEX") index_[p] = $3 }
                  END { for (p in seen) print p, role[p], index_[p] }'
}

# Every node of the test cluster is idle (a bad input must never drain one).
expect_nodes_idle() {
  local states
  states=$(sinfo -h -N -o '%N=%T' | sort -u | tr '\n' ' ')
  case "$states" in
    *drain*|*down*|*fail*) fail "a node is not healthy: $states" ;;
  esac
  local i
  for i in $(seq 1 40); do
    [ "$(sinfo -h -N -t idle -o '%N' | sort -u | wc -l)" -eq "$(sinfo -h -N -o '%N' | sort -u | wc -l)" ] && return 0
    sleep 0.5
  done
  fail "nodes not idle after the test: $(sinfo -h -N -o '%N=%T' | sort -u | tr '\n' ' ')"
}

# wait_job ID [SECONDS]: waits until the job has left the queue's active
# states; sets $job_state (COMPLETED, FAILED, ...).
wait_job() {
  local id=$1 limit=${2:-300} t0=$SECONDS
  while :; do
    # scontrol fails for a job it does not know (yet, or any more): keep polling.
    job_state=$(scontrol show job "$id" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p' | head -n 1) || true
    case "$job_state" in
      PENDING|RUNNING|CONFIGURING|COMPLETING|SUSPENDED|REQUEUED|"") ;;
      *) echo "job $id: $job_state" >>"$TEST_LOG"; return 0 ;;
    esac
    [ $((SECONDS - t0)) -lt "$limit" ] || { scancel "$id" 2>/dev/null || true; fail "job $id still $job_state after ${limit}s"; }
    sleep 1
  done
}

# The cluster under test: its state directory, its mode (netns: every
# node in its own network namespace; plain: all on 127.0.0.1), and
# pstrain-cluster run against it (link, shape).
cluster_dir() { dirname "$(dirname "$SLURM_CONF")"; }
cluster_mode() { if [ -f "$(dirname "$SLURM_CONF")/netns" ]; then echo netns; else echo plain; fi; }
cluster() { "$PSTRAIN_SRCDIR/scripts/pstrain-cluster" "$@" --dir "$(cluster_dir)"; }
