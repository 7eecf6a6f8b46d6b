# X_AC_PROTOBUF: libprotobuf-lite and protoc, for TensorBoard's event files.
AC_DEFUN([X_AC_PROTOBUF], [
  PKG_CHECK_MODULES([PROTOBUF], [protobuf-lite >= 3.12], [],
    [AC_MSG_ERROR([protobuf-lite >= 3.12 not found: install libprotobuf-dev])])
  PROTOBUF_CPPFLAGS=$PROTOBUF_CFLAGS
  AC_SUBST([PROTOBUF_CPPFLAGS])
  AC_ARG_VAR([PROTOC], [the protocol buffer compiler])
  AC_PATH_PROG([PROTOC], [protoc])
  AS_IF([test -z "$PROTOC"], [AC_MSG_ERROR([protoc not found: install protobuf-compiler])])
  AC_MSG_CHECKING([whether $PROTOC matches libprotobuf])
  protoc_version=`$PROTOC --version 2>/dev/null | sed -e 's/^libprotoc //'`
  lib_version=`$PKG_CONFIG --modversion protobuf-lite`
  AS_IF([test "$protoc_version" = "$lib_version"], [AC_MSG_RESULT([yes ($protoc_version)])],
    [AC_MSG_RESULT([no])
     AC_MSG_ERROR([protoc $protoc_version and libprotobuf $lib_version differ: install the protobuf-compiler that goes with libprotobuf-dev])])
])

# X_AC_BOOST_CRC: Boost.CRC (headers only), for TFRecord's CRC-32C.
AC_DEFUN([X_AC_BOOST_CRC], [
  AC_LANG_PUSH([C++])
  AC_CHECK_HEADER([boost/crc.hpp], [], [AC_MSG_ERROR([boost/crc.hpp not found: install libboost-dev])])
  AC_LANG_POP([C++])
])
