"""``data.open_dataset``: a dataset's manifest read once, its hash the one ``manifest_hash`` gives, bad
folders one line; and no module outside ``data/`` reads or hashes a dataset manifest itself."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from glasslab.data.handle import open_dataset
from glasslab.data.shards import FORMAT, manifest_hash
from glasslab.errors import UserError

SRC = Path(__file__).resolve().parent.parent / "src" / "glasslab"



def _dataset(folder: Path, **manifest) -> Path:
    folder.mkdir()
    body = {"format": FORMAT, "vocab_size": 300, "tokenizer": {"file": "tokenizer/tokenizer.json"},
            "domains": {"web": {"train": {"tokens": 10}, "eval": {"tokens": 2}}}} | manifest
    (folder / "manifest.json").write_text(json.dumps(body), encoding="utf-8")
    return folder


def test_open_dataset_reads_manifest_and_hash_once(tmp_path):
    folder = _dataset(tmp_path / "ds")
    handle = open_dataset(folder)
    assert handle.manifest_hash == manifest_hash(folder)
    assert handle.vocab_size == 300 and list(handle.domains) == ["web"]
    assert handle.tokenizer_file == folder / "tokenizer" / "tokenizer.json"


def test_open_dataset_refuses_missing_and_foreign_folders_in_one_line(tmp_path):
    with pytest.raises(UserError, match="not a built dataset"):
        open_dataset(tmp_path / "nothing")
    with pytest.raises(UserError, match="dataset format 'glasslab-dataset/99'"):
        open_dataset(_dataset(tmp_path / "future", format="glasslab-dataset/99"))
    (tmp_path / "torn").mkdir()
    (tmp_path / "torn" / "manifest.json").write_text("{", encoding="utf-8")
    with pytest.raises(UserError, match="not valid JSON"):
        open_dataset(tmp_path / "torn")


def test_no_module_outside_data_reads_a_dataset_manifest_itself():
    reader = re.compile(r"\b(read_manifest|manifest_hash)\b.*import|import.*\b(read_manifest|manifest_hash)\b")
    reading = {str(p.relative_to(SRC)) for p in SRC.rglob("*.py")
               if p.parent.name != "data" and reader.search(p.read_text(encoding="utf-8"))}
    assert reading == set(), f"read a dataset manifest without data.open_dataset: {sorted(reading)}"
