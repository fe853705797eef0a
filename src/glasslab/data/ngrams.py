"""Stable 64-bit hashes of a document's words and word n-grams, computed with numpy, not per word in Python.

Filters (repeated n-grams), near-dedup (shingles) and decontamination (eval n-grams) all look at word
n-grams, and the build compares them across processes and machines, so they must hash the same
everywhere (Python's ``hash`` is salted per process). Words are ``text.split()``'s, joined by single
spaces and hashed as UTF-8 bytes with a polynomial over the bytes (prefix sums modulo 2**64, so a
whole document is a handful of vector operations), then mixed by the splitmix64 finaliser; an n-gram
hashes its words' hashes the same way. Two different n-grams share a hash with probability about
2**-64 per pair: negligible at any corpus size this build meets.
"""

from __future__ import annotations

import numpy as np

_U64 = np.uint64
_BYTE_BASE = _U64(0x100000001B3)  # odd, so invertible modulo 2**64
_WORD_BASE = _U64(0x9E3779B97F4A7C15)
_MIX1, _MIX2 = _U64(0xBF58476D1CE4E5B9), _U64(0x94D049BB133111EB)
_SPACE = ord(" ")
_powers = np.ones(1, dtype=_U64)
_inverse_powers = np.ones(1, dtype=_U64)


def mix64(x: np.ndarray) -> np.ndarray:
    """The splitmix64 finaliser of every element of a uint64 array (a bijection that spreads bits)."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> _U64(30))) * _MIX1
        x = (x ^ (x >> _U64(27))) * _MIX2
        return x ^ (x >> _U64(31))


def _tables(n: int) -> tuple[np.ndarray, np.ndarray]:
    """Powers of the byte base and of its inverse modulo 2**64, at least ``n`` of each (grown on demand)."""
    global _powers, _inverse_powers
    if len(_powers) < n:
        size = max(n, 2 * len(_powers))
        inverse = _U64(pow(int(_BYTE_BASE), -1, 1 << 64))
        with np.errstate(over="ignore"):  # products wrap modulo 2**64, as intended
            _powers = np.concatenate([np.ones(1, _U64), np.cumprod(np.full(size - 1, _BYTE_BASE, dtype=_U64))])
            _inverse_powers = np.concatenate([np.ones(1, _U64), np.cumprod(np.full(size - 1, inverse, dtype=_U64))])
    return _powers, _inverse_powers


def word_hashes(words: list[str]) -> np.ndarray:
    """uint64 hash of each word (``len(words)`` of them); equal words hash equal in every process."""
    if not words:
        return np.zeros(0, dtype=_U64)
    data = np.frombuffer(" ".join(words).encode("utf-8"), dtype=np.uint8)
    spaces = np.flatnonzero(data == _SPACE)
    starts = np.concatenate([[0], spaces + 1])
    ends = np.concatenate([spaces, [len(data)]])
    powers, inverse = _tables(len(data) + 1)
    with np.errstate(over="ignore"):
        prefix = np.concatenate([[_U64(0)], np.cumsum(data.astype(_U64) * powers[: len(data)], dtype=_U64)])
        # sum of byte * base**(position - start) over the word: shift the prefix difference back to 0
        raw = (prefix[ends] - prefix[starts]) * inverse[starts]
        return mix64(raw ^ (ends - starts).astype(_U64))


def ngram_hashes(hashes: np.ndarray, n: int) -> np.ndarray:
    """uint64 hash of every run of ``n`` consecutive word hashes (``len(hashes) - n + 1`` of them; none when
    there are fewer than ``n`` words)."""
    count = len(hashes) - n + 1
    if count <= 0:
        return np.zeros(0, dtype=_U64)
    with np.errstate(over="ignore"):
        acc = hashes[:count].copy()
        for k in range(1, n):
            acc = acc * _WORD_BASE + hashes[k : k + count]
        return mix64(acc ^ _U64(n))


def whole_hash(hashes: np.ndarray) -> np.ndarray:
    """One hash of all the word hashes together (a text shorter than an n-gram stands for itself)."""
    return ngram_hashes(hashes, len(hashes)) if len(hashes) else np.zeros(0, dtype=_U64)
