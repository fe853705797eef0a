"""The lab-wide event log: step started/succeeded/failed/retried, predictions, a lost node, lab notes.

Each node writes its own SQLite segment, ``<lab>/events/<node>.db`` (``layout.lab_events_segment``): the
processes of one node append to it (WAL mode with a busy timeout serialises their short writes), and no
other node ever writes it, so on an object-store lab a node's segment is pushed to the root after every
event (``store/lab_records.py``) without overwriting anyone's. Readers merge every segment, and the single
``events.db`` of labs made before the segments, in time order. The observatory draws the lab's timeline
from it.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from glasslab.layout import LAB_EVENTS_DB, LAB_EVENTS_DIR, lab_events_segment
from glasslab.store.lab_records import push_own_segment
from glasslab.track.store import check_event, connect

SCHEMA = """
CREATE TABLE IF NOT EXISTS events(
    id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, kind TEXT NOT NULL,
    severity TEXT NOT NULL, subject TEXT NOT NULL, title TEXT NOT NULL, body TEXT NOT NULL DEFAULT '',
    host TEXT NOT NULL, pid INTEGER NOT NULL);
"""
FIELDS = ("time", "kind", "severity", "subject", "title", "body", "host", "pid")


def log_lab_event(
    lab_root: str | Path, kind: str, subject: str, title: str, body: str = "", severity: str = "info"
) -> None:
    """Append one event about ``subject`` (a step folder name or run id) to this node's segment of the log
    (and, on an object-store lab, send the segment to the root)."""
    check_event(kind, severity)
    segment = lab_events_segment(lab_root)
    segment.parent.mkdir(parents=True, exist_ok=True)
    conn = connect(segment, schema=SCHEMA)
    try:
        conn.execute(
            "INSERT INTO events(time, kind, severity, subject, title, body, host, pid) VALUES (?,?,?,?,?,?,?,?)",
            (time.time(), kind, severity, subject, title, body, socket.gethostname(), os.getpid()),
        )
    finally:
        conn.close()
    push_own_segment(lab_root)


def lab_event_files(lab_root: str | Path) -> list[Path]:
    """The files the lab's log is read from: the old single ``events.db`` when there is one, then every
    node's segment (by name)."""
    root = Path(lab_root)
    old = [root / LAB_EVENTS_DB] if (root / LAB_EVENTS_DB).is_file() else []
    return old + sorted((root / LAB_EVENTS_DIR).glob("*.db"))


def read_lab_events(lab_root: str | Path) -> list[dict]:
    """Every event of every node in time order (ties: by file, then as written), each with ``id`` its place
    in that order (1, 2, …); an empty list when the lab has none yet."""
    events = []
    for number, path in enumerate(lab_event_files(lab_root)):
        conn = connect(path, readonly=True)
        try:
            rows = conn.execute(f"SELECT id, {', '.join(FIELDS)} FROM events ORDER BY id").fetchall()
        finally:
            conn.close()
        events += [(row[1], number, row[0], dict(zip(FIELDS, row[1:], strict=True))) for row in rows]
    return [{"id": i, **event} for i, (*_, event) in enumerate(sorted(events, key=lambda e: e[:3]), start=1)]
