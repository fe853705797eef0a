"""Learning-rate schedules as pure functions of (step, total steps), so a resume needs no state.

The multiplier scales every optimiser group's peak learning rate. A fork that lengthens the run
changes ``total_steps``; with WSD that only extends the stable phase, so the curve stays continuous.
"""

from __future__ import annotations

import math

from glasslab.train.config import ScheduleConfig


def lr_multiplier(cfg: ScheduleConfig, step: int, total_steps: int) -> float:
    """The multiplier in [0, 1] for optimiser step ``step`` (0-based) of ``total_steps``."""
    warmup = int(round(cfg.warmup_fraction * total_steps))
    if step < warmup:
        return (step + 1) / (warmup + 1)
    if cfg.kind == "constant":
        return 1.0
    floor = cfg.min_lr_ratio
    if cfg.kind == "wsd":
        start = decay_start(cfg, total_steps)
        if start is None or step < start:
            return 1.0
        progress = min(1.0, (step - start + 1) / (total_steps - start))
        return 1.0 - (1.0 - floor) * progress
    span = max(1, total_steps - warmup)
    progress = min(1.0, (step - warmup + 1) / span)
    if cfg.kind == "cosine":
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    return 1.0 - (1.0 - floor) * progress  # linear


def decay_start(cfg: ScheduleConfig, total_steps: int) -> int | None:
    """The first (0-based) optimiser step of a WSD schedule's decay phase, so the checkpoint at this step
    holds the weights just before the decay; None for a schedule without a separate decay phase."""
    decay = int(round(cfg.decay_fraction * total_steps))
    return total_steps - decay if cfg.kind == "wsd" and decay > 0 else None
