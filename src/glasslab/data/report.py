"""The composition report (``report.json``), the public account of what a dataset holds.

It merges what the build recorded (sources, the processing funnel, filter drops, input errors) with
what the shards hold (documents, tokens, bytes per token, length histograms, seeded samples decoded
back to text) and, when a mixture is given, the tokens and epochs each domain gets per phase. It holds
nothing about how the build ran (workers, seconds: ``build.json``), so the same config gives the same
report wherever and however it was built.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from glasslab.data.config import MixtureConfig
from glasslab.data.mixture import plan_mixture
from glasslab.data.shards import manifest_hash, open_shard, read_manifest
from glasslab.data.sources import InputErrors
from glasslab.data.tokenizer import load_tokenizer
from glasslab.layout import BUILD_RECORD

SAMPLE_CHARS = 600
"""Samples are cut to this many characters."""
LARGE_REMOVAL = 0.10
"""A build stage that takes more than this share of a domain's documents or bytes is said on the console and
the data page."""


def length_histogram(lengths: np.ndarray, bins: int = 12) -> dict:
    """Counts of document lengths (tokens) in log-spaced bins; ``edges`` has ``bins + 1`` entries."""
    if lengths.size == 0:
        return {"edges": [], "counts": []}
    high = max(int(lengths.max()), 2)
    edges = np.unique(np.round(np.geomspace(1, high + 1, bins + 1)).astype(np.int64))
    counts, _ = np.histogram(lengths, bins=edges)
    return {"edges": edges.tolist(), "counts": counts.tolist()}


def _samples(shard, tokenizer, count: int, seed: int) -> list[str]:
    n = len(shard.ends)
    if not n or not count:
        return []
    picks = np.sort(np.random.default_rng(seed).choice(n, size=min(count, n), replace=False))
    texts = []
    for i in picks:
        ids = shard.document(int(i))[:-1].tolist()  # without the end-of-text id
        texts.append(tokenizer.decode(ids, skip_special_tokens=False)[:SAMPLE_CHARS])
    return texts


def large_removals(funnel_by_domain: dict[str, list[dict]], limit: float = LARGE_REMOVAL) -> list[dict]:
    """Each stage that took more than ``limit`` of a domain's documents or bytes (from the stage before it):
    ``{domain, stage, documents: [before, after], bytes: [before, after], text}``, ``text`` one line for the
    console and the data page."""
    found = []
    for domain, rows in sorted(funnel_by_domain.items()):
        for before, after in zip(rows, rows[1:], strict=False):
            docs, nbytes = (before["documents"], after["documents"]), (before["bytes"], after["bytes"])
            lost_docs = 1 - docs[1] / docs[0] if docs[0] else 0.0
            lost_bytes = 1 - nbytes[1] / nbytes[0] if nbytes[0] else 0.0
            if max(lost_docs, lost_bytes) > limit:
                found.append({"domain": domain, "stage": after["stage"], "documents": list(docs),
                              "bytes": list(nbytes),
                              "text": f"{domain}: {after['stage']} removed {lost_docs:.0%} of its documents "
                                      f"({docs[0] - docs[1]:,} of {docs[0]:,}) and {lost_bytes:.0%} of its bytes"})
    return found


def heldout_composition(manifest: dict, domain: str, train, held_out) -> dict:
    """The eval split of ``domain`` against the whole domain: its share of documents and bytes, its median
    document length (tokens) beside the training split's, and the share of its tokens the held-out loss
    counts (the rest overlap training text; a dataset without ``scored`` counts them all)."""
    entry = manifest["domains"][domain]
    total_docs = entry["train"]["documents"] + entry["eval"]["documents"]
    total_bytes = entry["train"]["bytes"] + entry["eval"]["bytes"]
    scored = entry["eval"].get("scored_tokens", entry["eval"]["tokens"])
    return {"document_share": entry["eval"]["documents"] / max(total_docs, 1),
            "byte_share": entry["eval"]["bytes"] / max(total_bytes, 1),
            "median_tokens": float(np.median(held_out.lengths)) if len(held_out.lengths) else 0.0,
            "train_median_tokens": float(np.median(train.lengths)) if len(train.lengths) else 0.0,
            "bytes_per_token": entry["eval"]["bytes"] / max(entry["eval"]["tokens"], 1),
            "scored_tokens": scored, "scored_share": scored / max(entry["eval"]["tokens"], 1)}


def make_report(
    dataset_dir: str | Path,
    samples_per_domain: int = 3,
    seed: int = 0,
    mixture: MixtureConfig | None = None,
    token_budget: int = 0,
    tokens_per_step: int = 1,
) -> dict:
    """The report of the dataset in ``dataset_dir`` (with the mixture plan when ``mixture`` is given)."""
    dataset_dir = Path(dataset_dir)
    manifest = read_manifest(dataset_dir)
    build_path = dataset_dir / BUILD_RECORD
    build = json.loads(build_path.read_text()) if build_path.is_file() else {}
    tokenizer = load_tokenizer(dataset_dir)
    domains = {}
    for domain, entry in sorted(manifest["domains"].items()):
        train = open_shard(dataset_dir, domain, "train", manifest)
        domains[domain] = {
            "documents": entry["train"]["documents"],
            "tokens": entry["train"]["tokens"],
            "bytes": entry["train"]["bytes"],
            "bytes_per_token": entry["train"]["bytes"] / max(entry["train"]["tokens"], 1),
            "eval_documents": entry["eval"]["documents"],
            "eval_tokens": entry["eval"]["tokens"],
            "heldout": heldout_composition(manifest, domain, train, open_shard(dataset_dir, domain, "eval", manifest)),
            "length_histogram": length_histogram(train.lengths),
            "samples": _samples(train, tokenizer, samples_per_domain, seed),
        }
    report = {
        "manifest_hash": manifest_hash(dataset_dir),
        "python_version": manifest["python_version"],
        "vocab_size": manifest["vocab_size"],
        "sources": build.get("sources", []),
        "funnel": build.get("funnel", []),
        "funnel_by_domain": build.get("funnel_by_domain", {}),
        "filters": build.get("filters", {}),
        "large_removals": large_removals(build.get("funnel_by_domain", {})),
        "overlap": build.get("overlap"),
        "domains": domains,
        "errors": build.get("errors", InputErrors().to_dict()),
    }
    if mixture is not None:
        budget = token_budget or sum(d["tokens"] for d in domains.values())
        report["mixture"] = plan_mixture(
            mixture, {d: v["tokens"] for d, v in domains.items()}, budget, tokens_per_step
        )
    return report
