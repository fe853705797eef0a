"""Pre-registration: the hero's prediction is registered before its step 0, then watched as it trains.

:func:`register_hero_prediction` puts the fit's prediction for the hero into the lab's append-only
registry (``glasslab.lab.registry``) under ``<ladder>/hero/eval/macro/loss`` before the hero starts — or,
when the registration gate refused the fit (``fit.json``'s ``gate``, ``glasslab.ladder.gate``), records the
refusal there and stops the hero unless the run was started with ``--force-registration``, which marks
the entry and the hero's run forced — and
:func:`register_task_predictions` its predicted task accuracies beside it;
it outlives ``glasslab run --force`` (a rerun with the same numbers is a no-op, other numbers are
refused unless the run was started with ``--re-register``, which records an incident).
:func:`hero_record_extra` is what the hero's run passes as ``record_extra``: the run store writes it
into ``run.json`` once, before the first step, so the hero's folder keeps its own copy of the
prediction (point, 90% interval, the curve every 5%, the law, L∞ and its sweep, the rungs it came
from, the registry entry).

While the hero trains, :class:`BandWatcher` (a trainer callback) compares each eval's
``eval/macro/loss`` with the band at that point of training and records a ``prediction_out_of_band``
event each time the loss leaves it (not at every eval while it stays out). :func:`check_live_loss`
applies the same rule afterwards to a run's store, for a hero trained without the callback.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np

from glasslab import track
from glasslab.errors import UserError
from glasslab.lab import registry
from glasslab.ladder.rungs import TARGET_METRIC
from glasslab.ladder.task_law import registry_entries
from glasslab.layout import code_version
from glasslab.track.store import append_event
from glasslab.train.callbacks import Callback

EVENT_KIND = "prediction_out_of_band"


def prediction_name(ladder: str) -> str:
    """The registry name of a ladder's prediction for its hero: ``<ladder>/hero/eval/macro/loss``."""
    return f"{ladder}/hero/{TARGET_METRIC}"


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
        "gate": fit_gate(fit),
        "forced": False,
        "registered_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "code": code_version(),
    }


def fit_gate(fit: dict[str, Any]) -> dict[str, Any]:
    """``fit``'s gate record; a fit written before the gate has none and is refused (refit it)."""
    return fit.get("gate") or {"registered": False, "checks": [], "flags": [],
                               "reasons": ["no registration gate in fit.json (written before the gate); refit"]}


def register_hero_prediction(lab_root: str | Path, fit: dict[str, Any], *, target: str, source: str,
                             replace: bool = False, forced: bool = False) -> dict[str, Any]:
    """Register ``fit``'s prediction for the hero step ``target`` (made by the fit folder ``source``) in
    the lab's registry — a refusal with the gate's reasons when the gate refused the fit, marked forced
    when ``forced`` — and return the entry in force. A UserError when other numbers are registered under
    the same name and ``replace`` is false, or when the fit is refused and not ``forced`` (after the
    refusal is recorded)."""
    record = prediction_record(fit)
    prediction, gate = fit["prediction"], record["gate"]
    details = {k: record[k] for k in ("flops", "curve", "law", "L_inf", "rungs", "backtest_rel_error_pct")}
    refused = not gate["registered"]
    entry = registry.register(lab_root, prediction_name(fit["ladder"]), metric=TARGET_METRIC,
                              point=prediction["point"], low=prediction["lo"], high=prediction["hi"],
                              level=prediction["level"], target=target, source=source, details=details,
                              replace=replace, kind="refusal" if refused else "prediction",
                              forced=refused and forced, gate=gate)
    if refused and not forced:
        reasons = "; ".join(gate["reasons"])
        raise UserError(f"ladder {fit['ladder']}: the registration gate refused the fit ({reasons}); "
                        "the refusal is in the lab's registry. Expected an identified fit, or --force-registration "
                        "to train the hero anyway, marked forced")
    return entry


def register_task_predictions(lab_root: str | Path, fit: dict[str, Any], *, target: str, source: str,
                              replace: bool = False, forced: bool = False) -> list[dict[str, Any]]:
    """Register ``fit``'s task-accuracy predictions for the hero step ``target`` (``<ladder>/hero/task/<task>``
    and ``.../macro``, see :func:`glasslab.ladder.task_law.registry_entries`); returns the entries in force,
    none when the fit has no task laws. Refused as :func:`register_hero_prediction` is."""
    return [registry.register(lab_root, **entry, source=source, replace=replace, forced=forced)
            for entry in registry_entries(fit, target)]


def hero_record_extra(fit: dict[str, Any], planned: dict[str, Any] | None = None,
                      registered: dict[str, Any] | None = None) -> dict[str, Any]:
    """``record_extra`` for the hero's run: ``role``, ``ladder`` and the ``prediction``.

    ``planned`` is the hero's :func:`glasslab.ladder.plan.rung_record_extra` (steps, FLOPs, …);
    ``registered`` the registry entry (its time, code and sequence number become the copy's).
    """
    prediction = prediction_record(fit)
    if registered is not None:
        prediction.update(registered_at=registered["registered_at"], code=registered["code"],
                          forced=registered["forced"], registry={"name": registered["name"], "seq": registered["seq"]})
    return {**(planned or {}), "role": "hero", "ladder": fit["ladder"], "prediction": prediction}


def band_at(prediction: dict[str, Any], fraction: float) -> tuple[float, float, float] | None:
    """(point, lo, hi) at ``fraction`` of training, linear between curve points; None outside the curve."""
    curve = prediction.get("curve") or []
    fractions = [c["fraction"] for c in curve]
    if not curve or not fractions[0] <= fraction <= fractions[-1]:
        return None
    return tuple(float(np.interp(fraction, fractions, [c[k] for c in curve])) for k in ("point", "lo", "hi"))


class BandWatch:
    """The rule for excursions: an eval loss outside the band after being inside it (or at the first
    eval seen) is one; the evals that stay outside after it are not."""

    def __init__(self, prediction: dict[str, Any], total_steps: int, was_inside: bool = True) -> None:
        self.prediction = prediction
        self.total_steps = total_steps
        self.was_inside = was_inside

    def observe(self, step: int, loss: float) -> dict[str, Any] | None:
        """The excursion that starts at ``step`` (``step``, ``loss``, ``point``, ``lo``, ``hi``, ``title``,
        ``body``), or None."""
        band = band_at(self.prediction, step / self.total_steps)
        if band is None:
            return None
        point, lo, hi = band
        inside = lo <= loss <= hi
        started = not inside and self.was_inside
        self.was_inside = inside
        if not started:
            return None
        side = "above" if loss > hi else "below"
        return {
            "step": step, "loss": loss, "point": point, "lo": lo, "hi": hi,
            "title": f"eval loss {loss:.4f} left the predicted band ({side} [{lo:.4f}, {hi:.4f}])",
            "body": f"At step {step} ({step / self.total_steps:.0%} of training) {TARGET_METRIC} = {loss:.4f}; "
                    f"the pre-registered prediction was {point:.4f} with 90% band [{lo:.4f}, {hi:.4f}].",
        }


class BandWatcher(Callback):
    """The hero's callback: each eval's loss against the pre-registered band, an event when it leaves it.
    Whether the loss was inside at the last eval is its state, so a resumed hero does not report an
    excursion twice."""

    def __init__(self, prediction: dict[str, Any]) -> None:
        self.prediction = prediction
        self.was_inside = True

    def on_eval(self, trainer: Any, metrics: dict[str, float]) -> None:
        if TARGET_METRIC not in metrics or trainer.run is None:
            return
        watch = BandWatch(self.prediction, trainer.cfg.total_steps, self.was_inside)
        excursion = watch.observe(trainer.step, metrics[TARGET_METRIC])
        self.was_inside = watch.was_inside
        if excursion is not None:
            trainer.run.annotate(EVENT_KIND, excursion["title"], excursion["body"], step=trainer.step,
                                 severity="warning")

    def state_dict(self) -> dict[str, Any]:
        return {"was_inside": self.was_inside}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.was_inside = state["was_inside"]


def check_live_loss(run_dir: str | Path) -> list[dict[str, Any]]:
    """Record a ``prediction_out_of_band`` event wherever the hero's logged eval loss left its band.

    Reads ``run.json`` (``prediction`` and planned ``steps``) and the logged ``eval/macro/loss``, applies
    :class:`BandWatch`'s rule and skips steps already reported, so calling it again is safe. Returns the
    events added (``step``, ``loss``, ``lo``, ``hi``).
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
    watch, added = BandWatch(prediction, steps_total), []
    for step, loss in zip(steps, losses, strict=True):
        excursion = watch.observe(step, loss)
        if excursion is not None and step not in reported:
            append_event(run_dir, EVENT_KIND, excursion["title"], excursion["body"], step=step, severity="warning")
            added.append({k: excursion[k] for k in ("step", "loss", "lo", "hi")})
    return added
