"""The ladder's fit record: everything fitted from a ladder, assembled as ``fit.json`` and read back.

``fit_ladder`` runs the whole analysis on measured rungs — the compute law at the recorded ``L∞``,
the table of predictions over the ``L∞`` sweep, the 90% interval for the target (hero) compute, the
curve at every 5% of training, the roll-forward back-test, and approach 3 with the compute-optimal
(N, D) when the ladder varies tokens per parameter (isoFLOP). The layout is the one agreed in the
contracts; the observatory reads it as plain JSON, so every value is a float, string, list or dict.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from glasslab.errors import UserError
from glasslab.ladder.approach3 import approach3_record, identifiable
from glasslab.ladder.backtest import roll_forward
from glasslab.ladder.compute_law import fit_log_gap
from glasslab.ladder.gate import gate_compute_fit
from glasslab.ladder.predict import Prediction, predict, predict_curve
from glasslab.ladder.rungs import TARGET_METRIC, Rung, check_rungs
from glasslab.ladder.task_law import TaskSeries, fit_task_laws
from glasslab.ladder.uncertainty import bootstrap_laws, law_param_se, percentile_interval
from glasslab.layout import write_json_atomic

ISOFLOP_TOLERANCE = 0.02
"""Rungs whose compute differs by less than this fraction share one isoFLOP budget."""
LAW_LINE_POINTS = 64
NOT_ISOFLOP = {"fitted": False, "reason": "every rung has the same tokens per parameter (D ∝ N), so N and D cannot "
               "be told apart; only L(C) is fitted. Plan an isoFLOP ladder to fit approach 3."}


def fit_ladder(rungs: Sequence[Rung], *, ladder: str, target_flops: float, L_inf: float | None,
               sweep: Sequence[float] = (), L_inf_prior: tuple[float, float] | None = None,
               target_size: tuple[float, float] | None = None,
               level: float = 0.9, num_bootstrap: int = 1000, seed: int = 0,
               tasks: dict[str, TaskSeries] | None = None) -> dict[str, Any]:
    """Fit ``rungs`` and predict ``target_flops`` (FLOPs); returns the ``fit.json`` dict.

    ``L_inf`` pins the asymptote (nats per token; None fits it), ``sweep`` lists the assumed
    asymptotes whose predictions are tabulated, and ``L_inf_prior`` (low, high) is the range a pinned
    asymptote is spread over for the intervals (default: the sweep's span, else ± 0.3 nats; see
    :func:`glasslab.ladder.predict.asymptote_prior`). The prior used is recorded under ``L_inf``.
    ``target_size`` (active parameters, training tokens) of the target run lets approach 3 predict it.
    ``tasks`` (the rungs' task evaluations, :func:`glasslab.ladder.task_law.read_task_points`) adds the
    task laws under ``tasks``.
    """
    if not (math.isfinite(target_flops) and target_flops > 0):
        raise UserError(f"target compute {target_flops!r} FLOPs: expected a finite positive number")
    check_rungs(rungs, 1, distinct_compute=False)
    isoflop = _varies_tokens_per_param(rungs)
    law_rungs = compute_frontier(rungs) if isoflop else list(rungs)
    options = {"L_inf": L_inf, "sweep": tuple(sweep), "L_inf_prior": L_inf_prior, "level": level,
               "num_bootstrap": num_bootstrap, "seed": seed}
    prediction = predict(law_rungs, target_flops, seeds_at_target=1, **options)
    law = prediction.law
    param_se = law_param_se(law_rungs, law, prediction.noise, num_bootstrap=num_bootstrap,
                            rng=np.random.default_rng(seed + 1))
    floor = {"mode": law.L_inf_mode, "value": law.L_inf, "sweep": [float(x) for x in sweep],
             "prior": prediction.prior.to_dict() if prediction.prior else None}
    free_interval = free_floor_interval(law_rungs, prediction, num_bootstrap=num_bootstrap, seed=seed)
    if free_interval is not None:
        floor.update(lo=free_interval[0], hi=free_interval[1], level=level)
    low = min(r.flops for r in rungs) / 2
    high = max(target_flops, max(r.flops for r in rungs)) * 2
    law_line = [{"flops": float(c), "loss": float(law(c))} for c in np.geomspace(low, high, LAW_LINE_POINTS)]
    return {
        "ladder": ladder,
        "target": TARGET_METRIC,
        "L_inf": {**floor, "text": floor_text(floor, param_se.get("L_inf"))},
        "rungs": [rung_record(r) for r in rungs],
        "law": {"form": law.form, "params": law.params, "param_se": param_se,
                "noise": prediction.noise.to_dict(), "fitted_on": [r.name for r in law_rungs]},
        "sweep_table": [vars(row) for row in prediction.sweep],
        "prediction": prediction.to_dict(),
        "curve": predict_curve(law_rungs, target_flops, seeds_at_target=1, **options),
        "backtest": roll_forward(law_rungs, L_inf=L_inf, sweep=sweep, L_inf_prior=L_inf_prior, level=level,
                                 num_bootstrap=min(num_bootstrap, 400), seed=seed),
        "approach3": approach3_record(rungs, target_flops, target_size, level=level, num_bootstrap=num_bootstrap,
                                      seed=seed) if isoflop else NOT_ISOFLOP,
        "law_line": law_line,
        "tasks": fit_task_laws(tasks, target_flops, level=level, num_bootstrap=num_bootstrap, seed=seed)
        if tasks else None,
        "gate": gate_compute_fit(alpha=law.alpha, point=prediction.point, low=prediction.lo, high=prediction.hi,
                                 other_point=float(fit_log_gap(law_rungs, law.L_inf)(prediction.flops)),
                                 free_floor=None if free_interval is None else (law.L_inf, *free_interval),
                                 lowest_loss=min(r.loss_mean for r in law_rungs),
                                 swept=[(row.L_inf, row.point) for row in prediction.sweep]),
    }


def free_floor_interval(rungs: Sequence[Rung], prediction: Prediction, *, num_bootstrap: int,
                        seed: int) -> tuple[float, float] | None:
    """A free asymptote's bootstrap interval at the prediction's level (nats; None when pinned): the profile
    over every L∞ in [0, lowest loss) refits each replicate, so it sees every floor the data allow."""
    law = prediction.law
    if law.L_inf_mode != "free":
        return None
    L_inf_B, _, _ = bootstrap_laws(rungs, law, prediction.noise, level=prediction.level,
                                   num_bootstrap=num_bootstrap, rng=np.random.default_rng(seed + 3))
    low, high = percentile_interval(L_inf_B[np.isfinite(L_inf_B)], prediction.level)
    return float(low), float(high)


def floor_text(floor: dict[str, Any], se: float | None = None) -> str:
    """Where a fit's floor came from, as the page and the card say it, from its ``fit.json`` ``L_inf``
    record: estimated from the rungs (floor mode ``grid``), calibrated on earlier heroes of the same recipe
    (``heroes``), pinned by the user, or fitted freely by L(C)."""
    value = floor.get("value")
    if floor.get("mode") == "heroes":
        return (f"calibrated on earlier heroes of the same recipe ({', '.join(floor.get('heroes') or [])}): "
                f"E = {value:.3f} [{floor['lo']:.3f}, {floor['hi']:.3f}] ({floor.get('level', 0.9):.0%})")
    if floor.get("mode") == "grid":
        return (f"estimated from the rungs: E = {value:.3f} [{floor['lo']:.3f}, {floor['hi']:.3f}] "
                f"({floor.get('level', 0.9):.0%})")
    if floor.get("mode") == "pinned":
        prior = floor.get("prior")
        spread = f" (its interval spread over {prior['low']:.2f}–{prior['high']:.2f})" if prior else ""
        return f"pinned by the user: L∞ = {value:.3g}{spread}"
    if "lo" in floor:
        return (f"fitted freely to the rungs by L(C): L∞ = {value:.3f} [{floor['lo']:.3f}, {floor['hi']:.3f}] "
                f"({floor.get('level', 0.9):.0%})")
    return f"fitted freely to the rungs by L(C): L∞ = {value:.3f}" + (f" ± {se:.2g}" if se else "")


def _varies_tokens_per_param(rungs: Sequence[Rung]) -> bool:
    known = [r for r in rungs if r.params_active > 0 and r.tokens > 0]
    return len(known) == len(rungs) and identifiable([r.params_active for r in known],
                                                     [r.tokens for r in known])


def compute_frontier(rungs: Sequence[Rung]) -> list[Rung]:
    """The lowest-loss rung of each compute budget (rungs within 2% total compute share a budget)."""
    ordered = sorted(rungs, key=_budget)
    groups: list[list[Rung]] = []
    for rung in ordered:
        if groups and _budget(rung) <= _budget(groups[-1][0]) * (1 + ISOFLOP_TOLERANCE):
            groups[-1].append(rung)
        else:
            groups.append([rung])
    return [min(group, key=lambda r: r.loss_mean) for group in groups]


def _budget(rung: Rung) -> float:
    """The compute an isoFLOP budget fixes: all training FLOPs (a points file gives only one compute)."""
    return rung.total_flops or rung.flops


def rung_record(rung: Rung) -> dict[str, Any]:
    """A rung as ``fit.json`` lists it (name, runs, size, tokens, compute, losses per seed, partial losses)."""
    return {"name": rung.name, "run_ids": list(rung.run_ids), "size_name": rung.size_name,
            "params_active": rung.params_active, "tokens": rung.tokens, "flops": rung.flops,
            "total_flops": rung.total_flops, "losses": list(rung.losses), "loss_mean": rung.loss_mean,
            "loss_std": rung.loss_std,
            "partial": {f"{f:.2f}": list(v) for f, v in sorted(rung.partial.items())}}


def rungs_from_fit(fit: dict[str, Any]) -> list[Rung]:
    """The rungs recorded in a ``fit.json`` dict (to refit or re-plot without the runs)."""
    return [Rung(r["name"], r["flops"], tuple(r["losses"]), r["params_active"], r["tokens"], r["size_name"],
                 tuple(r["run_ids"]), {float(f): tuple(v) for f, v in r.get("partial", {}).items()},
                 r.get("total_flops", 0.0))
            for r in fit["rungs"]]


def write_fit(path: str | Path, fit: dict[str, Any]) -> Path:
    """Write ``fit`` as JSON to ``path`` atomically (temp file in the same folder, then rename)."""
    return write_json_atomic(path, fit, indent=1, allow_nan=False)


def read_fit(path: str | Path) -> dict[str, Any]:
    """Read a ``fit.json``; a one-line UserError if it is missing or not a ladder fit."""
    path = Path(path)
    try:
        fit = json.loads(path.read_text())
    except FileNotFoundError:
        raise UserError(f"{path}: no such fit file") from None
    except json.JSONDecodeError as exc:
        raise UserError(f"{path}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    missing = [k for k in ("ladder", "target", "L_inf", "rungs", "law", "prediction") if k not in fit]
    if missing:
        raise UserError(f"{path}: missing {', '.join(missing)}; expected a ladder fit.json")
    return fit
