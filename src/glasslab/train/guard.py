"""The spike guard: decide, before an update is applied, whether the step looks like a loss spike.

It keeps a rolling window of the loss and global gradient norm of recently *applied* steps. A step
whose loss is above ``centre + sigma × deviation`` of its window (the centre: its mean, or its last
few steps' mean where higher), or whose grad norm is likewise out of band on a log scale (grad
norms of small batches swing by factors of a few; real blow-ups by orders of magnitude), is not
applied (the trainer records ``spike_skipped``); a non-finite loss or grad norm is never applied
(``nonfinite``).
After ``max_consecutive`` rejected steps in a row the guard asks for a rollback to the last good
checkpoint; the trainer then skips the offending data window and records a ``rollback`` incident.
The window is part of every checkpoint so a resumed run judges exactly as the original would.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass

from glasslab.train.config import GuardConfig

# The deviation used is at least this fraction of the mean, so a perfectly flat window (a tiny
# model that has converged) does not turn every rounding-level wobble into a "spike".
MIN_RELATIVE_DEVIATION = 0.01
RECENT_STEPS = 5
"""The band's centre is the window's mean, or the mean of its last few steps where that is higher: a
grad norm that climbs steadily for a few dozen steps (where the loss leaves its unigram plateau, the
attention updates turn coherent) is a trend the window's mean lags behind, not a spike."""


@dataclass(frozen=True)
class Verdict:
    """What to do with one step."""

    apply: bool
    kind: str = ""
    """``""`` when applied, else ``nonfinite`` or ``spike_skipped``."""
    reason: str = ""
    rollback: bool = False


class SpikeGuard:
    """Rolling statistics of applied steps and the rule that judges the next one."""

    def __init__(self, cfg: GuardConfig) -> None:
        self.cfg = cfg
        self.losses: deque[float] = deque(maxlen=cfg.window)
        self.grad_norms: deque[float] = deque(maxlen=cfg.window)
        self.consecutive_rejected = 0

    def judge(self, loss: float, grad_norm: float) -> Verdict:
        """The verdict for a step with this (global) loss in nats/token and gradient norm."""
        if not (math.isfinite(loss) and math.isfinite(grad_norm)):
            return self._reject("nonfinite", f"loss {loss} / grad norm {grad_norm} is not finite")
        if self.cfg.enabled and len(self.losses) >= self.cfg.min_history:
            checks = (("loss", loss, self.losses, self.cfg.sigma, False),
                      ("grad norm", grad_norm, self.grad_norms, self.cfg.grad_norm_sigma, True))
            for name, value, history, sigma, log_scale in checks:
                limit = _limit(history, sigma, log_scale) if sigma else math.inf
                if value > limit:
                    return self._reject("spike_skipped", f"{name} {value:.4g} > {limit:.4g} (centre + {sigma:g}σ"
                                        f"{' in log space' if log_scale else ''} of the last {len(history)} steps)")
        self.losses.append(loss)
        self.grad_norms.append(grad_norm)
        self.consecutive_rejected = 0
        return Verdict(apply=True)

    def _reject(self, kind: str, reason: str) -> Verdict:
        self.consecutive_rejected += 1
        return Verdict(apply=False, kind=kind, reason=reason,
                       rollback=self.consecutive_rejected >= self.cfg.max_consecutive)

    def state_dict(self) -> dict:
        return {"losses": list(self.losses), "grad_norms": list(self.grad_norms),
                "consecutive_rejected": self.consecutive_rejected}

    def load_state_dict(self, state: dict) -> None:
        self.losses = deque(state["losses"], maxlen=self.cfg.window)
        self.grad_norms = deque(state["grad_norms"], maxlen=self.cfg.window)
        self.consecutive_rejected = state["consecutive_rejected"]


def _limit(history: deque[float], sigma: float, log_scale: bool) -> float:
    """centre + sigma × deviation of ``history`` (of its logs when ``log_scale``, mapped back).

    The deviation is estimated from successive differences (σ ≈ RMS(x_t − x_{t−1}) / √2), so the
    steady fall of an early loss curve does not pass for noise and widen the band; the centre
    (:data:`RECENT_STEPS`) follows a steady rise.
    """
    values = [math.log(max(x, 1e-12)) for x in history] if log_scale else list(history)
    recent = values[-RECENT_STEPS:]
    centre = max(sum(values) / len(values), sum(recent) / len(recent))
    steps = [b - a for a, b in zip(values, values[1:], strict=False)]
    deviation = math.sqrt(sum(d * d for d in steps) / (2 * len(steps)))
    floor = MIN_RELATIVE_DEVIATION if log_scale else MIN_RELATIVE_DEVIATION * abs(centre)
    limit = centre + sigma * max(deviation, floor)
    return math.exp(limit) if log_scale else limit
