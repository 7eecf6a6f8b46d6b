# X_AC_BACKTRACE: libbacktrace, which GCC ships (libgcc-N-dev: backtrace.h
# and libbacktrace.a in its own directories), for Boost.Stacktrace to name
# functions and source lines in the stall watchdog's stacks.  Optional:
# without it Boost.Stacktrace names only exported functions (dladdr).
# Sets BACKTRACE_LIBS and HAVE_LIBBACKTRACE.
AC_DEFUN([X_AC_BACKTRACE], [
  AC_CHECK_HEADER([boost/stacktrace.hpp], [],
    [AC_MSG_ERROR([boost/stacktrace.hpp not found: install libboost-dev])])
  have_libbacktrace=no
  BACKTRACE_LIBS=
  AC_CHECK_HEADER([backtrace.h], [
    x_ac_save_LIBS=$LIBS
    AC_CHECK_LIB([backtrace], [backtrace_create_state], [
      have_libbacktrace=yes
      BACKTRACE_LIBS=-lbacktrace
      AC_DEFINE([HAVE_LIBBACKTRACE], [1], [Define to 1 when libbacktrace (GCC's) can name stack frames])])
    LIBS=$x_ac_save_LIBS])
  AC_SUBST([BACKTRACE_LIBS])
])
