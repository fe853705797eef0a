"""The ladder page's data: the verdict first (the hero against its pre-registered band), the law with
its parameters rounded to their uncertainty, every rung's seeds, the back-test, and every prediction
in the lab's registry with what its run reached so far; and, when the rungs measured it, each content
cluster's held-out loss against compute."""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

from glasslab import sources
from glasslab.lab import registry
from glasslab.lab.registry import gate_status
from glasslab.layout import CHECKPOINT_LIST, FIT_FILE, RUN_RECORD, STEP_RECORD
from glasslab.observatory.lab_scan import Lab
from glasslab.observatory.runs import LOSS_KEY, open_run, planned_steps, run_curve, run_status
from glasslab.observatory.series import clean, finite
from glasslab.observatory.verdict import verdict


def find_hero(lab: Lab, fit: dict[str, Any]) -> str | None:
    """The hero run of a ladder: named in ``fit.json``, else the run whose record says so."""
    index = lab.index()
    hero = fit.get("hero_run")
    if isinstance(hero, str):
        for run_id, folder in index.runs.items():
            if hero in (run_id, folder.name):
                return run_id
    for run_id, folder in index.runs.items():
        record = lab.json(folder / RUN_RECORD) or {}
        if record.get("role") == "hero" and record.get("ladder") == fit.get("ladder"):
            return run_id
    return None


def with_uncertainty(value: Any, se: Any) -> str:
    """``value ± se`` with the error at two significant figures and the value to the same decimal
    place (15.284887 ± 2.213967 → "15.3 ± 2.2"); four significant figures when there is no error."""
    if not isinstance(value, (int, float)) or not math.isfinite(value):
        return "–"
    if not isinstance(se, (int, float)) or not math.isfinite(se) or se <= 0:
        return f"{value:.4g}"
    decimals = 1 - math.floor(math.log10(se))
    if decimals <= 0:
        return f"{round(value, decimals):.0f} ± {round(se, decimals):.0f}"
    return f"{value:.{decimals}f} ± {se:.{decimals}f}"


def law_parameters(fit: dict[str, Any]) -> list[dict[str, Any]]:
    """Rows ``{name, value, se, text, note}`` for the law's parameters (a pinned L∞ says so)."""
    law = fit.get("law") or {}
    params, errors = law.get("params") or {}, law.get("param_se") or {}
    l_inf = fit.get("L_inf") or {}
    rows = []
    for name, value in params.items():
        se = errors.get(name)
        note = ""
        if name == "L_inf" and l_inf.get("mode") == "pinned":
            note = f"pinned; swept over {', '.join(f'{v:g}' for v in l_inf.get('sweep') or [])}"
            text = f"{value:.4g}"
        else:
            text = with_uncertainty(value, se)
        rows.append({"name": name, "value": finite(value), "se": finite(se) if isinstance(se, (int, float)) else None,
                     "text": text, "note": note})
    return rows


def floor_line(fit: dict[str, Any]) -> str:
    """Where the fit's floor came from: the ladder's words in ``fit.json`` (estimated from the rungs,
    pinned by the user, fitted freely), else — a fit written before they were — its mode and value."""
    floor = fit.get("L_inf") or {}
    if isinstance(floor.get("text"), str):
        return floor["text"]
    value = floor.get("value")
    if not isinstance(value, (int, float)):
        return ""
    if floor.get("mode") == "pinned":
        return f"pinned by the user: L∞ = {value:.3g}"
    return f"fitted freely to the rungs by L(C): L∞ = {value:.3f}"


def gate_line(fit: dict[str, Any], prediction: Any) -> dict[str, Any] | None:
    """The fit's registration gate as the page says it: registered, or REFUSED with the reasons, and FORCED
    when the hero's run says it ran anyway; None for a fit written before the gate."""
    gate = fit.get("gate")
    if not isinstance(gate, dict):
        return None
    forced = isinstance(prediction, dict) and bool(prediction.get("forced"))
    text = ("registered: every check passed" if gate.get("registered")
            else "REFUSED: " + "; ".join(gate.get("reasons") or []) + ("; the hero ran FORCED" if forced else ""))
    flags = "; ".join(gate.get("flags") or [])
    floor = gate.get("floor") if isinstance(gate.get("floor"), dict) else {}
    source = f"; the floor from {floor['source']}" if isinstance(floor.get("source"), str) else ""
    return {"registered": bool(gate.get("registered")), "forced": forced,
            "text": text + source + (f" (flags: {flags})" if flags else "")}


def fit_inputs(fit_id: str, fit: dict[str, Any]) -> dict[str, Any] | None:
    """The files an end-point fit was fitted on (written beside ``fit.json``; on the site with its figures) and
    the command that refits them to the same numbers; None for a fit that wrote none."""
    inputs = fit.get("inputs")
    if not isinstance(inputs, dict) or not isinstance(inputs.get("command"), str):
        return None
    from glasslab.observatory.publish import figure_file  # publish draws its pages from this module

    names = [inputs[k] for k in ("points", "heroes") if isinstance(inputs.get(k), str)]
    return {"command": inputs["command"], "files": [{"name": n, "site": figure_file(fit_id, n)} for n in names]}


def law_line(fit: dict[str, Any], hero_flops: float | None) -> list[dict[str, float]]:
    """The fitted law L(C) as points from the smallest rung to past the hero (``law_line`` in
    ``fit.json`` when written, else from the law's parameters)."""
    written = [p for p in fit.get("law_line") or [] if isinstance(p, dict) and "flops" in p and "loss" in p]
    if written:
        return written
    params = (fit.get("law") or {}).get("params") or {}
    flops = [r.get("flops") for r in fit.get("rungs") or [] if isinstance(r.get("flops"), (int, float))]
    if not flops or not all(isinstance(params.get(k), (int, float)) for k in ("L_inf", "A", "alpha")):
        return []
    lo, hi = min(flops) / 2, max(max(flops), hero_flops or 0) * 1.5
    points = []
    for i in range(65):
        c = lo * (hi / lo) ** (i / 64)
        points.append({"flops": c, "loss": params["L_inf"] + params["A"] * c ** -params["alpha"]})
    return points


def registry_entries(lab: Lab) -> list[dict[str, Any]]:
    """Every registration in the lab's registry (``<lab>/predictions/``), newest per name marked ``in_force``,
    each with its verdict against the run its ``target`` names (by step name or folder)."""
    try:
        entries = [e for e in registry.registry_entries(lab.root) if isinstance(e, dict)]
    except (OSError, ValueError):
        return []
    newest = {e.get("name"): i for i, e in enumerate(entries)}
    targets = _runs_by_step_name(lab)
    rows = []
    for i, entry in enumerate(entries):
        row = {k: entry.get(k) for k in ("name", "metric", "point", "low", "high", "level", "target", "source",
                                          "registered_at", "seq", "replaces")}
        row["status"] = gate_status(entry)
        row["in_force"] = newest.get(entry.get("name")) == i
        run_id = targets.get(entry.get("target"))
        row["run"] = run_id
        row["verdict"] = _registry_verdict(lab, entry, run_id) if run_id and row["in_force"] else None
        rows.append(row)
    return rows


def _runs_by_step_name(lab: Lab) -> dict[str, str]:
    index = lab.index()
    names: dict[str, str] = {}
    for run_id, folder in index.runs.items():
        names[run_id] = names[folder.name] = run_id
        step_name = (lab.json(folder / STEP_RECORD) or {}).get("name")
        if isinstance(step_name, str):
            names.setdefault(step_name, run_id)
    return names


def _registry_verdict(lab: Lab, entry: dict[str, Any], run_id: str) -> dict[str, Any] | None:
    folder = lab.index().runs[run_id]
    record = lab.json(folder / RUN_RECORD) or {}
    details = entry.get("details") if isinstance(entry.get("details"), dict) else {}
    prediction = {"point": entry.get("point"), "lo": entry.get("low"), "hi": entry.get("high"),
                  "curve": details.get("curve")}
    with open_run(folder) as reader:
        if reader is None:
            return None
        last = reader.last(str(entry.get("metric")))
        status = run_status(reader.meta("writer"), reader.meta("status"), None)
    return verdict(prediction, last[0] if last else None, finite(last[1]) if last else None,
                   planned_steps(record), status)


def hero_verdict(lab: Lab, hero_id: str | None, prediction: dict[str, Any] | None) -> dict[str, Any] | None:
    """The hero's latest ``eval/macro/loss`` (or the prediction's target) against its band."""
    if not hero_id or not isinstance(prediction, dict):
        return None
    folder = lab.index().runs[hero_id]
    record = lab.json(folder / RUN_RECORD) or {}
    with open_run(folder) as reader:
        if reader is None:
            return verdict(prediction, None, None, None, None)
        last = reader.last(prediction.get("target") or LOSS_KEY)
        status = run_status(reader.meta("writer"), reader.meta("status"), None)
    out = verdict(prediction, last[0] if last else None, finite(last[1]) if last else None,
                  planned_steps(record), status)
    if out is not None:
        out["status"] = status
    return out


def hero_tasks(lab: Lab, fit_folder: str, fit: dict[str, Any], hero_id: str | None) -> list[dict[str, Any]]:
    """Per task the fit predicted (and the macro): chance, the predicted accuracy with its interval and the
    back-test error, what the hero reached (its latest score) and where each number comes from."""
    tasks = fit.get("tasks") or {}
    lab_name = lab.root.resolve().name
    rows = [{"task": name, "metric": f"eval/task/{name}/{law.get('metric', 'acc')}", "chance": law.get("chance"),
             "acc": law.get("acc") or {}, "backtest_points": (law.get("backtest") or {}).get("error_points"),
             "predicted_source": sources.read_from(lab_name, fit_folder, FIT_FILE, f"tasks.by_task.{name}.acc")}
            for name, law in sorted((tasks.get("by_task") or {}).items())]
    if tasks.get("macro"):
        macro = tasks["macro"]
        rows.append({"task": "macro", "metric": macro.get("metric"), "chance": macro.get("chance"), "acc": macro,
                     "backtest_points": None,
                     "predicted_source": sources.read_from(lab_name, fit_folder, FIT_FILE, "tasks.macro")})
    if not rows or not hero_id:
        return rows
    folder = lab.index().runs[hero_id]
    record = lab.json(folder / RUN_RECORD) or {}
    configured = ((record.get("config") or {}).get("train") or {}).get("eval_tasks") or []
    kept = sources.kept_checkpoint_steps(lab.json(folder / CHECKPOINT_LIST))
    with open_run(folder) as reader:
        reached = {row["metric"]: reader.last(row["metric"]) for row in rows} if reader is not None else {}
    for row in rows:
        last = reached.get(row["metric"])
        if not last:
            continue
        row["actual"], row["actual_step"] = finite(last[1]), last[0]
        row["actual_source"] = (sources.task_eval(lab_name, hero_id, last[0], configured, kept)
                                or sources.logged(lab_name, folder.name, row["metric"], last[0]))
    return rows


CLUSTER_LOSS = re.compile(r"^eval/cluster/(\d+)/loss$")


def cluster_scaling(lab: Lab, fit: dict[str, Any]) -> dict[str, Any] | None:
    """Each content cluster's held-out loss (``eval/cluster/<c>/loss``, the latest of each seed, their mean)
    at every rung's compute: which content improves with scale and which stays flat. ``{"map", "names":
    {id: name}, "rungs": [{"name", "flops", "losses": {id: mean}}]}``; None when no rung measured a cluster."""
    runs = lab.index().runs
    rows, map_name = [], None
    for rung in fit.get("rungs") or []:
        seeds: dict[int, list[float]] = {}
        for run_id in rung.get("run_ids") or []:
            folder = runs.get(run_id) or next((f for f in runs.values() if f.name == run_id), None)
            if folder is None:
                continue
            map_name = map_name or ((lab.json(folder / RUN_RECORD) or {}).get("cluster_evals") or {}).get("map")
            with open_run(folder) as reader:
                keys = [k for k in (reader.scalar_keys() if reader is not None else []) if CLUSTER_LOSS.match(k)]
                for key in keys:
                    last = reader.last(key)
                    if last and finite(last[1]) is not None:
                        seeds.setdefault(int(CLUSTER_LOSS.match(key).group(1)), []).append(last[1])
        if seeds:
            rows.append({"name": rung.get("name"), "flops": rung.get("flops"),
                         "losses": {c: sum(v) / len(v) for c, v in sorted(seeds.items())}})
    if not rows:
        return None
    summary = lab.json(lab.root / map_name / "map.json") if map_name else None
    names = {c["id"]: c.get("name") for c in (summary or {}).get("clusters") or []}
    return {"map": map_name, "names": names, "rungs": rows}


def ladder_sources(lab: Lab, folder: Path, fit: dict[str, Any], hero_id: str | None,
                   verdict_: dict[str, Any] | None, target: str) -> dict[str, Any]:
    """Where the page's numbers come from: the fit (prediction, law, rungs, back-test) and the hero's loss."""
    lab_name = lab.root.resolve().name
    step_config = (lab.json(folder / STEP_RECORD) or {}).get("config")
    out = {"fit": sources.ladder_fit(lab_name, folder.name, fit, step_config)}
    if hero_id and verdict_ and verdict_.get("step") is not None:
        out["hero"] = sources.logged(lab_name, lab.index().runs[hero_id].name, target, verdict_["step"])
    return out


def ladder_page(lab: Lab, fit_id: str) -> dict[str, Any] | None:
    folder = lab.index().fits.get(fit_id)
    if folder is None:
        return None
    fit = lab.json(folder / FIT_FILE) or {}
    hero_id = find_hero(lab, fit)
    target = fit.get("target") or LOSS_KEY
    hero = run_curve(lab, hero_id, (target, "train/loss")) if hero_id else None
    hero_record = lab.json(lab.index().runs[hero_id] / RUN_RECORD) if hero_id else None
    # The band drawn is the one registered in the hero's run.json before its first step.
    prediction = (hero_record or {}).get("prediction") or fit.get("prediction")
    if isinstance(prediction, dict) and not prediction.get("curve") and fit.get("curve"):
        prediction = {**prediction, "curve": fit["curve"]}
    cursors = {hero_id: hero.pop("cursor")} if hero and "cursor" in hero else {}
    planned_tokens = finite((hero_record or {}).get("tokens"))
    if hero and isinstance(prediction, dict) and finite(prediction.get("flops")) and planned_tokens:
        # The law's compute (the prediction's, at the hero's planned tokens) per token: the x of the hero's curve.
        hero["law_flops_per_token"] = prediction["flops"] / planned_tokens
    hero_verdict_ = hero_verdict(lab, hero_id, prediction)
    return clean({
        "page": "ladder", "id": fit_id, "title": f"Ladder {fit.get('ladder') or fit_id}", "fit": fit,
        "target": target, "prediction": prediction, "hero": hero,
        "hero_size": (hero_record or {}).get("size_name"), "tasks": hero_tasks(lab, folder.name, fit, hero_id),
        "sources": ladder_sources(lab, folder, fit, hero_id, hero_verdict_, target),
        "verdict": hero_verdict_, "parameters": law_parameters(fit), "floor": floor_line(fit),
        "gate": gate_line(fit, prediction), "inputs": fit_inputs(fit_id, fit),
        "law_line": law_line(fit, (prediction or {}).get("flops")), "registry": registry_entries(lab),
        "clusters": cluster_scaling(lab, fit),
        "cursors": cursors, "watch": [hero_id] if hero_id else [],
    })
