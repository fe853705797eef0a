"""``glasslab dpo BASE PAIRS... [--heldout FILE] [--steps N] [--seq-len N] [KEY=VALUE ...]``: preference-tune a
run's checkpoint or an export (an SFT model, usually) on preference pairs with DPO.

    glasslab dpo sft-1a2b3c4d pairs.jsonl                           # held out: a seeded 5% of pairs.jsonl
    glasslab dpo sft-1a2b3c4d builtin dpo.beta=0.2                  # the built-in pairs

Three steps in the lab: ``pairs`` (validated, bad records counted, the held-out part chosen), ``dpo`` (the
run; BASE is also its frozen reference) and ``export``. A pair is ``{"prompt": [messages ending with the
user's], "chosen": {"role": "assistant", ...}, "rejected": {...}}``; one longer than a row is left out and
counted. The run logs ``dpo/loss``, ``dpo/reward_margin``, ``dpo/accuracy`` and, on the held-out pairs,
``eval/dpo/pref_accuracy``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from glasslab.cli.tuning import add_tuning_options


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "dpo", help="preference-tune a run or an export on chosen/rejected pairs (DPO)",
        description="Preference-tune BASE with DPO on JSONL files of {\"prompt\", \"chosen\", \"rejected\"} "
        "pairs (or 'builtin', pairs from the built-in instruction set), BASE frozen as the reference, as steps "
        "in the lab: pairs, dpo, export.",
    )
    add_tuning_options(p, "PAIRS")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from glasslab.cli.tuning import run_steps, split_items, step_config, summary
    from glasslab.posttrain.base import find_base
    from glasslab.posttrain.dpo import DPOStepConfig
    from glasslab.posttrain.plans import dpo_steps, export_note

    lab = Path(args.lab)
    files, overrides = split_items(args.items, "PAIRS")
    cfg = step_config(DPOStepConfig, args, overrides)
    steps = dpo_steps(args.base, files, lab, heldout=args.heldout, cfg=cfg)
    done, export = run_steps(steps, lab)
    summary(done.folder, export, lab, None if export else export_note(find_base(args.base, lab)))
    return 0
