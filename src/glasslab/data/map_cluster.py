"""The data map's clusters: spherical k-means at a fine K on a sample, coarsened to K with a minimum population.

Embeddings are unit vectors, so k-means on them (scikit-learn's Lloyd) with its centroids scaled back to
unit length is spherical k-means up to the last update: nearest centroid by Euclidean distance is largest
cosine. The fine centroids are then clustered again into K (k-means weighted by each fine cluster's
population), and a coarse cluster holding less than ``min_share`` of the sample is merged into the coarse
cluster whose centroid is nearest, smallest first, so every domain of the map holds at least that share
(as far as the sample says). Coarse clusters are numbered by population, largest first, ties by the
smallest fine cluster in them: the numbering is a function of the data and the seed alone.

scikit-learn's k-means is computed in fixed chunks, so its result does not depend on the number of
OpenMP threads; BLAS is pinned to one thread around it anyway (``threadpoolctl``), as float sums of a
matrix product may be ordered differently by a different number of threads.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

MAX_FINE_K = 4096
DOCS_PER_FINE_CLUSTER = 20
"""The default fine K: a fine cluster per this many sampled documents (up to :data:`MAX_FINE_K`)."""


@dataclass(frozen=True)
class Clusters:
    """Unit-length fine centroids (``fine_k × dims``), the coarse cluster of each, and unit coarse centroids."""

    fine: np.ndarray
    fine_to_coarse: np.ndarray
    coarse: np.ndarray


def default_fine_k(sample_size: int, k: int) -> int:
    """A fine cluster per :data:`DOCS_PER_FINE_CLUSTER` sampled documents, at least ``k``, at most the sample."""
    return int(min(sample_size, max(k, min(MAX_FINE_K, sample_size // DOCS_PER_FINE_CLUSTER))))


def one_thread():
    """A context in which BLAS and OpenMP use one thread (the map's float results do not move with cores)."""
    from threadpoolctl import threadpool_limits

    return threadpool_limits(1)


def cluster(sample: np.ndarray, k: int, fine_k: int, min_share: float, seed: int) -> Clusters:
    """Fine spherical k-means of ``sample`` (unit rows) into ``fine_k``, coarsened to at most ``k`` clusters."""
    with one_thread():
        fine, fine_labels = _spherical_kmeans(sample, fine_k, seed, np.ones(len(sample)))
        population = np.bincount(fine_labels, minlength=fine_k).astype(np.float64)
        coarse, fine_to_coarse = _spherical_kmeans(fine, k, seed, np.maximum(population, 1e-9))
    fine_to_coarse = _merge_small(fine_to_coarse, coarse, population, min_share * len(sample))
    return _renumber(fine, fine_to_coarse, population)


def _spherical_kmeans(points: np.ndarray, k: int, seed: int, weight: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    from sklearn.cluster import KMeans

    model = KMeans(n_clusters=k, n_init=1, max_iter=100, random_state=seed, init="k-means++")
    labels = model.fit_predict(points, sample_weight=weight)
    return unit_rows(model.cluster_centers_.astype(np.float32)), labels.astype(np.int64)


def _merge_small(fine_to_coarse: np.ndarray, coarse: np.ndarray, population: np.ndarray,
                 floor: float) -> np.ndarray:
    """Merge coarse clusters below ``floor`` sampled documents into their nearest coarse neighbour, smallest first."""
    fine_to_coarse = fine_to_coarse.copy()
    alive = set(range(len(coarse)))
    while len(alive) > 1:
        counts = np.bincount(fine_to_coarse, weights=population, minlength=len(coarse))
        smallest = min(alive, key=lambda c: (counts[c], c))
        if counts[smallest] >= floor:
            break
        others = sorted(alive - {smallest})
        target = others[int(np.argmax(coarse[others] @ coarse[smallest]))]
        fine_to_coarse[fine_to_coarse == smallest] = target
        alive.discard(smallest)
    return fine_to_coarse


def _renumber(fine: np.ndarray, fine_to_coarse: np.ndarray, population: np.ndarray) -> Clusters:
    """Coarse ids 0.. by population (largest first), centroids as the population-weighted mean of their fine ones."""
    used = np.unique(fine_to_coarse)
    counts = {int(c): population[fine_to_coarse == c].sum() for c in used}
    first_fine = {int(c): int(np.flatnonzero(fine_to_coarse == c)[0]) for c in used}
    order = sorted(counts, key=lambda c: (-counts[c], first_fine[c]))
    new_id = {old: new for new, old in enumerate(order)}
    mapped = np.array([new_id[int(c)] for c in fine_to_coarse], dtype=np.int64)
    weights = np.maximum(population, 1e-9)[:, None] * fine
    coarse = np.stack([weights[mapped == c].sum(axis=0) for c in range(len(order))])
    return Clusters(fine=fine, fine_to_coarse=mapped, coarse=unit_rows(coarse.astype(np.float32)))


def nearest(vectors: np.ndarray, centroids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """For unit ``vectors``: the index of the most similar unit centroid and the cosine distance to it."""
    with one_thread():
        similarity = vectors @ centroids.T
    best = np.argmax(similarity, axis=1)
    return best, (1.0 - similarity[np.arange(len(vectors)), best]).astype(np.float32)


def unit_rows(vectors: np.ndarray) -> np.ndarray:
    return vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
