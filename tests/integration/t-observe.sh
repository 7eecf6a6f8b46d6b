# Watching a run: the chief's progress in the Slurm job's comment (squeue
# -o %k, scontrol show job) and JSON log lines.

train_sh=$PSTRAIN_SRCDIR/scripts/train.sh
export OMP_NUM_THREADS=1

test_job_comment_shows_progress_in_squeue_and_the_result_at_the_end() {
  export PSTRAIN=$pstrain
  run sbatch --parsable --ps=1 --workers=2 -o "$PWD/job.out" "$train_sh" --sync-replicas --train-steps 4000 --log-every 100
  expect_rc 0
  local id=$out comment="" seen="" i
  # While it runs: "step N/4000 loss L ... samples/s ETA ..."
  for i in $(seq 1 600); do
    comment=$(squeue -h -j "$id" -o %k 2>/dev/null || true)
    if [[ $comment =~ ^step\ [0-9]+/4000\ loss\ [0-9.]+\ .*samples/s\ ETA\  ]]; then seen=$comment; break; fi
    [ -n "$(squeue -h -j "$id" -o %T 2>/dev/null)" ] || break
    sleep 0.2
  done
  echo "comment while running: '$seen'" >>"$TEST_LOG"
  [ -n "$seen" ] || fail "squeue -o %k never showed the job's progress (last: '$comment')"
  wait_job "$id" 300
  cat job.out >>"$TEST_LOG"
  expect_eq "$job_state" COMPLETED "job state"
  # At the end: the final step, accuracy and time, in scontrol show job.
  local final acc
  final=$(scontrol show job "$id" | sed -n 's/^ *Comment=//p' | sed 's/ *$//')
  echo "comment at the end: '$final'" >>"$TEST_LOG"
  acc=$(field "$(last_json job.out)" test_accuracy)
  [[ $final =~ ^done:\ step\ 4000\ acc\ ([0-9.]+)\ in\ [0-9] ]] || fail "the final comment is '$final'"
  expect_eq "${BASH_REMATCH[1]}" "$(printf '%.4f' "$acc")" "the comment's accuracy"
}

test_job_comment_off_leaves_the_comment_alone() {
  export PSTRAIN=$pstrain
  run sbatch --parsable --ps=1 --workers=1 --comment "mine" -o "$PWD/job.out" "$train_sh" --train-steps 200 --job-comment off
  expect_rc 0
  local id=$out
  wait_job "$id" 300
  expect_eq "$job_state" COMPLETED "job state"
  expect_eq "$(scontrol show job "$id" | sed -n 's/^ *Comment=//p' | sed 's/ *$//')" "mine" "the job's comment"
}

test_log_format_json_makes_every_line_an_object() {
  run "$pstrain" --standalone --train-steps 300 --log-every 100 --log-format json
  expect_rc 0
  local lines
  lines=$(grep -v '^{"accuracy\|^{"event' <<<"$out" || true)
  python3 - "$lines" <<'PY' || fail "a log line is not a JSON object with time, level, task, host, pid and message"
import json, sys
lines = [l for l in sys.argv[1].splitlines() if l]
assert len(lines) >= 4, lines
for l in lines:
    j = json.loads(l)
    assert set(j) >= {"time", "level", "task", "host", "pid", "message"}, j
    assert j["level"] in ("error", "warn", "info", "debug"), j
assert any(json.loads(l)["message"].startswith("step 100/300") for l in lines), lines
PY
  # The environment's setting, and a wrong value named with its fix.
  run env PSTRAIN_LOG_FORMAT=json "$pstrain" --standalone --train-steps 0
  expect_fail
  python3 -c "import json,sys; json.loads(sys.argv[1].splitlines()[0])" "$out" || fail "an error line is not JSON: $out"
  run env PSTRAIN_LOG_FORMAT=yaml "$pstrain" --standalone
  expect_rc 2
  expect_contains "PSTRAIN_LOG_FORMAT: log format 'yaml' is not one of text, json: set it to text or json, or unset it"
}
