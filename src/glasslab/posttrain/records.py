"""Post-training data as JSONL records: reading and validating them, splitting off the held-out part, and
writing the folder a training step reads (conversations and preference pairs share all of it).

A bad record gets one line, ``file:line: what is wrong``; as in a data build it is skipped and counted
(listed in ``report.json``, said on the console), or stops the build under ``strict``. A folder is written
as ``train.jsonl`` and ``heldout.jsonl``, then ``report.json``, then last ``manifest.json`` (its format and
each file's count and sha256): a reader trusts a folder only when its manifest is there.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

import numpy as np

from glasslab.config import UNVERSIONED, require
from glasslab.data.config import EvalSplitConfig
from glasslab.data.decontaminate import held_out_mask, split_key
from glasslab.data.tokenizer import CHAT_ROLES, SPECIAL_TOKENS
from glasslab.errors import UserError
from glasslab.layout import (
    MANIFEST_FILE,
    REPORT_FILE,
    SPLIT_HELDOUT,
    SPLIT_TRAIN,
    file_sha256,
    json_text,
    read_json,
    write_json_atomic,
    write_text_atomic,
)

MAX_LISTED_PROBLEMS = 1000
HELDOUT_MAX_SHARE = 0.2
"""The held-out minimum count never takes more than this share of a small file: 24 conversations hold out
4 and train on 20, rather than the minimum's 23 held out and 1 trained on (a higher fraction asked for
is still honoured)."""
Check = Callable[[object], "str | None"]
"""What is wrong with a parsed record (one phrase), or None when it is valid."""


def message_problem(message: object, where: str, first: bool = False) -> str | None:
    """What is wrong with one ``{"role", "content"}`` message, or None (a system message only ``first``)."""
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
    if role == "system" and not first:
        return f"{where} is a system message; only the first message may be one"
    if role != "system" and not content.strip():
        return f"{where}.content is empty"
    reserved = next((t for t in SPECIAL_TOKENS if t in content), None)
    if reserved:
        return f"{where}.content contains the reserved token {reserved!r}"
    return None


def messages_problem(messages: object, where: str, last_role: str) -> str | None:
    """What is wrong with a list of messages that must end with a ``last_role`` message, or None."""
    if not isinstance(messages, list):
        return f"{where} is {type(messages).__name__}, expected a list of messages"
    if not messages:
        return f"{where!r} is empty"
    for i, message in enumerate(messages):
        problem = message_problem(message, f"{where}[{i}]", first=i == 0)
        if problem:
            return problem
    if messages[-1]["role"] != last_role:
        ending = "an assistant reply" if last_role == "assistant" else f"a {last_role} message"
        return f"the last message is {messages[-1]['role']!r}; expected {where!r} to end with {ending}"
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

    def as_dict(self) -> dict[str, Any]:
        return {"count": self.count, "listed": self.listed}


def read_records(path: str | Path, check: Check, problems: RecordProblems, strict: bool = False,
                 what: str = "records") -> Iterator[dict]:
    """Valid records of a JSONL file, in order; a bad one is recorded in ``problems`` (UserError under strict)."""
    path = Path(path)
    if not path.is_file():
        raise UserError(f"{path}: {what} file not found")
    with open(path, "rb") as handle:
        for line_number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            try:
                record = json.loads(raw.decode("utf-8"))
                problem = check(record)
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


def check_file_hashes(hashes: dict[str, str]) -> None:
    """A one-line UserError when a file no longer has the sha256 it had when its step was planned (the
    step's hash covers the file's content, so an edited file must make a new folder, not reuse this one)."""
    for path, digest in hashes.items():
        if not Path(path).is_file():
            raise UserError(f"{path}: not found (it was there when this step was planned)")
        if file_sha256(path) != digest:
            raise UserError(f"{path}: changed since this step was planned (its sha256 differs); run the command again")


def file_hashes(paths: Sequence[str]) -> dict[str, str]:
    """sha256 of each file (a one-line UserError for a missing one): what a step's config records."""
    missing = [p for p in paths if not Path(p).is_file()]
    if missing:
        raise UserError(f"{missing[0]}: file not found")
    return {str(p): file_sha256(p) for p in paths}


@dataclass(frozen=True)
class RecordSources:
    """Where post-training records come from (a built-in set, JSONL files) and which are held out; a data
    step's config (conversations, pairs) adds its own fields."""

    section: ClassVar[str] = "records"
    """How a bad value is named (``conversations.files``)."""

    builtin: bool = True
    """Include the built-in set (made from Python's own distribution: posttrain.instructions)."""
    builtin_max_modules: int = 0
    """Read only this many standard-library modules for the built-in set (0 = all)."""
    files: tuple[str, ...] = ()
    """JSONL files of records."""
    heldout_files: tuple[str, ...] = ()
    """JSONL files of held-out records; given, none of the others is held out."""
    file_hashes: dict[str, str] = field(default_factory=dict)
    """sha256 of each file when the step was planned (``glasslab sft``/``dpo`` record them): the step's hash
    covers the files' content, and a file changed since is refused."""
    heldout_fraction: float = 0.05
    """Share of the records held out (chosen by a seeded hash of each)."""
    heldout_min: int = 32
    """At least this many held-out records, but never more than ``HELDOUT_MAX_SHARE`` of them."""
    heldout_max: int = 500
    """At most this many held-out records."""
    strict: bool = field(default=False, metadata=UNVERSIONED)
    """Stop at the first bad record instead of skipping and counting it."""
    seed: int = 0
    """Seed of the held-out choice (and of anything else drawn, such as the built-in pairs' rejected replies)."""

    def __post_init__(self) -> None:
        name = self.section
        require(self.sources_given(), f"{name}.files", self.files, f"at least one file when {name}.builtin is false")
        require(self.builtin_max_modules >= 0, f"{name}.builtin_max_modules", self.builtin_max_modules, ">= 0")
        require(0 <= self.heldout_fraction < 1, f"{name}.heldout_fraction", self.heldout_fraction, "in [0, 1)")
        require(0 <= self.heldout_min <= self.heldout_max, f"{name}.heldout_min", self.heldout_min,
                "0 <= heldout_min <= heldout_max")

    def sources_given(self) -> bool:
        """Whether the config names any records at all."""
        return self.builtin or bool(self.files)

    def split(self, records: list[dict], texts: Sequence[str]) -> tuple[list[dict], list[dict]]:
        """(train, held out): a seeded hash of each record's text (stable under reordering) chooses, at
        ``heldout_fraction``, ``heldout_max`` and ``heldout_min`` (at most ``HELDOUT_MAX_SHARE`` of them)."""
        keys = np.array([split_key(t, self.seed) for t in texts], dtype=np.int64)
        at_most = int(HELDOUT_MAX_SHARE * len(texts))
        rule = EvalSplitConfig(fraction=self.heldout_fraction, min_documents=min(self.heldout_min, at_most),
                               min_bytes=0, max_documents=self.heldout_max)
        held = held_out_mask(keys, np.array([len(t) for t in texts]), rule)
        return ([r for r, h in zip(records, held, strict=True) if not h],
                [r for r, h in zip(records, held, strict=True) if h])


def no_heldout(given: int, what: str, heldout_files: Sequence[str]) -> UserError:
    """The one-line error for a split that held nothing out, saying why (``what``: ``conversations``;
    ``given``: how many there were to split)."""
    if heldout_files:
        why = f"none valid in {', '.join(heldout_files)}"
    elif int(HELDOUT_MAX_SHARE * given) == 0:
        why = f"{given} {what} are too few to hold any out (at most {HELDOUT_MAX_SHARE:.0%} are)"
    else:
        why = f"none of the {given} {what} was held out"
    return UserError(f"no held-out {what}: {why}; give --heldout FILE with valid ones, or more {what}")


def say_skipped(problems: RecordProblems, tag: str, listed_in: Path) -> None:
    """How many bad records were skipped and the first with its reason, on the console either way (a step's
    stderr is its log and the command's console), as a data build says what it skipped."""
    if problems.count:
        print(f"[{tag}] skipped {problems.count:,} bad record(s); the first: {problems.listed[0]} (all listed in "
              f"{listed_in} under bad_records)", file=sys.stderr, flush=True)


def write_split_folder(out_dir: Path, fmt: str, train: list[dict], heldout: list[dict],
                       report: dict[str, Any]) -> None:
    """``train.jsonl``, ``heldout.jsonl``, ``report.json``, then ``manifest.json`` into ``out_dir``."""
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / MANIFEST_FILE).unlink(missing_ok=True)  # readers trust a folder only once its manifest is back
    files = {}
    for name, split in ((SPLIT_TRAIN, train), (SPLIT_HELDOUT, heldout)):
        write_text_atomic(out_dir / name, "".join(json_text(r, indent=None) for r in split))
        files[name] = {"records": len(split), "sha256": file_sha256(out_dir / name)}
    write_json_atomic(out_dir / REPORT_FILE, report)
    write_json_atomic(out_dir / MANIFEST_FILE, {"format": fmt, "files": files})


def read_split(folder: str | Path, split: str, fmt: str, made_by: str) -> list[dict]:
    """The records of ``train`` or ``heldout`` of a folder written by :func:`write_split_folder` in ``fmt``."""
    folder = Path(folder)
    manifest = read_json(folder / MANIFEST_FILE)
    if manifest is None or manifest.get("format") != fmt:
        raise UserError(f"{folder}: not a folder of format {fmt} (no {MANIFEST_FILE} saying so); build it with "
                        f"{made_by}")
    name = {"train": SPLIT_TRAIN, "heldout": SPLIT_HELDOUT}[split]
    with open(folder / name, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def say(progress: bool, tag: str, message: str) -> None:
    """A line for the person at the terminal (stderr; a step's stderr is its log)."""
    if progress:
        print(f"[{tag}] {message}", file=sys.stderr, flush=True)
