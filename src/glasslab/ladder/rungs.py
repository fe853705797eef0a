"""What a ladder measured: one :class:`Rung` per model size, with a final loss per seed.

A rung is one recipe at one size, trained with one or more seeds; the fits use the mean and the
spread of its seeds. Losses are ``eval/macro/loss`` in nats per token. Compute, the law's axis, is
training FLOPs outside the LM head (tokens × FLOPs per token, as ``model/`` counts them, less the
vocabulary projection): small rungs spend a quarter to half of their FLOPs there and a large hero a
few percent, so on total FLOPs the rungs and the hero follow different laws (Kaplan et al. count
non-embedding compute for the same reason; ``docs/ladder.md`` has the measurements). Partial-training
losses (at fractions of the rung's own training) let the fit predict a whole curve, not just an end
point.

Everything that reaches a fit passes :func:`check_rungs`, which turns bad input into one line
naming the rung.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from glasslab.errors import UserError

TARGET_METRIC = "eval/macro/loss"
"""The metric a rung's losses are, and what a ladder predicts for its hero."""


@dataclass(frozen=True)
class Rung:
    """One model size of a ladder and what its seeds reached.

    ``flops`` is the compute the law is fitted on (training FLOPs outside the LM head for glasslab's
    runs; a points file's compute as given), ``losses`` the final ``eval/macro/loss`` per seed (nats per
    token), ``params_active`` active parameters (what approach 3 calls N), ``tokens`` training tokens (D).
    ``partial`` maps a fraction of training (0 < f ≤ 1) to the per-seed losses at that point.
    ``total_flops`` is all the training FLOPs, LM head included (0 when unknown): what an isoFLOP
    budget fixes.
    """

    name: str
    flops: float
    losses: tuple[float, ...]
    params_active: float = 0.0
    tokens: float = 0.0
    size_name: str = ""
    run_ids: tuple[str, ...] = ()
    partial: dict[float, tuple[float, ...]] = field(default_factory=dict)
    total_flops: float = 0.0

    @property
    def loss_mean(self) -> float:
        return sum(self.losses) / len(self.losses)

    @property
    def loss_std(self) -> float:
        """Sample standard deviation over seeds (0 for a single seed)."""
        if len(self.losses) < 2:
            return 0.0
        mean = self.loss_mean
        return math.sqrt(sum((x - mean) ** 2 for x in self.losses) / (len(self.losses) - 1))

    def at_fraction(self, fraction: float) -> Rung:
        """This rung as it stood at ``fraction`` of its training (compute scaled, partial losses)."""
        if fraction >= 1.0:
            return self
        if fraction not in self.partial:
            raise UserError(f"rung {self.name}: no loss recorded at {fraction:.0%} of training")
        return Rung(self.name, self.flops * fraction, self.partial[fraction], self.params_active,
                    self.tokens * fraction, self.size_name, self.run_ids, total_flops=self.total_flops * fraction)


def check_rungs(rungs: Sequence[Rung], num_free_params: int, *, distinct_compute: bool = True) -> None:
    """Raise a one-line :class:`UserError` naming the rung unless ``rungs`` can be fitted.

    Checks: every loss finite and positive, compute finite and positive, at least ``num_free_params``
    rungs (points), and (when ``distinct_compute``) no two rungs with the same compute.
    """
    for rung in rungs:
        if not rung.losses:
            raise UserError(f"rung {rung.name}: no losses recorded")
        for loss in rung.losses:
            if not (math.isfinite(loss) and loss > 0):
                raise UserError(f"rung {rung.name}: loss {loss!r} is not a finite positive number")
        if not (math.isfinite(rung.flops) and rung.flops > 0):
            raise UserError(f"rung {rung.name}: compute {rung.flops!r} FLOPs is not finite and positive")
    if len(rungs) < num_free_params:
        names = ", ".join(r.name for r in rungs) or "none"
        raise UserError(f"{len(rungs)} rungs ({names}) for a law with {num_free_params} free parameters: "
                        f"expected at least {num_free_params}")
    if distinct_compute:
        ordered = sorted(rungs, key=lambda r: r.flops)
        for prev, cur in zip(ordered, ordered[1:], strict=False):
            if math.isclose(prev.flops, cur.flops, rel_tol=1e-9):
                raise UserError(f"rung {cur.name}: same compute ({cur.flops:.4g} FLOPs) as rung {prev.name}; "
                                "expected distinct compute per rung")
