"""Which runs trained on a dataset, with which mixture, and how often each domain was actually read.

A dataset's report says what is in it; this says what was done with it. Every training run records its
dataset and its planned mixture in ``run.json`` (``dataset``, ``mixture``: see ``train/build.py``) and
logs ``mixture/epochs/<domain>`` as it goes, so the data page can show, per run, the weights and the
realised epochs per domain without anyone running ``data report --mixture`` by hand. Runs written before
``run.json`` named its dataset folder are matched by their ``data_manifest_hash``.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path
from typing import Any

from glasslab.config import from_dict
from glasslab.data.config import DataConfig
from glasslab.data.mixture import plan_mixture
from glasslab.data.shards import manifest_hash, read_manifest
from glasslab.layout import METRICS_DB, RESULT_FILE, RUN_RECORD, read_json
from glasslab.track import RunReader, read_record

EPOCHS_PREFIX = "mixture/epochs/"


def dataset_usage(dataset_dir: str | Path, run_dirs: Iterable[str | Path] | None = None) -> list[dict[str, Any]]:
    """One entry per run (of ``run_dirs``, default: every folder beside the dataset) that trained on the
    dataset in ``dataset_dir``, ordered by run id::

        {"run": run id, "status": "finished" | "running" | ..., "planned": {"token_budget",
         "phases": [{"start_step", "weights", "tokens", "epochs"}], "total": {"tokens", "epochs"},
         "shortfall"}, "realised": {"step", "epochs": {domain: passes over its training tokens}}}

    Weights are normalised per phase; tokens are training tokens; ``realised`` is read from the run's
    result (finished) or its store (running), and is None before its first step.
    """
    dataset_dir = Path(dataset_dir)
    digest = manifest_hash(dataset_dir)
    domains = read_manifest(dataset_dir)["domains"]
    tokens = {d: entry["train"]["tokens"] for d, entry in domains.items()}
    if run_dirs is None:
        run_dirs = [p for p in dataset_dir.resolve().parent.iterdir() if (p / RUN_RECORD).is_file()]
    usage = []
    for run_dir in map(Path, run_dirs):
        record = read_record(run_dir)
        if record is None or not _uses(record, dataset_dir, digest):
            continue
        usage.append({"run": run_dir.name, "status": _status(run_dir), "planned": _planned(record, tokens),
                      "realised": _realised(run_dir, sorted(tokens))})
    return sorted(usage, key=lambda entry: entry["run"])


def _uses(record: dict[str, Any], dataset_dir: Path, digest: str) -> bool:
    named = (record.get("dataset") or {}).get("folder")
    if named is not None:
        return named == dataset_dir.resolve().name and record["dataset"].get("manifest_hash") == digest
    return record.get("data_manifest_hash") == digest


def _planned(record: dict[str, Any], tokens: dict[str, int]) -> dict[str, Any] | None:
    if record.get("mixture"):
        return record["mixture"]
    try:  # an older run.json: plan it from the recorded config, as the run did
        data = from_dict(DataConfig, record["config"]["data"])
        train = record["config"]["train"]
        steps = train["max_steps"] or train["max_tokens"] // train["global_batch_tokens"]
        return plan_mixture(data.mixture, tokens, steps * train["global_batch_tokens"], train["global_batch_tokens"])
    except (KeyError, TypeError, ValueError):
        return None


def _realised(run_dir: Path, domains: list[str]) -> dict[str, Any] | None:
    result = read_json(run_dir / RESULT_FILE)
    if result is not None and any(f"{EPOCHS_PREFIX}{d}" in result for d in domains):
        return {"step": result.get("step"),
                "epochs": {d: result[f"{EPOCHS_PREFIX}{d}"] for d in domains if f"{EPOCHS_PREFIX}{d}" in result}}
    if not (run_dir / METRICS_DB).is_file():
        return None
    with RunReader(run_dir) as reader:
        last = {d: reader.last(f"{EPOCHS_PREFIX}{d}") for d in domains}
    found = {d: point for d, point in last.items() if point is not None}
    if not found:
        return None
    return {"step": max(step for step, _ in found.values()), "epochs": {d: value for d, (_, value) in found.items()}}


def _status(run_dir: Path) -> str:
    if (run_dir / RESULT_FILE).is_file():
        return "finished"
    if not (run_dir / METRICS_DB).is_file():
        return "starting"
    with RunReader(run_dir) as reader:
        return str(reader.meta("status") or "running")
