"""The optional compiled parts of Pion: the vector-set graph kernel (``pion.vector.vset._kernel``)
and the request fast lane (``pion.server._fastlane``, compiled from ``pion/server/fastlane.py``
itself, so the pure module is its exact twin).

Everything else is in pyproject.toml. They are built from Cython when Cython and a C compiler
are there (pyproject's build requirements bring Cython into an isolated build); when either is
missing, or the compiler fails, the install goes on without them and the pure-Python code runs
instead (the server's log says which). ``PION_NO_EXT=1`` skips the build.
"""

from __future__ import annotations

import os
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

KERNEL = "pion.vector.vset._kernel"
SOURCE = "src/pion/vector/vset/_kernel.pyx"
LANE = "pion.server._fastlane"
LANE_SOURCE = "src/pion/server/fastlane.py"
# the kernel's distances must round as quant.py's numpy does: no fused multiply-add, no fast math
UNIX_FLAGS = ["-O3", "-ffp-contract=off", "-fno-fast-math", "-g0"]


def _warn(message: str) -> None:
    print(f"pion: {message}; the pure-Python code (vector-set graph, request fast lane) will run instead",
          file=sys.stderr)


class OptionalBuildExt(build_ext):
    """build_ext that turns a failed compile into a warning (the kernel is optional)."""

    def build_extension(self, ext: Extension) -> None:
        if self.compiler.compiler_type == "unix":
            ext.extra_compile_args = [*ext.extra_compile_args, *UNIX_FLAGS]
        elif self.compiler.compiler_type == "msvc":
            ext.extra_compile_args = [*ext.extra_compile_args, "/O2", "/fp:precise"]
        try:
            super().build_extension(ext)
        except Exception as exc:  # a missing or failing compiler: CCompilerError, DistutilsExecError, ...
            _warn(f"could not compile {ext.name} ({exc})")

    def run(self) -> None:
        try:
            super().run()
        except Exception as exc:  # no compiler at all (PlatformError, DistutilsPlatformError)
            _warn(f"could not build the compiled extensions ({exc})")


def extensions() -> list[Extension]:
    if os.environ.get("PION_NO_EXT"):
        return []
    try:
        from Cython.Build import cythonize
    except ImportError:
        _warn("Cython is not installed, so the compiled kernel is not built")
        return []
    return cythonize([Extension(KERNEL, [SOURCE]), Extension(LANE, [LANE_SOURCE])],
                     compiler_directives={"language_level": 3}, quiet=True)


setup(ext_modules=extensions(), cmdclass={"build_ext": OptionalBuildExt})
