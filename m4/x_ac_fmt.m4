# X_AC_FMT: the {fmt} formatting library (pkg-config fmt).
AC_DEFUN([X_AC_FMT], [
  PKG_CHECK_MODULES([FMT], [fmt >= 7], [],
    [AC_MSG_ERROR([fmt >= 7 not found: install libfmt-dev])])
  FMT_CPPFLAGS=$FMT_CFLAGS
  AC_SUBST([FMT_CPPFLAGS])
])
