"""Pre-registration: the hero's prediction is fixed in its run record before step 0, then checked.

:func:`hero_record_extra` is what the runner passes as ``record_extra`` when it starts the hero: the
run store writes it into ``run.json`` once, before the first step, and never rewrites it, so the
prediction (point, 90% interval, the curve every 5%, the law, L∞ and its sweep, the rungs it came
from, the code version, the time) cannot drift after the fact. :func:`check_live_loss` compares the
hero's logged ``eval/macro/loss`` with that band and records a ``prediction_out_of_band`` event each
time the loss leaves it (not at every eval while it stays out), from any process.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from glasslab import track
from glasslab.errors import UserError
from glasslab.ladder.fit import TARGET_METRIC
from glasslab.layout import METRICS_DB, code_version
from glasslab.track.store import append_event

EVENT_KIND = "prediction_out_of_band"


def prediction_record(fit: dict[str, Any]) -> dict[str, Any]:
    """The pre-registered prediction: fit.json's ``prediction`` plus curve, inputs, code and time."""
    return {
        **fit["prediction"],
        "target": fit["target"],
        "curve": fit["curve"],
        "ladder": fit["ladder"],
        "L_inf": fit["L_inf"],
        "law": {"form": fit["law"]["form"], "params": fit["law"]["params"]},
        "rungs": [run_id for rung in fit["rungs"] for run_id in rung["run_ids"]],
        "backtest_rel_error_pct": (fit["backtest"]["last"] or {}).get("rel_error_pct"),
        "registered_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "code": code_version(),
    }


def hero_record_extra(fit: dict[str, Any], planned: dict[str, Any] | None = None) -> dict[str, Any]:
    """``record_extra`` for the hero's run: ``role``, ``ladder`` and the ``prediction``.

    ``planned`` is the hero's :func:`glasslab.ladder.plan.rung_record_extra` (steps, FLOPs, …).
    """
    return {**(planned or {}), "role": "hero", "ladder": fit["ladder"], "prediction": prediction_record(fit)}


def band_at(prediction: dict[str, Any], fraction: float) -> tuple[float, float, float] | None:
    """(point, lo, hi) at ``fraction`` of training, linear between curve points; None outside the curve."""
    curve = prediction.get("curve") or []
    fractions = [c["fraction"] for c in curve]
    if not curve or not fractions[0] <= fraction <= fractions[-1]:
        return None
    return tuple(float(np.interp(fraction, fractions, [c[k] for c in curve])) for k in ("point", "lo", "hi"))


def check_live_loss(run_dir: str | Path) -> list[dict[str, Any]]:
    """Record a ``prediction_out_of_band`` event wherever the hero's eval loss leaves its band.

    Reads ``run.json`` (``prediction`` and planned ``steps``) and the logged ``eval/macro/loss``; an
    event is added at each eval step where the loss is outside the band after being inside it (or at
    the first eval); steps already reported are skipped, so calling it after every eval is safe.
    Returns the events added (``step``, ``loss``, ``lo``, ``hi``).
    """
    run_dir = Path(run_dir)
    record = track.read_record(run_dir) or {}
    prediction, steps_total = record.get("prediction"), record.get("steps")
    if not prediction or not steps_total:
        raise UserError(f"{run_dir}/run.json: no pre-registered prediction with planned steps; expected a "
                        "hero run started with hero_record_extra")
    with track.RunReader(run_dir) as reader:
        steps, losses = reader.scalars(TARGET_METRIC)
        reported = {e["step"] for e in reader.events() if e["kind"] == EVENT_KIND}
    added, was_inside = [], True
    for step, loss in zip(steps, losses, strict=True):
        band = band_at(prediction, step / steps_total)
        if band is None:
            continue
        point, lo, hi = band
        inside = lo <= loss <= hi
        if not inside and was_inside and step not in reported:
            side = "above" if loss > hi else "below"
            title = f"eval loss {loss:.4f} left the predicted band ({side} [{lo:.4f}, {hi:.4f}])"
            body = (f"At step {step} ({step / steps_total:.0%} of training) {TARGET_METRIC} = {loss:.4f}; "
                    f"the pre-registered prediction was {point:.4f} with 90% band [{lo:.4f}, {hi:.4f}].")
            append_event(run_dir, EVENT_KIND, title, body, step=step, severity="warning")
            added.append({"step": step, "loss": loss, "lo": lo, "hi": hi})
        was_inside = inside
    return added


@contextlib.contextmanager
def watching_band(run_dir: str | Path, every: float = 0.5) -> Iterator[None]:
    """Run :func:`check_live_loss` every ``every`` seconds beside the block (the hero's training), and
    once more at its end, so an excursion is recorded while the run goes, not after it."""
    stop = threading.Event()

    def check() -> None:
        if (Path(run_dir) / METRICS_DB).is_file() and track.read_record(run_dir) is not None:
            check_live_loss(run_dir)

    def loop() -> None:
        while not stop.wait(every):
            check()

    thread = threading.Thread(target=loop, name="band-watch", daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()
        check()
