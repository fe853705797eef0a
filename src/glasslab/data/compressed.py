"""Input files as streams of bytes that notice damage: truncated or corrupt gzip and zstd, UTF-16.

Python's gzip module raises ``EOFError`` mid-iteration on a truncated file, and zstandard's stream
reader stops quietly at the end of a cut frame, so a damaged file looks like a shorter one. Here
every compressed member or frame must reach its end marker; one that does not raises
:class:`DamagedFile`, which a reader turns into a failed build (or a skipped file when the user
asked to tolerate bad files). Decompression streams in chunks: nothing holds a whole file.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from pathlib import Path

from glasslab.errors import UserError

CHUNK_BYTES = 1 << 20
UTF8_BOM = b"\xef\xbb\xbf"
UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")
GZIP_MAGIC = b"\x1f\x8b"


class DamagedFile(UserError):
    """An input file that cannot be read whole; ``reason`` says what is wrong (one line)."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(f"{path}: {reason}; fix or remove the file, or pass --skip-bad-files to build without it")
        self.path = path
        self.reason = reason


class DamagedStream(DamagedFile):
    """A compressed stream that is truncated or corrupt (as opposed to a whole file of the wrong kind)."""


def compression(path: Path) -> str | None:
    """``gzip``, ``zstd`` or None, from the file name (``.gz``, ``.zst``)."""
    if path.name.endswith(".gz"):
        return "gzip"
    if path.name.endswith(".zst"):
        return "zstd"
    return None


def chunks(path: Path) -> Iterator[bytes]:
    """The file's bytes, decompressed when its name says so; raises :class:`DamagedFile` at damage.

    A stream that ends inside a member (gzip) or frame (zstd) is truncated; several concatenated
    members or frames are read one after another, as ``zcat`` and ``zstdcat`` do.
    """
    kind = compression(path)
    with open(path, "rb") as handle:
        raw = iter(lambda: handle.read(CHUNK_BYTES), b"")
        if kind is None:
            yield from raw
        elif kind == "gzip":
            yield from _gunzip(path, raw)
        else:
            yield from _unzstd(path, raw)


def _gunzip(path: Path, raw: Iterator[bytes]) -> Iterator[bytes]:
    member, started = zlib.decompressobj(wbits=31), False
    for data in raw:
        while data:
            if member.eof:
                if not data.startswith(GZIP_MAGIC) and not data.strip(b"\x00"):
                    data = b""  # zero padding after the last member (tape and block devices add it)
                    continue
                member, started = zlib.decompressobj(wbits=31), False
            started = True
            try:
                yield member.decompress(data)
            except zlib.error as exc:
                raise DamagedStream(path, f"corrupt gzip stream ({exc})") from None
            data = member.unused_data if member.eof else b""
    if started and not member.eof:
        raise DamagedStream(path, "truncated gzip stream")


def _unzstd(path: Path, raw: Iterator[bytes]) -> Iterator[bytes]:
    import zstandard

    decompressor = zstandard.ZstdDecompressor()
    frame, started = decompressor.decompressobj(), False
    for data in raw:
        while data:
            if frame.eof:
                frame = decompressor.decompressobj()
            started = True
            try:
                yield frame.decompress(data)
            except zstandard.ZstdError as exc:
                raise DamagedStream(path, f"corrupt zstd stream ({exc})") from None
            data = frame.unused_data if frame.eof else b""
    if started and not frame.eof:
        raise DamagedStream(path, "truncated zstd stream")


def text_chunks(path: Path) -> Iterator[bytes]:
    """:func:`chunks` of a text file: a leading UTF-8 byte-order mark removed (as ``utf-8-sig``
    reads it); a UTF-16 file (byte-order mark, then NUL bytes) is :class:`DamagedFile`."""
    head = b""
    stream = chunks(path)
    for chunk in stream:
        head += chunk
        if len(head) >= 64:
            break
    if head.startswith(UTF8_BOM):
        head = head[len(UTF8_BOM):]
    elif head.startswith(UTF16_BOMS) and b"\x00" in head[2:64]:
        raise DamagedFile(path, "encoded as UTF-16; expected UTF-8 (convert it, e.g. iconv -f UTF-16 -t UTF-8)")
    if head:
        yield head
    yield from stream


def lines(path: Path) -> Iterator[bytes]:
    """The lines of a text file (without their newline), from :func:`text_chunks`."""
    pending = b""
    for chunk in text_chunks(path):
        pending += chunk
        *complete, pending = pending.split(b"\n")
        yield from complete
    if pending:
        yield pending


def read_all(path: Path) -> bytes:
    """A whole text file (one document), from :func:`text_chunks`."""
    return b"".join(text_chunks(path))


def check(path: Path) -> None:
    """Raise :class:`DamagedFile` if any of the file is damaged: a compressed file is read whole once,
    a plain one only at its start (the one place it can be wrong before it is parsed)."""
    stream = text_chunks(path)
    if compression(path) is None:
        next(stream, None)
        return
    for _ in stream:
        pass
