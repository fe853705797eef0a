"""The end-point law fitted on a points file: ``glasslab ladder fit POINTS --law nd``.

The same fitter and gate as a grid ladder's end points (``grid_ends.predict_endpoint``): the points
file's rows (N, D, final loss, optional seed) are the end points, a size's rows with one seed index are
a family (their offset is shared, as a grid's trunk's branches share theirs), and the target run
(``--target-params``, ``--target-tokens``) is predicted with a 90% interval and gated. The result has
``fit.json``'s layout (floor mode ``grid``: the floor is the law's E), so the summary, the page and the
registry read it as any fit.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from glasslab.errors import UserError
from glasslab.ladder.fit import floor_text, rung_record
from glasslab.ladder.fit_inputs import inputs_record
from glasslab.ladder.grid_ends import GRID_FLOOR, EndpointPrediction, points_of_rungs
from glasslab.ladder.hero_floor import EarlierHero, predict_with_heroes
from glasslab.ladder.points import DENSE_FLOPS_PER_PARAM_TOKEN
from glasslab.ladder.rungs import TARGET_METRIC, Rung


def fit_points_law(rungs: Sequence[Rung], *, ladder: str, target_size: tuple[float, float], level: float = 0.9,
                   num_bootstrap: int = 1000, seed: int = 0, heroes: Sequence[EarlierHero] = ()) -> dict[str, Any]:
    """Fit ``E + A·N^−α + B·D^−β`` to ``rungs`` (each with ``params_active`` N and ``tokens`` D, a loss per
    seed) and predict one run of ``target_size`` (N, D), with the floor from ``heroes`` (earlier heroes of
    the same recipe) when the grid's own is refused (``hero_floor``); returns the ``fit.json`` dict with its
    ``gate`` (whose ``floor`` says where the floor came from)."""
    missing = [r.name for r in rungs if not (r.params_active > 0 and r.tokens > 0)]
    if missing:
        raise UserError(f"--law nd: point {missing[0]} has no params or tokens; expected both columns (or one and "
                        "flops)")
    if not all(math.isfinite(x) and x > 0 for x in target_size):
        raise UserError(f"--law nd: target (params, tokens) = {target_size}; expected --target-params and "
                        "--target-tokens, finite and positive")
    points = points_of_rungs(rungs)
    ends = predict_with_heroes(points, target_size, heroes, level=level, num_bootstrap=num_bootstrap,
                               rng=np.random.default_rng(seed))
    law = ends.law
    floor = floor_record(ends.gate["floor"], law.E, level)
    flops = DENSE_FLOPS_PER_PARAM_TOKEN * target_size[0] * target_size[1]
    prediction = {"flops": flops, "point": ends.point, "lo": ends.lo, "hi": ends.hi, "level": level}
    return {
        "ladder": ladder,
        "target": TARGET_METRIC,
        "L_inf": {**floor, "text": floor_text(floor)},
        "rungs": [rung_record(r) for r in rungs],
        "law": {"form": law.form, "params": law.params,
                "param_se": param_se(ends, floor),
                "noise": ends.noise.to_dict(), "fitted_on": [r.name for r in rungs], "points": len(points.loss_n),
                "tokens": "the points file's tokens column"},
        "sweep_table": [],
        "prediction": prediction,
        "target_size": {"params": target_size[0], "tokens": target_size[1]},
        "inputs": inputs_record(ladder, target_size, num_bootstrap, heroes),
        "curve": [{"fraction": 1.0, **{k: prediction[k] for k in ("flops", "point", "lo", "hi")}}],
        "backtest": {"method": "none: a points file has no held-out rung", "steps": [], "last": None,
                     "mean_abs_rel_error_pct": None},
        "approach3": {"fitted": False, "reason": "--law nd: the law above is approach 3's form"},
        "law_line": [],
        "tasks": None,
        "gate": ends.gate,
        "grid": {"difference_check": ends.difference, "families": len(points.families)},
    }


def floor_record(source: dict[str, Any], value: float, level: float) -> dict[str, Any]:
    """``fit.json``'s ``L_inf`` of an end-point fit (before its ``text``): the law's E, and its interval from
    where it came (``source``, the gate record's ``floor``): the grid's bootstrap or the earlier heroes."""
    return {"mode": "grid" if source["source"] == GRID_FLOOR else "heroes", "value": value, "lo": source["low"],
            "hi": source["high"], "level": level, "sweep": [], "prior": None, "heroes": list(source.get("heroes", {}))}


def param_se(ends: EndpointPrediction, floor: dict[str, Any]) -> dict[str, float]:
    """The law's standard errors from the bootstrap's replicates; they are the free fit's, so none for a law on
    the heroes' floor."""
    if floor["mode"] != "grid":
        return {}
    return {k: float(np.std(ends.replicates[:, i], ddof=1)) for i, k in enumerate(ends.law.params)}
