"""Whether a run trains its model under ``torch.compile``: the user's choice, or a measured rule.

Compiling costs a fixed price up front and then makes every step cheaper, so it pays only for runs
long enough. Measured on the 2-core CPU this project develops on (``bench/model_bench.py``, docs/LOG.md,
2026-11-30): compiling a training step takes 1–2 CPU-minutes (94 s for the demo's 731K-A399K hero,
116 s for the bench's 31.5M-A9.5M MoE); it then runs a step 1.35× (bench MoE) to 1.6× (demo hero)
faster. The slowest eager rate seen, ~23 GFLOP/s (the hero's tiny widths on one core), turns
:data:`MIN_FLOPS` ``["cpu"]`` = 5e12 FLOPs into ~4 minutes of eager training, of which compiling saves
about what it costs; larger runs gain, smaller ones (tests, ladder rungs) stay eager. On CUDA the
threshold assumes a 1.5-minute compile saving 20% of eager steps at ~100 TFLOP/s (not measured here;
``bench/gpu_check.sh`` prints both, for a 4-layer cut of its 16-layer MoE, where a GPU is present).

The rule reads only the config (planned steps × batch tokens × FLOPs per token) and the device type,
never a timing: a resumed run decides exactly as the uninterrupted one did, so resume stays exact.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from glasslab.train.config import TrainConfig

MIN_FLOPS = {"cpu": 5e12, "cuda": 5e16}
"""Planned training compute (FLOPs) from which ``train.compile=null`` (auto) compiles, per device type."""


@dataclass(frozen=True)
class CompileChoice:
    """The decision and its reason, as run.json records it."""

    compile: bool
    reason: str


def choose_compile(setting: bool | None, planned_flops: float, device_type: str) -> CompileChoice:
    """``setting`` (``train.compile``: True/False forces, None asks the rule); ``planned_flops`` is the
    run's training compute (steps × tokens per step × FLOPs per token)."""
    if setting is not None:
        return CompileChoice(setting, f"train.compile={str(setting).lower()}")
    threshold = MIN_FLOPS.get(device_type)
    if threshold is None:
        return CompileChoice(False, f"auto: no measured rule for device type {device_type!r}")
    if planned_flops < threshold:
        return CompileChoice(False, f"auto: planned {planned_flops:.3g} FLOPs < {threshold:.3g}: "
                                    "compiling would cost more than it saves")
    if device_type == "cpu" and not _cpp_compiler_found():
        return CompileChoice(False, "auto: no C++ compiler for torch.compile's CPU kernels")
    return CompileChoice(True, f"auto: planned {planned_flops:.3g} FLOPs >= {threshold:.3g}")


def _cpp_compiler_found() -> bool:
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        get_cpp_compiler()
    except Exception:  # noqa: BLE001 - any failure to find one means: do not compile
        return False
    return True


def run_compile_choice(cfg: TrainConfig, flops_per_token: float, device: torch.device) -> CompileChoice:
    """:func:`choose_compile` for a run of ``cfg`` on ``device`` (what the trainer does, run.json says)."""
    planned_flops = cfg.total_steps * cfg.global_batch_tokens * flops_per_token
    return choose_compile(cfg.compile, planned_flops, device.type)
