"""A read task's output: the documents it kept (normalised, filtered), with what later stages need of each.

In ``<work>/read/<task>/``::

    text.bin      the kept documents' UTF-8 text, back to back
    docs.npy      per kept document (:data:`DOC`): end offset in text.bin, index among the task's raw
                  documents, reference (index into refs.json) and position (line, row, record), eval
                  split key
    refs.json     the files, modules or datasets the task's documents came from
    raw.npy       per raw document read (:data:`RAW`): UTF-8 bytes raw and normalised, and its outcome
                  (empty after normalising, the filter that dropped it, or kept) — the funnel, and where
                  a source's cap cuts
    exact.npy     exact-dedup records (:data:`~glasslab.data.dedup.EXACT_RECORD`) sorted by slot, with
                  exact.slots.npy (where each slot starts)
    bands.npy     LSH band records (:data:`~glasslab.data.dedup.BAND_RECORD`) sorted by slot, with
                  bands.slots.npy

Later stages read the records by slot range and the texts by key (random access through a memory map).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from glasslab.data.inputs import KEY_BITS

DOC = np.dtype([("end", "<u8"), ("raw", "<u4"), ("ref", "<u4"), ("position", "<u8"), ("split_key", "<u8")])
RAW = np.dtype([("bytes", "<u8"), ("normalized", "<u8"), ("outcome", "u1")])
EMPTY_AFTER_NORMALIZE = 0
KEPT = 255
"""``RAW.outcome``: 0 = nothing left after normalising, ``1 + i`` = dropped by filter ``ALL_FILTER_NAMES[i]``,
255 = kept."""
_MASK = (1 << KEY_BITS) - 1


def task_of(keys: np.ndarray) -> np.ndarray:
    return keys >> KEY_BITS


def local_of(keys: np.ndarray) -> np.ndarray:
    return keys & _MASK


class DocumentWriter:
    """Writes a read task's kept documents (text streamed to disk, per-document fields kept until ``close``)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._text = open(folder / "text.bin", "wb")
        self._rows: list[tuple[int, int, int, int, int]] = []
        self._refs: dict[str, int] = {}
        self._offset = 0

    def add(self, data: bytes, raw: int, ref: str, position: int, split_key: int) -> int:
        """Store one document's UTF-8 ``data``; returns its index among the kept documents."""
        self._text.write(data)
        self._offset += len(data)
        ref_id = self._refs.setdefault(ref, len(self._refs))
        self._rows.append((self._offset, raw, ref_id, position, split_key))
        return len(self._rows) - 1

    @property
    def count(self) -> int:
        return len(self._rows)

    @property
    def bytes(self) -> int:
        return self._offset

    def close(self) -> None:
        self._text.close()
        np.save(self.folder / "docs.npy", np.array(self._rows, dtype=DOC))
        (self.folder / "refs.json").write_text(json.dumps(list(self._refs)))


class TaskDocuments:
    """A finished read task's kept documents (memory-mapped)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.docs = np.load(folder / "docs.npy", mmap_mode="r")
        size = (folder / "text.bin").stat().st_size
        self._text = np.memmap(folder / "text.bin", dtype=np.uint8, mode="r") if size else np.zeros(0, np.uint8)

    def __len__(self) -> int:
        return len(self.docs)

    def start(self, i: int) -> int:
        return int(self.docs["end"][i - 1]) if i else 0

    def text(self, i: int) -> str:
        return self._text[self.start(i) : int(self.docs["end"][i])].tobytes().decode("utf-8", "surrogatepass")

    def sizes(self) -> np.ndarray:
        """UTF-8 bytes of every kept document."""
        ends = np.asarray(self.docs["end"], dtype=np.int64)
        return np.diff(ends, prepend=0)

    def kept_limit(self, raw_limit: int) -> int:
        """Kept documents among the first ``raw_limit`` raw documents (what a source's cap leaves of the task)."""
        return int(np.searchsorted(self.docs["raw"], raw_limit))

    def refs(self) -> list[str]:
        return json.loads((self.folder / "refs.json").read_text())


def slot_slice(folder: Path, name: str, first: int, stop: int) -> np.ndarray:
    """The records of slots ``[first, stop)`` of ``<name>.npy`` in a task folder (read from a memory map)."""
    starts = np.load(folder / f"{name}.slots.npy")
    records = np.load(folder / f"{name}.npy", mmap_mode="r")
    return np.array(records[starts[first] : starts[stop]])


def save_by_slot(folder: Path, name: str, records: np.ndarray, slots: np.ndarray, num_slots: int) -> None:
    """Save ``records`` sorted by ``slots`` (stable: each slot keeps key order) and where each slot starts."""
    order = np.argsort(slots, kind="stable")
    np.save(folder / f"{name}.npy", records[order])
    counts = np.bincount(slots, minlength=num_slots) if len(slots) else np.zeros(num_slots, np.int64)
    np.save(folder / f"{name}.slots.npy", np.concatenate([[0], np.cumsum(counts)]).astype(np.int64))
