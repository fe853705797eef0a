"""A data map's summary: per coarse cluster its documents, tokens and shares, terms, representatives and samples.

``summarize`` turns every document's assignment (``map.py``) into ``documents.parquet`` (one row per
document) and the content of ``map.json``. Per cluster:

- ``documents``, ``tokens`` and ``share`` (of the training tokens); ``heldout_documents``, ``heldout_tokens``
  and ``heldout_share`` (of the held-out tokens): a cluster the eval split barely holds is one whose loss
  the evals barely measure;
- ``sources``: per source, its training tokens in the cluster, their share of the cluster
  (``share_of_cluster``) and of the source (``share_of_source``);
- ``terms``: the top :data:`TOP_TERMS` words (English stop words left out) by class-based TF-IDF (a word's
  frequency in the cluster times ``log(1 + average words per cluster / its frequency in all clusters)``),
  counted on a uniform sample of
  up to :data:`TERM_DOCUMENTS` of the cluster's training documents; ``name``: its first three terms;
- ``representatives``: the :data:`REPRESENTATIVES` training documents nearest its centroid, and ``samples``:
  :data:`SAMPLES` drawn uniformly (seeded) — each with an excerpt and its provenance (source, file, line);
- ``xy``: its centroid's position on the two main axes of all coarse centroids (the page's picture).
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np

TOP_TERMS = 10
TERM_DOCUMENTS = 200
REPRESENTATIVES = 5
SAMPLES = 5
EXCERPT_TOKENS = 160
EXCERPT_CHARS = 400
_WORD = re.compile(r"[A-Za-z_][A-Za-z_0-9]+")


def summarize(cfg, out: Path, counts, assigned: dict, clusters) -> dict:
    """Write ``documents.parquet`` into ``out`` and return map.json's content (see the module docstring)."""
    from glasslab.data.map import DOCUMENTS_FILE, FORMAT

    table = _document_table(Path(cfg.data.data_path), counts, assigned)
    _write_documents(out / DOCUMENTS_FILE, table)
    train = table["split"] == "train"
    counts_by_cluster = _counts(table, train, len(clusters.coarse))
    rng = np.random.default_rng(cfg.seed)
    xy = _plane(clusters.coarse)
    summaries = [_cluster(cfg, table, train, c, counts_by_cluster, rng) | {"xy": xy[c]}
                 for c in range(len(clusters.coarse))]
    _add_terms(cfg.data.data_path, summaries)
    return {"format": FORMAT, "manifest_hash": cfg.data.data_manifest,
            "settings": {"k": cfg.k, "fine_k": len(clusters.fine), "embedder": cfg.embedder,
                         "dims": cfg.dims if cfg.embedder == "tfidf" else int(clusters.fine.shape[1]),
                         "sample": cfg.sample, "min_share": cfg.min_share, "seed": cfg.seed},
            "k": len(clusters.coarse), "fine_k": len(clusters.fine), "documents": int(train.sum()),
            "heldout_documents": int((~train).sum()), "tokens": int(counts_by_cluster["tokens"].sum()),
            "heldout_tokens": int(counts_by_cluster["heldout_tokens"].sum()),
            "clusters": summaries}


def _document_table(dataset: Path, counts, assigned: dict) -> dict[str, np.ndarray]:
    """Column arrays over every document in canonical order: key, tokens, source and assignment."""
    from glasslab.data.map import open_shards

    shards = open_shards(str(dataset))
    source_of = _source_names(dataset)
    columns: dict[str, list[np.ndarray]] = {name: [] for name in ("domain", "split", "document", "tokens", "source")}
    for domain, split, n in counts:
        columns["domain"].append(np.full(n, domain, dtype=object))
        columns["split"].append(np.full(n, split, dtype=object))
        columns["document"].append(np.arange(n, dtype=np.int64))
        columns["tokens"].append(shards[(domain, split)].lengths.astype(np.int64))
        columns["source"].append(source_of(domain, split, n))
    table = {name: np.concatenate(parts) if parts else np.zeros(0) for name, parts in columns.items()}
    rows = np.concatenate([assigned[(d, s)] for d, s, _ in counts])
    table.update({name: rows[name] for name in rows.dtype.names})
    return table


def _source_names(dataset: Path):
    """``(domain, split, n) -> each of the shard's n documents' source name``: from provenance (else its domain)."""
    from glasslab.data.provenance import ProvenanceIndex
    from glasslab.data.shards import read_manifest

    if "provenance" not in read_manifest(dataset):
        return lambda domain, split, n: np.full(n, domain, dtype=object)
    return ProvenanceIndex(dataset).source_names


def _write_documents(path: Path, table: dict[str, np.ndarray]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from glasslab.layout import atomic_path

    names = ("domain", "split", "document", "tokens", "source", "fine", "cluster", "fine_distance", "distance")
    arrays = [pa.array(table[n].tolist()).dictionary_encode() if table[n].dtype == object else pa.array(table[n])
              for n in names]
    with atomic_path(path) as tmp:
        pq.write_table(pa.table(dict(zip(names, arrays, strict=True))), tmp)


def _counts(table: dict[str, np.ndarray], train: np.ndarray, k: int) -> dict[str, np.ndarray]:
    """Per cluster (one pass over the documents each): documents, tokens and summed distance of the training
    split, documents and tokens of the held-out split, and training tokens by source (``by_source``: K × S)."""
    cluster, tokens = table["cluster"].astype(np.int64), table["tokens"].astype(np.float64)
    names, source = np.unique(table["source"].astype(str), return_inverse=True)
    per = lambda mask, weights=None: np.bincount(cluster[mask], None if weights is None else weights[mask], k)
    by_source = np.bincount(cluster[train] * len(names) + source[train], tokens[train], k * len(names))
    return {"documents": per(train), "tokens": per(train, tokens), "distance": per(train, table["distance"]),
            "heldout_documents": per(~train), "heldout_tokens": per(~train, tokens),
            "by_source": by_source.reshape(k, len(names)), "sources": names}


def _cluster(cfg, table, train: np.ndarray, c: int, counts: dict, rng) -> dict:
    documents, tokens = int(counts["documents"][c]), int(counts["tokens"][c])
    heldout_tokens = int(counts["heldout_tokens"][c])
    of_source, here = counts["by_source"].sum(axis=0), counts["by_source"][c]
    sources = {str(name): {"tokens": int(here[s]), "share_of_cluster": here[s] / max(tokens, 1),
                           "share_of_source": here[s] / max(of_source[s], 1)}
               for s, name in enumerate(counts["sources"]) if here[s]}
    members = np.flatnonzero(train & (table["cluster"] == c))
    nearest_first = members[np.argsort(table["distance"][members], kind="stable")[:REPRESENTATIVES]]
    drawn = np.sort(rng.choice(members, size=min(TERM_DOCUMENTS, len(members)), replace=False))
    return {"id": c, "documents": documents, "tokens": tokens, "share": tokens / max(counts["tokens"].sum(), 1),
            "heldout_documents": int(counts["heldout_documents"][c]), "heldout_tokens": heldout_tokens,
            "heldout_share": heldout_tokens / max(counts["heldout_tokens"].sum(), 1),
            "mean_distance": float(counts["distance"][c] / documents) if documents else None,
            "sources": sources,
            "representatives": _documents(cfg.data.data_path, table, nearest_first),
            "samples": _documents(cfg.data.data_path, table, drawn[:SAMPLES]),
            "_term_rows": [(table["domain"][i], "train", int(table["document"][i])) for i in drawn]}


def _documents(dataset: str, table, rows: np.ndarray) -> list[dict]:
    """Each row's key, distance, excerpt and provenance."""
    from glasslab.data.map import decode_documents
    from glasslab.data.provenance import document_provenance
    from glasslab.data.shards import read_manifest

    keys = [(str(table["domain"][i]), str(table["split"][i]), int(table["document"][i])) for i in rows]
    texts = decode_documents(dataset, keys, EXCERPT_TOKENS)
    has_provenance = "provenance" in read_manifest(dataset)
    return [{"domain": d, "split": s, "document": n, "distance": round(float(table["distance"][i]), 4),
             "excerpt": text[:EXCERPT_CHARS],
             "provenance": document_provenance(dataset, d, s, n) if has_provenance else {"domain": d}}
            for (d, s, n), i, text in zip(keys, rows, texts, strict=True)]


def _add_terms(dataset: str, summaries: list[dict]) -> None:
    """Set each cluster's ``terms`` and ``name`` by class-based TF-IDF over its sampled documents' words."""
    from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

    from glasslab.data.map import decode_documents

    counts = [Counter(w for text in decode_documents(dataset, s.pop("_term_rows"))
                      for w in map(str.lower, _WORD.findall(text)) if w not in ENGLISH_STOP_WORDS)
              for s in summaries]
    everywhere = sum(counts, Counter())
    average = sum(everywhere.values()) / max(len(counts), 1)
    for summary, words in zip(summaries, counts, strict=True):
        size = max(sum(words.values()), 1)
        scored = sorted(((n / size) * np.log(1 + average / everywhere[w]), w) for w, n in words.items())
        top = [(w, round(float(score), 6)) for score, w in reversed(scored[-TOP_TERMS:])]
        summary["terms"] = top
        summary["name"] = " · ".join(w for w, _ in top[:3]) or f"cluster {summary['id']}"


def _plane(centroids: np.ndarray) -> list[list[float]]:
    """Each centroid's coordinates on the two main axes of all of them (signs fixed), each axis scaled to [-1, 1]."""
    centred = centroids - centroids.mean(axis=0)
    _, _, axes = np.linalg.svd(centred.astype(np.float64), full_matrices=False)
    axes = axes[:2] * np.sign(axes[:2, :1] + 1e-30)
    points = centred @ axes.T
    points = np.pad(points, ((0, 0), (0, 2 - points.shape[1])))
    scale = np.where(np.abs(points).max(axis=0) > 0, np.abs(points).max(axis=0), 1.0)
    return [[round(float(x), 5), round(float(y), 5)] for x, y in points / scale]
