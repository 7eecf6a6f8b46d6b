# X_AC_CRYPTO: OpenSSL's libcrypto, for the handshake that authenticates
# peers (HMAC-SHA256, RAND_bytes, CRYPTO_memcmp; pkg-config libcrypto).
AC_DEFUN([X_AC_CRYPTO], [
  PKG_CHECK_MODULES([CRYPTO], [libcrypto >= 1.1], [],
    [AC_MSG_ERROR([OpenSSL's libcrypto not found: install libssl-dev])])
  CRYPTO_CPPFLAGS=$CRYPTO_CFLAGS
  AC_SUBST([CRYPTO_CPPFLAGS])
])
