# X_AC_BOOST_TEST: Boost.Test (unit test framework), needed by `make check` only.
AC_DEFUN([X_AC_BOOST_TEST], [
  AC_LANG_PUSH([C++])
  AC_CHECK_HEADER([boost/test/unit_test.hpp], [have_boost_test=yes], [have_boost_test=no])
  AS_IF([test "x$have_boost_test" = xyes], [
    x_ac_bt_save_LIBS=$LIBS; LIBS="-lboost_unit_test_framework $LIBS"
    AC_MSG_CHECKING([for the Boost.Test shared library])
    AC_LINK_IFELSE([AC_LANG_SOURCE([[
        #define BOOST_TEST_DYN_LINK
        #define BOOST_TEST_MODULE conftest
        #include <boost/test/unit_test.hpp>
        BOOST_AUTO_TEST_CASE(t) { BOOST_TEST(true); }]])],
      [AC_MSG_RESULT([yes]); BOOST_TEST_LIBS=-lboost_unit_test_framework],
      [AC_MSG_RESULT([no]); have_boost_test=no])
    LIBS=$x_ac_bt_save_LIBS])
  AC_LANG_POP([C++])
  AS_IF([test "x$have_boost_test" = xno],
    [AC_MSG_WARN([Boost.Test not found: `make check' will fail; install libboost-test-dev])])
  AC_SUBST([BOOST_TEST_LIBS])
  AM_CONDITIONAL([HAVE_BOOST_TEST], [test "x$have_boost_test" = xyes])
])
