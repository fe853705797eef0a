"""The narrating terminal: what each running training step is doing, told while it runs.

At every heartbeat the executor hands :class:`Narrator` its running steps; for each one that has a run
store (``metrics.db``) the narrator reads it read-only, as the observatory does, on either backend
(the step writes into its folder under the lab wherever it runs). Incidents are printed as they
happen — a rollback at step N, a loss outside the pre-registered band, a skipped spike, a resume —
through the executor's progress lines (so retries and failures sit between them). The live state is
one line per running step (step/total, loss, tokens/s, ETA): redrawn in place with rich on a
terminal, and printed as a plain line once per ``interval_s`` when the output is a file or a pipe
(never wrapped, so logs keep one line per step).
"""

from __future__ import annotations

import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glasslab.errors import UserError
from glasslab.lab.display import ProgressPrinter
from glasslab.layout import METRICS_DB, RUN_RECORD, read_json
from glasslab.track.reader import RunReader

NARRATED = {"rollback": "rollback", "prediction_out_of_band": "out of band", "spike_skipped": "spike skipped",
            "nonfinite": "non-finite step", "checkpoint_fallback": "checkpoint fallback", "resume": "resume",
            "fork": "fork", "preempted": "preempted", "sink_failed": "sink failed", "note": "note"}
"""Run-store event kinds told as they happen, and how they are named on the line."""
LOSS, TOKENS_PER_S = "train/loss", "throughput/tokens_per_second"
INTERVAL_S = 30.0
FIRST_READ_ROWS = 5_000
"""Scalar rows read when a store is first seen (a few dozen steps of a trainer's metrics)."""
"""Seconds between plain status lines when the output is not a terminal."""


@dataclass
class _Watched:
    """What the narrator remembers of one running step."""

    folder: Path
    started: float
    """When this attempt started (unix seconds): events before it were told by an earlier attempt."""
    reader: RunReader | None = None
    after_id: int = 0
    total_steps: int | None = None
    seen: list[tuple[float, int]] = field(default_factory=list)
    """(time, step) at the first and latest reads: the ETA's rate."""
    line: str = ""
    printed_at: float = 0.0
    scalar_rowid: int | None = None
    latest: dict[str, tuple[int, float]] = field(default_factory=dict)
    """The newest logged (step, value) of each shown metric: after a rollback, the replayed steps'."""


class Narrator:
    """Tells the running steps' progress and incidents on ``progress``'s console (stderr)."""

    def __init__(self, progress: ProgressPrinter, interval_s: float = INTERVAL_S, live: bool | None = None) -> None:
        self.progress = progress
        self.interval_s = interval_s
        self.live_mode = progress.console.is_terminal if live is None else live
        self._watched: dict[str, _Watched] = {}
        self._live: Any = None

    def update(self, running: dict[str, tuple[Path, float]]) -> None:
        """Read the run stores of ``running`` (step key → (folder, unix time its attempt started)) and
        tell what is new."""
        for key in [k for k in self._watched if k not in running]:
            self._forget(key)
        now = time.time()
        for key, (folder, started) in running.items():
            watched = self._watched.setdefault(key, _Watched(Path(folder), started))
            try:
                self._read(key, watched, now)
            except (sqlite3.Error, UserError):  # a store being created or replaced: open it afresh next time
                if watched.reader is not None:
                    watched.reader.close()
                    watched.reader = None
        self._show(now)

    def close(self) -> None:
        """Tell what is left of the running steps' incidents, then stop the live lines."""
        for key in list(self._watched):
            self._forget(key)
        if self._live is not None:
            self._live.stop()
            self._live = None

    def _read(self, key: str, watched: _Watched, now: float) -> None:
        if watched.reader is None:
            if not (watched.folder / METRICS_DB).is_file():
                return
            watched.reader = RunReader(watched.folder)
        if watched.total_steps is None:  # run.json is written just after the store is created
            record = read_json(watched.folder / RUN_RECORD) or {}
            watched.total_steps = record.get("total_steps") or record.get("steps")
        reader = watched.reader
        self._tell_incidents(key, watched)
        self._read_scalars(reader, watched)
        if LOSS not in watched.latest:
            return
        step, loss = watched.latest[LOSS]
        tokens_per_s = watched.latest.get(TOKENS_PER_S)
        watched.seen = [watched.seen[0] if watched.seen else (now, step), (now, step)]
        (t0, s0), (t1, s1) = watched.seen
        total = watched.total_steps
        parts = [f"step {step}" + (f"/{total}" if total else ""), f"loss {loss:.4f}"]
        if tokens_per_s is not None:
            parts.append(f"{tokens_per_s[1]:,.0f} tokens/s")
        if total and s1 > s0 and t1 > t0:
            parts.append(f"ETA {_duration((total - step) * (t1 - t0) / (s1 - s0))}")
        watched.line = " · ".join(parts)

    @staticmethod
    def _read_scalars(reader: RunReader, watched: _Watched) -> None:
        """Newest values of the shown metrics: the last rows of the store once, then only rows written since."""
        if watched.scalar_rowid is None:
            # The newest rows first (not reader.last(): after a rollback the old attempt's later steps
            # stay in the store until the replay overwrites them).
            watched.scalar_rowid = max(0, reader.cursor()["scalars"] - FIRST_READ_ROWS)
        while rows := reader.scalar_rows_after(watched.scalar_rowid, limit=10_000):
            for rowid, key, step, value in rows:
                if key in (LOSS, TOKENS_PER_S):
                    watched.latest[key] = (step, value)
                watched.scalar_rowid = rowid

    def _tell_incidents(self, key: str, watched: _Watched) -> None:
        assert watched.reader is not None
        earlier = 0
        for event in watched.reader.events(after_id=watched.after_id):
            watched.after_id = max(watched.after_id, event["id"])
            word = NARRATED.get(event["kind"])
            if word is None:
                continue
            if event["time"] < watched.started:  # a resumed run's history: said once, as a count
                earlier += 1
                continue
            at = f" at step {event['step']}" if event["step"] is not None else ""
            style = "red" if event["severity"] == "incident" else "yellow"
            self.progress.line("!", key, f"{word}{at}: {event['title']}", style)
        if earlier:
            self.progress.line("!", key, f"continues a run with {earlier} earlier incident(s) "
                               "(its page and glasslab card list them)", "dim")

    def _show(self, now: float) -> None:
        lines = {key: w.line for key, w in self._watched.items() if w.line}
        if not self.progress.enabled:
            return
        if not self.live_mode:
            for key, watched in self._watched.items():
                if watched.line and now - watched.printed_at >= self.interval_s:
                    self.progress.line("·", key, watched.line, "dim")
                    watched.printed_at = now
            return
        from rich.live import Live
        from rich.markup import escape
        from rich.text import Text

        text = Text.from_markup("\n".join(f"[bold]{escape(k)}[/] {escape(v)}" for k, v in lines.items()))
        if self._live is None and lines:
            self._live = Live(text, console=self.progress.console, auto_refresh=False, transient=True)
            self._live.start()
        elif self._live is not None:
            self._live.update(text, refresh=True)

    def _forget(self, key: str) -> None:
        watched = self._watched.pop(key)
        if watched.reader is not None:
            try:
                self._tell_incidents(key, watched)  # the last ones, written just before the step ended
            except (sqlite3.Error, UserError):
                pass
            watched.reader.close()


def _duration(seconds: float) -> str:
    seconds = max(0, int(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"
