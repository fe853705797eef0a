"""The read stage: one task per input slice — read, then the document stream through the read blocks.

The task reads its slice (``sources.py``) as a stream of documents and pulls it through the blocks of
``blocks.py`` in order: normalise → each filter of the source's preset → store (the task's document store,
:mod:`glasslab.data.docstore`, with each document's eval split key) → content digest (exact dedup) →
MinHash signature (near dedup). Every raw document keeps a row (``raw.npy``: bytes, normalised bytes, and
the block that dropped it); the digests and the band hashes of the signatures are saved by slot for the
dedup stages. A source's caps (``max_documents``, ``max_bytes``) are applied to the whole source later, in
canonical order; a task stops reading once its own documents alone reach them.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from glasslab.data import dedup
from glasslab.data.blocks import StreamDocument, read_chain
from glasslab.data.config import DedupConfig, FilterConfig, SourceConfig
from glasslab.data.docstore import KEPT, RAW, DocumentWriter, save_by_slot
from glasslab.data.inputs import KEY_BITS, ReadTask
from glasslab.data.sources import InputErrors, count_line_starts, read_task


@dataclass(frozen=True)
class ReadArgs:
    task: ReadTask
    source: SourceConfig
    filters: FilterConfig
    dedup: DedupConfig
    seed: int
    strict: bool
    skip_bad_files: bool


def read_stage(args: ReadArgs, folder: Path) -> dict:
    """Run one read task into ``folder``; returns its counts, each block's counts, its input errors and (JSONL)
    lines read."""
    source, cfg = args.source, args.dedup
    errors = InputErrors()
    writer = DocumentWriter(folder)
    rows: list[list[int]] = []
    chain = read_chain(source, args.filters, cfg, writer, args.seed)
    chain.run(_documents(args, errors, rows), rank=args.task.index)
    writer.close()
    np.save(folder / "raw.npy", np.array([tuple(row) for row in rows], dtype=RAW))
    base_key = args.task.index << KEY_BITS
    _save_exact(folder, chain.digest.digests if chain.digest else [], base_key)
    _save_bands(folder, chain.minhash.signatures if chain.minhash else [], base_key, cfg)
    task = args.task
    ranged = task.stop >= 0 and source.kind == "jsonl"
    lines = count_line_starts(Path(task.files[0]), task.start, task.stop) if ranged else 0
    return {"documents_in": len(rows), "documents_kept": writer.count, "raw_bytes": sum(row[0] for row in rows),
            "kept_bytes": writer.bytes, "lines": lines, "errors": errors.to_dict(), "last_problem": errors.last_problem,
            "blocks": chain.stats}


def _documents(args: ReadArgs, errors: InputErrors, rows: list[list[int]]) -> Iterator[StreamDocument]:
    """The task's raw documents as a stream, each with its raw row appended to ``rows`` (kept until a block
    drops it), up to the source's caps."""
    source, raw_bytes = args.source, 0
    for text, ref, position in read_task(args.task, source, errors, args.strict, args.skip_bad_files):
        if (source.max_documents and len(rows) >= source.max_documents) or (
                source.max_bytes and raw_bytes >= source.max_bytes):
            break  # later documents of the source are past its cap whatever the tasks before hold
        size = len(text.encode("utf-8", "surrogatepass"))
        raw_bytes += size
        rows.append([size, 0, KEPT])
        yield StreamDocument(text, len(rows) - 1, ref, position, rows[-1])


def _save_exact(folder: Path, digests: list[tuple[int, int]], base_key: int) -> None:
    records = np.zeros(len(digests), dtype=dedup.EXACT_RECORD)
    if digests:
        both = np.array(digests, dtype=np.uint64)
        records["hi"], records["lo"] = both[:, 0], both[:, 1]
        records["key"] = base_key + np.arange(len(digests))
    save_by_slot(folder, "exact", records, dedup.exact_slot(records["hi"]), dedup.SLOTS)


def _save_bands(folder: Path, signatures: list[np.ndarray], base_key: int, cfg: DedupConfig) -> None:
    bands, rows = dedup.lsh_bands(cfg.num_perm, cfg.threshold)
    if signatures:
        hashes = dedup.band_hashes(np.stack(signatures), bands, rows)  # (documents, bands)
    else:
        hashes = np.zeros((0, bands), dtype=np.uint64)
    records = np.zeros(hashes.size, dtype=dedup.BAND_RECORD)
    records["hash"] = hashes.reshape(-1)
    records["key"] = np.repeat(base_key + np.arange(len(hashes)), bands)
    band = np.tile(np.arange(bands), len(hashes))
    save_by_slot(folder, "bands", records, dedup.band_slot(band, records["hash"], bands), dedup.SLOTS)
