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
from typing import Any

from glasslab.data.shards import checked_manifest
from glasslab.layout import MANIFEST_FILE, UnreadableFile


@dataclass(frozen=True)
class DatasetHandle:
    """A built dataset: its folder, its manifest and the manifest's sha256 (read together, once)."""

    path: Path
    manifest: dict[str, Any]
    manifest_hash: str

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
    manifest = checked_manifest(path, None if data is None else _parsed(path / MANIFEST_FILE, data))
    return DatasetHandle(path, manifest, hashlib.sha256(data).hexdigest())


def _parsed(manifest_file: Path, data: bytes) -> dict:
    try:
        return json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise UnreadableFile(f"{manifest_file}: not valid JSON ({exc}); expected the file as glasslab "
                             "wrote it") from None
