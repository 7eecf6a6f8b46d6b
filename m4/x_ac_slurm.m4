# X_AC_SLURM: Slurm's SPANK header (spank.h) and SLURM_VERSION_NUMBER >= 22.05.
# Publishes SLURM_CPPFLAGS and the plugin directory (--with-slurm-plugindir).
AC_DEFUN([X_AC_SLURM], [
  AC_ARG_WITH([slurm],
    [AS_HELP_STRING([--with-slurm=DIR], [Slurm installation prefix (headers in DIR/include)])],
    [], [with_slurm=check])
  SLURM_CPPFLAGS=
  AS_IF([test "x$with_slurm" != xcheck && test "x$with_slurm" != xyes],
        [SLURM_CPPFLAGS="-I$with_slurm/include"])
  x_ac_slurm_save_CPPFLAGS=$CPPFLAGS
  CPPFLAGS="$CPPFLAGS $SLURM_CPPFLAGS"
  AC_CHECK_HEADER([slurm/spank.h], [],
    [AC_MSG_ERROR([slurm/spank.h not found: install libslurm-dev or give --with-slurm=DIR])])
  AC_MSG_CHECKING([for Slurm >= 22.05])
  AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <slurm/slurm_version.h>]],
      [[#if SLURM_VERSION_NUMBER < SLURM_VERSION_NUM(22,5,0)
        #error too old
        #endif]])],
    [AC_MSG_RESULT([yes])],
    [AC_MSG_RESULT([no]); AC_MSG_ERROR([Slurm 22.05 or newer is required: install libslurm-dev >= 22.05 or give --with-slurm=DIR])])
  CPPFLAGS=$x_ac_slurm_save_CPPFLAGS

  AC_ARG_WITH([slurm-plugindir],
    [AS_HELP_STRING([--with-slurm-plugindir=DIR], [where spank_pstrain.so is installed @<:@LIBDIR/slurm@:>@])],
    [slurm_plugindir=$withval], [slurm_plugindir='${libdir}/slurm'])
  AC_SUBST([SLURM_CPPFLAGS])
  AC_SUBST([slurm_plugindir])
])
