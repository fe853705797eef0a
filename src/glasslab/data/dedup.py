"""Duplicate removal: exact (content hash) and near (MinHash LSH over word shingles, via datasketch).

Both keep the first document seen and drop later copies, so the result depends only on input order,
which the readers fix. Memory grows with the number of documents kept (a 16-byte digest and one
MinHash signature each), never with their text.
"""

from __future__ import annotations

import hashlib
import zlib

from datasketch import MinHash, MinHashLSH

from glasslab.data.config import DedupConfig


def content_hash(text: str) -> bytes:
    """16-byte BLAKE2b digest of the UTF-8 text."""
    return hashlib.blake2b(text.encode("utf-8"), digest_size=16).digest()


class ExactDedup:
    """Remembers content hashes; ``is_new(text)`` is False for a text seen before."""

    def __init__(self) -> None:
        self._seen: set[bytes] = set()

    def is_new(self, text: str) -> bool:
        digest = content_hash(text)
        if digest in self._seen:
            return False
        self._seen.add(digest)
        return True


class NearDedup:
    """A MinHash LSH index; ``is_new(text)`` is False when a kept document is about ``threshold`` similar."""

    def __init__(self, cfg: DedupConfig) -> None:
        self.cfg = cfg
        self._lsh = MinHashLSH(threshold=cfg.threshold, num_perm=cfg.num_perm)
        self._count = 0

    def signature(self, text: str) -> MinHash:
        words = text.split()
        n = self.cfg.shingle_words
        shingles = {" ".join(words[i : i + n]).encode("utf-8") for i in range(max(len(words) - n + 1, 1))}
        # CRC-32 instead of datasketch's default SHA-1: also a stable 32-bit hash, at twice the speed.
        minhash = MinHash(num_perm=self.cfg.num_perm, seed=1, hashfunc=zlib.crc32)
        minhash.update_batch(list(shingles))
        return minhash

    def is_new(self, text: str) -> bool:
        minhash = self.signature(text)
        if self._lsh.query(minhash):
            return False
        self._lsh.insert(str(self._count), minhash, check_duplication=False)
        self._count += 1
        return True
