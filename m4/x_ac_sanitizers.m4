# X_AC_FUZZING_COMPILER: with --enable-fuzzing and no CC/CXX given, use
# clang (libFuzzer is clang's).  Must come before AC_PROG_CC/AC_PROG_CXX.
AC_DEFUN([X_AC_FUZZING_COMPILER], [
  AC_ARG_ENABLE([fuzzing],
    [AS_HELP_STRING([--enable-fuzzing],
      [build the libFuzzer targets in tests/fuzz/ (clang; implies --enable-sanitizers) @<:@default=no@:>@])],
    [], [enable_fuzzing=no])
  AS_IF([test "x$enable_fuzzing" = xyes], [
    : ${CC:=clang}
    : ${CXX:=clang++}
  ])
])

# X_AC_SANITIZERS: --enable-sanitizers builds every object and program with
# AddressSanitizer (LeakSanitizer included) and UndefinedBehaviorSanitizer;
# -fno-sanitize-recover=all makes a UBSan report abort the program, so a
# test with one fails.  --enable-fuzzing adds libFuzzer's coverage
# instrumentation (-fsanitize=fuzzer-no-link) and builds the fuzz targets,
# linked with -fsanitize=fuzzer.  Publishes SANITIZER_CXXFLAGS,
# SANITIZER_LDFLAGS (Makefile.am puts them in AM_CXXFLAGS/AM_LDFLAGS) and
# FUZZER_LDFLAGS, never touching the user's CXXFLAGS/LDFLAGS/LIBS.
# Also VECT_COST_CXXFLAGS: GCC's -fvect-cost-model=dynamic, which clang
# does not know.
AC_DEFUN([X_AC_SANITIZERS], [
  AC_REQUIRE([X_AC_FUZZING_COMPILER])
  AC_ARG_ENABLE([sanitizers],
    [AS_HELP_STRING([--enable-sanitizers],
      [build with AddressSanitizer and UndefinedBehaviorSanitizer @<:@default=no@:>@])],
    [], [enable_sanitizers=no])
  AS_IF([test "x$enable_fuzzing" = xyes], [enable_sanitizers=yes])

  x_ac_save_CXXFLAGS=$CXXFLAGS
  AC_MSG_CHECKING([whether $CXX accepts -fvect-cost-model=dynamic])
  CXXFLAGS="$x_ac_save_CXXFLAGS -Werror -fvect-cost-model=dynamic"
  AC_COMPILE_IFELSE([AC_LANG_PROGRAM([], [])],
    [AC_MSG_RESULT([yes]); VECT_COST_CXXFLAGS=-fvect-cost-model=dynamic],
    [AC_MSG_RESULT([no]); VECT_COST_CXXFLAGS=])
  CXXFLAGS=$x_ac_save_CXXFLAGS

  SANITIZER_CXXFLAGS= SANITIZER_LDFLAGS= FUZZER_LDFLAGS=
  AS_IF([test "x$enable_sanitizers" = xyes], [
    x_ac_san="-fsanitize=address,undefined -fno-sanitize-recover=all"
    SANITIZER_CXXFLAGS="$x_ac_san -fno-omit-frame-pointer -g"
    SANITIZER_LDFLAGS=$x_ac_san
    AS_IF([test "x$enable_fuzzing" = xyes],
      [SANITIZER_CXXFLAGS="$SANITIZER_CXXFLAGS -fsanitize=fuzzer-no-link"])
    x_ac_save_LDFLAGS=$LDFLAGS
    CXXFLAGS="$x_ac_save_CXXFLAGS $SANITIZER_CXXFLAGS"; LDFLAGS="$x_ac_save_LDFLAGS $SANITIZER_LDFLAGS"
    AC_MSG_CHECKING([whether $CXX builds with $SANITIZER_CXXFLAGS])
    AC_LINK_IFELSE([AC_LANG_PROGRAM([], [])], [AC_MSG_RESULT([yes])],
      [AC_MSG_RESULT([no])
       AC_MSG_ERROR([$CXX cannot build with AddressSanitizer and UBSan: install clang and libclang-rt-14-dev (scripts/pstrain-deps), or use g++])])
    CXXFLAGS=$x_ac_save_CXXFLAGS; LDFLAGS=$x_ac_save_LDFLAGS
  ])
  AS_IF([test "x$enable_fuzzing" = xyes], [
    FUZZER_LDFLAGS=-fsanitize=fuzzer
    x_ac_save_LDFLAGS=$LDFLAGS
    CXXFLAGS="$x_ac_save_CXXFLAGS $SANITIZER_CXXFLAGS"; LDFLAGS="$x_ac_save_LDFLAGS $SANITIZER_LDFLAGS $FUZZER_LDFLAGS"
    AC_MSG_CHECKING([whether $CXX links a libFuzzer target])
    AC_LINK_IFELSE([AC_LANG_SOURCE([[
#include <cstddef>
#include <cstdint>
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t*, std::size_t) { return 0; }
]])], [AC_MSG_RESULT([yes])],
      [AC_MSG_RESULT([no])
       AC_MSG_ERROR([--enable-fuzzing needs clang with libFuzzer: install clang and libclang-rt-14-dev (scripts/pstrain-deps) and leave CXX unset or set it to clang++])])
    CXXFLAGS=$x_ac_save_CXXFLAGS; LDFLAGS=$x_ac_save_LDFLAGS
  ])
  AC_SUBST([VECT_COST_CXXFLAGS])
  AC_SUBST([SANITIZER_CXXFLAGS])
  AC_SUBST([SANITIZER_LDFLAGS])
  AC_SUBST([FUZZER_LDFLAGS])
  AM_CONDITIONAL([ENABLE_FUZZING], [test "x$enable_fuzzing" = xyes])
])
