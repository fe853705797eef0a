"""Where each document in a dataset's shards came from: source, and file and line, Parquet row, file path,
module, or dataset record.

Beside each shard, ``<split>.prov.npy`` holds one record per document, in the shard's order: ``ref``
(uint32, a line of ``shards/refs.jsonl``) and ``position`` (uint64): **12 bytes per document**, plus one
line of ``refs.jsonl`` per input file (or module, or dataset) — a few dozen bytes each. A reference is
``[source index, name]``: the file's path relative to the source's folder (no machine's paths in a
published dataset), the module (``json.encoder``, ``pydoc_data.topics:assert``) or ``dataset:split``.
``position`` is the line (JSONL, from 1), the row (Parquet, from 0), the record (hf, from 0), or 0 for
a whole file or module.

:func:`document_provenance` answers one document; :class:`ProvenanceIndex` answers many (it keeps the
reference table and the memory maps open), e.g. the documents of one training batch.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

import numpy as np

from glasslab.data.shards import read_manifest
from glasslab.errors import UserError
from glasslab.layout import MANIFEST_FILE

REFS_FILE = "shards/refs.jsonl"
POSITION_NAME = {"jsonl": "line", "parquet": "row", "hf": "record"}
"""What ``position`` means for each source kind (text files and built-in modules are whole documents)."""


class ProvenanceIndex:
    """A dataset's provenance, opened once: ``record(domain, split, index)`` for any document."""

    def __init__(self, dataset_dir: str | Path) -> None:
        self.path = Path(dataset_dir)
        self.manifest = read_manifest(self.path)
        if "provenance" not in self.manifest:
            raise UserError(f"{self.path}: built as {self.manifest.get('format')}, without provenance; "
                            "build it again to record where each document came from")
        with open(self.path / REFS_FILE, encoding="utf-8") as handle:
            self.refs = [json.loads(line) for line in handle]
        self.sources = self.manifest["sources"]
        self._arrays: dict[tuple[str, str], np.ndarray] = {}

    def _array(self, domain: str, split: str) -> np.ndarray:
        key = (domain, split)
        if key not in self._arrays:
            domains = self.manifest["domains"]
            if domain not in domains or split not in domains[domain]:
                raise UserError(f"{self.path}: no {domain!r} {split!r} split (domains: {', '.join(sorted(domains))})")
            self._arrays[key] = np.load(self.path / domains[domain][split]["provenance"], mmap_mode="r")
        return self._arrays[key]

    def source_names(self, domain: str, split: str, documents: int) -> np.ndarray:
        """The source name of each of the ``documents`` documents of ``domain``'s ``split`` (an object array)."""
        if not documents:
            return np.zeros(0, dtype=object)
        names = np.array([self.sources[source]["name"] for source, _ in self.refs], dtype=object)
        return names[np.asarray(self._array(domain, split)["ref"], dtype=np.int64)]

    def record(self, domain: str, split: str, index: int) -> dict:
        """Where document ``index`` of ``domain``'s ``split`` came from: ``{"source", "kind", "domain"}`` and
        ``file`` + ``line`` (JSONL), ``file`` + ``row`` (Parquet), ``file`` (text), ``module`` (built-in), or
        ``dataset`` + ``record`` (hf)."""
        array = self._array(domain, split)
        if not 0 <= index < len(array):
            raise UserError(f"{self.path}: {domain} {split} has {len(array)} documents; no document {index}")
        ref, position = int(array["ref"][index]), int(array["position"][index])
        source_index, name = self.refs[ref]
        source = self.sources[source_index]
        out = {"source": source["name"], "kind": source["kind"], "domain": source["domain"]}
        if source["kind"] == "builtin":
            out["module"] = name
        elif source["kind"] == "hf":
            out.update(dataset=name, record=position)
        else:
            out["file"] = name
            if source["kind"] in POSITION_NAME:
                out[POSITION_NAME[source["kind"]]] = position
        return out


@functools.lru_cache(maxsize=8)
def _index(path: str, manifest_stamp: tuple) -> ProvenanceIndex:
    return ProvenanceIndex(path)


def document_provenance(dataset_dir: str | Path, domain: str, split: str, index: int) -> dict:
    """Where document ``index`` of ``domain``'s ``split`` shard came from (see :meth:`ProvenanceIndex.record`)."""
    path = Path(dataset_dir).resolve()
    manifest = path / MANIFEST_FILE
    stamp = (manifest.stat().st_mtime_ns, manifest.stat().st_size) if manifest.is_file() else ()
    return _index(str(path), stamp).record(domain, split, index)
