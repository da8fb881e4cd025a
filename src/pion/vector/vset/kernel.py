"""Which code runs a vector set's graph: the compiled kernel or the pure-Python reference.

``_kernel`` (Cython, built at install by setup.py when Cython and a C compiler are there) does
the distances, the layer walks and link selection in C over the same numpy arrays as the
reference (``quant``, ``walk``, ``build``), and gives the same bits: the same graph from the same
random levels, the same scores, the same stored form, so a set built by one path is searched,
extended or loaded by the other. Without the module, or with ``PION_PURE=1`` in the environment
at import, the reference runs. ``impl`` is the module the graph code calls (None: the
reference); tests switch it with ``use``. The server logs ``describe()`` once at start.
"""

from __future__ import annotations

import os
from types import ModuleType

_compiled: ModuleType | None
try:
    import pion.vector.vset._kernel as _compiled  # the extension module (no .py): it imports only numpy
except ImportError as exc:  # not built: no Cython or no compiler at install, or a source checkout
    _compiled = None
    _missing = str(exc)
else:
    _missing = ""

#: the environment switch that forces the pure-Python reference
PURE_ENV = "PION_PURE"


def _forced_pure() -> bool:
    return os.environ.get(PURE_ENV, "").strip().lower() not in ("", "0", "no", "false")


impl: ModuleType | None = None if _forced_pure() else _compiled


def available() -> bool:
    """True when the compiled kernel is built and importable."""
    return _compiled is not None


def use(compiled: bool) -> None:
    """Run the compiled kernel (True) or the reference (False) from now on; for tests and
    benchmarks comparing the two. Asking for the kernel where it is not built raises."""
    global impl
    if compiled and _compiled is None:
        raise RuntimeError(f"the compiled vector-set kernel is not built ({_missing})")
    impl = _compiled if compiled else None


def compiled() -> bool:
    return impl is not None


def describe() -> str:
    """One line for the server's log: which path runs and why."""
    if impl is not None:
        return "vector sets: compiled HNSW kernel (pion.vector.vset._kernel)"
    if _compiled is not None:
        return f"vector sets: pure-Python HNSW ({PURE_ENV}=1)"
    return "vector sets: pure-Python HNSW (the compiled kernel is not built: pip install with Cython and a C compiler)"
