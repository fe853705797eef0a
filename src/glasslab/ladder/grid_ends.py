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
final loss it registers. The bootstrap refits every replicate over the whole exponent range the fit
itself searches (:data:`EXPONENTS`), not near the fit: on a grid narrow in N the data allow
α anywhere from ~1.2 to 2.6 (protocol (b)), and an interval that sees one of those solutions only
is too narrow. The same points fit ``glasslab ladder fit POINTS --law nd`` (:func:`points_of`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize, minimize_scalar

from glasslab.errors import UserError
from glasslab.ladder.curves import RunCurve
from glasslab.ladder.gate import gate_endpoint_fit
from glasslab.ladder.grid_law import HUBER_DELTA, GridNoise, family_noise, replicate_losses
from glasslab.ladder.points import rungs_of
from glasslab.ladder.rungs import Rung
from glasslab.ladder.uncertainty import percentile_interval, t_inflation
from glasslab.ladder.varpro import ColumnGroup, grid_fit, huber_nonneg_fit

FORM = "L(N,D) = E + A * N^-alpha + B * D^-beta"
MIN_POINTS = 6
EXPONENT_BOUNDS = (0.01, 3.0)
BOUNDED_LEAST_SQUARES = 10.0
"""A Huber δ no relative residual reaches: the fit is then least squares, the gate's second objective."""
GRID_FLOOR = "the grid (free fit)"
EXPONENTS = tuple(float(x) for x in np.round(np.geomspace(0.02, 3.0, 40), 4))
"""α and β on the fit's coarse grid and the bootstrap's: 40 values over the fit's range, evenly in log
(steps of 13%)."""


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
    """One point per finished branch run (or points-file row): N, D (forward area at the end), final loss,
    family."""

    params_n: np.ndarray
    tokens_n: np.ndarray
    loss_n: np.ndarray
    family_n: np.ndarray
    families: tuple[tuple[str, int], ...]


def points_of(params_n: Sequence[float], tokens_n: Sequence[float], loss_n: Sequence[float],
              family_of: Sequence[tuple[str, int]]) -> EndPoints:
    """End points given as numbers: N, D, final loss and each point's family (a size and a seed); a one-line
    UserError when too few."""
    families = tuple(dict.fromkeys(family_of))
    if len(loss_n) < MIN_POINTS or len(set(params_n)) < 2:
        raise UserError(f"end-point law: {len(loss_n)} points over {len(set(params_n))} sizes; expected at least "
                        f"{MIN_POINTS} over two sizes")
    return EndPoints(np.asarray(params_n, float), np.asarray(tokens_n, float), np.asarray(loss_n, float),
                     np.array([families.index(f) for f in family_of]), families)


def points_of_rungs(rungs: Sequence[Rung]) -> EndPoints:
    """The end points of ``rungs`` (each with N and D, a loss per seed, in the order ``points.rungs_of`` gives
    them): the k-th loss of every rung of one N is one family, as a width's trunk and seed are in a grid."""
    rows = [(r.params_active, r.tokens, loss, (f"N{r.params_active:.4g}", k))
            for r in rungs for k, loss in enumerate(r.losses)]
    return points_of(*zip(*rows, strict=True))


def end_point_rows(curves: Sequence[RunCurve]) -> list[dict]:
    """The finished branches of ``curves`` as points-file rows (``points.write_points``): N, D (forward area at
    the end), final loss, seed, FLOPs outside the LM head and the run, each branch's seeds in order."""
    runs = sorted((c for c in curves if c.role != "trunk" and c.final is not None),
                  key=lambda c: (c.flops, c.params, c.seed))
    return [{"params": c.params, "tokens": float(np.sum(c.multipliers()) * c.batch_tokens), "loss": c.final,
             "seed": c.seed, "flops": c.flops, "run": c.run_id} for c in runs]


def end_points(curves: Sequence[RunCurve]) -> EndPoints:
    """The finished branches of ``curves`` as end points, through the points file's grouping (so a refit of the
    file a fit writes sees the same points in the same order); a one-line UserError when too few."""
    rows = end_point_rows(curves)
    if len(rows) < MIN_POINTS or len({r["params"] for r in rows}) < 2:
        raise UserError(f"grid ladder: {len(rows)} finished branches over {len({r['params'] for r in rows})} widths; "
                        f"expected at least {MIN_POINTS} over two widths")
    return points_of_rungs(rungs_of(rows, "grid ladder"))


def _groups(points: EndPoints, alphas: Sequence[float], betas: Sequence[float]) -> list[ColumnGroup]:
    return [ColumnGroup(tuple((a,) for a in alphas), np.stack([points.params_n ** -a for a in alphas])),
            ColumnGroup(tuple((b,) for b in betas), np.stack([points.tokens_n ** -b for b in betas]))]


def _design(points: EndPoints, alpha: float, beta: float) -> np.ndarray:
    return np.stack([np.ones_like(points.params_n), points.params_n ** -alpha, points.tokens_n ** -beta], axis=1)


def fit_endpoint_law(points: EndPoints, delta: float = HUBER_DELTA) -> EndpointLaw:
    """The grid's best (α, β), then Nelder–Mead on the summed Huber loss (``delta``) of the relative
    residuals; ``delta=BOUNDED_LEAST_SQUARES`` fits by least squares."""
    coarse = grid_fit(_groups(points, EXPONENTS, EXPONENTS), points.loss_n[None, :], 1.0 / points.loss_n**2)
    if not np.isfinite(coarse.sse[0]):
        raise UserError("grid ladder: no non-negative fit of the branches' final losses (they do not fall with size "
                        "and tokens)")
    theta = np.array([EXPONENTS[coarse.index[0, 0]], EXPONENTS[coarse.index[0, 1]]])

    def objective(x: np.ndarray) -> float:
        return huber_nonneg_fit(_design(points, *x), points.loss_n, delta=delta)[1]

    result = minimize(objective, theta, method="Nelder-Mead", bounds=[EXPONENT_BOUNDS, EXPONENT_BOUNDS],
                      options={"xatol": 1e-4, "fatol": 1e-12, "maxiter": 400})
    if result.fun <= objective(theta):
        theta = result.x
    coef, _ = huber_nonneg_fit(_design(points, *theta), points.loss_n, delta=delta)
    return EndpointLaw(float(coef[0]), float(coef[1]), float(theta[0]), float(coef[2]), float(theta[1]))


def endpoint_noise(points: EndPoints, law: EndpointLaw) -> GridNoise:
    fitted = law(points.params_n, points.tokens_n)
    return family_noise((points.loss_n - fitted) / fitted, points.family_n, points.families)


def bootstrap_endpoint_law(points: EndPoints, law: EndpointLaw, noise: GridNoise,
                           targets: Sequence[tuple[float, float]], *, level: float = 0.9, num_bootstrap: int = 1000,
                           seeds_at_target: Sequence[int] = (),
                           rng: np.random.Generator) -> tuple[np.ndarray, list[np.ndarray]]:
    """Refit replicate end points (the family bootstrap of ``grid_law``) over :data:`EXPONENTS`
    for α and β; returns the replicates' (E, A, alpha, B, beta) and, per (N, D) target, their
    predicted final losses with the target's own run noise (``seeds_at_target[i]`` runs averaged, default 1)."""
    fitted = law(points.params_n, points.tokens_n)
    y_Bn = replicate_losses(fitted, (points.loss_n - fitted) / fitted, points.family_n, len(points.families), noise,
                            level=level, num_bootstrap=num_bootstrap, rng=rng)
    alphas = betas = np.array(EXPONENTS)
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


@dataclass(frozen=True)
class EndpointPrediction:
    """The end-point law's prediction of one run at (N, D): the fit, its noise and (B, 5) replicates, the
    point and ``level`` interval (nats/token), the replicates' predictions, and the registration gate."""

    law: EndpointLaw
    noise: GridNoise
    replicates: np.ndarray
    point: float
    lo: float
    hi: float
    level: float
    predicted_B: np.ndarray
    difference: dict
    """Farseer's difference check (:func:`difference_check`)."""
    gate: dict


def predict_endpoint(points: EndPoints, target: tuple[float, float], *, level: float = 0.9,
                     num_bootstrap: int = 1000, rng: np.random.Generator) -> EndpointPrediction:
    """Fit the end-point law to ``points``, predict one run at ``target`` (N, D) with a ``level`` interval,
    and gate the fit (``glasslab.ladder.gate``): exponents, the floor in its interval, least squares
    against Huber, the size term's share of the drop to the target, the difference check. The gate record's
    ``floor`` says where the floor came from: :data:`GRID_FLOOR`, with its interval."""
    law = fit_endpoint_law(points)
    noise = endpoint_noise(points, law)
    replicates, (predicted_B,) = bootstrap_endpoint_law(points, law, noise, [target], level=level,
                                                        num_bootstrap=num_bootstrap, rng=rng)
    point = float(law(*target))
    lo, hi = (float(x[0]) for x in percentile_interval(predicted_B[:, None], level))
    E_lo, E_hi = (float(x[0]) for x in percentile_interval(replicates[:, [0]], level))
    top = top_point(points)
    other = float(fit_endpoint_law(points, BOUNDED_LEAST_SQUARES)(*target))
    difference = difference_check(points, law)
    gate = gate_endpoint_fit(law, point=point, low=min(lo, point), high=max(hi, point), other_point=other,
                             floor_interval=(E_lo, E_hi), lowest_loss=float(points.loss_n.min()),
                             size_span=top[0] / float(points.params_n.min()), top=top,
                             hero=target, beta_difference=difference["beta"])
    gate["floor"] = {"source": GRID_FLOOR, "value": law.E, "low": E_lo, "high": E_hi}
    return EndpointPrediction(law, noise, replicates, point, min(lo, point), max(hi, point), level, predicted_B,
                              difference, gate)


def top_point(points: EndPoints) -> tuple[float, float]:
    """The grid's largest point (N, D): the top width at its most tokens."""
    top_n = float(points.params_n.max())
    return top_n, float(points.tokens_n[points.params_n == top_n].max())


def difference_check(points: EndPoints, law: EndpointLaw) -> dict:
    """β from the differences between one size's points, which cancel ``E`` and the size term (Farseer, Li et
    al. 2025): ``L(D_a) − L(D_b) = B_N·(D_a^−β − D_b^−β)`` between consecutive D at each N (seed means), one
    ``B_N`` per size and one β, by least squares on the differences; beside it the law's β."""
    pairs = []  # (size index, D_a, D_b, ΔL)
    for w, size in enumerate(np.unique(points.params_n)):
        at = points.params_n == size
        loss_at, tokens_at = points.loss_n[at], points.tokens_n[at]
        ends = sorted((d, float(loss_at[tokens_at == d].mean())) for d in np.unique(tokens_at))
        pairs += [(w, d_a, d_b, l_a - l_b) for (d_a, l_a), (d_b, l_b) in zip(ends, ends[1:], strict=False)]
    if len(pairs) < 3:
        return {"beta": None, "beta_law": law.beta, "pairs": len(pairs),
                "note": "fewer than three pairs of points at one size"}
    w_n = np.array([p[0] for p in pairs])
    d_a, d_b, diff = (np.array([p[i] for p in pairs]) for i in (1, 2, 3))

    def sse(beta: float) -> float:
        basis = d_a ** -beta - d_b ** -beta
        total = 0.0
        for w in np.unique(w_n):
            m = w_n == w
            scale = max(float(basis[m] @ diff[m] / (basis[m] @ basis[m])), 0.0)
            total += float(((diff[m] - scale * basis[m]) ** 2).sum())
        return total

    best = min(EXPONENTS, key=sse)
    result = minimize_scalar(sse, bounds=(max(0.01, best / 1.14), best * 1.14), method="bounded")
    return {"beta": float(result.x), "beta_law": law.beta, "pairs": len(pairs),
            "note": "differences of seed-mean final losses between one size's consecutive token counts"}
