"""Tokens per second, model FLOPs utilisation and peak memory, with an honest peak FLOP/s.

MFU needs the device's peak FLOP/s. It comes from, in order: the ``train.peak_flops`` flag, a table
of known accelerators (dense bf16 tensor-core peaks from the vendors' datasheets), or a measurement
(a large matmul timed once per process). It is never guessed; run.json records where it came from.
"""

from __future__ import annotations

import functools
import resource
import time
from typing import Any

import torch

from glasslab.train.callbacks import FIRST, Callback

# Dense (no sparsity) bf16 peak FLOP/s per device, from the vendors' datasheets. Matched against
# torch.cuda.get_device_name() in order, so the more specific names come first.
PEAK_BF16_FLOPS = (
    ("H100 PCIe", 756e12),
    ("H200", 989e12),
    ("H100", 989e12),
    ("H800", 989e12),
    ("B200", 2250e12),
    ("A100", 312e12),
    ("A800", 312e12),
    ("L40S", 362e12),
    ("L4", 121e12),
    ("A10", 125e12),
    ("MI300X", 1307e12),
)


def table_peak_flops(device_name: str) -> float | None:
    """The datasheet bf16 peak of a known device name, or None."""
    for name, flops in PEAK_BF16_FLOPS:
        if name.lower() in device_name.lower():
            return flops
    return None


def matmul_flops_per_s(device: str, dtype: torch.dtype, size: int = 1024, repeats: int = 5) -> float:
    """Best achieved FLOP/s of a ``size``-square matmul on ``device`` over ``repeats`` timings."""
    a = torch.randn(size, size, device=device, dtype=dtype)
    b = torch.randn(size, size, device=device, dtype=dtype)
    best = float("inf")
    for _ in range(repeats + 1):  # the first call warms caches and kernels up
        synchronize(device)
        start = time.perf_counter()
        a @ b
        synchronize(device)
        best = min(best, time.perf_counter() - start)
    return 2 * size**3 / best


@functools.cache
def measured_peak_flops(device: str, dtype: torch.dtype) -> float:
    """:func:`matmul_flops_per_s` at its defaults, timed once per process."""
    return matmul_flops_per_s(device, dtype)


def peak_flops(flag: float, device: torch.device, bf16: bool) -> tuple[float, str]:
    """(peak FLOP/s of one device, where it came from: ``flag``, ``table:<name>`` or ``measured``)."""
    if flag > 0:
        return flag, "flag"
    if device.type == "cuda" and bf16:
        name = torch.cuda.get_device_name(device)
        known = table_peak_flops(name)
        if known is not None:
            return known, f"table:{name}"
    # Measuring draws random numbers; keep it off the training RNG streams so resume stays exact.
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        flops = measured_peak_flops(str(device), torch.bfloat16 if bf16 else torch.float32)
    return flops, "measured"


def synchronize(device: str) -> None:
    """Wait for ``device``'s queued work (a no-op on the CPU), so wall-clock timings cover it."""
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def peak_memory_bytes(device: torch.device) -> int:
    """Peak memory of this process: allocated on the GPU, resident set size on the CPU."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device)
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KiB


class ThroughputMeter(Callback):
    """Each optimiser step's wall time as tokens/s and MFU, with the process's peak memory: a callback
    logging ``throughput/tokens_per_second``, ``throughput/mfu`` and ``memory/peak_bytes`` after each step.

    The clock runs from before a step to after it, so evals, samples and checkpoints between steps are
    never counted; it stops first (:data:`~glasslab.train.callbacks.FIRST`), before any other callback works.
    """

    priority = FIRST

    def __init__(self, flops_per_token: float, peak_flops_per_device: float, world_size: int) -> None:
        self.flops_per_token = flops_per_token
        self.peak_total = peak_flops_per_device * world_size
        self._start = time.perf_counter()

    def before_step(self, trainer: Any) -> None:
        self._start = time.perf_counter()

    def after_step(self, trainer: Any, metrics: dict[str, float]) -> None:
        if not metrics:  # the step ended in a rollback: nothing of it is logged
            return
        measured = self.step(trainer.cfg.global_batch_tokens)
        measured["memory/peak_bytes"] = float(peak_memory_bytes(trainer.ctx.device))
        trainer.log_metrics(measured)

    def step(self, tokens: int) -> dict[str, float]:
        """Metrics for a step of ``tokens`` global tokens that began at the last :meth:`before_step` and ended now."""
        seconds = max(time.perf_counter() - self._start, 1e-9)
        tokens_per_second = tokens / seconds
        return {
            "throughput/tokens_per_second": tokens_per_second,
            "throughput/mfu": self.flops_per_token * tokens_per_second / self.peak_total,
        }
