"""The ladder's outcome as a person reads it: the rungs, the fit, and the hero's predicted vs actual loss.

One set of tables for every place that shows a fit (``glasslab ladder fit``, ``glasslab demo``), read
from the files the steps wrote (``fit.json``, the hero's ``run.json`` and ``result.json``), so the
same summary comes out of a finished lab at any later time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glasslab import track
from glasslab.ladder.fit import read_fit
from glasslab.ladder.rungs import TARGET_METRIC
from glasslab.layout import FIT_FILE, RESULT_FILE

MAX_RUNG_ROWS = 30
"""A fit of more rungs (a published isoFLOP grid) lists them in fit.json, not on the terminal."""


@dataclass(frozen=True)
class HeroOutcome:
    """The hero's pre-registered prediction and what it reached (nats per token)."""

    run_id: str
    size_name: str
    flops: float
    predicted: float
    lo: float
    hi: float
    actual: float | None

    @property
    def rel_error_pct(self) -> float | None:
        """(predicted − actual) / actual in percent; None until the hero has a final eval."""
        return None if self.actual is None else 100.0 * (self.predicted - self.actual) / self.actual

    @property
    def inside(self) -> bool | None:
        return None if self.actual is None else self.lo <= self.actual <= self.hi


def hero_outcome(hero_dir: str | Path) -> HeroOutcome:
    """The hero's prediction (from its run.json, as registered) and its final eval loss."""
    hero_dir = Path(hero_dir)
    record = track.read_record(hero_dir) or {}
    prediction = record["prediction"]
    result_path = hero_dir / RESULT_FILE
    actual = json.loads(result_path.read_text()).get(TARGET_METRIC) if result_path.is_file() else None
    return HeroOutcome(hero_dir.name, record.get("size_name", ""), float(prediction["flops"]),
                       float(prediction["point"]), float(prediction["lo"]), float(prediction["hi"]), actual)


def rungs_table(fit: dict[str, Any]) -> Any:
    """The rungs a fit used: size, tokens, compute, seeds and final loss (mean ± spread)."""
    from rich.table import Table

    table = Table(title=f"ladder {fit['ladder']}: rungs ({TARGET_METRIC}, nats/token)")
    for column in ("rung", "size", "tokens", "FLOPs", "seeds", "final loss"):
        table.add_column(column, justify="left" if column in ("rung", "size") else "right")
    for r in fit["rungs"]:
        spread = f" ± {r['loss_std']:.3f}" if len(r["losses"]) > 1 else ""
        table.add_row(r["name"], r["size_name"], f"{r['tokens']:.3g}", f"{r['flops']:.3g}", str(len(r["losses"])),
                      f"{r['loss_mean']:.4f}{spread}")
    return table


def fit_table(fit: dict[str, Any]) -> Any:
    """The fitted law with standard errors, the prediction with its interval (and over the asymptote
    sweep), the back-test and approach 3."""
    from rich.table import Table

    law, pred, rungs = fit["law"], fit["prediction"], fit["rungs"]
    table = Table(title="fit", show_header=False)
    params = ", ".join(f"{k}={v:.4g} ± {law['param_se'].get(k, 0.0):.2g}" for k, v in law["params"].items())
    table.add_row("law", f"{law['form']}  ({params})")
    table.add_row("fitted on", f"{len(law['fitted_on'])} of {len(rungs)} rungs "
                  f"({sum(len(r['losses']) for r in rungs)} losses), "
                  f"{min(r['flops'] for r in rungs):.3g}–{max(r['flops'] for r in rungs):.3g} FLOPs")
    table.add_row("asymptote", f"L∞ {fit['L_inf']['mode']} at {fit['L_inf']['value']:.3f}"
                  + (f", swept over {fit['L_inf']['sweep']}" if fit["L_inf"]["sweep"] else ""))
    table.add_row(f"prediction at {pred['flops']:.3g} FLOPs",
                  f"{pred['point']:.4f}, interval [{pred['lo']:.4f}, {pred['hi']:.4f}] ({pred['level']:.0%})")
    gate = fit.get("gate")
    if gate is not None:
        table.add_row("registration gate", "registers" if gate["registered"]
                      else "REFUSED: " + "; ".join(gate["reasons"]))
        for flag in gate["flags"]:
            table.add_row("  flag", flag)
    for row in fit["sweep_table"]:
        table.add_row(f"  if L∞ = {row['L_inf']:.4g}", f"{row['point']:.4f} [{row['lo']:.4f}, {row['hi']:.4f}]")
    last = fit["backtest"].get("last")
    if last:
        table.add_row("back-test", f"leave-last-rung-out: predicted {last['point']:.4f} vs measured "
                      f"{last['measured']:.4f} for {last['held_out']} ({last['rel_error_pct']:+.2f}%, "
                      f"{last['extrapolation']:.1f}× extrapolation)")
    if fit["backtest"].get("mean_abs_rel_error_pct") is not None:
        table.add_row("back-test mean", f"|error| {fit['backtest']['mean_abs_rel_error_pct']:.2f}% over "
                      f"{len(fit['backtest'].get('steps') or [])} held-out rung(s)")
    a3 = fit["approach3"]
    if a3["fitted"]:
        opt = a3["compute_optimal"]
        a3_params = ", ".join(f"{k}={v:.4g}" for k, v in a3["params"].items())
        gate = a3["gate"]
        verdict = "passes the gate" if gate["registered"] else "refused by the gate: " + "; ".join(gate["reasons"])
        table.add_row("approach 3", f"{a3['form']}  ({a3_params}); compute-optimal at {opt['flops']:.3g} FLOPs: "
                      f"N={opt['params_active']:.3g}, D={opt['tokens']:.3g}; {verdict}")
    else:
        table.add_row("approach 3", f"not fitted: {a3['reason']}")
    return table


def hero_table(hero_dir: str | Path) -> Any:
    """The hero's predicted vs actual final loss."""
    from rich.table import Table

    hero = hero_outcome(hero_dir)
    table = Table(title=f"hero {hero.run_id} ({hero.size_name}, {hero.flops:.3g} FLOPs)")
    for column in ("predicted", "90% interval", "actual", "relative error", "inside band"):
        table.add_column(column, justify="right")
    actual = "-" if hero.actual is None else f"{hero.actual:.4f}"
    error = "-" if hero.rel_error_pct is None else f"{hero.rel_error_pct:+.2f}%"
    inside = "-" if hero.inside is None else ("yes" if hero.inside else "no")
    table.add_row(f"{hero.predicted:.4f}", f"[{hero.lo:.4f}, {hero.hi:.4f}]", actual, error, inside)
    return table


def task_table(fit: dict[str, Any], hero_dir: str | Path | None = None) -> Any:
    """Per task (and the macro): chance, the hero's predicted accuracy with its interval, what it reached
    (its final evaluation, when ``hero_dir`` has one) and the leave-last-rung-out back-test error."""
    from rich.table import Table

    tasks = fit.get("tasks") or {}
    result_path = Path(hero_dir) / RESULT_FILE if hero_dir is not None else None
    actual = json.loads(result_path.read_text()) if result_path is not None and result_path.is_file() else {}
    table = Table(title=f"hero task accuracy ({tasks.get('level', 0.9):.0%} intervals; points = percentage points)")
    for column in ("task", "chance", "predicted", "interval", "actual", "back-test error"):
        table.add_column(column, justify="left" if column == "task" else "right")
    rows = [(name, law["chance"], law["acc"], f"eval/task/{name}/{law['metric']}",
             f"{law['backtest']['error_points']:+.1f} points" if law.get("backtest") else "-")
            for name, law in sorted((tasks.get("by_task") or {}).items())]
    if tasks.get("macro"):
        macro = tasks["macro"]
        error = tasks.get("backtest_mean_abs_error_points")
        rows.append(("macro", macro["chance"], macro, macro["metric"],
                     "-" if error is None else f"{error:.1f} points (mean |error|)"))
    for name, chance, acc, key, backtest in rows:
        reached = actual.get(key)
        table.add_row(name, f"{chance:.3f}", f"{acc['point']:.3f}", f"[{acc['lo']:.3f}, {acc['hi']:.3f}]",
                      "-" if reached is None else f"{reached:.3f}", backtest)
    return table


def summary_tables(fit_dir: str | Path, hero_dir: str | Path | None = None) -> list[Any]:
    """Rich tables: the rungs (when few enough to read), the fit, the hero's outcome when given, and the
    hero's task accuracies when the fit has task laws."""
    fit = read_fit(Path(fit_dir) / FIT_FILE)
    tables = [rungs_table(fit)] if len(fit["rungs"]) <= MAX_RUNG_ROWS else []
    tables.append(fit_table(fit))
    if hero_dir is not None:
        tables.append(hero_table(hero_dir))
    if (fit.get("tasks") or {}).get("by_task"):
        tables.append(task_table(fit, hero_dir))
    return tables
