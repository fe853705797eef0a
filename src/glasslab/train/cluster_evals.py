"""Held-out loss per content cluster: ``eval/cluster/<c>/loss`` and ``/bpb`` beside the per-domain evals.

Which content the model learns and which stays flat: the run's data map (``train.eval_map``, else
``data.map``) cuts the held-out split into its coarse clusters (``data/cluster_heldout.py``: clusters with
too few held-out tokens are merged into one ``other`` row, and recorded), and every
``train.cluster_eval_every``-th evaluation (and the last) measures each row as it measures a domain.
These keys are not part of ``eval/macro/loss`` (what the ladder predicts stays what it was).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from pathlib import Path

import torch
from torch import nn

from glasslab.data.buckets import map_folder, map_step_config
from glasslab.data.cluster_heldout import ClusterHeldout, cluster_heldout
from glasslab.train.evals import every_nth_eval, heldout_loss
from glasslab.train.run_config import RunConfig


def eval_map(run_cfg: RunConfig) -> Path | None:
    """The folder of the map the run's held-out loss is measured per cluster of, or None."""
    name = run_cfg.train.eval_map or run_cfg.data.map
    return map_folder(dataclasses.replace(run_cfg.data, map=name)) if name else None


def heldout_by_cluster(run_cfg: RunConfig) -> ClusterHeldout | None:
    """The run's held-out windows per cluster (None without a map); read once per process."""
    folder = eval_map(run_cfg)
    if folder is None:
        return None
    cfg = run_cfg.train
    return _heldout(str(Path(run_cfg.data.path).resolve()), str(folder), cfg.seq_len, cfg.eval_max_tokens)


@functools.lru_cache(maxsize=2)
def _heldout(dataset: str, folder: str, seq_len: int, max_tokens: int) -> ClusterHeldout:
    return cluster_heldout(dataset, folder, seq_len, max_tokens)


@torch.no_grad()
def cluster_losses(model: nn.Module, heldout: ClusterHeldout, batch_size: int,
                   device: torch.device) -> dict[str, float]:
    """``eval/cluster/<c>/loss`` (nats per scored token) and ``/bpb`` of every evaluated row (a cluster, ``other``)."""
    was_training = model.training
    model.eval()
    metrics = {}
    try:
        for cluster, (tokens, scored) in heldout.windows.items():
            batches = ((torch.from_numpy(tokens[i : i + batch_size]), torch.from_numpy(scored[i : i + batch_size]))
                       for i in range(0, len(tokens), batch_size))
            loss = heldout_loss(model, batches, device)
            metrics[f"eval/cluster/{cluster}/loss"] = loss
            metrics[f"eval/cluster/{cluster}/bpb"] = loss / math.log(2) / heldout.bytes_per_token[cluster]
    finally:
        model.train(was_training)
    return metrics


def with_cluster_evals(evaluate: Callable[[nn.Module, int], dict[str, float]], run_cfg: RunConfig,
                       device: torch.device) -> Callable[[nn.Module, int], dict[str, float]]:
    """``evaluate`` with the run's per-cluster held-out losses added when they are due (``evaluate`` itself
    without a map)."""
    heldout = heldout_by_cluster(run_cfg)
    if heldout is None:
        return evaluate
    cfg = run_cfg.train

    def evaluate_with_clusters(model: nn.Module, step: int) -> dict[str, float]:
        if not every_nth_eval(step, cfg, cfg.cluster_eval_every):
            return evaluate(model, step)
        return {**evaluate(model, step), **cluster_losses(model, heldout, cfg.eval_batch_size, device)}

    return evaluate_with_clusters


def cluster_evals_record(run_cfg: RunConfig) -> dict:
    """What ``run.json`` records of the per-cluster evals (``cluster_evals``: the map and the config it was made
    with, the rows measured with their scored held-out targets, the clusters merged into ``other`` and the ones
    skipped, the cadence), or nothing without a map."""
    heldout = heldout_by_cluster(run_cfg)
    if heldout is None:
        return {}
    return {"cluster_evals": heldout.record() | {"every": run_cfg.train.cluster_eval_every,
                                                 "map_config": map_step_config(eval_map(run_cfg))}}
