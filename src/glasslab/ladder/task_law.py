"""Task scaling laws: compute → task bpb → accuracy, the hero's predicted accuracy, and its back-test.

Accuracy on a multiple-choice task jumps around near chance and saturates near 1, so it is not
fitted against compute directly. As in the OLMo ladder (Bhagia et al. 2024) the prediction has two
steps, each fitted on what it can be fitted on:

1. task bpb (bits per byte of the right answer) against training compute, ``b(C) = E + A·C^(−α)``:
   the loss law's form, fitted and bootstrapped by the same code (:func:`glasslab.ladder.predict.predict`),
   so its interval is honest in the same way (seed spread and misfit, Student-t inflation). The
   asymptote is free when the rungs leave degrees of freedom for it, else pinned at 0;
2. accuracy against task bpb, a sigmoid between the task's chance level and 1,
   ``acc(b) = chance + (1 − chance) / (1 + exp(k·(b − b0)))``, fitted by least squares on every
   evaluation of every rung (the points along each run, not only its end), so it sees the whole
   range the rungs went through.

The hero's accuracy is the sigmoid of the predicted bpb. Its interval combines the bpb bootstrap,
refits of the sigmoid on resampled points, and the binomial noise of scoring a finite set of items.
The back-test fits both steps without the largest rung (its points included) and predicts that
rung's final accuracy: the error is in points of accuracy (100 × (predicted − measured)).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy.optimize import OptimizeWarning, curve_fit

from glasslab import track
from glasslab.errors import UserError
from glasslab.ladder.plan import record_law_flops
from glasslab.ladder.predict import predict
from glasslab.ladder.rungs import Rung
from glasslab.ladder.uncertainty import bootstrap_predictions, percentile_interval

NUM_SIGMOID_REFITS = 200


@dataclass(frozen=True)
class TaskPoint:
    """One evaluation of a task on one run: at ``flops`` of training compute (FLOPs)."""

    rung: str
    run: str
    flops: float
    bpb: float
    acc: float
    final: bool


@dataclass(frozen=True)
class TaskSeries:
    """Every evaluation of one task over a ladder's runs, and what the task is."""

    name: str
    chance: float
    items: int
    metric: str
    points: tuple[TaskPoint, ...]


def read_task_points(run_dirs: Iterable[str | Path]) -> dict[str, TaskSeries]:
    """The tasks the runs scored (``run.json``'s ``tasks``) and each evaluation of them, by task name.

    A run's compute at an evaluation is its law compute (:func:`glasslab.ladder.plan.record_law_flops`, the
    planned FLOPs outside the LM head) × step / planned ``steps``;
    the accuracy is each task's headline metric (``acc`` or ``acc_norm``).
    """
    series: dict[str, dict[str, Any]] = {}
    for run_dir in map(Path, run_dirs):
        record = track.read_record(run_dir) or {}
        tasks, steps_total = record.get("tasks") or {}, record.get("steps")
        if not tasks or not steps_total:
            continue
        flops = record_law_flops(record, f"{run_dir}/run.json")
        with track.RunReader(run_dir) as reader:
            for name, about in tasks.items():
                entry = series.setdefault(name, {"about": about, "points": []})
                if about.get("sha256") != entry["about"].get("sha256"):
                    raise UserError(f"task {name}: {run_dir.name} scored other items (sha256 differs) than the "
                                    "other runs; a law needs the same task on every rung")
                steps, bpbs = reader.scalars(f"eval/task/{name}/bpb")
                acc_steps, accs = reader.scalars(f"eval/task/{name}/{about.get('metric', 'acc')}")
                by_step = dict(zip(acc_steps, accs, strict=True))
                for step, bpb in zip(steps, bpbs, strict=True):
                    if step in by_step and step > 0:
                        entry["points"].append(TaskPoint(str(record.get("rung", run_dir.name)), run_dir.name,
                                                         flops * step / steps_total, bpb,
                                                         by_step[step], step >= steps_total))
    return {name: TaskSeries(name, float(s["about"]["chance"]), int(s["about"]["items"]),
                             s["about"].get("metric", "acc"), tuple(s["points"]))
            for name, s in series.items()}


def sigmoid(bpb: np.ndarray | float, k: float, b0: float, chance: float) -> np.ndarray | float:
    """Accuracy at task bpb ``bpb``: from 1 (low bpb) down to ``chance`` (high bpb)."""
    return chance + (1 - chance) / (1 + np.exp(np.clip(k * (np.asarray(bpb) - b0), -50, 50)))


def fit_sigmoid(bpb: Sequence[float], acc: Sequence[float], chance: float,
                start: tuple[float, float] | None = None) -> tuple[float, float]:
    """Least-squares ``(k, b0)`` of :func:`sigmoid` through the points (``k > 0``: accuracy falls with bpb).

    ``start`` is where the search begins (a refit on resampled points starts from the full fit's answer);
    without it, from where the points cross halfway between chance and 1, with the slope their spread suggests.
    """
    bpb_n, acc_n = np.asarray(bpb, dtype=float), np.asarray(acc, dtype=float)
    if len(bpb_n) < 3:
        raise UserError(f"{len(bpb_n)} task evaluations: expected at least 3 to fit accuracy against bpb")
    if start is None:
        start = (4.0 / max(float(np.ptp(bpb_n)), 1e-3),
                 float(np.median(bpb_n)) if np.ptp(bpb_n) == 0 else float(np.interp(
                     (1 + chance) / 2, np.sort(acc_n), bpb_n[np.argsort(acc_n)])))
    # Levenberg-Marquardt (MINPACK) first, several times faster than the bounded trust-region search; the
    # bound k > 0 is only imposed when the unbounded answer breaks it.
    for bounds in ((-np.inf, np.inf), ((1e-6, -np.inf), (np.inf, np.inf))):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", OptimizeWarning)
            try:
                (k, b0), _ = curve_fit(lambda b, k, b0: sigmoid(b, k, b0, chance), bpb_n, acc_n, p0=start,
                                       jac=lambda b, k, b0: _sigmoid_jacobian(b, k, b0, chance), bounds=bounds,
                                       maxfev=5000)
            except RuntimeError:
                continue
        if k > 1e-6:
            return float(k), float(b0)
    raise UserError("accuracy against task bpb: the sigmoid fit did not converge")


def _sigmoid_jacobian(bpb: np.ndarray, k: float, b0: float, chance: float) -> np.ndarray:
    """d sigmoid / d(k, b0) at each point, shape (points, 2): the fit's exact derivatives (a numerical
    Jacobian cost a third of every fit's time)."""
    z = np.clip(k * (bpb - b0), -50, 50)
    slope = -(1 - chance) * np.exp(z) / (1 + np.exp(z)) ** 2  # d acc / d z
    return np.stack([slope * (bpb - b0), -slope * k], axis=1)


def _bpb_rungs(points: Sequence[TaskPoint]) -> list[Rung]:
    """One Rung per rung name whose 'losses' are its runs' final task bpb."""
    finals: dict[str, list[TaskPoint]] = {}
    for p in points:
        if p.final:
            finals.setdefault(p.rung, []).append(p)
    return sorted((Rung(name, ps[0].flops, tuple(p.bpb for p in ps)) for name, ps in finals.items()),
                  key=lambda r: r.flops)


def _predict_bpb(rungs: Sequence[Rung], flops: float, level: float, num_bootstrap: int, seed: int):
    """The bpb law's prediction at ``flops`` (free asymptote when the rungs allow it, else pinned at 0)."""
    try:
        return predict(rungs, flops, L_inf=None, level=level, num_bootstrap=num_bootstrap, seed=seed), "free"
    except UserError:
        return predict(rungs, flops, L_inf=0.0, level=level, num_bootstrap=num_bootstrap, seed=seed), "pinned"


def _bpb_samples(prediction, rungs: Sequence[Rung], flops: float, num_bootstrap: int, seed: int) -> np.ndarray:
    """Bootstrap draws of the bpb at ``flops`` around the prediction's law (one run's noise included)."""
    rng = np.random.default_rng(seed + 7)
    draws = bootstrap_predictions(rungs, prediction.law, prediction.noise, [flops], level=prediction.level,
                                  num_bootstrap=num_bootstrap, seeds_at_target=1, rng=rng)[:, 0]
    return draws[np.isfinite(draws) & (draws > 0)]


def _accuracy_prediction(series: TaskSeries, points: Sequence[TaskPoint], flops: float, *, level: float,
                         num_bootstrap: int, seed: int) -> dict[str, Any]:
    """Predict the task's accuracy at ``flops`` from ``points``: bpb law, sigmoid, and their interval."""
    rungs = _bpb_rungs(points)
    prediction, mode = _predict_bpb(rungs, flops, level, num_bootstrap, seed)
    bpb_B = _bpb_samples(prediction, rungs, flops, num_bootstrap, seed)
    bpb_n = np.array([p.bpb for p in points])
    acc_n = np.array([p.acc for p in points])
    k, b0 = fit_sigmoid(bpb_n, acc_n, series.chance)
    rng = np.random.default_rng(seed + 11)
    refits = []
    for _ in range(NUM_SIGMOID_REFITS):
        pick = rng.integers(len(points), size=len(points))
        try:
            refits.append(fit_sigmoid(bpb_n[pick], acc_n[pick], series.chance, start=(k, b0)))
        except UserError:
            continue
    params_B = np.array(refits)[rng.integers(len(refits), size=len(bpb_B))]
    acc_B = sigmoid(bpb_B, params_B[:, 0], params_B[:, 1], series.chance)
    # A single scoring of `items` questions scatters around the model's true accuracy (binomial).
    acc_B = acc_B + rng.standard_normal(len(acc_B)) * np.sqrt(acc_B * (1 - acc_B) / max(series.items, 1))
    acc_B = np.clip(acc_B, 0.0, 1.0)
    lo, hi = percentile_interval(acc_B[:, None], level)
    point = float(sigmoid(prediction.point, k, b0, series.chance))
    residual = acc_n - sigmoid(bpb_n, k, b0, series.chance)
    return {
        "bpb": {**prediction.to_dict(), "law": {"form": "b(C) = E + A * C^(-alpha)", "params": prediction.law.params,
                                                "L_inf_mode": mode, "noise": prediction.noise.to_dict()}},
        "acc": {"point": point, "lo": min(float(lo[0]), point), "hi": max(float(hi[0]), point), "level": level},
        "sigmoid": {"form": "acc(b) = chance + (1 - chance) / (1 + exp(k * (b - b0)))", "k": k, "b0": b0,
                    "chance": series.chance, "rmse": float(np.sqrt(np.mean(residual**2))), "points": len(points)},
    }


def _backtest(series: TaskSeries, *, level: float, num_bootstrap: int, seed: int) -> dict[str, Any] | None:
    """Leave the largest rung out, predict its final accuracy from the others; None when too few rungs."""
    rungs = _bpb_rungs(series.points)
    if len(rungs) < 3:
        return None
    held_out = rungs[-1]
    kept = [p for p in series.points if p.rung != held_out.name]
    try:
        predicted = _accuracy_prediction(series, kept, held_out.flops, level=level, num_bootstrap=num_bootstrap,
                                         seed=seed)
    except UserError:
        return None
    measured = float(np.mean([p.acc for p in series.points if p.rung == held_out.name and p.final]))
    acc = predicted["acc"]
    return {"method": "leave-last-rung-out", "held_out": held_out.name, "flops": held_out.flops,
            "measured": measured, "point": acc["point"], "lo": acc["lo"], "hi": acc["hi"],
            "error_points": 100 * (acc["point"] - measured), "covered": bool(acc["lo"] <= measured <= acc["hi"])}


def fit_task_laws(tasks: dict[str, TaskSeries], target_flops: float, *, level: float = 0.9,
                  num_bootstrap: int = 1000, seed: int = 0) -> dict[str, Any]:
    """fit.json's ``tasks``: per task the laws, the prediction at ``target_flops`` and the back-test.

    Tasks with too few rungs or evaluations to fit are listed under ``skipped`` with the reason.
    """
    out: dict[str, Any] = {"target_flops": target_flops, "level": level, "by_task": {}, "skipped": {}}
    for name, series in sorted(tasks.items()):
        try:
            predicted = _accuracy_prediction(series, series.points, target_flops, level=level,
                                             num_bootstrap=num_bootstrap, seed=seed)
        except UserError as exc:
            out["skipped"][name] = str(exc)
            continue
        out["by_task"][name] = {
            "chance": series.chance, "items": series.items, "metric": series.metric, **predicted,
            "backtest": _backtest(series, level=level, num_bootstrap=min(num_bootstrap, 400), seed=seed),
            "points": [{"rung": p.rung, "run": p.run, "flops": p.flops, "bpb": p.bpb, "acc": p.acc, "final": p.final}
                       for p in series.points],
        }
    fitted = out["by_task"].values()
    errors = [abs(t["backtest"]["error_points"]) for t in fitted if t["backtest"]]
    out["backtest_mean_abs_error_points"] = float(np.mean(errors)) if errors else None
    if fitted:
        out["macro"] = {"metric": "eval/task/macro/acc",
                        "point": float(np.mean([t["acc"]["point"] for t in fitted])),
                        # The tasks' intervals are not independent (one model): average their ends.
                        "lo": float(np.mean([t["acc"]["lo"] for t in fitted])),
                        "hi": float(np.mean([t["acc"]["hi"] for t in fitted])),
                        "chance": float(np.mean([t["chance"] for t in fitted])), "level": level}
    return out


def registry_entries(fit: dict[str, Any], target: str) -> list[dict[str, Any]]:
    """The hero's task predictions from a fit.json dict, as keyword arguments of
    :func:`glasslab.lab.registry.register` (all but ``lab_root`` and ``source``).

    ``target`` is what they are about (the hero's step name). Names are ``<ladder>/hero/task/<task>``
    and ``<ladder>/hero/task/macro``; empty when the fit has no task laws.
    """
    tasks = fit.get("tasks") or {}
    entries = []
    for name, law in sorted((tasks.get("by_task") or {}).items()):
        acc = law["acc"]
        entries.append({"name": f"{fit['ladder']}/hero/task/{name}", "metric": f"eval/task/{name}/{law['metric']}",
                        "point": acc["point"], "low": acc["lo"], "high": acc["hi"], "level": acc["level"],
                        "target": target, "details": {"chance": law["chance"], "items": law["items"],
                                                      "bpb": law["bpb"], "sigmoid": law["sigmoid"],
                                                      "backtest": law["backtest"]}})
    macro = tasks.get("macro")
    if macro:
        entries.append({"name": f"{fit['ladder']}/hero/task/macro", "metric": macro["metric"], "point": macro["point"],
                        "low": macro["lo"], "high": macro["hi"], "level": macro["level"], "target": target,
                        "details": {"chance": macro["chance"], "tasks": sorted(tasks["by_task"])}})
    return entries

