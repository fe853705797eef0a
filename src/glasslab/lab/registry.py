"""The lab's registry of pre-registered predictions: append-only, one entry per registration.

Every number the lab commits to before the run that tests it — the hero's loss from the ladder, a
task accuracy, an experiment card's expectation — is registered here under a name, with its
interval, *before* that run starts. Each entry is a file of its own, ``<lab>/predictions/<number>.json``
(see ``layout``), created once under the next number and never rewritten, at the lab root outside every
step folder, so ``glasslab run --force`` cannot erase what was predicted: re-running the fit adds an
entry, it never rewrites one. Several nodes may register at once (on an object-store lab the entry is
created on the root with a conditional create, ``store/lab_records.py``): a node that loses the race for
a number reads the registry again — the winner may have registered the same name — and decides anew.
The registry is the entries in number order, after those of ``predictions.jsonl``, the one file of labs
made before the entry files (read, never written).

Registering a name again with the same numbers is a no-op (a step re-run after a crash). Registering
it with other numbers is refused unless ``replace=True``; a replacement is kept beside the old entry
and recorded as a ``prediction_replaced`` incident in the lab's event log, so a changed prediction is
always visible. Readers take the newest entry per name.

An entry: ``name``, ``metric`` (e.g. ``eval/macro/loss``), ``point``, ``low``, ``high`` (the
interval), ``level`` (its coverage, 0.9), ``target`` (what the prediction is about: a step name),
``source`` (the step folder that registered it), ``details`` (anything else: the law, the curve),
``registered_at`` (UTC), ``code`` (version), ``seq`` (1, 2, … per name) and ``replaces`` (the
``seq`` it replaced, for a replacement).

Schema 2 (the registration gate, ``glasslab.ladder.gate``) adds ``schema`` (2), ``kind`` (``prediction``,
or ``refusal``: the fit's numbers on record with ``gate``, the reasons it did not register), ``forced``
(true when a hero ran on a refused fit anyway, ``--force-registration``) and ``gate`` (the fit's gate
record, or None). Kind ``result`` (added within schema 2; readers that know only the first two kinds skip
nothing, they show it as one more entry) is a measurement, not a commitment: a finished hero's measured
loss (point = low = high) with its size, tokens, noise and recipe in ``details``, which later fits of the
same recipe read as earlier heroes (``glasslab.ladder.hero_results``). Entries written before it (no
``schema``) read as schema 1 predictions, not forced.
Recording that a refusal's hero was forced is not a replacement: it appends the entry with
``forced`` set and a ``prediction_forced`` warning in the event log.
"""

from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Any

from glasslab.errors import UserError
from glasslab.layout import PREDICTIONS_DIR, PREDICTIONS_FILE, code_version, json_text, read_json, read_json_lines
from glasslab.store.lab_records import create_record_once, refresh_records
from glasslab.track import log_lab_event

COMPARED = ("metric", "point", "low", "high", "level", "target", "kind", "forced")
"""Fields that make two registrations the same prediction (time, code and source may differ)."""
SCHEMA = 2
KINDS = ("prediction", "refusal", "result")
SCHEMA_1_DEFAULTS = {"schema": 1, "kind": "prediction", "forced": False, "gate": None}
"""What an entry written before schema 2 means for the fields it lacks."""


def register(lab_root: str | Path, name: str, *, metric: str, point: float, low: float, high: float,
             target: str, source: str, level: float = 0.9, details: dict[str, Any] | None = None,
             replace: bool = False, kind: str = "prediction", forced: bool = False,
             gate: dict[str, Any] | None = None) -> dict[str, Any]:
    """Register prediction ``name`` (``point`` in ``[low, high]`` at coverage ``level``), or with
    ``kind="refusal"`` record that the fit with these numbers was refused (``gate`` says why); ``forced``
    marks a hero run on a refused fit. Returns the entry now in force. Raises UserError when ``name``
    holds other numbers and ``replace`` is false."""
    if kind not in KINDS:
        raise UserError(f"prediction {name!r}: kind={kind!r}; expected one of {', '.join(KINDS)}")
    for field, value in (("point", point), ("low", low), ("high", high)):
        if not (isinstance(value, (int, float)) and math.isfinite(value)):
            raise UserError(f"prediction {name!r}: {field}={value!r} is not a finite number")
    if not low <= point <= high:
        raise UserError(f"prediction {name!r}: point {point} is outside its interval [{low}, {high}]")
    entry = {"name": name, "metric": metric, "point": float(point), "low": float(low), "high": float(high),
             "level": level, "target": target, "source": source, "details": details or {}, "schema": SCHEMA,
             "kind": kind, "forced": forced, "gate": gate}
    root = Path(lab_root)
    while True:  # again only when another writer took the number: the registry it read has grown since
        refresh_records(root, PREDICTIONS_DIR)
        files = _entry_files(root)  # one listing for what is read and the number taken: none is passed over
        number = files[-1][0] + 1 if files else 1
        previous = [e for e in _entries(root, files) if e["name"] == name]
        current = previous[-1] if previous else None
        if current is not None and all(current.get(k) == entry[k] for k in COMPARED):
            return current
        only_forced = current is not None and forced and not current["forced"] and all(
            current[k] == entry[k] for k in COMPARED if k != "forced")
        if current is not None and not replace and not only_forced:
            raise UserError(
                f"prediction {name!r} is already registered ({_describe(current)}, at {current['registered_at']} "
                f"by {current['source']}); replacing a pre-registered prediction must be asked for explicitly "
                "(glasslab run ... --re-register)"
            )
        entry.update(registered_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), code=code_version(),
                     seq=len(previous) + 1, replaces=current["seq"] if current else None)
        data = json_text(entry, indent=None, allow_nan=False).encode("utf-8")
        if create_record_once(root, f"{PREDICTIONS_DIR}/{number:08d}.json", data):
            break
    _announce(root, entry, current, only_forced)
    return entry


def _announce(root: Path, entry: dict[str, Any], current: dict[str, Any] | None, only_forced: bool) -> None:
    """The event that says what a new entry is: registered, refused, a result, forced, or a replacement."""
    name, target = entry["name"], entry["target"]
    if only_forced:
        log_lab_event(root, "prediction_forced", target, f"prediction {name} forced: {_describe(entry)}",
                      body="the registration gate refused this fit; its hero runs anyway (--force-registration)",
                      severity="warning")
    elif current is None:
        refused = entry["kind"] == "refusal"
        event, verb = {"refusal": ("prediction_refused", "refused"), "result": ("hero_result_recorded", "recorded")
                       }.get(entry["kind"], ("prediction_registered", "registered"))
        log_lab_event(root, event, target, f"prediction {name} {verb}: {_describe(entry)}",
                      body="; ".join((entry["gate"] or {}).get("reasons", [])),
                      severity="warning" if refused else "info")
    else:
        log_lab_event(root, "prediction_replaced", target,
                      f"prediction {name} replaced: {_describe(current)} -> {_describe(entry)}",
                      body=f"registered by {entry['source']}; the replaced entry stays in {PREDICTIONS_DIR}/",
                      severity="incident")


def _entry_files(root: Path) -> list[tuple[int, Path]]:
    """The registry's entry files as (number, path), in number order (temp names left out)."""
    found = ((p.stem, p) for p in (root / PREDICTIONS_DIR).glob("*.json"))
    return sorted((int(stem), p) for stem, p in found if stem.isdigit())


def registry_entries(lab_root: str | Path) -> list[dict[str, Any]]:
    """Every entry of the registry as written, in its canonical order: the old single file's, then the entry
    files' by number."""
    root = Path(lab_root)
    return _read(root, _entry_files(root))


def _read(root: Path, files: list[tuple[int, Path]]) -> list[dict[str, Any]]:
    return [*read_json_lines(root / PREDICTIONS_FILE), *(read_json(p) for _, p in files)]


def registry_files(lab_root: str | Path) -> list[Path]:
    """The files the registry is read from (what a page that shows it depends on)."""
    root = Path(lab_root)
    return [root / PREDICTIONS_FILE, *(p for _, p in _entry_files(root))]


def _entries(root: Path, files: list[tuple[int, Path]] | None = None) -> list[dict[str, Any]]:
    """The entries with the fields of schema 2 filled in (``files``: a listing already taken)."""
    return [{**SCHEMA_1_DEFAULTS, **e} for e in _read(root, _entry_files(root) if files is None else files)]


def history(lab_root: str | Path, name: str) -> list[dict[str, Any]]:
    """Every registration of ``name``, oldest first."""
    return [e for e in _entries(Path(lab_root)) if e.get("name") == name]


def predictions(lab_root: str | Path) -> dict[str, dict[str, Any]]:
    """The entry in force for each name (the newest), in order of first registration."""
    latest: dict[str, dict[str, Any]] = {}
    for entry in _entries(Path(lab_root)):
        latest[entry["name"]] = entry
    return latest


def gate_status(entry: dict[str, Any] | None) -> str:
    """How every view labels an entry: "" for a registered prediction, else ``REFUSED by the registration
    gate (reasons)`` and, when its hero ran anyway, ``; hero FORCED``."""
    if not entry or entry.get("kind", "prediction") == "prediction":
        return ""
    if entry["kind"] == "result":
        return "measured (a finished hero's result)"
    reasons = "; ".join((entry.get("gate") or {}).get("reasons", []))
    return f"REFUSED by the registration gate ({reasons})" + ("; hero FORCED" if entry.get("forced") else "")


def _describe(entry: dict[str, Any]) -> str:
    status = {"refusal": " REFUSED", "prediction": "", "result": " measured"}[entry["kind"]]
    status += " FORCED" if entry["forced"] else ""
    return f"{entry['metric']} {entry['point']:.4g} [{entry['low']:.4g}, {entry['high']:.4g}]{status}"
