"""The data map's embedders that are not fitted on the corpus: a lab model, or a local sentence-transformers folder.

``--embedder model:RUN[@STEP]`` embeds each document with a lab model's mean-pooled final hidden states (the
data as the model sees it; ``evals/map_model.py``, which may load models: this part may not).
``--embedder FOLDER`` loads a sentence-transformers model saved in ``FOLDER`` (``pip install -e .[embed]``);
nothing is downloaded (``local_files_only``). A folder that is not such a model is one line.

Either is named in the map's config by a name (``model:RUN@STEP``, ``st:<folder name>``), where it lies
(``embedder_path``, not hashed) and a hash of its weights (``embedder_hash``), so a retrained model makes a
new map. The map step hands a loader (``spec -> Embedder``) to its assign tasks, which call it once per
process; a loader is a module-level function, so it travels to worker processes by reference.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from glasslab.errors import UserError

SENTENCE_TRANSFORMERS = "st:"
MODEL = "model:"
ST_MARKERS = ("modules.json", "config_sentence_transformers.json")
"""A sentence-transformers folder holds one of these (what ``SentenceTransformer.save`` writes)."""


def is_sentence_transformers(folder: str | Path) -> bool:
    return any((Path(folder) / name).is_file() for name in ST_MARKERS)


def folder_hash(folder: str | Path) -> str:
    """sha256 over a folder's files (relative names and contents, sorted by name)."""
    from glasslab.layout import file_sha256

    digest = hashlib.sha256()
    root = Path(folder)
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(f"{path.relative_to(root).as_posix()}\0{file_sha256(path)}\n".encode())
    return digest.hexdigest()


class SentenceTransformerEmbedder:
    """``embed(texts) -> float32 (n, dims)`` unit rows from a local sentence-transformers model, on the CPU."""

    def __init__(self, folder: str | Path) -> None:
        if not is_sentence_transformers(folder):
            raise UserError(f"--embedder {folder}: not a sentence-transformers model (no {' or '.join(ST_MARKERS)})")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise UserError("--embedder FOLDER needs sentence-transformers: pip install -e '.[embed]'") from exc
        self.model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)

    def embed(self, texts: list[str]) -> np.ndarray:
        import torch

        from glasslab.data.map_cluster import unit_rows

        threads = torch.get_num_threads()
        torch.set_num_threads(1)  # the same floats whatever the cores (as the tfidf embedder's BLAS)
        try:
            vectors = self.model.encode(texts, batch_size=16, convert_to_numpy=True, show_progress_bar=False)
        finally:
            torch.set_num_threads(threads)
        return unit_rows(np.asarray(vectors, dtype=np.float32))


def load_sentence_transformer(cfg) -> SentenceTransformerEmbedder:
    """A map config's sentence-transformers embedder (``cfg.embedder_path``)."""
    return SentenceTransformerEmbedder(cfg.embedder_path)
