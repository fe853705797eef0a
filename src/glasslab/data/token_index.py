"""A suffix array over a dataset's training tokens: which spans of a text the training data holds verbatim.

The index is a lab step of its own (``<lab>/index-<hash8>/``, keyed by the dataset's manifest hash, so it is
built once per dataset; :func:`index_for` plans and runs it, and readers that never build, such as the observatory,
find it with :func:`index_folder` or :func:`built_index`). Its files, all memory-mapped when read:

    tokens.npy   every domain's training shard, one after the other (domains in sorted order), as
                 big-endian token ids: comparing raw bytes compares token sequences, and every document
                 ends with the <|endoftext|> id, which a traced text never holds (it is encoded as plain
                 text), so no match crosses a document boundary
    sa.npy       the suffix array: the start (in tokens) of every suffix, in sorted order; int32 below
                 2**31 tokens (4 bytes per token)
    ends.npy     int64 end (exclusive) of every document in tokens.npy, to map a hit to its document
    counts.npy   int64 count of each token id: the unigram probabilities of the rarity cutoff
    heldout.tokens.npy, heldout.sa.npy, heldout.ends.npy
                 the same for the held-out (eval) split: to mark spans it holds too, and to say which
                 held-out documents hold a text that the training data does not
    index.json   written last: the manifest hash, dtype, token and document counts, and each domain's
                 first document in ends.npy (``first_document``; ``heldout_first_document``)

The build sorts the suffixes of the tokens' big-endian bytes with libdivsufsort (``pydivsufsort``) and
keeps those starting on a token boundary: byte order at token starts is token order.

A lookup is a binary search over ``sa.npy`` comparing byte slices of ``tokens.npy`` (``bisect`` with a
key: about 30 comparisons, each a slice of the mapped file). :meth:`TokenIndex.trace` finds, for each
start in the text, the longest prefix found in the training data (its neighbours in suffix order share
the longest prefix), keeps the maximal spans of at least ``min_tokens``, and drops common ones by their
unigram probability (see :func:`default_cutoff`); each kept span is counted in the held-out split too.
The same search over the held-out split (``split="heldout"``) finds the spans of a text that the
held-out documents hold, and which ones.
"""

from __future__ import annotations

import bisect
import math
import mmap
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from glasslab.config import UNVERSIONED
from glasslab.errors import UserError
from glasslab.layout import json_text, read_json, write_text_atomic

INDEX_FILE = "index.json"
HELDOUT_PREFIX = "heldout."
"""The held-out (eval) split's files: ``heldout.tokens.npy``, ``heldout.sa.npy``, ``heldout.ends.npy``."""
FORMAT = "glasslab-token-index/2"
"""2: the held-out split's document ends too (``heldout.ends.npy``, ``heldout_first_document``)."""

FIRST_HITS = 4096
"""A span's documents come from its first hits in data order, among at most this many of them."""


def default_cutoff(min_tokens: int, typical_log10: float) -> float:
    """The default rarity cutoff (log10): a span must be at most as probable as ``min_tokens`` typical
    tokens of the data, ``typical_log10`` being the mean log10 unigram probability of a token of the
    training data (minus its unigram entropy). OLMoTrace ranks spans by the same product, keeping the least
    probable. A span of exactly ``min_tokens`` tokens passes when its tokens are rarer than usual on the
    whole; a longer one needs fewer rare tokens; a run of common tokens (spaces, ``self``, ``(``, ``_``)
    must be far longer. Measured on the probability of the data's own tokens, it means the same for a
    512-token vocabulary as for a 50k one."""
    return min_tokens * typical_log10


@dataclass(frozen=True)
class IndexConfig:
    """The index step's config: the dataset (its path, and the manifest hash that names it)."""

    dataset: str = field(metadata=UNVERSIONED)
    """Where the dataset is: not part of the step's identity, so a lab moved or rebuilt elsewhere (another
    path, the same data) finds the same ``index-<hash8>``."""
    manifest_hash: str
    format: str = FORMAT
    """The index's file format: an index of another format is another step, built again once."""


def index_step(ctx) -> dict:
    """Build the index of ``ctx.config.dataset``'s training tokens into the step's folder."""
    from glasslab.data.shards import manifest_hash

    cfg = ctx.config
    if manifest_hash(cfg.dataset) != cfg.manifest_hash:
        raise UserError(f"{cfg.dataset}: holds another dataset than manifest sha256 {cfg.manifest_hash[:16]}")
    return build_index(cfg.dataset, ctx.output_dir)


def build_index(dataset_dir: str | Path, out_dir: str | Path) -> dict:
    """Write the index files of ``dataset_dir``'s training shards into ``out_dir``; returns index.json's data."""
    import pydivsufsort

    from glasslab.data.shards import manifest_hash, open_shard, read_manifest

    started = time.perf_counter()
    out = Path(out_dir)
    manifest = read_manifest(dataset_dir)
    dtype = np.dtype(manifest["dtype"])
    info = {"format": FORMAT, "manifest_hash": manifest_hash(dataset_dir), "dtype": dtype.str.lstrip("<>|=")}
    for split, prefix in (("train", ""), ("eval", HELDOUT_PREFIX)):
        parts, ends, first_document = [], [], {}
        offset = documents = 0
        for domain in sorted(manifest["domains"]):
            shard = open_shard(dataset_dir, domain, split, manifest)
            first_document[domain] = documents
            parts.append(np.asarray(shard.tokens))
            ends.append(shard.ends + offset)
            offset += shard.num_tokens
            documents += len(shard.ends)
        tokens = np.concatenate(parts).astype(dtype.newbyteorder(">"))
        np.save(out / f"{prefix}tokens.npy", tokens)
        np.save(out / f"{prefix}sa.npy", suffix_array(tokens, pydivsufsort.divsufsort))
        np.save(out / f"{prefix}ends.npy", np.concatenate(ends) if ends else np.zeros(0, np.int64))
        if split == "train":
            vocab = int(manifest.get("vocab_size") or (int(tokens.max()) + 1 if len(tokens) else 1))
            np.save(out / "counts.npy", np.bincount(tokens.astype(np.int64), minlength=vocab))
            info.update(tokens=int(len(tokens)), documents=documents, first_document=first_document)
        else:
            info.update(heldout_tokens=int(len(tokens)), heldout_documents=documents,
                        heldout_first_document=first_document)
    info.update(build_seconds=round(time.perf_counter() - started, 3),
                index_bytes=sum((out / name).stat().st_size
                                for name in ("sa.npy", "ends.npy", "counts.npy", f"{HELDOUT_PREFIX}sa.npy",
                                             f"{HELDOUT_PREFIX}ends.npy")),
                token_bytes=sum((out / f"{prefix}tokens.npy").stat().st_size for prefix in ("", HELDOUT_PREFIX)))
    write_text_atomic(out / INDEX_FILE, json_text(info))
    return info


def suffix_array(tokens: np.ndarray, divsufsort) -> np.ndarray:
    """The token suffix array of big-endian ``tokens``: the byte suffixes sorted, those on a token kept."""
    width = tokens.dtype.itemsize
    if not len(tokens):
        return np.zeros(0, np.int32)
    byte_sa = divsufsort(tokens.view(np.uint8))
    return (byte_sa[byte_sa % width == 0] // width).astype(np.int32 if len(tokens) < 2**31 else np.int64)


def _index_plan(dataset_dir: str | Path):
    from glasslab.data.shards import manifest_hash
    from glasslab.lab import Step

    path = Path(dataset_dir).resolve()
    return Step("index", index_step, IndexConfig(dataset=str(path), manifest_hash=manifest_hash(path)))


def index_for(dataset_dir: str | Path, lab_root: str | Path):
    """The index of ``dataset_dir`` under ``lab_root`` (``index-<hash8>``), built first if it is not there."""
    from glasslab.lab import run_one_step

    return TokenIndex(run_one_step(_index_plan(dataset_dir), lab_root).folder)


def index_folder(dataset_dir: str | Path, lab_root: str | Path) -> Path:
    """Where :func:`index_for` keeps the index of ``dataset_dir`` under ``lab_root``, built or not (nothing is
    built: for readers such as the observatory, which never write). It is built once ``index.json`` is there."""
    from glasslab.lab.step import planned_folder_name

    return Path(lab_root) / planned_folder_name(_index_plan(dataset_dir))


def built_index(dataset_dir: str | Path, lab_root: str | Path):
    """The index of ``dataset_dir`` under ``lab_root`` when it is built, else None."""
    folder = index_folder(dataset_dir, lab_root)
    return TokenIndex(folder) if (folder / INDEX_FILE).is_file() else None


@dataclass
class Span:
    """A maximal span of the traced text found verbatim in one split of the data (training, or held-out)."""

    start: int
    """First token of the span in the traced text."""
    end: int
    """One past its last token."""
    count: int
    """How often the split searched holds it."""
    log10_unigram_prob: float
    """log10 of the product of its tokens' unigram probabilities (the product itself underflows)."""
    documents: list[tuple[str, int]] = field(default_factory=list)
    """Up to ``max_docs`` (domain, document index in its shard of that split), in data order."""
    heldout_count: int = 0
    """How often the held-out split holds it too (text the model was not trained on; 0 when the split
    searched is the held-out one)."""
    hits: list[int] = field(default_factory=list)
    """Where (token position in the split's tokens) it occurs first in each of ``documents``."""


class SortedSuffixes:
    """One split's tokens, suffix array and document ends, memory-mapped: ranges and longest matches of token
    sequences, and the document (domain, index in its shard) at a position."""

    def __init__(self, folder: Path, prefix: str, tokens: int, dtype: np.dtype, first_document: dict[str, int]
                 ) -> None:
        self.width, self.dtype = dtype.itemsize, dtype.newbyteorder(">")
        self.sa = np.load(folder / f"{prefix}sa.npy", mmap_mode="r")
        with open(folder / f"{prefix}tokens.npy", "rb") as handle:
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) if tokens else b""
        self._base = len(self._map) - tokens * self.width
        self.ends = np.load(folder / f"{prefix}ends.npy")
        self.domains = sorted(first_document, key=first_document.get)
        self.firsts = np.array([first_document[d] for d in self.domains], np.int64)

    def _key(self, length: int):
        base, width, data = self._base, self.width, self._map
        return lambda position: data[base + int(position) * width: base + (int(position) + length) * width]

    def tokens(self, lo: int, hi: int) -> np.ndarray:
        """Tokens ``lo`` to ``hi`` (exclusive) of the split, as native ids."""
        data = self._map[self._base + lo * self.width: self._base + hi * self.width]
        return np.frombuffer(data, self.dtype).astype(self.dtype.newbyteorder("="))

    def bytes(self, ids) -> bytes:
        return np.asarray(ids, dtype=self.dtype).tobytes()

    def count(self, ids) -> tuple[int, int]:
        """The suffix-array range ``[lo, hi)`` of the suffixes starting with ``ids``."""
        query = self.bytes(ids)
        key = self._key(len(ids))
        return bisect.bisect_left(self.sa, query, key=key), bisect.bisect_right(self.sa, query, key=key)

    def longest_match(self, query: bytes) -> int:
        """How many leading tokens of ``query`` (big-endian bytes) the split holds verbatim."""
        key = self._key(len(query) // self.width)
        at = bisect.bisect_left(self.sa, query, key=key)
        best = 0
        for neighbour in (at - 1, at):
            if 0 <= neighbour < len(self.sa):
                best = max(best, _common_prefix(query, key(self.sa[neighbour])))
        return best // self.width

    def document_of(self, position: int) -> tuple[str, int]:
        """The (domain, document index in its shard of this split) holding token ``position``."""
        document = int(np.searchsorted(self.ends, position, side="right"))
        slot = int(np.searchsorted(self.firsts, document, side="right")) - 1
        return self.domains[slot], document - int(self.firsts[slot])

    def around(self, position: int, length: int, context: int) -> tuple[np.ndarray, np.ndarray]:
        """Up to ``context`` tokens of the document before and after the ``length`` tokens at ``position``
        (its end-of-text token left out)."""
        document = int(np.searchsorted(self.ends, position, side="right"))
        first = int(self.ends[document - 1]) if document else 0
        last = int(self.ends[document]) - 1
        return (self.tokens(max(first, position - context), position),
                self.tokens(position + length, min(last, position + length + context)))


class TokenIndex:
    """An index built by :func:`build_index`, memory-mapped: the training split (``train``, with its unigram
    counts) and the held-out split (``heldout``)."""

    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        info = read_json(self.folder / INDEX_FILE)
        if not info or info.get("format") != FORMAT:
            raise UserError(f"{self.folder}: not a token index (no {INDEX_FILE} of {FORMAT})")
        self.info = info
        dtype = np.dtype(info["dtype"])
        self.train = SortedSuffixes(self.folder, "", info["tokens"], dtype, info["first_document"])
        self.heldout = SortedSuffixes(self.folder, HELDOUT_PREFIX, info["heldout_tokens"], dtype,
                                      info["heldout_first_document"])
        counts = np.load(self.folder / "counts.npy")
        self.log_probs = np.log(np.maximum(counts, 1) / max(int(counts.sum()), 1))
        share = counts / max(int(counts.sum()), 1)
        # The mean log10 unigram probability of a training token (the default cutoff's unit).
        self.typical_log10 = float((share * self.log_probs).sum() / math.log(10))

    def split(self, name: str) -> SortedSuffixes:
        """``train`` or ``heldout``."""
        return {"train": self.train, "heldout": self.heldout}[name]

    def trace(self, ids, min_tokens: int = 8, max_docs: int = 3,
              max_log10_unigram_prob: float | None = None, split: str = "train") -> tuple[list[Span], int]:
        """The maximal spans of ``ids`` of at least ``min_tokens`` found in ``split`` (``train``, or ``heldout``)
        and rare enough (log10 of their unigram probability in the training data at most
        ``max_log10_unigram_prob``, by default :func:`default_cutoff`), and how many maximal spans long enough
        were dropped as too common."""
        if max_log10_unigram_prob is None:
            max_log10_unigram_prob = default_cutoff(min_tokens, self.typical_log10)
        found = self.split(split)
        query = found.bytes(ids)
        width = found.width
        spans, dropped, reach = [], 0, 0
        for start in range(len(ids)):
            if len(ids) - start < min_tokens or start + (len(ids) - start) <= reach:
                break
            length = found.longest_match(query[start * width:])
            end = start + length
            if end <= reach:
                continue  # inside the span that began earlier: not maximal
            reach = end
            if length < min_tokens:
                continue
            log10_prob = float(self.log_probs[np.asarray(ids[start:end], np.int64)].sum()) / math.log(10)
            if log10_prob > max_log10_unigram_prob:
                dropped += 1
                continue
            lo, hi = found.count(ids[start:end])
            documents, hits = _first_documents(found, np.asarray(found.sa[lo:hi]), max_docs)
            heldout = self.heldout.count(ids[start:end]) if split == "train" else (0, 0)
            spans.append(Span(start, end, hi - lo, log10_prob, documents, heldout[1] - heldout[0], hits))
        return spans, dropped


def _first_documents(found: SortedSuffixes, positions: np.ndarray, max_docs: int) -> tuple[list, list[int]]:
    """Up to ``max_docs`` distinct documents holding the hits at ``positions``, the first in data order, and
    the first hit in each."""
    if len(positions) > FIRST_HITS:  # the first in data order, without sorting a million hits
        positions = np.partition(positions, FIRST_HITS)[:FIRST_HITS]
    documents: list[tuple[str, int]] = []
    hits: list[int] = []
    for position in np.sort(positions):
        document = found.document_of(int(position))
        if document not in documents:
            documents.append(document)
            hits.append(int(position))
            if len(documents) == max_docs:
                break
    return documents, hits


def _common_prefix(a: bytes, b: bytes) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
