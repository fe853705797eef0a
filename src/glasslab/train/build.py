"""Pretraining's recipe: from a ``RunConfig``, the model, its balancer, the loader, evals, samples.

This module binds the trainer to the ``model`` and ``data`` parts' APIs for pretraining; the loop itself
only sees :class:`~glasslab.train.loop.RunParts`. Other recipes (post-training) build their own parts
and may reuse :func:`domain_evaluator` and :func:`checkpoint_activations` from here.
"""

from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

import torch
import torch.utils.checkpoint
from torch import nn

from glasslab.data.buckets import map_record, planned_mixture
from glasslab.data.handle import DatasetHandle, open_dataset
from glasslab.data.loader import Loader, eval_batches, eval_bytes_per_token
from glasslab.data.reference import NO_DATASET, DatasetRef
from glasslab.data.tokenizer import EOT, load_tokenizer
from glasslab.errors import UserError
from glasslab.evals.load import TaskScorer, load_tasks
from glasslab.model import Transformer, generate
from glasslab.track import check_sinks
from glasslab.train.cluster_evals import cluster_evals_record, with_cluster_evals
from glasslab.train.config import TrainConfig
from glasslab.train.distributed import DistContext
from glasslab.train.evals import TaskEvals, evaluate
from glasslab.train.loop import RunParts
from glasslab.train.rng import seed_everything
from glasslab.train.run_config import RunConfig
from glasslab.train.samples import take_samples


def resolve_data(run_cfg: RunConfig, reference: DatasetRef = NO_DATASET) -> tuple[RunConfig, DatasetHandle]:
    """``run_cfg`` with what follows from its dataset filled in (``model.vocab_size=0`` becomes the size of
    the dataset's tokenizer; ``data.path`` where the dataset ``reference`` names lies, for the run's record and
    checkpoints), and the dataset's handle: its manifest read once for the whole run. One-line UserErrors: no
    dataset (``data.build`` is built by ``glasslab train`` as a step before this), a folder that no longer holds
    the dataset the reference names, or a vocabulary smaller than the tokenizer's."""
    data = run_cfg.data
    if reference:
        dataset = reference.open()
        data = dataclasses.replace(data, path=reference.location)
    elif not data.path:
        if data.build:
            raise UserError(f"data.build={data.build!r}: not built yet; `glasslab train` (or a data step "
                            "before the training step) builds it and trains on its folder")
        raise UserError("data.path: empty; name a data build (data.build: demo | FILE) or a folder built by "
                        "`glasslab data build`")
    else:
        dataset = open_dataset(data.path)
    tokens, vocab = dataset.vocab_size, run_cfg.model.vocab_size
    if vocab and vocab < tokens:
        raise UserError(f"model.vocab_size={vocab}: expected at least the {tokens} tokens of the dataset's "
                        f"tokenizer ({data.path}), or 0 to take its size")
    resolved = dataclasses.replace(run_cfg, model=dataclasses.replace(run_cfg.model, vocab_size=vocab or tokens),
                                   data=data)
    return resolved, dataset


class Pretraining:
    """Pretraining's recipe (:mod:`glasslab.train.recipe`): a RunConfig's model from scratch, its mixture's
    loader, per-domain and task evals, and plain-text samples. Made once per run: the sinks are checked and the
    dataset is opened here (``data``: the step's reference to it, else the run config's ``data.path``), and the
    loader is built once, by :meth:`build`."""

    def __init__(self, run_cfg: RunConfig, data: DatasetRef = NO_DATASET) -> None:
        check_sinks(run_cfg.train.sinks)  # a missing sink package: one line before the dataset is read
        self.config, self.dataset = resolve_data(run_cfg, data)
        cluster_evals_record(self.config)  # a map that is gone or of another dataset: one line, before any compute

    def build(self, ctx: DistContext) -> RunParts:
        return build_parts(self.config, self.dataset, ctx)

    def describe(self) -> dict:
        return describe(self.config, self.dataset)


def build_parts(run_cfg: RunConfig, dataset: DatasetHandle, ctx: DistContext) -> RunParts:
    """Loader first (a bad mixture fails before any compute), then the model seeded by ``train.seed``;
    ``dataset`` is the handle of ``run_cfg.data.path``."""
    cfg = run_cfg.train
    loader = Loader(run_cfg.data, cfg.seq_len, cfg.global_batch_size, rank=ctx.rank, world_size=ctx.world_size,
                    pin_memory=ctx.device.type == "cuda", dataset=dataset)
    tokenizer = load_tokenizer(dataset.path)
    seed_everything(cfg.seed)
    model = Transformer(run_cfg.model)
    if cfg.activation_checkpointing:
        checkpoint_activations(model.blocks)
    sample = None
    if cfg.sample_prompts and cfg.sample_max_new_tokens:

        def sample(model_to_sample, step: int):
            return take_samples(model_to_sample, tokenizer, cfg.sample_prompts, cfg.sample_max_new_tokens,
                                seed=cfg.seed + step, generate=generate, eos_id=tokenizer.token_to_id(EOT))

    return RunParts(model=model, balancer=model.balancer, loader=loader,
                    flops_per_token=run_cfg.model.flops_per_token(cfg.seq_len),
                    evaluate=with_cluster_evals(domain_evaluator(cfg, dataset, ctx.device, tokenizer, loader.domains),
                                                run_cfg, ctx.device),
                    sample=sample)


def domain_evaluator(cfg: TrainConfig, dataset: DatasetHandle, device: torch.device, tokenizer,
                     domains: list[str]):
    """``evaluate(model, step)``: losses over the held-out split of the dataset's ``domains``, and
    ``cfg.eval_tasks`` (built-in ones made from ``dataset``) scored with ``tokenizer`` when they are due."""
    batches_by_domain = {
        domain: functools.partial(eval_batches, dataset.path, domain, cfg.seq_len, cfg.eval_batch_size,
                                  cfg.eval_max_tokens)
        for domain in domains
    }
    bytes_per_token = {domain: eval_bytes_per_token(dataset.path, domain) for domain in domains}
    scorer = TaskScorer(load_tasks(cfg.eval_tasks, dataset), tokenizer, tokenizer.token_to_id(EOT))
    task_evals = TaskEvals(cfg, scorer, device)

    def evaluate_model(model_to_eval, step: int):
        return {**evaluate(model_to_eval, batches_by_domain, bytes_per_token, device),
                **task_evals(model_to_eval, step)}

    return evaluate_model


def describe(run_cfg: RunConfig, dataset: DatasetHandle) -> dict:
    """What run.json records about the model and data: size name, parameter counts, FLOPs per token, the
    dataset (``dataset``: ``folder`` — the data step's folder name under the lab —, ``path``,
    ``manifest_hash``), the mixture planned for this run's token budget (``mixture``: what
    ``data.plan_mixture`` returns — weights, tokens and epochs per domain and phase, totals), each
    task's chance level, item count and hash (``tasks``, where the page draws chance lines)."""
    cfg, data = run_cfg.train, run_cfg.data
    digest, domains = dataset.manifest_hash, dataset.domains
    record = {
        "size_name": run_cfg.model.size_name(),
        "param_counts": run_cfg.model.param_counts(),
        "flops_per_token": run_cfg.model.flops_per_token(cfg.seq_len),
        "data_manifest_hash": digest,
        "dataset": {"folder": Path(data.path).resolve().name, "path": str(Path(data.path).resolve()),
                    "manifest_hash": digest},
        "mixture": planned_mixture(data, {d: e["train"]["tokens"] for d, e in domains.items()},
                                   cfg.total_steps * cfg.global_batch_tokens, cfg.global_batch_tokens, cfg.seq_len + 1),
    }
    record |= map_record(run_cfg.data) | cluster_evals_record(run_cfg)
    if run_cfg.train.eval_tasks:
        record["tasks"] = {t.name: t.describe() for t in load_tasks(run_cfg.train.eval_tasks, dataset)}
    return record


def checkpoint_activations(blocks: nn.ModuleList) -> None:
    """Recompute each block's activations during backward instead of storing them (saves memory).

    The block's ``forward`` is wrapped in place, so parameter names and checkpoints are unchanged.
    """
    for block in blocks:
        block.forward = functools.partial(torch.utils.checkpoint.checkpoint, block.forward, use_reentrant=False)
