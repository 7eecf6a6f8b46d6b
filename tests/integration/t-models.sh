# Layer models (--model presets and specs, --model-file, --summary): what a
# user sees, standalone and on the cluster.

small=(--model 'conv2d:8:3x3:relu,maxpool:2,flatten,dense:10' --optimizer adam --learning-rate 0.002 --batch-size 100)

test_summary_prints_layers_shapes_and_parameters() {
  run "$pstrain" --model cnn --summary
  expect_rc 0
  expect_contains "conv2d:32:5x5:relu                                 32x28x28          832"
  expect_contains "dense:1024:relu                                        1024      3212288"
  expect_contains "total parameters: 3274634"
  run "$pstrain" --model lenet5 --summary
  expect_rc 0
  expect_contains "total parameters: 61706"
  run "$pstrain" --summary --hidden-units 256,128
  expect_rc 0
  expect_contains "total parameters: 235146"
}

test_a_wrong_layer_is_one_line_naming_it() {
  run "$pstrain" --standalone --model 'conv2d:32:5x5,maxpol:2,dense:10'
  expect_rc 2
  expect_eq "$(printf '%s\n' "$out" | wc -l)" 1 "lines of output"
  expect_contains "pstrain: error: --model: layer 2 'maxpol:2': no layer 'maxpol': accepted: input, dense, conv2d"
  run "$pstrain" --standalone --model 'conv2d:32:5y5,dense:10'
  expect_rc 2
  expect_contains "layer 1 'conv2d:32:5y5': '5y5' is not a kernel size: accepted: conv2d:FILTERS:KHxKW"
}

test_shapes_are_checked_before_training() {
  run "$pstrain" --standalone --device cpu --model 'conv2d:8:5x5:valid,maxpool:4,conv2d:4:9x9:valid,dense:10'
  expect_rc 1
  expect_eq "$(printf '%s\n' "$out" | wc -l)" 1 "lines of output"
  expect_contains "error: --model: layer 3 'conv2d:4:9x9:valid' takes 8x6x6 input: the 9x9 window is larger than the 6x6 image"
  run "$pstrain" --standalone --device cpu --model 'conv2d:8:3x3,dense:7'
  expect_rc 1
  expect_contains "error: --model: the last layer 2 'dense:7' outputs 7 values but the data has 10 classes: end with dense:10"
}

# A 2-D layer after dense is told to reorder the layers, with the spec
# reordered, in one line.
test_a_pool_after_dense_says_to_reorder() {
  run "$pstrain" --standalone --device cpu --model 'conv2d:32:5x5,dense:10,maxpool:2'
  expect_rc 1
  expect_eq "$(printf '%s\n' "$out" | wc -l)" 1 "lines of output"
  expect_contains "error: --model: layer 3 'maxpool:2' comes after layer 2 'dense:10': 2-D layers (conv2d, maxpool, avgpool) must come before flatten and dense: reorder them, e.g. --model 'conv2d:32:5x5,maxpool:2,dense:10'"
  expect_not_contains "input:CxHxW"
}

# An image model on click-through .tsv data says which models .tsv trains.
test_an_image_model_on_tsv_data_names_the_ctr_models() {
  run "$pstrain" datagen ctr --samples 200 "$PWD/ctr"
  expect_rc 0
  run "$pstrain" --standalone --device cpu --model cnn --data-dir "$PWD/ctr"
  expect_rc 1
  expect_eq "$(printf '%s\n' "$out" | wc -l)" 1 "lines of output"
  expect_contains "error: --data-dir $PWD/ctr holds .tsv click-through data, which trains --model deepfm or wide-deep; the image models (mlp, lenet5, cnn, layer specs) need MNIST-format IDX files or train.csv/test.csv"
}

# Layer models run on GPUs through cuDNN; where no GPU is visible (CI, this
# cluster's fake GRES), --device cuda is one line naming the missing device
# and the fix, and --device auto trains on the CPU.
test_cuda_layer_models_need_a_visible_gpu() {
  if nvidia-smi -L >/dev/null 2>&1; then
    skip "a GPU is visible: test_cuda_layers checks layer models on it"
  fi
  run "$pstrain" --standalone --device cuda --model cnn
  expect_rc 1
  expect_eq "$(printf '%s\n' "$out" | wc -l)" 1 "lines of output"
  expect_contains "use --device cpu"
  RUN_TIMEOUT=120 run "$pstrain" --standalone --model 'conv2d:4:3x3:relu,maxpool:2,flatten,dense:10' --train-steps 20 --log-every 10
  expect_rc 0
  expect_contains '"event":"done"'
}

test_a_small_cnn_trains_standalone() {
  RUN_TIMEOUT=300 run "$pstrain" --standalone --device cpu "${small[@]}" --train-steps 600 --log-every 200 \
    --augment-shift 1 --normalize per-channel
  expect_rc 0
  local acc
  acc=$(field "$(printf '%s\n' "$out" | last_json)" test_accuracy)
  echo "test accuracy $acc" >>"$TEST_LOG"
  expect_at_least "$acc" 0.80 "test accuracy"
  expect_contains "model: conv2d:8:3x3:relu,maxpool:2,flatten,dense:10 on 1x28x28 (15770 parameters"
}

test_model_file() {
  cat >model.json <<'JSON'
{"layers": [{"type": "conv2d", "filters": 8, "kernel": 3, "activation": "relu"},
            {"type": "maxpool", "size": 2}, "flatten", {"type": "dense", "units": 10}]}
JSON
  run "$pstrain" --model-file "$PWD/model.json" --summary
  expect_rc 0
  expect_contains "model conv2d:8:3x3:relu,maxpool:2,flatten,dense:10"
  echo '{"layers": [{"type": "dense", "unit": 10}]}' >bad.json
  run "$pstrain" --standalone --model-file "$PWD/bad.json"
  expect_rc 2
  expect_eq "$out" "pstrain: error: --model-file $PWD/bad.json: layer 1 (dense): unknown key \"unit\": accepted: units, filters, kernel, size, stride, padding, init, activation, rate" "error line"
}

test_checkpoint_keeps_the_model_and_refuses_another() {
  RUN_TIMEOUT=300 run "$pstrain" --standalone --device cpu "${small[@]}" --train-steps 100 --checkpoint-dir "$PWD/ckpt"
  expect_rc 0
  expect_eq "$(python3 -c "import json,glob; print(json.load(open(sorted(glob.glob('ckpt/ckpt-*.json'))[-1]))['model']['description'])")" \
    "conv2d:8:3x3:relu,maxpool:2,flatten,dense:10 on 1x28x28" "model in the manifest"
  RUN_TIMEOUT=300 run "$pstrain" --standalone --device cpu "${small[@]}" --train-steps 150 --checkpoint-dir "$PWD/ckpt"
  expect_rc 0
  expect_contains "restored"
  run "$pstrain" --standalone --device cpu --model 'conv2d:4:3x3:relu,maxpool:2,flatten,dense:10' --optimizer adam \
    --train-steps 200 --checkpoint-dir "$PWD/ckpt"
  expect_rc 1
  expect_contains "holds the model 'conv2d:8:3x3:relu,maxpool:2,flatten,dense:10 on 1x28x28' (15770 parameters) but this job builds 'conv2d:4:3x3:relu,maxpool:2,flatten,dense:10 on 1x28x28' (7890 parameters)"
}

test_a_small_cnn_trains_distributed_sync() {
  RUN_TIMEOUT=400 run srun -N3 -n 3 --ps=1 --workers=2 --mpi=pmix "$pstrain" --device cpu "${small[@]}" --sync-replicas \
    --train-steps 400 --log-every 200
  expect_rc 0
  local line acc
  line=$(printf '%s\n' "$out" | last_json)
  expect_eq "$(field "$line" mode)" sync "mode"
  acc=$(field "$line" test_accuracy)
  echo "test accuracy $acc" >>"$TEST_LOG"
  expect_at_least "$acc" 0.80 "test accuracy"
}

# Batch normalization's moving statistics live on the PS tasks (pushed as
# moving averages, no optimizer) and in the checkpoint: a 2-PS sync job's
# final evaluation is given back by a restore onto 1 PS.
test_batchnorm_statistics_are_trained_on_the_ps_and_checkpointed() {
  local bn=(--model 'conv2d:8:3x3:relu,batchnorm,maxpool:2,flatten,dense:10' --optimizer adam --learning-rate 0.002
            --batch-size 100 --log-every 0 --device cpu)
  RUN_TIMEOUT=400 run srun -N3 -n 4 --ps=2 --workers=2 --mpi=pmix "$pstrain" "${bn[@]}" --sync-replicas --train-steps 200 \
    --checkpoint-dir "$PWD/ck"
  expect_rc 0
  local first
  first=$(printf '%s\n' "$out" | last_json)
  echo "trained: $first" >>"$TEST_LOG"
  expect_at_least "$(field "$first" test_accuracy)" 0.78 "test accuracy with batchnorm"
  # A restore already at --train-steps evaluates nothing: the restore goes
  # one step on at a learning rate too small to move a float, and only the
  # moving statistics move, 1% (momentum 0.99) toward that step's batch:
  # the accuracy stays within 0.01 of the saved job's (statistics that did
  # not come back, mean 0 and variance 1, are far off).
  RUN_TIMEOUT=300 run "$pstrain" --standalone "${bn[@]}" --train-steps 201 --learning-rate 1e-30 --checkpoint-dir "$PWD/ck"
  expect_rc 0
  expect_contains "restored"
  python3 -c "import sys; sys.exit(0 if abs(float(sys.argv[1]) - float(sys.argv[2])) <= 0.01 else 1)" \
    "$(field "$(printf '%s\n' "$out" | last_json)" test_accuracy)" "$(field "$first" test_accuracy)" ||
    fail "accuracy evaluated from the restored moving statistics: $(field "$(printf '%s\n' "$out" | last_json)" test_accuracy), the saved job's $(field "$first" test_accuracy)"
}
