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

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from glasslab.data import builtin, compressed
from glasslab.data.compressed import DamagedFile, DamagedStream
from glasslab.data.config import SourceConfig
from glasslab.data.inputs import ReadTask, plan_read_tasks, source_root
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

    def merge(self, other: dict) -> None:
        """Add another reader's problems (``to_dict`` form), in order; a file skipped twice is listed once."""
        for name in ("malformed_lines", "invalid_utf8_documents"):
            getattr(self, name).extend(other[name][: MAX_LISTED - len(getattr(self, name))])
        self.malformed_count += other["malformed_count"]
        for kind, count in other["malformed_reasons"].items():
            self.malformed_reasons[kind] = self.malformed_reasons.get(kind, 0) + count
        self.invalid_utf8 += other["invalid_utf8"]
        self.skipped_files += [f for f in other["skipped_files"] if f not in self.skipped_files]
        self.empty_files += [f for f in other["empty_files"] if f not in self.empty_files]

    def skipped(self) -> int:
        """Records and files left out so far (a source compares this before and after it is read)."""
        return self.malformed_count + len(self.skipped_files)


def decode_counted(data: bytes, errors: InputErrors, where: object, strict: bool = False) -> str:
    """UTF-8 text of ``data``; invalid sequences become U+FFFD and the document is listed at ``where`` (a
    string, or an object whose text is made only then) (under ``strict`` they fail)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        if strict:
            raise UserError(f"{where}: invalid UTF-8 at byte {exc.start}; drop --strict to replace it "
                            "with U+FFFD and count it") from None
        errors.invalid_utf8 += 1
        if len(errors.invalid_utf8_documents) < MAX_LISTED:
            errors.invalid_utf8_documents.append(str(where))
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


Reading = Iterator[tuple[str, str, int]]
"""What a reader yields: ``(text, reference, position)`` per document — the file (relative to the source's
folder), module or dataset it came from, and its line (JSONL, from 1), row (Parquet, from 0) or record
(hf, from 0); 0 for a whole file or module. A task of a JSONL file's later byte range counts lines from
its own start; the build adds the lines before it."""


class _LineBase:
    """The lines of a file before a byte offset, counted only if an error message needs them."""

    def __init__(self, path: Path, offset: int) -> None:
        self.path, self.offset, self._value = path, offset, None if offset else 0

    def __int__(self) -> int:
        if self._value is None:
            count, left = 0, self.offset
            with open(self.path, "rb") as handle:
                while left:
                    chunk = handle.read(min(left, compressed.CHUNK_BYTES))
                    count, left = count + chunk.count(b"\n"), left - len(chunk)
            self._value = count
        return self._value


def _range_lines(path: Path, start: int, stop: int) -> Iterator[bytes]:
    """The lines of a plain file that start in ``[start, stop)`` (``stop`` -1: to the end); a UTF-8
    byte-order mark at the file's start is not part of its first line."""
    with open(path, "rb") as handle:
        if start:
            handle.seek(start - 1)
            if handle.read(1) != b"\n":
                handle.readline()  # the line under way belongs to the previous range
        elif handle.read(len(compressed.UTF8_BOM)) != compressed.UTF8_BOM:
            handle.seek(0)
        position = handle.tell()
        while stop < 0 or position < stop:
            line = handle.readline()
            if not line:
                return
            position += len(line)
            yield line.rstrip(b"\n")


def count_line_starts(path: Path, start: int, stop: int) -> int:
    """Lines of a plain file that start in ``[start, stop)`` (what :func:`read_jsonl` numbers in that range),
    so the build can number the next range's lines from where this one ends."""
    count, position = int(start == 0), max(start, 1) - 1
    with open(path, "rb") as handle:
        handle.seek(position)
        while position < stop - 1:
            chunk = handle.read(min(compressed.CHUNK_BYTES, stop - 1 - position))
            if not chunk:
                break
            count, position = count + chunk.count(b"\n"), position + len(chunk)
    return count


def read_jsonl(path: Path, source: SourceConfig, errors: InputErrors, strict: bool, start: int = 0,
               stop: int = -1) -> Iterator[tuple[str, int]]:
    """``(text, line)`` of one JSONL file, or of the lines starting in its byte range ``[start, stop)``
    (a plain file only; lines counted from the range's start); malformed records are skipped and listed
    as ``file:line``."""
    field_name = source.text_field
    records = 0
    blank = True
    base = _LineBase(path, start)
    if start or stop >= 0:
        compressed.check(path)  # a UTF-16 file is damaged whichever range is read
        lines = _range_lines(path, start, stop)
    else:
        lines = compressed.lines(path)
    try:
        for line_number, raw in enumerate(lines, start=1):
            if not raw.strip():
                continue
            blank = False
            where = _Where(path, base, line_number)
            line = decode_counted(raw, errors, where, strict)
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                errors.skip_record(str(where), "malformed JSON", exc.msg, strict)
                continue
            if not isinstance(record, dict):
                errors.skip_record(str(where), "not a JSON object", type(record).__name__, strict)
            elif field_name not in record:
                errors.skip_record(str(where), f"no text field {field_name!r}", f"keys: {', '.join(sorted(record))}",
                                   strict)
            elif not isinstance(record[field_name], str):
                errors.skip_record(str(where), f"text field {field_name!r} is not a string",
                                   type(record[field_name]).__name__, strict)
            else:
                records += 1
                yield record[field_name], line_number
    except DamagedStream as damaged:
        raise DamagedFile(path, f"{damaged.reason} after {records} records") from None
    if blank and not start:
        errors.empty_files.append(str(path))


class _Where:
    """``file:line`` of a record, its line made absolute only when the text is asked for."""

    def __init__(self, path: Path, base: _LineBase, line: int) -> None:
        self.path, self.base, self.line = path, base, line

    def __str__(self) -> str:
        return f"{self.path}:{int(self.base) + self.line}"


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


def read_parquet(path: Path, source: SourceConfig, errors: InputErrors, strict: bool, start: int = 0,
                 stop: int = -1, row_base: int = 0) -> Iterator[tuple[str, int]]:
    """``(text, row)`` of one Parquet file (or of its row groups ``[start, stop)``, whose first row is
    ``row_base``), a record batch at a time; a null text is a malformed record."""
    parquet = open_parquet(path, source)
    if parquet.metadata.num_rows == 0:
        errors.empty_files.append(str(path))
        return
    groups = list(range(parquet.metadata.num_row_groups))[start : None if stop < 0 else stop]
    row = row_base
    for batch in parquet.iter_batches(columns=[source.text_field], batch_size=1024, row_groups=groups):
        for text in batch.column(0).to_pylist():
            if text is None:
                errors.skip_record(f"{path}:row {row}", f"null text in column {source.text_field!r}", strict=strict)
            else:
                yield text, row
            row += 1


def read_text_files(files: tuple[str, ...], errors: InputErrors, strict: bool, skip_bad_files: bool
                    ) -> Iterator[tuple[str, Path]]:
    """One document per file, with its path. Local text beyond the built-in corpora (system
    documentation, notes) comes in this way, and only when a config asks for it. ``.gz``/``.zst`` files
    (e.g. under /usr/share/doc) are unpacked; a file with NUL bytes is not text and is skipped as a
    malformed record."""
    for name in files:
        path = Path(name)
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
        yield decode_counted(data, errors, str(path), strict), path


def read_hf(source: SourceConfig, errors: InputErrors, strict: bool) -> Iterator[tuple[str, int]]:
    """``(text, record index)`` of a Hugging Face dataset already in the local cache (never downloads)."""
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
            yield text, index
        else:
            errors.skip_record(f"{source.path}[{index}]", f"no string text field {source.text_field!r}",
                               f"keys: {', '.join(sorted(record))}", strict)


def read_task(task: ReadTask, source: SourceConfig, errors: InputErrors, strict: bool = False,
              skip_bad_files: bool = False) -> Reading:
    """The raw documents of one read task, in order, as ``(text, reference, position)``.

    ``strict``: a malformed record or invalid UTF-8 fails instead of being skipped (or replaced) and
    counted. ``skip_bad_files``: a damaged file is left out whole instead of failing the build.
    """
    if source.kind == "builtin":
        for name, path in zip(task.names, task.files, strict=True):
            text = builtin.unit_document(source.path, builtin.Unit(name, path, 0))
            if text is not None:
                yield text, name, 0
        return
    if source.kind == "hf":
        for text, index in read_hf(source, errors, strict):
            yield text, f"{source.path}:{source.split}", index
        return
    root = source_root(source)
    if source.kind == "text":
        for text, path in read_text_files(task.files, errors, strict, skip_bad_files):
            yield text, _relative(path, root), 0
        return
    path = Path(task.files[0])
    if skip_bad_files:
        try:  # checked whole first: a file found damaged halfway would already have given texts
            open_parquet(path, source) if source.kind == "parquet" else compressed.check(path)
        except DamagedFile as damaged:
            errors.skip_file(damaged)
            return
    reference = _relative(path, root)
    if source.kind == "parquet":
        for text, row in read_parquet(path, source, errors, strict, task.start, task.stop, task.row_base):
            yield text, reference, row
    else:
        for text, line in read_jsonl(path, source, errors, strict, task.start, task.stop):
            yield text, reference, line


def _relative(path: Path, root: Path) -> str:
    try:
        return path.relative_to(root).as_posix()
    except ValueError:
        return path.as_posix()


def read_source(source: SourceConfig, errors: InputErrors, strict: bool = False,
                skip_bad_files: bool = False) -> Iterator[str]:
    """Raw documents of ``source`` up to its caps, through its read tasks in order (what a build reads of
    it, in one process); fails with one line when it yields none."""
    count = 0
    total_bytes = 0
    skipped_before = errors.skipped()
    tasks = plan_read_tasks((source,))
    for task in tasks:
        for text, _, _ in read_task(task, source, errors, strict, skip_bad_files):
            if (source.max_documents and count >= source.max_documents) or (
                    source.max_bytes and total_bytes >= source.max_bytes):
                break
            count += 1
            total_bytes += len(text.encode("utf-8", "surrogatepass"))
            yield text
    if count == 0:
        raise empty_source(source, errors, errors.skipped() - skipped_before)


def empty_source(source: SourceConfig, errors: InputErrors, skipped: int) -> UserError:
    """The one-line error for a source that gave no document (saying what was skipped, and the last)."""
    why = f" ({skipped} skipped; the last: {errors.last_problem})" if skipped else ""
    return UserError(f"source {source.label}: empty (no documents in {source.path}){why}")


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
