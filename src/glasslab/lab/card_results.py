"""An experiment card filled in from the lab: actual values, runs, incidents, compute, verdict.

:func:`card_results` reads only files the steps and the trainer wrote (``step.json``, ``result.json``,
the run stores read-only, the lab's event log, the prediction registry), so the same card comes out
of a lab at any time, live or long finished. The terminal (``glasslab card``), the Markdown export and
the observatory's card page all draw this one dict; numbers in it are pre-formatted (``*_text``) so
every place shows the same digits.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

from glasslab import sources
from glasslab.errors import UserError
from glasslab.lab.card import card_versions, conclusions, decide, experiment_runs
from glasslab.lab.registry import gate_status, predictions
from glasslab.lab.status import read_step_record
from glasslab.layout import FIT_FILE, METRICS_DB, REPORT_FILE, RESULT_FILE, STEP_RECORD
from glasslab.track.lab_events import read_lab_events
from glasslab.track.reader import RunReader

LAB_INCIDENT_KINDS = ("step_retried", "step_failed", "node_lost", "prediction_replaced", "prediction_refused",
                      "prediction_forced")
"""Lab events about a step that a card lists as incidents."""
RUN_INCIDENT_KINDS = ("rollback", "spike_skipped", "prediction_out_of_band", "nonfinite", "checkpoint_fallback",
                      "preempted", "resume", "fork", "sink_failed", "note")
"""Run-store events a card lists as incidents (notes included: a person's remark belongs in the story)."""
INCIDENT_WORDS = {"rollback": "rollback", "spike_skipped": "spike skipped", "prediction_out_of_band": "out of band",
                  "nonfinite": "non-finite step", "checkpoint_fallback": "checkpoint fallback",
                  "preempted": "preempted", "resume": "resume", "fork": "fork", "sink_failed": "sink failed",
                  "note": "note", "step_retried": "retry", "step_failed": "failure", "node_lost": "node lost",
                  "prediction_replaced": "prediction replaced", "prediction_refused": "prediction REFUSED by the gate",
                  "prediction_forced": "hero FORCED on a refused fit"}


def number_text(value: float | None) -> str:
    """One way to write a card's numbers everywhere: 4 decimals in [0.001, 100) (losses), one decimal
    with thousands separators in [100, 1e6) (throughputs), else 4 significant digits."""
    if value is None:
        return "–"
    if value == 0 or 1e-3 <= abs(value) < 100:
        return f"{value:.4f}"
    if 100 <= abs(value) < 1e6:
        return f"{value:,.1f}"
    return f"{value:.4g}"


def band_text(low: float | None, high: float | None) -> str:
    if low is None and high is None:
        return "–"
    if low is None:
        return f"≤ {number_text(high)}"
    if high is None:
        return f"≥ {number_text(low)}"
    return f"[{number_text(low)}, {number_text(high)}]"


def card_results(lab_root: str | Path, name: str) -> dict[str, Any]:
    """Experiment ``name``'s card with its results, from its latest run in ``lab_root``.

    Keys: ``name``, ``title``, ``question``, ``design``, ``version`` and ``versions`` (each stored card
    version: number, hash, stored_at), ``status`` (pending|running|failed|succeeded), ``expectations``
    (name, source, floor (where a ladder prediction's loss floor came from), metric, step, folder, page,
    low, high, point, unit, actual, so_far, inside, and their ``*_text``; ``actual_display``), ``steps``
    (name, folder, status, attempts, seconds, page, figures: a fit's PNGs),
    ``incidents`` (kind, word, folder, page, at_step, time, title, severity), ``totals`` (flops,
    step_seconds, wall_seconds, tokens), ``verdict`` (confirmed|refuted|open), ``verdict_text``,
    ``conclusions``. Raises UserError when the experiment has not run in this lab.
    """
    root = Path(lab_root)
    runs = experiment_runs(root, name)
    if not runs:
        raise UserError(f"experiment {name!r}: it has not run in lab {root}; run it first "
                        f"(glasslab run {name} --lab {root})")
    latest = runs[-1]
    versions = card_versions(root, name)
    version = latest.get("card_version")
    card = versions[version - 1]["card"] if version else None
    folders: dict[str, str] = latest["steps"]
    steps = [_step_row(root, step, folder) for step, folder in folders.items()]
    expectations = [_expectation(root, e, folders) for e in (card or {}).get("expectations", [])]
    for e in expectations:
        e["sources"] = _expectation_sources(root, e)
    pages = {s["folder"]: s["page"] for s in steps}
    for e in expectations:
        e["page"] = pages.get(e["folder"])
    verdict = decide([e["inside"] for e in expectations])
    return {
        "name": name, "title": (card or {}).get("title") or name, "question": (card or {}).get("question", ""),
        "design": (card or {}).get("design", ""), "has_card": card is not None, "version": version,
        "versions": [{k: v.get(k) for k in ("version", "hash", "stored_at")} | {"commit": (v.get("code") or {})
                      .get("commit")} for v in versions],
        "started_at": latest.get("started_at"), "status": _status(steps), "expectations": expectations,
        "steps": steps, "incidents": _incidents(root, folders), "totals": _totals(root, steps),
        "verdict": verdict, "verdict_text": _verdict_text(verdict, expectations),
        "conclusions": conclusions(root, name),
    }


def _step_row(root: Path, step: str, folder: str) -> dict[str, Any]:
    path = root / folder
    record = read_step_record(path) or {}
    # Compute counts only from a training run's result.json (a fit's result names its target's FLOPs).
    result = _read_result(path) if (path / RESULT_FILE).is_file() else {}
    page = ("run" if (path / METRICS_DB).is_file() else "ladder" if (path / FIT_FILE).is_file()
            else "data" if (path / REPORT_FILE).is_file() else None)
    return {"name": step, "folder": folder, "status": record.get("status", "missing"),
            "attempts": record.get("attempts"), "seconds": (record.get("timings") or {}).get("duration_s"),
            "started": (record.get("timings") or {}).get("started"),
            "finished": (record.get("timings") or {}).get("finished"), "page": page,
            "flops": _number(result.get("flops")), "tokens": _number(result.get("tokens")),
            "figures": sorted(p.name for p in path.glob("*.png")) if page == "ladder" else []}


def _result_file(folder: Path) -> tuple[str, str]:
    """The file :func:`_read_result` reads in ``folder`` and the key prefix of a result inside it."""
    for name in (RESULT_FILE, FIT_FILE):
        if (folder / name).is_file():
            return name, ""
    return STEP_RECORD, "result."


def _expectation_sources(root: Path, e: dict[str, Any]) -> dict[str, Any]:
    """Where an expectation's numbers come from: the actual value's file and key (a running run's value so
    far: its store), and a registered prediction's fit (``glasslab ladder fit`` for the loss it targets,
    else its fit.json) or registry entry."""
    lab_name, out = root.resolve().name, {}
    folder = e.get("folder")
    if folder and e["metric"]:
        if e["actual"] is not None:
            file, prefix = _result_file(root / folder)
            out["actual"] = sources.read_from(lab_name, folder, file, prefix + e["metric"])
        elif e["so_far"] is not None:
            out["actual"] = sources.logged(lab_name, folder, e["metric"])
    if e["point"] is not None and e.get("registry"):
        fit_folder = e.get("registry_source") or ""
        fit = _read_json(root / fit_folder / FIT_FILE) if fit_folder else None
        if fit is not None and e["metric"] == fit.get("target"):
            config = (read_step_record(root / fit_folder) or {}).get("config")
            out["predicted"] = sources.ladder_fit(lab_name, fit_folder, fit, config)
        else:
            out["predicted"] = sources.registry_entry(lab_name, e["registry"])
    return out


def _read_json(path: Path) -> dict[str, Any] | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _read_result(folder: Path) -> dict[str, Any]:
    """A training run's ``result.json``, a ladder fit's ``fit.json``, or else the ``result`` the step's
    function returned (``step.json``)."""
    for name in (RESULT_FILE, FIT_FILE):
        try:
            return json.loads((folder / name).read_text(encoding="utf-8"))
        except (FileNotFoundError, json.JSONDecodeError):
            continue
    result = (read_step_record(folder) or {}).get("result")
    return result if isinstance(result, dict) else {}


def _lookup(result: dict[str, Any], metric: str) -> Any:
    """``result[metric]``, or a dotted path into nested objects (``backtest.last.rel_error_pct``)."""
    if metric in result:
        return result[metric]
    value: Any = result
    for part in metric.split("."):
        if not isinstance(value, dict):
            return None
        value = value.get(part)
    return value


def _expectation(root: Path, e: dict[str, Any], folders: dict[str, str]) -> dict[str, Any]:
    row = {"name": e["name"], "unit": e.get("unit", ""), "point": None, "registered": None,
           "registry": e.get("prediction") or None, "registry_source": None}
    if e.get("prediction"):
        entry = predictions(root).get(e["prediction"])
        floor, status = _floor_text(entry), gate_status(entry)
        row.update(source=f"registry: {e['prediction']}" + (f"; floor {floor}" if floor else "")
                   + (f"; {status}" if status else ""), floor=floor, gate_status=status,
                   metric=(entry or {}).get("metric", ""),
                   step=(entry or {}).get("target", ""), low=(entry or {}).get("low"),
                   high=(entry or {}).get("high"), point=(entry or {}).get("point"),
                   registered=(entry or {}).get("registered_at"), registry_source=(entry or {}).get("source"))
    else:
        row.update(source="card", floor="", metric=e["metric"], step=e["step"], low=e.get("low"),
                   high=e.get("high"))
    folder = folders.get(row["step"])
    row["folder"] = folder
    actual = so_far = None
    if folder is not None and row["metric"]:
        path = root / folder
        if (read_step_record(path) or {}).get("status") == "succeeded":
            actual = _number(_lookup(_read_result(path), row["metric"]))
        elif (path / METRICS_DB).is_file():
            so_far = _last_scalar(path, row["metric"])
    low, high = row["low"], row["high"]
    inside = None if actual is None else ((low is None or actual >= low) and (high is None or actual <= high))
    row.update(actual=actual, so_far=so_far, inside=inside, band_text=band_text(low, high),
               point_text=number_text(row["point"]) if row["point"] is not None else "",
               actual_text=number_text(actual) if actual is not None else "missing",
               so_far_text=number_text(so_far) if so_far is not None else "",
               inside_text={True: "inside", False: "outside", None: "missing"}[inside])
    if row["registered"] is None and e.get("prediction"):
        row["actual_text"] = "missing (not registered yet)"
    # What every view prints in the "actual" column: a running run's value so far does not count.
    row["actual_display"] = row["actual_text"] + (f" (so far {row['so_far_text']})" if row["so_far_text"] else "")
    return row


def _floor_text(entry: dict[str, Any] | None) -> str:
    """Where a registered ladder prediction's loss floor came from (its ``details.L_inf``): the ladder's
    words when it wrote them, else the mode and value; empty for other predictions."""
    floor = ((entry or {}).get("details") or {}).get("L_inf")
    if not isinstance(floor, dict):
        return ""
    if isinstance(floor.get("text"), str):
        return floor["text"]
    value = floor.get("value")
    return f"{floor.get('mode', '?')} at L∞ = {value:.3g}" if isinstance(value, (int, float)) else ""


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _last_scalar(folder: Path, metric: str) -> float | None:
    try:
        with RunReader(folder) as reader:
            last = reader.last(metric)
    except (UserError, sqlite3.Error):
        return None
    return None if last is None else last[1]


def _status(steps: list[dict[str, Any]]) -> str:
    statuses = {s["status"] for s in steps}
    for status in ("running", "failed"):
        if status in statuses:
            return status
    return "succeeded" if statuses == {"succeeded"} else "pending"


def _incidents(root: Path, folders: dict[str, str]) -> list[dict[str, Any]]:
    """Retries, failures, replaced predictions (lab log) and rollbacks, spikes, out-of-band excursions,
    resumes, forks, notes (run stores), oldest first."""
    by_folder = {folder: step for step, folder in folders.items()}
    incidents = []
    try:
        lab_events = read_lab_events(root)
    except sqlite3.Error:
        lab_events = []
    for event in lab_events:
        if event["subject"] in by_folder and event["kind"] in LAB_INCIDENT_KINDS:
            incidents.append(_incident(event, event["subject"], None, root))
    for folder in folders.values():
        if not (root / folder / METRICS_DB).is_file():
            continue
        try:
            with RunReader(root / folder) as reader:
                events = reader.events()
        except (UserError, sqlite3.Error):
            continue
        # A run's first attempt also logs a "resume" row only when it resumed; a fresh start has none.
        incidents += [_incident(e, folder, e["step"], root) for e in events if e["kind"] in RUN_INCIDENT_KINDS]
    return sorted(incidents, key=lambda i: i["time"])


def _incident(event: dict[str, Any], folder: str, at_step: int | None, root: Path) -> dict[str, Any]:
    page = "run" if (root / folder / METRICS_DB).is_file() else None
    return {"kind": event["kind"], "word": INCIDENT_WORDS.get(event["kind"], event["kind"]), "folder": folder,
            "page": page, "at_step": at_step, "time": event["time"], "title": event["title"],
            "severity": event["severity"]}


def _totals(root: Path, steps: list[dict[str, Any]]) -> dict[str, Any]:
    flops = sum(s["flops"] or 0 for s in steps)
    tokens = sum(s["tokens"] or 0 for s in steps)
    seconds = sum(s["seconds"] or 0 for s in steps)
    started = [s["started"] for s in steps if s["started"]]
    finished = [s["finished"] for s in steps if s["finished"]]
    wall = max(finished) - min(started) if started and finished else None
    return {"flops": flops, "tokens": tokens, "step_seconds": round(seconds, 1),
            "wall_seconds": None if wall is None else round(wall, 1),
            "source": sources.summed(root.resolve().name, [s["folder"] for s in steps if s["flops"] or s["tokens"]],
                                     RESULT_FILE, "flops and tokens"),
            "text": f"{flops:.3g} training FLOPs, {tokens:,.0f} tokens, {seconds:,.0f} step-seconds"
                    + ("" if wall is None else f", {wall:,.0f} s wall")}


def _verdict_text(verdict: str, expectations: list[dict[str, Any]]) -> str:
    if not expectations:
        return "open: the card states no expectations"
    inside = sum(e["inside"] is True for e in expectations)
    if verdict == "confirmed":
        return f"confirmed: {inside} of {len(expectations)} expectations inside their bands"
    if verdict == "refuted":
        outside = [e for e in expectations if e["inside"] is False]
        return "refuted: " + "; ".join(f"{e['name']} {e['actual_text']} outside {e['band_text']}" for e in outside)
    missing = [e["name"] for e in expectations if e["inside"] is None]
    return f"open: {inside} of {len(expectations)} inside, still missing: {', '.join(missing)}"
