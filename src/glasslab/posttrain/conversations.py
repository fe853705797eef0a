"""Conversation data for SFT: read and validate ``{"messages": [...]}`` JSONL, hold out a split, decontaminate.

A record is one conversation in the common layout::

    {"messages": [{"role": "system", "content": "..."},      # optional, first only
                  {"role": "user", "content": "..."},
                  {"role": "assistant", "content": "..."}, ...]}

(other top-level keys are kept and ignored). Bad records are skipped and counted, or stop the build under
``strict`` (:mod:`glasslab.posttrain.records`).

``build_conversations`` writes a conversations folder: ``train.jsonl`` and ``heldout.jsonl``, then
``report.json`` and last ``manifest.json``. The held-out conversations are the ``heldout_files`` when
given, else a split chosen by a seeded hash of each conversation (stable under reordering). Training
conversations that overlap the held-out documents of a pretraining dataset (``decontaminate``: its eval
split, which task evals are made from) are dropped and counted: a shared word n-gram of the dataset's
n-gram length, or for a message shorter than that, its whole text (of at least ``MIN_SHORT_WORDS``
words) appearing in a held-out document.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import ClassVar

from glasslab.config import UNVERSIONED, VERSIONED_WHEN_SET, from_dict, require, to_dict
from glasslab.data.decontaminate import Decontaminator
from glasslab.data.tokenizer import CHAT_ROLES
from glasslab.errors import UserError
from glasslab.lab import NO_OUTPUT, StepOutput
from glasslab.layout import REPORT_FILE
from glasslab.posttrain.records import (
    RecordProblems,
    RecordSources,
    check_file_hashes,
    messages_problem,
    no_heldout,
    read_records,
    read_split,
    say,
    say_skipped,
    write_split_folder,
)

TASKS_WITH_ANSWERS = ("arithmetic",)
"""Built-in RL tasks whose problems carry the answer itself (``code`` has tests, not a solution)."""
MIN_SHORT_WORDS = 4
"""Messages of fewer words are too generic ("Show me its code.") to count as overlap on their own."""
FORMAT = "glasslab-conversations/1"


@dataclass(frozen=True)
class ConversationsConfig(RecordSources):
    """Where SFT conversations come from (``files``: JSONL of ``{"messages": [...]}``; ``builtin``: the built-in
    instruction set), which are held out to measure SFT loss, and what they are decontaminated against."""

    section: ClassVar[str] = "conversations"
    decontaminate: str = ""
    """A dataset folder (``glasslab data build``) whose eval split training conversations must not overlap."""
    decontaminate_from: StepOutput = field(default=NO_OUTPUT, metadata=UNVERSIONED)
    """Or: the data build step whose dataset that is. Not hashed itself: the step's identity has that
    dependency's hash (so the demo's conversations kept their name when this replaced a dependency named
    ``data``)."""
    task: str = field(default="", metadata=VERSIONED_WHEN_SET)
    """A built-in RL task with reference answers (``arithmetic``): its problems as one-turn conversations
    (question, then the answer alone), held out exactly as the task holds out its problems, so a task SFT
    before RL never trains on the problems RL is scored on."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(not self.task or self.task in TASKS_WITH_ANSWERS, "conversations.task", self.task,
                f"a built-in task with reference answers: {', '.join(TASKS_WITH_ANSWERS)}")

    def sources_given(self) -> bool:
        return super().sources_given() or bool(self.task)


def problem_with(record: object) -> str | None:
    """What is wrong with a parsed record (one phrase), or None when it is a valid conversation."""
    if not isinstance(record, dict) or not isinstance(record.get("messages"), list):
        keys = ", ".join(sorted(record)) if isinstance(record, dict) else type(record).__name__
        return f"no 'messages' list (found: {keys or 'nothing'})"
    return messages_problem(record["messages"], "messages", last_role="assistant")


def read_conversations(path: str | Path, problems: RecordProblems, strict: bool = False):
    """Valid conversations of a JSONL file, in order; a bad one is recorded in ``problems``."""
    return read_records(path, problem_with, problems, strict, what="conversations")


def conversation_text(record: dict) -> str:
    """What the held-out hash of a conversation is taken over: its messages, canonically."""
    return json.dumps(record["messages"], ensure_ascii=False, sort_keys=True)


def split_conversations(records: list[dict], cfg: RecordSources) -> tuple[list[dict], list[dict]]:
    """(train, held out) by the seeded held-out rule of ``cfg``."""
    return cfg.split(records, [conversation_text(r) for r in records])


def build_conversations(cfg: ConversationsConfig, out_dir: str | Path, progress: bool = True) -> Path:
    """Write ``train.jsonl``, ``heldout.jsonl``, ``report.json`` and ``manifest.json`` into ``out_dir``.

    Raises UserError when no valid conversation is left (and under ``strict`` at the first bad record).
    """
    out_dir = Path(out_dir)
    check_file_hashes(cfg.file_hashes)
    problems = RecordProblems()
    records, sources = _gather(cfg, problems)
    given_heldout = [r for path in cfg.heldout_files for r in read_conversations(path, problems, cfg.strict)]
    say_skipped(problems, "conversations", out_dir / REPORT_FILE)
    task_train, task_heldout = task_conversations(cfg.task, cfg.seed) if cfg.task else ([], [])
    if not records and not task_train:
        raise UserError(f"no valid conversations in {', '.join(sources) or 'the sources'}"
                        + (f" ({problems.count} bad record(s), first: {problems.listed[0]})" if problems.count else ""))
    if cfg.heldout_files:
        train, heldout = records, given_heldout
    else:
        train, heldout = split_conversations(records, cfg) if records else ([], [])
    records, train, heldout = records + task_train + task_heldout, train + task_train, heldout + task_heldout
    contaminated = 0
    against = cfg.decontaminate or (str(cfg.decontaminate_from.folder) if cfg.decontaminate_from else "")
    if against:
        overlap = HeldoutOverlap(against)
        kept = [r for r in train if not overlap.overlaps(r["messages"])]
        contaminated = len(train) - len(kept)
        train = kept
        say(progress or contaminated > 0, "conversations",  # a loss is said either way
            f"decontamination against {against}: dropped {contaminated} training conversation(s)")
    if not train:
        raise UserError("no training conversations left after the held-out split and decontamination")
    if not heldout:
        raise no_heldout(len(records), "conversations", cfg.heldout_files)
    report = {
        "sources": sources,
        "heldout_sources": list(cfg.heldout_files) or None,
        "conversations": len(records) + len(given_heldout),
        "train": len(train),
        "heldout": len(heldout),
        "decontaminated": contaminated,
        "decontaminated_against": against or None,
        "kinds": _kinds(records),
        "messages": _message_counts(train),
        "bad_records": problems.as_dict(),
        "config": to_dict(cfg),
    }
    write_split_folder(out_dir, FORMAT, train, heldout, report)
    say(progress, "conversations", f"{len(train)} training and {len(heldout)} held-out conversations in {out_dir}")
    return out_dir


def task_conversations(task: str, seed: int) -> tuple[list[dict], list[dict]]:
    """(training, held-out) conversations of a built-in task's problems, split as the task splits them."""
    from glasslab.posttrain.rewards_builtin import builtin_problems, split_problems

    def conversation(problem: dict) -> dict:
        return {"messages": [{"role": "user", "content": problem["prompt"]},
                             {"role": "assistant", "content": problem["answer"]}], "kind": f"task:{task}"}

    train, heldout = split_problems(builtin_problems(task), seed)
    return [conversation(p) for p in train], [conversation(p) for p in heldout]


def _gather(cfg: ConversationsConfig, problems: RecordProblems) -> tuple[list[dict], list[str]]:
    records: list[dict] = []
    sources: list[str] = []
    if cfg.builtin:
        from glasslab.posttrain.instructions import instruction_conversations

        records.extend(instruction_conversations(cfg.builtin_max_modules))
        sources.append("builtin")
    for path in cfg.files:
        records.extend(read_conversations(path, problems, cfg.strict))
        sources.append(str(path))
    if cfg.task:
        sources.append(f"builtin:{cfg.task}")
    return records, sources


def _kinds(records: list[dict]) -> dict[str, int]:
    counts: dict[str, int] = {}
    for record in records:
        kind = str(record.get("kind", "file"))
        counts[kind] = counts.get(kind, 0) + 1
    return counts


def _message_counts(records: list[dict]) -> dict[str, int]:
    counts = dict.fromkeys(CHAT_ROLES, 0)
    for record in records:
        for message in record["messages"]:
            counts[message["role"]] += 1
    return counts


class HeldoutOverlap:
    """Tells whether a conversation overlaps the held-out (eval-split) documents of a pretraining dataset."""

    def __init__(self, dataset_dir: str | Path) -> None:
        from glasslab.data.handle import open_dataset
        from glasslab.data.shards import open_shard
        from glasslab.data.tokenizer import load_tokenizer

        manifest = open_dataset(dataset_dir).manifest
        self.n = int(manifest["config"]["eval"]["ngram_words"])
        self._ngrams = Decontaminator(self.n)
        tokenizer = load_tokenizer(dataset_dir)
        normalised = []
        for domain in sorted(manifest["domains"]):
            shard = open_shard(dataset_dir, domain, "eval", manifest)
            for i in range(len(shard.ends)):
                text = tokenizer.decode(shard.document(i)[:-1].tolist(), skip_special_tokens=False)
                self._ngrams.add_eval(text)
                normalised.append(" ".join(text.split()))
        # Separated by a character no normalised text contains, so a match never spans two documents.
        self._heldout_text = "\n".join(normalised)

    def overlaps(self, messages: list[dict]) -> bool:
        for message in messages:
            words = message["content"].split()
            if len(words) >= self.n:
                if not self._ngrams.is_clean(message["content"]):
                    return True
            elif len(words) >= MIN_SHORT_WORDS and " ".join(words) in self._heldout_text:
                return True
        return False


def read_conversation_split(folder: str | Path, split: str) -> list[dict]:
    """The records of ``train`` or ``heldout`` of a conversations folder (checked against its manifest)."""
    return read_split(folder, split, FORMAT, "the conversations step (glasslab sft)")


def conversations_step(ctx) -> Path:
    """Lab step: build ``ctx.config`` (a ConversationsConfig or its plain data) into ``ctx.output_dir``."""
    cfg = ctx.config if isinstance(ctx.config, ConversationsConfig) else from_dict(ConversationsConfig, ctx.config)
    return build_conversations(cfg, Path(ctx.output_dir), progress=False)
