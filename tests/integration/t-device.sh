# Choosing the device: the CUDA backend is a module (pstrain-cuda.so) that
# pstrain loads only when a GPU is wanted, so the installed pstrain runs on
# nodes without the CUDA libraries; --device auto without a GPU says so once,
# calmly, from the chief.

built_with_cuda() { grep -q 'HAVE_CUDA 1' "$PSTRAIN_BUILDDIR/config.h"; }
have_gpu() { nvidia-smi -L >/dev/null 2>&1; }
calm_line='training on the CPU (--device auto: no GPU visible)'

# install_prefix: `make install` into ./prefix, as an admin would (prefix=).
install_prefix() {
  prefix=$PWD/prefix
  RUN_TIMEOUT=900 run make -C "$PSTRAIN_BUILDDIR" install prefix="$prefix"
  expect_rc 0
  installed=$prefix/bin/pstrain
  [ -x "$installed" ] || fail "make install put no pstrain in $prefix/bin"
}

# without_cuda CMD...: CMD in a mount namespace where the CUDA toolkit's
# directory is an empty tmpfs (a CPU-only node without the CUDA libraries).
without_cuda() {
  local cuda
  cuda=$(readlink -f /usr/local/cuda)
  run unshare -m sh -c 'mount -t tmpfs -o size=1m pstrain-no-cuda "$1" && shift && exec "$@"' sh "$cuda" "$@"
}

test_pstrain_links_no_cuda_library() {
  run ldd "$pstrain"
  expect_rc 0
  expect_not_contains "libcu"
  expect_not_contains "not found"
  if built_with_cuda; then
    local module=$PSTRAIN_BUILDDIR/trainer/.libs/pstrain-cuda.so
    [ -f "$module" ] || fail "HAVE_CUDA is set but the CUDA module $module was not built"
    run readelf -d "$module"
    expect_contains "libcudart"
    expect_contains "libcublas"
  fi
}

test_installed_pstrain_runs_without_cuda_libraries() {
  install_prefix
  run ldd "$installed"
  expect_not_contains "libcu"
  if ! built_with_cuda; then
    run "$installed" --standalone --model linear --train-steps 20
    expect_rc 0
    expect_contains '"event":"done"'
    skip "this build has no CUDA backend: nothing to hide"
  fi
  local module=$prefix/lib/pstrain/pstrain-cuda.so
  [ -f "$module" ] || fail "make install put no CUDA module at $module"
  # With the toolkit in place the installed pstrain finds its own module:
  # on a GPU it trains there, otherwise the module's own error names the device.
  run "$installed" --standalone --model linear --train-steps 20 --device cuda
  if have_gpu; then expect_rc 0; expect_contains "device: cuda ("; else expect_fail; expect_contains "no CUDA device visible"; fi
  [ "$(id -u)" = 0 ] || skip "hiding the CUDA libraries needs root (unshare -m and a tmpfs mount)"
  unshare -m true 2>/dev/null || skip "unshare -m is not allowed here: cannot hide the CUDA libraries"

  without_cuda "$installed" --standalone --model linear --train-steps 20
  expect_rc 0
  expect_contains '"event":"done"'
  expect_contains "$calm_line"
  expect_not_contains "insufficient"

  without_cuda "$installed" --standalone --model linear --train-steps 20 --device cuda
  expect_fail
  expect_eq "$(printf '%s\n' "$out" | wc -l)" 1 "lines of output"
  expect_contains "pstrain[standalone]: error: --device cuda: cannot load the CUDA module $module: libcu"
  expect_contains "cannot open shared object file"
  expect_contains "install the CUDA runtime, cuBLAS and cuDNN on this node"
  expect_contains "or use --device cpu"

  # A missing module is one line too, naming the variable that points at it.
  run env PSTRAIN_CUDA_MODULE="$PWD/nowhere/pstrain-cuda.so" "$installed" --standalone --model linear --device cuda
  expect_fail
  expect_eq "$out" "pstrain[standalone]: error: --device cuda: the CUDA module PSTRAIN_CUDA_MODULE=$PWD/nowhere/pstrain-cuda.so does not exist: point PSTRAIN_CUDA_MODULE at pstrain-cuda.so, or unset it, or use --device cpu" "error line"
}

# 1 PS + 2 workers, --device auto, no GPU: one calm line in the whole job,
# from the chief; the driver's words only at debug level.
test_device_auto_without_gpu_says_it_once() {
  have_gpu && skip "a GPU is visible: --device auto trains on it"
  RUN_TIMEOUT=300 run srun -N3 -n3 --ps=1 --workers=2 --mpi=pmix "$pstrain" --model linear --train-steps 50 --device auto
  expect_rc 0
  expect_contains '"event":"done"'
  expect_eq "$(printf '%s\n' "$out" | grep -cF "$calm_line")" 1 "lines saying it trains on the CPU"
  expect_contains "pstrain[worker 0]: $calm_line"
  expect_not_contains "insufficient"
  expect_not_contains "no CUDA device visible"
  expect_not_contains "warn"

  RUN_TIMEOUT=300 run srun -N3 -n3 --ps=1 --workers=2 --mpi=pmix "$pstrain" --model linear --train-steps 50 --device auto --log-level debug
  expect_rc 0
  built_with_cuda && expect_contains "--device auto: "
  expect_eq "$(printf '%s\n' "$out" | grep -cF "$calm_line")" 1 "lines saying it trains on the CPU (debug)"
}
