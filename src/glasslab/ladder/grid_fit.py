"""A grid ladder's ``fit.json``: the floor from the rungs, the hero's whole curve, and the checks on them.

``fit_grid_ladder`` writes the same layout as a compute-law fit (``fit.py``) — so the page, the
registry, the band watcher and the summary read it unchanged — with floor mode ``grid``:

- ``law`` and ``L_inf``: the end-point law ``L(N, D) = E + A·N^(−α) + B·D^(−β)`` on the branches' final
  losses (``grid_ends``): every branch ends as the hero does, so this is the law of the quantity
  predicted; its ``E`` with a bootstrap interval is the floor, and where it came from (``text``);
- ``prediction``: the end-point law at the hero's (N, D), with its 90% interval — what is registered;
- ``curve``: the hero's loss at every 5% of its training. Its shape comes from the grid law fitted on
  every trunk's and branch's curve (``grid_law``, ``curve_law`` here), evaluated on the hero's own
  schedule; its level from the end-point law: ``curve(f) = final · L(f) / L(1)``. Each bootstrap
  replicate of the band multiplies a replicate of the final loss by a replicate of the shape, so the
  band carries both;
- ``rungs``: the grid points (each branch's final loss per seed);
- ``backtest``: leave-largest-width-out — the end-point law on the smaller widths predicts each branch
  of the largest;
- ``grid``: Farseer's difference check (Li et al. 2025): at one width ``L(D) − L(λD)`` cancels ``E`` and
  the size term, so the differences between a width's branches give β with no floor in it;
- ``gate``: the registration gate of the end-point law's prediction (``gate``, via ``grid_ends``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from glasslab.errors import UserError
from glasslab.ladder.curves import RunCurve, TargetCurve, target_curve
from glasslab.ladder.fit import floor_text, rung_record
from glasslab.ladder.fit_inputs import inputs_record
from glasslab.ladder.grid_ends import (
    GRID_FLOOR,
    EndpointPrediction,
    EndPoints,
    bootstrap_endpoint_law,
    end_point_rows,
    end_points,
    endpoint_noise,
    fit_endpoint_law,
)
from glasslab.ladder.grid_law import (
    FIRST_FRACTION,
    HUBER_DELTA,
    GridData,
    GridLaw,
    GridNoise,
    bootstrap_grid_law,
    estimate_grid_noise,
    fit_grid_law,
    grid_data,
    predict_target,
)
from glasslab.ladder.hero_floor import EarlierHero, predict_with_heroes
from glasslab.ladder.nd_fit import floor_record, param_se
from glasslab.ladder.predict import CURVE_FRACTIONS
from glasslab.ladder.rungs import TARGET_METRIC, Rung
from glasslab.ladder.uncertainty import percentile_interval

BACKTEST_BOOTSTRAP = 400
"""Bootstrap replicates of the back-test's intervals (at most)."""


@dataclass(frozen=True)
class GridPrediction:
    """What a grid ladder predicts for one run: the end-point law (its fit, noise and replicates), the final
    loss, and the curve at the target's fractions with its band (nats/token)."""

    ends: EndpointPrediction
    """The end-point law, its replicates and the registration gate."""
    final: float
    curve_law: GridLaw
    curve_noise: GridNoise
    curve_params: np.ndarray
    """(B, 8) bootstrap replicates of the grid law."""
    point: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    points: EndPoints
    data: GridData


def predict_grid(curves: Sequence[RunCurve], hero: TargetCurve, *, level: float = 0.9, num_bootstrap: int = 1000,
                 rng: np.random.Generator, heroes: Sequence[EarlierHero] = ()) -> GridPrediction:
    """The end-point law at the hero's (N, D) for its final loss (with the floor from earlier ``heroes`` of the
    recipe when the grid's own is refused, ``hero_floor``); the grid law on every curve for the shape of its
    training, ``curve(f) = final · L(f) / L(1)``; each band replicate a final-loss replicate times a shape
    replicate (the run's own offset cancels in the shape and is drawn once, in the final loss). On the heroes'
    floor the final loss has no replicates: the band is the shape's, scaled to the final interval's ends."""
    points = end_points(curves)
    ends = predict_with_heroes(points, (hero.params, float(hero.forward_area[-1])), heroes, level=level,
                               num_bootstrap=num_bootstrap, rng=rng)
    final, final_B = ends.point, ends.predicted_B
    data = grid_data(curves)
    curve_law = fit_grid_law(data)
    curve_noise = estimate_grid_noise(data, curve_law)
    replicates = bootstrap_grid_law(data, curve_law, curve_noise, [hero], level=level, num_bootstrap=num_bootstrap,
                                    rng=rng)
    shape_F = predict_target(curve_law, hero)
    if final <= 0 or np.any(shape_F <= 0):
        raise UserError(f"grid ladder: the laws put the hero's loss at or below 0 (final {final:.4g}, curve "
                        f"{shape_F.min():.4g}); expected positive losses — the grid does not constrain this hero")
    shape_BF = replicates.targets[0] / replicates.targets[0][:, [-1]]
    if ends.gate["floor"]["source"] == GRID_FLOOR:
        count = min(len(final_B), len(shape_BF))
        lo_F, hi_F = percentile_interval(final_B[:count, None] * shape_BF[:count], level)
    else:
        shape_lo, shape_hi = percentile_interval(shape_BF, level)
        lo_F, hi_F = ends.lo * shape_lo, ends.hi * shape_hi
    point_F = final * shape_F / shape_F[-1]
    return GridPrediction(ends, final, curve_law, curve_noise, replicates.params, point_F,
                          np.minimum(lo_F, point_F), np.maximum(hi_F, point_F), points, data)


def fit_grid_ladder(curves: Sequence[RunCurve], *, ladder: str, target: Any, target_flops: float,
                    level: float = 0.9, num_bootstrap: int = 1000, seed: int = 0,
                    heroes: Sequence[EarlierHero] = ()) -> dict[str, Any]:
    """Fit a grid ladder's runs (``curves``: trunks and branches) and predict the ``target`` run (a
    :class:`~glasslab.ladder.steps.GridTarget`: its N, schedule, steps and batch) at every 5% of its
    training; ``target_flops`` is its compute outside the LM head; ``heroes``: earlier heroes of the same
    recipe (``hero_floor``). Returns the ``fit.json`` dict; its ``inputs`` say how to refit its final loss
    from the points file the fit step writes beside it (``fit_inputs``)."""
    if not (math.isfinite(target_flops) and target_flops > 0):
        raise UserError(f"target compute {target_flops!r} FLOPs: expected a finite positive number")
    hero = target_curve(target.params, target.schedule, target.steps, target.batch_tokens, CURVE_FRACTIONS)
    grid = predict_grid(curves, hero, level=level, num_bootstrap=num_bootstrap, rng=np.random.default_rng(seed),
                        heroes=heroes)
    law = grid.ends.law
    curve = [{"fraction": f, "flops": target_flops * f, "point": float(p), "lo": float(lo), "hi": float(hi)}
             for f, p, lo, hi in zip(CURVE_FRACTIONS, grid.point, grid.lo, grid.hi, strict=True)]
    floor = floor_record(grid.ends.gate["floor"], law.E, level)
    target_size = (float(target.params), float(hero.forward_area[-1]))
    return {
        "ladder": ladder,
        "target": TARGET_METRIC,
        "L_inf": {**floor, "text": floor_text(floor)},
        "rungs": [rung_record(r) for r in grid_points(curves)],
        "law": {"form": law.form, "params": law.params,
                "param_se": param_se(grid.ends, floor),
                "noise": grid.ends.noise.to_dict(), "fitted_on": [r["run"] for r in end_point_rows(curves)],
                "points": len(grid.points.loss_n), "huber_delta": HUBER_DELTA,
                "tokens": "forward area at the end (tokens at the peak learning rate)"},
        "curve_law": {"form": grid.curve_law.form, "params": grid.curve_law.params,
                      "param_se": {k: float(np.std(grid.curve_params[:, i], ddof=1))
                                   for i, k in enumerate(grid.curve_law.params)},
                      "noise": grid.curve_noise.to_dict(), "fitted_on": [c.run_id for c in grid.data.curves],
                      "points": int(len(grid.data.loss_n)), "first_fraction": FIRST_FRACTION},
        "sweep_table": [],
        "prediction": {"flops": target_flops, "point": grid.final, "lo": grid.ends.lo, "hi": grid.ends.hi,
                       "level": level},
        "target_size": {"params": target_size[0], "tokens": target_size[1]},
        "inputs": inputs_record(ladder, target_size, num_bootstrap, heroes),
        "curve": curve,
        "backtest": leave_largest_width_out(curves, level=level, num_bootstrap=min(num_bootstrap, BACKTEST_BOOTSTRAP),
                                            seed=seed),
        "approach3": {"fitted": False, "reason": "grid ladder: its end-point law (law) is approach 3's form, fitted "
                      "on the branches' final losses by variable projection"},
        "law_line": [],
        "tasks": None,
        "gate": grid.ends.gate,
        "grid": {"difference_check": grid.ends.difference,
                 "widths": sorted({c.width for c in curves}), "families": len(grid.points.families)},
    }


def grid_points(curves: Sequence[RunCurve]) -> list[Rung]:
    """Each branch's final loss as a rung (its seeds pooled), smallest compute first."""
    by_rung: dict[str, list[RunCurve]] = {}
    for curve in curves:
        if curve.role != "trunk" and curve.final is not None:
            by_rung.setdefault(curve.rung, []).append(curve)
    rungs = [Rung(name, runs[0].flops, tuple(r.final for r in runs), runs[0].params_active, runs[0].tokens,
                  runs[0].size_name, tuple(r.run_id for r in runs), total_flops=runs[0].total_flops)
             for name, runs in by_rung.items()]
    if not rungs:
        raise UserError("grid ladder: no finished branch among the runs; expected a branch per token multiple")
    return sorted(rungs, key=lambda r: (r.flops, r.name))


def leave_largest_width_out(curves: Sequence[RunCurve], *, level: float, num_bootstrap: int,
                            seed: int) -> dict[str, Any]:
    """The end-point law fitted on every width but the largest predicts each of its branches (seed mean)."""
    widths = sorted({(c.params, c.width) for c in curves})
    method = "leave-largest-width-out: the end-point law on the smaller widths predicts the largest width's branches"
    empty = {"method": method, "steps": [], "last": None, "mean_abs_rel_error_pct": None}
    if len(widths) < 3:
        return empty
    held = widths[-1][1]
    fitted = [c for c in curves if c.width != held]
    try:
        points = end_points(fitted)
        law = fit_endpoint_law(points)
        noise = endpoint_noise(points, law)
    except UserError:
        return empty
    held_rungs = [r for r in grid_points(curves) if any(c.width == held and c.rung == r.name for c in curves)]
    sizes = []
    for rung in held_rungs:
        run = next(c for c in curves if c.rung == rung.name)
        sizes.append((run.params, float(np.sum(run.multipliers()) * run.batch_tokens)))
    _, predictions = bootstrap_endpoint_law(points, law, noise, sizes, level=level, num_bootstrap=num_bootstrap,
                                            seeds_at_target=[len(r.losses) for r in held_rungs],
                                            rng=np.random.default_rng(seed + 2))
    top = max(r.flops for r in grid_points(fitted))
    steps = []
    for rung, size, pred in zip(held_rungs, sizes, predictions, strict=True):
        point = float(law(*size))
        lo, hi = (float(x[0]) for x in percentile_interval(pred[:, None], level))
        measured = rung.loss_mean
        steps.append({"fit_rungs": sorted({c.width for c in fitted}), "held_out": rung.name, "flops": rung.flops,
                      "extrapolation": rung.flops / top, "measured": measured, "point": point, "lo": min(lo, point),
                      "hi": max(hi, point), "rel_error_pct": 100.0 * (point - measured) / measured,
                      "covered": bool(lo <= measured <= hi)})
    steps.sort(key=lambda s: s["flops"])
    return {"method": method, "steps": steps, "last": steps[-1] if steps else None,
            "mean_abs_rel_error_pct": float(np.mean([abs(s["rel_error_pct"]) for s in steps])) if steps else None}
