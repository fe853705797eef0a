"""Finished heroes in the lab's registry, and the earlier heroes of a recipe that a grid fit reads from it.

When a hero finishes, :func:`record_hero_result` appends its measured final ``eval/macro/loss`` to the
lab's registry (kind ``result``, under ``<ladder>/hero/measured/eval/macro/loss``) with what the end-point
law needs to use it as an earlier hero (``hero_floor``): N (non-embedding active parameters), D (forward
area at the end: the tokens at the peak learning rate), the run-to-run noise of its loss (its fit's
relative noise) and its **recipe** (:func:`recipe_of`). A grid ladder's fit step passes the results of the
same recipe, other than its own ladder's, to the gate (:func:`registry_heroes`): the check against them,
and the floor from them when the grid cannot place its own.

A recipe is what must be equal for two runs to lie on one law of N and D: the data manifest (its sha256
covers every shard and the tokenizer), the context length, the mixture (weights, phases, epoch caps) and the
expert layout
(dense, or experts and top-k). Width, depth and tokens are what the law varies.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from glasslab import config, track
from glasslab.lab import registry
from glasslab.ladder.curves import schedule_multipliers
from glasslab.ladder.hero_floor import EarlierHero
from glasslab.ladder.plan import record_law_params
from glasslab.ladder.rungs import TARGET_METRIC
from glasslab.train.config import ScheduleConfig

RESULT_KIND = "result"


def result_name(ladder: str) -> str:
    """The registry name of a ladder's hero's measured final loss."""
    return f"{ladder}/hero/measured/{TARGET_METRIC}"


def recipe_of(record: dict[str, Any]) -> dict[str, Any]:
    """The recipe of a run from its ``run.json`` record: data manifest, context, mixture, experts."""
    cfg = record.get("config") or {}
    moe = (cfg.get("model") or {}).get("moe")
    return {"data_manifest": record.get("data_manifest_hash"), "seq_len": (cfg.get("train") or {}).get("seq_len"),
            "mixture": (cfg.get("data") or {}).get("mixture"),
            "experts": None if not moe else {k: moe.get(k) for k in ("num_experts", "top_k", "num_shared_experts")}}


def recipe_of_run(run_dir: str | Path) -> dict[str, Any]:
    return recipe_of(track.read_record(Path(run_dir)) or {})


def end_point_of(record: dict[str, Any], where: str) -> tuple[float, float]:
    """A run's (N, D) as the end-point law reads them: non-embedding active parameters and forward area."""
    schedule = config.from_dict(ScheduleConfig, record["config"]["train"]["schedule"], "train.schedule")
    multipliers = schedule_multipliers(schedule, int(record["steps"]))
    batch_tokens = int(record["batch_size"]) * int(record["seq_len"])
    return record_law_params(record, where), float(np.sum(multipliers) * batch_tokens)


def record_hero_result(lab_root: str | Path, fit: dict[str, Any], run_dir: str | Path,
                       metrics: dict[str, Any], *, target: str) -> dict[str, Any] | None:
    """Append the finished hero's measured loss (``metrics``, its final metrics) to the registry with its
    N, D, noise and recipe; None (nothing recorded) when the run logged no final ``eval/macro/loss``."""
    loss = metrics.get(TARGET_METRIC)
    if not isinstance(loss, (int, float)) or not math.isfinite(loss):
        return None
    record = track.read_record(Path(run_dir)) or {}
    params, tokens = end_point_of(record, f"{run_dir}/run.json")
    noise = float(((fit.get("law") or {}).get("noise") or {}).get("sigma") or 0.0)
    details = {"ladder": fit["ladder"], "params": params, "tokens": tokens, "noise": noise,
               "recipe": recipe_of(record), "forced": bool((record.get("prediction") or {}).get("forced"))}
    # A measurement, not a commitment: a rerun's result replaces it (and the replacement is an incident).
    return registry.register(lab_root, result_name(fit["ladder"]), metric=TARGET_METRIC, point=loss, low=loss,
                             high=loss, target=target, source=Path(run_dir).name, details=details, replace=True,
                             kind=RESULT_KIND)


def registry_heroes(lab_root: str | Path, recipe: dict[str, Any], *, exclude_ladder: str) -> tuple[EarlierHero, ...]:
    """The registry's finished heroes of ``recipe`` (the newest result per ladder), other than
    ``exclude_ladder``'s own (a ladder's hero is its target, never its evidence)."""
    heroes = []
    for name, entry in registry.predictions(lab_root).items():
        details = entry.get("details") or {}
        if (entry["kind"] == RESULT_KIND and details.get("recipe") == recipe
                and details.get("ladder") != exclude_ladder and details.get("noise", 0) > 0):
            heroes.append(EarlierHero(name.removesuffix(f"/hero/measured/{TARGET_METRIC}"), float(details["params"]),
                                      float(details["tokens"]), float(entry["point"]), float(details["noise"])))
    return tuple(heroes)
