"""``glasslab sft BASE CONVERSATIONS... [--heldout FILE] [--steps N] [--seq-len N] [KEY=VALUE ...]``: fine-tune a
run's checkpoint or an export on your own conversations.

    glasslab sft demo-hero-1a2b3c4d my.jsonl                         # held out: a seeded 5% of my.jsonl
    glasslab sft lab/my-run@200 chats.jsonl --heldout held.jsonl --steps 300 train.optimizer.lr=3e-4
    glasslab sft export-9f8e7d6c builtin --drop-long                 # the built-in instruction set

Three steps in the lab: ``conversations`` (the files validated, bad records counted, the held-out part
chosen), ``sft`` (the run) and ``export`` (for transformers, with the chat template). No pretraining mixture
is asked for; forgetting is measured on the base's dataset when it is in the lab. Every conversation is
accounted for: cut at a turn boundary when longer than a row (or left out with ``--drop-long``), counted on
the console, in ``run.json`` and on the run page.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from glasslab.cli.tuning import add_tuning_options


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "sft", help="fine-tune a run or an export on conversations (supervised, assistant tokens only)",
        description="Fine-tune BASE on JSONL files of {\"messages\": [...]} conversations (or 'builtin', the "
        "built-in instruction set; 'builtin:arithmetic', the RL task's training problems with their answers, "
        "held out as RL holds them out), the loss on the assistant's tokens only, as steps in the lab: "
        "conversations, sft, export. A conversation longer than a row is cut at a turn boundary (or left out "
        "with --drop-long); every count is printed and recorded.",
    )
    add_tuning_options(p, "CONVERSATIONS")
    p.add_argument("--drop-long", action="store_true",
                   help="leave out conversations longer than a row instead of cutting them at a turn boundary")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from glasslab.cli.tuning import run_steps, split_items, step_config, summary
    from glasslab.posttrain.base import find_base
    from glasslab.posttrain.plans import export_note, sft_steps
    from glasslab.posttrain.sft import SFTStepConfig

    lab = Path(args.lab)
    files, overrides = split_items(args.items, "CONVERSATIONS")
    if args.drop_long:
        overrides = ["sft.drop_long=true", *overrides]
    cfg = step_config(SFTStepConfig, args, overrides)
    steps = sft_steps(args.base, files, lab, heldout=args.heldout, cfg=cfg)
    done, export = run_steps(steps, lab)
    summary(done.folder, export, lab, None if export else export_note(find_base(args.base, lab)))
    return 0
