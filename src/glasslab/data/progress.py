"""What a running build tells: one live line per stage on the console, and a progress file for the page.

The line reads ``[data build] read          12/40 tasks  34.2 MB/s  10,552 docs kept  ETA 0:41`` and is
redrawn in place on a terminal (elsewhere — a step's log — it is printed every :data:`LOG_EVERY_S`
seconds and when the stage ends). MB/s is the stage's input (UTF-8 bytes of the documents its tasks
take in; the input files' bytes for reading) per second of wall time; the ETA assumes the remaining
tasks go at the same rate. The count after MB/s is what the stage's tasks put out, labelled with what it
counts (``counts``): documents kept for most stages, but candidate pairs for ``buckets``, pairs found similar
for ``verify``, near-duplicates to remove for ``clusters``, training documents scanned for held-out n-grams for
``ngrams``, documents sampled for ``tokenizer``. ``build-progress.json`` in the dataset's folder
(``layout.BUILD_PROGRESS``) holds the same numbers for every stage so far; the data page shows a build in
progress from it, and ``build.json`` keeps the finished stages' numbers (``stages``), with what each stage
cost: its tasks' CPU seconds one by one (in the order they were handed out), the longest task, the time the
pool added around the tasks, and the driver's own time (wall and CPU) since the stage before ended.
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
    task_cpu_s: list[float] = field(default_factory=list)
    """CPU seconds of each task run (not reused), inside its worker, in the order the tasks were handed out."""
    longest_task_s: float = 0.0
    """Wall seconds of the stage's longest task: no number of workers makes the stage shorter."""
    dispatch_s: float = 0.0
    """Seconds the pool added around the tasks, summed: a worker's start, pickling, the pipe, the driver's wait."""
    driver_before_s: float = 0.0
    driver_before_cpu_s: float = 0.0
    """Wall and CPU seconds of the driver alone between the stage before (or the build's start) and this one
    (0 when it started beside a stage still running)."""
    after: list[str] = field(default_factory=list)
    """Stages run at the same time as this one that it had to wait for."""

    def add_task(self, cpu_s: float, wall_s: float, round_trip_s: float) -> None:
        """Account one task that ran: its CPU and wall seconds in its worker, and the driver's seconds from
        handing it out to having its result."""
        self.task_cpu_s.append(cpu_s)
        self.longest_task_s = max(self.longest_task_s, wall_s)
        self.dispatch_s += max(round_trip_s - wall_s, 0.0)

    @property
    def cpu_s(self) -> float:
        return sum(self.task_cpu_s)

    @property
    def mb_per_s(self) -> float:
        return self.input_bytes / 1e6 / self.seconds if self.seconds > 0 else 0.0

    def to_dict(self) -> dict:
        out = asdict(self)
        out["mb_per_s"] = round(self.mb_per_s, 3)
        out["cpu_s"] = round(self.cpu_s, 3)
        out["task_cpu_s"] = [round(x, 4) for x in self.task_cpu_s]
        for name in ("seconds", "longest_task_s", "dispatch_s", "driver_before_s", "driver_before_cpu_s"):
            out[name] = round(out[name], 4)
        return out


class Progress:
    """Prints each stage's live line (when ``enabled``) and keeps ``build-progress.json`` at ``path``."""

    def __init__(self, path: Path | None, enabled: bool, workers: int = 1, backend: str = "local",
                 label: str = "data build") -> None:
        self.path, self.enabled, self.label = path, enabled, label
        self.workers, self.backend = workers, backend
        self.stages: list[StageStats] = []
        self.started = time.time()
        self._tty = enabled and sys.stderr.isatty()
        self._drawn = self._logged = self._saved = 0.0
        self._clock: dict[int, float] = {}  # when each stage started (perf_counter), by id
        self._driver_since = (time.perf_counter(), time.process_time())

    def say(self, message: str) -> None:
        """A line of its own (ending a live line first)."""
        if self.enabled:
            self._clear()
            print(f"[{self.label}] {message}", file=sys.stderr, flush=True)

    def warn(self, message: str) -> None:
        """Said even without progress lines: what the build left out, changed or did again is never silent."""
        self._clear()
        print(f"[{self.label}] warning: {message}", file=sys.stderr, flush=True)

    def start(self, stage: str, tasks: int, counts: str = "docs kept") -> StageStats:
        """A new stage's numbers; stages may run at once (the live line follows the latest one running)."""
        stats = StageStats(stage, tasks, counts=counts)
        if not self._running():
            stats.driver_before_s, stats.driver_before_cpu_s = self.driver_alone()
        self.stages.append(stats)
        self._clock[id(stats)] = time.perf_counter()
        self._logged = time.monotonic()  # off a terminal, the first line comes LOG_EVERY_S into the stage
        self.update(force=True)
        return stats

    def update(self, force: bool = False) -> None:
        """Redraw the current stage's line and rewrite the progress file, if their time has come."""
        for running in self._running():
            running.seconds = time.perf_counter() - self._clock[id(running)]
        stats = (self._running() or self.stages)[-1]
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

    def driver_alone(self) -> tuple[float, float]:
        """Wall and CPU seconds of the driver since the last stage ended (or this build began): no task runs
        then, so this is the build's serial part between stages."""
        wall, cpu = self._driver_since
        return time.perf_counter() - wall, time.process_time() - cpu

    def _running(self) -> list[StageStats]:
        return [s for s in self.stages if s.status == "running"]

    def end(self, stats: StageStats | None = None) -> StageStats:
        """End ``stats`` (default: the latest stage running)."""
        stats = stats or self._running()[-1]
        stats.seconds = time.perf_counter() - self._clock[id(stats)]
        stats.status = "done"
        if not self._running():
            self._driver_since = (time.perf_counter(), time.process_time())
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
            "stages": [{k: v for k, v in s.to_dict().items() if k != "task_cpu_s"} for s in self.stages]})

    def _clear(self) -> None:
        if self._tty and self._running():
            print("\r\x1b[K", end="", file=sys.stderr, flush=True)

    def _line(self, s: StageStats) -> str:
        text = (f"[{self.label}] {s.stage:<14} {s.tasks_done:>5}/{s.tasks} tasks  {s.mb_per_s:7.1f} MB/s  "
                f"{s.documents_kept:,} {s.counts}")
        if s.status == "done":
            return text + f"  in {s.seconds:.1f} s" + (f" ({s.tasks_reused} reused)" if s.tasks_reused else "")
        fresh = s.tasks_done - s.tasks_reused
        if fresh > 0 and s.tasks_done < s.tasks:
            left = s.seconds / fresh * (s.tasks - s.tasks_done)
            text += f"  ETA {int(left // 60)}:{int(left % 60):02d}"
        return text
