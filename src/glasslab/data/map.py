"""The data map: what is *in* a dataset — every document embedded, clustered into ~K content domains, summarised.

``glasslab data map DATASET`` is a lab step of its own (``<lab>/map-<hash8>/``, keyed by the dataset's
manifest hash and the map's settings; cached, and a killed map resumes). Its phases:

1. **sample** ``sample`` training documents (seeded, from every domain) and decode them with the dataset's
   tokenizer (the first :data:`EMBED_TOKENS` tokens of each);
2. **fit the embedder** on that sample (``map_embed.py``: hashed TF-IDF → randomized SVD, unit length) and
   **train the centroids** (``map_cluster.py``: spherical k-means at the fine K, coarsened to K);
   ``embedder.npz`` and ``centroids.npz`` are written, so a resumed map does not fit them again;
3. **assign** every document, training and held-out, as tasks of :data:`CHUNK_DOCUMENTS` documents on the
   data build's runner (local processes or Ray, ``runner.py``): embed, nearest fine centroid, its coarse
   cluster, the cosine distances. Chunks are cut in canonical order (domains sorted, ``train`` then
   ``eval``, document order) whatever the number of workers, so 1 or 8 workers give the same map;
4. **summarise** (``map_summary.py``) into ``documents.parquet`` and ``map.json`` (written last).

Files (format :data:`FORMAT`, see docs/formats.md): ``map.json`` (settings, manifest hash, per cluster its
terms, counts, shares, representatives, samples and 2-D position), ``documents.parquet`` (one row per
document, keyed by ``domain``, ``split``, ``document``: ``tokens``, ``fine``, ``cluster``, ``fine_distance``,
``distance``), ``embedder.npz``, ``centroids.npz`` (``fine``, ``fine_to_coarse``, ``coarse``).
A map answers for the dataset whose manifest it names: :func:`read_map` refuses another (a rebuilt one).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from glasslab.config import UNVERSIONED, VERSIONED_WHEN_SET, inline
from glasslab.data.map_cluster import Clusters, cluster, default_fine_k, nearest
from glasslab.data.map_embed import TfidfEmbedder, fit_embedder
from glasslab.data.reference import DatasetRef
from glasslab.data.runner import Task
from glasslab.errors import UserError
from glasslab.layout import MANIFEST_FILE, atomic_path, read_json, remove, write_json_atomic

if TYPE_CHECKING:
    from glasslab.lab import Step

FORMAT = "glasslab-data-map/1"
MAP_FILE = "map.json"
DOCUMENTS_FILE = "documents.parquet"
CENTROIDS_FILE = "centroids.npz"
STEP_NAME = "map"
EMBEDDERS = ("tfidf", "model:RUN[@STEP]", "a sentence-transformers folder")
CHUNK_DOCUMENTS = 1024
EMBED_TOKENS = 4096
"""Tokens of a document the embedder reads (its start): a 2 MB file says what it is about early on."""
DATASET_KEYS = {"data_path": "dataset", "data_manifest": "manifest_hash"}
"""The keys a map's ``step.json`` held its dataset's folder and manifest hash under before they became a
:class:`DatasetRef` (the map's folder name is a hash of them)."""


@dataclass(frozen=True)
class MapConfig:
    """The map step's config: the dataset (by reference) and how to map it."""

    data: DatasetRef = field(metadata=inline(keys=DATASET_KEYS, when_set=("data_from",)))
    """The dataset: a data build step's output when the map is a step of the same DAG (the demo's: its hero
    measures its held-out loss per cluster of it), else a folder named by its manifest's hash. Written and hashed
    as the three fields it replaced: ``dataset`` (the folder, not hashed), ``manifest_hash`` (empty for a build
    step's output: that step's hash is the identity) and ``data_from`` (hashed only when set)."""
    k: int = 40
    """Coarse clusters (content domains), at most; small ones are merged, so the map may hold fewer."""
    fine_k: int = 0
    """Fine clusters; 0: one per 20 sampled documents, at least ``k``, at most 4,096."""
    embedder: str = "tfidf"
    """``tfidf`` (fitted on the corpus), ``model:RUN@STEP`` (a lab model's hidden states) or ``st:<name>`` (a local
    sentence-transformers folder): ``data/map_pretrained.py``."""
    embedder_path: str = field(default="", metadata=UNVERSIONED)
    """Where a pretrained embedder lies (a checkpoint reference, a folder): not its identity, its hash is."""
    embedder_hash: str = field(default="", metadata=VERSIONED_WHEN_SET)
    """sha256 of a pretrained embedder's weights (a checkpoint's manifest, a folder's files)."""
    dims: int = 256
    """Embedding dimensions of the tfidf embedder (at most the sample's size minus one); others have their own."""
    sample: int = 20_000
    """Training documents the embedder and the centroids are fitted on (all of them when fewer)."""
    min_share: float = 0.01
    """Smallest coarse cluster, as a share of the sampled documents."""
    seed: int = 0
    num_workers: int = field(default=0, metadata=UNVERSIONED)
    backend: str = field(default="", metadata=UNVERSIONED)
    progress: bool = field(default=True, metadata=UNVERSIONED)


def map_plan(dataset_dir: str | Path, function=None, **settings) -> Step:
    """The map step of ``dataset_dir`` with ``settings`` (MapConfig fields; an ``embedder`` that is a folder is
    taken as a sentence-transformers model); bad settings are one line. ``function``: the step function, when
    not :func:`map_step` (a map by a lab model: ``evals/map_model.py``)."""
    from glasslab.data.map_pretrained import SENTENCE_TRANSFORMERS, folder_hash, is_sentence_transformers
    from glasslab.lab import Step

    path = Path(dataset_dir).resolve()
    embedder = settings.get("embedder", "tfidf")
    if Path(embedder).is_dir():
        if not is_sentence_transformers(embedder):
            raise UserError(f"--embedder {embedder}: a folder that is not a model (a sentence-transformers folder "
                            "holds modules.json); expected one of " + ", ".join(EMBEDDERS))
        folder = Path(embedder).resolve()
        settings |= {"embedder": SENTENCE_TRANSFORMERS + folder.name, "embedder_path": str(folder),
                     "embedder_hash": folder_hash(folder)}
    cfg = MapConfig(DatasetRef.of_folder(str(path)), **settings)
    check_settings(cfg, shard_counts(path))
    return Step(STEP_NAME, function or map_step, cfg)


def map_after(data: Step, **settings) -> Step:
    """The map step of the dataset the data build step ``data`` makes, planned before it is built: it depends
    on ``data``, and its settings are checked against the dataset when it runs."""
    from glasslab.lab import Step

    return Step(STEP_NAME, map_step, MapConfig(DatasetRef.of_build(data), **settings))


def shard_counts(dataset_dir: Path) -> list[tuple[str, str, int]]:
    """``(domain, split, documents)`` of every shard in canonical order (domains sorted, train then eval)."""
    from glasslab.data.shards import SPLITS, read_manifest

    domains = read_manifest(dataset_dir)["domains"]
    return [(d, s, int(domains[d][s]["documents"])) for d in sorted(domains) for s in SPLITS]


def check_settings(cfg: MapConfig, counts: list[tuple[str, str, int]]) -> None:
    """One line for what cannot make a map: an unknown embedder, K above the documents, an empty domain."""
    pretrained = cfg.embedder.startswith(("model:", "st:"))
    if cfg.embedder != "tfidf" and not (pretrained and cfg.embedder_path):
        raise UserError(f"--embedder {cfg.embedder!r}: unknown; expected one of {', '.join(EMBEDDERS)}")
    for domain, split, documents in counts:
        if split == "train" and documents == 0:
            raise UserError(f"{cfg.data.location}: domain {domain!r} has no training documents; nothing of it to map "
                            "(build the dataset without it)")
    train = sum(n for _, split, n in counts if split == "train")
    if not 2 <= cfg.k <= train:
        raise UserError(f"--k {cfg.k}: expected 2..{train} (the dataset's training documents)")
    if cfg.fine_k and not cfg.k <= cfg.fine_k <= min(train, cfg.sample):
        raise UserError(f"--fine-k {cfg.fine_k}: expected {cfg.k}..{min(train, cfg.sample)} (--k .. the sample)")
    if cfg.dims < 2 or cfg.sample < cfg.k or not 0 <= cfg.min_share < 1:
        raise UserError(f"dims={cfg.dims} sample={cfg.sample} min_share={cfg.min_share}: expected dims >= 2, "
                        "sample >= k, 0 <= min_share < 1")


def map_step(ctx, pretrained=None) -> dict:
    """Lab step function: map ``ctx.config.data``'s dataset into ``ctx.output_dir``; returns map.json's headline.
    ``pretrained``: the loader (``MapConfig -> embedder``) of an embedder that is not fitted here (a lab model's,
    handed in by ``evals/map_model.py``); a sentence-transformers folder's is this part's own."""
    from glasslab.config import from_dict
    from glasslab.data.map_pretrained import SENTENCE_TRANSFORMERS, load_sentence_transformer
    from glasslab.data.map_summary import summarize  # it reads documents through this module

    cfg = ctx.config if isinstance(ctx.config, MapConfig) else from_dict(MapConfig, ctx.config)
    dataset = cfg.data.open()  # a folder rebuilt since the map was planned: one line
    cfg = replace(cfg, data=DatasetRef.of_folder(str(dataset.path), dataset))  # its tasks read the folder itself
    if cfg.embedder.startswith(SENTENCE_TRANSFORMERS):
        pretrained = load_sentence_transformer
    elif cfg.embedder != "tfidf" and pretrained is None:
        raise UserError(f"embedder {cfg.embedder!r}: mapped by the step glasslab data map plans for it "
                        "(evals.map_model), not by data.map.map_step")
    counts = shard_counts(dataset.path)
    check_settings(cfg, counts)
    out = Path(ctx.output_dir)
    clock = PhaseClock()
    clusters = clock.phase("fit", _fitted, cfg, out, counts, pretrained)
    assigned = clock.phase("assign", _assign_all, cfg, out, counts, pretrained)
    summary = clock.phase("summarize", summarize, cfg, out, counts, assigned, clusters)
    summary.update(clock.record())
    write_json_atomic(out / MAP_FILE, summary)
    remove(out / "work")
    return {"clusters": len(summary["clusters"]), "documents": summary["documents"], "fine_k": summary["fine_k"]}


class PhaseClock:
    """Wall and this process's CPU seconds of each phase of a map (the CPU of 1 worker is all of it)."""

    def __init__(self) -> None:
        self.wall: dict[str, float] = {}
        self.cpu: dict[str, float] = {}

    def phase(self, name: str, fn, *args):
        wall, cpu = time.perf_counter(), time.process_time()
        value = fn(*args)
        self.wall[name] = round(time.perf_counter() - wall, 3)
        self.cpu[name] = round(time.process_time() - cpu, 3)
        return value

    def record(self) -> dict:
        return {"seconds": self.wall, "process_cpu_seconds": self.cpu}


def _fitted(cfg: MapConfig, out: Path, counts, pretrained) -> Clusters:
    """The embedder and centroids in ``out`` (fitted on the sample now, unless a killed run wrote them); a
    pretrained embedder is not fitted, only the centroids on its vectors of the sample."""
    if not (out / CENTROIDS_FILE).is_file():
        texts = decode_documents(cfg.data.data_path, sample_keys(counts, cfg.sample, cfg.seed))
        if pretrained is None:
            embedder, vectors = fit_embedder(texts, cfg.dims, cfg.seed)
            embedder.save(out)
        else:
            vectors = _embedder(cfg, pretrained).embed(texts)
        fine_k = cfg.fine_k or default_fine_k(len(texts), cfg.k)
        clusters = cluster(vectors, cfg.k, fine_k, cfg.min_share, cfg.seed)
        with atomic_path(out / CENTROIDS_FILE) as tmp, open(tmp, "wb") as handle:
            np.savez(handle, fine=clusters.fine, fine_to_coarse=clusters.fine_to_coarse, coarse=clusters.coarse)
    return load_clusters(out)


def load_clusters(folder: Path) -> Clusters:
    with np.load(Path(folder) / CENTROIDS_FILE) as saved:
        return Clusters(fine=saved["fine"], fine_to_coarse=saved["fine_to_coarse"], coarse=saved["coarse"])


def sample_keys(counts, size: int, seed: int) -> list[tuple[str, str, int]]:
    """``size`` training documents drawn uniformly without replacement (seeded), in canonical order."""
    train = [(domain, n) for domain, split, n in counts if split == "train"]
    total = sum(n for _, n in train)
    picks = np.sort(np.random.default_rng(seed).choice(total, size=min(size, total), replace=False))
    starts = np.cumsum([0] + [n for _, n in train])
    shard = np.searchsorted(starts, picks, side="right") - 1
    return [(train[s][0], "train", int(p - starts[s])) for s, p in zip(shard, picks, strict=True)]


def decode_documents(dataset: str, keys: list[tuple[str, str, int]], max_tokens: int = EMBED_TOKENS) -> list[str]:
    """The text of each ``(domain, split, index)`` (its first ``max_tokens`` tokens), by the dataset's tokenizer."""
    shards, tokenizer = _opened(dataset, _stamp(Path(dataset) / MANIFEST_FILE))
    ids = [shards[(domain, split)].document(index)[:max_tokens].tolist() for domain, split, index in keys]
    return tokenizer.decode_batch(ids, skip_special_tokens=True)


def open_shards(dataset: str) -> dict:
    """Every ``(domain, split)`` shard of ``dataset``, opened once per process (reopened after a rebuild)."""
    return _opened(dataset, _stamp(Path(dataset) / MANIFEST_FILE))[0]


def _stamp(path: Path) -> int:
    """A file's modification time (ns): a cache keyed on it sees a dataset or map made again at the same path."""
    return path.stat().st_mtime_ns


@functools.lru_cache(maxsize=2)
def _opened(dataset: str, stamp: int):
    from glasslab.data.shards import SPLITS, open_shard, read_manifest
    from glasslab.data.tokenizer import load_tokenizer

    manifest = read_manifest(dataset)
    shards = {(d, s): open_shard(dataset, d, s, manifest) for d in manifest["domains"] for s in SPLITS}
    return shards, load_tokenizer(dataset)


def _assign_all(cfg: MapConfig, out: Path, counts, pretrained) -> dict[tuple[str, str], np.ndarray]:
    """Every document's :data:`ASSIGNED` row, by shard, from tasks on the data runner."""
    from glasslab.data.progress import Progress
    from glasslab.data.runner import TaskRunner

    dataset = cfg.data.data_path
    tasks = [Task(f"{domain}.{split}.{start:09d}", assign_task,
                  (dataset, domain, split, start, min(start + CHUNK_DOCUMENTS, n), str(out), cfg, pretrained))
             for domain, split, n in counts for start in range(0, n, CHUNK_DOCUMENTS)]
    progress = Progress(None, cfg.progress, label="data map")
    runner = TaskRunner(out / "work", cfg.num_workers, cfg.backend or "local", progress)
    try:
        runner.run("assign", tasks)
    finally:
        runner.close()
    parts: dict[tuple[str, str], list[np.ndarray]] = {(d, s): [] for d, s, _ in counts}
    for task in tasks:
        parts[task.arg[1], task.arg[2]].append(np.load(out / "work" / "assign" / task.id / "assigned.npy"))
    return {key: np.concatenate(arrays) if arrays else np.zeros(0, ASSIGNED) for key, arrays in parts.items()}


ASSIGNED = np.dtype([("fine", "<u4"), ("cluster", "<u2"), ("fine_distance", "<f4"), ("distance", "<f4")])


def assign_task(arg: tuple, folder: Path) -> dict:
    """A runner task: embed documents ``[start, stop)`` of one shard and write their clusters (``assigned.npy``)."""
    dataset, domain, split, start, stop, map_folder, cfg, pretrained = arg
    embedder, clusters = _fitted_in(map_folder, _stamp(Path(map_folder) / CENTROIDS_FILE), cfg, pretrained)
    vectors = embedder.embed(decode_documents(dataset, [(domain, split, i) for i in range(start, stop)]))
    fine, fine_distance = nearest(vectors, clusters.fine)
    coarse = clusters.fine_to_coarse[fine]
    rows = np.zeros(len(fine), ASSIGNED)
    rows["fine"], rows["cluster"], rows["fine_distance"] = fine, coarse, fine_distance
    rows["distance"] = 1.0 - np.einsum("nd,nd->n", vectors, clusters.coarse[coarse])
    np.save(folder / "assigned.npy", rows)
    return {"documents_in": len(rows), "documents_kept": len(rows)}


@functools.lru_cache(maxsize=1)
def _fitted_in(map_folder: str, stamp: int, cfg: MapConfig, pretrained) -> tuple[TfidfEmbedder, Clusters]:
    embedder = TfidfEmbedder.load(Path(map_folder)) if pretrained is None else _embedder(cfg, pretrained)
    return embedder, load_clusters(Path(map_folder))


@functools.lru_cache(maxsize=1)
def _embedder(cfg: MapConfig, pretrained):
    """A pretrained embedder, loaded once per process."""
    return pretrained(cfg)


def read_map(folder: str | Path, dataset_dir: str | Path | None = None) -> dict:
    """A finished map's ``map.json``; with ``dataset_dir``, refused unless that dataset is the one mapped."""
    from glasslab.data.shards import manifest_hash

    summary = read_json(Path(folder) / MAP_FILE)
    if summary is None or summary.get("format") != FORMAT:
        raise UserError(f"{folder}: not a finished data map (no {MAP_FILE} of format {FORMAT})")
    if dataset_dir is not None and manifest_hash(dataset_dir) != summary["manifest_hash"]:
        raise UserError(f"{folder}: a map of dataset {summary['manifest_hash'][:16]}, but {dataset_dir} now holds "
                        f"{manifest_hash(dataset_dir)[:16]} (rebuilt); map it again")
    return summary


def maps_of(lab_root: str | Path, manifest: str) -> list[Path]:
    """The finished map folders under ``lab_root`` of the dataset whose manifest hash is ``manifest``, newest first."""
    found = []
    for path in Path(lab_root).glob(f"{STEP_NAME}-*/{MAP_FILE}"):
        summary = read_json(path)
        if summary and summary.get("format") == FORMAT and summary.get("manifest_hash") == manifest:
            found.append(path.parent)
    return sorted(found, key=lambda p: (p / MAP_FILE).stat().st_mtime, reverse=True)
