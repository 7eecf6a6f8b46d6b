# X_AC_UCX: UCX >= 1.12 with ucp (pkg-config ucx, or --with-ucx=DIR).
AC_DEFUN([X_AC_UCX], [
  AC_ARG_WITH([ucx],
    [AS_HELP_STRING([--with-ucx=DIR], [UCX installation prefix])], [], [with_ucx=check])
  AS_IF([test "x$with_ucx" = xcheck || test "x$with_ucx" = xyes],
    [PKG_CHECK_MODULES([UCX], [ucx >= 1.12], [],
       [AC_MSG_ERROR([UCX >= 1.12 not found: install libucx-dev or give --with-ucx=DIR])])],
    [UCX_CFLAGS="-I$with_ucx/include"
     UCX_LIBS="-L$with_ucx/lib -Wl,-rpath,$with_ucx/lib -lucp -luct -lucs"])
  UCX_CPPFLAGS=$UCX_CFLAGS
  x_ac_ucx_save_CPPFLAGS=$CPPFLAGS; x_ac_ucx_save_LIBS=$LIBS
  CPPFLAGS="$CPPFLAGS $UCX_CPPFLAGS"; LIBS="$UCX_LIBS $LIBS"
  AC_CHECK_HEADER([ucp/api/ucp.h], [], [AC_MSG_ERROR([ucp/api/ucp.h not found: install libucx-dev or fix --with-ucx])])
  AC_MSG_CHECKING([for ucp_worker_arm in the UCX library])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <ucp/api/ucp.h>]], [[ucp_worker_arm(0);]])],
    [AC_MSG_RESULT([yes])], [AC_MSG_RESULT([no]); AC_MSG_ERROR([cannot link with UCX ucp ($UCX_LIBS)])])
  CPPFLAGS=$x_ac_ucx_save_CPPFLAGS; LIBS=$x_ac_ucx_save_LIBS
  AC_SUBST([UCX_CPPFLAGS])
  AC_SUBST([UCX_LIBS])
])
