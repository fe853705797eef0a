"""Tokenized shards: parallel, streaming tokenization into flat memmapped arrays, and reading them back.

Layout inside a dataset folder::

    shards/<domain>/<split>.bin       flat uint16 (vocab < 65,536) or uint32 token ids; every document
                                      is followed by the <|endoftext|> id
    shards/<domain>/<split>.idx.npy   int64 end offset (in tokens, exclusive) of each document
    manifest.json                     counts, dtype, sha256 of every file; written last (see build.py)

Tokenization streams: documents are read in chunks of about ``CHUNK_CHARS``, a bounded number of
chunks is in flight in a process pool, and encoded chunks are appended to the shard in order. Memory
is therefore a few chunks per worker, whatever the corpus size.
"""

from __future__ import annotations

import multiprocessing
import os
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from glasslab.errors import UserError
from glasslab.layout import MANIFEST_FILE, file_sha256, read_json

CHUNK_CHARS = 1 << 20
"""Text per task handed to a worker (characters)."""
IN_FLIGHT_PER_WORKER = 2
"""Chunks queued per worker; bounds memory while keeping every worker busy."""
SPLITS = ("train", "eval")

_worker_tokenizer = None
_worker_eot = 0


def token_dtype(vocab_size: int) -> np.dtype:
    """uint16 when every id fits, else uint32."""
    return np.dtype(np.uint16) if vocab_size <= 1 << 16 else np.dtype(np.uint32)


def _init_worker(tokenizer_json: str, eot_id: int) -> None:
    # One process per core already; the tokenizer's own threads would only compete with the others.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    _load_tokenizer(tokenizer_json, eot_id)


def _load_tokenizer(tokenizer_json: str, eot_id: int) -> None:
    from tokenizers import Tokenizer

    global _worker_tokenizer, _worker_eot
    _worker_tokenizer = Tokenizer.from_str(tokenizer_json)
    _worker_tokenizer.encode_special_tokens = True
    _worker_eot = eot_id


def encode_chunk(texts: list[str], dtype_name: str = "uint16") -> tuple[np.ndarray, np.ndarray, int]:
    """Token ids of ``texts`` flattened with an end-of-text id after each, each document's length in
    tokens, and the UTF-8 bytes of the texts (counted here so the reading process stays light)."""
    nbytes = sum(len(text.encode("utf-8")) for text in texts)
    encodings = _worker_tokenizer.encode_batch_fast(texts, add_special_tokens=False)
    flat: list[int] = []
    lengths = np.empty(len(encodings), dtype=np.int64)
    for i, encoding in enumerate(encodings):
        ids = encoding.ids
        flat.extend(ids)
        flat.append(_worker_eot)
        lengths[i] = len(ids) + 1
    return np.array(flat, dtype=dtype_name), lengths, nbytes


def _chunks(texts: Iterable[str]) -> Iterator[list[str]]:
    chunk: list[str] = []
    size = 0
    for text in texts:
        chunk.append(text)
        size += len(text)
        if size >= CHUNK_CHARS:
            yield chunk
            chunk, size = [], 0
    if chunk:
        yield chunk


@dataclass
class ShardStats:
    """What one shard holds: documents, tokens (end-of-text ids included) and UTF-8 bytes of text."""

    documents: int = 0
    tokens: int = 0
    bytes: int = 0


class ShardWriter:
    """Tokenizes document streams into shards with ``num_workers`` processes (1 = in this process)."""

    def __init__(self, tokenizer_json: str, eot_id: int, vocab_size: int, num_workers: int = 1) -> None:
        self.dtype = token_dtype(vocab_size)
        self.num_workers = num_workers
        self._pool: ProcessPoolExecutor | None = None
        if num_workers > 1:
            self._pool = _fork_pool(num_workers, tokenizer_json, eot_id)
        else:
            _load_tokenizer(tokenizer_json, eot_id)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None

    def __enter__(self) -> ShardWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _encoded(self, chunks: Iterator[list[str]]) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
        if self._pool is None:
            for chunk in chunks:
                yield encode_chunk(chunk, self.dtype.name)
            return
        pending: deque = deque()
        for chunk in chunks:
            pending.append(self._pool.submit(encode_chunk, chunk, self.dtype.name))
            if len(pending) >= self.num_workers * IN_FLIGHT_PER_WORKER:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    def write(self, texts: Iterable[str], bin_path: Path) -> ShardStats:
        """Tokenize ``texts`` into ``bin_path`` and its ``.idx.npy``; returns the counts."""
        stats = ShardStats()
        ends: list[np.ndarray] = []
        bin_path.parent.mkdir(parents=True, exist_ok=True)
        with open(bin_path, "wb") as out:
            for tokens, lengths, nbytes in self._encoded(_chunks(texts)):
                out.write(tokens.tobytes())
                ends.append(np.cumsum(lengths) + stats.tokens)
                stats.tokens += int(tokens.size)
                stats.documents += int(lengths.size)
                stats.bytes += nbytes
        np.save(index_path(bin_path), np.concatenate(ends) if ends else np.zeros(0, dtype=np.int64))
        return stats


def _fork_pool(num_workers: int, tokenizer_json: str, eot_id: int) -> ProcessPoolExecutor:
    """A pool of forked workers (fork, not spawn: no re-import of the caller's ``__main__``).

    The tokenizer library warns and turns its threads off in a child forked after its thread pool
    was used; saying so up front through the environment keeps the children quiet and serial, and
    the parent's setting is put back once the workers exist.
    """
    previous = os.environ.get("TOKENIZERS_PARALLELISM")
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    try:
        pool = ProcessPoolExecutor(
            num_workers,
            mp_context=multiprocessing.get_context("fork"),
            initializer=_init_worker,
            initargs=(tokenizer_json, eot_id),
        )
        # Start every worker now, while the environment says "serial".
        for future in [pool.submit(os.getpid) for _ in range(num_workers)]:
            future.result()
    finally:
        if previous is None:
            os.environ.pop("TOKENIZERS_PARALLELISM", None)
        else:
            os.environ["TOKENIZERS_PARALLELISM"] = previous
    return pool


def index_path(bin_path: Path) -> Path:
    return bin_path.with_name(bin_path.name.removesuffix(".bin") + ".idx.npy")


# --- reading ------------------------------------------------------------------------------------


def read_manifest(dataset_dir: str | Path) -> dict:
    """The dataset's manifest; a one-line error when the folder is not a finished dataset."""
    manifest = read_json(Path(dataset_dir) / MANIFEST_FILE)
    if manifest is None:
        raise UserError(
            f"{dataset_dir}: not a built dataset (no {MANIFEST_FILE}); run `glasslab data build` first"
        )
    return manifest


def manifest_hash(dataset_dir: str | Path) -> str:
    """sha256 of the dataset's manifest (which holds the sha256 of every shard and the tokenizer)."""
    read_manifest(dataset_dir)
    return file_sha256(Path(dataset_dir) / MANIFEST_FILE)


class Shard:
    """One domain's split: memmapped token ids and document end offsets."""

    def __init__(self, dataset_dir: Path, entry: dict, dtype: np.dtype) -> None:
        bin_path, index_file = dataset_dir / entry["file"], dataset_dir / entry["index"]
        # Sizes, not hashes, are checked on every open: a truncated or missing shard is one line, at the
        # cost of a stat (the manifest's sha256 covers silent corruption, e.g. `glasslab data report`).
        expected = entry["tokens"] * dtype.itemsize
        size = bin_path.stat().st_size if bin_path.is_file() else None
        if size != expected:
            found = "missing" if size is None else f"{size} bytes"
            raise UserError(f"{bin_path}: {found}, the manifest says {expected} ({entry['tokens']} tokens); "
                            "the dataset is damaged: build it again")
        self.tokens = np.memmap(bin_path, dtype=dtype, mode="r") if entry["tokens"] else np.zeros(0, dtype)
        try:
            self.ends = np.load(index_file)
        except (OSError, ValueError, EOFError):
            self.ends = None
        if self.ends is None or len(self.ends) != entry["documents"] or (
                len(self.ends) and int(self.ends[-1]) != entry["tokens"]):
            raise UserError(f"{index_file}: missing, unreadable or not the index of {entry['documents']} "
                            "documents the manifest lists; the dataset is damaged: build it again")
        self.bytes = entry["bytes"]

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


def open_shard(dataset_dir: str | Path, domain: str, split: str, manifest: dict | None = None) -> Shard:
    """The ``split`` shard of ``domain``; one-line error for a domain the dataset does not have."""
    manifest = manifest or read_manifest(dataset_dir)
    domains = manifest["domains"]
    if domain not in domains:
        raise UserError(f"{dataset_dir}: unknown domain {domain!r} (domains: {', '.join(sorted(domains))})")
    return Shard(Path(dataset_dir), domains[domain][split], np.dtype(manifest["dtype"]))
