# X_AC_PMIX: PMIx >= 4 (pkg-config pmix, or --with-pmix=DIR).
AC_DEFUN([X_AC_PMIX], [
  AC_ARG_WITH([pmix],
    [AS_HELP_STRING([--with-pmix=DIR], [PMIx installation prefix])], [], [with_pmix=check])
  AS_IF([test "x$with_pmix" = xcheck || test "x$with_pmix" = xyes],
    [PKG_CHECK_MODULES([PMIX], [pmix >= 4], [],
       [AC_MSG_ERROR([PMIx >= 4 not found: install libpmix-dev or give --with-pmix=DIR])])],
    [PMIX_CPPFLAGS="-I$with_pmix/include"
     PMIX_LIBS="-L$with_pmix/lib -Wl,-rpath,$with_pmix/lib -lpmix"])
  PMIX_CPPFLAGS="${PMIX_CPPFLAGS:-$PMIX_CFLAGS}"
  x_ac_pmix_save_CPPFLAGS=$CPPFLAGS; x_ac_pmix_save_LIBS=$LIBS
  CPPFLAGS="$CPPFLAGS $PMIX_CPPFLAGS"; LIBS="$PMIX_LIBS $LIBS"
  AC_CHECK_HEADER([pmix.h], [], [AC_MSG_ERROR([pmix.h not found: install libpmix-dev or fix --with-pmix])])
  AC_MSG_CHECKING([for PMIx_Init in the PMIx library])
  AC_LINK_IFELSE([AC_LANG_PROGRAM([[#include <pmix.h>]], [[PMIx_Init(0, 0, 0);]])],
    [AC_MSG_RESULT([yes])], [AC_MSG_RESULT([no]); AC_MSG_ERROR([cannot link with PMIx ($PMIX_LIBS)])])
  CPPFLAGS=$x_ac_pmix_save_CPPFLAGS; LIBS=$x_ac_pmix_save_LIBS
  AC_SUBST([PMIX_CPPFLAGS])
  AC_SUBST([PMIX_LIBS])
])
