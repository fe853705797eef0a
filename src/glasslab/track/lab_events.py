"""The lab-wide event log, ``<lab>/events.db``: step started/succeeded/failed/retried and lab notes.

Many processes (executors, steps, ``glasslab note``) append to it; SQLite in WAL mode with a busy
timeout serialises their short writes. The observatory reads it to draw the lab's timeline.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from glasslab.layout import LAB_EVENTS_DB
from glasslab.track.store import check_event, connect

SCHEMA = """
CREATE TABLE IF NOT EXISTS events(
    id INTEGER PRIMARY KEY AUTOINCREMENT, time REAL NOT NULL, kind TEXT NOT NULL,
    severity TEXT NOT NULL, subject TEXT NOT NULL, title TEXT NOT NULL, body TEXT NOT NULL DEFAULT '',
    host TEXT NOT NULL, pid INTEGER NOT NULL);
"""
FIELDS = ("id", "time", "kind", "severity", "subject", "title", "body", "host", "pid")


def log_lab_event(
    lab_root: str | Path, kind: str, subject: str, title: str, body: str = "", severity: str = "info"
) -> None:
    """Append one event about ``subject`` (a step folder name or run id) to the lab's log."""
    check_event(kind, severity)
    lab_root = Path(lab_root)
    lab_root.mkdir(parents=True, exist_ok=True)
    conn = connect(lab_root / LAB_EVENTS_DB, schema=SCHEMA)
    try:
        conn.execute(
            "INSERT INTO events(time, kind, severity, subject, title, body, host, pid) VALUES (?,?,?,?,?,?,?,?)",
            (time.time(), kind, severity, subject, title, body, socket.gethostname(), os.getpid()),
        )
    finally:
        conn.close()


def read_lab_events(lab_root: str | Path, after_id: int = 0) -> list[dict]:
    """Events after ``after_id`` in order; an empty list when the lab has none yet."""
    path = Path(lab_root) / LAB_EVENTS_DB
    if not path.is_file():
        return []
    conn = connect(path, readonly=True)
    try:
        rows = conn.execute(f"SELECT {', '.join(FIELDS)} FROM events WHERE id>? ORDER BY id", (after_id,))
        return [dict(zip(FIELDS, r, strict=True)) for r in rows.fetchall()]
    finally:
        conn.close()
