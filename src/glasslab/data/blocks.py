"""The read stage's blocks: each a small step over one stream of documents, in datatrove's shape.

    stream = read_documents(...)                     # one StreamDocument per raw document
    for block in read_blocks(source, filters, dedup, writer, seed):
        stream = block.run(stream, rank, world_size)  # normalise → each filter → store → digest → MinHash
    for _ in stream: pass                             # pull the documents through

A block takes the documents it is given and yields those it keeps; it never knows whether it runs in a
forked process, inline or on Ray (the task pool runs the task, the task runs the chain). Each block counts
the documents in and out (:attr:`Block.stats`); a block that drops a document says why in its raw row (the
outcome the funnel reads from ``raw.npy``), so the funnel and the per-filter drop counts come from the
same place as before. Adding a filter is adding a rule to a preset (``filters.py``): it becomes one more
:class:`FilterBlock` with its own counts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from glasslab.data import dedup
from glasslab.data.config import DedupConfig, FilterConfig, SourceConfig
from glasslab.data.decontaminate import split_key
from glasslab.data.docstore import EMPTY_AFTER_NORMALIZE, DocumentWriter
from glasslab.data.filters import ALL_FILTER_NAMES, FILTERS, PRESET_FILTERS, Document
from glasslab.data.normalize import normalize

FILTER_OUTCOME = {name: 1 + i for i, name in enumerate(ALL_FILTER_NAMES)}
"""The raw row's outcome for a document a filter dropped (``docstore.KEPT``: kept; 0: empty once normalised)."""


@dataclass
class StreamDocument:
    """One document on its way through the blocks."""

    text: str
    """The raw text, then (after :class:`Normalize`) the normalised one."""
    index: int
    """Its place among the task's raw documents (its row in ``raw.npy``)."""
    ref: int
    position: int
    row: list[int]
    """Its raw row, ``[bytes, normalized bytes, outcome]``, kept by the task after the document is gone."""
    data: bytes = b""
    """The normalised text as UTF-8."""
    features: Document | None = None
    """The features the filters share (words, lines, hashes), each computed once."""


@dataclass
class BlockStats:
    documents_in: int = 0
    documents_out: int = 0

    def to_dict(self) -> dict[str, int]:
        return {"documents_in": self.documents_in, "documents_out": self.documents_out}


class Block:
    """A step over the stream: :meth:`keep` is asked of every document; the kept ones go on."""

    name = "block"

    def __init__(self) -> None:
        self.stats = BlockStats()

    def run(self, docs: Iterator[StreamDocument], rank: int = 0, world_size: int = 1) -> Iterator[StreamDocument]:
        """Yield the documents of ``docs`` this block keeps (``rank`` of ``world_size`` tasks: unused here, the
        shape datatrove's blocks share)."""
        for doc in docs:
            self.stats.documents_in += 1
            if self.keep(doc):
                self.stats.documents_out += 1
                yield doc

    def keep(self, doc: StreamDocument) -> bool:
        raise NotImplementedError


class Normalize(Block):
    """NFC, line ends, blank runs (``normalize.py``); a document left empty is dropped."""

    name = "normalize"

    def keep(self, doc: StreamDocument) -> bool:
        doc.text = normalize(doc.text)
        if not doc.text:
            doc.row[2] = EMPTY_AFTER_NORMALIZE
            return False
        doc.data = doc.text.encode("utf-8", "surrogatepass")
        doc.row[1] = len(doc.data)
        doc.features = Document(doc.text)
        return True


class FilterBlock(Block):
    """One quality rule of a preset (``filters.py``) with its thresholds."""

    def __init__(self, name: str, rule: Callable[[Document, object], bool], thresholds: object) -> None:
        super().__init__()
        self.name, self.rule, self.thresholds = f"filter:{name}", rule, thresholds
        self.outcome = FILTER_OUTCOME[name]

    def keep(self, doc: StreamDocument) -> bool:
        if self.rule(doc.features, self.thresholds):
            return True
        doc.row[2] = self.outcome
        return False


def filter_blocks(preset: str, filters: FilterConfig, skip: tuple[str, ...] = ()) -> list[FilterBlock]:
    """The rules of ``preset`` in its order, less those the source skips: a document is dropped by the first it
    fails, so the per-rule counts add up to what the filters removed."""
    thresholds = getattr(filters, preset, None)
    return [FilterBlock(name, FILTERS[name], thresholds) for name in PRESET_FILTERS[preset] if name not in skip]


class Store(Block):
    """Adds each document to the task's document store, with its eval split key."""

    name = "store"

    def __init__(self, writer: DocumentWriter, seed: int) -> None:
        super().__init__()
        self.writer, self.seed = writer, seed

    def keep(self, doc: StreamDocument) -> bool:
        self.writer.add(doc.data, doc.index, doc.ref, doc.position, split_key(doc.data, self.seed))
        return True


class Digest(Block):
    """The content digest of each document (exact dedup), in stream order."""

    name = "digest"

    def __init__(self) -> None:
        super().__init__()
        self.digests: list[tuple[int, int]] = []

    def keep(self, doc: StreamDocument) -> bool:
        self.digests.append(dedup.content_digest(doc.data))
        return True


class MinHash(Block):
    """The MinHash signature of each document (near dedup), in stream order."""

    name = "minhash"
    _hashers: dict[tuple[int, int], dedup.MinHasher] = {}  # one per process: its permutations cost time to make

    def __init__(self, cfg: DedupConfig) -> None:
        super().__init__()
        key = (cfg.num_perm, cfg.shingle_words)
        if key not in self._hashers:
            self._hashers[key] = dedup.MinHasher(cfg.num_perm, cfg.shingle_words)
        self.hasher = self._hashers[key]
        self.signatures: list[np.ndarray] = []

    def keep(self, doc: StreamDocument) -> bool:
        self.signatures.append(self.hasher.signature(self.hasher.shingle_list(doc.features)))
        return True


@dataclass
class ReadChain:
    """The read stage's blocks in order, and the two whose output the task saves."""

    blocks: list[Block]
    digest: Digest | None = None
    minhash: MinHash | None = None
    stats: dict[str, dict[str, int]] = field(default_factory=dict)

    def run(self, docs: Iterator[StreamDocument], rank: int = 0, world_size: int = 1) -> None:
        """Pull ``docs`` through every block; ``stats`` then holds each block's counts."""
        for block in self.blocks:
            docs = block.run(docs, rank, world_size)
        for _ in docs:
            pass
        self.stats = {block.name: block.stats.to_dict() for block in self.blocks}


def read_chain(source: SourceConfig, filters: FilterConfig, cfg: DedupConfig, writer: DocumentWriter,
               seed: int) -> ReadChain:
    """normalise → each filter of the source's preset → store → digest (exact dedup) → MinHash (near dedup)."""
    digest = Digest() if cfg.exact else None
    minhash = MinHash(cfg) if cfg.near else None
    blocks: list[Block] = [Normalize(), *filter_blocks(source.preset, filters, source.skip_filters),
                           Store(writer, seed)]
    blocks += [b for b in (digest, minhash) if b is not None]
    return ReadChain(blocks, digest, minhash)
