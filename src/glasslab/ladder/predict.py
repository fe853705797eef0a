"""Predictions from a ladder: loss at a compute budget with a 90% interval, and the whole curve.

The asymptote ``L∞`` is an input (it belongs to the eval set and sequence length, not to the
ladder), so a prediction is made at the chosen ``L∞`` (pinned, or free) and again at every value of
a sweep of assumed ``L∞`` (a table). A pinned ``L∞`` is uncertain too, and the interval says so: it
is taken over bootstrap replicates refitted at asymptotes drawn uniformly from a prior range — the
sweep's span when a sweep is given, else ``L∞ ± 0.3`` nats — so doubt about the asymptote widens the
band instead of hiding in it, by as much as that doubt moves the prediction. The curve repeats the fit
at every 5% of training: rungs at 40% of their training predict the target at 40% of its compute.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from glasslab.ladder.compute_law import ComputeLaw, fit_compute_law
from glasslab.ladder.rungs import Rung
from glasslab.ladder.uncertainty import (
    AsymptotePrior,
    NoiseEstimate,
    bootstrap_predictions,
    estimate_noise,
    percentile_interval,
)

CURVE_FRACTIONS = tuple(round(0.05 * k, 2) for k in range(1, 21))
"""Fractions of training at which the curve is predicted: 5%, 10%, …, 100%."""
DEFAULT_PRIOR_HALF_WIDTH = 0.3
"""Nats either side of a pinned ``L∞`` that the interval allows for when no sweep gives a range: an
asymptote chosen before training (from the eval set and context) is rarely known better than that."""
PRIOR_CLEARANCE = 0.1
"""The prior stops this fraction of the gap short of the lowest rung's loss (a law with ``L∞`` at a
rung's loss cannot pass through that rung)."""


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
    prior: AsymptotePrior | None = None
    """The range a pinned ``L∞`` was spread over for the interval (None: free ``L∞``)."""

    def to_dict(self) -> dict[str, float]:
        return {"flops": self.flops, "point": self.point, "lo": self.lo, "hi": self.hi, "level": self.level}


def asymptote_prior(rungs: Sequence[Rung], L_inf: float | None, sweep: Sequence[float] = (),
                    L_inf_prior: tuple[float, float] | None = None) -> AsymptotePrior | None:
    """The prior range of a pinned ``L_inf`` (None when it is free): ``L_inf_prior`` as given, else the
    span of the sweep and ``L_inf``, else ``L_inf ± DEFAULT_PRIOR_HALF_WIDTH``; cut to ≥ 0 and to short
    of the lowest rung's loss. ``L_inf_prior=(x, x)`` makes the asymptote certain."""
    if L_inf is None:
        return None
    if L_inf_prior is not None:
        (low, high), source = sorted(L_inf_prior), "given"
    elif sweep:
        low, high, source = min(*sweep, L_inf), max(*sweep, L_inf), "sweep span"
    else:
        low, high = L_inf - DEFAULT_PRIOR_HALF_WIDTH, L_inf + DEFAULT_PRIOR_HALF_WIDTH
        source = f"default: pinned value ± {DEFAULT_PRIOR_HALF_WIDTH:g} nats"
    lowest = min(r.loss_mean for r in rungs)
    ceiling = L_inf + (1 - PRIOR_CLEARANCE) * (lowest - L_inf) if lowest > L_inf else L_inf
    return AsymptotePrior(max(0.0, min(low, L_inf)), max(L_inf, min(high, ceiling)), source)


def predict(rungs: Sequence[Rung], flops: float, *, L_inf: float | None = None,
            sweep: Sequence[float] = (), L_inf_prior: tuple[float, float] | None = None, level: float = 0.9,
            num_bootstrap: int = 1000, seeds_at_target: int | None = 1, seed: int = 0) -> Prediction:
    """Fit ``L(C)`` to ``rungs`` and predict the loss at ``flops`` FLOPs with a ``level`` interval.

    ``L_inf=None`` fits the asymptote; a pinned one is spread over :func:`asymptote_prior` for the
    interval. ``sweep`` lists assumed asymptotes (nats) whose predictions are tabulated.
    ``seeds_at_target=1`` makes the interval cover a single run's loss (the hero); None makes it cover
    the law's expected loss.
    """
    rng = np.random.default_rng(seed)
    law = fit_compute_law(rungs, L_inf)
    noise = estimate_noise(rungs, law)
    prior = asymptote_prior(rungs, L_inf, sweep, L_inf_prior)
    point, lo, hi = _point_and_interval(rungs, law, noise, flops, level, num_bootstrap, seeds_at_target, prior,
                                        rng)
    rows = []
    for assumed in sweep:
        swept = fit_compute_law(rungs, assumed)
        certain = AsymptotePrior(assumed, assumed, "swept value")
        s_point, s_lo, s_hi = _point_and_interval(rungs, swept, estimate_noise(rungs, swept), flops, level,
                                                  num_bootstrap, seeds_at_target, certain, rng)
        rows.append(SweepRow(assumed, swept.A, swept.alpha, s_point, s_lo, s_hi))
    return Prediction(float(flops), point, lo, hi, level, law, noise, tuple(rows), prior)


def _point_and_interval(rungs: Sequence[Rung], law: ComputeLaw, noise: NoiseEstimate, flops: float,
                        level: float, num_bootstrap: int, seeds_at_target: int | None,
                        prior: AsymptotePrior | None, rng: np.random.Generator) -> tuple[float, float, float]:
    pred_B1 = bootstrap_predictions(rungs, law, noise, [flops], level=level, num_bootstrap=num_bootstrap,
                                    seeds_at_target=seeds_at_target, prior=prior, rng=rng)
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
