"""Builds pstrain._core (pybind11) against the installed libpstrain-ps.

The compiler and linker flags come from ``pkg-config pstrain-ps``; the
extension records the library's directory as its run path, so it loads
without LD_LIBRARY_PATH.  Without a pstrain-ps entry the build stops with
one line saying how to fix it.
"""

import shlex
import shutil
import subprocess
import sys

from pybind11.setup_helpers import Pybind11Extension
from setuptools import setup


def pkg_config(*args):
    """pkg-config's answer for pstrain-ps, or one line on what to do and exit."""
    if shutil.which("pkg-config") is None:
        sys.exit("pstrain: pkg-config not found: install pkg-config (apt-get install pkg-config)")
    try:
        out = subprocess.run(["pkg-config", *args, "pstrain-ps"], check=True, capture_output=True, text=True).stdout
    except subprocess.CalledProcessError:
        sys.exit(
            "pstrain: pkg-config finds no pstrain-ps: install pstrain (./configure && make install) "
            "or set PKG_CONFIG_PATH to the directory of its pstrain-ps.pc (PREFIX/lib/pkgconfig)"
        )
    return shlex.split(out)


def flags():
    cflags, libs = pkg_config("--cflags"), pkg_config("--libs")
    libdirs = [f[2:] for f in libs if f.startswith("-L")]
    return dict(
        include_dirs=[f[2:] for f in cflags if f.startswith("-I")],
        extra_compile_args=[f for f in cflags if not f.startswith("-I")] + ["-fvisibility=hidden"],
        library_dirs=libdirs,
        libraries=[f[2:] for f in libs if f.startswith("-l")],
        extra_link_args=[f for f in libs if not f.startswith(("-L", "-l"))],
        runtime_library_dirs=libdirs,
    )


core = Pybind11Extension("pstrain._core", ["src/core.cpp", "src/bindings.cpp"], cxx_std=20, **flags())
setup(ext_modules=[core])
