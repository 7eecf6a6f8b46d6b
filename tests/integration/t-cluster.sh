# The local Slurm cluster (scripts/pstrain-cluster) and PMIx across nodes.

cluster=$PSTRAIN_SRCDIR/scripts/pstrain-cluster

test_one_task_per_virtual_node() {
  run srun -N3 -n3 -l bash -c 'echo "rank=$SLURM_PROCID node=$SLURMD_NODENAME"'
  expect_rc 0
  local nodes
  nodes=$(printf '%s\n' "$out" | sed -n 's/.*node=\(.*\)/\1/p' | sort -u | tr '\n' ' ')
  expect_eq "$nodes" "n1 n2 n3 " "nodes of the three ranks"
}

test_pmix_exchange_across_three_nodes() {
  run srun --mpi=pmix -N3 -n3 "$PSTRAIN_BUILDDIR/tests/tools/pmix_exchange"
  expect_rc 0
  for r in 0 1 2; do expect_contains "rank $r of 3 on n$((r + 1)): ok (3 values)"; done
}

test_start_twice_is_harmless() {
  local dir=${SLURM_CONF%/etc/slurm.conf}
  local before
  before=$(cat "$dir"/slurmctld.pid "$dir"/nodes/*/slurmd.pid | tr '\n' ' ')
  run "$cluster" start --dir "$dir" --port "$PSTRAIN_TEST_PORT" --gpus-per-node 2
  expect_rc 0
  expect_contains "already running"
  expect_contains "export SLURM_CONF=$SLURM_CONF"
  expect_eq "$(cat "$dir"/slurmctld.pid "$dir"/nodes/*/slurmd.pid | tr '\n' ' ')" "$before" "daemon pids"
  run srun -N3 -n3 true
  expect_rc 0
}

test_stop_leaves_no_daemon_behind() {
  local dir port
  dir=$(mktemp -d /tmp/pstrain-stoptest.XXXX)
  port=$((PSTRAIN_TEST_PORT + 50))
  run "$cluster" start --dir "$dir" --nodes 2 --port "$port"
  expect_rc 0
  local pids
  pids=$(cat "$dir"/munge/munged.pid "$dir"/slurmctld.pid "$dir"/nodes/*/slurmd.pid | tr '\n' ' ')
  [ "$(echo $pids | wc -w)" -eq 4 ] || fail "expected 4 daemon pids, got '$pids'"
  # A job still running when the cluster stops must go too.
  SLURM_CONF=$dir/etc/slurm.conf srun -N1 -n1 sleep 300 >/dev/null 2>&1 &
  for i in $(seq 1 40); do
    SLURM_CONF=$dir/etc/slurm.conf squeue -h -t R | grep -q . && break; sleep 0.5
  done
  run "$cluster" stop --dir "$dir"
  expect_rc 0
  sleep 0.5
  for p in $pids; do
    ! kill -0 "$p" 2>/dev/null || fail "daemon pid $p is still alive after stop"
  done
  if pgrep -f "sleep 300" >/dev/null; then
    local survivors=""
    for p in $(pgrep -f "sleep 300"); do
      tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qxF "SLURM_CONF=$dir/etc/slurm.conf" && survivors="$survivors $p"
    done
    [ -z "$survivors" ] || fail "job processes left after stop:$survivors"
  fi
  wait 2>/dev/null || true
  rm -rf "$dir"
}

test_bad_node_count_zero() {
  local dir
  dir=$(mktemp -d /tmp/pstrain-bad.XXXX)
  run "$cluster" start --nodes 0 --dir "$dir"
  expect_fail
  expect_eq "$out" "pstrain-cluster: --nodes '0' is not a node count: give a whole number from 1 to 64" "error line"
  [ ! -e "$dir/etc/slurm.conf" ] || fail "a cluster was configured anyway"
  rm -rf "$dir"
}

test_bad_node_count_text() {
  run "$cluster" start --nodes abc --dir /tmp/pstrain-bad-abc
  expect_fail
  expect_eq "$out" "pstrain-cluster: --nodes 'abc' is not a node count: give a whole number from 1 to 64" "error line"
  [ ! -e /tmp/pstrain-bad-abc ] || fail "the state directory was created anyway"
}

test_unwritable_state_dir() {
  local before
  before=$(pgrep -c -x munged || true)
  run "$cluster" start --dir /etc/hostname/cluster
  expect_fail
  expect_eq "$out" "pstrain-cluster: state directory /etc/hostname/cluster is not writable: choose another with --dir DIR" "error line"
  expect_eq "$(pgrep -c -x munged || true)" "$before" "number of munged processes"
}

test_busy_port_is_reported() {
  local dir
  dir=$(mktemp -d /tmp/pstrain-busy.XXXX)
  # The running test cluster holds its slurmctld port.
  run "$cluster" start --dir "$dir" --port "$PSTRAIN_TEST_PORT"
  expect_fail
  expect_contains "port $PSTRAIN_TEST_PORT is already in use: choose another first port with --port P"
  [ ! -e "$dir/munge/munged.pid" ] || fail "munged was started"
  rm -rf "$dir"
}

test_stale_state_dir_is_reported() {
  local dir
  dir=$(mktemp -d /tmp/pstrain-stale.XXXX)
  mkdir -p "$dir/etc" && echo "# old" >"$dir/etc/slurm.conf" && echo 999999 >"$dir/slurmctld.pid"
  run "$cluster" start --dir "$dir" --port $((PSTRAIN_TEST_PORT + 80))
  expect_fail
  expect_contains "stale state in $dir"
  expect_contains "pstrain-cluster stop --dir $dir"
  rm -rf "$dir"
}
