"""Readers: turn every configured source into a stream of raw documents, one at a time.

JSONL (plain, ``.gz``, ``.zst``), Parquet, folders of text files, the built-in corpora and locally
cached Hugging Face datasets. Nothing here holds a whole source in memory. Problems in the input are
handled as the build promises, and every one is counted in :class:`InputErrors` (the build's
``build.json`` and its console summary):

- a malformed record (a JSONL line that is not JSON, not an object, or lacks a string text field; a
  null text in Parquet; a text file with NUL bytes) is skipped and listed as ``file:line`` (Parquet:
  ``file:row N``), or fails the build under ``strict``;
- invalid UTF-8 is replaced with U+FFFD and the document listed (fails under ``strict``); a leading
  UTF-8 byte-order mark is not part of the text;
- a damaged file (a truncated or corrupt ``.gz``/``.zst``, an unreadable Parquet file or one without
  the text column, a UTF-16 file) fails the build, or with ``skip_bad_files`` is checked whole before
  it is read and skipped whole;
- an empty file contributes nothing and is listed; a source that yields no document fails, saying
  what was skipped.
"""

from __future__ import annotations

import glob
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from glasslab.data import builtin, compressed
from glasslab.data.compressed import DamagedFile, DamagedStream
from glasslab.data.config import SourceConfig
from glasslab.errors import UserError

MAX_LISTED = 1000
"""Problems beyond this many of a kind are counted but not listed one by one."""


@dataclass
class InputErrors:
    """Problems met while reading, reported in ``build.json`` and ``report.json`` under ``errors``."""

    malformed_lines: list[str] = field(default_factory=list)
    """Where each skipped malformed record was: ``file:line``, ``file:row N`` or a text file."""
    malformed_count: int = 0
    malformed_reasons: dict[str, int] = field(default_factory=dict)
    """Skipped records by kind of problem (``malformed JSON``, ``no text field 'text'``, ...)."""
    invalid_utf8: int = 0
    """Documents in which invalid UTF-8 was replaced with U+FFFD."""
    invalid_utf8_documents: list[str] = field(default_factory=list)
    skipped_files: list[dict[str, str]] = field(default_factory=list)
    """Damaged files left out whole under ``skip_bad_files``: ``{"file", "reason"}``."""
    empty_files: list[str] = field(default_factory=list)
    last_problem: str = ""
    """The latest skipped record or file with its reason, for a source that ends up empty."""

    def skip_record(self, where: str, kind: str, detail: str = "", strict: bool = False) -> None:
        """Count (or, under ``strict``, refuse) the malformed record at ``where``."""
        reason = f"{kind} ({detail})" if detail else kind
        if strict:
            raise UserError(f"{where}: {reason}; drop --strict to skip and count such records")
        self.malformed_count += 1
        self.malformed_reasons[kind] = self.malformed_reasons.get(kind, 0) + 1
        if len(self.malformed_lines) < MAX_LISTED:
            self.malformed_lines.append(where)
        self.last_problem = f"{where}: {reason}"

    def skip_file(self, damaged: DamagedFile) -> None:
        self.skipped_files.append({"file": str(damaged.path), "reason": damaged.reason})
        self.last_problem = f"{damaged.path}: {damaged.reason}"

    def to_dict(self) -> dict:
        return {
            "malformed_lines": list(self.malformed_lines),
            "malformed_count": self.malformed_count,
            "malformed_reasons": dict(self.malformed_reasons),
            "invalid_utf8": self.invalid_utf8,
            "invalid_utf8_documents": list(self.invalid_utf8_documents),
            "skipped_files": list(self.skipped_files),
            "empty_files": list(self.empty_files),
        }

    def skipped(self) -> int:
        """Records and files left out so far (a source compares this before and after it is read)."""
        return self.malformed_count + len(self.skipped_files)


def decode_counted(data: bytes, errors: InputErrors, where: str, strict: bool = False) -> str:
    """UTF-8 text of ``data``; invalid sequences become U+FFFD and the document is listed at ``where``
    (under ``strict`` they fail)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if strict:
            raise UserError(f"{where}: invalid UTF-8 at byte {exc.start}; drop --strict to replace it "
                            "with U+FFFD and count it") from None
        errors.invalid_utf8 += 1
        if len(errors.invalid_utf8_documents) < MAX_LISTED:
            errors.invalid_utf8_documents.append(where)
        return data.decode("utf-8", errors="replace")


def describe_errors(errors: dict, listed_in: str) -> list[str]:
    """Console lines for what a build skipped, replaced or found empty (``errors`` as in ``build.json``),
    each saying how many and where the list is; none when the input was clean."""
    lines = []
    if errors.get("malformed_count"):
        kinds = ", ".join(f"{n} {kind}" for kind, n in errors.get("malformed_reasons", {}).items())
        lines.append(f"skipped {errors['malformed_count']} malformed record(s) ({kinds}); "
                     f"listed in {listed_in} under errors.malformed_lines")
    if errors.get("skipped_files"):
        files = errors["skipped_files"]
        named = "; ".join(f"{f['file']}: {f['reason']}" for f in files[:3]) + ("; ..." if len(files) > 3 else "")
        lines.append(f"skipped {len(files)} damaged file(s) whole ({named}); "
                     f"listed in {listed_in} under errors.skipped_files")
    if errors.get("invalid_utf8"):
        lines.append(f"replaced invalid UTF-8 with U+FFFD in {errors['invalid_utf8']} document(s); "
                     f"listed in {listed_in} under errors.invalid_utf8_documents")
    if errors.get("empty_files"):
        lines.append(f"{len(errors['empty_files'])} empty file(s) gave no documents; "
                     f"listed in {listed_in} under errors.empty_files")
    return lines


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


def read_jsonl(path: Path, source: SourceConfig, errors: InputErrors, strict: bool) -> Iterator[str]:
    """Texts of one JSONL file (streamed); malformed records are skipped and listed as ``file:line``."""
    field_name = source.text_field
    records = 0
    blank = True
    try:
        for line_number, raw in enumerate(compressed.lines(path), start=1):
            if not raw.strip():
                continue
            blank = False
            where = f"{path}:{line_number}"
            line = decode_counted(raw, errors, where, strict)
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                errors.skip_record(where, "malformed JSON", exc.msg, strict)
                continue
            if not isinstance(record, dict):
                errors.skip_record(where, "not a JSON object", type(record).__name__, strict)
            elif field_name not in record:
                errors.skip_record(where, f"no text field {field_name!r}", f"keys: {', '.join(sorted(record))}",
                                   strict)
            elif not isinstance(record[field_name], str):
                errors.skip_record(where, f"text field {field_name!r} is not a string",
                                   type(record[field_name]).__name__, strict)
            else:
                records += 1
                yield record[field_name]
    except DamagedStream as damaged:
        raise DamagedFile(path, f"{damaged.reason} after {records} records") from None
    if blank:
        errors.empty_files.append(str(path))


def open_parquet(path: Path, source: SourceConfig):
    """The ``pyarrow.parquet.ParquetFile`` at ``path``, checked to hold a string text column."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        parquet = pq.ParquetFile(path)
    except Exception as exc:  # pyarrow raises several types for a file that is not Parquet
        raise DamagedFile(path, f"not a readable Parquet file ({type(exc).__name__}: {exc})".split("\n")[0]) from None
    schema = parquet.schema_arrow
    if source.text_field not in schema.names:
        raise DamagedFile(path, f"no text column {source.text_field!r} (columns: {', '.join(schema.names)}); "
                                "set the source's text_field")
    column_type = schema.field(source.text_field).type
    if not (pa.types.is_string(column_type) or pa.types.is_large_string(column_type)):
        raise DamagedFile(path, f"text column {source.text_field!r} holds {column_type}; expected strings")
    return parquet


def read_parquet(path: Path, source: SourceConfig, errors: InputErrors, strict: bool) -> Iterator[str]:
    """Texts of one Parquet file, read a record batch at a time; a null text is a malformed record."""
    parquet = open_parquet(path, source)
    if parquet.metadata.num_rows == 0:
        errors.empty_files.append(str(path))
        return
    row = 0
    for batch in parquet.iter_batches(columns=[source.text_field], batch_size=1024):
        for text in batch.column(0).to_pylist():
            if text is None:
                errors.skip_record(f"{path}:row {row}", f"null text in column {source.text_field!r}", strict=strict)
            else:
                yield text
            row += 1


def read_text_folder(source: SourceConfig, errors: InputErrors, strict: bool, skip_bad_files: bool
                     ) -> Iterator[str]:
    """One document per file under the folder matching ``source.pattern``, in sorted path order.

    Local text beyond the built-in corpora (system documentation, notes) comes in this way, and
    only when a config asks for it. ``.gz``/``.zst`` files (e.g. under /usr/share/doc) are unpacked;
    a file with NUL bytes is not text and is skipped as a malformed record.
    """
    folder = Path(source.path)
    if not folder.is_dir():
        raise UserError(f"source {source.label}: {source.path} is not a folder")
    for path in sorted(p for p in folder.glob(source.pattern) if p.is_file()):
        try:
            data = compressed.read_all(path)
        except DamagedFile as damaged:
            if not skip_bad_files:
                raise
            errors.skip_file(damaged)
            continue
        if not data.strip():
            errors.empty_files.append(str(path))
        if b"\x00" in data:
            errors.skip_record(str(path), "binary file (NUL bytes)", strict=strict)
            continue
        yield decode_counted(data, errors, str(path), strict)


def read_hf(source: SourceConfig, errors: InputErrors, strict: bool) -> Iterator[str]:
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
    for index, record in enumerate(dataset):
        text = record.get(source.text_field)
        if isinstance(text, str):
            yield text
        else:
            errors.skip_record(f"{source.path}[{index}]", f"no string text field {source.text_field!r}",
                               f"keys: {', '.join(sorted(record))}", strict)


def _texts(source: SourceConfig, errors: InputErrors, strict: bool, skip_bad_files: bool) -> Iterator[str]:
    if source.kind == "builtin":
        yield from builtin.documents(source.path)
    elif source.kind == "text":
        yield from read_text_folder(source, errors, strict, skip_bad_files)
    elif source.kind == "hf":
        yield from read_hf(source, errors, strict)
    else:
        files = source_files(source)
        if not files:
            raise UserError(f"source {source.label}: no {source.kind} files at {source.path}")
        for path in files:
            if skip_bad_files:
                try:  # checked whole first: a file found damaged halfway would already have given texts
                    open_parquet(path, source) if source.kind == "parquet" else compressed.check(path)
                except DamagedFile as damaged:
                    errors.skip_file(damaged)
                    continue
            if source.kind == "parquet":
                yield from read_parquet(path, source, errors, strict)
            else:
                yield from read_jsonl(path, source, errors, strict)


def read_source(source: SourceConfig, errors: InputErrors, strict: bool = False,
                skip_bad_files: bool = False) -> Iterator[str]:
    """Raw documents of ``source`` up to its caps; fails with one line when it yields none.

    ``strict``: a malformed record or invalid UTF-8 fails instead of being skipped (or replaced) and
    counted. ``skip_bad_files``: a damaged file is left out whole instead of failing the build.
    """
    count = 0
    total_bytes = 0
    skipped_before = errors.skipped()
    for text in _texts(source, errors, strict, skip_bad_files):
        if source.max_documents and count >= source.max_documents:
            break
        if source.max_bytes and total_bytes >= source.max_bytes:
            break
        count += 1
        total_bytes += len(text.encode("utf-8"))
        yield text
    if count == 0:
        skipped = errors.skipped() - skipped_before
        why = f" ({skipped} skipped; the last: {errors.last_problem})" if skipped else ""
        raise UserError(f"source {source.label}: empty (no documents in {source.path}){why}")


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
