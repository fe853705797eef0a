"""Experiment cards: what an experiment sets out to learn, declared beside its ``steps()``.

    from glasslab.lab.card import Expectation, ExperimentCard

    CARD = ExperimentCard(
        title="Does a 4-rung ladder predict its hero?",
        question="Is the hero's final eval loss inside the band the ladder predicted before step 0?",
        design="Four widths, one recipe; fit L(C); train a hero with 4x the top rung's compute.",
        expectations=(
            Expectation("hero loss", prediction="demo/hero/eval/macro/loss"),      # from the registry
            Expectation("hero throughput", step="demo-hero", metric="throughput/tokens_per_second",
                        low=1_000, high=1e9, unit="tokens/s"),                    # band given here
        ),
    )

An experiment module (a ``*.py`` file or a built-in ``glasslab.experiments.NAME``) declares its card as a
module-level ``CARD``. The decision rule has a fixed meaning: every expectation inside its band →
**confirmed**; any outside → **refuted**; otherwise, while any is still missing → **open**.

The card is stored in the lab when the experiment runs (:func:`record_run`), immutably:
``<lab>/cards/<name>/v<N>.json`` holds the card, its sha256 and the code version; running with the same
card again adds no version, a changed card adds the next one and the old ones stay. Every run of the
experiment adds which card version it ran and which folder each step got as the next entry of ``runs/``
beside them; conclusions (``glasslab note --experiment``) go to ``notes/``. Every file is created once
(``store/lab_records.py``), so nodes sharing an object-store root never overwrite each other's; a lab
made before the entry folders has its ``runs.jsonl`` and ``notes.jsonl`` read first.
"""

from __future__ import annotations

import hashlib
import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glasslab.config import to_dict
from glasslab.errors import UserError
from glasslab.layout import (
    CARD_NOTES_DIR,
    CARD_NOTES_FILE,
    CARD_RUNS_DIR,
    CARD_RUNS_FILE,
    card_dir,
    card_version_path,
    code_version,
    json_text,
    read_json,
    read_json_lines,
)
from glasslab.store.lab_records import append_record, create_record_once, read_records, refresh_records

VERDICTS = ("confirmed", "refuted", "open")


@dataclass(frozen=True)
class Expectation:
    """A number the experiment expects: a band given here, or a registered prediction's band.

    Band in the card: ``low``/``high`` (either may be None: one-sided) and where the actual value comes
    from: ``metric`` in the ``result.json`` of the step named ``step`` (a ladder fit's ``fit.json``; for
    other steps, the result in their ``step.json``); a dotted name reaches into nested objects
    (``backtest.last.rel_error_pct``). The actual value counts once the step has succeeded. By
    reference: ``prediction`` names an entry of the lab's prediction registry; its band, metric and
    step (``target``) are the registry's.
    """

    name: str
    step: str = ""
    metric: str = ""
    low: float | None = None
    high: float | None = None
    unit: str = ""
    prediction: str = ""

    def __post_init__(self) -> None:
        where = f"expectation {self.name!r}"
        if not self.name:
            raise UserError("expectation: name is empty; expected a short label such as 'hero loss'")
        if self.prediction:
            if self.step or self.metric or self.low is not None or self.high is not None:
                raise UserError(f"{where}: prediction={self.prediction!r} takes its band, metric and step "
                                "from the registry; expected no step/metric/low/high beside it")
            return
        if not (self.step and self.metric):
            raise UserError(f"{where}: expected step= and metric= (where the actual value comes from), "
                            "or prediction= (a registry entry)")
        if self.low is None and self.high is None:
            raise UserError(f"{where}: expected a band (low=, high= or both)")
        for bound in (self.low, self.high):
            if bound is not None and not (isinstance(bound, (int, float)) and math.isfinite(bound)):
                raise UserError(f"{where}: band bound {bound!r} is not a finite number")
        if self.low is not None and self.high is not None and self.low > self.high:
            raise UserError(f"{where}: low {self.low} > high {self.high}")


@dataclass(frozen=True)
class ExperimentCard:
    """What an experiment asks and expects; ``design`` is free text (the step list is added from the lab)."""

    title: str
    question: str
    design: str = ""
    expectations: tuple[Expectation, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        if not self.title.strip() or not self.question.strip():
            raise UserError("experiment card: title and question must not be empty")
        object.__setattr__(self, "expectations", tuple(self.expectations))
        names = [e.name for e in self.expectations]
        if len(set(names)) != len(names):
            raise UserError(f"experiment card {self.title!r}: expectation names repeat ({', '.join(names)})")


def card_hash(card: ExperimentCard) -> str:
    """sha256 of the card's canonical JSON (what makes two cards the same version)."""
    return hashlib.sha256(json_text(to_dict(card), indent=None, sort_keys=True).encode()).hexdigest()


def card_versions(lab_root: str | Path, name: str) -> list[dict[str, Any]]:
    """Every stored version of experiment ``name``'s card, oldest first (``version``, ``hash``, ``card``,
    ``code``, ``stored_at``)."""
    versions, n = [], 1
    while (record := read_json(card_version_path(lab_root, name, n))) is not None:
        versions.append(record)
        n += 1
    return versions


def store_card(lab_root: str | Path, name: str, card: ExperimentCard) -> dict[str, Any]:
    """The stored version of ``card``: the latest one when it has the same hash, else a new version
    written beside the old ones (never replacing a file; another writer's version made meanwhile is read
    and decided against)."""
    digest = card_hash(card)
    while True:
        versions = card_versions(lab_root, name)
        if versions and versions[-1]["hash"] == digest:
            return versions[-1]
        record = {"experiment": name, "version": len(versions) + 1, "hash": digest, "card": to_dict(card),
                  "code": code_version(), "stored_at": _now()}
        if create_record_once(lab_root, card_version_path(".", name, record["version"]).as_posix(),
                              json_text(record).encode()):
            return record
        refresh_records(lab_root, card_dir(".", name).as_posix())  # another writer stored this number just now


def record_run(lab_root: str | Path, name: str, card: ExperimentCard | None,
               folders: dict[str, str]) -> dict[str, Any]:
    """Store the card (when the experiment has one) and append this run of the experiment: the card
    version and each step's folder (``folders``: step name → folder name under the lab)."""
    refresh_records(lab_root, card_dir(".", name).as_posix())  # the versions other nodes stored
    version = store_card(lab_root, name, card)["version"] if card is not None else None
    entry = {"experiment": name, "card_version": version, "steps": dict(folders), "started_at": _now()}
    append_record(lab_root, (card_dir(".", name) / CARD_RUNS_DIR).as_posix(), entry)
    return entry


def experiment_runs(lab_root: str | Path, name: str) -> list[dict[str, Any]]:
    """Every recorded run of experiment ``name``, oldest first."""
    return _entries(lab_root, name, CARD_RUNS_FILE, CARD_RUNS_DIR)


def _entries(lab_root: str | Path, name: str, old_file: str, folder: str) -> list[dict[str, Any]]:
    """A card's entries: its lab's old one-file form first, then the entry files in number order."""
    return [*read_json_lines(card_dir(lab_root, name) / old_file),
            *read_records(lab_root, (card_dir(".", name) / folder).as_posix())]


def add_conclusion(lab_root: str | Path, name: str, text: str) -> dict[str, Any]:
    """Append a person's conclusion to experiment ``name`` (which must have run in this lab)."""
    if not experiment_runs(lab_root, name):
        raise UserError(f"experiment {name!r}: it has not run in lab {lab_root} (no runs under "
                        f"{card_dir(lab_root, name)})")
    if not text.strip():
        raise UserError("conclusion text is empty")
    entry = {"text": text.strip(), "time": _now()}
    append_record(lab_root, (card_dir(".", name) / CARD_NOTES_DIR).as_posix(), entry)
    return entry


def conclusions(lab_root: str | Path, name: str) -> list[dict[str, Any]]:
    return _entries(lab_root, name, CARD_NOTES_FILE, CARD_NOTES_DIR)


def experiments_in_lab(lab_root: str | Path) -> list[str]:
    """Names of the experiments that have run in the lab (those with a runs file), sorted."""
    root = card_dir(lab_root, "_").parent
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / CARD_RUNS_FILE).is_file() or (p / CARD_RUNS_DIR).is_dir())


def decide(inside: list[bool | None]) -> str:
    """The decision rule: any outside → refuted; else any missing (None) → open; else confirmed.
    No expectations at all is open: there is nothing to confirm."""
    if any(v is False for v in inside):
        return "refuted"
    if not inside or any(v is None for v in inside):
        return "open"
    return "confirmed"


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
