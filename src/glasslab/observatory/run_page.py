"""The run page's data: its charts (``panels.chart_specs``), what changed (``changes``), the MoE
layers, the pre-registered band mapped onto steps, task chance levels, links to the run's dataset,
ladder, parent, children and exports, the command that recreates it, events and samples (with the spans
they copy from the training data, ``sample_trace``).

No series: a run of 500 metrics × 100,000 steps would send ~40 MB up front. The page asks for the
series of the charts it draws (:func:`run_series`, :func:`run_vectors`; ``/api/series`` and
``/api/vectors`` live, chunk files on the static site) as they come into view.
"""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path
from typing import Any

from glasslab import sources
from glasslab.data.cluster_heldout import OTHER as OTHER_ROW
from glasslab.layout import CHECKPOINT_LIST, RUN_RECORD
from glasslab.observatory.batch_view import with_batches
from glasslab.observatory.changes import experts_now, what_changed
from glasslab.observatory.lab_scan import Lab, read_redacted
from glasslab.observatory.panels import TASK_KEY, chart_specs
from glasslab.observatory.posttrain_page import chat_models
from glasslab.observatory.relations import Relations
from glasslab.observatory.runs import LOSS_KEY, open_run, planned_steps, run_summary, store_files
from glasslab.observatory.sample_trace import sample_traces
from glasslab.observatory.series import DEFAULT_POINTS, EncodedSeries, clean, read_series, thin_vectors
from glasslab.track.lab_events import read_lab_events

MAX_SAMPLES = 200
RUN_PAGES_KEPT = 16  # run pages whose store reads are kept
SERIES_KEPT = 512  # (run, metrics) series reads kept: a page asks for a few charts' series at a time
MAX_KEYS_PER_READ = 256  # metrics one series request may ask for (a page batches its charts below this)
# Points per series a page may ask for: full charts take DEFAULT_POINTS; a heatmap row or a small
# multiple 240, which a 100,000-step metric reads from 390 rollup rows instead of 6,250.
MIN_POINTS = 50
MOE_KEY = re.compile(r"^moe/layer_(\d+)/")
TASK_ACC = re.compile(r"^eval/task/(?!macro/)[^/]+/acc$")


def chance_levels(record: dict[str, Any], keys: list[str]) -> dict[str, float]:
    """Chance accuracy per task metric key, from ``run.json`` ``tasks`` ({task: {chance}} or
    [{name, chance}]) or ``chance`` ({task: level}); the macro's is the mean of its tasks'."""
    levels: dict[str, float] = {}
    tasks = record.get("tasks")
    if isinstance(tasks, list):
        tasks = {t.get("name"): t for t in tasks if isinstance(t, dict)}
    for name, task in (tasks or {}).items() if isinstance(tasks, dict) else ():
        chance = task.get("chance") if isinstance(task, dict) else None
        if isinstance(chance, (int, float)):
            levels[str(name)] = float(chance)
    if isinstance(record.get("chance"), dict):
        levels.update({str(k): float(v) for k, v in record["chance"].items() if isinstance(v, (int, float))})
    out = {}
    for key in keys:
        match = TASK_KEY.match(key)
        if match and match.group(1) in levels:
            out[key] = levels[match.group(1)]
    task_levels = [v for k, v in levels.items() if k != "macro"]
    if "eval/task/macro/acc" in keys and ("macro" in levels or task_levels):
        out["eval/task/macro/acc"] = levels.get("macro", sum(task_levels) / len(task_levels) if task_levels else 0.0)
    return out


def band_on_steps(record: dict[str, Any]) -> dict[str, Any] | None:
    """The pre-registered prediction with its curve placed at steps (fraction × planned steps), for
    the band over the run's eval curve; None for a run without one."""
    prediction = record.get("prediction")
    planned = planned_steps(record)
    if not isinstance(prediction, dict) or not planned:
        return None
    points = [c for c in prediction.get("curve") or [] if isinstance(c, dict)]
    curve = [{"step": c["fraction"] * planned, "point": c.get("point"), "lo": c.get("lo"), "hi": c.get("hi")}
             for c in points if isinstance(c.get("fraction"), (int, float))]
    return {"target": prediction.get("target") or LOSS_KEY, "curve": curve,
            **{k: prediction.get(k) for k in ("point", "lo", "hi", "level", "flops", "registered_at")}}


def moe_layers(scalar_keys: list[str], vector_keys: list[str]) -> list[int]:
    """Indices of the MoE layers that logged anything, in order."""
    layers = {int(m.group(1)) for k in (*scalar_keys, *vector_keys) if (m := MOE_KEY.match(k))}
    return sorted(layers)


def _lab_events_about(lab: Lab, run_id: str) -> list[dict[str, Any]]:
    """The executor's events about this run's step folder (started, failed, retried …) for its timeline."""
    try:
        events = read_lab_events(lab.root)
    except sqlite3.Error:
        return []
    return [{"id": f"lab-{e['id']}", "step": None, "time": e["time"], "kind": e["kind"],
             "severity": e["severity"], "title": e["title"], "body": e["body"], "attempt": None}
            for e in events if e["subject"] == run_id]


def run_links(relations: Relations, run_id: str) -> dict[str, Any]:
    """The run's dataset, ladder, parent, children, exports and ``glasslab eval`` results (absent ones are
    None or empty)."""
    return {"dataset": relations.dataset(run_id), "ladder": relations.ladder(run_id),
            "parent": relations.parent(run_id), "children": relations.children(run_id),
            "exports": relations.exports(run_id), "evaluations": relations.evaluations(run_id)}


def kept_checkpoints(lab: Lab, run_id: str) -> list[dict[str, Any]]:
    """The run's kept checkpoints as ``checkpoints.json`` lists them (step, tokens, the weights' sha256 and
    each file's), each with the command that exports it."""
    listed = lab.json(lab.index().runs[run_id] / CHECKPOINT_LIST) or {}
    return [{**c, "command": f"glasslab export {run_id}@{c['step']}"}
            for c in listed.get("checkpoints", []) if isinstance(c, dict) and "step" in c]


HEADER_KEYS = ("train/loss", "sft/loss", "dpo/loss", "train/tokens", "eval/macro/loss", "throughput/tokens_per_second")
"""The logged metrics the run page's header shows."""


def run_sources(lab: Lab, run_id: str, record: dict[str, Any]) -> dict[str, Any]:
    """Where the header's numbers come from: the logged metrics (latest step) and the planned training FLOPs
    of ``run.json``."""
    lab_name, folder = lab.root.resolve().name, lab.index().runs[run_id].name
    out: dict[str, Any] = {key: sources.logged(lab_name, folder, key) for key in HEADER_KEYS}
    if isinstance(record.get("flops"), (int, float)):
        out["flops"] = sources.read_from(lab_name, folder, RUN_RECORD, "flops")
    return out


def task_scores(lab: Lab, run_id: str, record: dict[str, Any], last: dict[str, Any]) -> list[dict[str, Any]]:
    """The run's latest task accuracies (``eval/task/<task>/acc``), each with the ``glasslab eval`` that scores
    its checkpoint at that step again (the file and key when that cannot be said as a command)."""
    lab_name, folder = lab.root.resolve().name, lab.index().runs[run_id]
    configured = ((record.get("config") or {}).get("train") or {}).get("eval_tasks") or []
    kept = sources.kept_checkpoint_steps(lab.json(folder / CHECKPOINT_LIST))
    command = {}
    rows = []
    for key, (step, value) in sorted(last.items()):
        if step not in command:
            command[step] = sources.task_eval(lab_name, run_id, step, configured, kept)
        rows.append({"key": key, "task": TASK_KEY.match(key).group(1), "step": step, "value": value,
                     "source": command[step] or sources.logged(lab_name, folder.name, key, step)})
    return rows


def cluster_rows(lab: Lab, record: dict[str, Any]) -> dict[str, str]:
    """The rows of the run's cluster × step heatmap, by row id: each cluster its held-out loss is measured on,
    named by its map's ``map.json`` (``3 def · self``), and ``other (n clusters)``, the small clusters it merged."""
    evals = record.get("cluster_evals") or {}
    name = evals.get("map")
    summary = lab.json(lab.root / name / "map.json") if isinstance(name, str) and "/" not in name else None
    rows = {str(c["id"]): f"{c['id']} {c.get('name', '')}".strip() for c in (summary or {}).get("clusters") or []}
    merged = evals.get("merged") or {}
    return rows | ({OTHER_ROW: f"{OTHER_ROW} ({len(merged)} clusters)"} if merged else {})


def run_page(lab: Lab, run_id: str) -> dict[str, Any] | None:
    index = lab.index()
    folder = index.runs.get(run_id)
    if folder is None:
        return None
    relations = Relations(lab)
    lab_events = _lab_events_about(lab, run_id)
    record = read_redacted(folder / RUN_RECORD) or {}
    data: dict[str, Any] = {
        "page": "run", "id": run_id, "title": f"Run {run_id}", "record": record,
        "summary": run_summary(lab, run_id, lab_events), "keys": [], "charts": [], "vector_keys": [],
        "layers": [], "events": [], "samples": [], "cursors": {}, "watch": [run_id], "changes": None,
        "experts": None, "has_report": run_id in index.reports, "links": run_links(relations, run_id),
        "band": band_on_steps(record), "chance": {}, "reproduce": relations.reproduce(run_id),
        "lab_name": lab.root.resolve().name, "chat_models": chat_models(relations, run_id),
        "checkpoints": kept_checkpoints(lab, run_id), "trace": None, "sources": run_sources(lab, run_id, record),
        "task_scores": [], "cluster_rows": cluster_rows(lab, record),
    }
    stored = store_part(lab, run_id)
    if stored is None:
        data["summary"]["unreadable"] = True
        return clean(data)
    keys, vector_keys = stored["keys"], stored["vector_keys"]
    data.update(keys=keys, charts=stored["charts"], chance=chance_levels(record, keys), vector_keys=vector_keys,
                layers=moe_layers(keys, vector_keys), events=stored["events"] + lab_events,
                samples=stored["samples"], cursors={run_id: stored["cursor"]}, changes=stored["changes"],
                experts=stored["experts"], trace=sample_traces(lab, run_id, stored["samples"]),
                task_scores=task_scores(lab, run_id, record, stored["task_last"]))
    return clean(data)


def store_part(lab: Lab, run_id: str) -> dict[str, Any] | None:
    """What the run page reads from the run's store: scalar and vector names, the charts they make,
    events, samples, the live cursor, what changed and the experts at the extremes; None when the
    store cannot be read.
    Kept while the store's files are unchanged, for the last few runs looked at."""
    def read() -> dict[str, Any] | None:
        with open_run(lab.index().runs[run_id]) as reader:
            if reader is None:
                return None
            try:
                keys, vector_keys = reader.scalar_keys(), reader.vector_keys()
                return {"keys": keys, "charts": chart_specs(keys), "vector_keys": vector_keys,
                        "events": with_batches(reader.events()),
                        "samples": reader.samples()[-MAX_SAMPLES:], "cursor": reader.cursor(),
                        "changes": what_changed(reader, keys), "experts": experts_now(reader, vector_keys),
                        "task_last": {k: tuple(last) for k in keys if TASK_ACC.match(k) and (last := reader.last(k))}}
            except sqlite3.Error:
                return None

    return lab.memo("run-page", run_id, store_files(lab.index().runs[run_id]), read, limit=RUN_PAGES_KEPT)


def read_run_series(folder: Path, keys: list[str], points: int = DEFAULT_POINTS) -> dict[str, Any] | None:
    """``{key: series}`` (``series.read_series``: at most ``points`` points, with min/max when
    downsampled) for the metrics ``keys`` the run in ``folder`` logged (names it never logged are left
    out); None when its store cannot be read."""
    with open_run(folder) as reader:
        if reader is None:
            return None
        try:
            series = {key: read_series(reader, key, points) for key in keys}
        except sqlite3.Error:
            return None
    return {key: one for key, one in series.items() if one["steps"]}


def read_run_vectors(folder: Path, keys: list[str]) -> dict[str, Any] | None:
    """``{key: {steps, values}}`` for the vector metrics ``keys`` of the run in ``folder``, each
    thinned to a few hundred steps for a heatmap; None when its store cannot be read."""
    with open_run(folder) as reader:
        if reader is None:
            return None
        try:
            vectors = {key: thin_vectors(*reader.vectors(key)) for key in keys}
        except sqlite3.Error:
            return None
    return {key: one for key, one in vectors.items() if one["steps"]}


def run_series(lab: Lab, run_id: str, keys: list[str], points: int = DEFAULT_POINTS) -> EncodedSeries | None:
    """:func:`read_run_series` for at most ``MAX_KEYS_PER_READ`` metrics of a run of the lab (``points``
    clamped to ``MIN_POINTS``…``DEFAULT_POINTS``), JSON encoded once and kept while its store is
    unchanged; None for an unknown run or unreadable store."""
    folder = lab.index().runs.get(run_id)
    if folder is None:
        return None
    keys = list(dict.fromkeys(keys))[:MAX_KEYS_PER_READ]
    points = min(DEFAULT_POINTS, max(MIN_POINTS, points))

    def read() -> EncodedSeries | None:
        series = read_run_series(folder, keys, points)
        return None if series is None else EncodedSeries(series)

    return lab.memo("run-series", (run_id, tuple(keys), points), store_files(folder), read, limit=SERIES_KEPT)


def run_vectors(lab: Lab, run_id: str, keys: list[str]) -> dict[str, Any] | None:
    """:func:`read_run_vectors` for a run of the lab, kept while its store is unchanged."""
    folder = lab.index().runs.get(run_id)
    if folder is None:
        return None
    keys = list(dict.fromkeys(keys))[:MAX_KEYS_PER_READ]
    return lab.memo("run-vectors", (run_id, tuple(keys)), store_files(folder),
                    lambda: read_run_vectors(folder, keys), limit=SERIES_KEPT)
