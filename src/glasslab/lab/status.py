"""``step.json``: what a step folder holds and how far it got, written atomically.

Fields: ``name``, ``hash`` (full hex), ``folder``, ``function``, ``config`` (the full config, secrets
redacted), ``dependencies`` (name → folder), ``resources``, ``retry``, ``code_version`` (git commit,
dirty flag and diff hash of the executor's checkout: recorded, not hashed), ``status``
(pending|running|succeeded|failed), ``attempts`` (tries so far, all runs), ``timings`` (unix seconds:
``created``, ``started``, ``finished``; ``duration_s``), ``host`` and ``pid`` (the executor that holds
the step), ``heartbeat`` (unix seconds, refreshed while running), ``error`` (one line, or null),
``result`` (what the function returned, when small strict JSON, else null),
``history`` (one entry per attempt: attempt, started, finished, status, error, worker host/pid).

Only the executor holding the step's lock replaces ``step.json``; the one exception is the first
``pending`` record, which is created only where none exists (a hard link cannot clobber).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from glasslab.layout import STEP_RECORD, temp_path, write_json_atomic

STATUSES = ("pending", "running", "succeeded", "failed")


def read_step_record(folder: str | Path) -> dict[str, Any] | None:
    """The folder's ``step.json``, or None when it has none (or a torn one, which atomic writes rule out)."""
    path = Path(folder) / STEP_RECORD
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (FileNotFoundError, json.JSONDecodeError):
        return None


def write_step_record(folder: str | Path, record: dict[str, Any]) -> None:
    """Replace ``step.json`` atomically (temp file, fsync, rename). Caller holds the step's lock."""
    assert record["status"] in STATUSES, record["status"]
    write_json_atomic(Path(folder) / STEP_RECORD, record)


def create_step_record(folder: str | Path, record: dict[str, Any]) -> bool:
    """Write ``step.json`` only if absent (atomic: link a complete temp file); True when written."""
    folder = Path(folder)
    tmp = temp_path(folder / STEP_RECORD)
    write_json_atomic(tmp, record)
    try:
        os.link(tmp, folder / STEP_RECORD)
        return True
    except FileExistsError:
        return False
    finally:
        tmp.unlink(missing_ok=True)
