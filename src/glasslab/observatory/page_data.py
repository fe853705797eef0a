"""The data behind each page, as plain JSON-ready dicts: one builder per page.

The live server answers ``/api/page/<page>`` with these and the static publisher writes the same
dicts into script files, so both sites show the same thing. Builders take ids from the lab scan and
return None for an unknown id (the caller answers 404). Configs and records are redacted; every
string goes to the browser as data and is rendered as text there.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from glasslab.layout import FIT_FILE, REPORT_FILE, RUN_RECORD, STEP_RECORD
from glasslab.observatory.lab_scan import Lab, read_json, read_redacted
from glasslab.observatory.series import DEFAULT_POINTS, clean, finite, interpolate, read_series, thin_vectors
from glasslab.track.lab_events import read_lab_events
from glasslab.track.reader import RunReader
from glasslab.track.store import LEASE_STALE_SECONDS

MAX_SAMPLES = 200
MAX_COMPARE_RUNS = 24
COMPARE_KEYS = ("train/loss", "eval/macro/loss")
LOSS_KEY = "eval/macro/loss"
TOKENS_KEY = "train/tokens"

# Run-page panels: (title, test on the metric name, log-scale y). First match wins; what no panel
# claims lands in a panel per top-level prefix.
PANELS = (
    ("Loss", lambda k: k in ("train/loss", "eval/macro/loss"), True),
    ("Learning rate", lambda k: k.startswith("optim/"), False),
    ("Gradient norm", lambda k: k.startswith("grad/norm/"), True),
    ("Parameter norms per group", lambda k: k.startswith("params/norm/"), False),
    ("Router bias norm (balancing state, not trained)", lambda k: k.endswith("/router_bias_norm"), False),
    ("MoE load violation", lambda k: k.startswith("moe/") and k.endswith("/load_max_violation"), False),
    ("MoE routing entropy", lambda k: k.startswith("moe/") and k.endswith("/routing_entropy"), False),
    ("MoE dropped tokens", lambda k: k.startswith("moe/") and k.endswith("/dropped_tokens"), False),
    ("Throughput (tokens/s)", lambda k: k == "throughput/tokens_per_second", False),
    ("MFU", lambda k: k == "throughput/mfu", False),
    ("Eval loss per domain", lambda k: k.startswith("eval/") and k.endswith("/loss"), False),
    ("Mixture weights in force", lambda k: k.startswith("mixture/weight/"), False),
    ("Passes over each domain's training data", lambda k: k.startswith("mixture/epochs/"), False),
    ("Eval bits per byte", lambda k: k.startswith("eval/") and k.endswith("/bpb"), False),
)


@contextmanager
def open_run(folder: Path) -> Iterator[RunReader | None]:
    """A reader for a run folder, or None when its store cannot be opened (being created, damaged)."""
    try:
        reader = RunReader(folder)
    except Exception:  # noqa: BLE001 - a page must render whatever state the folder is in
        yield None
        return
    try:
        yield reader
    finally:
        reader.close()


def group_panels(keys: list[str]) -> list[dict[str, Any]]:
    """Chart panels for a run's scalar keys, in the order of ``PANELS`` then by prefix."""
    panels: dict[str, dict[str, Any]] = {}
    for title, _, logy in PANELS:
        panels[title] = {"title": title, "keys": [], "logy": logy}
    for key in keys:
        title = next((t for t, match, _ in PANELS if match(key)), None)
        if title is None:
            title = key.split("/")[0] if "/" in key else "other"
            panels.setdefault(title, {"title": title, "keys": [], "logy": False})
        panels[title]["keys"].append(key)
    return [p for p in panels.values() if p["keys"]]


def flops_per_token(record: dict[str, Any] | None) -> float | None:
    """Training FLOPs per token from ``run.json`` (top level, or under ``model``/``accounting``)."""
    if not record:
        return None
    for holder in (record, record.get("model") or {}, record.get("accounting") or {}):
        if isinstance(holder, dict) and isinstance(holder.get("flops_per_token"), (int, float)):
            return float(holder["flops_per_token"])
    return None


def run_summary(lab: Lab, run_id: str) -> dict[str, Any]:
    """One line of the overview for a run: status, role, size, latest loss and tokens, prediction."""
    folder = lab.index().runs[run_id]
    record = read_json(folder / RUN_RECORD) or {}
    step = read_json(folder / STEP_RECORD) or {}
    summary: dict[str, Any] = {
        "id": run_id, "role": record.get("role"), "ladder": record.get("ladder"),
        "size_name": record.get("size_name"), "started": record.get("started"),
        "status": step.get("status"), "step": None, "loss": None, "tokens": None, "eval_loss": None,
        "predicted": None, "unreadable": False,
    }
    prediction = record.get("prediction")
    if isinstance(prediction, dict):
        summary["predicted"] = {k: finite(prediction.get(k)) for k in ("point", "lo", "hi")}
    with open_run(folder) as reader:
        if reader is None:
            summary["unreadable"] = True
            return summary
        try:
            summary["status"] = run_status(reader.meta("writer"), reader.meta("status"), summary["status"])
            for field, key in (("loss", "train/loss"), ("tokens", TOKENS_KEY), ("eval_loss", LOSS_KEY)):
                last = reader.last(key)
                if last is not None:
                    summary[field] = finite(last[1])
                    if field == "loss":
                        summary["step"] = last[0]
        except sqlite3.Error:
            summary["unreadable"] = True
    return summary


def run_status(writer: Any, stored: Any, step_status: Any) -> str:
    """``running`` while a writer holds the lease and beats, ``stalled`` when its heartbeat stopped
    (a killed trainer leaves its lease), else the status the last writer recorded at close."""
    if isinstance(writer, dict):
        beat = writer.get("heartbeat")
        fresh = isinstance(beat, (int, float)) and time.time() - beat < LEASE_STALE_SECONDS
        return "running" if fresh else "stalled"
    return str(stored or step_status or "unknown")


def _lab_events_about(lab: Lab, run_id: str) -> list[dict[str, Any]]:
    """The executor's events about this run's step folder (started, failed, retried …) for its timeline."""
    try:
        events = read_lab_events(lab.root)
    except sqlite3.Error:
        return []
    return [{"id": f"lab-{e['id']}", "step": None, "time": e["time"], "kind": e["kind"],
             "severity": e["severity"], "title": e["title"], "body": e["body"], "attempt": None}
            for e in events if e["subject"] == run_id]


def overview_page(lab: Lab) -> dict[str, Any]:
    index = lab.index()
    ladders = []
    for fit_id, folder in index.fits.items():
        fit = read_json(folder / FIT_FILE) or {}
        rungs = fit.get("rungs") or []
        hero = find_hero(lab, fit)
        runs = [r for rung in rungs for r in rung.get("run_ids") or [] if r in index.runs]
        ladders.append({
            "id": fit_id, "ladder": fit.get("ladder"), "target": fit.get("target"),
            "prediction": fit.get("prediction"), "hero_run": hero, "rungs": len(rungs),
            "runs": runs + ([hero] if hero else []),
        })
    steps = []
    for step_id, folder in index.steps.items():
        step = read_json(folder / STEP_RECORD) or {}
        steps.append({"id": step_id, "name": step.get("name"), "status": step.get("status"),
                      "attempts": step.get("attempts"), "error": step.get("error"),
                      "is_run": step_id in index.runs, "is_report": step_id in index.reports})
    try:
        events = read_lab_events(lab.root)[-200:]
    except sqlite3.Error:
        events = []
    return clean({
        "page": "overview", "title": f"Lab {lab.root.resolve().name}",
        "runs": [run_summary(lab, run_id) for run_id in index.runs],
        "ladders": ladders, "reports": list(index.reports), "steps": steps, "events": events,
        "watch": [],
    })


def run_page(lab: Lab, run_id: str, max_points: int = DEFAULT_POINTS) -> dict[str, Any] | None:
    index = lab.index()
    folder = index.runs.get(run_id)
    if folder is None:
        return None
    data: dict[str, Any] = {
        "page": "run", "id": run_id, "title": f"Run {run_id}", "record": read_redacted(folder / RUN_RECORD),
        "summary": run_summary(lab, run_id), "panels": [], "series": {}, "vectors": {}, "events": [],
        "samples": [], "cursors": {}, "watch": [run_id], "has_report": run_id in index.reports,
    }
    with open_run(folder) as reader:
        if reader is None:
            return clean(data)
        try:
            keys = reader.scalar_keys()
            data["panels"] = group_panels(keys)
            data["series"] = {key: read_series(reader, key, max_points) for key in keys}
            for key in reader.vector_keys():
                steps, vectors = reader.vectors(key)
                data["vectors"][key] = thin_vectors(steps, vectors)
            data["events"] = reader.events() + _lab_events_about(lab, run_id)
            data["samples"] = reader.samples()[-MAX_SAMPLES:]
            data["cursors"] = {run_id: reader.cursor()}
        except sqlite3.Error:
            data["summary"]["unreadable"] = True
    return clean(data)


def _run_curve(lab: Lab, run_id: str, keys: tuple[str, ...]) -> dict[str, Any]:
    """A run's series for ``keys`` with tokens at each point, for x axes in tokens or FLOPs."""
    folder = lab.index().runs[run_id]
    record = read_json(folder / RUN_RECORD) or {}
    out: dict[str, Any] = {"id": run_id, "flops_per_token": flops_per_token(record),
                           "size_name": record.get("size_name"), "series": {}, "tokens": None}
    with open_run(folder) as reader:
        if reader is None:
            return out
        try:
            tokens = read_series(reader, TOKENS_KEY)
            out["tokens"] = tokens if tokens["steps"] else None
            for key in keys:
                series = read_series(reader, key)
                if tokens["steps"]:
                    series["tokens"] = interpolate(series["steps"], tokens["steps"], tokens["values"])
                out["series"][key] = series
            out["cursor"] = reader.cursor()
        except sqlite3.Error:
            pass
    return out


def compare_page(lab: Lab, run_ids: list[str] | None = None, key: str | None = None) -> dict[str, Any] | None:
    index = lab.index()
    if run_ids is None:
        run_ids = list(index.runs)[:MAX_COMPARE_RUNS]
    if any(r not in index.runs for r in run_ids):
        index = lab.index(fresh=True)
        if any(r not in index.runs for r in run_ids):
            return None
    keys = tuple(dict.fromkeys((*COMPARE_KEYS, *([key] if key else []))))
    runs = [_run_curve(lab, r, keys) for r in run_ids[:MAX_COMPARE_RUNS]]
    return clean({
        "page": "compare", "title": "Compare runs", "keys": list(keys), "key": key or keys[0],
        "runs": runs, "cursors": {r["id"]: r.pop("cursor") for r in runs if "cursor" in r},
        "watch": [r["id"] for r in runs],
    })


def find_hero(lab: Lab, fit: dict[str, Any]) -> str | None:
    """The hero run of a ladder: named in ``fit.json``, else the run whose record says so."""
    index = lab.index()
    hero = fit.get("hero_run")
    if isinstance(hero, str):
        for run_id, folder in index.runs.items():
            if hero in (run_id, folder.name):
                return run_id
    for run_id, folder in index.runs.items():
        record = read_json(folder / RUN_RECORD) or {}
        if record.get("role") == "hero" and record.get("ladder") == fit.get("ladder"):
            return run_id
    return None


def ladder_page(lab: Lab, fit_id: str) -> dict[str, Any] | None:
    folder = lab.index().fits.get(fit_id)
    if folder is None:
        return None
    fit = read_json(folder / FIT_FILE) or {}
    hero_id = find_hero(lab, fit)
    hero = _run_curve(lab, hero_id, (LOSS_KEY, "train/loss")) if hero_id else None
    hero_record = read_json(lab.index().runs[hero_id] / RUN_RECORD) if hero_id else None
    # The band drawn is the one registered in the hero's run.json before its first step.
    prediction = (hero_record or {}).get("prediction") or fit.get("prediction")
    cursors = {hero_id: hero.pop("cursor")} if hero and "cursor" in hero else {}
    return clean({
        "page": "ladder", "id": fit_id, "title": f"Ladder {fit.get('ladder') or fit_id}", "fit": fit,
        "prediction": prediction, "hero": hero, "cursors": cursors, "watch": [hero_id] if hero_id else [],
    })


def data_page(lab: Lab, report_id: str) -> dict[str, Any] | None:
    folder = lab.index().reports.get(report_id)
    if folder is None:
        return None
    return clean({"page": "data", "id": report_id, "title": f"Data {report_id}",
                  "report": read_json(folder / REPORT_FILE), "watch": []})


def provenance_page(lab: Lab, run_id: str) -> dict[str, Any] | None:
    folder = lab.index().runs.get(run_id)
    if folder is None:
        return None
    return clean({"page": "provenance", "id": run_id, "title": f"Provenance {run_id}",
                  "record": read_redacted(folder / RUN_RECORD), "step": read_redacted(folder / STEP_RECORD),
                  "watch": []})


def build_page(lab: Lab, page: str, item_id: str | None = None, **options: Any) -> dict[str, Any] | None:
    """Page data by name; None when the page or id is unknown."""
    if page == "overview":
        return overview_page(lab)
    if page == "compare":
        return compare_page(lab, options.get("runs"), options.get("key"))
    builders = {"run": run_page, "ladder": ladder_page, "data": data_page, "provenance": provenance_page}
    if page not in builders or item_id is None:
        return None
    data = builders[page](lab, item_id)
    if data is None:  # perhaps created since the cached scan: look again before answering 404
        lab.index(fresh=True)
        data = builders[page](lab, item_id)
    return data
