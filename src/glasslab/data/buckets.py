"""Mixture buckets: the streams the loader draws from, and the weight of each at a step.

Without cluster weights a bucket is a domain's training documents, named by the domain, weighted by the
mixture's domain weights: the loader draws exactly what it drew before buckets existed. With
``mixture.clusters`` a bucket is the training documents of one content cluster (of the run's data map,
``data.map``) inside one domain, named ``<domain>/<cluster>``; each is a stream of its own (shuffled per
epoch like a domain's), so its draws are deterministic and resume exactly. Weights:

- clusters alone: a cluster's weight is split over the domains holding it by its training tokens there;
- clusters within domain weights (and phases): each domain's weight is split over its clusters by the
  cluster weights (a domain's share stays what its weights say; inside it, clusters are reweighted).

A bucket shorter than one sequence window cannot give a sequence: it is left out, and the bucket plan
says which (``left_out``: name → tokens) so the run's record shows it. The weight of a cluster whose every
bucket is left out is lost, which the plan refuses in one line.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from glasslab.data.config import DataConfig, MixtureConfig, PhaseConfig
from glasslab.data.mixture import normalized, plan_mixture
from glasslab.errors import UserError

ALL_CLUSTERS = "*"
"""A ``mixture.clusters`` key: the weight of every cluster the mixture does not name."""


@dataclass(frozen=True)
class Bucket:
    """One stream of the loader: ``domain``'s training documents, or those of them in ``cluster``."""

    name: str
    domain: str
    cluster: int | None = None
    documents: np.ndarray | None = field(default=None, compare=False)
    """Indices of the bucket's documents in the domain's training shard, increasing; None: all of them."""
    tokens: int = 0


@dataclass(frozen=True)
class BucketPlan:
    """The buckets of a run's mixture (in draw order), their weights per phase, and the buckets left out."""

    buckets: list[Bucket]
    weight_sets: list[tuple[int, dict[str, float]]]
    """``(start_step, bucket name → normalised weight)``, in increasing start step."""
    left_out: dict[str, int]
    """Buckets with fewer tokens than one sequence window (name → training tokens): never drawn."""

    def weights_at(self, step: int) -> dict[str, float]:
        current: dict[str, float] = {}
        for start, weights in self.weight_sets:
            if start <= step or not current:
                current = weights
        return current

    def domain_weights_at(self, step: int) -> dict[str, float]:
        """Each domain's summed bucket weight at ``step``."""
        domain_of = {b.name: b.domain for b in self.buckets}
        totals: dict[str, float] = {}
        for name, weight in self.weights_at(step).items():
            totals[domain_of[name]] = totals.get(domain_of[name], 0.0) + weight
        return dict(sorted(totals.items()))


def plan_buckets(data_cfg: DataConfig, domain_tokens: dict[str, int], window: int) -> BucketPlan:
    """The buckets of ``data_cfg``'s mixture over a dataset whose domains hold ``domain_tokens`` training
    tokens, for sequences of ``window`` tokens. One-line UserErrors for a map of another dataset, an unknown
    or ambiguous cluster key, a weighted domain or cluster with nothing left to draw."""
    mixture = data_cfg.mixture
    if not mixture.clusters:
        buckets = [Bucket(d, d, tokens=domain_tokens[d]) for d in _weighted_domains(mixture)]
        return BucketPlan(buckets, [(s, normalized(w)) for s, w in mixture.weight_sets()], {})
    clusters = map_clusters(data_cfg)
    weight_of = cluster_weights(mixture.clusters, clusters.summary)
    every = [Bucket(f"{d}/{c}", d, c, docs, int(clusters.tokens[d][docs].sum()))
             for d in sorted(clusters.cluster_of) for c, docs in _members(clusters.cluster_of[d])]
    kept = [b for b in every if b.tokens >= window and weight_of.get(b.cluster, 0.0) > 0]
    left_out = {b.name: b.tokens for b in every if b.tokens < window and weight_of.get(b.cluster, 0.0) > 0}
    sets = [(s, _within_domains(normalized(w), weight_of, kept)) for s, w in mixture.weight_sets()] \
        or [(0, _across_domains(weight_of, kept))]
    used = {b.name for b in kept if any(w.get(b.name, 0.0) > 0 for _, w in sets)}
    return BucketPlan([b for b in kept if b.name in used], sets, left_out)


def planned_mixture(data_cfg: DataConfig, domain_tokens: dict[str, int], token_budget: int, tokens_per_step: int,
                    window: int) -> dict:
    """What a run records as its planned ``mixture`` (:func:`~glasslab.data.mixture.plan_mixture`): over its
    domains, or with cluster weights over its buckets, with ``left_out`` (buckets shorter than a window)."""
    if not data_cfg.mixture.clusters:
        return plan_mixture(data_cfg.mixture, domain_tokens, token_budget, tokens_per_step)
    plan = plan_buckets(data_cfg, domain_tokens, window)
    names, caps = {b.name for b in plan.buckets}, data_cfg.mixture.epoch_caps
    sets = [{n: w for n, w in weights.items() if n in names} for _, weights in plan.weight_sets]
    mixture = MixtureConfig(weights=sets[0], phases=tuple(PhaseConfig(start, w) for (start, _), w
                                                          in zip(plan.weight_sets[1:], sets[1:], strict=True)),
                            epoch_caps={b.name: caps[b.domain] for b in plan.buckets if b.domain in caps})
    planned = plan_mixture(mixture, {b.name: b.tokens for b in plan.buckets}, token_budget, tokens_per_step)
    return planned | {"left_out": plan.left_out}


def _weighted_domains(mixture: MixtureConfig) -> list[str]:
    return sorted({d for _, w in mixture.weight_sets() for d, v in w.items() if v > 0})


def _members(cluster_of: np.ndarray) -> list[tuple[int, np.ndarray]]:
    return [(int(c), np.flatnonzero(cluster_of == c)) for c in np.unique(cluster_of)]


def _across_domains(weight_of: dict[int, float], kept: list[Bucket]) -> dict[str, float]:
    """Clusters alone: a cluster's weight split over its buckets by their tokens."""
    cluster_tokens: dict[int, int] = {}
    for b in kept:
        cluster_tokens[b.cluster] = cluster_tokens.get(b.cluster, 0) + b.tokens
    missing = sorted(c for c, w in weight_of.items() if w > 0 and c not in cluster_tokens)
    if missing:
        raise UserError(f"data.mixture.clusters: cluster(s) {missing} weighted but shorter than one sequence in "
                        "every domain; weight them 0")
    return normalized({b.name: weight_of[b.cluster] * b.tokens / cluster_tokens[b.cluster] for b in kept})


def _within_domains(domain_weights: dict[str, float], weight_of: dict[int, float],
                    kept: list[Bucket]) -> dict[str, float]:
    """Domain weights, each split over the domain's clusters by the cluster weights."""
    weights = {}
    for domain, share in domain_weights.items():
        mine = [b for b in kept if b.domain == domain]
        total = sum(weight_of[b.cluster] for b in mine)
        if share > 0 and total <= 0:
            raise UserError(f"data.mixture: domain {domain!r} is weighted but none of its clusters is (with a "
                            "sequence's worth of tokens); weight one of them")
        weights.update({b.name: share * weight_of[b.cluster] / total for b in mine if share > 0})
    return weights


@dataclass(frozen=True)
class MapClusters:
    """A data map's coarse cluster and token count of every training document, by domain, and its map.json."""

    folder: Path
    summary: dict
    cluster_of: dict[str, np.ndarray]
    tokens: dict[str, np.ndarray]


def map_folder(data_cfg: DataConfig) -> Path:
    """The folder ``data.map`` names: a path to a map, or a map's folder name beside the dataset."""
    named = Path(data_cfg.map).expanduser()
    for candidate in (named, Path(data_cfg.path).resolve().parent / data_cfg.map):
        if (candidate / "map.json").is_file():
            return candidate.resolve()
    raise UserError(f"data.map={data_cfg.map!r}: no finished data map there or beside {data_cfg.path} "
                    "(glasslab data map DATASET makes one)")


def map_record(data_cfg: DataConfig) -> dict:
    """What a run by cluster records of its map (``data_map``: its folder name and the config of the step that
    made it, which ``glasslab reproduce`` maps the dataset again with), or nothing without one."""
    if not data_cfg.map:
        return {}
    folder = map_folder(data_cfg)
    return {"data_map": {"folder": folder.name, "config": map_step_config(folder)}}


def map_step_config(folder: Path) -> dict | None:
    """The config the map in ``folder`` was made with (its ``step.json``'s), None when it has no record."""
    from glasslab.layout import STEP_RECORD, read_json

    return (read_json(folder / STEP_RECORD) or {}).get("config")


def map_clusters(data_cfg: DataConfig) -> MapClusters:
    """The clusters of ``data.map``, refused unless it maps ``data.path``'s dataset as it is now."""
    from glasslab.data.map import read_map

    folder = map_folder(data_cfg)
    read_map(folder, data_cfg.path)  # one line for a map of another (or a rebuilt) dataset
    return _read_clusters(str(folder), (folder / "map.json").stat().st_mtime_ns)


@functools.lru_cache(maxsize=4)
def _read_clusters(folder: str, stamp: int) -> MapClusters:
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from glasslab.data.map import DOCUMENTS_FILE, read_map

    table = pq.read_table(Path(folder) / DOCUMENTS_FILE, columns=["domain", "split", "document", "tokens", "cluster"])
    table = table.filter(pc.equal(table["split"], "train")).to_pydict()
    domains, documents = np.array(table["domain"], dtype=object), np.array(table["document"], dtype=np.int64)
    cluster_of, tokens = {}, {}
    for domain in sorted(set(table["domain"])):
        rows = np.flatnonzero(domains == domain)
        order = rows[np.argsort(documents[rows])]  # canonical order already; sorted to be sure
        cluster_of[domain] = np.array(table["cluster"], dtype=np.int64)[order]
        tokens[domain] = np.array(table["tokens"], dtype=np.int64)[order]
    return MapClusters(Path(folder), read_map(folder), cluster_of, tokens)


def cluster_weights(keys: dict[str, float], summary: dict) -> dict[int, float]:
    """Cluster id → weight for the mixture's keys (ids, names, top terms, ``*``); one line for a key that names
    no cluster, several, or one another key names too."""
    clusters = summary["clusters"]
    weights = dict.fromkeys((c["id"] for c in clusters), float(keys.get(ALL_CLUSTERS, 0.0)))
    named: dict[int, str] = {}
    for key, weight in keys.items():
        if key == ALL_CLUSTERS:
            continue
        cluster = _cluster_named(key, clusters)
        if cluster in named:
            raise UserError(f"data.mixture.clusters: {key!r} and {named[cluster]!r} both name cluster {cluster}")
        named[cluster], weights[cluster] = key, float(weight)
    return weights


def _cluster_named(key: str, clusters: list[dict]) -> int:
    text = str(key).strip()
    if text.isdigit() and any(c["id"] == int(text) for c in clusters):
        return int(text)
    exact = [c["id"] for c in clusters if c.get("name") == text]
    by_term = [c["id"] for c in clusters if text.lower() in (w for w, _ in (c.get("terms") or [])[:3])]
    found = exact or by_term
    if len(found) == 1:
        return found[0]
    listed = "; ".join(f"{c['id']}: {c.get('name', '')}" for c in clusters[:12])
    what = f"names clusters {found}" if found else "names no cluster"
    raise UserError(f"data.mixture.clusters: {key!r} {what} (an id, a name or a top term of one: {listed})")
