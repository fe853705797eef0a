"""The held-out split per domain, which of its tokens overlap training, and decontamination against
external eval sets.

Eval documents are chosen by a seeded hash of their text (stable under reordering of other
documents): the ``k`` smallest hashes of a domain, with ``k`` from the configured fraction and
bounds. Only the smallest :attr:`~glasslab.data.config.EvalSplitConfig.max_documents` keys of a domain
can be chosen, so each task hands in that many and the choice needs no more memory than that.

Every word n-gram of every eval document goes into one set, and the build counts the training
documents holding each. Training documents are kept: on code nearly every file shares a rare 13-gram
with a random 5% of its corpus, and dropping them ate three quarters of one (``docs/LOG.md``). The
held-out side is made clean instead: :func:`scored_tokens` flags the eval tokens inside an n-gram that
training holds, and the held-out loss leaves them out — except n-grams that are **common**: found in
more than ``common_ngram_documents`` training documents (10 by default). Such a span is boilerplate (a
licence header, a generated docstring, a ``setup.py`` stanza), not a leak of the held-out text.

:class:`Decontaminator` is the other direction, for external eval sets checked against a dataset (SFT
conversations): there the training text that overlaps is dropped.
"""

from __future__ import annotations

import hashlib
import re

import numpy as np

from glasslab.data import ngrams
from glasslab.data.config import EvalSplitConfig

_WORD = re.compile(r"\S+")


def split_key(text: str | bytes, seed: int) -> int:
    """A 63-bit key ordering documents for the eval split; depends on the text (or its UTF-8 bytes) and the
    seed only."""
    data = text if isinstance(text, bytes) else text.encode("utf-8", "surrogatepass")
    digest = hashlib.blake2b(data, digest_size=8, key=str(seed).encode()).digest()
    return int.from_bytes(digest, "little") >> 1


def eval_count(num_documents: int, cfg: EvalSplitConfig) -> int:
    """How many of a domain's documents are held out (always leaving one for training)."""
    wanted = round(cfg.fraction * num_documents)
    wanted = min(max(wanted, cfg.min_documents), cfg.max_documents)
    return max(0, min(wanted, num_documents - 1))


def choose_eval(num_documents: int, smallest_sizes: np.ndarray, cfg: EvalSplitConfig) -> int:
    """How many of a domain's smallest split keys are held out.

    ``smallest_sizes`` are the UTF-8 bytes of the documents with the smallest keys, in key order (at
    least ``cfg.max_documents`` of them, or all). :func:`eval_count` of them, then more while they
    hold under ``cfg.min_bytes``.
    """
    k = eval_count(num_documents, cfg)
    limit = max(0, min(cfg.max_documents, num_documents - 1))
    held_bytes = int(smallest_sizes[:k].sum())
    while k < limit and held_bytes < cfg.min_bytes:
        held_bytes += int(smallest_sizes[k])
        k += 1
    return k


def held_out_mask(keys: np.ndarray, sizes: np.ndarray, cfg: EvalSplitConfig) -> np.ndarray:
    """Boolean mask over documents in their stored order: True for the held-out ones (the smallest ``keys``,
    as many as :func:`choose_eval` says; ``sizes`` in UTF-8 bytes). For a collection held in memory, such as
    SFT conversations; the build makes the same choice from each task's smallest keys."""
    order = np.argsort(keys, kind="stable")
    mask = np.zeros(len(keys), dtype=bool)
    mask[order[: choose_eval(len(keys), sizes[order], cfg)]] = True
    return mask


def text_ngrams(words: list[str], n: int) -> np.ndarray:
    """uint64 hashes of the word n-grams in text order, repeats included (the whole text when it has fewer
    than n words)."""
    hashes = ngrams.word_hashes(words)
    grams = ngrams.ngram_hashes(hashes, n)
    return grams if len(grams) else ngrams.whole_hash(hashes)


class EvalNgrams:
    """The sorted eval n-gram hashes, with a bitmap of their top bits in front: most training n-grams miss the
    bitmap, and only the few that hit it are looked up in the sorted array."""

    BITS = 23

    def __init__(self, sorted_hashes: np.ndarray) -> None:
        self.hashes = sorted_hashes
        self._shift = np.uint64(64 - self.BITS)
        self._seen = np.zeros(1 << self.BITS, dtype=bool)
        self._seen[sorted_hashes >> self._shift] = True

    def __len__(self) -> int:
        return len(self.hashes)

    def contains(self, grams: np.ndarray) -> np.ndarray:
        """Boolean per element of ``grams``: whether that n-gram is among the hashes."""
        found = np.zeros(len(grams), dtype=bool)
        if not len(self.hashes) or not len(grams):
            return found
        maybe = self._seen[grams >> self._shift]
        at = np.searchsorted(self.hashes, grams[maybe])
        at[at == len(self.hashes)] = 0
        found[maybe] = self.hashes[at] == grams[maybe]
        return found

    def hits(self, grams: np.ndarray) -> np.ndarray:
        """Indices into the sorted hashes of the n-grams ``grams`` shares with them, each once."""
        grams = grams[self.contains(grams)]
        return np.unique(np.searchsorted(self.hashes, grams))


def scored_tokens(text: str, offsets: list[tuple[int, int]], shared: EvalNgrams, n: int) -> np.ndarray:
    """Which of a held-out document's tokens its loss counts: False for a token that overlaps a word n-gram
    in ``shared`` (n-grams the training split holds too), True for the rest.

    ``offsets`` are the tokens' (start, end) character offsets in ``text``. A text of fewer than ``n`` words
    is one n-gram (as :func:`text_ngrams` has it).
    """
    words = list(_WORD.finditer(text))  # the same words as text.split(), with their places
    grams = text_ngrams([w.group() for w in words], n)
    hit = np.flatnonzero(shared.contains(grams))
    covered_chars = np.zeros(len(text) + 1, dtype=np.int64)
    if len(hit):
        span = min(n, len(words))
        starts = np.array([w.start() for w in words], dtype=np.int64)
        ends = np.array([w.end() for w in words], dtype=np.int64)
        np.add.at(covered_chars, starts[hit], 1)
        np.add.at(covered_chars, ends[hit + span - 1], -1)
    inside = np.concatenate([[0], np.cumsum(np.cumsum(covered_chars)[:-1] > 0)])
    bounds = np.array(offsets, dtype=np.int64).reshape(-1, 2)
    return inside[bounds[:, 1]] - inside[bounds[:, 0]] == 0


class Decontaminator:
    """Collects eval n-grams, then tells whether a text overlaps any of them (no frequency cutoff: for a
    handful of texts checked against a built dataset, such as SFT conversations)."""

    def __init__(self, ngram_words: int) -> None:
        self.n = ngram_words
        self._parts: list[np.ndarray] = []
        self._eval: EvalNgrams | None = None

    def add_eval(self, text: str) -> None:
        self._parts.append(text_ngrams(text.split(), self.n))
        self._eval = None

    def is_clean(self, text: str) -> bool:
        if self._eval is None:
            self._eval = EvalNgrams(np.unique(np.concatenate(self._parts)) if self._parts else np.zeros(0, np.uint64))
        return not len(self._eval.hits(text_ngrams(text.split(), self.n)))
