"""What is under a lab root, found by looking at files only: runs, steps, data reports, ladder fits.

The observatory never trusts a path from a request: pages address things by the ids this scan
hands out (the folder's path relative to the lab root), so an id that is not in the scan, such as
``../../etc/passwd``, is simply unknown. Files being written (half-written JSON, a store without its
schema yet) read as missing instead of failing the page.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from glasslab.config import redact
from glasslab.layout import (
    BUILD_PROGRESS,
    CARDS_DIR,
    FIT_FILE,
    METRICS_DB,
    REPORT_FILE,
    RUN_RECORD,
    STEP_RECORD,
)
from glasslab.track.lab_events import lab_event_files

SCAN_DEPTH = 2  # <lab>/<step>/ and one level below (a step holding several runs)
SKIP_DIRS = frozenset({"checkpoints", "tokenizer", "shards", "__pycache__"})
# A file changed this close (ns) before a value was computed from it may change again within one tick
# of the file system's mtime clock, keeping size and mtime: such a value is computed again next time.
RACY_NS = 1_000_000_000
T = TypeVar("T")


@dataclass(frozen=True)
class LabIndex:
    """Folders under the lab root by kind; each dict maps an id (relative posix path) to its folder."""

    root: Path
    runs: dict[str, Path] = field(default_factory=dict)
    steps: dict[str, Path] = field(default_factory=dict)
    reports: dict[str, Path] = field(default_factory=dict)
    fits: dict[str, Path] = field(default_factory=dict)


def read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object from ``path``, or None when it is missing, half-written or not an object."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def read_redacted(path: Path) -> dict[str, Any] | None:
    """Like :func:`read_json`, with secrets in its ``config`` replaced (pages and exports never show them).

    Only configs are redacted: the key pattern also matches counts such as ``tokens`` or
    ``flops_per_token``, which reports and records must show.
    """
    data = read_json(path)
    if data is not None and "config" in data:
        data["config"] = redact(data["config"])
    return data


def scan(root: Path) -> LabIndex:
    """Walk the lab root (two levels, no symlinks out of it) and sort folders by the files they hold."""
    index = LabIndex(root=root)
    real_root = root.resolve()
    frontier = [root]
    for _ in range(SCAN_DEPTH):
        next_frontier = []
        for parent in frontier:
            try:
                entries = sorted(os.scandir(parent), key=lambda e: e.name)
            except OSError:
                continue
            for entry in entries:
                if entry.name.startswith(".") or entry.name in SKIP_DIRS or not entry.is_dir():
                    continue
                folder = Path(entry.path)
                if entry.is_symlink() and not folder.resolve().is_relative_to(real_root):
                    continue
                _classify(index, folder.relative_to(root).as_posix(), folder)
                next_frontier.append(folder)
        frontier = next_frontier
    return index


def _classify(index: LabIndex, folder_id: str, folder: Path) -> None:
    if (folder / METRICS_DB).is_file():
        index.runs[folder_id] = folder
    if (folder / STEP_RECORD).is_file():
        index.steps[folder_id] = folder
    if (folder / REPORT_FILE).is_file() or (folder / BUILD_PROGRESS).is_file():  # a dataset, or one being built
        index.reports[folder_id] = folder
    if (folder / FIT_FILE).is_file():
        index.fits[folder_id] = folder


class Lab:
    """A lab root with a scan cached for ``max_age`` seconds (pages ask often; folders change rarely)."""

    def __init__(self, root: str | Path, max_age: float = 1.0) -> None:
        self.root = Path(root)
        self.max_age = max_age
        self._index: LabIndex | None = None
        self._scanned_at = 0.0
        self._json: dict[Path, tuple[tuple[int, int], dict[str, Any] | None]] = {}
        self._memo: dict[str, OrderedDict[Hashable, tuple[tuple, int, Any]]] = {}
        # The series endpoints read in the server's threads: the memo's bookkeeping is one at a time
        # (what is computed is not: two threads may read the same thing once each).
        self._memo_lock = threading.Lock()

    def memo(self, kind: str, item: Hashable, paths: Sequence[Path], compute: Callable[[], T],
             limit: int = 100_000) -> T:
        """``compute()``, reused while every file in ``paths`` keeps its size and mtime (a lab of a
        thousand runs has a thousand stores to read for the overview; most have not changed since the
        last look). None is never kept (a store being created). Each ``kind`` keeps its ``limit`` most
        recently used values. Callers must not change what they get."""
        stamps = tuple(file_stamp(p) for p in paths)
        with self._memo_lock:
            cache = self._memo.setdefault(kind, OrderedDict())
            held = cache.get(item)
            if held is not None and held[0] == stamps and max(s[0] for s in stamps) + RACY_NS < held[1]:
                cache.move_to_end(item)
                return held[2]
        computed_at = time.time_ns()
        value = compute()
        if value is not None:
            with self._memo_lock:
                cache[item] = (stamps, computed_at, value)
                cache.move_to_end(item)
                while len(cache) > limit:
                    cache.popitem(last=False)
        return value

    def json(self, path: Path) -> dict[str, Any] | None:
        """:func:`read_json` of ``path``, parsed again only when its size or mtime changed (the
        overview and the links between pages read every run's ``run.json`` and ``step.json``).
        Callers must not change what they get."""
        stamp = file_stamp(path)
        cached = self._json.get(path)
        if cached is not None and cached[0] == stamp and stamp != (0, 0):
            return cached[1]
        data = read_json(path)
        self._json[path] = (stamp, data)
        return data

    def index(self, fresh: bool = False) -> LabIndex:
        """The scan, at most ``max_age`` seconds old (``fresh``: rescan now)."""
        if fresh or self._index is None or time.monotonic() - self._scanned_at > self.max_age:
            self._index = scan(self.root)
            self._scanned_at = time.monotonic()
        return self._index

    def signature(self) -> tuple:
        """Changes when any file a page shows changes (for the static exporter and lab-wide ticks)."""
        index = self.index()
        parts = []
        for kind, folders, names in (
            ("run", index.runs, (RUN_RECORD, METRICS_DB, METRICS_DB + "-wal")),
            ("step", index.steps, (STEP_RECORD,)),
            ("report", index.reports, (REPORT_FILE, BUILD_PROGRESS)),
            ("fit", index.fits, (FIT_FILE,)),
        ):
            for folder_id, folder in folders.items():
                parts.append((kind, folder_id, tuple(file_stamp(folder / n) for n in names)))
        parts += [("events", db.name, file_stamp(db), file_stamp(Path(f"{db}-wal")))
                  for db in lab_event_files(self.root)]
        # Experiment cards: a new version, run or conclusion changes the overview and the card page.
        parts += [("card", p.as_posix(), file_stamp(p)) for p in sorted((self.root / CARDS_DIR).glob("*/*"))]
        return tuple(parts)


def file_stamp(path: Path) -> tuple[int, int]:
    """(mtime in ns, size) of ``path``; zeros when it is missing or empty.

    Empty counts as missing because a reader opening a WAL database creates an empty ``-wal`` file:
    looking at a run must not look like a change to it.
    """
    try:
        st = path.stat()
    except OSError:
        return (0, 0)
    return (st.st_mtime_ns, st.st_size) if st.st_size else (0, 0)
