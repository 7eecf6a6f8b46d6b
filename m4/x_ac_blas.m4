# X_AC_BLAS: a CBLAS (OpenBLAS by pkg-config openblas, else -lopenblas / -lcblas / -lblas).
AC_DEFUN([X_AC_BLAS], [
  AC_ARG_WITH([blas],
    [AS_HELP_STRING([--with-blas=LIBS], [link flags of a CBLAS library @<:@openblas@:>@])],
    [], [with_blas=check])
  BLAS_CPPFLAGS=; BLAS_LIBS=
  AS_IF([test "x$with_blas" != xcheck && test "x$with_blas" != xyes],
    [BLAS_LIBS=$with_blas],
    [PKG_CHECK_MODULES([OPENBLAS], [openblas],
       [BLAS_CPPFLAGS=$OPENBLAS_CFLAGS; BLAS_LIBS=$OPENBLAS_LIBS], [BLAS_LIBS=-lopenblas])])
  x_ac_blas_save_CPPFLAGS=$CPPFLAGS; x_ac_blas_save_LIBS=$LIBS
  CPPFLAGS="$CPPFLAGS $BLAS_CPPFLAGS"; LIBS="$BLAS_LIBS $LIBS"
  AC_CHECK_HEADER([cblas.h], [], [AC_MSG_ERROR([cblas.h not found: install libopenblas-dev or give --with-blas])])
  AC_MSG_CHECKING([for cblas_sgemm in $BLAS_LIBS])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <cblas.h>]],
      [[cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, 1, 1, 1, 1.f, 0, 1, 0, 1, 0.f, 0, 1);]])],
    [AC_MSG_RESULT([yes])], [AC_MSG_RESULT([no]); AC_MSG_ERROR([cannot link cblas_sgemm: install libopenblas-dev or give --with-blas=LIBS])])
  CPPFLAGS=$x_ac_blas_save_CPPFLAGS; LIBS=$x_ac_blas_save_LIBS
  AC_SUBST([BLAS_CPPFLAGS])
  AC_SUBST([BLAS_LIBS])
])
