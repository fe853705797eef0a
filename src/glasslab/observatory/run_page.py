"""The run page's data: charts grouped into panels with meaningful titles, the MoE layers, the
pre-registered band mapped onto steps, task chance levels, links to the run's dataset, ladder,
parent, children and exports, the command that recreates it, events and samples."""

from __future__ import annotations

import re
import sqlite3
from typing import Any

from glasslab.layout import CHECKPOINT_LIST, RUN_RECORD
from glasslab.observatory.lab_scan import Lab, read_redacted
from glasslab.observatory.posttrain_page import POSTTRAIN_PANELS, chat_models
from glasslab.observatory.relations import Relations
from glasslab.observatory.runs import LOSS_KEY, open_run, planned_steps, run_summary, store_files
from glasslab.observatory.series import DEFAULT_POINTS, EncodedSeries, clean, read_series, thin_vectors
from glasslab.track.lab_events import read_lab_events

MAX_SAMPLES = 200
RUN_PAGES_KEPT = 16  # run pages whose store reads are kept (a 100k-step run's are ~10 MB)
MOE_KEY = re.compile(r"^moe/layer_(\d+)/")
TASK_KEY = re.compile(r"^eval/task/([^/]+)/(acc|acc_norm)$")

# Run-page panels: (title, test on the metric name, log-scale y). First match wins; what no panel
# claims lands in a panel named after its prefix (or after the metric, when it is alone there).
PANELS = POSTTRAIN_PANELS + (
    ("Loss", lambda k: k in ("train/loss", LOSS_KEY), True),
    ("SFT loss (assistant tokens only)", lambda k: k == "sft/loss", True),
    ("Learning rate", lambda k: k.startswith("optim/"), False),
    ("Gradient norm", lambda k: k.startswith("grad/norm/"), True),
    ("Parameter norms per group", lambda k: k.startswith("params/norm/"), False),
    ("Router bias norm per layer (balancing state, not trained)", lambda k: k.endswith("/router_bias_norm"), False),
    ("MoE load: max violation per layer", lambda k: k.startswith("moe/") and k.endswith("/load_max_violation"),
     False),
    ("MoE routing entropy per layer", lambda k: k.startswith("moe/") and k.endswith("/routing_entropy"), False),
    ("MoE dropped tokens per layer", lambda k: k.startswith("moe/") and k.endswith("/dropped_tokens"), False),
    ("Throughput", lambda k: k == "throughput/tokens_per_second", False),
    ("Model FLOPs utilisation", lambda k: k == "throughput/mfu", False),
    ("Peak memory", lambda k: k.startswith("memory/"), False),
    ("Tokens seen", lambda k: k == "train/tokens", False),
    ("SFT assistant tokens", lambda k: k == "sft/assistant_tokens", False),
    ("Task accuracy", lambda k: TASK_KEY.match(k) is not None or k == "eval/task/macro/acc", False),
    ("Task bits per byte (correct choice)", lambda k: k.startswith("eval/task/") and k.endswith("/bpb"), False),
    ("Eval loss per domain", lambda k: k.startswith("eval/") and k.endswith("/loss"), False),
    ("Eval bits per byte per domain", lambda k: k.startswith("eval/") and k.endswith("/bpb"), False),
    ("Mixture weights in force", lambda k: k.startswith("mixture/weight/"), False),
    ("Passes over each domain's training data", lambda k: k.startswith("mixture/epochs/"), False),
)


def group_panels(keys: list[str]) -> list[dict[str, Any]]:
    """Chart panels for a run's scalar keys, in the order of ``PANELS`` then by prefix."""
    panels: dict[str, dict[str, Any]] = {}
    for title, _, logy in PANELS:
        panels[title] = {"title": title, "keys": [], "logy": logy}
    for key in keys:
        title = next((t for t, match, _ in PANELS if match(key)), None)
        if title is None:
            title = f"{key.split('/')[0]}/…" if "/" in key else "other"
            panels.setdefault(title, {"title": title, "keys": [], "logy": False})
        panels[title]["keys"].append(key)
    out = [p for p in panels.values() if p["keys"]]
    for panel in out:
        if panel["title"].endswith("/…") and len(panel["keys"]) == 1:
            panel["title"] = panel["keys"][0]
    return out


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


def run_page(lab: Lab, run_id: str, max_points: int = DEFAULT_POINTS) -> dict[str, Any] | None:
    index = lab.index()
    folder = index.runs.get(run_id)
    if folder is None:
        return None
    relations = Relations(lab)
    lab_events = _lab_events_about(lab, run_id)
    record = read_redacted(folder / RUN_RECORD) or {}
    data: dict[str, Any] = {
        "page": "run", "id": run_id, "title": f"Run {run_id}", "record": record,
        "summary": run_summary(lab, run_id, lab_events), "panels": [], "series": {}, "vectors": {},
        "layers": [], "events": [], "samples": [], "cursors": {}, "watch": [run_id],
        "has_report": run_id in index.reports, "links": run_links(relations, run_id),
        "band": band_on_steps(record), "chance": {}, "reproduce": relations.reproduce(run_id),
        "lab_name": lab.root.resolve().name, "chat_models": chat_models(relations, run_id),
        "checkpoints": kept_checkpoints(lab, run_id),
    }
    stored = store_part(lab, run_id, max_points)
    if stored is None:
        data["summary"]["unreadable"] = True
        return clean(data)
    keys, vector_keys = stored["keys"], stored["vector_keys"]
    data.update(panels=group_panels(keys), chance=chance_levels(record, keys), vectors=stored["vectors"],
                layers=moe_layers(keys, vector_keys), events=stored["events"] + lab_events,
                samples=stored["samples"], cursors={run_id: stored["cursor"]})
    # The series are finite already (read_series): cleaning them again cost as much as reading them.
    return clean(data) | {"series": stored["series"]}


def store_part(lab: Lab, run_id: str, max_points: int = DEFAULT_POINTS) -> dict[str, Any] | None:
    """What the run page reads from the run's store: scalar and vector names, series, vectors, events,
    samples and the live cursor; None when the store cannot be read. Kept while the store's files are
    unchanged, for the last few runs looked at: a finished 100k-step run's page reads ~300k rollup rows
    (docs/LOG.md, the lab at scale)."""
    def read() -> dict[str, Any] | None:
        with open_run(lab.index().runs[run_id]) as reader:
            if reader is None:
                return None
            try:
                keys, vector_keys = reader.scalar_keys(), reader.vector_keys()
                return {"keys": keys, "vector_keys": vector_keys,
                        "series": EncodedSeries({key: read_series(reader, key, max_points) for key in keys}),
                        "vectors": {key: thin_vectors(*reader.vectors(key)) for key in vector_keys},
                        "events": reader.events(), "samples": reader.samples()[-MAX_SAMPLES:],
                        "cursor": reader.cursor()}
            except sqlite3.Error:
                return None

    return lab.memo("run-page", (run_id, max_points), store_files(lab.index().runs[run_id]), read,
                    limit=RUN_PAGES_KEPT)
