# X_AC_PYTHON: --enable-python (default: no) builds the pstrain Python
# package's extension, pstrain/_core, as a libtool module against this
# tree's libpstrain-ps, and installs the package into $(pythondir)/pstrain
# (the extension into $(pyexecdir)/pstrain).  It needs the Python headers
# (python3-dev) and pybind11's (pybind11-dev); when asked for and missing,
# configure fails naming the Debian packages.  Publishes PYTHON_CPPFLAGS,
# PYTHON_EXT_SUFFIX and the conditional ENABLE_PYTHON.
AC_DEFUN([X_AC_PYTHON], [
  AC_ARG_ENABLE([python],
    [AS_HELP_STRING([--enable-python], [build and install the pstrain Python package (needs python3-dev, pybind11-dev) @<:@no@:>@])],
    [], [enable_python=no])
  AS_IF([test "x$enable_python" = xyes], [
    AM_PATH_PYTHON([3.9])
    AC_MSG_CHECKING([for the Python headers])
    PYTHON_INCLUDE=`$PYTHON -c 'import sysconfig; print(sysconfig.get_paths()[["include"]])' 2>/dev/null`
    PYTHON_EXT_SUFFIX=`$PYTHON -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))' 2>/dev/null`
    AS_IF([test -n "$PYTHON_INCLUDE" && test -f "$PYTHON_INCLUDE/Python.h"],
      [AC_MSG_RESULT([$PYTHON_INCLUDE])],
      [AC_MSG_RESULT([no])
       AC_MSG_ERROR([--enable-python: Python.h not found for $PYTHON: install python3-dev (scripts/pstrain-deps does), or set PYTHON to a python3 with its headers])])
    PYTHON_CPPFLAGS="-I$PYTHON_INCLUDE"
    AC_LANG_PUSH([C++])
    save_CPPFLAGS=$CPPFLAGS
    CPPFLAGS="$CPPFLAGS $PYTHON_CPPFLAGS"
    AC_CHECK_HEADER([pybind11/pybind11.h], [],
      [AC_MSG_ERROR([--enable-python: pybind11/pybind11.h not found: install pybind11-dev (scripts/pstrain-deps does)])])
    CPPFLAGS=$save_CPPFLAGS
    AC_LANG_POP([C++])
  ])
  AC_SUBST([PYTHON_CPPFLAGS])
  AC_SUBST([PYTHON_EXT_SUFFIX])
  AM_CONDITIONAL([ENABLE_PYTHON], [test "x$enable_python" = xyes])
])
