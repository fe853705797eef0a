"""The dedup stages as tasks over on-disk partitions (see :mod:`glasslab.data.dedup` for the method).

A partition is a contiguous range of hash slots; each read task wrote its records sorted by slot, so a
partition task reads one slice of every read task's file. The ranges are cut by the records' actual
counts (:func:`slot_ranges`), so a partition holds at most :data:`PARTITION_RECORDS` records whatever
the corpus size: that is the memory bound of these stages.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from glasslab.data import dedup, ngrams
from glasslab.data.config import DedupConfig
from glasslab.data.docstore import TaskDocuments, local_of, save_by_slot, slot_slice, task_of
from glasslab.data.filters import Document

PARTITION_RECORDS = 4_000_000
"""Most records one partition task holds (~100 MB with its sort)."""
MIN_PARTITIONS = 8
"""Partitions a stage is cut into at least, so several workers share a middling corpus ..."""
MIN_PARTITION_RECORDS = 50_000
"""... unless that leaves fewer records than this to a partition (a small corpus is one task or a few)."""
MIN_PARTITION_PAIRS = 50
"""The same for the verification stage, whose records cost ~10,000x more each (two documents shingled and
compared, ~0.5 ms a pair on code, not a sort): 50 candidate pairs are worth a task of their own."""
SHINGLE_CACHE_BYTES = 64 << 20
"""Shingle sets the verification stage keeps of recently seen documents."""


def task_folder(work: Path, stage: str, task: int | str) -> Path:
    return work / stage / (f"{task:06d}" if isinstance(task, int) else task)


def slot_ranges(counts: np.ndarray, min_records: int = MIN_PARTITION_RECORDS) -> list[tuple[int, int]]:
    """Contiguous slot ranges with about ``total / partitions`` records each: enough partitions for
    :data:`PARTITION_RECORDS` a range, and :data:`MIN_PARTITIONS` if they get ``min_records``."""
    total = int(counts.sum())
    partitions = max(min(MIN_PARTITIONS, total // min_records), -(-total // PARTITION_RECORDS), 1)
    target = max(total / partitions, 1)
    ranges, start, held = [], 0, 0
    for slot, count in enumerate(counts.tolist()):
        if slot > start and held + count > target:
            ranges.append((start, slot))
            start, held = slot, 0
        held += count
    ranges.append((start, len(counts)))
    return ranges


def slot_counts(work: Path, tasks: dict[int, int], name: str) -> np.ndarray:
    """Records per slot of ``<name>.npy`` over every read task (the driver cuts partitions from this)."""
    total = np.zeros(dedup.SLOTS, dtype=np.int64)
    for task in tasks:
        total += np.diff(np.load(task_folder(work, "read", task) / f"{name}.slots.npy"))
    return total


@dataclass(frozen=True)
class PartitionArgs:
    work: Path
    tasks: tuple[tuple[int, int], ...]
    """(read task, documents of it inside its source's cap) for every read task that ran."""
    first: int
    stop: int
    removed: tuple[str, ...] = ()
    """Files of keys already removed (exact duplicates, for the bucket stage)."""


def _gather(args: PartitionArgs, name: str) -> np.ndarray:
    parts = [np.zeros(0, dtype=dedup.EXACT_RECORD if name == "exact" else dedup.BAND_RECORD)]
    for task, limit in args.tasks:
        records = slot_slice(task_folder(args.work, "read", task), name, args.first, args.stop)
        parts.append(records[local_of(records["key"]) < limit])
    return np.concatenate(parts)


def exact_stage(args: PartitionArgs, folder: Path) -> dict:
    """Keys to remove as exact duplicates among one partition's records (``removed.npy``)."""
    records = _gather(args, "exact")
    removed = dedup.duplicate_keys(records)
    np.save(folder / "removed.npy", removed)
    return {"documents_in": len(records), "documents_kept": len(records) - len(removed)}


def load_keys(files: tuple[str, ...] | list[str]) -> np.ndarray:
    """The sorted union of several sorted key files."""
    parts = [np.load(f) for f in files]
    return np.sort(np.concatenate(parts)) if parts else np.zeros(0, dtype=np.int64)


def pair_slot(pairs: np.ndarray) -> np.ndarray:
    """The verification partition of each candidate pair (by its first key)."""
    return (ngrams.mix64(pairs["a"].astype(np.uint64)) >> np.uint64(56)).astype(np.int64)


def bucket_stage(args: PartitionArgs, folder: Path) -> dict:
    """Candidate pairs from one partition's band buckets, by verification slot (``pairs.npy``)."""
    records = _gather(args, "bands")
    removed = load_keys(args.removed)
    records = records[~np.isin(records["key"], removed, assume_unique=False)] if len(removed) else records
    pairs = dedup.unique_pairs(dedup.bucket_pairs(records)) if len(records) else np.zeros(0, dedup.PAIR)
    save_by_slot(folder, "pairs", pairs, pair_slot(pairs), dedup.SLOTS)
    return {"documents_in": len(records), "documents_kept": len(pairs)}


@dataclass(frozen=True)
class VerifyArgs:
    work: Path
    buckets: tuple[str, ...]
    first: int
    stop: int
    dedup: DedupConfig


class _Shingles:
    """Shingle sets of documents by key, read from the read tasks' stores, the recent ones cached."""

    def __init__(self, work: Path, cfg: DedupConfig) -> None:
        self.work = work
        self.hasher = dedup.MinHasher(cfg.num_perm, cfg.shingle_words)
        self._stores: dict[int, TaskDocuments] = {}
        self._cache: OrderedDict[int, np.ndarray] = OrderedDict()
        self._bytes = 0

    def __call__(self, key: int) -> np.ndarray:
        held = self._cache.get(key)
        if held is not None:
            self._cache.move_to_end(key)
            return held
        task = int(task_of(np.int64(key)))
        if task not in self._stores:
            self._stores[task] = TaskDocuments(task_folder(self.work, "read", task))
        shingles = self.hasher.shingles(Document(self._stores[task].text(int(local_of(np.int64(key))))))
        self._cache[key] = shingles
        self._bytes += shingles.nbytes
        while self._bytes > SHINGLE_CACHE_BYTES and len(self._cache) > 1:
            self._bytes -= self._cache.popitem(last=False)[1].nbytes
        return shingles


def verify_stage(args: VerifyArgs, folder: Path) -> dict:
    """Candidate pairs whose word-shingle Jaccard reaches the threshold (``verified.npy``)."""
    parts = [slot_slice(args.work / "buckets" / name, "pairs", args.first, args.stop) for name in args.buckets]
    pairs = dedup.unique_pairs(np.concatenate(parts)) if parts else np.zeros(0, dedup.PAIR)
    shingles = _Shingles(args.work, args.dedup)
    keep = np.fromiter((dedup.jaccard(shingles(int(a)), shingles(int(b))) >= args.dedup.threshold
                        for a, b in zip(pairs["a"], pairs["b"], strict=True)), dtype=bool, count=len(pairs))
    np.save(folder / "verified.npy", pairs[keep])
    return {"documents_in": len(pairs), "documents_kept": int(keep.sum())}


def cluster_stage(args: tuple[Path, tuple[str, ...]], folder: Path) -> dict:
    """Every verified pair in one graph; the documents its greedy cover removes (``removed.npy``; see
    :func:`glasslab.data.dedup.cluster_removals`)."""
    work, names = args
    parts = [np.load(work / "verify" / name / "verified.npy") for name in names]
    pairs = np.concatenate(parts) if parts else np.zeros(0, dedup.PAIR)
    removed = dedup.cluster_removals(pairs)
    np.save(folder / "removed.npy", removed)
    return {"documents_in": len(pairs), "documents_kept": len(removed), "pairs": len(pairs)}
