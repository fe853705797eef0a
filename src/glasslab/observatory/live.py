"""Live updates: what a run logged after a cursor, pushed as server-sent events or polled.

A cursor is, per run, the newest row id seen in each table (``RunReader.cursor``); the page gets
one with its data, and every delta carries the advanced cursor. The stream checks each watched
store's ``PRAGMA data_version`` a few times a second (no table read unless something was committed)
and the lab's file stamps once a second; the poll endpoint answers the same delta once, for
browsers or proxies where the stream fails.
"""

from __future__ import annotations

import asyncio
import json
import sqlite3
import time
from collections.abc import AsyncIterator
from typing import Any

from glasslab.observatory.batch_view import with_batches
from glasslab.observatory.lab_scan import Lab
from glasslab.observatory.runs import run_status
from glasslab.observatory.sample_trace import sample_traces
from glasslab.observatory.series import clean
from glasslab.track.reader import RunReader

POLL_SECONDS = 0.2
LAB_CHECK_SECONDS = 1.0
KEEPALIVE_SECONDS = 15.0
RETRY_MS = 1000
EMPTY_CURSOR = {"scalars": 0, "vectors": 0, "events": 0, "samples": 0}
MAX_SCALAR_ROWS = 50_000  # per message; a page far behind catches up over a few polls


def parse_cursors(text: str | None) -> dict[str, dict[str, int]]:
    """``{run_id: {table: row id}}`` from the query string; anything malformed counts as empty."""
    try:
        raw = json.loads(text) if text else {}
    except ValueError:
        return {}
    if not isinstance(raw, dict):
        return {}
    cursors = {}
    for run_id, cursor in raw.items():
        if isinstance(cursor, dict):
            cursors[str(run_id)] = {t: int(cursor[t]) if isinstance(cursor.get(t), int) else 0
                                    for t in EMPTY_CURSOR}
    return cursors


def read_delta(reader: RunReader, cursor: dict[str, int]) -> tuple[dict[str, Any], dict[str, int]]:
    """Rows committed after ``cursor`` and the cursor after them (empty lists when nothing is new)."""
    cursor = {**EMPTY_CURSOR, **cursor}
    scalars = reader.scalar_rows_after(cursor["scalars"], limit=MAX_SCALAR_ROWS)
    vectors = reader.vector_rows_after(cursor["vectors"])
    events = reader.events(after_id=cursor["events"])
    samples = reader.samples(after_id=cursor["samples"])
    new_cursor = {
        "scalars": scalars[-1][0] if scalars else cursor["scalars"],
        "vectors": vectors[-1][0] if vectors else cursor["vectors"],
        "events": events[-1]["id"] if events else cursor["events"],
        "samples": samples[-1]["id"] if samples else cursor["samples"],
    }
    delta = {
        "scalars": [[key, step, value] for _, key, step, value in scalars],
        "vectors": [[key, step, values] for _, key, step, values in vectors],
        "events": with_batches(events), "samples": samples,
    }
    return delta, new_cursor


def has_rows(delta: dict[str, Any]) -> bool:
    return any(delta[k] for k in ("scalars", "vectors", "events", "samples"))


class RunWatch:
    """Follows the runs one page shows; opens stores lazily (a run may not have one yet)."""

    def __init__(self, lab: Lab, run_ids: list[str], cursors: dict[str, dict[str, int]]) -> None:
        self.lab = lab
        self.run_ids = [r for r in run_ids if r in lab.index().runs]
        self.cursors = {r: {**EMPTY_CURSOR, **cursors.get(r, {})} for r in self.run_ids}
        self.readers: dict[str, RunReader] = {}
        self.versions: dict[str, int] = {}
        self.statuses: dict[str, str] = {}

    def poll(self, force: bool = False) -> dict[str, Any] | None:
        """The runs' new rows as one message, or None when no store changed."""
        runs = {}
        for run_id in self.run_ids:
            try:
                reader = self.readers.get(run_id)
                if reader is None:
                    reader = self.readers[run_id] = RunReader(self.lab.index().runs[run_id])
                version = reader.data_version()
                if not force and self.versions.get(run_id) == version:
                    continue
                delta, self.cursors[run_id] = read_delta(reader, self.cursors[run_id])
                # Remember the version only once caught up, so a capped read continues next poll.
                self.versions[run_id] = version if len(delta["scalars"]) < MAX_SCALAR_ROWS else -1
                # The page's header shows the status: send it when it changes (a finish commits no rows).
                status = run_status(reader.meta("writer"), reader.meta("status"), None)
            except (sqlite3.Error, OSError, KeyError, ValueError):
                self._drop(run_id)  # being created or replaced: try again on the next poll
                continue
            changed = run_id in self.statuses and self.statuses[run_id] != status
            self.statuses[run_id] = status
            if delta["samples"]:  # new samples come traced, as the page's own did
                delta["trace"] = sample_traces(self.lab, run_id, delta["samples"])
            if has_rows(delta) or changed:
                runs[run_id] = {**delta, "status": status}
        if not runs and not force:
            return None
        return clean({"runs": runs, "cursors": self.cursors, "time": time.time()})

    def _drop(self, run_id: str) -> None:
        reader = self.readers.pop(run_id, None)
        if reader is not None:
            reader.close()
        self.versions.pop(run_id, None)

    def close(self) -> None:
        for run_id in list(self.readers):
            self._drop(run_id)


def sse(event: str, data: Any) -> str:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n"


async def event_stream(watch: RunWatch, lab_ticks: bool) -> AsyncIterator[str]:
    """Server-sent events: ``delta`` when a watched run logs, ``lab`` when the lab's files change."""
    yield f"retry: {RETRY_MS}\n\n"
    yield sse("hello", {"cursors": watch.cursors})
    lab_signature = watch.lab.signature() if lab_ticks else None
    last_lab_check = last_sent = time.monotonic()
    try:
        while True:
            message = watch.poll()
            now = time.monotonic()
            if message is not None:
                yield sse("delta", message)
                last_sent = now
            if lab_ticks and now - last_lab_check >= LAB_CHECK_SECONDS:
                last_lab_check = now
                signature = watch.lab.signature()
                if signature != lab_signature:
                    lab_signature = signature
                    yield sse("lab", {"time": time.time()})
                    last_sent = now
            if now - last_sent >= KEEPALIVE_SECONDS:
                yield ": keepalive\n\n"
                last_sent = now
            await asyncio.sleep(POLL_SECONDS)
    finally:
        watch.close()
