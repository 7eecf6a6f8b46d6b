# Watching a run: the chief's progress in the Slurm job's comment (squeue
# -o %k, scontrol show job), JSON log lines, pstrain status and plot, and
# TensorBoard event files read by TensorBoard's own reader.

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

test_status_tells_where_a_run_stands() {
  run srun -N3 --ps=2 --workers=2 --mpi=pmix "$pstrain" --device cpu --sync-replicas --train-steps 400 --log-every 100 \
    --eval-every 200 --save-checkpoint-steps 100 --checkpoint-dir "$PWD/ckpt"
  expect_rc 0
  local acc
  acc=$(field "$(last_json <<<"$out")" test_accuracy)
  run "$pstrain" status ckpt
  expect_rc 0
  expect_contains "last checkpoint: global step 400, written "
  expect_contains "run: sync mode, 2 PS tasks, model 784-100-10 mlp (79510 parameters), optimizer sgd"
  expect_contains "accuracy: $(printf '%.4f' "$acc") on the test set at global step 400"
  expect_contains "metrics (ckpt/metrics.jsonl), last 5:"
  expect_contains "step      400  training done, test accuracy $(printf '%.4f' "$acc")"
  run "$pstrain" status ckpt --json --tail 3
  expect_rc 0
  python3 - "$out" "$acc" <<'PY' || fail "pstrain status --json: $out"
import json, sys
s = json.loads(sys.argv[1])
assert s["checkpoint"]["global_step"] == 400 and s["checkpoint"]["ps"] == 2, s
assert s["checkpoint"]["mode"] == "sync" and s["checkpoint"]["num_params"] == 79510, s
assert s["accuracy"] == {"test_accuracy": float(sys.argv[2]), "global_step": 400}, s
assert len(s["metrics_tail"]) == 3 and s["metrics_tail"][-2]["event"] == "eval", s
assert s["metrics_tail"][-1]["event"] == "done" and s["metrics_tail"][-1]["global_step"] == 400, s
PY
  run "$pstrain" status "$PWD/none"
  expect_rc 1
  expect_contains "pstrain status: error: $PWD/none is not a directory: give the --checkpoint-dir of a job"
}

# png_facts FILE: "WIDTH HEIGHT COLOURS INKED_PERCENT" of a PNG, decoded here
# (zlib and the PNG filters, no imaging library), or a failure.
png_facts() {
  python3 - "$1" <<'PY'
import struct, sys, zlib
data = open(sys.argv[1], "rb").read()
assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
pos, idat, ihdr = 8, b"", None
while pos < len(data):
    n, kind = struct.unpack(">I4s", data[pos:pos + 8])
    body = data[pos + 8:pos + 8 + n]
    assert zlib.crc32(kind + body) == struct.unpack(">I", data[pos + 8 + n:pos + 12 + n])[0], "bad chunk crc"
    if kind == b"IHDR": ihdr = struct.unpack(">IIBBBBB", body)
    if kind == b"IDAT": idat += body
    pos += 12 + n
w, h, depth, colour, _, _, interlace = ihdr
assert depth == 8 and interlace == 0, ihdr
bpp = {2: 3, 6: 4, 0: 1, 4: 2}[colour]
raw, stride, prev, pixels = zlib.decompress(idat), w * bpp, bytearray(w * bpp), set()
inked, i = 0, 0
for y in range(h):
    f, line = raw[i], bytearray(raw[i + 1:i + 1 + stride]); i += 1 + stride
    for x in range(stride):
        a = line[x - bpp] if x >= bpp else 0; b = prev[x]; c = prev[x - bpp] if x >= bpp else 0
        if f == 1: line[x] = (line[x] + a) & 255
        elif f == 2: line[x] = (line[x] + b) & 255
        elif f == 3: line[x] = (line[x] + (a + b) // 2) & 255
        elif f == 4:
            p = a + b - c; pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
            line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
    for x in range(0, stride, bpp):
        px = bytes(line[x:x + min(bpp, 3)]); pixels.add(px)
        inked += px != b"\xff" * len(px)
    prev = line
print(w, h, len(pixels), round(100 * inked / (w * h), 2))
PY
}

test_plot_draws_the_curves_of_several_runs() {
  run "$pstrain" --standalone --train-steps 600 --eval-every 200 --metrics-file "$PWD/sgd.jsonl"
  expect_rc 0
  run "$pstrain" --standalone --train-steps 600 --eval-every 200 --optimizer adam --learning-rate 0.001 --metrics-file "$PWD/adam.jsonl"
  expect_rc 0
  run "$pstrain" plot sgd.jsonl adam.jsonl -o curves.png --size 900x600 --title "sgd against adam"
  expect_rc 0
  expect_contains "pstrain plot: wrote curves.png (900x600, 2 runs)"
  local facts w h colours inked
  facts=$(png_facts curves.png) || fail "curves.png does not decode"
  echo "curves.png: $facts" >>"$TEST_LOG"
  read -r w h colours inked <<<"$facts"
  expect_eq "$w x $h" "900 x 600" "the PNG's size"
  expect_at_least "$colours" 3 "colours in the PNG (background, axes, two runs)"
  expect_at_least "$inked" 2 "per cent of pixels drawn"
  # A file that is not metrics, one that is missing, and a bad size.
  echo "hello" >notes.txt
  run "$pstrain" plot notes.txt -o bad.png
  expect_rc 1
  expect_contains "pstrain plot: error: notes.txt: no progress or evaluation events: is it a pstrain --metrics-file?"
  [ ! -e bad.png ] || fail "a failed plot left bad.png behind"
  run "$pstrain" plot missing.jsonl -o bad.png
  expect_rc 1
  expect_contains "missing.jsonl: cannot read: No such file or directory"
  run "$pstrain" plot sgd.jsonl -o bad.png --size 12
  expect_rc 2
  expect_contains "'12' is not WIDTHxHEIGHT"
}

test_tensorboard_reads_every_scalar_of_the_metrics() {
  local venv
  venv=$(python_env tensorboard)
  # Async over 2 PS tasks: every worker's rate, its staleness, each PS's bytes.
  run srun -N3 --ps=2 --workers=2 --mpi=pmix "$pstrain" --device cpu --train-steps 800 --log-every 100 \
    --eval-every 200 --checkpoint-dir "$PWD/ckpt"
  expect_rc 0
  expect_contains "TensorBoard events go to $PWD/ckpt/events/events.out.tfevents."
  run "$venv/bin/python" "$PSTRAIN_SRCDIR/tests/integration/check_tensorboard.py" ckpt/events ckpt/metrics.jsonl \
    loss/train accuracy/train accuracy/test cross_entropy/test samples_per_sec learning_rate \
    worker/0/steps_per_sec worker/1/steps_per_sec worker/0/staleness worker/1/staleness stale_gradients \
    ps/0/received_bytes_per_sec ps/1/received_bytes_per_sec ps/0/sent_bytes_per_sec ps/1/sent_bytes_per_sec
  expect_rc 0
  expect_contains "tensorboard: "
  # What the figures say: both workers step, async gradients are a little
  # stale, both PS tasks move bytes, the learning rate is the flag's.
  python3 - ckpt/metrics.jsonl <<'PY' || fail "the cluster figures are not what an async run of 2 workers shows"
import json, sys
events = [json.loads(l) for l in open(sys.argv[1])]
cluster = [e for e in events if e["event"] == "cluster"]
assert len(cluster) >= 5, len(cluster)
for e in cluster[1:]:
    assert all(w["steps_per_sec"] > 0 for w in e["workers"]), e
    assert all(p["received_bytes_per_sec"] > 0 and p["sent_bytes_per_sec"] > 0 for p in e["ps"]), e
assert sum(e["staleness"] for e in cluster) > 0, cluster
progress = [e for e in events if e["event"] == "progress"]
assert all(e["learning_rate"] == 0.01 and 0 < e["train_accuracy"] <= 1 for e in progress), progress
PY
  # A directory that cannot be made: one line naming the flag, before any training.
  : >afile
  run "$pstrain" --standalone --train-steps 100 --tensorboard-dir "$PWD/afile/events"
  expect_rc 1
  expect_contains "--tensorboard-dir $PWD/afile/events: cannot create it: "
  expect_contains ": give --tensorboard-dir a directory this job can write"
  expect_not_contains "step 100/100"
  # none: no events beside the checkpoints.
  run "$pstrain" --standalone --train-steps 100 --checkpoint-dir "$PWD/quiet" --tensorboard-dir none
  expect_rc 0
  [ ! -e quiet/events ] || fail "--tensorboard-dir none wrote quiet/events"
}
