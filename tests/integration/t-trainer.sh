# The trainer on its own (--standalone): the known-answer checks, the
# accuracy bar, device selection and bad input.

done_field() {  # done_field KEY: from the last line of $out
  printf '%s\n' "$out" | tail -n 1 | python3 -c "import json,sys; print(json.loads(sys.stdin.read())['$1'])"
}

test_linear_model_recovers_weight_and_bias() {
  run "$pstrain" --standalone --model linear --train-steps 2000 --batch-size 50 --learning-rate 0.05 --device cpu
  expect_rc 0
  expect_contains "linear model: weight"
  local w b
  w=$(done_field weight) b=$(done_field bias)
  python3 -c "import sys; sys.exit(0 if abs($w - 2) < 0.05 and abs($b - 10) < 0.05 else 1)" || fail "weight $w bias $b not within 0.05 of 2 and 10"
}

test_fashion_mnist_mlp_reaches_0885() {
  RUN_TIMEOUT=300 run env OMP_NUM_THREADS=1 "$pstrain" --standalone --hidden-units 256,128 --optimizer adam \
    --learning-rate 0.001 --batch-size 100 --train-steps 6000 --log-every 1000 --eval-every 3000 --metrics-file "$PWD/m.jsonl"
  expect_rc 0
  expect_eq "$(done_field event)" done "last line"
  expect_eq "$(done_field global_step)" 6000 "global_step"
  local acc
  acc=$(done_field test_accuracy)
  echo "test accuracy $acc" >>"$TEST_LOG"
  expect_at_least "$acc" 0.885 "test accuracy"
  expect_contains "step 1000/6000 loss"
  expect_contains "samples/s eta"
  expect_eq "$(grep -c '"event":"progress"' m.jsonl)" 6 "progress lines in the metrics file"
  expect_eq "$(grep -c '"event":"eval"' m.jsonl)" 2 "eval lines in the metrics file"
}

# The mean of a run's last three evaluations (one evaluation's own noise is
# about 0.003, so a single one would compare noise); stdout.
last3_accuracy() {
  grep -o 'eval at global step [0-9]*: test accuracy [0-9.]*' "$1" | awk '{a[NR] = $NF}
    END { if (NR < 3) exit 1; printf "%.4f\n", (a[NR] + a[NR - 1] + a[NR - 2]) / 3 }'
}

# precision_pair NAME ARGS...: the same run at --precision fp32 and bf16,
# side by side (one core each); NAME-fp32.out and NAME-bf16.out.
precision_pair() {
  local name=$1; shift
  echo "\$ $pstrain --standalone --device cpu --threads 1 --precision fp32|bf16 $*" >>"$TEST_LOG"
  local p pids=()
  for p in fp32 bf16; do
    timeout 400 "$pstrain" --standalone --device cpu --threads 1 --precision "$p" "$@" >"$name-$p.out" 2>&1 &
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p" || fail "a run of $name exited with status $?: $(tail -n 2 "$name"-*.out)"; done
}

# bf16 products (FP32 masters, accumulation, loss) reach FP32's accuracy:
# the same seed's two runs within 0.003.  The MLP to convergence (6000
# steps, 10 epochs; seeds 2-5, run by hand: differences of 0.0008, 0.0024,
# 0.0015 and 0.0018); the cnn preset over 500 steps (the README's table has
# its distributed runs to convergence).
test_bf16_and_fp32_of_one_seed_reach_the_same_accuracy() {
  run "$pstrain" --standalone --device cpu --precision bf16 --train-steps 1
  case "$out" in *"this CPU has neither"*|*"without oneDNN"*) skip "bf16: ${out##*: }" ;; esac
  expect_rc 0
  local s f b
  for s in 1; do
    precision_pair "mlp$s" --hidden-units 256,128 --optimizer adam --learning-rate 0.001 --batch-size 100 \
      --train-steps 6000 --log-every 6000 --eval-every 500 --seed "$s"
    f=$(last3_accuracy "mlp$s-fp32.out") b=$(last3_accuracy "mlp$s-bf16.out")
    echo "mlp seed $s: fp32 $f bf16 $b" >>"$TEST_LOG"
    expect_at_least "$b" "$(python3 -c "print($f - 0.003)")" "mlp seed $s: bf16's accuracy (fp32's $f)"
    expect_at_least "$f" "$(python3 -c "print($b - 0.003)")" "mlp seed $s: fp32's accuracy (bf16's $b)"
  done
  precision_pair cnn --model cnn --optimizer adam --learning-rate 0.001 --batch-size 100 --train-steps 500 \
    --log-every 500 --eval-every 100 --seed 1
  f=$(last3_accuracy cnn-fp32.out) b=$(last3_accuracy cnn-bf16.out)
  echo "cnn seed 1: fp32 $f bf16 $b" >>"$TEST_LOG"
  expect_at_least "$b" "$(python3 -c "print($f - 0.003)")" "cnn: bf16's accuracy (fp32's $f)"
  expect_at_least "$f" "$(python3 -c "print($b - 0.003)")" "cnn: fp32's accuracy (bf16's $b)"
  grep -q 'bf16 matrix products on oneDNN' cnn-bf16.out || fail "the bf16 run's device line does not name the bf16 unit: $(grep -m1 device: cnn-bf16.out)"
}

# An OpenBLAS that does not know the CPU's model falls back to its Prescott
# (SSE3) kernels (Debian 12's 0.3.21 on a family 6 model 207 Xeon: 3.3x
# slower FP32 products); pstrain runs again naming the kernels the CPU has,
# unless OPENBLAS_CORETYPE was set, which it leaves as it is.
test_openblas_runs_kernels_the_cpu_has_unless_told_otherwise() {
  run env -u OPENBLAS_CORETYPE "$pstrain" --standalone --device cpu --model linear --train-steps 10
  expect_rc 0
  case "$out" in *"device: cpu (CBLAS"*) skip "built with a CBLAS other than OpenBLAS" ;; esac
  local line; line=$(printf '%s\n' "$out" | grep -o 'device: cpu (.*')
  echo "unset: $line" >>"$TEST_LOG"
  if grep -qw avx2 /proc/cpuinfo && grep -qw fma /proc/cpuinfo; then
    case "$line" in *"OpenBLAS Prescott kernel"*) fail "OpenBLAS runs its SSE3 kernels on a CPU with AVX2: $line" ;; esac
  fi
  run env OPENBLAS_CORETYPE=Prescott "$pstrain" --standalone --device cpu --model linear --train-steps 10
  expect_rc 0
  expect_contains "device: cpu (OpenBLAS Prescott kernel, "
}

have_gpu() { nvidia-smi -L >/dev/null 2>&1; }
built_with_cuda() { grep -q 'HAVE_CUDA 1' "$PSTRAIN_BUILDDIR/config.h"; }

test_device_cuda_without_gpu_fails_clearly() {
  if have_gpu && built_with_cuda; then
    # With a GPU the same command must train on it.
    run "$pstrain" --standalone --device cuda --model linear --train-steps 100
    expect_rc 0
    expect_contains "device: cuda ("
    return
  fi
  run "$pstrain" --standalone --device cuda --train-steps 1
  expect_fail
  expect_contains "no CUDA device visible"
  expect_eq "$(printf '%s\n' "$out" | wc -l)" 1 "lines of output"
  run env CUDA_VISIBLE_DEVICES= "$pstrain" --standalone --device cuda --train-steps 1
  expect_fail
  expect_eq "$out" "pstrain[standalone]: error: no CUDA device visible: CUDA_VISIBLE_DEVICES is empty (as for ps tasks); run workers with --gres=gpu:N" "error line"
}

test_device_auto_picks_the_gpu_or_says_why_not() {
  run "$pstrain" --standalone --model linear --train-steps 10 --device auto
  expect_rc 0
  if have_gpu && built_with_cuda; then
    expect_contains "device: cuda ("
  else
    expect_contains "training on the CPU (--device auto: no GPU visible)"
    expect_not_contains "insufficient"
    expect_contains "device: cpu (OpenBLAS"
  fi
}

test_cuda_backend_is_built_when_the_toolkit_is_here() {
  if [ ! -x /usr/local/cuda/bin/nvcc ]; then
    built_with_cuda && fail "HAVE_CUDA is set but /usr/local/cuda/bin/nvcc is gone"
    run "$pstrain" --standalone --device cuda --train-steps 1
    expect_contains "this pstrain was built without CUDA"
    return
  fi
  built_with_cuda || fail "/usr/local/cuda is here but configure did not build the CUDA backend"
  # The backend is the module pstrain loads when a GPU is wanted (t-device.sh).
  run ldd "$PSTRAIN_BUILDDIR/trainer/.libs/pstrain-cuda.so"
  expect_contains "libcublas"
  expect_contains "libcudart"
}

test_bad_values_are_one_line_each() {
  local args
  for args in "--batch-size 0" "--learning-rate -1" "--hidden-units 10,,5" "--train-steps abc" "--optimizer rmsprop" "--bogus"; do
    run "$pstrain" --standalone $args
    expect_rc 2
    expect_eq "$(printf '%s\n' "$out" | wc -l)" 1 "lines for $args"
    expect_contains "pstrain: error: "
  done
}

test_missing_data_dir() {
  run "$pstrain" --standalone --device cpu --data-dir /nonexistent --train-steps 1
  expect_rc 1
  expect_eq "$out" "pstrain[standalone]: error: --data-dir /nonexistent: no such directory: point --data-dir at MNIST-format IDX files, train.csv/test.csv or Criteo-style .tsv click-through files (or install dataset-fashion-mnist)" "error line"
}

test_corrupt_dataset_is_named() {
  mkdir data
  for f in train-images-idx3-ubyte train-labels-idx1-ubyte t10k-images-idx3-ubyte t10k-labels-idx1-ubyte; do
    zcat /usr/share/datasets/fashion-mnist/$f.gz >data/$f
  done
  truncate -s 1000000 data/train-images-idx3-ubyte
  run "$pstrain" --standalone --data-dir "$PWD/data" --train-steps 1
  expect_rc 1
  expect_contains "train-images-idx3-ubyte: truncated: the file ends inside the pixel data"
}

# A 16-byte IDX header announcing 2^28 images of 4096 x 4096 pixels (2^52
# bytes): the file is named with what it lacks, not taken for the machine
# being out of memory.
test_idx_header_announcing_more_than_the_file_holds_is_named() {
  mkdir data
  printf '\x00\x00\x08\x03\x10\x00\x00\x00\x00\x00\x10\x00\x00\x00\x10\x00' >data/train-images-idx3-ubyte
  printf '\x00\x00\x08\x01\x10\x00\x00\x00' >data/train-labels-idx1-ubyte
  cp data/train-images-idx3-ubyte data/t10k-images-idx3-ubyte
  cp data/train-labels-idx1-ubyte data/t10k-labels-idx1-ubyte
  run "$pstrain" --standalone --device cpu --data-dir "$PWD/data" --train-steps 1
  expect_rc 1
  expect_eq "$out" "pstrain[standalone]: error: $PWD/data/train-images-idx3-ubyte: truncated: the file ends inside the pixel data (0 of the 4503599627370496 bytes its header announces): download it again, or check --data-dir" "error line"
  gzip data/train-images-idx3-ubyte
  run "$pstrain" --standalone --device cpu --data-dir "$PWD/data" --train-steps 1
  expect_rc 1
  expect_eq "$out" "pstrain[standalone]: error: $PWD/data/train-images-idx3-ubyte.gz: truncated: the file ends inside the pixel data" "error line"
}

test_unwritable_metrics_file() {
  run "$pstrain" --standalone --model linear --train-steps 1 --metrics-file /nonexistent/m.jsonl
  expect_rc 1
  expect_contains "--metrics-file /nonexistent/m.jsonl: cannot open for appending"
}

test_a_mistyped_flag_gets_did_you_mean() {
  run "$pstrain" --standalone --trian-steps 10
  expect_rc 2
  expect_eq "$out" "pstrain: error: unknown argument '--trian-steps': did you mean --train-steps? (see pstrain --help)" "the one line"
}

test_help_lists_the_commands_and_the_tsv_default() {
  run "$pstrain" --help
  expect_rc 0
  expect_contains "click-through data: --model deepfm, the default for them, or wide-deep"
  local c
  for c in "pstrain status DIR" "pstrain plot METRICS" "pstrain checkpoint inspect DIR" "pstrain datagen ctr OUT"; do
    expect_contains "$c"
  done
}

test_status_of_a_directory_without_a_run_fails() {
  mkdir empty
  run "$pstrain" status "$PWD/empty"
  expect_rc 1
  expect_eq "$out" "pstrain status: error: $PWD/empty holds no complete checkpoint and no metrics.jsonl: give the --checkpoint-dir of a job that has saved one (or its --metrics-file with --metrics)" "the one line"
}

test_wrong_data_dir_messages_name_tsv() {
  mkdir nothing
  run "$pstrain" --standalone --device cpu --data-dir "$PWD/nothing"
  expect_rc 1
  expect_contains "Criteo-style .tsv click-through files"
  run "$pstrain" --standalone --device cpu --data-dir "$PWD/missing"
  expect_rc 1
  expect_contains "--data-dir $PWD/missing: no such directory"
  expect_contains ".tsv click-through files"
}
