"""The run store: one SQLite database per run (``metrics.db``) in WAL mode.

WAL lets any number of readers (the observatory, tests, ``glasslab note``) read while one trainer
writes. The writer buffers rows and commits them in batches, so logging costs microseconds per
metric; a row is *committed* once :meth:`RunStore.flush` returns, and a process killed at any moment
leaves a database that opens and holds every committed row.

Rollups: each flush also folds the new scalars into ``rollups`` (min, max and last value per fixed
bucket of ``ROLLUP_WIDTHS`` steps), so a reader can draw a million-point series from a few thousand
rows instead of grouping the raw table (about half a second for 1M rows here).

Attempts: each writer session (a fresh start, a resume, a rollback) logs under a new ``attempt``
number, so re-logged steps never overwrite history; readers take the latest attempt per step.

The writer lease: the ``meta`` row ``writer`` names the pid and host of the trainer that holds the
run. A second writer is refused while the holder is alive (same host: its pid exists; another host:
its heartbeat is fresh). Short appends of events and notes from other processes need no lease.
"""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path

from glasslab.errors import UserError
from glasslab.layout import METRICS_DB

BUSY_TIMEOUT_MS = 10_000
LEASE_STALE_SECONDS = 120.0
EVENT_KINDS = frozenset(
    "note resume fork checkpoint_fallback spike_skipped rollback nonfinite preempted mixture_phase "
    "prediction_out_of_band sink_failed step_started step_succeeded step_failed step_retried prediction_registered "
    "prediction_replaced prediction_refused prediction_forced hero_result_recorded export node_lost".split()
)
SEVERITIES = ("info", "warning", "incident")

SCHEMA = """
CREATE TABLE IF NOT EXISTS scalars(
    key TEXT NOT NULL, step INTEGER NOT NULL, value REAL, time REAL NOT NULL, attempt INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS scalars_key_step ON scalars(key, step, attempt);
CREATE TABLE IF NOT EXISTS vectors(
    key TEXT NOT NULL, step INTEGER NOT NULL, "values" TEXT NOT NULL, time REAL NOT NULL,
    attempt INTEGER NOT NULL);
CREATE INDEX IF NOT EXISTS vectors_key_step ON vectors(key, step, attempt);
CREATE TABLE IF NOT EXISTS events(
    id INTEGER PRIMARY KEY AUTOINCREMENT, step INTEGER, time REAL NOT NULL, kind TEXT NOT NULL,
    severity TEXT NOT NULL, title TEXT NOT NULL, body TEXT NOT NULL DEFAULT '', attempt INTEGER);
CREATE TABLE IF NOT EXISTS samples(
    id INTEGER PRIMARY KEY AUTOINCREMENT, step INTEGER NOT NULL, prompt TEXT NOT NULL,
    text TEXT NOT NULL, time REAL NOT NULL, attempt INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS batches(
    step INTEGER NOT NULL, attempt INTEGER NOT NULL, hash TEXT NOT NULL, time REAL NOT NULL);
CREATE INDEX IF NOT EXISTS batches_step ON batches(step, attempt);
CREATE TABLE IF NOT EXISTS loader_starts(attempt INTEGER PRIMARY KEY, step INTEGER NOT NULL, state TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS attempts(
    attempt INTEGER PRIMARY KEY, start_step INTEGER, time REAL NOT NULL, reason TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS meta(key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS rollups(
    key TEXT NOT NULL, width INTEGER NOT NULL, bucket INTEGER NOT NULL, attempt INTEGER NOT NULL,
    n INTEGER NOT NULL, min REAL, max REAL, last REAL, last_step INTEGER NOT NULL,
    PRIMARY KEY(key, width, bucket)) WITHOUT ROWID;
"""
# Bucket widths in steps: 16× apart, so any target of ~1-4k points finds a level within 16× of it.
ROLLUP_WIDTHS = (16, 256, 4096)

# Merge one flush's partial bucket into the stored one; only when the stored row is from the same
# attempt (otherwise the bucket is recomputed from the raw rows, see RunStore._roll_up).
_MERGE_ROLLUP = """
INSERT INTO rollups(key, width, bucket, attempt, n, min, max, last, last_step) VALUES (?,?,?,?,?,?,?,?,?)
ON CONFLICT(key, width, bucket) DO UPDATE SET
    n = n + excluded.n,
    min = min(coalesce(min, excluded.min), coalesce(excluded.min, min)),
    max = max(coalesce(max, excluded.max), coalesce(excluded.max, max)),
    last = CASE WHEN excluded.last_step >= last_step THEN excluded.last ELSE last END,
    last_step = max(last_step, excluded.last_step)
WHERE attempt = excluded.attempt
"""


def connect(path: Path, readonly: bool = False, schema: str = "") -> sqlite3.Connection:
    """Open a run or lab database with WAL and a busy timeout (read-only when asked), ``schema`` in place.

    A database that cannot be opened for writing (read-only media, a folder this user may not write)
    is a :class:`UserError` naming it; readers keep sqlite's own errors, which they retry on.
    """
    if readonly:
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=BUSY_TIMEOUT_MS / 1000)
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        return conn
    try:
        conn = sqlite3.connect(path, timeout=BUSY_TIMEOUT_MS / 1000, isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=NORMAL")
        conn.execute(f"PRAGMA busy_timeout={BUSY_TIMEOUT_MS}")
        if schema:
            conn.executescript(schema)
    except sqlite3.OperationalError as exc:
        raise UserError(f"{path}: cannot open the database for writing ({exc}); expected "
                        f"{_why_not_writable(Path(path).parent)}") from None
    except sqlite3.DatabaseError as exc:
        raise UserError(f"{path}: {exc}; expected the SQLite database glasslab wrote") from None
    return conn


def _why_not_writable(folder: Path) -> str:
    """What a database in ``folder`` needs that it lacks, in the CLI's words for OS errors."""
    try:
        if os.statvfs(folder).f_flag & os.ST_RDONLY:
            return "writable storage (this is a read-only file system)"
    except OSError:
        pass
    if folder.is_dir() and not os.access(folder, os.W_OK):
        return f"{folder} to be writable by this user"
    return "a writable folder"


def open_db(run_dir: str | Path) -> sqlite3.Connection:
    """Open (creating if needed) a run's ``metrics.db`` for writing, schema in place."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    return connect(run_dir / METRICS_DB, schema=SCHEMA)


def check_event(kind: str, severity: str) -> None:
    """Refuse event kinds and severities outside the shared vocabulary (DESIGN.md)."""
    if kind not in EVENT_KINDS:
        raise UserError(f"event kind {kind!r}: expected one of {', '.join(sorted(EVENT_KINDS))}")
    if severity not in SEVERITIES:
        raise UserError(f"event severity {severity!r}: expected one of {', '.join(SEVERITIES)}")


def append_event(
    run_dir: str | Path, kind: str, title: str, body: str = "", step: int | None = None,
    severity: str = "info",
) -> None:
    """Add one event to a run's store from any process, without the writer lease (e.g. a note)."""
    check_event(kind, severity)
    if not (Path(run_dir) / METRICS_DB).is_file():
        raise UserError(f"{run_dir}: no run store here ({METRICS_DB} missing)")
    conn = open_db(run_dir)
    try:
        conn.execute(
            "INSERT INTO events(step, time, kind, severity, title, body, attempt) VALUES (?,?,?,?,?,?,NULL)",
            (step, time.time(), kind, severity, title, body),
        )
    finally:
        conn.close()


class RunStore:
    """The writer side of a run's ``metrics.db``: holds the lease, buffers rows, commits in batches.

    ``flush_rows`` and ``flush_seconds`` bound how much a crash can lose and how late a live page sees
    a step (the observatory promises under a second); :meth:`flush` commits now.
    """

    def __init__(
        self, run_dir: str | Path, reason: str = "start", flush_rows: int = 20_000,
        flush_seconds: float = 0.5,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.flush_rows = flush_rows
        self.flush_seconds = flush_seconds
        self.conn = open_db(self.run_dir)
        self._take_lease()
        self.attempt = self._begin_attempt(reason)
        self._scalars: list[tuple[str, int, float, float, int]] = []
        self._vectors: list[tuple[str, int, str, float, int]] = []
        self._samples: list[tuple[int, str, str, float, int]] = []
        self._batches: list[tuple[int, int, str, float]] = []
        self._last_flush = time.monotonic()
        self._first_step_seen = False
        # key -> the last step that earlier attempts rolled up: buckets up to it may hold rows this
        # attempt supersedes; (key, width) -> the one such bucket already recomputed for this attempt.
        self._older_last_step: dict[str, int] = dict(self.conn.execute(
            "SELECT key, MAX(last_step) FROM rollups WHERE width=? GROUP BY key", (ROLLUP_WIDTHS[-1],)
        ).fetchall())
        self._rolled_last_step: dict[str, int] = {}
        self._fresh_bucket: dict[tuple[str, int], int] = {}
        self.closed = False

    # --- lease -----------------------------------------------------------------------------------

    def _take_lease(self) -> None:
        now = time.time()
        me = {"pid": os.getpid(), "host": socket.gethostname(), "since": now, "heartbeat": now}
        self.conn.execute("BEGIN IMMEDIATE")
        try:
            row = self.conn.execute("SELECT value FROM meta WHERE key='writer'").fetchone()
            if row is not None:
                holder = json.loads(row[0])
                if _holder_alive(holder) and holder["pid"] != os.getpid():
                    raise UserError(
                        f"{self.run_dir}: run is already being written by pid {holder['pid']} on "
                        f"{holder['host']}; stop that trainer first (notes can still be added)"
                    )
            self.conn.execute(
                "INSERT OR REPLACE INTO meta(key, value) VALUES ('writer', ?)", (json.dumps(me),)
            )
            self.conn.execute("COMMIT")
        except BaseException:
            self.conn.execute("ROLLBACK")
            self.conn.close()
            raise

    def _heartbeat(self) -> None:
        self.conn.execute(
            "UPDATE meta SET value=json_set(value, '$.heartbeat', ?) WHERE key='writer'", (time.time(),)
        )

    def _begin_attempt(self, reason: str) -> int:
        row = self.conn.execute("SELECT COALESCE(MAX(attempt), 0) FROM attempts").fetchone()
        attempt = int(row[0]) + 1
        self.conn.execute(
            "INSERT INTO attempts(attempt, start_step, time, reason) VALUES (?, NULL, ?, ?)",
            (attempt, time.time(), reason),
        )
        return attempt

    def new_attempt(self, reason: str) -> int:
        """Start a new attempt in this session (after a rollback): later rows supersede earlier ones."""
        self.flush()
        self.attempt = self._begin_attempt(reason)
        self._first_step_seen = False
        for key, step in self._rolled_last_step.items():
            self._older_last_step[key] = max(step, self._older_last_step.get(key, step))
        self._rolled_last_step.clear()
        self._fresh_bucket.clear()
        return self.attempt

    # --- buffered writes ---------------------------------------------------------------------------

    def _note_step(self, step: int) -> None:
        if not self._first_step_seen:
            self._first_step_seen = True
            self.conn.execute("UPDATE attempts SET start_step=? WHERE attempt=?", (step, self.attempt))

    def log(self, metrics: dict[str, float], step: int) -> None:
        """Buffer one step's scalars; non-finite values are kept as NULL-free floats (inf, nan)."""
        self._note_step(step)
        now = time.time()
        attempt = self.attempt
        self._scalars.extend((key, step, float(value), now, attempt) for key, value in metrics.items())
        self._maybe_flush()

    def log_vector(self, key: str, values: Sequence[float], step: int) -> None:
        """Buffer one vector (per-expert load, router bias) for a step."""
        self._note_step(step)
        payload = json.dumps([float(v) for v in values])
        self._vectors.append((key, step, payload, time.time(), self.attempt))
        self._maybe_flush()

    def log_batch(self, step: int, digest: str) -> None:
        """Buffer the hash of the tokens the trainer read for ``step`` (see ``data/batches.py``)."""
        self._note_step(step)
        self._batches.append((step, self.attempt, digest, time.time()))
        self._maybe_flush()

    def set_loader_start(self, step: int, state: dict) -> None:
        """Record where this attempt's data loader starts: before optimiser step ``step + 1``, at ``state``
        (its position and the batch's split over ranks); written at once."""
        self.conn.execute("INSERT OR REPLACE INTO loader_starts(attempt, step, state) VALUES (?,?,?)",
                          (self.attempt, step, json.dumps(state)))

    def sample(self, step: int, prompt: str, text: str) -> None:
        """Buffer one generated sample."""
        self._samples.append((step, prompt, text, time.time(), self.attempt))
        self._maybe_flush()

    def annotate(self, kind: str, title: str, body: str = "", step: int | None = None,
                 severity: str = "info") -> None:
        """Write one event now (events are rare and should survive a crash right after)."""
        check_event(kind, severity)
        self.flush()
        self.conn.execute(
            "INSERT INTO events(step, time, kind, severity, title, body, attempt) VALUES (?,?,?,?,?,?,?)",
            (step, time.time(), kind, severity, title, body, self.attempt),
        )

    def _maybe_flush(self) -> None:
        pending = len(self._scalars) + len(self._vectors) + len(self._samples) + len(self._batches)
        if pending >= self.flush_rows or time.monotonic() - self._last_flush >= self.flush_seconds:
            self.flush()

    def flush(self) -> None:
        """Commit every buffered row in one transaction."""
        self._last_flush = time.monotonic()
        if not (self._scalars or self._vectors or self._samples or self._batches):
            return
        with _transaction(self.conn):
            if self._scalars:
                self.conn.executemany(
                    "INSERT INTO scalars(key, step, value, time, attempt) VALUES (?,?,?,?,?)", self._scalars
                )
                self._roll_up()
            if self._vectors:
                self.conn.executemany(
                    'INSERT INTO vectors(key, step, "values", time, attempt) VALUES (?,?,?,?,?)',
                    self._vectors,
                )
            if self._samples:
                self.conn.executemany(
                    "INSERT INTO samples(step, prompt, text, time, attempt) VALUES (?,?,?,?,?)", self._samples
                )
            if self._batches:
                self.conn.executemany("INSERT INTO batches(step, attempt, hash, time) VALUES (?,?,?,?)", self._batches)
            self._heartbeat()
        self._scalars, self._vectors, self._samples, self._batches = [], [], [], []

    def _roll_up(self) -> None:
        """Fold the buffered scalars (already inserted) into the per-bucket min/max/last rollups.

        A bucket that reaches back to steps an earlier attempt logged may hold rows the new steps
        supersede, so the first time this attempt touches it, it is recomputed from the raw rows
        (latest attempt per step); every other bucket, and that one afterwards, is merged in
        place. Steps rise within an attempt, so remembering one recomputed bucket per key and
        width is enough.
        """
        # Rows fold into the finest buckets; each coarser level folds the level below, not the rows.
        finest = ROLLUP_WIDTHS[0]
        level: dict[tuple[str, int], list] = {}
        for key, step, value, _, _ in self._scalars:  # the hot loop: one pass over the rows, inlined
            finite = value if value == value else None  # NaN never wins a min or max
            agg = level.get((key, step // finest))
            if agg is None:
                level[(key, step // finest)] = [1, finite, finite, value, step]
                continue
            agg[0] += 1
            if finite is not None:
                if agg[1] is None or finite < agg[1]:
                    agg[1] = finite
                if agg[2] is None or finite > agg[2]:
                    agg[2] = finite
            if step >= agg[4]:
                agg[3], agg[4] = value, step
        partial = {(key, finest, bucket): agg for (key, bucket), agg in level.items()}
        for width in ROLLUP_WIDTHS[1:]:
            coarser: dict[tuple[str, int], list] = {}
            for (key, _), agg in level.items():
                _fold(coarser, (key, agg[4] // width), list(agg))
            partial.update({(key, width, bucket): agg for (key, bucket), agg in coarser.items()})
            level = coarser
        merges = []
        for (key, width, bucket), (n, lo, hi, last, last_step) in partial.items():
            older = self._older_last_step.get(key, -1) >= bucket * width
            if older and self._fresh_bucket.get((key, width)) != bucket:
                self._recompute_bucket(key, width, bucket)
                self._fresh_bucket[(key, width)] = bucket
            else:
                merges.append((key, width, bucket, self.attempt, n, lo, hi, last, last_step))
            if last_step > self._rolled_last_step.get(key, -1):
                self._rolled_last_step[key] = last_step
        self.conn.executemany(_MERGE_ROLLUP, merges)

    def _recompute_bucket(self, key: str, width: int, bucket: int) -> None:
        rows = self.conn.execute(
            "SELECT step, value, MAX(attempt) FROM scalars WHERE key=? AND step>=? AND step<? GROUP BY step",
            (key, bucket * width, (bucket + 1) * width),
        ).fetchall()
        finite = [v for _, v, _ in rows if v is not None and v == v]  # SQLite stores NaN as NULL
        last_step, last, _ = max(rows)
        self.conn.execute(
            "INSERT OR REPLACE INTO rollups(key, width, bucket, attempt, n, min, max, last, last_step) "
            "VALUES (?,?,?,?,?,?,?,?,?)",
            (key, width, bucket, self.attempt, len(rows), min(finite, default=None),
             max(finite, default=None), last, last_step),
        )

    def set_meta(self, key: str, value: object) -> None:
        """Record a small JSON value under ``key`` (run status, final numbers)."""
        self.conn.execute("INSERT OR REPLACE INTO meta(key, value) VALUES (?, ?)", (key, json.dumps(value)))

    def close(self, status: str = "finished") -> None:
        """Flush, record the status, release the lease and close."""
        if self.closed:
            return
        self.flush()
        self.set_meta("status", status)
        self.conn.execute("DELETE FROM meta WHERE key='writer'")
        self.conn.close()
        self.closed = True


def _fold(buckets: dict, where: tuple, part: list) -> None:
    """Merge ``part`` = [n, min, max, last, last_step] into ``buckets[where]`` (None = no finite value)."""
    agg = buckets.get(where)
    if agg is None:
        buckets[where] = part
        return
    agg[0] += part[0]
    if part[1] is not None:
        agg[1] = part[1] if agg[1] is None else min(agg[1], part[1])
        agg[2] = part[2] if agg[2] is None else max(agg[2], part[2])
    if part[4] >= agg[4]:
        agg[3], agg[4] = part[3], part[4]


class _transaction:
    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn

    def __enter__(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")

    def __exit__(self, exc_type, exc, tb) -> None:
        self.conn.execute("ROLLBACK" if exc_type else "COMMIT")


def _holder_alive(holder: dict) -> bool:
    if holder.get("host") == socket.gethostname():
        try:
            os.kill(int(holder["pid"]), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return time.time() - float(holder.get("heartbeat", 0)) < LEASE_STALE_SECONDS

