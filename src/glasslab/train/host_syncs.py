"""Count the places where glasslab's code waits for a tensor's value on the host.

On a GPU every ``.item()``, ``.tolist()``, ``float(t)``, ``int(t)``, ``bool(t)`` or ``.cpu()`` of a
device tensor stalls the host until the device has caught up, so the next step's kernels cannot be
queued behind the current ones. The loop keeps them to a few per step (the step's scalars travel in
one transfer); :func:`count_host_syncs` makes that checkable on a CPU, where nothing actually waits:
it counts those conversions when glasslab's own code makes them (torch's internals are not ours to
change, and on CUDA the fused optimiser makes none). Syncs that happen inside kernels — a boolean
mask's variable-length result, a capacity's drop count — are not seen here; on a GPU
``torch.cuda.set_sync_debug_mode`` sees them too (``tests/test_model_cuda.py``).
"""

from __future__ import annotations

import contextlib
import sys
from collections import Counter
from collections.abc import Iterator

import torch

CONVERSIONS = ("item", "tolist", "cpu", "numpy", "__float__", "__int__", "__bool__", "__index__")
"""The ``torch.Tensor`` methods that hand a value to the host."""


@contextlib.contextmanager
def count_host_syncs() -> Iterator[Counter]:
    """While active, count each :data:`CONVERSIONS` call made from a ``glasslab`` module, by
    ``module:line`` of the caller (``sum(counter.values())`` is the total)."""
    counts: Counter = Counter()
    originals = {name: getattr(torch.Tensor, name) for name in CONVERSIONS}

    def counting(name: str):
        original = originals[name]

        def method(self, *args, **kwargs):
            caller = sys._getframe(1)
            module = caller.f_globals.get("__name__", "")
            if module.startswith("glasslab."):
                counts[f"{module}:{caller.f_lineno}"] += 1
            return original(self, *args, **kwargs)

        return method

    try:
        for name in CONVERSIONS:
            setattr(torch.Tensor, name, counting(name))
        yield counts
    finally:
        for name, original in originals.items():
            setattr(torch.Tensor, name, original)
