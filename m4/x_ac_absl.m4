# X_AC_ABSL: Abseil's flat_hash_map (Swiss tables), the embedding tables'
# key-to-row index on the PS (pkg-config absl_flat_hash_map).
AC_DEFUN([X_AC_ABSL], [
  PKG_CHECK_MODULES([ABSL], [absl_flat_hash_map], [],
    [AC_MSG_ERROR([Abseil's flat_hash_map not found: install libabsl-dev])])
  ABSL_CPPFLAGS=$ABSL_CFLAGS
  AC_SUBST([ABSL_CPPFLAGS])
])
