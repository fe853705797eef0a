"""Gopher/C4-style quality filters, each a named predicate with its own drop count.

A document is checked against the filters in a fixed order and dropped by the first one it fails, so
the per-filter counts add up to the documents this stage removed. Thresholds live in
:class:`~glasslab.data.config.FilterConfig`; a source may skip filters that do not fit its text
(word-shape rules make no sense for code).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable

from glasslab.data.config import FilterConfig

FILTER_NAMES = (
    "length",
    "mean_word_length",
    "symbol_ratio",
    "alpha_ratio",
    "duplicate_lines",
    "top_ngram",
    "duplicate_ngrams",
)
_ALPHA = re.compile(r"[^\W\d_]")


def _length(words: list[str], text: str, cfg: FilterConfig) -> bool:
    return cfg.min_words <= len(words) <= cfg.max_words


def _mean_word_length(words: list[str], text: str, cfg: FilterConfig) -> bool:
    mean = sum(len(w) for w in words) / max(len(words), 1)
    return cfg.min_mean_word_length <= mean <= cfg.max_mean_word_length


def _symbol_ratio(words: list[str], text: str, cfg: FilterConfig) -> bool:
    symbols = text.count("#") + text.count("...") + text.count("\u2026")
    return symbols / max(len(words), 1) <= cfg.max_symbol_ratio


def _alpha_ratio(words: list[str], text: str, cfg: FilterConfig) -> bool:
    alpha = sum(1 for w in words if _ALPHA.search(w))
    return alpha / max(len(words), 1) >= cfg.min_alpha_ratio


def _duplicate_lines(words: list[str], text: str, cfg: FilterConfig) -> bool:
    lines = [line.strip() for line in text.split("\n") if line.strip()]
    if not lines:
        return True
    repeats = len(lines) - len(set(lines))
    return repeats / len(lines) <= cfg.max_duplicate_line_fraction


def _top_ngram(words: list[str], text: str, cfg: FilterConfig) -> bool:
    if len(words) < 4:
        return True
    counts = Counter(zip(words, words[1:], strict=False))
    (first, second), times = counts.most_common(1)[0]
    if times < 2:
        return True
    covered = times * (len(first) + len(second))
    return covered / max(sum(len(w) for w in words), 1) <= cfg.max_top_ngram_fraction


def _duplicate_ngrams(words: list[str], text: str, cfg: FilterConfig, n: int = 5) -> bool:
    if len(words) < 2 * n:
        return True
    grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    counts = Counter(grams)
    in_repeat = bytearray(len(words))
    for i, gram in enumerate(grams):
        if counts[gram] > 1:
            in_repeat[i : i + n] = b"\x01" * n
    covered = sum(len(w) for w, flag in zip(words, in_repeat, strict=True) if flag)
    return covered / max(sum(len(w) for w in words), 1) <= cfg.max_duplicate_ngram_fraction


FILTERS: dict[str, Callable[[list[str], str, FilterConfig], bool]] = {
    "length": _length,
    "mean_word_length": _mean_word_length,
    "symbol_ratio": _symbol_ratio,
    "alpha_ratio": _alpha_ratio,
    "duplicate_lines": _duplicate_lines,
    "top_ngram": _top_ngram,
    "duplicate_ngrams": _duplicate_ngrams,
}


def first_failed_filter(text: str, cfg: FilterConfig, skip: tuple[str, ...] = ()) -> str | None:
    """Name of the first filter ``text`` fails (in :data:`FILTER_NAMES` order), or None if it passes."""
    words = text.split()
    for name in FILTER_NAMES:
        if name not in skip and not FILTERS[name](words, text, cfg):
            return name
    return None
