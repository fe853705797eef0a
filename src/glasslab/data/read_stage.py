"""The read stage: one task per input slice — read, normalise, filter, and prepare dedup and the eval split.

Each raw document goes through the blocks in order (a block is a function of one document; the task
streams its documents through them): read → normalise → filter (the source's preset) → content digest
(exact dedup) → MinHash signature and band hashes (near dedup) → eval split key. Kept documents go to
the task's document store (:mod:`glasslab.data.docstore`). A source's caps (``max_documents``,
``max_bytes``) are applied to the whole source later, in canonical order; a task stops reading once its
own documents alone reach them.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from glasslab.data import dedup
from glasslab.data.config import DedupConfig, FilterConfig, SourceConfig
from glasslab.data.decontaminate import split_key
from glasslab.data.docstore import EMPTY_AFTER_NORMALIZE, KEPT, RAW, DocumentWriter, save_by_slot
from glasslab.data.filters import ALL_FILTER_NAMES, Document, first_failed_filter
from glasslab.data.inputs import KEY_BITS, ReadTask
from glasslab.data.normalize import normalize
from glasslab.data.sources import InputErrors, count_line_starts, read_task

_OUTCOME = {name: 1 + i for i, name in enumerate(ALL_FILTER_NAMES)}
_hashers: dict[tuple[int, int], dedup.MinHasher] = {}


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
    """Run one read task into ``folder``; returns its counts, its input errors and (JSONL) lines read."""
    source, cfg = args.source, args.dedup
    errors = InputErrors()
    writer = DocumentWriter(folder)
    raw_rows: list[tuple[int, int, int]] = []
    digests: list[tuple[int, int]] = []
    signatures: list[np.ndarray] = []
    hasher = _hasher(cfg) if cfg.near else None
    raw_bytes = 0
    for text, ref, position in read_task(args.task, source, errors, args.strict, args.skip_bad_files):
        if (source.max_documents and len(raw_rows) >= source.max_documents) or (
                source.max_bytes and raw_bytes >= source.max_bytes):
            break  # later documents of the source are past its cap whatever the tasks before hold
        size = len(text.encode("utf-8", "surrogatepass"))
        raw_bytes += size
        clean = normalize(text)
        if not clean:
            raw_rows.append((size, 0, EMPTY_AFTER_NORMALIZE))
            continue
        data = clean.encode("utf-8", "surrogatepass")
        doc = Document(clean)
        failed = first_failed_filter(doc, source.preset, args.filters, source.skip_filters)
        raw_rows.append((size, len(data), _OUTCOME[failed] if failed else KEPT))
        if failed:
            continue
        writer.add(data, len(raw_rows) - 1, ref, position, split_key(data, args.seed))
        if cfg.exact:
            digests.append(dedup.content_digest(data))
        if hasher is not None:
            signatures.append(hasher.signature(hasher.shingle_list(doc)))
    writer.close()
    np.save(folder / "raw.npy", np.array(raw_rows, dtype=RAW))
    base_key = args.task.index << KEY_BITS
    _save_exact(folder, digests, base_key)
    _save_bands(folder, signatures, base_key, cfg)
    task = args.task
    ranged = task.stop >= 0 and source.kind == "jsonl"
    lines = count_line_starts(Path(task.files[0]), task.start, task.stop) if ranged else 0
    return {"documents_in": len(raw_rows), "documents_kept": writer.count, "raw_bytes": raw_bytes,
            "kept_bytes": writer.bytes, "lines": lines, "errors": errors.to_dict(), "last_problem": errors.last_problem}


def _hasher(cfg: DedupConfig) -> dedup.MinHasher:
    key = (cfg.num_perm, cfg.shingle_words)
    if key not in _hashers:
        _hashers[key] = dedup.MinHasher(cfg.num_perm, cfg.shingle_words)
    return _hashers[key]


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
