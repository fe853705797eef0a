"""The prompts an RL step answers: a built-in task's, or a user's JSONL, split into training and held out.

A record is a JSON object with a string ``"prompt"`` (the user's message) and any other fields its reward
reads (the built-in tasks: ``"answer"``, ``"tests"``). A bad record is counted and listed as
``file:line: why``. Held out: the ``heldout_files`` when given, else a seeded one in ten of the records
(the built-in tasks hold out whole problems the same way, :mod:`glasslab.posttrain.rewards_builtin`).
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glasslab.errors import UserError
from glasslab.posttrain.records import RecordProblems, check_file_hashes, read_records, read_split, write_split_folder
from glasslab.posttrain.rewards_builtin import builtin_problems, split_problems

FORMAT = "glasslab-prompts/1"


@dataclass(frozen=True)
class PromptsConfig:
    """Where an RL step's prompts come from."""

    builtin: str = ""
    """A built-in task's prompts (``arithmetic``, ``code``); empty: the files only."""
    builtin_sha256: str = ""
    """sha256 of the built-in task's problems as planned, so a changed task makes a new folder."""
    files: tuple[str, ...] = ()
    """JSONL files of ``{"prompt": ..., ...}`` records."""
    heldout_files: tuple[str, ...] = ()
    """JSONL files of held-out records; given, none of the others is held out."""
    file_hashes: dict[str, str] = field(default_factory=dict)
    """sha256 of every file, so an edited file makes a new folder."""
    seed: int = 0
    """Seed of the held-out split."""


def builtin_sha256(name: str) -> str:
    """sha256 of the built-in task ``name``'s problems (their JSON, in order)."""
    return hashlib.sha256(json.dumps(builtin_problems(name)).encode()).hexdigest()


def problem_with(record: object) -> str | None:
    if not isinstance(record, dict):
        return "not a JSON object"
    if not isinstance(record.get("prompt"), str) or not record["prompt"].strip():
        return "no \"prompt\" string"
    return None


def gather_prompts(cfg: PromptsConfig) -> tuple[list[dict], list[dict], RecordProblems]:
    """(training records, held-out records, the bad records met)."""
    problems = RecordProblems()
    train: list[dict] = []
    heldout: list[dict] = []
    if cfg.builtin:
        builtin_train, builtin_heldout = split_problems(builtin_problems(cfg.builtin), cfg.seed)
        train += builtin_train
        heldout += builtin_heldout
    given = [r for f in cfg.files for r in read_records(f, problem_with, problems, what="prompts")]
    if cfg.heldout_files:
        train += given
        heldout += [r for f in cfg.heldout_files for r in read_records(f, problem_with, problems, what="prompts")]
    else:
        given_train, given_heldout = split_problems(given, cfg.seed)
        train += given_train
        heldout += given_heldout
    if not train or not heldout:
        raise UserError(f"prompts: {len(train)} training and {len(heldout)} held-out records; RL needs both")
    return train, heldout, problems


def prompts_step(ctx: Any) -> Path:
    """Write the prompts folder (``train.jsonl``, ``heldout.jsonl``, ``report.json``) into ``ctx.output_dir``."""
    cfg: PromptsConfig = ctx.config
    check_file_hashes(cfg.file_hashes)
    train, heldout, problems = gather_prompts(cfg)
    if problems.count:
        print(f"[prompts] {problems.count:,} bad record(s) skipped, e.g. {problems.listed[0]}", file=sys.stderr)
    print(f"[prompts] {len(train):,} training and {len(heldout):,} held-out prompts", file=sys.stderr, flush=True)
    out = Path(ctx.output_dir)
    write_split_folder(out, FORMAT, train, heldout, {"train": len(train), "heldout": len(heldout),
                                                     "problems": problems.as_dict()})
    return out


def read_prompt_split(folder: str | Path, split: str) -> list[dict]:
    return read_split(folder, split, FORMAT, "the prompts step of `glasslab rl`")
