"""The grid law: a loss floor the rungs find themselves, and the loss at every step of any schedule.

Fitted on every eval of a grid ladder's trunks and branches (``curves``), the law is

    L(N, S1, S2) = E + A·N^(−α) + B·S1^(−β) − C·N^(−γ)·S2

with N the non-embedding active parameters, S1 the forward area and S2 the annealing area of the run's
learning-rate schedule so far (Tissue et al. 2024; ``glasslab.ladder.curves``). At the end of runs
that share one schedule's shape S1 is proportional to the tokens D and S2 is a constant, so the law
is Chinchilla's ``E + A/N^α + B/D^β`` there; along a run it says what the loss is at every step of
*any* schedule, so the hero's curve comes from its own warmup and decay, not from the rungs'
fractions of training. ``E`` is the floor: tokens varied at fixed sizes (the grid) are what let the
fit see it; the annealing term may shrink or grow with size (γ).

Fitting (``fit_grid_law``): variable projection (``glasslab.ladder.varpro``): for fixed (α, β, γ, τ)
the coefficients (E, A, B, C ≥ 0) are non-negative least squares, so a grid over the exponents and the
annealing memory τ finds the basin and Nelder–Mead refines (α, β, γ) on the summed Huber loss of the
relative residuals (δ = 1e-3, as Besiroglu et al. 2024 fit Chinchilla's law on log loss).

Uncertainty (``bootstrap_grid_law``): a run's curve is one draw, and the runs of one width and seed
share a trunk, so the unit of noise is that family. Its offset is measured as the spread between
seeds' mean residuals (pure error) pooled with the widths' misfit to the law; each replicate draws a
new offset per family (inflated for its few degrees of freedom, Student-t over normal) and keeps each
family's residual curve with a random sign (a wild bootstrap, so the law's misfit along a curve is
redrawn too), and is refitted on a fine local grid in one vectorised call. The hero is one more run:
its own offset is drawn with the same spread.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize

from glasslab.errors import UserError
from glasslab.ladder.curves import RunCurve, TargetCurve
from glasslab.ladder.uncertainty import t_inflation
from glasslab.ladder.varpro import ColumnGroup, grid_fit, huber_nonneg_fit

FORM = "L(N,S1,S2) = E + A * N^-alpha + B * S1^-beta - C * N^-gamma * S2"
EXPONENT_GRID = tuple(round(0.05 * k, 2) for k in range(1, 31))
"""α and β on the coarse grid: 0.05 … 1.5."""
GAMMA_GRID = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5)
"""γ ≥ 0: the annealing gain does not grow with size (a negative γ, fitted on one ladder's rungs, made it
grow as N^0.95 and put the hero's end below zero)."""
TAU_GRID = (4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0)
"""The annealing memory τ (optimiser steps) on the grid; the fit keeps the best one."""
HUBER_DELTA = 1e-3
FIRST_FRACTION = 0.05
"""Evals before this fraction of a width's 1× run (the unigram plateau, the first steps of warmup) are
not fitted."""
LOCAL_STEP = 0.025
LOCAL_POINTS = 8
"""The bootstrap refits on a local grid: α and β within ±0.2 of the fit in steps of 0.025, γ within ±0.4
in steps of 0.1, τ within a factor 2 in steps of 2^(1/4)."""


@dataclass(frozen=True)
class GridLaw:
    """``L = E + A·N^−alpha + B·S1^−beta − C·N^−gamma·S2`` (nats/token); N parameters, S1 tokens."""

    E: float
    A: float
    alpha: float
    B: float
    beta: float
    C: float
    gamma: float
    tau: float
    """Annealing memory of S2, in optimiser steps."""

    form = FORM

    def __call__(self, params: float | np.ndarray, s1: float | np.ndarray, s2: float | np.ndarray) -> np.ndarray:
        return (self.E + self.A * np.power(params, -self.alpha) + self.B * np.power(s1, -self.beta)
                - self.C * np.power(params, -self.gamma) * s2)

    @property
    def params(self) -> dict[str, float]:
        return {"E": self.E, "A": self.A, "alpha": self.alpha, "B": self.B, "beta": self.beta, "C": self.C,
                "gamma": self.gamma, "tau": self.tau}


@dataclass(frozen=True)
class GridData:
    """The points a grid law is fitted on: every eval of every run from :data:`FIRST_FRACTION` on."""

    curves: tuple[RunCurve, ...]
    params_n: np.ndarray
    s1_n: np.ndarray
    loss_n: np.ndarray
    family_n: np.ndarray
    """Index of each point's family (width, seed) in ``families``."""
    weight_n: np.ndarray
    """Each point's weight: every run counts alike (a trunk's hundred evals as much as a branch's few),
    normalised to mean 1."""
    families: tuple[tuple[str, int], ...]
    selected: tuple[np.ndarray, ...]
    """Per curve, which of its evals are points (boolean)."""

    def s2(self, taus: Sequence[float]) -> np.ndarray:
        """S2 of every point at each τ: (len(taus), n)."""
        parts = [c.annealing_area(taus)[:, keep] for c, keep in zip(self.curves, self.selected, strict=True)]
        return np.concatenate(parts, axis=1)


def grid_data(curves: Sequence[RunCurve], first_fraction: float = FIRST_FRACTION) -> GridData:
    """The fit's points from grid runs: evals at or after ``first_fraction`` of each width's 1× run."""
    selected, kept = [], []
    params, s1, loss, family, weight = [], [], [], [], []
    families: dict[tuple[str, int], int] = {}
    for curve in curves:
        steps = np.asarray(curve.steps, dtype=float)
        keep = (steps >= first_fraction * curve.reference_steps) & np.isfinite(np.asarray(curve.losses, dtype=float))
        if not keep.any():
            continue
        kept.append(curve)
        selected.append(keep)
        index = families.setdefault(curve.family, len(families))
        params.append(np.full(int(keep.sum()), curve.params))
        s1.append(curve.forward_area()[keep])
        loss.append(np.asarray(curve.losses, dtype=float)[keep])
        family.append(np.full(int(keep.sum()), index))
        weight.append(np.full(int(keep.sum()), 1.0 / keep.sum()))
    if not kept:
        raise UserError("grid law: no eval loss logged by any grid run; expected trunks and branches with evals")
    weight_n = np.concatenate(weight)
    return GridData(tuple(kept), np.concatenate(params), np.concatenate(s1), np.concatenate(loss),
                    np.concatenate(family), weight_n / weight_n.mean(), tuple(families), tuple(selected))


def _groups(data: GridData, alphas: Sequence[float], betas: Sequence[float], gammas: Sequence[float],
            taus: Sequence[float]) -> list[ColumnGroup]:
    s2_Tn = data.s2(taus)
    anneal = [(g, t) for t in taus for g in gammas]
    anneal_values = np.stack([-np.power(data.params_n, -g) * s2_Tn[list(taus).index(t)] for g, t in anneal])
    return [ColumnGroup(tuple((a,) for a in alphas), np.stack([np.power(data.params_n, -a) for a in alphas])),
            ColumnGroup(tuple((b,) for b in betas), np.stack([np.power(data.s1_n, -b) for b in betas])),
            ColumnGroup(tuple(anneal), anneal_values)]


def _design(data: GridData, alpha: float, beta: float, gamma: float, s2_n: np.ndarray) -> np.ndarray:
    n = data.params_n
    return np.stack([np.ones_like(n), np.power(n, -alpha), np.power(data.s1_n, -beta),
                     -np.power(n, -gamma) * s2_n], axis=1)


def fit_grid_law(data: GridData, *, refine: bool = True) -> GridLaw:
    """The grid law fitted on ``data``: the coarse grid's best (α, β, γ, τ), then refined by Nelder–Mead
    (τ on a log scale) on the summed Huber loss; ``refine=False`` keeps the grid's values."""
    if len(data.families) < 2 or len({round(p) for p in data.params_n}) < 2:
        raise UserError("grid law: expected runs of at least two widths (the law separates size from tokens)")
    groups = _groups(data, EXPONENT_GRID, EXPONENT_GRID, GAMMA_GRID, TAU_GRID)
    coarse = grid_fit(groups, data.loss_n[None, :], data.weight_n / data.loss_n**2)
    if not np.isfinite(coarse.sse[0]):
        raise UserError("grid law: no non-negative fit on the grid (the losses do not fall with size and tokens)")
    a, b, (g, tau) = (groups[k].grid[coarse.index[0, k]] for k in range(3))
    theta = np.array([a[0], b[0], g, math.log(tau)])

    def objective(x: np.ndarray) -> float:
        return huber_nonneg_fit(_design(data, *x[:3], data.s2([math.exp(x[3])])[0]), data.loss_n,
                                delta=HUBER_DELTA, point_weight_n=data.weight_n)[1]

    if refine:
        result = minimize(objective, theta, method="Nelder-Mead",
                          bounds=[(0.01, 3.0), (0.01, 3.0), (0.0, 3.0), (math.log(TAU_GRID[0] / 2), math.log(4096.0))],
                          options={"xatol": 1e-4, "fatol": 1e-10, "maxiter": 800})
        if result.fun <= objective(theta):
            theta = result.x
    tau = math.exp(theta[3])
    coef, _ = huber_nonneg_fit(_design(data, *theta[:3], data.s2([tau])[0]), data.loss_n, delta=HUBER_DELTA,
                               point_weight_n=data.weight_n)
    return GridLaw(float(coef[0]), float(coef[1]), float(theta[0]), float(coef[2]), float(theta[1]),
                   float(coef[3]), float(theta[2]), tau)


@dataclass(frozen=True)
class GridNoise:
    """Relative noise of one run's curve (its family's offset from the law) and within a curve."""

    sigma: float
    """Standard deviation of a family's mean relative residual (one run's offset)."""
    dof: int
    seed_dof: int
    """Of ``dof``, how many come from repeated seeds (the rest from the widths' misfit to the law)."""
    sigma_within: float
    """Standard deviation of the residuals about their family's mean (the law's misfit along a curve)."""

    def to_dict(self) -> dict[str, float]:
        return {"sigma": self.sigma, "dof": self.dof, "seed_dof": self.seed_dof, "sigma_within": self.sigma_within}


def relative_residuals(data: GridData, law: GridLaw) -> np.ndarray:
    fitted = law(data.params_n, data.s1_n, data.s2([law.tau])[0])
    return (data.loss_n - fitted) / fitted


def estimate_grid_noise(data: GridData, law: GridLaw) -> GridNoise:
    """The noise of ``data`` about ``law`` (see :func:`family_noise`)."""
    return family_noise(relative_residuals(data, law), data.family_n, data.families, data.weight_n)


def family_means(resid_n: np.ndarray, family_n: np.ndarray, num_families: int,
                 weight_n: np.ndarray | None = None) -> np.ndarray:
    """Each family's (weighted) mean relative residual: its offset from the law."""
    weight_n = np.ones_like(resid_n) if weight_n is None else weight_n
    return np.array([np.average(resid_n[family_n == f], weights=weight_n[family_n == f]) for f in range(num_families)])


def family_noise(resid_n: np.ndarray, family_n: np.ndarray, families: Sequence[tuple[str, int]],
                 weight_n: np.ndarray | None = None) -> GridNoise:
    """Pool the seeds' spread of family mean residuals (per width) with the widths' misfit to the law.

    ``resid_n`` are relative residuals, ``family_n`` each point's index into ``families`` ((width, seed)),
    ``weight_n`` the points' weights in a family's mean (default equal)."""
    family_mean = family_means(resid_n, family_n, len(families), weight_n)
    by_width: dict[str, list[float]] = {}
    for (width, _seed), mean in zip(families, family_mean, strict=True):
        by_width.setdefault(width, []).append(float(mean))
    seed_ss = sum(float(((np.array(v) - np.mean(v)) ** 2).sum()) for v in by_width.values())
    seed_dof = sum(len(v) - 1 for v in by_width.values())
    misfit_ss = sum(len(v) * float(np.mean(v)) ** 2 for v in by_width.values())
    misfit_dof = max(len(by_width) - 2, 0)  # the widths' means spend A and alpha
    dof = seed_dof + misfit_dof
    if dof <= 0:
        raise UserError(f"grid law: {len(by_width)} widths with one seed each leave nothing to measure the noise "
                        "with; expected another width or seed")
    within = resid_n - family_mean[family_n]
    return GridNoise(math.sqrt((seed_ss + misfit_ss) / dof), dof, seed_dof, float(np.std(within)))


def replicate_losses(fitted_n: np.ndarray, resid_n: np.ndarray, family_n: np.ndarray, num_families: int,
                     noise: GridNoise, *, level: float, num_bootstrap: int, rng: np.random.Generator,
                     weight_n: np.ndarray | None = None) -> np.ndarray:
    """(B, n) replicate losses about ``fitted_n``: a new offset per family (``noise.sigma`` inflated for its
    dof at ``level``) plus each family's residuals about its (weighted) mean with a random sign."""
    family_mean = family_means(resid_n, family_n, num_families, weight_n)
    within = resid_n - family_mean[family_n]
    offset_BF = rng.standard_normal((num_bootstrap, num_families)) * noise.sigma * t_inflation(noise.dof, level)
    sign_BF = rng.choice([-1.0, 1.0], size=(num_bootstrap, num_families))
    return fitted_n * (1.0 + offset_BF[:, family_n] + within[None, :] * sign_BF[:, family_n])


@dataclass(frozen=True)
class GridReplicates:
    """Bootstrap refits: parameters per replicate and the targets' losses per replicate."""

    params: np.ndarray
    """(B, 8): E, A, alpha, B, beta, C, gamma, tau."""
    targets: list[np.ndarray]
    """Per target curve, (B, F) predicted losses (one run's noise added)."""


def bootstrap_grid_law(data: GridData, law: GridLaw, noise: GridNoise, targets: Sequence[TargetCurve], *,
                       level: float = 0.9, num_bootstrap: int = 1000, seeds_at_target: Sequence[int] = (),
                       rng: np.random.Generator) -> GridReplicates:
    """Refit ``num_bootstrap`` replicate grids drawn around ``law`` and predict ``targets`` with each.

    ``seeds_at_target[i]`` (default 1) runs are averaged at target ``i``: its noise is one family offset
    over the square root of that. Failed replicates (no feasible fit) are dropped.
    """
    inflation = t_inflation(noise.dof, level)
    fitted = law(data.params_n, data.s1_n, data.s2([law.tau])[0])
    y_Bn = replicate_losses(fitted, (data.loss_n - fitted) / fitted, data.family_n, len(data.families), noise,
                            level=level, num_bootstrap=num_bootstrap, rng=rng, weight_n=data.weight_n)
    local = np.arange(-LOCAL_POINTS, LOCAL_POINTS + 1) * LOCAL_STEP
    alphas = [a for a in law.alpha + local if a > 0.005]
    betas = [b for b in law.beta + local if b > 0.005]
    gammas = [g for g in law.gamma + np.arange(-4, 5) * 0.1 if g >= 0]
    taus = [law.tau * 2.0 ** (k / 4) for k in range(-4, 5)]
    groups = _groups(data, alphas, betas, gammas, taus)
    fit = grid_fit(groups, y_Bn, data.weight_n / fitted**2)
    ok = np.isfinite(fit.sse)
    anneal = [groups[2].grid[i] for i in fit.index[ok, 2]]
    params = np.column_stack([fit.coef[ok, 0], fit.coef[ok, 1], [alphas[i] for i in fit.index[ok, 0]],
                              fit.coef[ok, 2], [betas[i] for i in fit.index[ok, 1]], fit.coef[ok, 3],
                              [g for g, _ in anneal], [t for _, t in anneal]])
    predictions = []
    for k, target in enumerate(targets):
        s2_TF = target.annealing_area(taus)
        s2_BF = s2_TF[[taus.index(t) for _, t in anneal]]
        pred = (params[:, [0]] + params[:, [1]] * target.params ** -params[:, [2]]
                + params[:, [3]] * np.power(target.forward_area[None, :], -params[:, [4]])
                - params[:, [5]] * target.params ** -params[:, [6]] * s2_BF)
        seeds = seeds_at_target[k] if k < len(seeds_at_target) else 1
        own = rng.standard_normal((len(pred), 1)) * noise.sigma * inflation / math.sqrt(seeds)
        predictions.append(pred * (1.0 + own))
    return GridReplicates(params, predictions)


def predict_target(law: GridLaw, target: TargetCurve) -> np.ndarray:
    """The law's loss at each of the target's points (nats/token)."""
    return np.asarray(law(target.params, target.forward_area, target.annealing_area([law.tau])[0]), dtype=float)
