"""``data.open_dataset``: a dataset's manifest read once, its hash the one ``manifest_hash`` gives, bad
folders one line; and no module outside ``data/`` reads or hashes a dataset manifest itself."""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from glasslab.data.handle import dataset_trained_on, find_dataset, open_dataset
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


def test_find_dataset_is_none_without_a_dataset_manifest_and_strict_with_one(tmp_path):
    (tmp_path / "empty").mkdir()
    assert find_dataset(tmp_path / "empty") is None
    assert find_dataset(_dataset(tmp_path / "conversations", format="glasslab-conversations/1")) is None
    assert find_dataset(_dataset(tmp_path / "data")) == open_dataset(tmp_path / "data")
    with pytest.raises(UserError, match="glasslab-dataset/99"):
        find_dataset(_dataset(tmp_path / "future", format="glasslab-dataset/99"))


MANIFEST_READ = re.compile(
    r"(read_json|file_sha256|json\.loads|\.json|read_text|read_bytes|open)\([^)\n]*MANIFEST_FILE")
"""A call that reads or hashes a file at ``... / MANIFEST_FILE`` (``manifest.json``)."""
OTHER_MANIFESTS = {
    ("layout.py", "(path / MANIFEST_FILE)"),  # a checkpoint's files and checksums
    ("train/checkpoint.py", "(path / MANIFEST_FILE)"),  # a checkpoint's
    ("model/load.py", "file_sha256(path / MANIFEST_FILE)"),  # the checkpoint a model is loaded from
    ("posttrain/records.py", "(folder / MANIFEST_FILE)"),  # a conversations or pairs folder's
}
"""Reads of ``manifest.json`` files that are not a dataset's: (module, what the line reads)."""


def test_no_module_outside_data_reads_a_dataset_manifest_file():
    """The path reads too (``read_json(folder / MANIFEST_FILE)``), not only the readers' imports: the scan that
    looked only for imports missed ``reproduce/published.py`` reading the manifest it publishes."""
    found = set()
    for path in SRC.rglob("*.py"):
        if path.parent.name == "data":
            continue
        module = str(path.relative_to(SRC))
        for line in path.read_text(encoding="utf-8").splitlines():
            if MANIFEST_READ.search(line):
                known = [what for where, what in OTHER_MANIFESTS if where == module and what in line]
                found.add((module, known[0] if known else line.strip()))
    assert found - OTHER_MANIFESTS == set(), f"dataset manifest read without data.open_dataset: {found}"


def test_the_scan_sees_a_manifest_read_by_path():
    assert MANIFEST_READ.search('data_step["manifest"] = read_json(folder.parent / dataset / MANIFEST_FILE)')
    assert MANIFEST_READ.search("built_by['manifest'] = lab.json(folder / MANIFEST_FILE)")
    assert not MANIFEST_READ.search("if (folder / MANIFEST_FILE).is_file():")


def test_dataset_of_a_model_is_the_first_folder_holding_its_dataset(tmp_path):
    """A model names where its dataset may be and the hash an export recorded; the handle says which folder it is."""
    other, ours = _dataset(tmp_path / "other", vocab_size=301), _dataset(tmp_path / "ours")
    folders = (tmp_path / "gone", other, ours)
    assert dataset_trained_on(SimpleNamespace(dataset_folders=folders, dataset_manifest_hash="")) == other
    digest = open_dataset(ours).manifest_hash
    assert dataset_trained_on(SimpleNamespace(dataset_folders=folders, dataset_manifest_hash=digest)) == ours
    assert dataset_trained_on(SimpleNamespace(dataset_folders=folders[:2], dataset_manifest_hash=digest)) is None
