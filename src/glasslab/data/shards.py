"""Tokenized shards (``glasslab-dataset/3``): flat memmapped token arrays with per-document provenance, and
which held-out tokens the held-out loss counts.

Layout inside a dataset folder::

    shards/<domain>/<split>.bin       flat uint16 (vocab < 65,536) or uint32 token ids; every document
                                      is followed by the <|endoftext|> id
    shards/<domain>/<split>.idx.npy   int64 end offset (in tokens, exclusive) of each document
    shards/<domain>/<split>.prov.npy  where each document came from: (ref uint32, position uint64)
                                      per document, 12 bytes (see provenance.py)
    shards/<domain>/eval.scored.npy   bool per eval token: False inside a word n-gram that training
                                      documents hold too (the held-out loss leaves it out)
    shards/refs.jsonl                 the references ``ref`` points at, one per line
    manifest.json                     counts, dtype, sha256 of every file; written last (see build.py)

The build writes them (``stages.py``: tokenize per task, then assemble per domain and split); this module
reads them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from glasslab.errors import UserError
from glasslab.layout import MANIFEST_FILE, file_sha256, read_json
from glasslab.store.ranges import RangeTokens, tokens_on_root

SPLITS = ("train", "eval")
FORMAT = "glasslab-dataset/3"
"""The format ``manifest.json`` names; ``glasslab-dataset/2`` (no ``scored``: every held-out token counts) and
``glasslab-dataset/1`` (no provenance either) are still read."""
READABLE_FORMATS = ("glasslab-dataset/1", "glasslab-dataset/2", FORMAT)


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits, else uint32."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def read_manifest(dataset_dir: str | Path) -> dict:
    """The dataset's manifest; a one-line error when the folder is not a finished dataset."""
    return checked_manifest(dataset_dir, read_json(Path(dataset_dir) / MANIFEST_FILE))


def checked_manifest(dataset_dir: str | Path, manifest: dict | None) -> dict:
    """``manifest`` (None: the file is absent) when it is a dataset manifest this glasslab reads; else a
    one-line error."""
    if manifest is None:
        raise UserError(
            f"{dataset_dir}: not a built dataset (no {MANIFEST_FILE}); run `glasslab data build` first"
        )
    if manifest.get("format") not in READABLE_FORMATS:
        raise UserError(f"{dataset_dir}: dataset format {manifest.get('format')!r}; this glasslab reads "
                        f"{', '.join(READABLE_FORMATS)}: build it again")
    return manifest


def manifest_hash(dataset_dir: str | Path) -> str:
    """sha256 of the dataset's manifest (which holds the sha256 of every shard and the tokenizer)."""
    read_manifest(dataset_dir)
    return file_sha256(Path(dataset_dir) / MANIFEST_FILE)


class Shard:
    """One domain's split: its token ids (memory-mapped, or read by range on an object-store lab) and document end
    offsets."""

    def __init__(self, dataset_dir: Path, entry: dict, dtype: np.dtype) -> None:
        bin_path, index_file = dataset_dir / entry["file"], dataset_dir / entry["index"]
        self.tokens = _tokens(bin_path, dtype, entry["tokens"])
        try:
            self.ends = np.load(index_file)
        except (OSError, ValueError, EOFError):
            self.ends = None
        if self.ends is None or len(self.ends) != entry["documents"] or (
                len(self.ends) and int(self.ends[-1]) != entry["tokens"]):
            raise UserError(f"{index_file}: missing, unreadable or not the index of {entry['documents']} "
                            "documents the manifest lists; the dataset is damaged: build it again")
        self.bytes = entry["bytes"]
        self.scored = self._scored(dataset_dir, entry)

    def _scored(self, dataset_dir: Path, entry: dict) -> np.ndarray | None:
        """Which tokens a held-out loss counts (bool per token); None when all do (a training split, or a
        dataset built before ``glasslab-dataset/3``)."""
        if "scored" not in entry:
            return None
        path = dataset_dir / entry["scored"]
        try:
            scored = np.load(path, mmap_mode="r")
        except (OSError, ValueError, EOFError):
            scored = None
        if scored is None or scored.shape != (entry["tokens"],):
            raise UserError(f"{path}: missing, unreadable or not one flag per token of the {entry['tokens']} "
                            "the manifest lists; the dataset is damaged: build it again")
        return scored

    @property
    def num_tokens(self) -> int:
        return int(self.tokens.size)

    @property
    def lengths(self) -> np.ndarray:
        """Tokens per document, its end-of-text id included."""
        return np.diff(self.ends, prepend=0)

    def document(self, i: int) -> np.ndarray:
        start = int(self.ends[i - 1]) if i else 0
        return self.tokens[start : int(self.ends[i])]


def _tokens(bin_path: Path, dtype: np.dtype, count: int) -> np.ndarray | RangeTokens:
    """The shard's token ids: memory-mapped, or on an object-store lab whose working copy left the file on the
    root, read from it by range."""
    if not count:
        return np.zeros(0, dtype)
    if not bin_path.is_file():
        remote = tokens_on_root(bin_path, dtype, count)
        if remote is not None:
            return remote
    # Sizes, not hashes, are checked on every open: a truncated or missing shard is one line, at the cost of a
    # stat (the manifest's sha256 covers silent corruption, e.g. `glasslab data report`).
    expected = count * dtype.itemsize
    size = bin_path.stat().st_size if bin_path.is_file() else None
    if size != expected:
        found = "missing" if size is None else f"{size} bytes"
        raise UserError(f"{bin_path}: {found}, the manifest says {expected} ({count} tokens); "
                        "the dataset is damaged: build it again")
    return np.memmap(bin_path, dtype=dtype, mode="r")


def open_shard(dataset_dir: str | Path, domain: str, split: str, manifest: dict | None = None) -> Shard:
    """The ``split`` shard of ``domain``; one-line error for a domain the dataset does not have."""
    manifest = manifest or read_manifest(dataset_dir)
    domains = manifest["domains"]
    if domain not in domains:
        raise UserError(f"{dataset_dir}: unknown domain {domain!r} (domains: {', '.join(sorted(domains))})")
    return Shard(Path(dataset_dir), domains[domain][split], np.dtype(manifest["dtype"]))
