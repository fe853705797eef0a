"""Duplicate removal as stages that scale: exact (content hashes) and near (MinHash LSH, verified pairs).

Both work on the build's canonical document order (a document's key is its place in the input:
source, task, position) and decide by a fixed rule in that order (an exact group keeps its **lowest
key**; near duplicates, below), so what survives does not depend on how the work was split or scheduled.

**Exact**: each document's 128-bit BLAKE2b digest goes to one of :data:`SLOTS` on-disk partitions by
its leading bits; a partition task sorts its records and removes every key but the lowest of each
digest. Memory per task is the partition's records (24 bytes a document), never the corpus.

**Near**, in four stages after the signatures each read task computes:

1. signature: MinHash over the document's word shingles (``shingle_words`` words, hashed by
   :mod:`glasslab.data.ngrams`), ``num_perm`` values, cut into ``bands`` bands of ``rows`` values, each
   band hashed to 64 bits (:func:`band_hashes`);
2. buckets: band records partitioned by (band, hash) on disk; a partition task sorts them and pairs
   the members of each bucket (the lowest key with every other, and each with the next: 2 pairs per
   member, not all pairs, so a bucket of 10,000 boilerplate files stays cheap);
3. verification: candidate pairs, deduplicated, are kept only when the **word-shingle Jaccard** of the
   two texts (exact, from the shingles, not the band collision) reaches ``threshold``; this is what
   keeps one shared licence header from merging unrelated files (Marin saw character 5-grams plus
   unverified transitive closure merge a whole source into an 859,091-document cluster);
4. clusters: the verified pairs as one graph; a greedy cover in a fixed order (most verified duplicates
   first, then the lowest key) keeps each document no kept document is paired with and removes the
   rest, so every removed document has a kept duplicate within the threshold
   (:func:`cluster_removals`). Plain connected components (union-find) would keep one document per
   component and drop the far end of a chain of versions with it; measured on a planted corpus, that
   left a removed document without any kept duplicate 14% of the time (``docs/LOG.md``). This is the
   one stage that holds the whole corpus's state: its verified pairs, :data:`CLUSTER_BYTES_PER_PAIR`
   bytes each.

The bands and rows come from ``num_perm`` and ``threshold`` (:func:`lsh_bands`): as many rows per band
as still give a pair at the threshold a 97% chance to share a bucket, so recall is high and
verification removes the extra candidates.
"""

from __future__ import annotations

import hashlib

import numpy as np

from glasslab.data import ngrams
from glasslab.data.filters import Document

SLOTS = 256
"""Hash slots records are sorted into on disk; partition tasks take contiguous slot ranges."""
CANDIDATE_RECALL = 0.97
"""Chance that a pair exactly at the threshold shares at least one band (:func:`lsh_bands`)."""
CLUSTER_BYTES_PER_PAIR = 125
"""Peak bytes the cluster stage holds per verified pair (the pair, its relabelled ends, the graph's arrays),
measured by ``bench/data_bench.py`` (``cluster_bytes_per_pair``: 124 on 2M pairs); a node with 16 GB for it
holds ~130M pairs."""
EXACT_RECORD = np.dtype([("hi", "<u8"), ("lo", "<u8"), ("key", "<i8")])
BAND_RECORD = np.dtype([("hash", "<u8"), ("key", "<i8")])
PAIR = np.dtype([("a", "<i8"), ("b", "<i8")])
_MASK32 = np.uint64(0xFFFFFFFF)


def content_digest(data: bytes) -> tuple[int, int]:
    """The 128-bit BLAKE2b digest of a text's UTF-8 bytes as two 64-bit integers (high, low)."""
    digest = hashlib.blake2b(data, digest_size=16).digest()
    return int.from_bytes(digest[:8], "big"), int.from_bytes(digest[8:], "big")


def exact_slot(hi: np.ndarray) -> np.ndarray:
    """The on-disk slot of each exact record (its digest's top bits)."""
    return (hi >> np.uint64(56)).astype(np.int64)


def lsh_bands(num_perm: int, threshold: float) -> tuple[int, int]:
    """``(bands, rows)``: the most rows per band (fewest false candidates) for which a pair of Jaccard
    ``threshold`` still shares at least one band with probability :data:`CANDIDATE_RECALL`."""
    for rows in range(num_perm, 0, -1):
        bands = num_perm // rows
        if 1.0 - (1.0 - threshold**rows) ** bands >= CANDIDATE_RECALL:
            return bands, rows
    return num_perm, 1


class MinHasher:
    """MinHash signatures over word shingles with ``num_perm`` multiply-shift hash functions (seeded, so every
    process makes the same ones)."""

    CHUNK = 8192
    """Shingles hashed at once (bounds the ``num_perm x CHUNK`` temporary for a very long document)."""

    def __init__(self, num_perm: int, shingle_words: int, seed: int = 1) -> None:
        rng = np.random.default_rng(seed)
        self.multipliers = rng.integers(1, 2**63, num_perm, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
        self.offsets = rng.integers(0, 2**63, num_perm, dtype=np.uint64)
        self.num_perm = num_perm
        self.shingle_words = shingle_words
        self._buffer = np.empty(num_perm * self.CHUNK, dtype=np.uint64)

    def shingle_list(self, doc: Document) -> np.ndarray:
        """uint64 hashes of the document's word shingles in text order, repeats included (the whole text when
        it is shorter than one shingle)."""
        hashes = doc.word_hashes
        grams = ngrams.ngram_hashes(hashes, self.shingle_words)
        return grams if len(grams) else ngrams.whole_hash(hashes)

    def shingles(self, doc: Document) -> np.ndarray:
        """Sorted distinct uint64 hashes of the document's word shingles (its shingle set)."""
        return np.unique(self.shingle_list(doc))

    def signature(self, shingles: np.ndarray) -> np.ndarray:
        """uint32 MinHash values (``num_perm``) of a shingle set (a repeated shingle changes no minimum, so
        :meth:`shingle_list` serves as well); all ones for an empty set.

        Each value is the top 32 bits of ``min(a * x + b mod 2**64)`` over the shingles: the top bits of the
        minimum are the minimum of the top bits, so the shift is done on ``num_perm`` numbers, not on all.
        """
        out = np.full(self.num_perm, np.iinfo(np.uint64).max, dtype=np.uint64)
        for start in range(0, len(shingles), self.CHUNK):
            chunk = shingles[start : start + self.CHUNK]
            values = self._buffer[: self.num_perm * len(chunk)].reshape(self.num_perm, len(chunk))
            np.multiply(self.multipliers[:, None], chunk[None, :], out=values)  # wraps modulo 2**64
            values += self.offsets[:, None]
            np.minimum(out, values.min(axis=1), out=out)
        return (out >> np.uint64(32)).astype(np.uint32)


def band_hashes(signatures: np.ndarray, bands: int, rows: int) -> np.ndarray:
    """uint64 hash of each band of each signature: ``(documents, bands)`` from ``(documents, num_perm)``.

    The band's index is mixed in, so equal values in different bands never share a bucket.
    """
    values = signatures[:, : bands * rows].astype(np.uint64).reshape(len(signatures), bands, rows)
    with np.errstate(over="ignore"):
        acc = np.broadcast_to(np.arange(bands, dtype=np.uint64) + np.uint64(1), values.shape[:2]).copy()
        for k in range(rows):
            acc = ngrams.mix64(acc * np.uint64(0x9E3779B97F4A7C15) + values[:, :, k])
    return acc


def band_slot(band: np.ndarray, hashes: np.ndarray, bands: int) -> np.ndarray:
    """On-disk slot of each band record: the band's share of :data:`SLOTS`, then the hash's top bits."""
    per_band = max(SLOTS // bands, 1)
    return band * per_band + (hashes >> np.uint64(56)).astype(np.int64) % per_band


def duplicate_keys(records: np.ndarray) -> np.ndarray:
    """Keys of exact duplicates to remove: every record whose digest an earlier key has (sorted keys)."""
    if not len(records):
        return np.zeros(0, dtype=np.int64)
    records = np.sort(records, order=("hi", "lo", "key"))
    same = (records["hi"][1:] == records["hi"][:-1]) & (records["lo"][1:] == records["lo"][:-1])
    return np.sort(records["key"][1:][same])


def bucket_pairs(records: np.ndarray) -> np.ndarray:
    """Candidate pairs ``(a < b)`` from band records: in every bucket (same hash) of two or more keys, the
    lowest key with each other, and each key with the next."""
    if len(records) < 2:
        return np.zeros(0, dtype=PAIR)
    records = np.sort(records, order=("hash", "key"))
    hashes, keys = records["hash"], records["key"]
    starts = np.concatenate([[True], hashes[1:] != hashes[:-1]])
    group = np.cumsum(starts) - 1
    first_key = keys[np.flatnonzero(starts)][group]
    member = ~starts  # not the first of its bucket
    with_first = np.empty(int(member.sum()), dtype=PAIR)
    with_first["a"], with_first["b"] = first_key[member], keys[member]
    follows = member.copy()
    follows[:] = False
    follows[1:] = member[1:] & ~starts[:-1]  # the previous record is in the same bucket and not its first
    with_next = np.empty(int(follows.sum()), dtype=PAIR)
    with_next["a"], with_next["b"] = keys[np.flatnonzero(follows) - 1], keys[follows]
    return np.concatenate([with_first, with_next])


def unique_pairs(pairs: np.ndarray) -> np.ndarray:
    """The distinct pairs, sorted by ``(a, b)``."""
    return np.unique(pairs)


def jaccard(first: np.ndarray, second: np.ndarray) -> float:
    """Jaccard similarity of two sorted distinct shingle-hash arrays."""
    if not len(first) and not len(second):
        return 1.0
    common = len(np.intersect1d(first, second, assume_unique=True))
    return common / (len(first) + len(second) - common)


def cluster_removals(pairs: np.ndarray) -> np.ndarray:
    """Keys to remove given verified duplicate pairs (sorted): a greedy cover of the pairs' graph keeps, most
    verified duplicates first (then the lowest key), each document no kept one is paired with, and removes
    the documents paired with a kept one. So every removed document has a kept one within the threshold; a
    star of copies keeps its centre; a chain of versions A~B~C~D keeps A and C, since C is no duplicate of
    A. Holds the pairs and their graph (:data:`CLUSTER_BYTES_PER_PAIR`)."""
    if not len(pairs):
        return np.zeros(0, dtype=np.int64)
    nodes, inverse = np.unique(np.concatenate([pairs["a"], pairs["b"]]), return_inverse=True)
    count = len(pairs)
    ends = np.concatenate([inverse, np.concatenate([inverse[count:], inverse[:count]])]).reshape(2, -1)
    order = np.argsort(ends[0], kind="stable")
    neighbours = ends[1][order]
    degree = np.bincount(ends[0], minlength=len(nodes))
    starts = np.concatenate([[0], np.cumsum(degree)])
    del ends, order
    state = np.zeros(len(nodes), dtype=np.int8)  # 0 open, 1 kept, 2 removed
    for node in np.lexsort((nodes, -degree)).tolist():
        if state[node]:
            continue
        state[node] = 1
        around = neighbours[starts[node] : starts[node + 1]]
        state[around[state[around] == 0]] = 2
    return nodes[state == 2]
