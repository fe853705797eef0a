"""One dataset handle: a built dataset's manifest read once, with what the rest of glasslab asks of it.

:func:`open_dataset` reads ``manifest.json`` once (one read of its bytes: the sha256 and the parsed
manifest come from the same bytes, so they cannot disagree) and checks its format; the handle then gives
the manifest's hash, vocabulary size, tokenizer file, domains (with their shards) and the path, without
reading the folder again.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from glasslab.data.shards import FORMAT, checked_manifest
from glasslab.layout import MANIFEST_FILE, UnreadableFile

DATASET_FORMAT_PREFIX = FORMAT.rsplit("/", 1)[0] + "/"
"""What every dataset manifest's ``format`` starts with (``glasslab-dataset/``), whatever its version."""


@dataclass(frozen=True, eq=False)
class DatasetHandle:
    """A built dataset: its folder, its manifest and the manifest's sha256 (read together, once). Two handles
    are equal (and hash alike, so a cache may key on one) when they name the same folder and manifest hash."""

    path: Path
    manifest: dict[str, Any]
    manifest_hash: str

    def __eq__(self, other: object) -> bool:
        return isinstance(other, DatasetHandle) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())

    def _key(self) -> tuple[str, str]:
        return str(self.path), self.manifest_hash

    @property
    def vocab_size(self) -> int:
        return int(self.manifest["vocab_size"])

    @property
    def domains(self) -> dict[str, Any]:
        """Each domain's shards: ``{domain: {split: entry}}`` as the manifest lists them."""
        return self.manifest["domains"]

    @property
    def tokenizer_file(self) -> Path:
        return self.path / self.manifest["tokenizer"]["file"]


def open_dataset(ref: str | Path) -> DatasetHandle:
    """The dataset built in folder ``ref``; a one-line error when it is not a finished, readable dataset."""
    path = Path(ref)
    try:
        data = (path / MANIFEST_FILE).read_bytes()
    except FileNotFoundError:
        data = None
    return _handle(path, data, None if data is None else _parsed(path / MANIFEST_FILE, data))


def _handle(path: Path, data: bytes | None, manifest: dict | None) -> DatasetHandle:
    return DatasetHandle(path, checked_manifest(path, manifest), hashlib.sha256(data or b"").hexdigest())


def as_dataset(ref: str | Path | DatasetHandle) -> DatasetHandle:
    """``ref`` itself when it is a handle already, else :func:`open_dataset` of it: for a function that a caller
    holding the handle should not make read the manifest again."""
    return ref if isinstance(ref, DatasetHandle) else open_dataset(ref)


def find_dataset(ref: str | Path) -> DatasetHandle | None:
    """The dataset built in folder ``ref``, or None where the folder holds no dataset's ``manifest.json`` (none
    at all, or another kind's: a conversations or pairs folder's), for a reader that only looks (a published run
    whose dataset was not kept, the data page of any report). A dataset manifest that is unreadable or of a
    format this glasslab does not read is still a one-line error."""
    path = Path(ref)
    try:
        data = (path / MANIFEST_FILE).read_bytes()
    except FileNotFoundError:
        return None
    manifest = _parsed(path / MANIFEST_FILE, data)
    if not (isinstance(manifest, dict) and str(manifest.get("format", "")).startswith(DATASET_FORMAT_PREFIX)):
        return None
    return _handle(path, data, manifest)


class TrainedOn(Protocol):
    """Where a model's dataset may be (``model.load.ModelSource`` is one): the folders, in order, and the sha256
    its manifest must have (empty: any dataset there)."""

    dataset_folders: tuple[Path, ...]
    dataset_manifest_hash: str


def dataset_trained_on(model: TrainedOn) -> Path | None:
    """The folder of the dataset ``model`` trained on: the first of its ``dataset_folders`` that holds a dataset
    with its ``dataset_manifest_hash`` (when it has one), or None when none does (not at hand)."""
    digest = model.dataset_manifest_hash
    for folder in model.dataset_folders:
        found = find_dataset(folder)
        if found is not None and (not digest or found.manifest_hash == digest):
            return Path(folder)
    return None


def _parsed(manifest_file: Path, data: bytes) -> dict:
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UnreadableFile(f"{manifest_file}: not valid JSON ({exc}); expected the file as glasslab "
                             "wrote it") from None
