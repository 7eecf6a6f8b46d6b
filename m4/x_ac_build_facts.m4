# X_AC_BUILD_FACTS: what `pstrain --version` says this build has, and what
# the packages record: the versions of Slurm, UCX, PMIx, oneDNN, CUDA and
# cuDNN this build was compiled against, read from their headers with
# AC_COMPUTE_INT (no program runs, so a cross build works too), after the
# X_AC_<dep> macros found them.  Defines PSTRAIN_BUILT_WITH_<DEP> strings in
# config.h ("" for a part this build leaves out) and substitutes
# SLURM_VERSION (22.05.8) and SLURM_SERIES (22.05), for the packages'
# dependency on the Slurm the plugin was built against.

# x_ac_header_version(VAR, CPPFLAGS, INCLUDES, MAJOR, MINOR, [PATCH])
# sets VAR to MAJOR.MINOR[.PATCH] as the headers define them, or to "".
AC_DEFUN([x_ac_header_version], [
  x_ac_bf_save_CPPFLAGS=$CPPFLAGS; CPPFLAGS="$CPPFLAGS $2"
  $1=
  AC_COMPUTE_INT([x_ac_bf_major], [$4], [$3], [x_ac_bf_major=])
  AC_COMPUTE_INT([x_ac_bf_minor], [$5], [$3], [x_ac_bf_minor=])
  m4_ifval([$6], [AC_COMPUTE_INT([x_ac_bf_patch], [$6], [$3], [x_ac_bf_patch=])], [x_ac_bf_patch=])
  AS_IF([test -n "$x_ac_bf_major" && test -n "$x_ac_bf_minor"],
    [$1="$x_ac_bf_major.$x_ac_bf_minor${x_ac_bf_patch:+.$x_ac_bf_patch}"])
  CPPFLAGS=$x_ac_bf_save_CPPFLAGS
])

AC_DEFUN([X_AC_BUILD_FACTS], [
  AC_MSG_CHECKING([the versions this build is compiled against])
  # Slurm's minor is two digits: 22.05, not 22.5.
  x_ac_header_version([x_ac_bf_slurm], [$SLURM_CPPFLAGS], [[#include <slurm/slurm_version.h>]],
    [SLURM_VERSION_MAJOR(SLURM_VERSION_NUMBER)], [SLURM_VERSION_MINOR(SLURM_VERSION_NUMBER)],
    [SLURM_VERSION_MICRO(SLURM_VERSION_NUMBER)])
  SLURM_VERSION=`echo "$x_ac_bf_slurm" | $AWK -F. 'NF == 3 { printf "%d.%02d.%d", $[]1, $[]2, $[]3 }'`
  SLURM_SERIES=${SLURM_VERSION%.*}
  AS_IF([test -z "$SLURM_VERSION"],
    [AC_MSG_ERROR([cannot read SLURM_VERSION_NUMBER from slurm/slurm_version.h: install libslurm-dev or fix --with-slurm])])
  # UCX's headers say major.minor; its pkg-config file says the release.
  x_ac_bf_ucx=`$PKG_CONFIG --modversion ucx 2>/dev/null`
  AS_IF([test -z "$x_ac_bf_ucx"],
    [x_ac_header_version([x_ac_bf_ucx], [$UCX_CPPFLAGS], [[#include <ucp/api/ucp_version.h>]],
       [UCP_API_MAJOR], [UCP_API_MINOR])])
  x_ac_header_version([x_ac_bf_pmix], [$PMIX_CPPFLAGS], [[#include <pmix_version.h>]],
    [PMIX_VERSION_MAJOR], [PMIX_VERSION_MINOR], [PMIX_VERSION_RELEASE])
  x_ac_bf_dnnl=
  AS_IF([test "x$have_dnnl" = xyes],
    [x_ac_header_version([x_ac_bf_dnnl], [], [[#include <oneapi/dnnl/dnnl_version.h>]],
       [DNNL_VERSION_MAJOR], [DNNL_VERSION_MINOR], [DNNL_VERSION_PATCH])])
  x_ac_bf_cuda= x_ac_bf_cudnn=
  AS_IF([test "x$have_cuda" = xyes],
    [x_ac_header_version([x_ac_bf_cuda], [$CUDA_CPPFLAGS], [[#include <cuda_runtime_api.h>]],
       [CUDART_VERSION / 1000], [CUDART_VERSION % 1000 / 10])])
  AS_IF([test "x$have_cudnn" = xyes],
    [x_ac_header_version([x_ac_bf_cudnn], [$CUDA_CPPFLAGS], [[#include <cudnn.h>]],
       [CUDNN_MAJOR], [CUDNN_MINOR], [CUDNN_PATCHLEVEL])])
  AC_MSG_RESULT([Slurm $SLURM_VERSION, UCX $x_ac_bf_ucx, PMIx $x_ac_bf_pmix${x_ac_bf_dnnl:+, oneDNN $x_ac_bf_dnnl}${x_ac_bf_cuda:+, CUDA $x_ac_bf_cuda}${x_ac_bf_cudnn:+, cuDNN $x_ac_bf_cudnn}])
  AC_DEFINE_UNQUOTED([PSTRAIN_BUILT_WITH_SLURM], ["$SLURM_VERSION"], [Slurm the SPANK plugin is built against])
  AC_DEFINE_UNQUOTED([PSTRAIN_BUILT_WITH_UCX], ["$x_ac_bf_ucx"], [UCX this build is compiled against])
  AC_DEFINE_UNQUOTED([PSTRAIN_BUILT_WITH_PMIX], ["$x_ac_bf_pmix"], [PMIx this build is compiled against])
  AC_DEFINE_UNQUOTED([PSTRAIN_BUILT_WITH_DNNL], ["$x_ac_bf_dnnl"], [oneDNN this build is compiled against, or empty])
  AC_DEFINE_UNQUOTED([PSTRAIN_BUILT_WITH_CUDA], ["$x_ac_bf_cuda"], [CUDA runtime of the CUDA module, or empty])
  AC_DEFINE_UNQUOTED([PSTRAIN_BUILT_WITH_CUDNN], ["$x_ac_bf_cudnn"], [cuDNN of the CUDA module, or empty])
  AC_SUBST([SLURM_VERSION])
  AC_SUBST([SLURM_SERIES])
])
