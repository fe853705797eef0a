"""Preference pairs for DPO: read and validate ``{"prompt", "chosen", "rejected"}`` JSONL, the built-in pair
set, the held-out split, and the pairs folder a DPO step reads.

A record is one prompt (the conversation so far, ending with the user's message) and two candidate
replies, the preferred one first::

    {"prompt": [{"role": "system", "content": "..."}, {"role": "user", "content": "..."}],
     "chosen": {"role": "assistant", "content": "..."},
     "rejected": {"role": "assistant", "content": "..."}}

The built-in pairs are of two kinds. From the built-in arithmetic task (``arithmetic``, on by default;
:mod:`glasslab.posttrain.rewards_builtin`): "What is 7 + 12?", chosen the right answer, rejected the answer
to another problem of the same operator; they keep the task's split, so no held-out pair asks a problem a
training pair (or an RL run's training prompt) asks. These teach: a small model starts near chance on them
and DPO raises its held-out preference (docs/LOG.md, 2026-12-05). From the built-in instruction set's
``describe`` conversations ("What does `json.dumps` do?"): chosen is the right docstring summary, rejected
the summary of a function of another module; a held-out one asks about a function never trained on, which
tuning on the others hardly teaches (DPO moved the demo's accuracy on them by +0.0 points). Made
from a conversations folder (the demo's, the SFT run's), they keep its split: pairs from its
training conversations train, pairs from its held-out ones are held out, so the held-out pairs ask about
functions neither SFT nor DPO trained on. Otherwise the pairs are held out as conversations are: the
``heldout_files`` when given, else a seeded hash of each pair.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np

from glasslab.config import from_dict, to_dict
from glasslab.errors import UserError
from glasslab.lab import NO_OUTPUT, StepOutput
from glasslab.layout import REPORT_FILE
from glasslab.posttrain.conversations import read_conversation_split, split_conversations
from glasslab.posttrain.records import (
    RecordProblems,
    RecordSources,
    check_file_hashes,
    message_problem,
    messages_problem,
    no_heldout,
    read_records,
    read_split,
    say,
    say_skipped,
    write_split_folder,
)
from glasslab.posttrain.rewards_builtin import ARITHMETIC_LIMITS, arithmetic_problems, split_problems

FORMAT = "glasslab-pairs/1"
_SUBJECT = re.compile(r"`([^`]+)`")


@dataclass(frozen=True)
class PairsConfig(RecordSources):
    """Where preference pairs come from (``files``: JSONL of ``{"prompt", "chosen", "rejected"}``; ``builtin``:
    the built-in pairs, from the instruction set or the conversations dependency's) and which are held out."""

    section: ClassVar[str] = "pairs"
    conversations_from: StepOutput = NO_OUTPUT
    """A step whose output folder is a conversations folder: the built-in pairs are made from it."""
    arithmetic: bool = True
    """With ``builtin``: add the built-in arithmetic task's pairs (the right answer over another problem's)."""
    describe: bool = True
    """With ``builtin``: add the pairs of the instruction set's ``describe`` conversations."""


def problem_with(record: object) -> str | None:
    """What is wrong with a parsed record (one phrase), or None when it is a valid preference pair."""
    if not isinstance(record, dict) or not all(k in record for k in ("prompt", "chosen", "rejected")):
        keys = ", ".join(sorted(record)) if isinstance(record, dict) else type(record).__name__
        return f"expected 'prompt', 'chosen' and 'rejected' (found: {keys or 'nothing'})"
    problem = messages_problem(record["prompt"], "prompt", last_role="user")
    for key in ("chosen", "rejected"):
        if problem is None:
            problem = message_problem(record[key], key)
        if problem is None and record[key]["role"] != "assistant":
            problem = f"{key}.role={record[key]['role']!r}: expected 'assistant'"
    if problem is None and record["chosen"]["content"] == record["rejected"]["content"]:
        problem = "chosen and rejected are the same reply"
    return problem


def read_pairs(path: str | Path, problems: RecordProblems, strict: bool = False):
    """Valid pairs of a JSONL file, in order; a bad one is recorded in ``problems``."""
    return read_records(path, problem_with, problems, strict, what="pairs")


def builtin_pairs(conversations: list[dict], seed: int) -> tuple[list[dict], int]:
    """(pairs, describe conversations without a pair) from ``conversations``: each single-turn ``describe``
    conversation's prompt, its reply as chosen and a reply about another module's function as rejected."""
    describe = [r for r in conversations if r.get("kind") == "describe" and len(r["messages"]) <= 3]
    modules = [_module(r) for r in describe]
    rng = np.random.default_rng(seed)
    pairs, unpaired = [], 0
    for i, record in enumerate(describe):
        chosen = record["messages"][-1]["content"]
        for _ in range(20):
            j = int(rng.integers(len(describe)))
            if modules[j] != modules[i] and describe[j]["messages"][-1]["content"] != chosen:
                break
        else:
            unpaired += 1
            continue
        pairs.append({"prompt": record["messages"][:-1], "chosen": record["messages"][-1],
                      "rejected": {"role": "assistant", "content": describe[j]["messages"][-1]["content"]},
                      "kind": "builtin"})
    return pairs, unpaired


def arithmetic_pairs(seed: int) -> tuple[list[dict], list[dict]]:
    """(training, held-out) pairs of the built-in arithmetic task, split as the task splits its problems:
    each problem's right answer as chosen, the answer of another problem of the same operator as rejected."""
    rng = np.random.default_rng(seed)
    split = split_problems(arithmetic_problems())
    answers = {op: sorted({p["answer"] for part in split for p in part if f" {op} " in p["prompt"]})
               for op in ARITHMETIC_LIMITS}
    made = []
    for part in split:
        pairs = []
        for problem in part:
            op = next(op for op in ARITHMETIC_LIMITS if f" {op} " in problem["prompt"])
            wrong = [a for a in answers[op] if a != problem["answer"]]
            pairs.append({"prompt": [{"role": "user", "content": problem["prompt"]}],
                          "chosen": {"role": "assistant", "content": problem["answer"]},
                          "rejected": {"role": "assistant", "content": wrong[int(rng.integers(len(wrong)))]},
                          "kind": "arithmetic"})
        made.append(pairs)
    return made[0], made[1]


def _module(record: dict) -> str:
    """The top-level module a describe question asks about (``os`` for "What does `os.path.join` do?")."""
    found = _SUBJECT.search(record["messages"][-2]["content"])
    return found.group(1).split(".")[0] if found else ""


def pair_text(record: dict) -> str:
    """What the held-out hash of a pair is taken over."""
    return json.dumps([record["prompt"], record["chosen"], record["rejected"]], ensure_ascii=False, sort_keys=True)


def build_pairs(cfg: PairsConfig, out_dir: str | Path, conversations: str | Path | None = None,
                progress: bool = True) -> Path:
    """Write ``train.jsonl``, ``heldout.jsonl``, ``report.json`` and ``manifest.json`` into ``out_dir``;
    the built-in pairs from ``conversations`` (a conversations folder) when given."""
    out_dir = Path(out_dir)
    check_file_hashes(cfg.file_hashes)
    problems = RecordProblems()
    given = [r for path in cfg.files for r in read_pairs(path, problems, cfg.strict)]
    given_heldout = [r for path in cfg.heldout_files for r in read_pairs(path, problems, cfg.strict)]
    if cfg.heldout_files:
        train, heldout = given, given_heldout
    else:
        train, heldout = cfg.split(given, [pair_text(r) for r in given])
    sources = [str(p) for p in cfg.files]
    unpaired = 0
    if cfg.builtin and cfg.describe:
        if conversations is not None:
            split = read_conversation_split(conversations, "train"), read_conversation_split(conversations, "heldout")
            sources.append(f"builtin (from {Path(conversations).name})")
        else:
            from glasslab.posttrain.instructions import instruction_conversations

            split = split_conversations(list(instruction_conversations(cfg.builtin_max_modules)), cfg)
            sources.append("builtin")
        (made_train, lone_train), (made_heldout, lone_heldout) = (builtin_pairs(part, cfg.seed) for part in split)
        train, heldout, unpaired = train + made_train, heldout + made_heldout, lone_train + lone_heldout
    if cfg.builtin and cfg.arithmetic:
        task_train, task_heldout = arithmetic_pairs(cfg.seed)
        train, heldout = train + task_train, heldout + task_heldout
        sources.append("builtin:arithmetic")
    say_skipped(problems, "pairs", out_dir / REPORT_FILE)
    say(unpaired > 0, "pairs", f"{unpaired} built-in question(s) gave no pair (no other module's "
        "answer to reject)")
    if not train:
        raise UserError(f"no valid training pairs in {', '.join(sources) or 'the sources'}"
                        + (f" ({problems.count} bad record(s), first: {problems.listed[0]})" if problems.count else ""))
    if not heldout:
        raise no_heldout(len(train) + len(heldout), "pairs", cfg.heldout_files)
    report = {"sources": sources, "heldout_sources": list(cfg.heldout_files) or None,
              "pairs": len(train) + len(heldout), "train": len(train), "heldout": len(heldout),
              "builtin_unpaired": unpaired,
              "bad_records": problems.as_dict(), "config": to_dict(cfg)}
    write_split_folder(out_dir, FORMAT, train, heldout, report)
    say(progress, "pairs", f"{len(train)} training and {len(heldout)} held-out pairs in {out_dir}")
    return out_dir


def read_pair_split(folder: str | Path, split: str) -> list[dict]:
    """The records of ``train`` or ``heldout`` of a pairs folder (checked against its manifest)."""
    return read_split(folder, split, FORMAT, "the pairs step (glasslab dpo)")


def pairs_step(ctx) -> Path:
    """Lab step: build ``ctx.config`` (a PairsConfig) into ``ctx.output_dir``; with ``conversations_from`` the
    built-in pairs are made from that step's conversations (and keep its split)."""
    cfg = ctx.config if isinstance(ctx.config, PairsConfig) else from_dict(PairsConfig, ctx.config)
    conversations = cfg.conversations_from.folder if cfg.conversations_from else None
    return build_pairs(cfg, Path(ctx.output_dir), conversations, progress=False)
