"""The input cut into read tasks: files, byte ranges of large JSONL files, row groups of large Parquet files.

A build's first stage runs one task per :class:`ReadTask`; their order is the **canonical document
order** (source by source as configured, then file by file in sorted order, then position in the file),
and a document's key is ``task index << 32 | its index among the task's kept documents``. Everything
that must not depend on scheduling — which duplicate survives, the eval split, the tokenizer's sample,
the order of the shards — follows that order. The cut depends only on the input (file sizes, Parquet
metadata), never on the number of workers, so a resumed build finds the same tasks.

Plain JSONL files larger than :data:`TASK_BYTES` are cut at byte offsets: a task reads the lines that
*start* in its range. Compressed files cannot be entered in the middle and are one task each.
"""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass
from pathlib import Path

from glasslab.data import builtin, compressed
from glasslab.data.config import SourceConfig
from glasslab.errors import UserError

TASK_BYTES = 4 << 20
"""Input bytes per read task (a task's memory is a few of its documents plus ~100 bytes per document)."""
JSONL_SUFFIXES = (".jsonl", ".json", ".jsonl.gz", ".jsonl.zst", ".json.gz", ".json.zst")
KEY_BITS = 32
"""Bits of a document key for its index inside a task (a task keeps fewer than 2**32 documents)."""


@dataclass(frozen=True)
class ReadTask:
    """One read task: a slice of one source."""

    index: int
    """Place in the canonical order (all sources)."""
    source: int
    """Index of the source in ``BuildConfig.sources``."""
    files: tuple[str, ...] = ()
    """text: the files; jsonl/parquet: the one file; builtin: each unit's file (empty for a topic); hf: none."""
    names: tuple[str, ...] = ()
    """builtin: each unit's module or topic (listing a big package's units again in every task is slow)."""
    start: int = 0
    """jsonl: first byte; parquet: first row group."""
    stop: int = -1
    """Exclusive end of the same (-1: to the end)."""
    row_base: int = 0
    """parquet: rows in the file before ``start``."""
    input_bytes: int = 0
    """Bytes this task reads (for progress and throughput)."""


def source_root(source: SourceConfig) -> Path:
    """The folder provenance paths of a file source are relative to: the folder itself, a file's folder,
    or a glob's fixed leading folders."""
    path = Path(source.path)
    if path.is_dir():
        return path
    if path.is_file():
        return path.parent
    fixed = []
    for part in path.parts:
        if glob.has_magic(part):
            break
        fixed.append(part)
    return Path(*fixed) if fixed else Path(".")


def source_files(source: SourceConfig) -> list[Path]:
    """The files of a jsonl/parquet source: one file, every file in a folder, or a glob; sorted."""
    path = Path(source.path)
    if path.is_file():
        return [path]
    if path.is_dir():
        suffixes = (".parquet",) if source.kind == "parquet" else JSONL_SUFFIXES
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(suffixes))
    else:
        files = sorted(Path(p) for p in glob.glob(source.path, recursive=True) if Path(p).is_file())
    if not files and not path.exists():
        raise UserError(f"source {source.label}: path {source.path} does not exist")
    if not files:
        raise UserError(f"source {source.label}: no {source.kind} files at {source.path}")
    return files


def text_files(source: SourceConfig) -> list[Path]:
    """The files of a text source: those under its folder matching its pattern, sorted."""
    folder = Path(source.path)
    if not folder.is_dir():
        raise UserError(f"source {source.label}: {source.path} is not a folder")
    return sorted(p for p in folder.glob(source.pattern) if p.is_file())


def _groups(sizes: list[int]) -> list[tuple[int, int]]:
    """Consecutive ``[start, stop)`` ranges of items whose sizes add up to about :data:`TASK_BYTES` each."""
    ranges, start, total = [], 0, 0
    for i, size in enumerate(sizes):
        if i > start and total + size > TASK_BYTES:
            ranges.append((start, i))
            start, total = i, 0
        total += size
    if start < len(sizes):
        ranges.append((start, len(sizes)))
    return ranges


def _file_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _source_tasks(index: int, source: SourceConfig) -> list[dict]:
    """The read tasks of one source, as ReadTask fields without ``index``."""
    if source.kind == "builtin":
        units = builtin.units(source.path)
        sizes = [unit.size for unit in units]
        return [{"files": tuple(u.path for u in units[a:b]), "names": tuple(u.name for u in units[a:b]),
                 "input_bytes": sum(sizes[a:b])} for a, b in _groups(sizes)]
    if source.kind == "hf":
        return [{}]
    if source.kind == "text":
        files = text_files(source)
        sizes = [_file_size(p) for p in files]
        return [{"files": tuple(str(p) for p in files[a:b]), "input_bytes": sum(sizes[a:b])}
                for a, b in _groups(sizes)]
    tasks = []
    for path in source_files(source):
        size = _file_size(path)
        if source.kind == "parquet":
            tasks += _parquet_tasks(path, size)
        elif compressed.compression(path) is None and size > TASK_BYTES:
            tasks += [{"files": (str(path),), "start": s, "stop": min(s + TASK_BYTES, size),
                       "input_bytes": min(TASK_BYTES, size - s)} for s in range(0, size, TASK_BYTES)]
        else:
            tasks.append({"files": (str(path),), "input_bytes": size})
    return tasks


def _parquet_tasks(path: Path, size: int) -> list[dict]:
    """Row-group ranges of one Parquet file; the whole file as one task when its metadata is unreadable (the
    task then reports the damage)."""
    import pyarrow.parquet as pq

    try:
        metadata = pq.ParquetFile(path).metadata
    except Exception:  # pyarrow raises several types for a damaged file: the read task names it
        return [{"files": (str(path),), "input_bytes": size}]
    groups = [metadata.row_group(i) for i in range(metadata.num_row_groups)]
    if len(groups) <= 1:
        return [{"files": (str(path),), "input_bytes": size}]
    tasks, rows_before = [], [0]
    for group in groups:
        rows_before.append(rows_before[-1] + group.num_rows)
    for a, b in _groups([group.total_byte_size for group in groups]):
        tasks.append({"files": (str(path),), "start": a, "stop": b, "row_base": rows_before[a],
                      "input_bytes": sum(group.total_byte_size for group in groups[a:b])})
    return tasks


def plan_read_tasks(sources: tuple[SourceConfig, ...]) -> list[ReadTask]:
    """Every source cut into read tasks, in canonical order; one-line errors for a missing path."""
    tasks: list[ReadTask] = []
    for index, source in enumerate(sources):
        for fields in _source_tasks(index, source):
            tasks.append(ReadTask(index=len(tasks), source=index, **fields))
    return tasks


def plan_signature(tasks: list[ReadTask]) -> list:
    """What a resumed build compares to find its work still valid: each task and its files' sizes and times."""
    out = []
    for task in tasks:
        stamps = []
        for name in task.files:
            try:
                st = os.stat(name)
                stamps.append([st.st_size, st.st_mtime_ns])
            except OSError:
                stamps.append(None)
        out.append([task.source, list(task.files), task.start, task.stop, stamps])
    return out
