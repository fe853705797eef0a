"""The compare page's data: every run with what a picker filters on (name, role, ladder, size), every
scalar metric the lab logged, and the series of the picked runs for the picked metrics.

The view (runs, metrics, x axis, log scales, smoothing) lives in the page's URL, so a link
reproduces it. The live server answers each view with its series; on the static site the page loads
the chunk files that hold them (``publish``: the same files the run pages load), ``train/tokens``
with them for x axes in tokens or FLOPs.
"""

from __future__ import annotations

import sqlite3
from typing import Any

from glasslab.layout import RUN_RECORD
from glasslab.observatory.lab_scan import Lab
from glasslab.observatory.runs import TOKENS_KEY, flops_per_token, open_run, run_status, store_files
from glasslab.observatory.series import clean, interpolate, read_series

DEFAULT_KEYS = ("train/loss", "eval/macro/loss")
DEFAULT_RUNS = 12
MAX_RUNS = 48
MAX_KEYS = 12
COMPARE_SERIES_KEPT = 2 * MAX_RUNS  # (run, metrics) views whose series are kept


def run_choices(lab: Lab) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """(runs with their picker fields and metric names, {metric: how many runs logged it})."""
    runs, metrics = [], {}
    for run_id, folder in lab.index().runs.items():
        record = lab.json(folder / RUN_RECORD) or {}
        entry = {"id": run_id, "role": record.get("role"), "ladder": record.get("ladder"),
                 "size_name": record.get("size_name"), "flops_per_token": flops_per_token(record),
                 "started": record.get("started"), "status": None, "keys": []}
        facts = store_keys(lab, run_id)
        if facts is not None:
            entry["keys"] = list(facts["keys"])
            entry["status"] = run_status(facts["writer"], facts["status"], None)
        for key in entry["keys"]:
            metrics[key] = metrics.get(key, 0) + 1
        runs.append(entry)
    return runs, dict(sorted(metrics.items()))


def store_keys(lab: Lab, run_id: str) -> dict[str, Any] | None:
    """The scalar names a run logged, its writer lease and recorded status; None when its store cannot
    be read. Kept while the store's files are unchanged (``Lab.memo``): the picker lists every run."""
    def read() -> dict[str, Any] | None:
        with open_run(lab.index().runs[run_id]) as reader:
            if reader is None:
                return None
            try:
                return {"keys": reader.scalar_keys(), "writer": reader.meta("writer"), "status": reader.meta("status")}
            except sqlite3.Error:
                return None

    return lab.memo("store-keys", run_id, store_files(lab.index().runs[run_id]), read)


def default_runs(runs: list[dict[str, Any]]) -> list[str]:
    """A ladder's rungs and hero when the lab has one, else the most recently started runs."""
    laddered = [r["id"] for r in runs if r["ladder"] and r["role"] in ("rung", "hero")]
    if laddered:
        return laddered[:MAX_RUNS]
    recent = sorted(runs, key=lambda r: str(r.get("started") or ""), reverse=True)
    return [r["id"] for r in recent[:DEFAULT_RUNS]]


def run_series(lab: Lab, run_id: str, keys: list[str]) -> tuple[dict[str, Any], dict[str, int] | None]:
    """({key: series with tokens at each point} plus ``train/tokens``, the run's cursor)."""
    out: dict[str, Any] = {}
    cursor = None
    with open_run(lab.index().runs[run_id]) as reader:
        if reader is None:
            return out, None
        try:
            tokens = read_series(reader, TOKENS_KEY)
            out[TOKENS_KEY] = tokens
            for key in keys:
                series = read_series(reader, key)
                if tokens["steps"] and key != TOKENS_KEY:
                    series["tokens"] = interpolate(series["steps"], tokens["steps"], tokens["values"])
                out[key] = series
            cursor = reader.cursor()
        except sqlite3.Error:
            pass
    return out, cursor


def compare_page(lab: Lab, run_ids: list[str] | None = None, keys: list[str] | None = None,
                 with_series: bool = True) -> dict[str, Any] | None:
    """The page for the runs ``run_ids`` and metrics ``keys`` (defaults when None); None when a
    named run is not in the lab. ``with_series=False`` leaves the series out (the static site)."""
    index = lab.index()
    if run_ids and any(r not in index.runs for r in run_ids):
        index = lab.index(fresh=True)
        if any(r not in index.runs for r in run_ids):
            return None
    runs, metrics = run_choices(lab)
    picked = list(dict.fromkeys(run_ids))[:MAX_RUNS] if run_ids else default_runs(runs)
    chosen = list(dict.fromkeys(keys))[:MAX_KEYS] if keys else [k for k in DEFAULT_KEYS if k in metrics] or \
        list(metrics)[:1]
    data: dict[str, Any] = {"page": "compare", "title": "Compare runs", "runs": runs, "metrics": metrics,
                            "picked": picked, "keys": chosen, "series": {}, "cursors": {}, "watch": picked}
    if with_series:
        for run_id in picked:
            data["series"][run_id], cursor = kept_run_series(lab, run_id, chosen)
            if cursor is not None:
                data["cursors"][run_id] = cursor
    return clean(data)


def kept_run_series(lab: Lab, run_id: str, keys: list[str]) -> tuple[dict[str, Any], dict[str, int] | None]:
    """:func:`run_series`, kept while the run's store is unchanged (a view is often loaded again)."""
    def read() -> tuple[dict[str, Any], dict[str, int]] | None:
        series, cursor = run_series(lab, run_id, keys)
        return None if cursor is None else (series, cursor)  # not kept: a store being created

    kept = lab.memo("compare-series", (run_id, tuple(keys)), store_files(lab.index().runs[run_id]), read,
                    limit=COMPARE_SERIES_KEPT)
    return kept if kept is not None else ({}, None)
