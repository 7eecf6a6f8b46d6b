# X_AC_CLI11: the header-only CLI11 command-line parser (pkg-config CLI11).
AC_DEFUN([X_AC_CLI11], [
  PKG_CHECK_MODULES([CLI11], [CLI11 >= 2], [CLI11_CPPFLAGS=$CLI11_CFLAGS], [CLI11_CPPFLAGS=])
  AC_LANG_PUSH([C++])
  x_ac_cli11_save_CPPFLAGS=$CPPFLAGS; CPPFLAGS="$CPPFLAGS $CLI11_CPPFLAGS"
  AC_CHECK_HEADER([CLI/CLI.hpp], [], [AC_MSG_ERROR([CLI/CLI.hpp not found: install libcli11-dev])])
  CPPFLAGS=$x_ac_cli11_save_CPPFLAGS
  AC_LANG_POP([C++])
  AC_SUBST([CLI11_CPPFLAGS])
])
