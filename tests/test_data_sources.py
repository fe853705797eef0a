"""Readers: every input format on small real text, and bad input exactly as the build promises."""

from __future__ import annotations

import gzip
import json

import pytest
import zstandard

from data_helpers import topic_texts, write_jsonl
from glasslab.config import ConfigError, from_dict
from glasslab.data.builtin import stdlib_modules
from glasslab.data.config import SourceConfig
from glasslab.data.sources import InputErrors, read_source
from glasslab.errors import UserError


def _read(source: SourceConfig, strict: bool = False) -> tuple[list[str], InputErrors]:
    errors = InputErrors()
    return list(read_source(source, errors, strict)), errors


def test_jsonl_plain_gz_zst_and_parquet_read_the_same_texts(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = topic_texts()[:12]
    lines = "".join(json.dumps({"body": t}) + "\n" for t in texts).encode()
    (tmp_path / "a.jsonl").write_bytes(lines)
    (tmp_path / "b.jsonl.gz").write_bytes(gzip.compress(lines))
    (tmp_path / "c.jsonl.zst").write_bytes(zstandard.ZstdCompressor().compress(lines))
    pq.write_table(pa.table({"body": texts, "n": list(range(12))}), tmp_path / "d.parquet", row_group_size=5)
    for name in ("a.jsonl", "b.jsonl.gz", "c.jsonl.zst"):
        got, errors = _read(
            SourceConfig(domain="x", kind="jsonl", path=str(tmp_path / name), text_field="body")
        )
        assert got == texts and errors.invalid_utf8 == 0, name
    got, _ = _read(
        SourceConfig(domain="x", kind="parquet", path=str(tmp_path / "d.parquet"), text_field="body")
    )
    assert got == texts
    # A folder reads every JSONL file in it in sorted order (3 formats x 12 texts).
    got, _ = _read(SourceConfig(domain="x", kind="jsonl", path=str(tmp_path), text_field="body"))
    assert got == texts * 3


def test_text_folder_and_caps(tmp_path):
    texts = topic_texts()[:5]
    for i, t in enumerate(texts):
        (tmp_path / "docs" / f"{i:02d}").mkdir(parents=True)
        (tmp_path / "docs" / f"{i:02d}" / "page.txt").write_text(t)
    got, _ = _read(SourceConfig(domain="x", kind="text", path=str(tmp_path / "docs")))
    assert got == texts
    got, _ = _read(SourceConfig(domain="x", kind="text", path=str(tmp_path / "docs"), max_documents=2))
    assert got == texts[:2]
    got, _ = _read(SourceConfig(domain="x", kind="text", path=str(tmp_path / "docs"), max_bytes=1))
    assert got == texts[:1]
    (tmp_path / "docs" / "zz.txt.gz").write_bytes(gzip.compress(texts[0].encode()))
    got, _ = _read(SourceConfig(domain="x", kind="text", path=str(tmp_path / "docs"), pattern="**/*"))
    assert got == texts + texts[:1]


def test_malformed_line_skipped_and_counted_or_fatal_under_strict(tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text('{"text": "one"}\n{"text": "two"\n\n{"text": "three"}\nnot json\n')
    got, errors = _read(SourceConfig(domain="x", kind="jsonl", path=str(path)))
    assert got == ["one", "three"]
    assert errors.malformed_lines == [f"{path}:2", f"{path}:5"] and errors.malformed_count == 2
    with pytest.raises(UserError, match=r"bad\.jsonl:2: malformed JSON"):
        _read(SourceConfig(domain="x", kind="jsonl", path=str(path)), strict=True)


def test_invalid_utf8_replaced_and_counted(tmp_path):
    path = tmp_path / "latin.jsonl"
    path.write_bytes(b'{"text": "caf\xe9 ok"}\n{"text": "fine \xc3\xa9"}\n')
    got, errors = _read(SourceConfig(domain="x", kind="jsonl", path=str(path)))
    assert got == ["caf\ufffd ok", "fine é"] and errors.invalid_utf8 == 1
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a.txt").write_bytes(b"\xff\xfebroken")
    got, errors = _read(SourceConfig(domain="x", kind="text", path=str(tmp_path / "t")))
    assert got == ["\ufffd\ufffdbroken"] and errors.invalid_utf8 == 1


def test_missing_text_field_names_field_and_keys(tmp_path):
    path = write_jsonl(tmp_path / "f.jsonl", ["hello"], field="content")
    with pytest.raises(UserError) as info:
        _read(SourceConfig(domain="x", kind="jsonl", path=str(path)))
    message = str(info.value)
    assert "'text'" in message and "content, id" in message and "f.jsonl:1" in message and "\n" not in message
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"content": ["x"]}), tmp_path / "p.parquet")
    with pytest.raises(UserError, match=r"no text column 'text' \(columns: content\)"):
        _read(SourceConfig(domain="x", kind="parquet", path=str(tmp_path / "p.parquet")))


def test_empty_and_missing_sources_fail_with_one_line(tmp_path):
    (tmp_path / "empty.jsonl").write_text("")
    with pytest.raises(UserError, match="empty"):
        _read(SourceConfig(domain="x", kind="jsonl", path=str(tmp_path / "empty.jsonl")))
    with pytest.raises(UserError, match="does not exist"):
        _read(SourceConfig(domain="x", kind="jsonl", path=str(tmp_path / "nope.jsonl")))
    with pytest.raises(ConfigError, match="source.path='nope'"):
        from_dict(SourceConfig, {"kind": "builtin", "path": "nope"})


def test_builtin_corpora_are_deterministic_capped_and_disjoint():
    code, _ = _read(SourceConfig(domain="code", kind="builtin", path="stdlib_code", max_documents=5))
    again, _ = _read(SourceConfig(domain="code", kind="builtin", path="stdlib_code", max_documents=5))
    assert code == again and len(code) == 5 and all("def " in t or "import" in t for t in code)
    prose, _ = _read(SourceConfig(domain="prose", kind="builtin", path="stdlib_prose", max_bytes=50_000))
    assert 50_000 <= sum(len(t.encode()) for t in prose) < 50_000 + max(len(t.encode()) for t in prose)
    assert all(len(t) >= 200 for t in prose)
    topics, _ = _read(SourceConfig(domain="ref", kind="builtin", path="pydoc_topics"))
    assert len(topics) > 50 and any("assignment statement" in t.lower() for t in topics)
    assert len(stdlib_modules()) > 100


def test_hf_source_never_downloads():
    import importlib.util

    source = SourceConfig(domain="x", kind="hf", path="nobody/not-cached-anywhere")
    with pytest.raises(UserError, match="'datasets' package|not in the local cache"):
        _read(source)
    if importlib.util.find_spec("datasets") is None:
        with pytest.raises(UserError, match="kind 'hf' needs the 'datasets' package"):
            _read(source)


def _jsonl_bytes(texts: list[str]) -> bytes:
    return "".join(json.dumps({"text": t}) + "\n" for t in texts).encode()


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_record(tmp_path):
    texts = topic_texts()[:3]
    (tmp_path / "bom.jsonl").write_bytes(b"\xef\xbb\xbf" + _jsonl_bytes(texts))
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.txt").write_bytes(b"\xef\xbb\xbf" + texts[0].encode())
    got, errors = _read(SourceConfig(domain="x", kind="jsonl", path=str(tmp_path / "bom.jsonl")))
    assert got == texts and errors.malformed_count == 0
    got, _ = _read(SourceConfig(domain="x", kind="text", path=str(tmp_path / "docs")))
    assert got == texts[:1]


@pytest.mark.parametrize("kind", ["gz", "zst"])
def test_a_truncated_or_corrupt_compressed_file_fails_or_is_skipped_whole(tmp_path, kind):
    texts = topic_texts()[:40]
    body = _jsonl_bytes(texts)
    packed = gzip.compress(body) if kind == "gz" else zstandard.ZstdCompressor().compress(body)
    folder = tmp_path / "src"
    folder.mkdir()
    (folder / f"a.jsonl.{kind}").write_bytes(packed + packed)  # two members/frames: read as zcat does
    got, _ = _read(SourceConfig(domain="x", kind="jsonl", path=str(folder)))
    assert got == texts * 2
    (folder / f"b.jsonl.{kind}").write_bytes(packed[: int(len(packed) * 0.7)])
    name = "gzip" if kind == "gz" else "zstd"
    with pytest.raises(UserError, match=rf"b\.jsonl\.{kind}: truncated {name} stream after \d+ records"):
        _read(SourceConfig(domain="x", kind="jsonl", path=str(folder)))
    errors = InputErrors()
    got = list(read_source(SourceConfig(domain="x", kind="jsonl", path=str(folder)), errors, skip_bad_files=True))
    assert got == texts * 2  # nothing of the damaged file got in
    assert errors.skipped_files == [{"file": str(folder / f"b.jsonl.{kind}"), "reason": f"truncated {name} stream"}]
    corrupt = bytearray(packed)
    corrupt[len(corrupt) // 2: len(corrupt) // 2 + 64] = bytes(64)
    (folder / f"b.jsonl.{kind}").write_bytes(bytes(corrupt))
    with pytest.raises(UserError, match=rf"b\.jsonl\.{kind}: corrupt {name} stream"):
        _read(SourceConfig(domain="x", kind="jsonl", path=str(folder)))


def test_records_without_a_string_text_field_follow_the_malformed_line_rule(tmp_path):
    path = tmp_path / "mixed.jsonl"
    path.write_text('{"text": "one"}\n{"id": 2}\n{"text": 3}\n[1, 2]\n{"text": "five"}\n')
    got, errors = _read(SourceConfig(domain="x", kind="jsonl", path=str(path)))
    assert got == ["one", "five"] and errors.malformed_count == 3
    assert errors.malformed_lines == [f"{path}:2", f"{path}:3", f"{path}:4"]
    assert errors.malformed_reasons == {"no text field 'text'": 1, "text field 'text' is not a string": 1,
                                        "not a JSON object": 1}
    with pytest.raises(UserError, match=r"mixed\.jsonl:2: no text field 'text' \(keys: id\); drop --strict"):
        _read(SourceConfig(domain="x", kind="jsonl", path=str(path)), strict=True)


def test_parquet_nulls_are_counted_and_a_wrong_column_type_is_a_bad_file(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"text": ["a", None, "c"]}), tmp_path / "n.parquet")
    got, errors = _read(SourceConfig(domain="x", kind="parquet", path=str(tmp_path / "n.parquet")))
    assert got == ["a", "c"] and errors.malformed_lines == [f"{tmp_path / 'n.parquet'}:row 1"]
    pq.write_table(pa.table({"text": [1, 2]}), tmp_path / "i.parquet")
    with pytest.raises(UserError, match=r"i\.parquet: text column 'text' holds int64; expected strings"):
        _read(SourceConfig(domain="x", kind="parquet", path=str(tmp_path / "i.parquet")))
    (tmp_path / "t.parquet").write_bytes((tmp_path / "n.parquet").read_bytes()[:-20])
    with pytest.raises(UserError, match=r"t\.parquet: not a readable Parquet file"):
        _read(SourceConfig(domain="x", kind="parquet", path=str(tmp_path / "t.parquet")))


def test_text_folder_binary_utf16_empty_and_invalid_utf8_files(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "a.txt").write_text("plain text")
    (docs / "b.txt").write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR")
    (docs / "c.txt").write_bytes("wide text".encode("utf-16"))
    (docs / "d.txt").write_bytes(b"")
    (docs / "e.txt").write_bytes(b"caf\xe9")
    source = SourceConfig(domain="x", kind="text", path=str(docs))
    with pytest.raises(UserError, match=r"c\.txt: encoded as UTF-16; expected UTF-8"):
        _read(source)
    errors = InputErrors()
    got = list(read_source(source, errors, skip_bad_files=True))
    assert got == ["plain text", "", "caf\ufffd"]
    assert errors.malformed_lines == [str(docs / "b.txt")] and errors.skipped_files[0]["file"] == str(docs / "c.txt")
    assert errors.empty_files == [str(docs / "d.txt")] and errors.invalid_utf8_documents == [str(docs / "e.txt")]
    with pytest.raises(UserError, match=r"b\.txt: binary file"):
        list(read_source(source, InputErrors(), strict=True, skip_bad_files=True))
    (docs / "b.txt").unlink()
    with pytest.raises(UserError, match=r"e\.txt: invalid UTF-8 at byte 3; drop --strict"):
        list(read_source(source, InputErrors(), strict=True, skip_bad_files=True))
