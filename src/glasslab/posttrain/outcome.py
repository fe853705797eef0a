"""A finished post-training run in numbers, before and after: what the demo's table, ``glasslab sft``/``dpo``,
the bench and the tests read (the base's numbers are the ones ``run.json`` recorded before step 0)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from glasslab.evals.load import MACRO_ACC
from glasslab.layout import RESULT_FILE, read_json
from glasslab.posttrain.samples import turn_text
from glasslab.track import RunReader, read_record

HEADLINE = {"sft": "eval/sft/loss", "dpo": "eval/dpo/pref_accuracy", "rl": "eval/rl/pass_at_1"}
"""The metric each role is judged by: held-out SFT loss (nats per assistant token), held-out preference
accuracy (share of pairs whose chosen reply the model finds likelier), held-out pass@1 (greedy answers
that earn full reward)."""


def outcome(run_dir: str | Path) -> dict[str, Any]:
    """The run's headline metric (``key``) for the base (``before``) and after (``after``) and its relative
    change, each task's accuracy before and after (``tasks``: name -> (before, after), the macro average as
    ``macro``, last), the data counts ``run.json`` holds (``counts``), and the last sample's first prompt
    with the base's and the run's replies."""
    record = read_record(run_dir) or {}
    result = read_json(Path(run_dir) / RESULT_FILE) or {}
    key = HEADLINE.get(record.get("role", ""), "eval/sft/loss")
    base = record.get("base", {})
    before, after = base.get("metrics", {}).get(key), result.get(key)
    with RunReader(run_dir) as reader:
        samples = reader.samples()
    last = [s for s in samples if samples and s["step"] == samples[-1]["step"]]
    prompt = turn_text(last[0]["prompt"]) if last else ""
    base_reply = next((turn_text(s["text"]) for s in base.get("samples", []) if turn_text(s["prompt"]) == prompt), "")
    keys = [k for k in result if k.startswith("eval/task/") and k.endswith("/acc") and k in base.get("metrics", {})]
    tasks = {k.split("/")[2]: (base["metrics"][k], result[k]) for k in sorted(keys, key=lambda k: (k == MACRO_ACC, k))}
    return {"key": key, "before": before, "after": after,
            "relative": (after - before) / before if before and after is not None else None,
            "tasks": tasks, "counts": record.get("conversations") or record.get("pairs") or record.get("prompts") or {},
            "prompt": prompt, "base_reply": base_reply, "reply": turn_text(last[0]["text"]) if last else ""}
