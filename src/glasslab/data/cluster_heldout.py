"""The held-out split by content cluster: per coarse cluster of a data map, windows of its held-out documents.

A run whose data has a map (``train.eval_map``, else ``data.map``) measures its held-out loss per cluster as
well as per domain (``eval/cluster/<c>/loss`` and ``/bpb``): which content the model learns, and which it does
not. A cluster's held-out documents (every domain's, in canonical order: domains sorted, document order) are
concatenated and cut into consecutive windows of ``seq_len + 1`` tokens, as a domain's eval shard is, up to
``max_tokens``; the loss counts the tokens the build flagged as scored (``eval.scored.npy``: held-out text
that training does not hold).

A cluster whose windows hold fewer than :data:`MIN_HELDOUT_TOKENS` scored targets is not measured alone (a
loss over a few hundred tokens moves more with the draw than with training): such clusters are merged into one
row, :data:`OTHER` (their held-out documents together, in canonical order, cut as one cluster's are), measured
when it holds enough, skipped only when even all of them together do not. The run records which clusters each
row holds and which were skipped, with their token counts (``run.json`` ``cluster_evals``), so the page says it.
Bits per byte use the cluster's own held-out text: its UTF-8 bytes (decoded) over its tokens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

MIN_HELDOUT_TOKENS = 2048
"""Fewest scored held-out targets a row's loss is measured on; clusters below it are merged into :data:`OTHER`."""
OTHER = "other"
"""The row of the clusters too small to measure alone (``eval/cluster/other/loss``)."""


@dataclass(frozen=True)
class ClusterHeldout:
    """Per evaluated row (a cluster's id, or :data:`OTHER`) its windows ``(tokens int64 (W, seq_len + 1), scored
    bool (W, seq_len + 1))`` and bytes per token; the clusters merged into :data:`OTHER` and those skipped (id →
    scored targets each had alone), the fewest targets a row needs, and the map's folder name."""

    windows: dict[str, tuple[np.ndarray, np.ndarray]]
    bytes_per_token: dict[str, float]
    merged: dict[int, int]
    skipped: dict[int, int]
    min_tokens: int
    map: str

    def record(self) -> dict:
        """What ``run.json`` records (``cluster_evals``, without the evaluations' cadence)."""
        return {"map": self.map, "min_tokens": self.min_tokens,
                "clusters": {row: int(s[:, 1:].sum()) for row, (_, s) in self.windows.items()},
                "merged": {str(c): n for c, n in self.merged.items()},
                "skipped": {str(c): n for c, n in self.skipped.items()}}


def cluster_heldout(dataset: str | Path, map_folder: str | Path, seq_len: int, max_tokens: int,
                    min_tokens: int = MIN_HELDOUT_TOKENS) -> ClusterHeldout:
    """The held-out windows of every coarse cluster of the map in ``map_folder`` (a map of ``dataset`` as it is:
    one line otherwise) with ``min_tokens`` scored targets, and of :data:`OTHER` (the others together), each up
    to ``max_tokens`` tokens (0: all)."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from glasslab.data.map import DOCUMENTS_FILE, read_map

    summary = read_map(map_folder, dataset)
    table = pq.read_table(Path(map_folder) / DOCUMENTS_FILE, columns=["domain", "split", "document", "cluster"])
    rows = table.filter(pc.equal(table["split"], "eval")).to_pydict()
    members: dict[int, list[tuple[str, int]]] = {}
    for domain, document, cluster in zip(rows["domain"], rows["document"], rows["cluster"], strict=True):
        members.setdefault(int(cluster), []).append((domain, int(document)))
    windows, bytes_per_token, small = {}, {}, {}
    for cluster in (c["id"] for c in summary["clusters"]):
        keys = sorted(members.get(cluster, []))
        cut, per_token = _cut(str(dataset), keys, seq_len, max_tokens)
        if _targets(cut) < min_tokens:
            small[cluster] = _targets(cut)
            continue
        windows[str(cluster)], bytes_per_token[str(cluster)] = cut, per_token
    keys = sorted(key for cluster in small for key in members.get(cluster, []))
    cut, per_token = _cut(str(dataset), keys, seq_len, max_tokens)
    merged = small if small and _targets(cut) >= min_tokens else {}
    if merged:
        windows[OTHER], bytes_per_token[OTHER] = cut, per_token
    skipped = {c: n for c, n in small.items() if c not in merged}
    return ClusterHeldout(windows, bytes_per_token, merged, skipped, min_tokens, Path(map_folder).name)


def _cut(dataset: str, keys: list[tuple[str, int]], seq_len: int,
         max_tokens: int) -> tuple[tuple[np.ndarray, np.ndarray], float]:
    """The windows of the documents ``keys`` (up to ``max_tokens``) and their text's bytes per token."""
    tokens, scored, text_bytes = _concatenated(dataset, keys)
    return _windows(tokens, scored, seq_len + 1, max_tokens), text_bytes / max(len(tokens), 1)


def _targets(cut: tuple[np.ndarray, np.ndarray]) -> int:
    return int(cut[1][:, 1:].sum())


def _concatenated(dataset: str, keys: list[tuple[str, int]]) -> tuple[np.ndarray, np.ndarray, int]:
    """The documents' tokens back to back, their scored flags, and the UTF-8 bytes of their text."""
    from glasslab.data.map import decode_documents, open_shards

    shards = open_shards(dataset)
    pieces = [shards[(domain, "eval")].document(index) for domain, index in keys]
    flags = []
    for domain, index in keys:
        shard = shards[(domain, "eval")]
        start, stop = (int(shard.ends[index - 1]) if index else 0), int(shard.ends[index])
        flags.append(np.ones(stop - start, bool) if shard.scored is None else np.asarray(shard.scored[start:stop]))
    if not pieces:
        return np.zeros(0, np.int64), np.zeros(0, bool), 0
    text = decode_documents(dataset, [(domain, "eval", index) for domain, index in keys], max_tokens=1 << 62)
    return (np.concatenate(pieces).astype(np.int64), np.concatenate(flags),
            sum(len(t.encode("utf-8")) for t in text))


def _windows(tokens: np.ndarray, scored: np.ndarray, window: int, max_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    count = len(tokens) // window
    if max_tokens:
        count = min(count, max(max_tokens // window, 1))
    return tokens[: count * window].reshape(count, window), scored[: count * window].reshape(count, window)
