"""Preference tuning (DPO) of a base — in the demo, of the SFT model — on preference pairs.

The DPO step builds its run's parts here and hands them to the trainer as a recipe: the base's weights to
train, a second, frozen copy of them as the reference, a loader of pairs (:mod:`glasslab.posttrain.pairs`),
the preference objective (:mod:`glasslab.posttrain.preference`), the held-out preference metrics
(``eval/dpo/...``) beside the base dataset's domain losses, and chat samples. ``run.json`` records the role
``dpo``, the ``parent`` (the base, which is also the reference), β, the counts of the pairs (``pairs``:
training and held out, with those left out as longer than a row) and, measured before step 0, the base's
metrics and replies (``base``): the preference accuracy before tuning, and the replies before.

A global batch of ``train.global_batch_size`` sequences is that many pairs (two rows each, of at most
``train.seq_len`` tokens); ``flops_per_token`` counts both rows' forward and backward and the reference's
forward, so MFU stays comparable.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from glasslab import config as configs
from glasslab.config import UNVERSIONED, require
from glasslab.data.tokenizer import PAD
from glasslab.errors import UserError
from glasslab.model import ModelConfig
from glasslab.model.load import ModelSource, load_model
from glasslab.posttrain.base import (
    BaseData,
    base_data,
    baseline,
    chat_encoder,
    describe_run,
    find_base,
    forgetting_evaluator,
    start_model,
    step_base,
)
from glasslab.posttrain.pairs import read_pair_split
from glasslab.posttrain.preference import PairLoader, Preference, encode_pairs, heldout_logps, preference_metrics
from glasslab.posttrain.samples import CHAT_PROMPTS, chat_sampler
from glasslab.train.config import OptimizerConfig, ScheduleConfig, TrainConfig
from glasslab.train.distributed import DistContext
from glasslab.train.loop import RunParts
from glasslab.train.steps import has_started, train_in_folder

ROLE = "dpo"
FLOPS_FACTOR = 2 * (1 + 1 / 3)
"""FLOPs per counted token over the model's own: two rows per pair, and the reference's forward (a third
of a forward and backward) beside the policy's."""


@dataclass(frozen=True)
class DPOConfig:
    """What a DPO run starts from (and keeps as its reference) and trains on."""

    base: str = ""
    """The base and reference: ``RUN_DIR@STEP`` of a run, or an export's folder (a step fills it in)."""
    pairs: str = ""
    """A pairs folder (``train.jsonl``, ``heldout.jsonl``; see glasslab.posttrain.pairs)."""
    beta: float = 0.1
    """β: how far the model may move from the reference for a given margin (the loss's temperature)."""
    eval_max_pairs: int = field(default=0, metadata=UNVERSIONED)
    """Held-out pairs in the ``eval/dpo/...`` metrics (0 = all)."""

    def __post_init__(self) -> None:
        require(self.beta > 0, "dpo.beta", self.beta, "a positive number")
        require(self.eval_max_pairs >= 0, "dpo.eval_max_pairs", self.eval_max_pairs, ">= 0")


@dataclass(frozen=True)
class DPORunConfig:
    """A DPO run as ``run.json`` and its checkpoints record it."""

    model: ModelConfig
    """The base's model."""
    data: BaseData
    """Where the tokenizer is (the base's dataset, or its export)."""
    train: TrainConfig
    """Pairs per step (``global_batch_tokens // seq_len``), budget, optimiser, schedule; ``seq_len`` bounds a
    pair's row."""
    dpo: DPOConfig
    """Base, pairs, β."""


def default_dpo_train() -> TrainConfig:
    """A short DPO schedule: 16 pairs per step, a lower LR than SFT's, brief warmup, linear decay to zero."""
    return TrainConfig(seq_len=256, global_batch_tokens=256 * 16, max_steps=100,
                       optimizer=OptimizerConfig(lr=3e-4, weight_decay=0.0),
                       schedule=ScheduleConfig(kind="linear", warmup_fraction=0.1, min_lr_ratio=0.0),
                       sample_prompts=CHAT_PROMPTS, sample_max_new_tokens=48, checkpoint_interval=100)


class DPORecipe:
    """The parts of a DPO run (:class:`~glasslab.train.recipe.Recipe`); the pairs are read and encoded once."""

    def __init__(self, config: DPORunConfig, base: ModelSource | None = None) -> None:
        self.config = config
        dpo, row_len = config.dpo, config.train.seq_len + 1
        self.base = base or find_base(dpo.base)
        self.encoder = chat_encoder(config.data.path, config.data.path)
        self.train, self.train_counts = encode_pairs(self.encoder, read_pair_split(dpo.pairs, "train"), row_len)
        heldout, self.heldout_counts = encode_pairs(self.encoder, read_pair_split(dpo.pairs, "heldout"), row_len)
        self.heldout = heldout[: dpo.eval_max_pairs] if dpo.eval_max_pairs else heldout
        if not self.heldout:
            raise UserError(f"no held-out pair fits a row of train.seq_len + 1 = {row_len} tokens; raise "
                            "train.seq_len (--seq-len)")

    def counts(self) -> dict[str, Any]:
        return {"train": self.train_counts, "heldout": self.heldout_counts}

    def say_counts(self) -> None:
        for counts, what in ((self.train_counts, "training pairs"), (self.heldout_counts, "held-out pairs")):
            print(f"[dpo] {counts['pairs']:,} {what}: {counts['kept']:,} kept, {counts['left_out_long']:,} left out "
                  "(longer than a row)", file=sys.stderr, flush=True)

    def build(self, ctx: DistContext) -> RunParts:
        cfg, dpo = self.config.train, self.config.dpo
        pad_id = self.encoder.tokenizer.token_to_id(PAD)
        loader = PairLoader(self.train, cfg.global_batch_size, pad_id, seed=cfg.seed, rank=ctx.rank,
                            world_size=ctx.world_size)
        model = start_model(self.base, cfg)
        reference = load_model(self.base, ctx.device)
        forgetting = forgetting_evaluator(cfg, self.config.data, ctx.device)
        heldout, device = self.heldout, ctx.device
        reference_N2 = heldout_logps(reference, heldout, cfg.eval_batch_size, pad_id, device)

        def evaluate(model_to_eval: nn.Module, step: int) -> dict[str, float]:
            policy_N2 = heldout_logps(model_to_eval, heldout, cfg.eval_batch_size, pad_id, device)
            return {**forgetting(model_to_eval, step), **preference_metrics(policy_N2, reference_N2, dpo.beta)}

        return RunParts(model=model, balancer=model.balancer, loader=loader,
                        flops_per_token=self.config.model.flops_per_token(cfg.seq_len) * FLOPS_FACTOR,
                        evaluate=evaluate, sample=chat_sampler(cfg, self.encoder),
                        objective=Preference(reference, dpo.beta))

    def describe(self) -> dict[str, Any]:
        return {**describe_run(self.config, self.base, ROLE), "pairs": self.counts(), "beta": self.config.dpo.beta}


# --- the lab step ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DPOStepConfig:
    """DPO of a base as a step: its own schedule; the base named (or a dependency), the pairs a dependency."""

    train: TrainConfig = field(default_factory=default_dpo_train)
    """The DPO run's pairs per step, budget, optimiser and schedule."""
    dpo: DPOConfig = field(default_factory=DPOConfig)
    """β and held-out eval; ``base``/``pairs`` come from the fields below."""
    base: str = ""
    """The base as ``glasslab dpo`` names it: a run id under the lab or a folder, ``@STEP``; or an export."""
    base_sha256: str = ""
    """sha256 of the base checkpoint's (or export's) manifest, so a retrained base makes a new folder."""
    base_from: str = ""
    """Or: the dependency whose output folder is the base run (its newest intact checkpoint)."""
    pairs_from: str = ""
    """Dependency whose output folder is the pairs folder."""
    record_extra: dict[str, Any] = field(default_factory=dict)
    """More ``run.json`` fields."""
    command: str = field(default="", metadata=UNVERSIONED)
    """The command that planned the step (``glasslab dpo …``), recorded in ``run.json`` for the run page's
    Reproduce box; not part of what the step computes."""
    device: str = field(default="cpu", metadata=UNVERSIONED)
    """Where to train (``cpu``, ``cuda``)."""
    threads: int = field(default=0, metadata=UNVERSIONED)
    """torch CPU threads (0 = torch's default)."""


def dpo_recipe(cfg: DPOStepConfig, inputs: dict[str, Path], lab_root: Path | None = None) -> DPORecipe:
    """The step's recipe: the base's model and tokenizer, this step's schedule and pairs."""
    source = step_base(cfg.base, cfg.base_sha256, cfg.base_from, inputs, lab_root)
    pairs = str(inputs[cfg.pairs_from]) if cfg.pairs_from else cfg.dpo.pairs
    dpo = configs.from_dict(DPOConfig, {**configs.to_dict(cfg.dpo), "base": source.ref, "pairs": pairs})
    return DPORecipe(DPORunConfig(model=source.model_config, data=base_data(source), train=cfg.train, dpo=dpo),
                     source)


def dpo_step(ctx: Any) -> dict[str, Any]:
    """Preference-tune the base into ``ctx.output_dir`` (resuming a failed attempt); return the final metrics."""
    cfg: DPOStepConfig = ctx.config
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    recipe = dpo_recipe(cfg, ctx.inputs, getattr(ctx, "lab_root", None))
    recipe.say_counts()
    record_extra = {**cfg.record_extra, **({"command": cfg.command} if cfg.command else {})}
    if not has_started(ctx.output_dir):  # the base's preference accuracy and replies, beside the run's own
        record_extra["base"] = baseline(recipe, cfg.device)
    return train_in_folder(recipe, ctx.output_dir, device=cfg.device, record_extra=record_extra)
