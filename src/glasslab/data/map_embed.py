"""The data map's default embedder, fitted on the corpus itself: hashed TF-IDF → randomized SVD → unit length.

No downloaded weights and nothing beyond scikit-learn: words (identifiers included: ``[A-Za-z_]\\w+``,
lower-cased) are hashed into :data:`HASH_FEATURES` buckets, term counts are damped (``1 + log tf``) and
weighted by the inverse document frequency of a sample of the training documents, each row is scaled to
unit length, and a randomized SVD fitted on the same sample projects it to ``dims`` dimensions (latent
semantic analysis); the projection is scaled to unit length again, so a dot product is a cosine. Hashing
keeps the embedder a fixed-size array (no vocabulary to agree on), so every task embeds its documents on
its own and two workers give the same vectors as one.

The fitted embedder is one file, ``embedder.npz`` (``idf``: float32 per bucket; ``components``: float32
``dims × buckets``), in the map step's folder.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from glasslab.data.map_cluster import unit_rows

HASH_FEATURES = 1 << 16
"""Hash buckets: 2**16 keeps the projection at 64 MB for 256 dimensions; collisions among the ~10^5 distinct
words of a code corpus cost little once the SVD mixes buckets."""
WORD_PATTERN = r"(?u)\b[A-Za-z_][A-Za-z_0-9]+\b"
EMBEDDER_FILE = "embedder.npz"


def _hasher():
    from sklearn.feature_extraction.text import HashingVectorizer

    return HashingVectorizer(n_features=HASH_FEATURES, alternate_sign=False, norm=None,
                             token_pattern=WORD_PATTERN, lowercase=True, dtype=np.float32)


def _damped_counts(texts: list[str]):
    counts = _hasher().transform(texts).tocsr()
    counts.data = 1.0 + np.log(counts.data)
    return counts


@dataclass(frozen=True)
class TfidfEmbedder:
    """A fitted embedder: ``embed(texts) -> float32 (len(texts), dims)`` rows of unit length."""

    idf: np.ndarray
    components: np.ndarray

    @property
    def dims(self) -> int:
        return int(self.components.shape[0])

    def embed(self, texts: list[str]) -> np.ndarray:
        return self._project(_weighted(_damped_counts(texts), self.idf))

    def _project(self, weighted) -> np.ndarray:
        return unit_rows(np.asarray(weighted @ self.components.T, dtype=np.float32))

    def save(self, folder: Path) -> None:
        np.savez(folder / EMBEDDER_FILE, idf=self.idf, components=self.components)

    @classmethod
    def load(cls, folder: Path) -> TfidfEmbedder:
        with np.load(folder / EMBEDDER_FILE) as saved:
            return cls(idf=saved["idf"], components=saved["components"])


def _weighted(counts, idf: np.ndarray):
    from sklearn.preprocessing import normalize

    return normalize(counts.multiply(idf[None, :]).tocsr())


def fit_embedder(texts: list[str], dims: int, seed: int) -> tuple[TfidfEmbedder, np.ndarray]:
    """Fit the IDF and a ``dims``-dimensional randomized SVD (at most ``len(texts) - 1``) on ``texts``; returns the
    embedder and ``texts`` embedded by it (the same floats as ``embed(texts)``, without hashing them again)."""
    from sklearn.decomposition import TruncatedSVD

    from glasslab.data.map_cluster import one_thread

    counts = _damped_counts(texts)
    document_frequency = np.bincount(counts.indices, minlength=HASH_FEATURES)
    idf = (np.log((1.0 + len(texts)) / (1.0 + document_frequency)) + 1.0).astype(np.float32)
    # Only the buckets the sample uses enter the SVD (the others are zero columns, which change nothing but
    # its cost: a few hundred documents use a third of the buckets); their components are zero.
    used = np.flatnonzero(document_frequency)
    weighted = _weighted(counts, idf)
    svd = TruncatedSVD(n_components=max(1, min(dims, len(texts) - 1, len(used) - 1)), algorithm="randomized",
                       n_iter=5, random_state=seed)
    with one_thread():  # the randomized SVD's QR and products: the same floats whatever the cores
        svd.fit(weighted[:, used])
    components = np.zeros((svd.components_.shape[0], HASH_FEATURES), np.float32)
    components[:, used] = svd.components_
    embedder = TfidfEmbedder(idf=idf, components=components)
    return embedder, embedder._project(weighted)
