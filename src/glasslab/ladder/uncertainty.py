"""How sure a compute-law prediction is: a parametric bootstrap driven by the seeds' spread.

A ladder has four or five rungs, so resampling rungs degenerates (half the replicates lose the
largest rung). Instead the noise is measured: the spread of log loss between seeds of the same rung
(pure error) pooled with the rungs' misfit to the law (lack of fit), each with its degrees of freedom.
Replicate ladders are drawn around the fitted law at that noise and refitted in one vectorised call;
the percentiles of their predictions give the interval. Because a handful of seeds estimates the
noise itself only roughly, the drawn noise is scaled by the ratio of Student-t to normal quantiles at
the pooled degrees of freedom, which keeps the nominal coverage honest with few seeds.

A pinned asymptote is an assumption, not a measurement, so a pinned-``L∞`` interval also carries an
:class:`AsymptotePrior`: each replicate is refitted at its own ``L∞`` drawn uniformly from the prior's
range, and the interval is taken over that mixture. Refitting a public lab's published ladder showed
why: its pinned 90% interval without that doubt excluded both held-out points.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from glasslab.errors import UserError
from glasslab.ladder.compute_law import ComputeLaw, fit_batch, predict_batch
from glasslab.ladder.rungs import Rung


@dataclass(frozen=True)
class NoiseEstimate:
    """Relative noise of one seed's loss (standard deviation of its log), with its degrees of freedom."""

    sigma: float
    dof: int
    seed_dof: int
    """Of ``dof``, how many come from repeated seeds (the rest from the rungs' misfit to the law)."""

    def to_dict(self) -> dict[str, float]:
        return {"sigma": self.sigma, "dof": self.dof, "seed_dof": self.seed_dof}


def estimate_noise(rungs: Sequence[Rung], law: ComputeLaw) -> NoiseEstimate:
    """Pool the within-rung seed spread and the law's lack of fit into one per-seed noise estimate."""
    seed_ss, seed_dof = 0.0, 0
    misfit_ss = 0.0
    for rung in rungs:
        log_losses = np.log(rung.losses)
        seed_ss += float(((log_losses - log_losses.mean()) ** 2).sum())
        seed_dof += len(rung.losses) - 1
        misfit_ss += len(rung.losses) * float(np.log(rung.loss_mean) - np.log(law(rung.flops))) ** 2
    dof = seed_dof + len(rungs) - law.num_free_params
    if dof <= 0:
        raise UserError(f"{len(rungs)} single-seed rungs for a law with {law.num_free_params} free "
                        "parameters leave nothing to measure noise with: expected another rung or seed")
    return NoiseEstimate(math.sqrt((seed_ss + misfit_ss) / dof), dof, seed_dof)


@dataclass(frozen=True)
class AsymptotePrior:
    """Where a pinned ``L∞`` (nats/token) may really lie: uniform on ``[low, high]``; a point when equal."""

    low: float
    high: float
    source: str
    """Why this range: the sweep's span, the default half-width around the pinned value, or given."""

    def draw(self, num: int, rng: np.random.Generator) -> np.ndarray:
        return rng.uniform(self.low, self.high, num) if self.high > self.low else np.full(num, self.low)

    def to_dict(self) -> dict[str, float | str]:
        return {"kind": "uniform", "low": self.low, "high": self.high, "source": self.source}


def bootstrap_laws(rungs: Sequence[Rung], law: ComputeLaw, noise: NoiseEstimate, *, level: float = 0.9,
                   num_bootstrap: int = 1000, prior: AsymptotePrior | None = None,
                   rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Refit B replicate ladders drawn around ``law``: ``(L_inf_B, log_A_B, alpha_B)``, NaN where failed.

    Each replicate keeps the rungs' seed counts and the law's asymptote mode; its mean losses scatter
    around the law by the noise, inflated for its few dof at ``level``. A pinned ``L_inf`` stays pinned,
    at the law's value or, with ``prior``, at a value drawn from it for each replicate.
    """
    log_flops_n = np.log([r.flops for r in rungs])
    seeds_n = np.array([len(r.losses) for r in rungs], dtype=float)
    sigma = noise.sigma * t_inflation(noise.dof, level)
    fitted_n = np.asarray(law(np.exp(log_flops_n)))
    draws_Bn = rng.standard_normal((num_bootstrap, len(rungs)))
    loss_Bn = fitted_n[None, :] * np.exp(draws_Bn * sigma / np.sqrt(seeds_n)[None, :])
    if law.L_inf_mode == "free":
        return fit_batch(log_flops_n, loss_Bn, seeds_n, None)
    L_inf_B = prior.draw(num_bootstrap, rng) if prior is not None else np.full(num_bootstrap, law.L_inf)
    return fit_batch(log_flops_n, loss_Bn, seeds_n, L_inf_B)


def bootstrap_predictions(rungs: Sequence[Rung], law: ComputeLaw, noise: NoiseEstimate,
                          flops_T: Sequence[float], *, level: float = 0.9, num_bootstrap: int = 1000,
                          seeds_at_target: int | None = None, prior: AsymptotePrior | None = None,
                          rng: np.random.Generator) -> np.ndarray:
    """Predicted losses (B, T) at ``flops_T`` FLOPs from :func:`bootstrap_laws` replicates.

    ``seeds_at_target`` adds the noise of averaging that many seeds at the target (1 for a single hero
    run); None predicts the law itself. ``prior`` spreads a pinned ``L∞``. Failed replicates are dropped.
    """
    L_inf_B, log_A_B, alpha_B = bootstrap_laws(rungs, law, noise, level=level, num_bootstrap=num_bootstrap,
                                               prior=prior, rng=rng)
    pred_BT = predict_batch(L_inf_B, log_A_B, alpha_B, np.asarray(flops_T, dtype=float))
    if seeds_at_target:
        sigma = noise.sigma * t_inflation(noise.dof, level)
        pred_BT = pred_BT * np.exp(rng.standard_normal(pred_BT.shape) * sigma / math.sqrt(seeds_at_target))
    return pred_BT[np.all(np.isfinite(pred_BT), axis=1)]


def law_param_se(rungs: Sequence[Rung], law: ComputeLaw, noise: NoiseEstimate, *,
                 num_bootstrap: int = 1000, rng: np.random.Generator) -> dict[str, float]:
    """Bootstrap standard errors of ``L_inf`` (0 when pinned), ``A`` and ``alpha``."""
    level = math.erf(1 / math.sqrt(2))  # one standard error: inflate the noise at the 68% level
    L_inf_B, log_A_B, alpha_B = bootstrap_laws(rungs, law, noise, level=level, num_bootstrap=num_bootstrap,
                                               rng=rng)
    ok_B = np.isfinite(log_A_B)
    L_inf_se = float(np.std(L_inf_B[ok_B], ddof=1)) if law.L_inf_mode == "free" else 0.0
    return {"L_inf": L_inf_se, "A": float(np.std(np.exp(log_A_B[ok_B]), ddof=1)),
            "alpha": float(np.std(alpha_B[ok_B], ddof=1))}


def t_inflation(dof: int, level: float) -> float:
    """Student-t over normal quantile at the interval's level: widens noise measured with few dof."""
    q = 0.5 + level / 2
    return float(stats.t.ppf(q, dof) / stats.norm.ppf(q))


def percentile_interval(pred_BT: np.ndarray, level: float) -> tuple[np.ndarray, np.ndarray]:
    """The central ``level`` interval of each column of bootstrap predictions."""
    tail = 100 * (1 - level) / 2
    return np.percentile(pred_BT, tail, axis=0), np.percentile(pred_BT, 100 - tail, axis=0)
