"""The ladder's outcome in one place: rungs, the fit, and the hero's predicted vs actual loss.

Read from the files the steps wrote (``fit.json``, the hero's ``run.json`` and ``result.json``), so
the same summary comes out of a finished lab at any later time.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glasslab import track
from glasslab.ladder.fit import TARGET_METRIC, read_fit
from glasslab.layout import FIT_FILE, RESULT_FILE


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


def summary_tables(fit_dir: str | Path, hero_dir: str | Path) -> list[Any]:
    """Rich tables: the rungs, the fit with its back-test, and the hero's predicted vs actual loss."""
    from rich.table import Table

    fit = read_fit(Path(fit_dir) / FIT_FILE)
    rungs = Table(title=f"ladder {fit['ladder']}: rungs ({TARGET_METRIC}, nats/token)")
    for column in ("rung", "size", "tokens", "FLOPs", "seeds", "final loss"):
        rungs.add_column(column, justify="left" if column in ("rung", "size") else "right")
    for r in fit["rungs"]:
        spread = f" ± {r['loss_std']:.3f}" if len(r["losses"]) > 1 else ""
        rungs.add_row(r["name"], r["size_name"], f"{r['tokens']:.3g}", f"{r['flops']:.3g}", str(len(r["losses"])),
                      f"{r['loss_mean']:.4f}{spread}")

    law = fit["law"]
    params = ", ".join(f"{k}={v:.4g}" for k, v in law["params"].items())
    fit_table = Table(title="fit", show_header=False)
    fit_table.add_row("law", f"{law['form']}  ({params})")
    fit_table.add_row("asymptote", f"L∞ {fit['L_inf']['mode']} at {fit['L_inf']['value']:.3f}, "
                      f"swept over {fit['L_inf']['sweep']}")
    last = fit["backtest"].get("last")
    if last:
        fit_table.add_row("back-test", f"leave-last-rung-out: predicted {last['point']:.4f} vs measured "
                          f"{last['measured']:.4f} for {last['held_out']} ({last['rel_error_pct']:+.2f}%, "
                          f"{last['extrapolation']:.1f}× extrapolation)")

    hero = hero_outcome(hero_dir)
    hero_table = Table(title=f"hero {hero.run_id} ({hero.size_name}, {hero.flops:.3g} FLOPs)")
    for column in ("predicted", "90% interval", "actual", "relative error", "inside band"):
        hero_table.add_column(column, justify="right")
    actual = "-" if hero.actual is None else f"{hero.actual:.4f}"
    error = "-" if hero.rel_error_pct is None else f"{hero.rel_error_pct:+.2f}%"
    inside = "-" if hero.inside is None else ("yes" if hero.inside else "no")
    hero_table.add_row(f"{hero.predicted:.4f}", f"[{hero.lo:.4f}, {hero.hi:.4f}]", actual, error, inside)
    return [rungs, fit_table, hero_table]
