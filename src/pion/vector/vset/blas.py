"""One BLAS thread per calling thread.

Vector-set searches make many small matrix-vector products. OpenBLAS splits any product above
a few thousand multiply-adds across all cores; on a busy 2-core machine those threads fight
the event loop, the worker pool and each other, and a 4096 x 384 product measured 13.5 ms
instead of 0.1 ms (32 x 384: several times slower). Pion gets its parallelism from its own
worker pool (one numpy job per core), so BLAS should not add threads of its own. This is
process-wide; a user who sets ``OPENBLAS_NUM_THREADS`` (or ``OMP_NUM_THREADS``) keeps that.
"""

from __future__ import annotations

import logging
import os

log = logging.getLogger("pion.vector")
_done = False


def use_one_blas_thread() -> bool:
    """Limit the process's BLAS to one thread (once); False if it could not be done."""
    global _done
    if _done:
        return True
    _done = True
    if os.environ.get("OPENBLAS_NUM_THREADS") or os.environ.get("OMP_NUM_THREADS"):
        return True
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl is a core dependency
        log.warning("threadpoolctl is missing: BLAS may use several threads per product")
        return False
    threadpool_limits(limits=1, user_api="blas")
    return True
