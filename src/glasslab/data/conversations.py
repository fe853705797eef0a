"""Conversation data for SFT: read and validate ``{"messages": [...]}`` JSONL, hold out a split, decontaminate.

A record is one conversation in the common layout::

    {"messages": [{"role": "system", "content": "..."},      # optional, first only
                  {"role": "user", "content": "..."},
                  {"role": "assistant", "content": "..."}, ...]}

(other top-level keys are kept and ignored). A bad record gets one line, ``file:line: what is wrong``;
as in a data build it is skipped and counted (listed in ``report.json``, said on the console), or stops
the build under ``strict``.

``build_conversations`` writes a conversations folder: ``train.jsonl`` and ``heldout.jsonl`` (the
held-out split, chosen by a seeded hash of each conversation so it is stable under reordering), then
``report.json`` and last ``manifest.json``. Training conversations that overlap the held-out documents
of a pretraining dataset (``decontaminate``: its eval split, which task evals are made from) are
dropped: a shared word n-gram of the dataset's n-gram length, or for a message shorter than that, its
whole text (of at least ``MIN_SHORT_WORDS`` words) appearing in a held-out document.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from glasslab.config import UNVERSIONED, from_dict, require, to_dict
from glasslab.data.config import EvalSplitConfig
from glasslab.data.decontaminate import Decontaminator, held_out_mask, split_key
from glasslab.data.tokenizer import CHAT_ROLES, SPECIAL_TOKENS
from glasslab.errors import UserError
from glasslab.layout import (
    CONVERSATIONS_HELDOUT,
    CONVERSATIONS_TRAIN,
    MANIFEST_FILE,
    REPORT_FILE,
    file_sha256,
    json_text,
    read_json,
    write_json_atomic,
    write_text_atomic,
)

MIN_SHORT_WORDS = 4
"""Messages of fewer words are too generic ("Show me its code.") to count as overlap on their own."""
MAX_LISTED_PROBLEMS = 1000
FORMAT = "glasslab-conversations/1"


@dataclass(frozen=True)
class ConversationsConfig:
    """Where SFT conversations come from and how they are split and decontaminated."""

    builtin: bool = True
    """Include the built-in instruction set made from Python's own distribution (data.instructions)."""
    builtin_max_modules: int = 0
    """Read only this many standard-library modules for the built-in set (0 = all)."""
    files: tuple[str, ...] = ()
    """JSONL files of ``{"messages": [...]}`` records."""
    heldout_fraction: float = 0.05
    """Share of the conversations held out to measure SFT loss (chosen by a seeded hash of each)."""
    heldout_min: int = 32
    """At least this many held-out conversations."""
    heldout_max: int = 500
    """At most this many held-out conversations."""
    decontaminate: str = ""
    """A dataset folder (``glasslab data build``) whose eval split training conversations must not overlap."""
    strict: bool = field(default=False, metadata=UNVERSIONED)
    """Stop at the first bad record instead of skipping and counting it."""
    seed: int = 0
    """Seed of the held-out choice."""

    def __post_init__(self) -> None:
        require(self.builtin or bool(self.files), "conversations.files", self.files,
                "at least one file when conversations.builtin is false")
        require(self.builtin_max_modules >= 0, "conversations.builtin_max_modules", self.builtin_max_modules, ">= 0")
        require(0 <= self.heldout_fraction < 1, "conversations.heldout_fraction", self.heldout_fraction, "in [0, 1)")
        require(0 <= self.heldout_min <= self.heldout_max, "conversations.heldout_min", self.heldout_min,
                "0 <= heldout_min <= heldout_max")

    @property
    def heldout_split(self) -> EvalSplitConfig:
        """The held-out rule in the form the dataset's eval split uses (no byte minimum)."""
        return EvalSplitConfig(fraction=self.heldout_fraction, min_documents=self.heldout_min, min_bytes=0,
                               max_documents=self.heldout_max)


# --- validation ---------------------------------------------------------------------------------------


def problem_with(record: object) -> str | None:
    """What is wrong with a parsed record (one phrase), or None when it is a valid conversation."""
    if not isinstance(record, dict) or not isinstance(record.get("messages"), list):
        keys = ", ".join(sorted(record)) if isinstance(record, dict) else type(record).__name__
        return f"no 'messages' list (found: {keys or 'nothing'})"
    messages = record["messages"]
    if not messages:
        return "'messages' is empty"
    for i, message in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(message, dict):
            return f"{where} is {type(message).__name__}, expected an object with 'role' and 'content'"
        for key in ("role", "content"):
            if key not in message:
                return f"{where} has no {key!r} (keys: {', '.join(sorted(message)) or 'none'})"
        role, content = message["role"], message["content"]
        if role not in CHAT_ROLES:
            return f"{where}.role={role!r}: expected one of {', '.join(CHAT_ROLES)}"
        if not isinstance(content, str):
            return f"{where}.content is {type(content).__name__}, expected a string"
        if role == "system" and i:
            return f"{where} is a system message; only the first message may be one"
        if role != "system" and not content.strip():
            return f"{where}.content is empty"
        reserved = next((t for t in SPECIAL_TOKENS if t in content), None)
        if reserved:
            return f"{where}.content contains the reserved token {reserved!r}"
    if messages[-1]["role"] != "assistant":
        return f"the last message is {messages[-1]['role']!r}; expected the conversation to end with an assistant reply"
    return None


@dataclass
class RecordProblems:
    """Bad records met while reading: counted, the first ``MAX_LISTED_PROBLEMS`` listed as ``file:line: why``."""

    count: int = 0
    listed: list[str] = field(default_factory=list)

    def add(self, line: str) -> None:
        self.count += 1
        if len(self.listed) < MAX_LISTED_PROBLEMS:
            self.listed.append(line)


def read_conversations(path: str | Path, problems: RecordProblems, strict: bool = False) -> Iterator[dict]:
    """Valid records of a JSONL file, in order; a bad one is recorded in ``problems`` (UserError under strict)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: conversations file not found")
    with open(path, "rb") as handle:
        for line_number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
                problem = problem_with(record)
            except UnicodeDecodeError:
                problem = "not valid UTF-8"
            except json.JSONDecodeError as exc:
                problem = f"malformed JSON ({exc.msg})"
            if problem is None:
                yield record
                continue
            line = f"{path}:{line_number}: {problem}"
            if strict:
                raise UserError(f"{line}; drop --strict to skip and count such records")
            problems.add(line)


# --- the build -------------------------------------------------------------------------------------------


def build_conversations(cfg: ConversationsConfig, out_dir: str | Path, progress: bool = True) -> Path:
    """Write ``train.jsonl``, ``heldout.jsonl``, ``report.json`` and ``manifest.json`` into ``out_dir``.

    Raises UserError when no valid conversation is left (and under ``strict`` at the first bad record).
    """
    out_dir = Path(out_dir)
    problems = RecordProblems()
    records, sources = _gather(cfg, problems)
    for line in problems.listed[:5]:
        _say(progress, f"skipped {line}")
    if problems.count:
        _say(progress, f"skipped {problems.count} bad record(s) in all (listed in {out_dir / REPORT_FILE})")
    if not records:
        raise UserError(f"no valid conversations in {', '.join(sources) or 'the sources'}"
                        + (f" ({problems.count} bad record(s), first: {problems.listed[0]})" if problems.count else ""))
    texts = [json.dumps(r["messages"], ensure_ascii=False, sort_keys=True) for r in records]
    keys = np.array([split_key(t, cfg.seed) for t in texts], dtype=np.int64)
    held = held_out_mask(keys, np.array([len(t) for t in texts]), cfg.heldout_split)
    train = [r for r, h in zip(records, held, strict=True) if not h]
    heldout = [r for r, h in zip(records, held, strict=True) if h]
    contaminated = 0
    if cfg.decontaminate:
        overlap = HeldoutOverlap(cfg.decontaminate)
        kept = [r for r in train if not overlap.overlaps(r["messages"])]
        contaminated = len(train) - len(kept)
        train = kept
        _say(progress, f"decontamination against {cfg.decontaminate}: dropped {contaminated} training conversation(s)")
    if not train:
        raise UserError("no training conversations left after the held-out split and decontamination")
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST_FILE).unlink(missing_ok=True)  # readers trust a folder only once its manifest is back
    files = {}
    for name, split in ((CONVERSATIONS_TRAIN, train), (CONVERSATIONS_HELDOUT, heldout)):
        write_text_atomic(out_dir / name, "".join(json_text(r, indent=None) for r in split))
        files[name] = {"conversations": len(split), "sha256": file_sha256(out_dir / name)}
    report = {
        "sources": sources,
        "conversations": len(records),
        "train": len(train),
        "heldout": len(heldout),
        "decontaminated": contaminated,
        "decontaminated_against": cfg.decontaminate or None,
        "kinds": _kinds(records),
        "messages": _message_counts(train),
        "bad_records": {"count": problems.count, "listed": problems.listed},
        "config": to_dict(cfg),
    }
    write_json_atomic(out_dir / REPORT_FILE, report)
    write_json_atomic(out_dir / MANIFEST_FILE, {"format": FORMAT, "files": files})
    _say(progress, f"{len(train)} training and {len(heldout)} held-out conversations in {out_dir}")
    return out_dir


def _gather(cfg: ConversationsConfig, problems: RecordProblems) -> tuple[list[dict], list[str]]:
    records: list[dict] = []
    sources: list[str] = []
    if cfg.builtin:
        from glasslab.data.instructions import instruction_conversations

        records.extend(instruction_conversations(cfg.builtin_max_modules))
        sources.append("builtin")
    for path in cfg.files:
        records.extend(read_conversations(path, problems, cfg.strict))
        sources.append(str(path))
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


def _say(progress: bool, message: str) -> None:
    if progress:
        print(f"[conversations] {message}", file=sys.stderr, flush=True)


class HeldoutOverlap:
    """Tells whether a conversation overlaps the held-out (eval-split) documents of a pretraining dataset."""

    def __init__(self, dataset_dir: str | Path) -> None:
        from glasslab.data.shards import open_shard, read_manifest
        from glasslab.data.tokenizer import load_tokenizer

        manifest = read_manifest(dataset_dir)
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
    folder = Path(folder)
    manifest = read_json(folder / MANIFEST_FILE)
    if manifest is None or manifest.get("format") != FORMAT:
        raise UserError(f"{folder}: not a conversations folder (no {MANIFEST_FILE} of format {FORMAT}); "
                        "build it with the conversations step")
    name = {"train": CONVERSATIONS_TRAIN, "heldout": CONVERSATIONS_HELDOUT}[split]
    with open(folder / name, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def conversations_step(ctx) -> Path:
    """Lab step: build ``ctx.config`` (a ConversationsConfig or its plain data) into ``ctx.output_dir``.

    With a dependency named ``data`` and no ``decontaminate`` set, decontaminate against that dataset.
    """
    cfg = ctx.config if isinstance(ctx.config, ConversationsConfig) else from_dict(ConversationsConfig, ctx.config)
    if not cfg.decontaminate and "data" in getattr(ctx, "inputs", {}):
        cfg = from_dict(ConversationsConfig, {**to_dict(cfg), "decontaminate": str(ctx.inputs["data"])})
    return build_conversations(cfg, Path(ctx.output_dir), progress=False)
