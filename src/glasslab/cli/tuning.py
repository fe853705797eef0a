"""What ``glasslab sft`` and ``glasslab dpo`` share: their flags, mapping them onto the step's config, running
the steps, and the summary they end with. The steps themselves are ``posttrain.plans``'."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path
from typing import Any

from glasslab.cli.options import add_lab_option
from glasslab.errors import UserError


def add_tuning_options(p: argparse.ArgumentParser, data: str) -> None:
    """BASE, the data files and KEY=VALUE overrides, --heldout, --steps, --seq-len, --device, --lab."""
    p.add_argument("base", metavar="BASE", help="the model to tune: a run id under the lab or a run folder, "
                   "optionally @STEP (default: its newest intact checkpoint); or an export (glasslab export)")
    p.add_argument("items", nargs="+", metavar=f"{data}|KEY=VALUE",
                   help=f"JSONL files of {data.lower()} (or 'builtin'), then overrides of the step's config such "
                   "as train.optimizer.lr=3e-4")
    p.add_argument("--heldout", action="append", default=[], metavar="FILE",
                   help="held-out records (repeatable); default: a seeded 5%% of the others, at least 32 but never "
                   "more than a fifth")
    p.add_argument("--steps", type=int, default=None, metavar="N", help="optimiser steps (train.max_steps)")
    p.add_argument("--seq-len", type=int, default=None, metavar="N",
                   help="tokens per row (train.seq_len; the batch keeps its rows per step)")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="where to train (default cpu)")
    add_lab_option(p)
    p.set_defaults(trailing_items="items")


def split_items(items: list[str], data: str) -> tuple[list[str], list[str]]:
    """(data files, KEY=VALUE overrides): files first, then overrides."""
    files: list[str] = []
    overrides: list[str] = []
    for item in items:
        if "=" in item:
            overrides.append(item)
        elif overrides:
            raise UserError(f"{item!r}: expected the {data} files before the KEY=VALUE overrides")
        else:
            files.append(item)
    if not files:
        raise UserError(f"expected at least one {data} file (or 'builtin') after BASE")
    return files, overrides


def step_config(cls: type, args: argparse.Namespace, overrides: list[str]) -> Any:
    """The tuning step's config ``cls`` (SFTStepConfig, DPOStepConfig) from its defaults, the flags and ``overrides``
    (``train.…``, ``sft.…``/``dpo.…``)."""
    from glasslab import config as configs

    values = configs.to_dict(cls())
    train = values["train"]
    if args.seq_len is not None:  # the same rows per step at the new length
        train["global_batch_tokens"] = train["global_batch_tokens"] // train["seq_len"] * args.seq_len
        train["seq_len"] = args.seq_len
    if args.steps is not None:
        train["max_steps"] = args.steps
    values["device"] = args.device
    values["command"] = shlex.join(["glasslab", *args.argv])  # for the run page's Reproduce box
    allowed = {f"{key}." for key in ("train", "sft", "dpo", "rl") if key in values}
    for item in overrides:
        if not any(item.startswith(prefix) for prefix in allowed):
            raise UserError(f"{item!r}: expected an override of {' or '.join(sorted(p + '…' for p in allowed))}")
    return configs.from_dict(cls, configs.apply_overrides(values, overrides))


def run_steps(steps: list, lab: Path):
    """Run the command's steps (cached ones are found, a failed tuning run resumes); the tuning step's
    :class:`~glasslab.lab.StepRun` and the export's folder (None without one)."""
    from glasslab.lab import run_one_step
    from glasslab.train.steps import TrainingPreempted

    try:
        done = run_one_step(steps[-1], lab)
    except TrainingPreempted as stopped:
        raise UserError(f"preempted at step {stopped.result['step']}; checkpoint written, the same command "
                        "resumes it") from None
    tuned = steps[1]
    if done.name == tuned.name:
        return done, None
    return run_one_step(tuned, lab), done.folder


def summary(run_dir: Path, export: Path | None, lab: Path, note: str | None) -> None:
    """The run's counts, its headline before and after, a reply before and after, and what to do next."""
    from glasslab.posttrain.outcome import outcome

    out = outcome(run_dir)
    for split, counts in (out["counts"] or {}).items():
        print(f"{split}: " + ", ".join(f"{k} {v:,}" for k, v in counts.items()))
    if out["before"] is not None and out["after"] is not None:
        print(f"{out['key']}: {out['before']:.4f} (base) -> {out['after']:.4f}")
    if out["prompt"]:
        print(f"reply to {out['prompt']!r}\n  base: {out['base_reply']!r}\n  now:  {out['reply']!r}")
    print(f"run: {run_dir}")
    if export is not None:
        print(f"export: {export}  (glasslab chat {export.name} --lab {lab})")
    elif note:
        print(note, file=sys.stderr)
    print(f"talk to it beside its base: glasslab serve --lab {lab}, then open the run's page")
