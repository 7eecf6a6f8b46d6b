# X_AC_DNNL: oneDNN (Debian's libdnnl-dev), the CPU convolution of layer
# models when present: measured faster than im2col + OpenBLAS sgemm
# (bench/README.md).  --without-dnnl builds the im2col path alone.
AC_DEFUN([X_AC_DNNL], [
  AC_ARG_WITH([dnnl],
    [AS_HELP_STRING([--without-dnnl], [do not use oneDNN for CPU convolution (default: use it when found)])],
    [], [with_dnnl=check])
  have_dnnl=no
  DNNL_LIBS=
  AS_IF([test "x$with_dnnl" != xno], [
    AC_LANG_PUSH([C++])
    AC_CHECK_HEADER([oneapi/dnnl/dnnl.hpp], [
      AC_CHECK_LIB([dnnl], [dnnl_engine_create], [have_dnnl=yes; DNNL_LIBS="-ldnnl -lgomp"])])
    AC_LANG_POP([C++])
    AS_IF([test "x$have_dnnl" = xno && test "x$with_dnnl" = xyes],
      [AC_MSG_ERROR([--with-dnnl: oneDNN not found: install libdnnl-dev])])
  ])
  AS_IF([test "x$have_dnnl" = xyes], [AC_DEFINE([HAVE_DNNL], [1], [oneDNN convolution])])
  AM_CONDITIONAL([HAVE_DNNL], [test "x$have_dnnl" = xyes])
  AC_SUBST([DNNL_LIBS])
])
