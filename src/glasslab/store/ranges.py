"""A dataset's token shard on an object-store lab, read by byte range instead of fetched whole.

A node's working copy of an ``s3://`` lab leaves out the datasets' token shards (``shards/<domain>/<split>.bin``
of a step folder, :func:`glasslab.layout.is_token_shard`: the files that grow with the corpus), so a new node
does not pay for the whole dataset before its first batch. A reader opens such a shard as :class:`RangeTokens`:
the token ids it slices are taken from the root by byte range, in blocks of :data:`BLOCK_BYTES` (the blocks
a slice lacks fetched at once) of which the :data:`MAX_BLOCKS` used last stay in memory, so what a loader reads
again (the same documents in the next epoch, the neighbours of a document in one block) is not fetched again.
A slice of a block in memory is a view of it, as cheap as a memory map's slice (1.5 µs; fsspec's buffered file
with its block cache took twice that: ``docs/LOG.md``). The loader's read-ahead is its own: its background
thread reads the next step's batch while this one trains.

A shard larger than the cache is read at random (the loader shuffles documents): one request per block that
is not in memory, so past :data:`MAX_BLOCKS` blocks a long run fetches blocks again as it goes.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from glasslab.errors import UserError
from glasslab.store.mirror import active_mirror
from glasslab.store.url import MissingObject

BLOCK_BYTES = 4 << 20
"""Bytes fetched by one range request (and kept as one block of the cache)."""
MAX_BLOCKS = 32
"""Blocks kept in memory per shard (128 MiB at :data:`BLOCK_BYTES`), the least recently used dropped first."""


class RangeTokens:
    """The ``count`` token ids of ``dtype`` in object ``key`` of the lab's root, sliced like the memory map a
    local shard gives (``tokens[a:b]``, ``tokens[i]``, ``np.asarray(tokens)``); read-only arrays."""

    def __init__(self, root: Any, key: str, dtype: np.dtype, count: int) -> None:
        self.root, self.key, self.dtype, self.size = root, key, np.dtype(dtype), count
        self.shape = (count,)
        self._block = max(1, BLOCK_BYTES // self.dtype.itemsize)
        """Tokens per block."""
        self._blocks: OrderedDict[int, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()  # the loader's read-ahead thread and the trainer share the cache

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: Any) -> Any:
        if isinstance(index, (int, np.integer)):
            position = int(index) + self.size if index < 0 else int(index)
            if not 0 <= position < self.size:
                raise IndexError(f"token {index} of {self.size}")
            return self._read(position, position + 1)[0]
        if not isinstance(index, slice):
            raise TypeError(f"a token shard read by range takes an index or a slice, not {type(index).__name__}")
        start, stop, step = index.indices(self.size)
        if step != 1:  # no reader here strides a shard
            return np.asarray(self)[index]
        return self._read(start, max(start, stop))

    def __array__(self, dtype: Any = None, copy: Any = None) -> np.ndarray:
        tokens = self._read(0, self.size)
        return tokens if dtype is None else tokens.astype(dtype)

    def _read(self, start: int, stop: int) -> np.ndarray:
        if stop <= start:
            return np.zeros(0, self.dtype)
        first, last = start // self._block, (stop - 1) // self._block
        offset = first * self._block
        if first == last and first in self._blocks:  # the loader's common case: a view of one block in memory
            with self._lock:
                self._blocks.move_to_end(first)
                block = self._blocks[first]
            return block[start - offset : stop - offset]
        blocks = self._blocks_for(range(first, last + 1))
        joined = blocks[0] if len(blocks) == 1 else np.concatenate(blocks)
        return joined[start - offset : stop - offset]

    def _blocks_for(self, numbers: range) -> list[np.ndarray]:
        """Blocks ``numbers`` of the shard, those not in memory fetched together (one range request each, at
        once); the least recently used beyond :data:`MAX_BLOCKS` are then dropped."""
        width = self.dtype.itemsize
        with self._lock:
            missing = [n for n in numbers if n not in self._blocks]
            if missing:
                starts = [n * self._block * width for n in missing]
                ends = [min((n + 1) * self._block, self.size) * width for n in missing]
                fetched = self.root.call(f"read {self.key}", self.root.fs.cat_ranges, [self.key] * len(missing),
                                         starts, ends, on_error="raise")
                for n, begin, end, data in zip(missing, starts, ends, fetched, strict=True):
                    if len(data) != end - begin:
                        raise UserError(f"{self.root.url}/{self.key}: {len(data)} bytes at {begin} where "
                                        f"{end - begin} were expected; the dataset on the root is damaged: "
                                        "build it again")
                    self._blocks[n] = np.frombuffer(data, self.dtype)
            found = []
            for n in numbers:
                self._blocks.move_to_end(n)
                found.append(self._blocks[n])
            while len(self._blocks) > MAX_BLOCKS:
                self._blocks.popitem(last=False)
            return found


def tokens_on_root(path: Path, dtype: np.dtype, count: int) -> RangeTokens | None:
    """The token shard at local ``path`` read by range from the root of the object-store lab whose working copy
    holds ``path``; None where no object-store lab is active, ``path`` is not in its working copy, or the root
    has no such object. A one-line error when the object's size is not ``count`` tokens."""
    mirror = active_mirror()
    if mirror is None:
        return None
    try:
        relative = Path(path).resolve().relative_to(mirror.work.resolve()).as_posix()
    except ValueError:
        return None
    root = mirror.root
    key = root.key(relative)
    try:
        size = root.call(f"read {relative}", root.fs.size, key)
    except MissingObject:
        return None
    if size != count * np.dtype(dtype).itemsize:
        raise UserError(f"{root.url}/{relative}: {size} bytes, the manifest says {count * np.dtype(dtype).itemsize} "
                        f"({count} tokens); the dataset is damaged: build it again")
    return RangeTokens(root, key, dtype, count)
