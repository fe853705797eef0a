"""The tokens a run read from each content cluster of a data map, recomputed exactly from its draws.

Not estimated from shares: the run's last attempt is replayed from its recorded loader start
(``batches.attempt_loader``) to its last trained step — draws only, no tokens read — and each stream's
cursor then says which of its windows were read (``Loader.tokens_read``: the per-epoch document and window
orders); every token of those windows is counted under its document's coarse cluster. Windows a rollback
skipped were read (their update was not applied) and are counted. The data page shows the result per run.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np

from glasslab.data.buckets import map_clusters
from glasslab.track import RunReader


def tokens_per_cluster(run_dir: str | Path, map_dir: str | Path) -> dict | None:
    """``{"run", "step", "total", "tokens": [per cluster id]}`` of the run in ``run_dir`` against the map in
    ``map_dir`` (a map of the dataset it trained on: one line otherwise); None for a run that recorded no
    batches yet (or not by the pretraining loader)."""
    from glasslab.data.batches import attempt_loader

    run_dir = Path(run_dir)
    with RunReader(run_dir) as reader:
        hashes = reader.batch_hashes()
        starts = reader.loader_starts()
    if not hashes or not starts:
        return None
    last_step = max(s for s, _, _ in hashes)
    attempt = max(a for s, a, _ in hashes if s == last_step)
    if "cursors" not in starts[attempt][1]["loader"]:
        return None
    loader, _, _ = attempt_loader(run_dir, starts[attempt], attempt)
    loader.skip(last_step - starts[attempt][0])
    clusters = map_clusters(replace(loader.cfg, map=str(Path(map_dir).resolve())))
    k = len(clusters.summary["clusters"])
    per_cluster = np.zeros(k, np.int64)
    for domain, read in loader.tokens_read().items():
        per_cluster += np.bincount(clusters.cluster_of[domain], weights=read, minlength=k).astype(np.int64)
    return {"run": run_dir.name, "step": last_step, "total": int(per_cluster.sum()),
            "tokens": per_cluster.tolist()}
