"""The held-out split per domain and decontamination of training against it.

Eval documents are chosen by a seeded hash of their text (stable under reordering of other
documents): the ``k`` smallest hashes of a domain, with ``k`` from the configured fraction and
bounds. Every word n-gram of every eval document goes into one set; a training document that shares
any of them is dropped, so no eval document, nor a long span of one, is seen in training.
"""

from __future__ import annotations

import hashlib

import numpy as np

from glasslab.data.config import EvalSplitConfig


def split_key(text: str, seed: int) -> int:
    """A 63-bit key ordering documents for the eval split; depends on the text and the seed only."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8, key=str(seed).encode()).digest()
    return int.from_bytes(digest, "little") >> 1


def eval_count(num_documents: int, cfg: EvalSplitConfig) -> int:
    """How many of a domain's documents are held out (always leaving one for training)."""
    wanted = round(cfg.fraction * num_documents)
    wanted = min(max(wanted, cfg.min_documents), cfg.max_documents)
    return max(0, min(wanted, num_documents - 1))


def choose_eval(keys: np.ndarray, sizes: np.ndarray, cfg: EvalSplitConfig) -> np.ndarray:
    """Boolean mask over a domain's documents (in stored order): True for the held-out ones.

    ``keys`` are :func:`split_key` values and ``sizes`` UTF-8 bytes per document. The smallest keys
    are held out: :func:`eval_count` of them, then more while they hold under ``cfg.min_bytes``.
    """
    order = np.argsort(keys, kind="stable")
    k = eval_count(len(keys), cfg)
    limit = max(0, min(cfg.max_documents, len(keys) - 1))
    held_bytes = int(sizes[order[:k]].sum())
    while k < limit and held_bytes < cfg.min_bytes:
        held_bytes += int(sizes[order[k]])
        k += 1
    mask = np.zeros(len(keys), dtype=bool)
    mask[order[:k]] = True
    return mask


def ngram_hashes(text: str, n: int) -> set[int]:
    """Python hashes of the word n-grams of ``text`` (the whole text when it has fewer than n words)."""
    words = text.split()
    if len(words) < n:
        return {hash(tuple(words))} if words else set()
    return {hash(tuple(words[i : i + n])) for i in range(len(words) - n + 1)}


class Decontaminator:
    """Collects eval n-grams, then tells whether a training document overlaps any of them."""

    def __init__(self, ngram_words: int) -> None:
        self.n = ngram_words
        self._eval: set[int] = set()

    def add_eval(self, text: str) -> None:
        self._eval |= ngram_hashes(text, self.n)

    def is_clean(self, text: str) -> bool:
        words = text.split()
        if len(words) < self.n:
            return hash(tuple(words)) not in self._eval
        return not any(
            hash(tuple(words[i : i + self.n])) in self._eval for i in range(len(words) - self.n + 1)
        )
