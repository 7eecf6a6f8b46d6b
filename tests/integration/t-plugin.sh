# The SPANK plugin on the local cluster: roles, cluster spec, TF_CONFIG,
# GPU binding, and every bad input (each asserting its error line and that
# no node was drained).

ENV_PRINTER='echo "rank=$SLURM_PROCID node=$SLURMD_NODENAME role=$PSTRAIN_ROLE index=$PSTRAIN_TASK_INDEX cluster=$PSTRAIN_CLUSTER tf=$TF_CONFIG"'
check_env() { python3 "$PSTRAIN_SRCDIR/tests/integration/check_env.py" "$@"; }

expect_layout() {  # expect_layout NUM_PS NUM_WORKERS srun-args...
  local ps=$1 workers=$2; shift 2
  run srun "$@" --ps="$ps" --workers="$workers" bash -c "$ENV_PRINTER"
  expect_rc 0
  local verdict
  verdict=$(printf '%s\n' "$out" | check_env "$ps" "$workers") || fail "$verdict"
  echo "$verdict" >>"$TEST_LOG"
}

test_block_one_task_per_node() { expect_layout 1 2 -N3 -n3; }
test_cyclic_two_ps_four_workers() { expect_layout 2 4 -N3 -n6 -m cyclic; }
test_cyclic_two_per_node() { expect_layout 2 4 -N3 -n6 --ntasks-per-node=2 -m cyclic; }
test_uneven_tasks_per_node() { expect_layout 1 4 -N2 -n5; }
test_several_tasks_per_node_block() { expect_layout 2 2 -N2 --ntasks-per-node=2; }
test_no_task_count_is_sized_by_cli_filter() { expect_layout 1 3 -N2; }

test_sbatch_without_task_count() {
  cat >job.sh <<JOB
#!/bin/bash
echo "batch ps=\$PSTRAIN_NUM_PS workers=\$PSTRAIN_NUM_WORKERS ntasks=\$SLURM_NTASKS role=\${PSTRAIN_ROLE:-none}"
srun bash -c '$ENV_PRINTER'
JOB
  run sbatch --parsable --ps=1 --workers=2 -o "$PWD/job.out" job.sh
  expect_rc 0
  wait_job "$out" 120
  expect_eq "$job_state" COMPLETED "job state"
  out=$(cat job.out); echo "$out" >>"$TEST_LOG"
  expect_contains "batch ps=1 workers=2 ntasks=3 role=none"
  local verdict
  verdict=$(printf '%s\n' "$out" | check_env 1 2) || fail "$verdict"
}

# Inside a --ps/--workers batch job every srun inherits the options: a step
# that is not the training step (pstrain --join, a shell) is refused with
# the way out named, and --ps=0 --workers=0 makes it a step without roles.
test_a_step_of_a_pstrain_job_that_is_not_its_training_step() {
  cat >job.sh <<'JOB'
#!/bin/bash
srun --overlap -n1 -N1 true; echo "bare step: $?"
srun --overlap -n1 -N1 --ps=0 --workers=0 bash -c 'echo "step role=${PSTRAIN_ROLE:-none} tf=${TF_CONFIG:-none}"'
echo "step without roles: $?"
JOB
  run sbatch --parsable -N3 --ps=1 --workers=2 -o "$PWD/job.out" job.sh
  expect_rc 0
  wait_job "$out" 120
  expect_eq "$job_state" COMPLETED "job state"
  out=$(cat job.out); echo "$out" >>"$TEST_LOG"
  expect_contains "a step that is not the job's training step, such as pstrain --join, gives --ps=0 --workers=0"
  expect_contains "bare step: 1"
  expect_contains "step role=none tf=none"
  expect_contains "step without roles: 0"
}

test_without_options_the_environment_is_untouched() {
  run srun -N2 -n2 bash -c 'env | grep -E "^(PSTRAIN_(ROLE|TASK_INDEX|NUM_PS|NUM_WORKERS|CLUSTER)|TF_CONFIG)=" || echo "none set"; echo "cvd=${CUDA_VISIBLE_DEVICES-unset}"'
  expect_rc 0
  expect_eq "$(printf '%s\n' "$out" | grep -c 'none set')" 2 "tasks without PSTRAIN_*/TF_CONFIG"
  expect_eq "$(printf '%s\n' "$out" | grep -c 'cvd=unset')" 2 "tasks without CUDA_VISIBLE_DEVICES"
}

test_gpu_binding_one_node() {
  run srun -N1 -n3 --gres=gpu:2 --ps=1 --workers=2 -l bash -c 'echo "$PSTRAIN_ROLE $PSTRAIN_TASK_INDEX cvd=[$CUDA_VISIBLE_DEVICES]"'
  expect_rc 0
  expect_contains "0: ps 0 cvd=[]"
  expect_contains "1: worker 0 cvd=[0]"
  expect_contains "2: worker 1 cvd=[1]"
}

test_gpu_binding_two_nodes_cyclic() {
  run srun -N2 -n4 --ntasks-per-node=2 -m cyclic --gres=gpu:1 --ps=2 --workers=2 -l \
    bash -c 'echo "$PSTRAIN_ROLE $PSTRAIN_TASK_INDEX $SLURMD_NODENAME cvd=[$CUDA_VISIBLE_DEVICES]"'
  expect_rc 0
  expect_contains "0: ps 0 n1 cvd=[]"
  expect_contains "1: ps 1 n2 cvd=[]"
  expect_contains "2: worker 0 n1 cvd=[0]"
  expect_contains "3: worker 1 n2 cvd=[0]"
}

test_gpu_worker_without_gpu_is_warned() {
  run srun -N1 -n4 --gres=gpu:2 --ps=1 --workers=3 -l bash -c 'echo "$PSTRAIN_ROLE $PSTRAIN_TASK_INDEX cvd=[$CUDA_VISIBLE_DEVICES]"'
  expect_rc 0
  expect_contains "3: worker 2 cvd=[]"
  expect_contains "warning: worker 2 has no GPU left"
}

test_two_steps_at_once_get_different_ports() {
  srun -N1 -n2 --ps=1 --workers=1 bash -c 'echo "$PSTRAIN_CLUSTER"; sleep 3' >a.out 2>&1 &
  srun -N1 -n2 --ps=1 --workers=1 bash -c 'echo "$PSTRAIN_CLUSTER"; sleep 3' >b.out 2>&1 &
  wait
  local a b
  a=$(head -n 1 a.out) b=$(head -n 1 b.out)
  echo "step a: $a / step b: $b" >>"$TEST_LOG"
  [ -n "$a" ] && [ -n "$b" ] || fail "a step printed no cluster spec"
  [ "$a" != "$b" ] || fail "two steps on one node got the same addresses: $a"
}

# ------------------------------------------------------------- bad input
bad_srun() {  # bad_srun EXPECTED-LINE srun-args...
  local expected=$1; shift
  run srun -N1 "$@" true
  expect_fail
  expect_contains "$expected"
  expect_nodes_idle
}
bad_sbatch() {
  local expected=$1; shift
  run sbatch "$@" --wrap true
  expect_fail
  expect_contains "$expected"
  expect_not_contains "Submitted batch job"
  expect_nodes_idle
}

test_bad_ps_zero() { bad_srun "srun: error: pstrain: --ps=0 is not a valid number of parameter-server tasks: give a whole number from 1 to 4096, e.g. --ps=1" --ps=0 --workers=2; }
test_bad_ps_negative() { bad_srun "pstrain: --ps=-1 is not a valid number of parameter-server tasks" --ps=-1 --workers=2; }
test_bad_ps_text() { bad_srun "pstrain: --ps=abc is not a valid number of parameter-server tasks" --ps=abc --workers=2; }
test_bad_ps_empty() { bad_srun "pstrain: --ps= is empty: give the number of parameter-server tasks, e.g. --ps=1" --ps= --workers=2; }
test_bad_ps_without_workers() { bad_srun "pstrain: --ps=1 was given without --workers: give both, e.g. --ps=1 --workers=2" --ps=1; }
test_bad_workers_without_ps() { bad_srun "pstrain: --workers=2 was given without --ps: give both, e.g. --ps=1 --workers=2" --workers=2; }
test_bad_value_too_large() { bad_srun "pstrain: --workers=100000 is too large: at most 4096 worker tasks" --ps=1 --workers=100000; }
test_bad_task_count() { bad_srun "pstrain: --ps=1 --workers=2 needs 3 tasks, the " -n4 --ps=1 --workers=2; }
test_bad_sbatch_ps_zero() { bad_sbatch "pstrain: --ps=0 is not a valid number" --ps=0 --workers=2; }
test_bad_sbatch_without_workers() { bad_sbatch "pstrain: --ps=2 was given without --workers" --ps=2; }
test_bad_sbatch_task_count() { bad_sbatch "pstrain: --ps=1 --workers=2 needs 3 tasks, the job asks for 4: use -n 3" -n4 --ps=1 --workers=2; }

test_bad_ps_spares_text() { bad_srun "pstrain: --ps-spares=x is not a valid number of spare parameter-server tasks" --ps=1 --workers=2 --ps-spares=x; }
test_bad_sbatch_ps_spares_task_count() { bad_sbatch "pstrain: --ps=1 --workers=2 --ps-spares=1 needs 4 tasks, the job asks for 3: use -n 4" -n3 --ps=1 --workers=2 --ps-spares=1; }

# The cli_filter counts the spares; each task sees them, and pstrain-run,
# whose programs cannot use them, refuses them in one line.
test_ps_spares_are_counted_and_pstrain_run_refuses_them() {
  run srun -N3 --ps=1 --workers=2 --ps-spares=1 --mpi=none -l sh -c 'echo "$PSTRAIN_ROLE $PSTRAIN_TASK_INDEX of $PSTRAIN_NUM_PS ps, $PSTRAIN_PS_SPARES spare"'
  expect_rc 0
  local rank
  # The spare (ps 1) has the last rank: on the last node, away from ps 0.
  for rank in "0: ps 0" "1: worker 0" "2: worker 1" "3: ps 1"; do
    expect_contains "$rank of 2 ps, 1 spare"
  done
  run srun -N3 --ps=1 --workers=2 --ps-spares=1 --mpi=none "$PSTRAIN_BUILDDIR/launcher/pstrain-run" -- true
  expect_fail
  expect_contains "this step has 1 spare ps task(s) (--ps-spares=1), which only pstrain's own trainer uses"
  expect_nodes_idle
}

test_bad_plugstack_argument() {
  stack=${SLURM_CONF%/slurm.conf}/plugstack.conf
  cp "$stack" plugstack.saved
  trap 'cp plugstack.saved "$stack"' EXIT
  sed -i 's|spank_pstrain.so.*|& colour=blue|' "$stack"
  run srun -N1 -n2 --ps=1 --workers=1 true
  cp plugstack.saved "$stack"
  expect_fail
  expect_contains "pstrain: unknown plugstack.conf argument 'colour' for spank_pstrain.so: known keys are"
  expect_nodes_idle
}

test_make_install_gives_a_loadable_plugin() {
  local prefix=$PWD/prefix
  run make -C "$PSTRAIN_BUILDDIR" install prefix="$prefix"
  expect_rc 0
  [ -f "$prefix/lib/slurm/spank_pstrain.so" ] || fail "no $prefix/lib/slurm/spank_pstrain.so"
  [ ! -e "$prefix/lib/slurm/spank_pstrain.la" ] || fail "the libtool .la file was installed beside the plugin"
  local snippet=$prefix/share/pstrain/plugstack.conf.d/pstrain.conf
  [ -f "$snippet" ] || fail "no $snippet"
  grep -qx "required $prefix/lib/slurm/spank_pstrain.so" "$snippet" || fail "$snippet does not name the installed plugin"
  [ -f "$prefix/share/pstrain/cli_filter.lua" ] || fail "cli_filter.lua not installed"
  [ -f "$prefix/share/man/man8/spank-pstrain.8" ] || fail "spank-pstrain(8) not installed"
  [ -f "$prefix/share/man/man8/pstrain-admin.8" ] || fail "pstrain-admin(8), the admin guide, not installed"
  # Login nodes need nothing for it beyond Slurm and the C/C++ runtime.
  run ldd "$prefix/lib/slurm/spank_pstrain.so"
  expect_rc 0
  local lib
  for lib in $(printf '%s\n' "$out" | awk '{print $1}' | sed 's|.*/||'); do
    case $lib in
      linux-vdso.so.*|libc.so.*|libstdc++.so.*|libm.so.*|libgcc_s.so.*|ld-linux*|libslurm*) ;;
      *) fail "the installed spank_pstrain.so needs $lib: a login node without it refuses every job" ;;
    esac
  done
  # Slurm loads the installed snippet as it is.
  stack=${SLURM_CONF%/slurm.conf}/plugstack.conf
  cp "$stack" plugstack.saved
  trap 'cp plugstack.saved "$stack"' EXIT
  echo "include $prefix/share/pstrain/plugstack.conf.d/*.conf" >"$stack"
  run srun -N3 -n3 --ps=1 --workers=2 bash -c "$ENV_PRINTER"
  cp plugstack.saved "$stack"
  expect_rc 0
  local verdict
  verdict=$(printf '%s\n' "$out" | check_env 1 2) || fail "$verdict"
}
