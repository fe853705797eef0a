"""``glasslab rl BASE PROMPTS... --reward FILE|builtin:TASK [--group-size G] [--steps N] [KEY=VALUE ...]``:
reinforcement learning with rewards a program checks (GRPO) of a run's checkpoint or an export.

    glasslab rl sft-1a2b3c4d builtin --reward builtin:arithmetic --steps 40
    glasslab rl sft-1a2b3c4d prompts.jsonl --reward my_reward.py --group-size 8 rl.kl_coef=0.05

Three steps in the lab: ``prompts`` (validated, bad records counted, the held-out part chosen), ``rl`` (the
run; BASE is also its KL reference) and ``export``. A prompt record is ``{"prompt": "...", ...}``; a reward
file defines ``reward(prompt, completion) -> float`` (``prompt`` is the record). The run logs ``rl/...``
(reward mean and spread, groups with no spread, KL, entropy, completion length, reward failures) and, on the
held-out prompts, ``eval/rl/pass_at_1`` and ``eval/rl/pass_at_G``.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from glasslab.cli.tuning import add_tuning_options


def add_parser(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "rl", help="RL with verifiable rewards (GRPO) of a run or an export on prompts a program scores",
        description="Tune BASE with GRPO on JSONL files of {\"prompt\": ...} records (or 'builtin', the built-in "
        "task's prompts), rewarded by a Python file's reward(prompt, completion) or a built-in task, BASE frozen as "
        "the KL reference, as steps in the lab: prompts, rl, export.",
    )
    add_tuning_options(p, "PROMPTS")
    p.add_argument("--reward", required=True, metavar="FILE|builtin:TASK",
                   help="a Python file defining reward(prompt, completion) -> float, or builtin:arithmetic, "
                   "builtin:code")
    p.add_argument("--group-size", type=int, default=None, metavar="G", help="answers per prompt (rl.group_size)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from glasslab.cli.tuning import run_steps, split_items, step_config, summary
    from glasslab.posttrain.base import find_base
    from glasslab.posttrain.plans import export_note
    from glasslab.posttrain.rl_plans import rl_steps
    from glasslab.posttrain.rl_step import RLStepConfig

    lab = Path(args.lab)
    files, overrides = split_items(args.items, "PROMPTS")
    flags = [f"rl.reward={args.reward}"] + ([f"rl.group_size={args.group_size}"] if args.group_size else [])
    cfg = step_config(RLStepConfig, args, flags + overrides)
    steps = rl_steps(args.base, files, lab, heldout=args.heldout, cfg=cfg)
    done, export = run_steps(steps, lab)
    summary(done.folder, export, lab, None if export else export_note(find_base(args.base, lab)))
    return 0
