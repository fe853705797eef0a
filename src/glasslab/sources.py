"""Where a number the lab shows comes from: the command that recomputes it, or the file and key it is read from.

Every headline number on the observatory's pages and in ``glasslab card --markdown`` carries one of these
(a hover on the page, a footnote in the Markdown), so a reader can check it without trusting the page:

- ``{"kind": "command", "text": "glasslab ladder fit lab/demo-d16-s0-… --L-inf free … --lab lab"}``: rerun it
  and it prints the number (to the page's rounding);
- ``{"kind": "file", "file": "lab/demo-hero-…/metrics.db", "key": "eval/macro/loss", "text": …}``: a logged
  value, read from that file under that key (a metric name, or a dotted path into a JSON file).

Names are relative to the lab: a command runs beside the lab (in the folder that holds it) and names it
``--lab <its folder name>``; files are ``<lab name>/<folder>/<file>``. No absolute path or host name goes
into a source, so the live page, the published site and the Markdown show the same text (the public
record's rule, :mod:`glasslab.public`). A command is given only where the command line can say everything
the number depended on (a fit on run folders, built-in tasks without options the flags lack); anything
else gets the file and key it was read from.
"""

from __future__ import annotations

import shlex
from typing import Any

from glasslab.layout import FIT_FILE, METRICS_DB, PREDICTIONS_DIR, RESULT_FILE

Source = dict[str, Any]

TASK_DEFAULTS = {"name": "", "path": "", "layout": "auto", "template": None, "target_delimiter": None,
                 "fewshot_delimiter": "\n\n", "metric": "acc", "max_items": 0, "chat": False}
"""A task config's fields that ``glasslab eval --tasks NAME:DOMAIN`` cannot set: a task with any other
value there is named by the file and key its score was read from instead."""


def command(*words: str) -> Source:
    """A command anyone can run beside the lab; its text quoted as a shell reads it."""
    return {"kind": "command", "text": shlex.join(words)}


def read_from(lab_name: str, folder: str, file: str, key: str, step: int | None = None) -> Source:
    """A value read from ``<lab>/<folder>/<file>`` under ``key`` (at ``step``, for a logged metric)."""
    path = f"{lab_name}/{folder}/{file}"
    at = f" at step {step}" if step is not None else ""
    return {"kind": "file", "file": path, "key": key, "text": f"{path}, key {key}{at}"}


def logged(lab_name: str, run_folder: str, key: str, step: int | None = None) -> Source:
    """A metric the run logged: its store, the key, the step (the latest attempt at that step counts)."""
    return read_from(lab_name, run_folder, METRICS_DB, key, step)


def ladder_fit(lab_name: str, fit_folder: str, fit: dict[str, Any], step_config: dict[str, Any] | None,
               key: str = "prediction.point") -> Source:
    """``glasslab ladder fit`` of the fit's rung run folders with the asymptote, sweep, target compute and
    bootstrap its step used: it prints the rungs' losses, the law, the prediction with its interval and the
    back-test, as the fit in ``fit_folder`` holds them. A fit the command cannot redo (a grid fit, a points
    file, rungs whose folders are not named) is read from its ``fit.json`` under ``key``."""
    config = step_config or {}
    run_ids = [run for rung in fit.get("rungs") or [] for run in rung.get("run_ids") or []]
    whole = all(len(rung.get("run_ids") or []) == len(rung.get("losses") or []) for rung in fit.get("rungs") or [])
    target = config.get("target_flops")
    if config.get("grid") or not run_ids or not whole or not isinstance(target, (int, float)):
        return read_from(lab_name, fit_folder, FIT_FILE, key)
    L_inf = config.get("L_inf")
    words = ["glasslab", "ladder", "fit", *(f"{lab_name}/{run}" for run in run_ids),
             "--ladder", str(fit.get("ladder") or config.get("ladder") or "ladder"),
             "--L-inf", "free" if L_inf is None else repr(float(L_inf))]
    if config.get("sweep"):
        words += ["--sweep", *(repr(float(x)) for x in config["sweep"])]
    words += ["--target-flops", repr(float(target)), "--bootstrap", str(int(config.get("num_bootstrap", 1000))),
              "--lab", lab_name]
    return command(*words)


def task_flag(task: dict[str, Any]) -> str | None:
    """``NAME:DOMAIN`` for a built-in task the ``--tasks`` flag can name as configured, else None."""
    if not task.get("builtin") or any(task.get(k, v) != v for k, v in TASK_DEFAULTS.items()):
        return None
    return f"{task['builtin']}:{task['domain']}" if task.get("domain") else str(task["builtin"])


def task_eval(lab_name: str, run_folder: str, step: int, tasks: list[dict[str, Any]],
              kept_steps: set[int]) -> Source | None:
    """``glasslab eval RUN@STEP --tasks …`` re-scoring the run's checkpoint at ``step`` on the tasks it
    was scored on while training (``train.eval_tasks`` of its config); it prints each task's accuracy.
    None when that checkpoint is not kept or a task is not one the flags can name."""
    flags = [task_flag(t) for t in tasks]
    fewshot = {int(t.get("num_fewshot") or 0) for t in tasks}
    if step not in kept_steps or not flags or None in flags or len(fewshot) != 1:
        return None
    words = ["glasslab", "eval", f"{run_folder}@{step}", "--tasks", *flags]  # type: ignore[list-item]
    if fewshot != {0}:
        words += ["--fewshot", str(fewshot.pop())]
    return command(*words, "--lab", lab_name)


def kept_checkpoint_steps(checkpoint_list: dict[str, Any] | None) -> set[int]:
    """The steps a run's ``checkpoints.json`` lists."""
    return {int(c["step"]) for c in (checkpoint_list or {}).get("checkpoints") or []
            if isinstance(c, dict) and isinstance(c.get("step"), int)}


def run_result(lab_name: str, run_folder: str, key: str) -> Source:
    """A number of a finished run's ``result.json`` (its final eval, tokens, FLOPs)."""
    return read_from(lab_name, run_folder, RESULT_FILE, key)


def registry_entry(lab_name: str, name: str) -> Source:
    """A registered prediction: the newest entry called ``name`` in the lab's prediction registry (a folder of
    one file per entry)."""
    path = f"{lab_name}/{PREDICTIONS_DIR}/"
    return {"kind": "file", "file": path, "key": name, "text": f"{path}, the newest entry named {name}"}


def summed(lab_name: str, folders: list[str], file: str, keys: str) -> Source:
    """A total: ``keys`` of ``file`` in each of ``folders``, added up."""
    names = ", ".join(folders) if folders else "none"
    return {"kind": "file", "file": f"{lab_name}/<folder>/{file}", "key": keys,
            "text": f"{lab_name}/<folder>/{file}, keys {keys}, summed over {names}"}


def data_report(lab_name: str, data_folder: str) -> Source:
    """``glasslab data report`` of a dataset, written beside it (the lab's report is left as it is): it
    prints each domain's documents and tokens, training and held out."""
    return command("glasslab", "data", "report", f"{lab_name}/{data_folder}", "--out", f"{data_folder}-report.json")

