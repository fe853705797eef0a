"""The run page's pieces for a post-training run (SFT, DPO, RL): its panels, and what its chat panel may talk to.

The run page's sections draw the rest: ``static/run-posttrain.js`` what became of the data (from
``run.json``: the counts of conversations cut or left out, of pairs left out) and the base's metrics
before step 0 beside the run's own; ``static/run-chat.js`` the chat panel, live on ``glasslab serve``
(``chat.py``), the replies recorded before and after on the static site.
"""

from __future__ import annotations

from glasslab.layout import EXPORT_MANIFEST
from glasslab.observatory.relations import Relations

TUNED_ROLES = ("sft", "dpo", "rl")
POSTTRAIN_PANELS = (
    ("DPO loss (train, held out)", lambda k: k in ("dpo/loss", "eval/dpo/loss"), False),
    ("DPO reward margin β·Δlog-ratio (train, held out)", lambda k: k in ("dpo/reward_margin", "eval/dpo/reward_margin"),
     False),
    ("Preference accuracy (margin > 0; held-out log π(chosen) > log π(rejected))",
     lambda k: k in ("dpo/accuracy", "eval/dpo/accuracy", "eval/dpo/pref_accuracy"), False),
    ("RL reward (mean and spread over the step's rollouts)", lambda k: k in ("rl/reward_mean", "rl/reward_std"), False),
    ("Held-out pass rate (pass@1 greedy, pass@G sampled)", lambda k: k.startswith("eval/rl/pass_at_"), False),
)
"""The run page's panels for DPO's and RL's metrics, placed before the others (first match wins)."""


def chat_models(relations: Relations, run_id: str) -> dict[str, list[dict[str, str]]] | None:
    """``{"tuned": [{ref, label}], "base": [...]}`` for a post-training run's page; None for another run."""
    record = relations.record(run_id)
    if record.get("role") not in TUNED_ROLES:
        return None
    exports = [e for e in relations.exports(run_id) if e.get("status") == "succeeded"]
    tuned = [{"ref": run_id, "label": f"{run_id} (newest checkpoint)"}]
    tuned += [{"ref": e["id"], "label": f"{e['id']} (export of step {e['step']})"} for e in exports]
    base: list[dict[str, str]] = []
    parent = relations.parent(run_id)
    if parent and parent["run"]:
        at = f"@{parent['step']}" if parent["step"] is not None else ""
        base.append({"ref": f"{parent['run']}{at}", "label": f"{parent['run']}{at} (the base)"})
    named = (record.get("parent") or {}).get("export")
    if isinstance(named, str) and (relations.lab.root / named / EXPORT_MANIFEST).is_file():
        base.append({"ref": named, "label": f"{named} (the base, an export)"})
    return {"tuned": tuned, "base": base}
