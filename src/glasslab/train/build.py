"""Build what the loop trains from a ``RunConfig``: the model, its balancer, the loader, evals, samples.

This is the one module that binds the trainer to the ``model`` and ``data`` parts' APIs; the loop
itself only sees :class:`~glasslab.train.loop.RunParts`.
"""

from __future__ import annotations

import functools

import torch
import torch.utils.checkpoint
from torch import nn

from glasslab.data import Loader, eval_batches, eval_bytes_per_token, load_tokenizer, manifest_hash
from glasslab.data.tokenizer import EOT
from glasslab.errors import UserError
from glasslab.model import Transformer, generate
from glasslab.train.distributed import DistContext
from glasslab.train.evals import evaluate
from glasslab.train.loop import RunParts
from glasslab.train.rng import seed_everything
from glasslab.train.run_config import RunConfig
from glasslab.train.samples import take_samples


def build_parts(run_cfg: RunConfig, ctx: DistContext) -> RunParts:
    """Loader first (a bad mixture fails before any compute), then the model seeded by ``train.seed``.

    A config with an ``sft`` section is built by :func:`glasslab.train.sft.build_sft_parts` instead.
    """
    if run_cfg.sft is not None:
        from glasslab.train.sft import build_sft_parts

        return build_sft_parts(run_cfg, ctx.device, ctx.rank, ctx.world_size)
    cfg = run_cfg.train
    loader = Loader(run_cfg.data, cfg.seq_len, cfg.global_batch_size, rank=ctx.rank, world_size=ctx.world_size)
    dataset = run_cfg.data.path
    tokenizer = load_tokenizer(dataset)
    if run_cfg.model.vocab_size < tokenizer.get_vocab_size():
        raise UserError(f"model.vocab_size={run_cfg.model.vocab_size}: expected at least the "
                        f"{tokenizer.get_vocab_size()} tokens of the dataset's tokenizer ({dataset})")
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
                    evaluate=domain_evaluator(run_cfg, ctx.device, loader.domains), sample=sample)


def domain_evaluator(run_cfg: RunConfig, device: torch.device, domains: list[str] | None = None):
    """``evaluate(model)`` over the held-out split of ``domains`` (default: the mixture's weighted ones)."""
    cfg, dataset = run_cfg.train, run_cfg.data.path
    if domains is None:
        domains = sorted({d for _, w in run_cfg.data.mixture.weight_sets() for d, v in w.items() if v > 0})
    batches_by_domain = {
        domain: functools.partial(eval_batches, dataset, domain, cfg.seq_len, cfg.eval_batch_size,
                                  cfg.eval_max_tokens)
        for domain in domains
    }
    bytes_per_token = {domain: eval_bytes_per_token(dataset, domain) for domain in domains}

    def evaluate_model(model_to_eval):
        return evaluate(model_to_eval, batches_by_domain, bytes_per_token, device)

    return evaluate_model


def describe(run_cfg: RunConfig) -> dict:
    """What run.json records about the model and data: size name, parameter counts, FLOPs, manifest hash
    (and for SFT the role and parent checkpoint)."""
    record = {
        "size_name": run_cfg.model.size_name(),
        "param_counts": run_cfg.model.param_counts(),
        "flops_per_token": run_cfg.model.flops_per_token(run_cfg.train.seq_len),
        "data_manifest_hash": manifest_hash(run_cfg.data.path),
    }
    if run_cfg.sft is not None:
        from glasslab.train.sft import base_record

        record.update(base_record(run_cfg))
    return record


def checkpoint_activations(blocks: nn.ModuleList) -> None:
    """Recompute each block's activations during backward instead of storing them (saves memory).

    The block's ``forward`` is wrapped in place, so parameter names and checkpoints are unchanged.
    """
    for block in blocks:
        block.forward = functools.partial(torch.utils.checkpoint.checkpoint, block.forward, use_reentrant=False)
