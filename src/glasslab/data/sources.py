"""Readers: turn every configured source into a stream of raw documents, one at a time.

JSONL (plain, ``.gz``, ``.zst``), Parquet, folders of text files, the built-in corpora and locally
cached Hugging Face datasets. Nothing here holds a whole source in memory. Problems in the input are
handled as the build promises: a malformed JSONL line is skipped and recorded as ``file:line`` (or
fails under ``strict``), invalid UTF-8 is replaced and counted, a missing text field fails naming the
field and the keys that exist, and a source that yields no document fails.
"""

from __future__ import annotations

import glob
import gzip
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from glasslab.data import builtin
from glasslab.data.config import SourceConfig
from glasslab.errors import UserError

MAX_RECORDED_MALFORMED = 1000
"""Malformed lines beyond this many are counted but not listed one by one."""


@dataclass
class InputErrors:
    """Problems met while reading, reported in ``report.json`` under ``errors``."""

    malformed_lines: list[str] = field(default_factory=list)
    malformed_count: int = 0
    invalid_utf8: int = 0

    def to_dict(self) -> dict:
        return {
            "malformed_lines": list(self.malformed_lines),
            "malformed_count": self.malformed_count,
            "invalid_utf8": self.invalid_utf8,
        }


def decode_counted(data: bytes, errors: InputErrors) -> str:
    """UTF-8 text of ``data``; invalid sequences become U+FFFD and count once per document."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        errors.invalid_utf8 += 1
        return data.decode("utf-8", errors="replace")


def source_files(source: SourceConfig) -> list[Path]:
    """The files of a jsonl/parquet source: one file, every file in a folder, or a glob; sorted."""
    path = Path(source.path)
    if path.is_file():
        return [path]
    if path.is_dir():
        suffixes = (
            (".parquet",)
            if source.kind == "parquet"
            else (".jsonl", ".json", ".jsonl.gz", ".jsonl.zst", ".json.gz", ".json.zst")
        )
        files = sorted(p for p in path.rglob("*") if p.is_file() and p.name.endswith(suffixes))
    else:
        files = sorted(Path(p) for p in glob.glob(source.path, recursive=True) if Path(p).is_file())
    if not files and not path.exists():
        raise UserError(f"source {source.label}: path {source.path} does not exist")
    return files


def _open_binary(path: Path) -> io.BufferedIOBase:
    if path.name.endswith(".gz"):
        return gzip.open(path, "rb")
    if path.name.endswith(".zst"):
        import zstandard

        return io.BufferedReader(zstandard.ZstdDecompressor().stream_reader(open(path, "rb"), closefd=True))
    return open(path, "rb")


def read_jsonl(path: Path, source: SourceConfig, errors: InputErrors, strict: bool) -> Iterator[str]:
    """Texts of one JSONL file (streamed); malformed lines are skipped and recorded as ``file:line``."""
    with _open_binary(path) as handle:
        for line_number, raw in enumerate(handle, start=1):
            if not raw.strip():
                continue
            line = decode_counted(raw, errors)
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                if strict:
                    raise UserError(
                        f"{path}:{line_number}: malformed JSON ({exc.msg}); "
                        "drop --strict to skip and count such lines"
                    ) from None
                errors.malformed_count += 1
                if len(errors.malformed_lines) < MAX_RECORDED_MALFORMED:
                    errors.malformed_lines.append(f"{path}:{line_number}")
                continue
            if not isinstance(record, dict) or source.text_field not in record:
                keys = ", ".join(sorted(record)) if isinstance(record, dict) else type(record).__name__
                raise UserError(
                    f"{path}:{line_number}: no text field {source.text_field!r} "
                    f"(keys: {keys}); set the source's text_field"
                )
            text = record[source.text_field]
            if not isinstance(text, str):
                raise UserError(
                    f"{path}:{line_number}: field {source.text_field!r} is "
                    f"{type(text).__name__}, expected a string"
                )
            yield text


def read_parquet(path: Path, source: SourceConfig) -> Iterator[str]:
    """Texts of one Parquet file, read a record batch at a time."""
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for a file that is not Parquet
        raise UserError(f"{path}: not a readable Parquet file ({type(exc).__name__})") from None
    columns = parquet.schema_arrow.names
    if source.text_field not in columns:
        raise UserError(
            f"{path}: no text column {source.text_field!r} (columns: {', '.join(columns)}); "
            "set the source's text_field"
        )
    for batch in parquet.iter_batches(columns=[source.text_field], batch_size=1024):
        for text in batch.column(0).to_pylist():
            if text is not None:
                yield text


def read_text_folder(source: SourceConfig, errors: InputErrors) -> Iterator[str]:
    """One document per file under the folder matching ``source.pattern``, in sorted path order.

    Local text beyond the built-in corpora (system documentation, notes) comes in this way, and
    only when a config asks for it.
    """
    folder = Path(source.path)
    if not folder.is_dir():
        raise UserError(f"source {source.label}: {source.path} is not a folder")
    for path in sorted(p for p in folder.glob(source.pattern) if p.is_file()):
        with _open_binary(path) as handle:  # .gz/.zst files (e.g. under /usr/share/doc) are unpacked
            yield decode_counted(handle.read(), errors)


def read_hf(source: SourceConfig) -> Iterator[str]:
    """Texts of a Hugging Face dataset already in the local cache (never downloads)."""
    import os

    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    try:
        import datasets
    except ImportError:
        raise UserError(f"source {source.label}: kind 'hf' needs the 'datasets' package") from None
    try:
        dataset = datasets.load_dataset(source.path, split=source.split, streaming=True)
    except Exception as exc:  # datasets raises many types; all mean "not available offline"
        raise UserError(
            f"source {source.label}: dataset {source.path!r} is not in the local cache ({type(exc).__name__})"
        ) from None
    for record in dataset:
        if source.text_field not in record:
            raise UserError(
                f"source {source.label}: no text field {source.text_field!r} "
                f"(keys: {', '.join(sorted(record))})"
            )
        yield record[source.text_field]


def _texts(source: SourceConfig, errors: InputErrors, strict: bool) -> Iterator[str]:
    if source.kind == "builtin":
        yield from builtin.documents(source.path)
    elif source.kind == "text":
        yield from read_text_folder(source, errors)
    elif source.kind == "hf":
        yield from read_hf(source)
    else:
        files = source_files(source)
        if not files:
            raise UserError(f"source {source.label}: no {source.kind} files at {source.path}")
        for path in files:
            if source.kind == "parquet":
                yield from read_parquet(path, source)
            else:
                yield from read_jsonl(path, source, errors, strict)


def read_source(source: SourceConfig, errors: InputErrors, strict: bool = False) -> Iterator[str]:
    """Raw documents of ``source`` up to its caps; fails with one line when it yields none."""
    count = 0
    total_bytes = 0
    for text in _texts(source, errors, strict):
        if source.max_documents and count >= source.max_documents:
            break
        if source.max_bytes and total_bytes >= source.max_bytes:
            break
        count += 1
        total_bytes += len(text.encode("utf-8"))
        yield text
    if count == 0:
        raise UserError(f"source {source.label}: empty (no documents in {source.path})")


def describe(source: SourceConfig) -> dict:
    """The report's entry for a source: name, domain, kind, path, provenance and licence (built-in
    corpora add the package and version they were read from)."""
    provenance, licence, extra = source.provenance, source.licence, {}
    if source.kind == "builtin":
        corpus = builtin.describe(source.path)
        provenance = provenance or corpus["provenance"]
        licence = licence if licence != "unknown" else corpus["licence"]
        extra = {"package": corpus["package"], "version": corpus["version"]}
    return {
        "name": source.label,
        "domain": source.domain,
        "kind": source.kind,
        "path": source.path,
        "provenance": provenance or source.path,
        "licence": licence,
        **extra,
    }
