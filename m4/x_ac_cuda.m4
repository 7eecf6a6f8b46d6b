# X_AC_CUDA: optional CUDA toolkit (nvcc, cudart, cuBLAS); tri-state --with-cuda.
#   default (check): found -> build the CUDA backend; not found -> CPU only.
#   --with-cuda[=DIR]: required; configure fails when it is not usable.
#   --without-cuda: never.
# Within it, cuDNN (layer models on GPUs), tri-state --with-cudnn the same
# way: found beside the toolkit (or on the system paths) -> HAVE_CUDNN and
# -lcudnn in CUDA_LIBS.
# Publishes NVCC, CUDA_CPPFLAGS, CUDA_LIBS, NVCC_ARCH_FLAGS, HAVE_CUDA and HAVE_CUDNN.
AC_DEFUN([X_AC_CUDA], [
  AC_ARG_WITH([cuda],
    [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@], [build the CUDA/cuBLAS backend @<:@check /usr/local/cuda@:>@])],
    [], [with_cuda=check])
  AC_ARG_WITH([cudnn],
    [AS_HELP_STRING([--with-cudnn], [build cuDNN's layers into the CUDA backend @<:@check@:>@])],
    [], [with_cudnn=check])
  AC_ARG_VAR([CUDA_ARCHS], [GPU architectures for nvcc, space separated @<:@80 90@:>@])
  have_cuda=no
  AS_CASE([$with_cuda],
    [no], [],
    [yes|check], [cuda_home=${CUDA_HOME:-/usr/local/cuda}],
    [cuda_home=$with_cuda])
  AS_IF([test "x$with_cuda" != xno], [
    AC_PATH_PROG([NVCC], [nvcc], [no], [$cuda_home/bin$PATH_SEPARATOR$PATH])
    AS_IF([test "x$NVCC" != xno], [
      CUDA_CPPFLAGS="-I$cuda_home/include"
      cuda_libdir=$cuda_home/lib64
      AS_IF([test -d "$cuda_home/targets/x86_64-linux/lib" && test ! -e "$cuda_libdir/libcublas.so"],
            [cuda_libdir=$cuda_home/targets/x86_64-linux/lib])
      CUDA_LIBS="-L$cuda_libdir -Wl,-rpath,$cuda_libdir -lcublas -lcudart"
      x_ac_cuda_save_CPPFLAGS=$CPPFLAGS; x_ac_cuda_save_LIBS=$LIBS
      CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS"; LIBS="$CUDA_LIBS $LIBS"
      AC_MSG_CHECKING([for cudart and cuBLAS in $cuda_libdir])
      AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <cuda_runtime_api.h>
#include <cublas_v2.h>]], [[int n; cudaGetDeviceCount(&n); cublasHandle_t h; cublasCreate(&h);]])],
        [AC_MSG_RESULT([yes]); have_cuda=yes], [AC_MSG_RESULT([no])])
      CPPFLAGS=$x_ac_cuda_save_CPPFLAGS; LIBS=$x_ac_cuda_save_LIBS])
    AS_IF([test "x$have_cuda" = xno && test "x$with_cuda" != xcheck],
      [AC_MSG_ERROR([--with-cuda was given but no usable CUDA toolkit (nvcc, cudart, cuBLAS) is in ${cuda_home}: install it or give --with-cuda=DIR])])
  ])
  have_cudnn=no
  AS_IF([test "x$have_cuda" = xyes && test "x$with_cudnn" != xno], [
    x_ac_cuda_save_CPPFLAGS=$CPPFLAGS; x_ac_cuda_save_LIBS=$LIBS
    CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS"; LIBS="$CUDA_LIBS -lcudnn $LIBS"
    AC_MSG_CHECKING([for cuDNN])
    AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <cudnn.h>]], [[cudnnHandle_t h; cudnnCreate(&h);]])],
      [AC_MSG_RESULT([yes]); have_cudnn=yes; CUDA_LIBS="$CUDA_LIBS -lcudnn"], [AC_MSG_RESULT([no])])
    CPPFLAGS=$x_ac_cuda_save_CPPFLAGS; LIBS=$x_ac_cuda_save_LIBS])
  AS_IF([test "x$have_cudnn" = xno && test "x$with_cudnn" = xyes],
    [AC_MSG_ERROR([--with-cudnn was given but cuDNN (cudnn.h, libcudnn) is not usable with the CUDA toolkit in ${cuda_home:-the default place}: install it there, or configure --without-cudnn])])
  AS_IF([test "x$have_cudnn" = xyes], [AC_DEFINE([HAVE_CUDNN], [1], [Build cuDNN's layers into the CUDA backend])])
  AM_CONDITIONAL([HAVE_CUDNN], [test "x$have_cudnn" = xyes])
  NVCC_ARCH_FLAGS=
  for a in ${CUDA_ARCHS:-80 90}; do NVCC_ARCH_FLAGS="$NVCC_ARCH_FLAGS -gencode=arch=compute_$a,code=sm_$a"; done
  AS_IF([test "x$have_cuda" = xyes], [AC_DEFINE([HAVE_CUDA], [1], [Build the CUDA/cuBLAS backend])],
        [CUDA_CPPFLAGS=; CUDA_LIBS=; NVCC=])
  AC_SUBST([CUDA_CPPFLAGS])
  AC_SUBST([CUDA_LIBS])
  AC_SUBST([NVCC_ARCH_FLAGS])
  AM_CONDITIONAL([HAVE_CUDA], [test "x$have_cuda" = xyes])
])
