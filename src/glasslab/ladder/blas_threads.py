"""Run small scipy optimisations with one BLAS thread.

L-BFGS on five parameters calls BLAS/LAPACK on tiny matrices; OpenBLAS still wakes its thread pool
for them, and on a busy 2-core machine that made an approach-3 fit 40x slower (20 ms → 0.8 s per
L-BFGS run, measured). OpenBLAS's ``openblas_set_num_threads_local`` limits only the calling thread
and returns the previous value, so the limit is scoped and restored; where scipy is not built on
OpenBLAS the context manager does nothing.
"""

from __future__ import annotations

import ctypes
import functools
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@functools.cache
def _set_threads_local():
    import scipy

    for lib in sorted((Path(scipy.__file__).parent.parent / "scipy.libs").glob("libscipy_openblas*.so*")):
        try:
            fn = ctypes.CDLL(str(lib)).openblas_set_num_threads_local
        except (OSError, AttributeError):
            continue
        fn.argtypes, fn.restype = [ctypes.c_int], ctypes.c_int
        return fn
    return None


@contextmanager
def single_blas_thread() -> Iterator[None]:
    """Within the block, scipy's OpenBLAS uses one thread on the calling thread."""
    set_local = _set_threads_local()
    if set_local is None:
        yield
        return
    previous = set_local(1)
    try:
        yield
    finally:
        set_local(previous)
