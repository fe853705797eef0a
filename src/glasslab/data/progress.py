"""What a running build tells: one live line per stage on the console, and a progress file for the page.

The line reads ``[data build] read          12/40 tasks  34.2 MB/s  10,552 docs kept  ETA 0:41`` and is
redrawn in place on a terminal (elsewhere — a step's log — it is printed every :data:`LOG_EVERY_S`
seconds and when the stage ends). MB/s is the stage's input (UTF-8 bytes of the documents its tasks
take in; the input files' bytes for reading) per second of wall time; the ETA assumes the remaining
tasks go at the same rate. The count after MB/s is what the stage's tasks put out, labelled with what it
counts (``counts``): documents kept for most stages, but candidate pairs for ``buckets``, pairs found similar
for ``verify``, near-duplicates to remove for ``clusters``, documents holding a held-out n-gram for
``ngrams``, documents sampled for ``tokenizer``. ``build-progress.json`` in the dataset's folder
(``layout.BUILD_PROGRESS``) holds the same numbers for every stage so far; the data page shows a build in
progress from it, and ``build.json`` keeps the finished stages' numbers (``stages``).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from glasslab.layout import write_json_atomic

LOG_EVERY_S = 30.0
"""Off a terminal, a progress line this often (a step's log should not grow by a line per task)."""
REDRAW_EVERY_S = 0.5
FILE_EVERY_S = 1.0


@dataclass
class StageStats:
    """One stage's numbers: tasks, input bytes and documents in and kept, wall seconds, reruns."""

    stage: str
    tasks: int
    tasks_done: int = 0
    tasks_reused: int = 0
    """Tasks a previous, interrupted run of this build had finished (not run again)."""
    input_bytes: int = 0
    documents_in: int = 0
    documents_kept: int = 0
    """What the stage's tasks put out, in the unit ``counts`` names (documents kept, for most stages)."""
    counts: str = "docs kept"
    seconds: float = 0.0
    reruns: int = 0
    status: str = "running"
    started: float = field(default_factory=time.time)

    @property
    def mb_per_s(self) -> float:
        return self.input_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        out = asdict(self)
        out["mb_per_s"] = round(self.mb_per_s, 3)
        out["seconds"] = round(self.seconds, 3)
        return out


class Progress:
    """Prints each stage's live line (when ``enabled``) and keeps ``build-progress.json`` at ``path``."""

    def __init__(self, path: Path | None, enabled: bool, workers: int = 1, backend: str = "local") -> None:
        self.path, self.enabled = path, enabled
        self.workers, self.backend = workers, backend
        self.stages: list[StageStats] = []
        self.started = time.time()
        self._tty = enabled and sys.stderr.isatty()
        self._drawn = self._logged = self._saved = 0.0
        self._stage_start = 0.0

    def say(self, message: str) -> None:
        """A line of its own (ending a live line first)."""
        if self.enabled:
            self._clear()
            print(f"[data build] {message}", file=sys.stderr, flush=True)

    def warn(self, message: str) -> None:
        """Said even without progress lines: what the build left out, changed or did again is never silent."""
        self._clear()
        print(f"[data build] warning: {message}", file=sys.stderr, flush=True)

    def start(self, stage: str, tasks: int, counts: str = "docs kept") -> StageStats:
        stats = StageStats(stage, tasks, counts=counts)
        self.stages.append(stats)
        self._stage_start = time.perf_counter()
        self._logged = time.monotonic()  # off a terminal, the first line comes LOG_EVERY_S into the stage
        self.update(force=True)
        return stats

    def update(self, force: bool = False) -> None:
        """Redraw the current stage's line and rewrite the progress file, if their time has come."""
        stats = self.stages[-1]
        stats.seconds = time.perf_counter() - self._stage_start
        now = time.monotonic()
        if self.enabled and self._tty and (force or now - self._drawn >= REDRAW_EVERY_S):
            print(f"\r{self._line(stats)}\x1b[K", end="", file=sys.stderr, flush=True)
            self._drawn = now
        elif self.enabled and not self._tty and now - self._logged >= LOG_EVERY_S and not force:
            print(self._line(stats), file=sys.stderr, flush=True)
            self._logged = now
        if self.path is not None and (force or now - self._saved >= FILE_EVERY_S):
            self.save()
            self._saved = now

    def end(self) -> StageStats:
        stats = self.stages[-1]
        stats.seconds = time.perf_counter() - self._stage_start
        stats.status = "done"
        if self.enabled:
            if self._tty:
                print(f"\r{self._line(stats)}\x1b[K", file=sys.stderr, flush=True)
            else:
                print(self._line(stats), file=sys.stderr, flush=True)
            self._logged = time.monotonic()
        if self.path is not None:
            self.save()
        return stats

    def save(self) -> None:
        write_json_atomic(self.path, {
            "status": "running", "pid": os.getpid(), "host": socket.gethostname(), "started": self.started,
            "updated": time.time(), "workers": self.workers, "backend": self.backend,
            "stages": [s.to_dict() for s in self.stages]})

    def _clear(self) -> None:
        if self._tty and self.stages and self.stages[-1].status == "running":
            print("\r\x1b[K", end="", file=sys.stderr, flush=True)

    @staticmethod
    def _line(s: StageStats) -> str:
        text = (f"[data build] {s.stage:<14} {s.tasks_done:>5}/{s.tasks} tasks  {s.mb_per_s:7.1f} MB/s  "
                f"{s.documents_kept:,} {s.counts}")
        if s.status == "done":
            return text + f"  in {s.seconds:.1f} s" + (f" ({s.tasks_reused} reused)" if s.tasks_reused else "")
        fresh = s.tasks_done - s.tasks_reused
        if fresh > 0 and s.tasks_done < s.tasks:
            left = s.seconds / fresh * (s.tasks - s.tasks_done)
            text += f"  ETA {int(left // 60)}:{int(left % 60):02d}"
        return text
