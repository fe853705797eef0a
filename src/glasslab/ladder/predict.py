"""Predictions from a ladder: loss at a compute budget with a 90% interval, and the whole curve.

The asymptote ``L∞`` is an input (it belongs to the eval set and sequence length, not to the
ladder), so a prediction is made at the chosen ``L∞`` (pinned, or free) and again at every value of
a sweep of assumed ``L∞``; the reported interval is the union of their bootstrap intervals, so doubt
about the asymptote widens the band instead of hiding in it. The curve repeats the fit at every 5%
of training: rungs at 40% of their training predict the target at 40% of its compute.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from glasslab.ladder.compute_law import ComputeLaw, fit_compute_law
from glasslab.ladder.rungs import Rung
from glasslab.ladder.uncertainty import (
    NoiseEstimate,
    bootstrap_predictions,
    estimate_noise,
    percentile_interval,
)

CURVE_FRACTIONS = tuple(round(0.05 * k, 2) for k in range(1, 21))
"""Fractions of training at which the curve is predicted: 5%, 10%, …, 100%."""


@dataclass(frozen=True)
class SweepRow:
    """The prediction made if ``L_inf`` were exactly this value."""

    L_inf: float
    A: float
    alpha: float
    point: float
    lo: float
    hi: float


@dataclass(frozen=True)
class Prediction:
    """Loss predicted at ``flops`` FLOPs (nats/token): point and the ``level`` interval [lo, hi]."""

    flops: float
    point: float
    lo: float
    hi: float
    level: float
    law: ComputeLaw
    noise: NoiseEstimate
    sweep: tuple[SweepRow, ...] = ()

    def to_dict(self) -> dict[str, float]:
        return {"flops": self.flops, "point": self.point, "lo": self.lo, "hi": self.hi, "level": self.level}


def predict(rungs: Sequence[Rung], flops: float, *, L_inf: float | None = None,
            sweep: Sequence[float] = (), level: float = 0.9, num_bootstrap: int = 1000,
            seeds_at_target: int | None = 1, seed: int = 0) -> Prediction:
    """Fit ``L(C)`` to ``rungs`` and predict the loss at ``flops`` FLOPs with a ``level`` interval.

    ``L_inf=None`` fits the asymptote; ``sweep`` lists assumed asymptotes (nats) whose intervals widen
    the reported one. ``seeds_at_target=1`` makes the interval cover a single run's loss (the hero);
    None makes it cover the law's expected loss.
    """
    rng = np.random.default_rng(seed)
    law = fit_compute_law(rungs, L_inf)
    noise = estimate_noise(rungs, law)
    point, lo, hi = _point_and_interval(rungs, law, noise, flops, level, num_bootstrap, seeds_at_target, rng)
    rows = []
    for assumed in sweep:
        swept = fit_compute_law(rungs, assumed)
        s_point, s_lo, s_hi = _point_and_interval(rungs, swept, estimate_noise(rungs, swept), flops, level,
                                                  num_bootstrap, seeds_at_target, rng)
        rows.append(SweepRow(assumed, swept.A, swept.alpha, s_point, s_lo, s_hi))
    lo = min([lo] + [r.lo for r in rows])
    hi = max([hi] + [r.hi for r in rows])
    return Prediction(float(flops), point, lo, hi, level, law, noise, tuple(rows))


def _point_and_interval(rungs: Sequence[Rung], law: ComputeLaw, noise: NoiseEstimate, flops: float,
                        level: float, num_bootstrap: int, seeds_at_target: int | None,
                        rng: np.random.Generator) -> tuple[float, float, float]:
    pred_B1 = bootstrap_predictions(rungs, law, noise, [flops], level=level, num_bootstrap=num_bootstrap,
                                    seeds_at_target=seeds_at_target, rng=rng)
    lo_1, hi_1 = percentile_interval(pred_B1, level)
    return float(law(flops)), float(lo_1[0]), float(hi_1[0])


def predict_curve(rungs: Sequence[Rung], flops: float, **kwargs: object) -> list[dict[str, float]]:
    """The prediction at every 5% of training for which every rung recorded a loss.

    Returns ``[{"fraction", "flops", "point", "lo", "hi"}, ...]``; keyword arguments go to :func:`predict`.
    """
    curve = []
    for fraction in CURVE_FRACTIONS:
        if fraction < 1.0 and not all(fraction in r.partial for r in rungs):
            continue
        partial = predict([r.at_fraction(fraction) for r in rungs], flops * fraction, **kwargs)
        curve.append({"fraction": fraction, **partial.to_dict()})
        curve[-1].pop("level")
    return curve
