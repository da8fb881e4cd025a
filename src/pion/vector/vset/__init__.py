"""Redis 8 vector sets: one HNSW per key, Q8/BIN/NOQUANT encodings, FILTER expressions.

``VectorSet`` is the stored value; ``persist`` registers its type, codec and size with storage;
``expr`` compiles FILTER expressions. Engine code: it never imports the server.
"""

from pion.vector.vset import persist as _persist  # noqa: F401  (registers the value type)
from pion.vector.vset.expr import CompileError, Filter, compile_filter
from pion.vector.vset.vectorset import VectorSet

__all__ = ["CompileError", "Filter", "VectorSet", "compile_filter"]
