# Click-through training: datagen's planted-teacher data, --data-dir of
# .tsv files (wide & deep with embedding tables on the PS tasks),
# standalone and distributed, AUC beside the oracle's; bad lines, the row
# limit.

# datagen DIR [SAMPLES [LINES-PER-FILE]]: a small synthetic data set.
datagen() {
  "$pstrain" datagen ctr --samples "${2:-200000}" --seed 5 --lines-per-file "${3:-50000}" "$1" >/dev/null
}

ctr_flags=(--batch-size 256 --optimizer adam --learning-rate 0.002 --log-every 100)

test_summary_names_the_tables() {
  run "$pstrain" --model wide-deep --summary --embedding-dim 8
  expect_rc 0
  expect_contains "model wide-deep"
  expect_contains "embedding table wide"
  expect_contains "embedding table deep"
}

test_wide_deep_trains_standalone_near_the_oracle() {
  datagen data
  # One pass over the 180000 training examples.
  RUN_TIMEOUT=300 run "$pstrain" --standalone --data-dir "$PWD/data" "${ctr_flags[@]}" --train-steps 700
  expect_rc 0
  local line auc oracle
  line=$(printf '%s\n' "$out" | last_json)
  auc=$(field "$line" test_auc)
  oracle=$(field "$line" oracle_auc)
  echo "test AUC $auc, oracle $oracle, log loss $(field "$line" test_logloss)" >>"$TEST_LOG"
  expect_at_least "$auc" 0.67 "test AUC"
  expect_at_least "$oracle" "$auc" "oracle AUC (no model beats the teacher)"
  expect_contains "held-out: 20000 examples of $PWD/data/test.tsv"
}

test_wide_deep_trains_on_two_ps_tasks_sync() {
  datagen data
  RUN_TIMEOUT=400 run srun -N3 -n 4 --ps=2 --workers=2 --mpi=pmix "$pstrain" --data-dir "$PWD/data" "${ctr_flags[@]}" \
    --sync-replicas --train-steps 350
  expect_rc 0
  local line
  line=$(printf '%s\n' "$out" | last_json)
  expect_eq "$(field "$line" mode)" sync "mode"
  expect_eq "$(field "$line" ps)" 2 "ps tasks"
  echo "test AUC $(field "$line" test_auc)" >>"$TEST_LOG"
  expect_at_least "$(field "$line" test_auc)" 0.66 "test AUC"
}

test_a_malformed_line_is_named_or_skipped() {
  datagen data 20000 9000
  printf '1\tnot\ta\tline\n' >>data/train-00001.tsv
  RUN_TIMEOUT=300 run "$pstrain" --standalone --data-dir "$PWD/data" "${ctr_flags[@]}" --train-steps 200
  expect_rc 1
  expect_contains "$PWD/data/train-00001.tsv:9001:"
  expect_contains "--skip-bad-lines"
  RUN_TIMEOUT=300 run "$pstrain" --standalone --data-dir "$PWD/data" "${ctr_flags[@]}" --train-steps 200 --skip-bad-lines
  expect_rc 0
  expect_contains "malformed lines skipped"
}

test_a_full_table_warns_and_training_goes_on() {
  datagen data 20000
  RUN_TIMEOUT=300 run "$pstrain" --standalone --data-dir "$PWD/data" "${ctr_flags[@]}" --train-steps 100 --max-table-rows 500
  expect_rc 0
  expect_contains "embedding table 'deep' is full on this PS (500 rows, --max-table-rows)"
  expect_contains '"test_auc"'
}

test_no_held_out_file_is_one_line() {
  datagen data 20000
  rm data/test.tsv
  run "$pstrain" --standalone --data-dir "$PWD/data" --train-steps 10
  expect_rc 1
  expect_contains "no test.tsv"
}
