"""A grid ladder's ``fit.json``: the floor from the rungs, the hero's whole curve, and the checks on them.

``fit_grid_ladder`` fits the grid law (``grid_law``) on every trunk's and branch's curve and writes the
same layout as a compute-law fit (``fit.py``) — so the page, the registry, the band watcher and the
summary read it unchanged — with floor mode ``grid``:

- ``L_inf``: the floor ``E`` with its bootstrap interval and where it came from (``text``);
- ``prediction`` and ``curve``: the hero's loss at every 5% of its training, for its own schedule,
  with 90% intervals (the live band);
- ``rungs``: the grid points (each branch's final loss per seed);
- ``backtest``: leave-largest-width-out — the law fitted on the smaller widths predicts each branch of
  the largest;
- ``grid``: two checks on the floor and the tokens exponent. The end-point law
  ``L(N, D) = E + A·N^(−α) + B·D^(−β)`` fitted on the branches' final losses alone (Chinchilla's form,
  fitted the same way) gives a second, independent estimate of ``E`` and of the hero's final loss; and
  Farseer's difference check (Li et al. 2025): at one width ``L(D) − L(λD)`` cancels ``E`` and the
  size term, so the differences between a width's branches give ``β`` with no floor in it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
from scipy.optimize import minimize, minimize_scalar

from glasslab.errors import UserError
from glasslab.ladder.curves import RunCurve, target_curve
from glasslab.ladder.fit import TARGET_METRIC, floor_text, rung_record
from glasslab.ladder.grid_law import (
    EXPONENT_GRID,
    FORM,
    HUBER_DELTA,
    GridLaw,
    bootstrap_grid_law,
    estimate_grid_noise,
    family_noise,
    fit_grid_law,
    grid_data,
    predict_target,
    replicate_losses,
)
from glasslab.ladder.predict import CURVE_FRACTIONS
from glasslab.ladder.rungs import Rung
from glasslab.ladder.uncertainty import percentile_interval, t_inflation
from glasslab.ladder.varpro import ColumnGroup, grid_fit, huber_nonneg_fit

ENDPOINT_FORM = "L(N,D) = E + A * N^-alpha + B * D^-beta"
BACKTEST_BOOTSTRAP = 400
"""Bootstrap replicates of the back-test's intervals (at most)."""


def fit_grid_ladder(curves: Sequence[RunCurve], *, ladder: str, target: Any, target_flops: float,
                    level: float = 0.9, num_bootstrap: int = 1000, seed: int = 0) -> dict[str, Any]:
    """Fit the grid law on ``curves`` (trunks and branches) and predict the ``target`` run (a
    :class:`~glasslab.ladder.steps.GridTarget`: its N, schedule, steps and batch) at every 5% of its
    training; ``target_flops`` is its compute outside the LM head. Returns the ``fit.json`` dict."""
    if not (math.isfinite(target_flops) and target_flops > 0):
        raise UserError(f"target compute {target_flops!r} FLOPs: expected a finite positive number")
    rng = np.random.default_rng(seed)
    data = grid_data(curves)
    law = fit_grid_law(data)
    noise = estimate_grid_noise(data, law)
    hero = target_curve(target.params, target.schedule, target.steps, target.batch_tokens, CURVE_FRACTIONS)
    replicates = bootstrap_grid_law(data, law, noise, [hero], level=level, num_bootstrap=num_bootstrap, rng=rng)
    point_F = predict_target(law, hero)
    lo_F, hi_F = percentile_interval(replicates.targets[0], level)
    curve = [{"fraction": f, "flops": target_flops * f, "point": float(p), "lo": float(min(lo, p)),
              "hi": float(max(hi, p))} for f, p, lo, hi in zip(CURVE_FRACTIONS, point_F, lo_F, hi_F, strict=True)]
    E_lo, E_hi = (float(x[0]) for x in percentile_interval(replicates.params[:, [0]], level))
    names = ("E", "A", "alpha", "B", "beta", "C", "gamma", "tau")
    rungs = grid_points(curves)
    floor = {"mode": "grid", "value": law.E, "lo": E_lo, "hi": E_hi, "level": level, "sweep": [], "prior": None}
    return {
        "ladder": ladder,
        "target": TARGET_METRIC,
        "L_inf": {**floor, "text": floor_text(floor)},
        "rungs": [rung_record(r) for r in rungs],
        "law": {"form": FORM, "params": law.params,
                "param_se": {k: float(np.std(replicates.params[:, i], ddof=1)) for i, k in enumerate(names)},
                "noise": noise.to_dict(), "fitted_on": [c.run_id for c in data.curves],
                "points": int(len(data.loss_n)), "huber_delta": HUBER_DELTA},
        "sweep_table": [],
        "prediction": {**{k: curve[-1][k] for k in ("flops", "point", "lo", "hi")}, "level": level},
        "curve": curve,
        "backtest": leave_largest_width_out(curves, level=level, num_bootstrap=min(num_bootstrap, BACKTEST_BOOTSTRAP),
                                            seed=seed),
        "approach3": {"fitted": False, "reason": "grid ladder: the end-point law L(N, D) is fitted under 'grid' "
                      "(the same form, by variable projection) and the grid law on the whole curves"},
        "law_line": [],
        "tasks": None,
        "grid": {"endpoint_law": endpoint_law(curves, hero_size=(target.params, float(hero.forward_area[-1])),
                                              level=level, num_bootstrap=num_bootstrap, seed=seed),
                 "difference_check": difference_check(curves, law),
                 "widths": sorted({c.width for c in curves}), "families": len(data.families)},
    }


def grid_points(curves: Sequence[RunCurve]) -> list[Rung]:
    """Each branch's final loss as a rung (its seeds pooled), smallest compute first."""
    by_rung: dict[str, list[RunCurve]] = {}
    for curve in curves:
        if curve.role != "trunk":
            by_rung.setdefault(curve.rung, []).append(curve)
    rungs = [Rung(name, runs[0].flops, tuple(r.final for r in runs), runs[0].params_active, runs[0].tokens,
                  runs[0].size_name, tuple(r.run_id for r in runs), total_flops=runs[0].total_flops)
             for name, runs in by_rung.items()]
    if not rungs:
        raise UserError("grid ladder: no finished branch among the runs; expected a branch per token multiple")
    return sorted(rungs, key=lambda r: (r.flops, r.name))


def leave_largest_width_out(curves: Sequence[RunCurve], *, level: float, num_bootstrap: int,
                            seed: int) -> dict[str, Any]:
    """Fit on every width but the largest; predict each of its branches' final loss (seed mean)."""
    widths = sorted({(c.params, c.width) for c in curves})
    method = "leave-largest-width-out: the grid law on the smaller widths predicts the largest width's branches"
    if len(widths) < 3:
        return {"method": method, "steps": [], "last": None, "mean_abs_rel_error_pct": None}
    held = widths[-1][1]
    fitted = [c for c in curves if c.width != held]
    try:
        data = grid_data(fitted)
        law = fit_grid_law(data)
        noise = estimate_grid_noise(data, law)
    except UserError:
        return {"method": method, "steps": [], "last": None, "mean_abs_rel_error_pct": None}
    held_rungs = [r for r in grid_points(curves) if any(c.width == held and c.rung == r.name for c in curves)]
    targets, runs_of = [], []
    for rung in held_rungs:
        run = next(c for c in curves if c.rung == rung.name)
        targets.append(target_curve(run.params, run.schedule, run.total_steps, run.batch_tokens, (1.0,)))
        runs_of.append(len(rung.losses))
    replicates = bootstrap_grid_law(data, law, noise, targets, level=level, num_bootstrap=num_bootstrap,
                                    seeds_at_target=runs_of, rng=np.random.default_rng(seed + 2))
    top = max(r.flops for r in grid_points(fitted))
    steps = []
    for rung, target, pred in zip(held_rungs, targets, replicates.targets, strict=True):
        point = float(predict_target(law, target)[0])
        lo, hi = (float(x[0]) for x in percentile_interval(pred, level))
        measured = rung.loss_mean
        steps.append({"fit_rungs": sorted({c.width for c in fitted}), "held_out": rung.name, "flops": rung.flops,
                      "extrapolation": rung.flops / top, "measured": measured, "point": point, "lo": min(lo, point),
                      "hi": max(hi, point), "rel_error_pct": 100.0 * (point - measured) / measured,
                      "covered": bool(lo <= measured <= hi)})
    steps.sort(key=lambda s: s["flops"])
    return {"method": method, "steps": steps, "last": steps[-1] if steps else None,
            "mean_abs_rel_error_pct": float(np.mean([abs(s["rel_error_pct"]) for s in steps])) if steps else None}


def endpoint_law(curves: Sequence[RunCurve], *, hero_size: tuple[float, float], level: float, num_bootstrap: int,
                 seed: int) -> dict[str, Any]:
    """Chinchilla's ``E + A·N^−α + B·D^−β`` on the branches' final losses (one point per branch and seed),
    D their forward area S1 at the end: variable projection over (α, β), Huber-refined, and the same family
    bootstrap as the grid law. ``hero_size`` is the hero's (N, S1 at its end); returns the law, E's interval
    and the hero's final loss."""
    runs = [c for c in curves if c.role != "trunk" and c.final is not None]
    families = tuple(dict.fromkeys(c.family for c in runs))
    params_n = np.array([c.params for c in runs])
    # D as the forward area at the end (tokens at the peak LR): a branch's fixed-length warmup is most of a short
    # one, and counting its tokens at full weight would bend the short branches off the law.
    tokens_n = np.array([float(np.sum(c.multipliers()) * c.batch_tokens) for c in runs])
    loss_n = np.array([c.final for c in runs])
    family_n = np.array([families.index(c.family) for c in runs])
    if len(runs) < 6 or len(set(params_n)) < 2:
        return {"fitted": False, "reason": f"{len(runs)} branch end points; expected at least 6 over two widths"}

    def groups(alphas: Sequence[float], betas: Sequence[float]) -> list[ColumnGroup]:
        return [ColumnGroup(tuple((a,) for a in alphas), np.stack([params_n ** -a for a in alphas])),
                ColumnGroup(tuple((b,) for b in betas), np.stack([tokens_n ** -b for b in betas]))]

    def design(x: np.ndarray) -> np.ndarray:
        return np.stack([np.ones_like(params_n), params_n ** -x[0], tokens_n ** -x[1]], axis=1)

    coarse = grid_fit(groups(EXPONENT_GRID, EXPONENT_GRID), loss_n[None, :], 1.0 / loss_n**2)
    if not np.isfinite(coarse.sse[0]):
        return {"fitted": False, "reason": "no non-negative fit of the end points on the grid"}
    theta = np.array([EXPONENT_GRID[coarse.index[0, 0]], EXPONENT_GRID[coarse.index[0, 1]]])
    refined = minimize(lambda x: huber_nonneg_fit(design(x), loss_n, delta=HUBER_DELTA)[1], theta,
                       method="Nelder-Mead", bounds=[(0.01, 3.0), (0.01, 3.0)], options={"xatol": 1e-4, "maxiter": 400})
    theta = refined.x
    coef, _ = huber_nonneg_fit(design(theta), loss_n, delta=HUBER_DELTA)
    fitted_n = design(theta) @ coef
    resid_n = (loss_n - fitted_n) / fitted_n
    try:
        noise = family_noise(resid_n, family_n, families)
    except UserError as exc:
        return {"fitted": False, "reason": str(exc)}
    rng = np.random.default_rng(seed + 3)
    y_Bn = replicate_losses(fitted_n, resid_n, family_n, len(families), noise, level=level,
                            num_bootstrap=num_bootstrap, rng=rng)
    local = np.arange(-8, 9) * 0.025
    alphas = [a for a in theta[0] + local if a > 0.005]
    betas = [b for b in theta[1] + local if b > 0.005]
    fit = grid_fit(groups(alphas, betas), y_Bn, 1.0 / fitted_n**2)
    ok = np.isfinite(fit.sse)
    E_B = fit.coef[ok, 0]
    hero_n, hero_d = hero_size
    hero_B = (fit.coef[ok, 0] + fit.coef[ok, 1] * hero_n ** -np.array(alphas)[fit.index[ok, 0]]
              + fit.coef[ok, 2] * hero_d ** -np.array(betas)[fit.index[ok, 1]])
    hero_B = hero_B * (1 + rng.standard_normal(len(hero_B)) * noise.sigma * t_inflation(noise.dof, level))
    point = float(coef[0] + coef[1] * hero_n ** -theta[0] + coef[2] * hero_d ** -theta[1])
    E_lo, E_hi = (float(x[0]) for x in percentile_interval(E_B[:, None], level))
    lo, hi = (float(x[0]) for x in percentile_interval(hero_B[:, None], level))
    return {"fitted": True, "form": ENDPOINT_FORM,
            "params": {"E": float(coef[0]), "A": float(coef[1]), "alpha": float(theta[0]), "B": float(coef[2]),
                       "beta": float(theta[1])},
            "E_interval": [E_lo, E_hi], "noise": noise.to_dict(), "points": len(runs),
            "hero": {"params": hero_n, "tokens": hero_d, "point": point, "lo": min(lo, point), "hi": max(hi, point)}}


def difference_check(curves: Sequence[RunCurve], law: GridLaw) -> dict[str, Any]:
    """β from the differences between a width's branches, which cancel ``E`` and the size term:
    ``L(S1_a) − L(S1_b) = B_w·(S1_a^−β − S1_b^−β)`` per width (seed means of the final losses, S1 the
    branches' forward areas at their ends), one ``B_w`` per width and one β, by least squares on the
    differences; beside it the grid law's β. The annealing term nearly cancels too (every branch ends
    with the same cooldown shape) and is left out."""
    by_width: dict[str, dict[float, list[float]]] = {}
    for c in curves:
        if c.role != "trunk" and c.final is not None:
            s1_end = float(np.sum(c.multipliers()) * c.batch_tokens)
            by_width.setdefault(c.width, {}).setdefault(s1_end, []).append(c.final)
    pairs = []  # (width index, S1_a, S1_b, ΔL)
    for w, (_width, ends) in enumerate(sorted(by_width.items())):
        ordered = sorted(ends.items())
        for (s_a, l_a), (s_b, l_b) in zip(ordered, ordered[1:], strict=False):
            pairs.append((w, s_a, s_b, float(np.mean(l_a) - np.mean(l_b))))
    if len(pairs) < 3:
        return {"beta": None, "beta_law": law.beta, "pairs": len(pairs),
                "note": "fewer than three pairs of branches at one width"}
    w_n = np.array([p[0] for p in pairs])
    s_a, s_b, diff = (np.array([p[i] for p in pairs]) for i in (1, 2, 3))

    def sse(beta: float) -> float:
        basis = s_a ** -beta - s_b ** -beta
        total = 0.0
        for w in np.unique(w_n):
            m = w_n == w
            scale = float(basis[m] @ diff[m] / (basis[m] @ basis[m]))
            total += float(((diff[m] - max(scale, 0.0) * basis[m]) ** 2).sum())
        return total

    best = min(EXPONENT_GRID, key=sse)
    result = minimize_scalar(sse, bounds=(max(0.01, best - 0.05), best + 0.05), method="bounded")
    return {"beta": float(result.x), "beta_law": law.beta, "pairs": len(pairs),
            "note": "differences of seed-mean final losses between a width's consecutive branches, on S1"}
