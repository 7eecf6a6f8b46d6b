# The parameter-server library as users' programs use it: the example
# (examples/ps/logistic_regression.cpp) built with pkg-config against a
# `make install DESTDIR=...` of the build tree, nothing from the source tree,
# then run as a job step: srun --mpi=pmix --ps=N --workers=M.

export OMP_NUM_THREADS=1
lib_work=$PSTRAIN_BUILDDIR/test-results/library-example  # not the logs' directory: build_example empties it
destdir=$lib_work/destdir
example=$lib_work/logistic_regression
example_src=$PSTRAIN_SRCDIR/examples/ps/logistic_regression.cpp

# build_example: installs the build tree under $destdir and builds the
# example against it as its README says (pkg-config, the installed
# headers and library), with the installed library's path as its rpath.
build_example() {
  rm -rf "$lib_work"
  mkdir -p "$lib_work"
  RUN_TIMEOUT=600 run make -C "$PSTRAIN_BUILDDIR" install DESTDIR="$destdir"
  expect_rc 0
  local pc pcdir libdir includedir
  pc=$(find "$destdir" -path '*/pkgconfig/pstrain-ps.pc' | head -n 1)
  [ -n "$pc" ] || fail "make install did not install pstrain-ps.pc"
  pcdir=$(dirname "$pc")
  # The .pc names the configured prefix; under DESTDIR it is one level down.
  libdir=$destdir$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=libdir pstrain-ps)
  includedir=$destdir$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=includedir pstrain-ps)
  [ -f "$includedir/pstrain/ps.hpp" ] || fail "the .pc's includedir $includedir has no pstrain/ps.hpp"
  local flags
  flags=$(PKG_CONFIG_PATH=$pcdir pkg-config --define-variable=libdir="$libdir" --define-variable=includedir="$includedir" \
    --cflags --libs pstrain-ps)
  echo "pkg-config --cflags --libs pstrain-ps: $flags" >>"$TEST_LOG"
  # Headers and library from the installation only, not from the tree.
  local word
  for word in $flags; do
    case "$word" in -I"$destdir"/*|-L"$destdir"/*) ;; -I*|-L*) fail "pkg-config names $word, outside the installation" ;; esac
  done
  # shellcheck disable=SC2086  # the flags are words
  RUN_TIMEOUT=300 run ${CXX:-c++} -std=c++20 -O2 -pthread "$example_src" $flags -Wl,-rpath,"$libdir" -o "$example"
  expect_rc 0
  # It runs on the installed library, not on the build tree's.
  run ldd "$example"
  expect_contains "$libdir/libpstrain-ps.so"
}

# need_example: builds it unless this run already did (the first test
# does, always).
need_example() {
  [ -x "$example" ] && [ "$example" -nt "$PSTRAIN_BUILDDIR/.libs/libpstrain-ps.so" ] && [ "$example" -nt "$example_src" ] ||
    build_example
}

# expect_trained PS WORKERS MODE: the chief's done line says so, with the
# accuracy the example asks for.
expect_trained() {
  expect_rc 0
  local done
  done=$(last_json <<<"$out")
  [ -n "$done" ] || fail "no JSON line in the output"
  expect_eq "$(field "$done" event)" done "event"
  expect_eq "$(field "$done" steps)" 300 "steps"
  expect_eq "$(field "$done" ps)" "$1" "ps"
  expect_eq "$(field "$done" workers)" "$2" "workers"
  expect_eq "$(field "$done" mode)" "$3" "mode"
  echo "accuracy $(field "$done" accuracy)" >>"$TEST_LOG"
  expect_at_least "$(field "$done" accuracy)" 0.90 "test accuracy"
  # One done line: the chief's, not one per worker.
  expect_eq "$(grep -c '^{"event":"done"' <<<"$out")" 1 "done lines"
}

test_example_builds_against_installed_library() {
  build_example
  # The standalone run (installcheck's check) works from the installed copy too.
  run "$example" --standalone
  expect_trained 1 2 sync
}

test_example_sync_one_ps_two_workers() {
  need_example
  run srun --mpi=pmix -N3 -n3 --ps=1 --workers=2 "$example"
  expect_trained 1 2 sync
}

test_example_async_one_ps_two_workers() {
  need_example
  run srun --mpi=pmix -N3 -n3 --ps=1 --workers=2 "$example" --async
  expect_trained 1 2 async
}

# 21 parameters over two PS tasks: the flat vector (two tensors) split.
test_example_two_ps_two_workers() {
  need_example
  run srun --mpi=pmix -N3 -n4 --ps=2 --workers=2 "$example"
  expect_trained 2 2 sync
}

# Exit status 0 only at the threshold: an unreachable one fails the step,
# after the done line.
test_example_below_threshold_fails() {
  need_example
  run srun --mpi=pmix -N3 -n3 --ps=1 --workers=2 "$example" --min-accuracy 0.9999
  expect_fail
  expect_contains '{"event":"done","accuracy":'
  expect_contains "error: test accuracy 0."
  expect_contains "is below --min-accuracy 0.9999"
  expect_nodes_idle
}

test_example_without_a_job_says_how_to_run_it() {
  need_example
  run env -u SLURM_CONF -u TF_CONFIG "$example"
  expect_rc 2
  expect_contains "logistic_regression: error: no parameter-server job here: run it with srun --mpi=pmix --ps=N --workers=M"
}
