# X_AC_ZLIB: zlib, for .gz data files and checkpoint checksums (pkg-config zlib).
AC_DEFUN([X_AC_ZLIB], [
  PKG_CHECK_MODULES([ZLIB], [zlib], [],
    [AC_MSG_ERROR([zlib not found: install zlib1g-dev])])
  ZLIB_CPPFLAGS=$ZLIB_CFLAGS
  AC_SUBST([ZLIB_CPPFLAGS])
])
