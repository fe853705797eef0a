"""Read a run store without disturbing its writer: latest attempt per step, events, samples.

Readers open ``metrics.db`` read-only, so a page or a test can read while a trainer writes, and a
store left by a killed writer opens as it is.

After a resume or a rollback the replayed steps log their scalars, vectors, samples and events again
under a higher attempt; readers show each once, from the latest attempt: scalars, vectors and
samples per step, events per step and kind. So a spike that happened again in the replay is one
event, while the incident that caused a rollback (not replayed) stays. Events that are not about a
step's computation are all kept: notes from other processes (no attempt), events without a step, and
each ``resume`` (every attempt starts with its own).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from glasslab.errors import UserError
from glasslab.track.store import METRICS_DB, ROLLUP_WIDTHS, connect


class RunReader:
    """Read-only view of one run's ``metrics.db``."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)
        path = self.run_dir / METRICS_DB
        if not path.is_file():
            raise UserError(f"{self.run_dir}: no run store here ({METRICS_DB} missing)")
        self.conn = connect(path, readonly=True)

    def close(self) -> None:
        self.conn.close()

    def __enter__(self) -> RunReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _rows(self, sql: str, params: tuple = ()) -> list[tuple]:
        try:
            return self.conn.execute(sql, params).fetchall()
        except sqlite3.OperationalError as exc:
            if "no such table" in str(exc):  # a store whose writer has not created the schema yet
                return []
            raise

    def scalar_keys(self) -> list[str]:
        """Every scalar name logged, from the coarsest rollup (a few rows, not the whole table)."""
        rows = self._rows("SELECT DISTINCT key FROM rollups WHERE width=? ORDER BY key", (ROLLUP_WIDTHS[-1],))
        if not rows:  # a store written before rollups existed
            rows = self._rows("SELECT DISTINCT key FROM scalars ORDER BY key")
        return [r[0] for r in rows]

    def scalars(self, key: str, after_step: int = -1) -> tuple[list[int], list[float]]:
        """Steps and values of ``key`` (latest attempt per step), for steps after ``after_step``."""
        # In index order, each step's latest attempt last: a step's value is the last one read. (A
        # GROUP BY step with MAX(attempt) says the same but costs SQLite three times the scan.)
        rows = self._rows(
            "SELECT step, value FROM scalars WHERE key=? AND step>? ORDER BY step, attempt", (key, after_step)
        )
        steps: list[int] = []
        values: list[float] = []
        for step, value in rows:
            if steps and steps[-1] == step:
                values[-1] = value
            else:
                steps.append(step)
                values.append(value)
        return steps, values

    def last(self, key: str) -> tuple[int, float] | None:
        """The latest step and value of ``key``, or None when it was never logged."""
        rows = self._rows(
            "SELECT step, value FROM scalars WHERE key=? ORDER BY step DESC, attempt DESC LIMIT 1", (key,)
        )
        return (rows[0][0], rows[0][1]) if rows else None

    def recent(self, key: str, count: int) -> list[tuple[int, float | None]]:
        """The last ``count`` ``(step, value)`` of ``key`` (latest attempt per step), oldest first.

        Walks the ``(key, step, attempt)`` index backwards, so it costs about ``count`` rows however
        long the series is; replayed steps are read once per attempt and kept once.
        """
        kept: dict[int, float | None] = {}
        offset, page = 0, 2 * count
        while len(kept) < count:
            rows = self._rows(
                "SELECT step, value FROM scalars WHERE key=? ORDER BY step DESC, attempt DESC LIMIT ? OFFSET ?",
                (key, page, offset),
            )
            for step, value in rows:
                if step not in kept and len(kept) < count:
                    kept[step] = value  # the first row of a step is its latest attempt
            if len(rows) < page:
                break
            offset += page
        return sorted(kept.items())

    def latest_vector(self, key: str) -> tuple[int, list[float]] | None:
        """The newest step of vector ``key`` and its values (latest attempt), or None."""
        rows = self._rows(
            'SELECT step, "values" FROM vectors WHERE key=? ORDER BY step DESC, attempt DESC LIMIT 1', (key,)
        )
        return (rows[0][0], json.loads(rows[0][1])) if rows else None

    def point_count(self, key: str) -> int:
        """How many steps ``key`` has (from the coarsest rollup, so it costs a few rows)."""
        rows = self._rows("SELECT SUM(n) FROM rollups WHERE key=? AND width=?", (key, ROLLUP_WIDTHS[-1]))
        return int(rows[0][0] or 0) if rows else 0

    def rollups(self, key: str, width: int) -> list[tuple[int, int, float | None, float | None, float]]:
        """``(n, last_step, min, max, last)`` per bucket of ``width`` steps of ``key``, in step order.

        Maintained by the writer at every flush (``ROLLUP_WIDTHS``), latest attempt per step.
        """
        return self._rows(
            "SELECT n, last_step, min, max, last FROM rollups WHERE key=? AND width=? ORDER BY bucket",
            (key, width),
        )

    def scalar_rows_after(self, rowid: int, limit: int = 100_000) -> list[tuple[int, str, int, float]]:
        """Raw ``(rowid, key, step, value)`` rows committed after ``rowid`` (a live cursor)."""
        return self._rows(
            "SELECT rowid, key, step, value FROM scalars WHERE rowid>? ORDER BY rowid LIMIT ?", (rowid, limit)
        )

    def vector_rows_after(self, rowid: int, limit: int = 10_000) -> list[tuple[int, str, int, list[float]]]:
        """Raw ``(rowid, key, step, values)`` vector rows committed after ``rowid``."""
        rows = self._rows(
            'SELECT rowid, key, step, "values" FROM vectors WHERE rowid>? ORDER BY rowid LIMIT ?',
            (rowid, limit),
        )
        return [(r[0], r[1], r[2], json.loads(r[3])) for r in rows]

    def cursor(self) -> dict[str, int]:
        """The newest row of each table: a reader that asks for rows after it sees only new ones."""
        cursor = {}
        for name, table, column in (("scalars", "scalars", "rowid"), ("vectors", "vectors", "rowid"),
                                    ("events", "events", "id"), ("samples", "samples", "id")):
            rows = self._rows(f"SELECT COALESCE(MAX({column}), 0) FROM {table}")
            cursor[name] = int(rows[0][0]) if rows else 0
        return cursor

    def data_version(self) -> int:
        """Changes whenever another connection commits (cheap: no table is read)."""
        return int(self.conn.execute("PRAGMA data_version").fetchone()[0])

    def vector_keys(self) -> list[str]:
        return [r[0] for r in self._rows("SELECT DISTINCT key FROM vectors ORDER BY key")]

    def vectors(self, key: str, after_step: int = -1) -> tuple[list[int], list[list[float]]]:
        """Steps and vectors of ``key``, latest attempt per step."""
        rows = self._rows(
            'SELECT step, "values", MAX(attempt) FROM vectors WHERE key=? AND step>? '
            "GROUP BY step ORDER BY step",
            (key, after_step),
        )
        return [r[0] for r in rows], [json.loads(r[1]) for r in rows]

    def events(self, after_id: int = 0) -> list[dict]:
        """Events with an id above ``after_id``, in order; a replayed step's are shown once (module doc)."""
        rows = self._rows(
            "SELECT id, step, time, kind, severity, title, body, attempt FROM events e WHERE id>? AND ("
            "attempt IS NULL OR step IS NULL OR kind IN ('resume') OR attempt = "
            "(SELECT MAX(attempt) FROM events later WHERE later.step = e.step AND later.kind = e.kind)"
            ") ORDER BY id",
            (after_id,),
        )
        names = ("id", "step", "time", "kind", "severity", "title", "body", "attempt")
        return [dict(zip(names, r, strict=True)) for r in rows]

    def samples(self, after_id: int = 0) -> list[dict]:
        """Samples with an id above ``after_id``, in order; from the latest attempt of each step."""
        rows = self._rows(
            "SELECT id, step, prompt, text, time, attempt FROM samples s WHERE id>? AND attempt = "
            "(SELECT MAX(attempt) FROM samples later WHERE later.step = s.step) ORDER BY id",
            (after_id,),
        )
        names = ("id", "step", "prompt", "text", "time", "attempt")
        return [dict(zip(names, r, strict=True)) for r in rows]

    def attempts(self) -> list[dict]:
        rows = self._rows("SELECT attempt, start_step, time, reason FROM attempts ORDER BY attempt")
        return [dict(zip(("attempt", "start_step", "time", "reason"), r, strict=True)) for r in rows]

    def batch_hashes(self) -> list[tuple[int, int, str]]:
        """``(step, attempt, hash)`` of every step's input tokens, every attempt, in step and attempt order."""
        return self._rows("SELECT step, attempt, hash FROM batches ORDER BY step, attempt")

    def loader_starts(self) -> dict[int, tuple[int, dict]]:
        """Attempt -> (the step after which its loader starts, the loader's recorded state)."""
        rows = self._rows("SELECT attempt, step, state FROM loader_starts ORDER BY attempt")
        return {a: (s, json.loads(state)) for a, s, state in rows}

    def meta(self, key: str) -> object | None:
        rows = self._rows("SELECT value FROM meta WHERE key=?", (key,))
        return json.loads(rows[0][0]) if rows else None
