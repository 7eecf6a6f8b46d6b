# X_AC_NLOHMANN_JSON: the header-only nlohmann/json (pkg-config nlohmann_json).
AC_DEFUN([X_AC_NLOHMANN_JSON], [
  PKG_CHECK_MODULES([JSON], [nlohmann_json >= 3.9], [JSON_CPPFLAGS=$JSON_CFLAGS],
    [JSON_CPPFLAGS=])
  AC_LANG_PUSH([C++])
  x_ac_json_save_CPPFLAGS=$CPPFLAGS; CPPFLAGS="$CPPFLAGS $JSON_CPPFLAGS"
  AC_CHECK_HEADER([nlohmann/json.hpp], [], [AC_MSG_ERROR([nlohmann/json.hpp not found: install nlohmann-json3-dev])])
  CPPFLAGS=$x_ac_json_save_CPPFLAGS
  AC_LANG_POP([C++])
  AC_SUBST([JSON_CPPFLAGS])
])
