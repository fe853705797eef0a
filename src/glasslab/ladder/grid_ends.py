"""The end-point law of a grid ladder: the floor and the hero's final loss from the branches' last evals.

Every branch of a grid ends as the hero does (the recipe's warmup, a constant LR, a 20% decay to the
end), so its final loss is the point Chinchilla's law describes:

    L(N, D) = E + A·N^(−α) + B·D^(−β)

with N the non-embedding active parameters and D the forward area at the end (the tokens at the peak
learning rate: a branch's fixed-length warmup is most of a short one, and counting its tokens at full
weight would bend the short branches off the law). Fitted as the grid law is (``grid_law``): variable
projection over (α, β) with non-negative (E, A, B) on a grid, Huber-refined (δ = 1e-3), and the same
family bootstrap — one point per branch and seed, the branches of one width and seed sharing their
trunk's offset. Its ``E`` is the floor the ladder reports, its prediction at the hero's (N, D) the
final loss it registers.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from glasslab.errors import UserError
from glasslab.ladder.curves import RunCurve
from glasslab.ladder.grid_law import EXPONENT_GRID, HUBER_DELTA, GridNoise, family_noise, replicate_losses
from glasslab.ladder.uncertainty import t_inflation
from glasslab.ladder.varpro import ColumnGroup, grid_fit, huber_nonneg_fit

FORM = "L(N,D) = E + A * N^-alpha + B * D^-beta"
MIN_POINTS = 6


@dataclass(frozen=True)
class EndpointLaw:
    """``L = E + A·N^−alpha + B·D^−beta`` (nats/token); N parameters, D tokens at the peak LR."""

    E: float
    A: float
    alpha: float
    B: float
    beta: float

    form = FORM

    def __call__(self, params: float | np.ndarray, tokens: float | np.ndarray) -> np.ndarray:
        return self.E + self.A * np.power(params, -self.alpha) + self.B * np.power(tokens, -self.beta)

    @property
    def params(self) -> dict[str, float]:
        return {"E": self.E, "A": self.A, "alpha": self.alpha, "B": self.B, "beta": self.beta}


@dataclass(frozen=True)
class EndPoints:
    """One point per finished branch run: N, D (forward area at the end), final loss, family."""

    runs: tuple[RunCurve, ...]
    params_n: np.ndarray
    tokens_n: np.ndarray
    loss_n: np.ndarray
    family_n: np.ndarray
    families: tuple[tuple[str, int], ...]


def end_points(curves: Sequence[RunCurve]) -> EndPoints:
    """The finished branches of ``curves`` as end points; a one-line UserError when too few."""
    runs = tuple(c for c in curves if c.role != "trunk" and c.final is not None)
    families = tuple(dict.fromkeys(c.family for c in runs))
    if len(runs) < MIN_POINTS or len({c.params for c in runs}) < 2:
        raise UserError(f"grid ladder: {len(runs)} finished branches over {len({c.params for c in runs})} widths; "
                        f"expected at least {MIN_POINTS} over two widths")
    return EndPoints(runs, np.array([c.params for c in runs]),
                     np.array([float(np.sum(c.multipliers()) * c.batch_tokens) for c in runs]),
                     np.array([c.final for c in runs]), np.array([families.index(c.family) for c in runs]),
                     families)


def _groups(points: EndPoints, alphas: Sequence[float], betas: Sequence[float]) -> list[ColumnGroup]:
    return [ColumnGroup(tuple((a,) for a in alphas), np.stack([points.params_n ** -a for a in alphas])),
            ColumnGroup(tuple((b,) for b in betas), np.stack([points.tokens_n ** -b for b in betas]))]


def _design(points: EndPoints, alpha: float, beta: float) -> np.ndarray:
    return np.stack([np.ones_like(points.params_n), points.params_n ** -alpha, points.tokens_n ** -beta], axis=1)


def fit_endpoint_law(points: EndPoints) -> EndpointLaw:
    """The grid's best (α, β), then Nelder–Mead on the summed Huber loss of the relative residuals."""
    coarse = grid_fit(_groups(points, EXPONENT_GRID, EXPONENT_GRID), points.loss_n[None, :], 1.0 / points.loss_n**2)
    if not np.isfinite(coarse.sse[0]):
        raise UserError("grid ladder: no non-negative fit of the branches' final losses (they do not fall with size "
                        "and tokens)")
    theta = np.array([EXPONENT_GRID[coarse.index[0, 0]], EXPONENT_GRID[coarse.index[0, 1]]])

    def objective(x: np.ndarray) -> float:
        return huber_nonneg_fit(_design(points, *x), points.loss_n, delta=HUBER_DELTA)[1]

    result = minimize(objective, theta, method="Nelder-Mead", bounds=[(0.01, 3.0), (0.01, 3.0)],
                      options={"xatol": 1e-4, "fatol": 1e-12, "maxiter": 400})
    if result.fun <= objective(theta):
        theta = result.x
    coef, _ = huber_nonneg_fit(_design(points, *theta), points.loss_n, delta=HUBER_DELTA)
    return EndpointLaw(float(coef[0]), float(coef[1]), float(theta[0]), float(coef[2]), float(theta[1]))


def endpoint_noise(points: EndPoints, law: EndpointLaw) -> GridNoise:
    fitted = law(points.params_n, points.tokens_n)
    return family_noise((points.loss_n - fitted) / fitted, points.family_n, points.families)


def bootstrap_endpoint_law(points: EndPoints, law: EndpointLaw, noise: GridNoise,
                           targets: Sequence[tuple[float, float]], *, level: float = 0.9, num_bootstrap: int = 1000,
                           seeds_at_target: Sequence[int] = (),
                           rng: np.random.Generator) -> tuple[np.ndarray, list[np.ndarray]]:
    """Refit replicate end points (the family bootstrap of ``grid_law``) on a local grid (α, β within ±0.2
    in steps of 0.025); returns the replicates' (E, A, alpha, B, beta) and, per (N, D) target, their
    predicted final losses with the target's own run noise (``seeds_at_target[i]`` runs averaged, default 1)."""
    fitted = law(points.params_n, points.tokens_n)
    y_Bn = replicate_losses(fitted, (points.loss_n - fitted) / fitted, points.family_n, len(points.families), noise,
                            level=level, num_bootstrap=num_bootstrap, rng=rng)
    local = np.arange(-8, 9) * 0.025
    alphas = np.array([a for a in law.alpha + local if a > 0.005])
    betas = np.array([b for b in law.beta + local if b > 0.005])
    fit = grid_fit(_groups(points, alphas, betas), y_Bn, 1.0 / fitted**2)
    ok = np.isfinite(fit.sse)
    params = np.column_stack([fit.coef[ok, 0], fit.coef[ok, 1], alphas[fit.index[ok, 0]], fit.coef[ok, 2],
                              betas[fit.index[ok, 1]]])
    inflation = t_inflation(noise.dof, level)
    predictions = []
    for k, (n, d) in enumerate(targets):
        pred = params[:, 0] + params[:, 1] * n ** -params[:, 2] + params[:, 3] * d ** -params[:, 4]
        seeds = seeds_at_target[k] if k < len(seeds_at_target) else 1
        predictions.append(pred * (1 + rng.standard_normal(len(pred)) * noise.sigma * inflation / math.sqrt(seeds)))
    return params, predictions
