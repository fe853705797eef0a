"""One run as the pages see it: its store opened safely, its status, a summary line (size, last loss,
tokens, incidents, band verdict) and its curves with tokens at each point.

A store being created or damaged, or a half-written ``run.json``, gives a summary marked
``unreadable`` or with fields missing, never an error.
"""

from __future__ import annotations

import sqlite3
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from glasslab.layout import METRICS_DB, RUN_RECORD, STEP_RECORD
from glasslab.observatory.lab_scan import Lab
from glasslab.observatory.series import DEFAULT_POINTS, finite, interpolate, read_series
from glasslab.observatory.verdict import verdict
from glasslab.track.reader import RunReader
from glasslab.track.store import LEASE_STALE_SECONDS

LOSS_KEY = "eval/macro/loss"
TOKENS_KEY = "train/tokens"
TRAIN_LOSS_KEYS = ("train/loss", "sft/loss")
# Severities that make an event an incident worth a flag on the overview (notes and step starts do not).
FLAGGED = frozenset({"warning", "incident"})


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


def flops_per_token(record: dict[str, Any] | None) -> float | None:
    """Training FLOPs per token from ``run.json`` (top level, or under ``model``/``accounting``)."""
    if not record:
        return None
    for holder in (record, record.get("model") or {}, record.get("accounting") or {}):
        if isinstance(holder, dict) and isinstance(holder.get("flops_per_token"), (int, float)):
            return float(holder["flops_per_token"])
    return None


def planned_steps(record: dict[str, Any]) -> int | None:
    """The steps the run was planned to take (``steps``, else ``total_steps`` in ``run.json``)."""
    for key in ("steps", "total_steps"):
        if isinstance(record.get(key), (int, float)) and record[key] > 0:
            return int(record[key])
    return None


def run_status(writer: Any, stored: Any, step_status: Any) -> str:
    """``running`` while a writer holds the lease and beats, ``stalled`` when its heartbeat stopped
    (a killed trainer leaves its lease), else the status the last writer recorded at close."""
    if isinstance(writer, dict):
        beat = writer.get("heartbeat")
        fresh = isinstance(beat, (int, float)) and time.time() - beat < LEASE_STALE_SECONDS
        return "running" if fresh else "stalled"
    return str(stored or step_status or "unknown")


def incident_counts(events: list[dict[str, Any]]) -> dict[str, int]:
    """Warnings and incidents by kind (rollbacks, out-of-band excursions, skipped spikes, retries …)."""
    return dict(Counter(e["kind"] for e in events if e.get("severity") in FLAGGED))


def run_summary(lab: Lab, run_id: str, lab_events: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """One line of the overview for a run: status, role, size, step, tokens, latest losses, the
    prediction and its verdict, incidents (``lab_events``: the executor's events about it)."""
    folder = lab.index().runs[run_id]
    record = lab.json(folder / RUN_RECORD) or {}
    step_record = lab.json(folder / STEP_RECORD) or {}
    summary: dict[str, Any] = {
        "id": run_id, "role": record.get("role"), "ladder": record.get("ladder"),
        "size_name": record.get("size_name"), "started": record.get("started"),
        "status": step_record.get("status"), "step": None, "planned_steps": planned_steps(record),
        "loss": None, "loss_key": None, "tokens": None, "eval_loss": None, "predicted": None, "verdict": None,
        "incidents": incident_counts(lab_events or []), "unreadable": False,
    }
    prediction = record.get("prediction")
    if isinstance(prediction, dict):
        summary["predicted"] = {k: finite(prediction.get(k)) for k in ("point", "lo", "hi")}
    target = (prediction.get("target") or LOSS_KEY) if isinstance(prediction, dict) else LOSS_KEY
    facts = store_facts(lab, run_id, target)
    if facts is None:
        summary["unreadable"] = True
        return summary
    summary["status"] = run_status(facts["writer"], facts["status"], summary["status"])
    last = facts["last"]
    for key in TRAIN_LOSS_KEYS:
        if last[key] is not None:
            summary.update(step=last[key][0], loss=finite(last[key][1]), loss_key=key)
            break
    for field, key in (("tokens", TOKENS_KEY), ("eval_loss", LOSS_KEY)):
        if last[key] is not None:
            summary[field] = finite(last[key][1])
    counts = Counter(summary["incidents"])
    counts.update(facts["incidents"])
    summary["incidents"] = dict(counts)
    if isinstance(prediction, dict):
        summary["verdict"] = verdict(prediction, last[target][0] if last[target] else None,
                                     finite(last[target][1]) if last[target] else None, summary["planned_steps"],
                                     summary["status"])
    return summary


def store_files(folder: Path) -> tuple[Path, Path]:
    """The files a run's store lives in: when neither changed, nothing read from it changed."""
    return folder / METRICS_DB, folder / f"{METRICS_DB}-wal"


def store_facts(lab: Lab, run_id: str, target: str = LOSS_KEY) -> dict[str, Any] | None:
    """What the overview shows from a run's store: the writer lease, the recorded status, the last
    ``(step, value)`` of the losses, tokens and ``target`` (None when not logged), incidents by kind;
    None when the store cannot be read. Kept while the store's files are unchanged (``Lab.memo``)."""
    def read() -> dict[str, Any] | None:
        with open_run(lab.index().runs[run_id]) as reader:
            if reader is None:
                return None
            try:
                return {"writer": reader.meta("writer"), "status": reader.meta("status"),
                        "last": {key: reader.last(key) for key in (*TRAIN_LOSS_KEYS, TOKENS_KEY, LOSS_KEY, target)},
                        "incidents": incident_counts(reader.events())}
            except sqlite3.Error:
                return None

    return lab.memo("store-facts", (run_id, target), store_files(lab.index().runs[run_id]), read)


def run_curve(lab: Lab, run_id: str, keys: tuple[str, ...], max_points: int = DEFAULT_POINTS) -> dict[str, Any]:
    """A run's series for ``keys`` with tokens at each point, for x axes in tokens or FLOPs."""
    folder = lab.index().runs[run_id]
    record = lab.json(folder / RUN_RECORD) or {}
    out: dict[str, Any] = {"id": run_id, "flops_per_token": flops_per_token(record),
                           "size_name": record.get("size_name"), "series": {}, "tokens": None}
    with open_run(folder) as reader:
        if reader is None:
            return out
        try:
            tokens = read_series(reader, TOKENS_KEY, max_points)
            out["tokens"] = tokens if tokens["steps"] else None
            for key in keys:
                series = read_series(reader, key, max_points)
                if tokens["steps"]:
                    series["tokens"] = interpolate(series["steps"], tokens["steps"], tokens["values"])
                out["series"][key] = series
            out["cursor"] = reader.cursor()
        except sqlite3.Error:
            pass
    return out
