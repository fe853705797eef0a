"""Supervised fine-tuning: a base model trained on conversations, the loss on the assistant's tokens only.

The SFT step builds its run's parts here — the base's weights (:mod:`glasslab.posttrain.base`), a loader
of conversations packed into rows (:mod:`glasslab.posttrain.packing`), the trainer's assistant-only
objective, the held-out SFT loss ``eval/sft/loss`` beside the base dataset's domain losses (forgetting),
chat samples — and hands them to the trainer as a recipe (:mod:`glasslab.train.recipe`). Everything else —
resume, rollback, spike guard, checkpoints, run store — is the trainer's.

Conversations longer than a row are cut at a turn boundary or left out (:mod:`glasslab.posttrain.fitting`);
the counts of the training and held-out conversations are said on the console and recorded in ``run.json``
(``conversations``), beside the role ``sft``, the ``parent`` (the base) and, measured before step 0, the
base model's metrics and replies (``base``).
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from glasslab import config as configs
from glasslab.config import UNVERSIONED, require
from glasslab.data.tokenizer import PAD
from glasslab.errors import UserError
from glasslab.model import ModelConfig
from glasslab.model.load import ModelSource
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
from glasslab.posttrain.conversations import read_conversation_split
from glasslab.posttrain.fitting import fit_conversations
from glasslab.posttrain.packing import ConversationLoader, heldout_batches
from glasslab.posttrain.samples import CHAT_PROMPTS, chat_sampler
from glasslab.train.config import OptimizerConfig, ScheduleConfig, TrainConfig
from glasslab.train.distributed import DistContext
from glasslab.train.loop import RunParts
from glasslab.train.objectives import AssistantOnly
from glasslab.train.steps import has_started, train_in_folder

ROLE = "sft"


@dataclass(frozen=True)
class SFTConfig:
    """What an SFT run starts from and trains on, and how conversations become rows."""

    base: str = ""
    """The base: ``RUN_DIR@STEP`` of a run, or an export's folder (a step fills it from its inputs)."""
    conversations: str = ""
    """A conversations folder (``train.jsonl``, ``heldout.jsonl``; see glasslab.posttrain.conversations)."""
    packing: Literal["packed", "padded"] = "packed"
    """``packed``: conversations share rows, kept apart by a document mask; ``padded``: one per row."""
    drop_long: bool = False
    """Leave out conversations longer than a row instead of cutting them at a turn boundary."""
    eval_max_conversations: int = field(default=0, metadata=UNVERSIONED)
    """Held-out conversations in the held-out SFT loss (``eval/sft/loss``; 0 = all)."""

    def __post_init__(self) -> None:
        require(self.eval_max_conversations >= 0, "sft.eval_max_conversations", self.eval_max_conversations, ">= 0")


@dataclass(frozen=True)
class SFTRunConfig:
    """An SFT run as ``run.json`` and its checkpoints record it: the base's model, where its tokenizer is,
    the schedule, and the SFT section."""

    model: ModelConfig
    """The base's model (SFT keeps it)."""
    data: BaseData
    """Where the tokenizer is (the base's dataset, or its export)."""
    train: TrainConfig
    """Batch, budget, optimiser, schedule; ``seq_len`` is the conversation row length."""
    sft: SFTConfig
    """Base, conversations, packing."""


def default_sft_train() -> TrainConfig:
    """A short SFT schedule: a lower LR than pretraining, brief warmup, linear decay to zero."""
    return TrainConfig(seq_len=256, global_batch_tokens=256 * 16, max_steps=200,
                       optimizer=OptimizerConfig(lr=1e-3, weight_decay=0.0),
                       schedule=ScheduleConfig(kind="linear", warmup_fraction=0.05, min_lr_ratio=0.0),
                       sample_prompts=CHAT_PROMPTS, sample_max_new_tokens=48, checkpoint_interval=100)


class SFTRecipe:
    """The parts of an SFT run (:class:`~glasslab.train.recipe.Recipe`). The conversations are read, encoded
    and fitted to rows once, here, so bad data fails before any model is loaded."""

    def __init__(self, config: SFTRunConfig, base: ModelSource | None = None) -> None:
        self.config = config
        sft, row_len = config.sft, config.train.seq_len + 1
        if not sft.conversations:
            raise UserError("sft.conversations: empty; expected a conversations folder")
        self.base = base or find_base(sft.base)
        self.encoder = chat_encoder(config.data.path, config.data.path)
        train = self.encoder.encode_many([r["messages"] for r in read_conversation_split(sft.conversations, "train")])
        heldout = self.encoder.encode_many([r["messages"] for r in read_conversation_split(sft.conversations,
                                                                                          "heldout")])
        self.train, self.train_counts = fit_conversations(train, self.encoder, row_len, sft.drop_long)
        self.heldout, self.heldout_counts = fit_conversations(heldout, self.encoder, row_len, sft.drop_long)
        if not self.heldout:
            raise UserError(f"no held-out conversation fits a row of train.seq_len + 1 = {row_len} tokens; "
                            "raise train.seq_len (--seq-len)")

    def counts(self) -> dict[str, Any]:
        """What became of every conversation: ``{"train": {...}, "heldout": {...}}`` (FitCounts fields)."""
        return {"train": self.train_counts.as_dict(), "heldout": self.heldout_counts.as_dict()}

    def say_counts(self) -> None:
        """The counts on the console (stderr; a step's stderr is also its log)."""
        for counts, what in ((self.train_counts, "training conversations"), (self.heldout_counts, "held-out")):
            print(f"[sft] {counts.line(what)}", file=sys.stderr, flush=True)

    def build(self, ctx: DistContext) -> RunParts:
        cfg, sft = self.config.train, self.config.sft
        pad_id = self.encoder.tokenizer.token_to_id(PAD)
        loader = ConversationLoader(self.train, cfg.seq_len, cfg.global_batch_size, pad_id, sft.packing,
                                    seed=cfg.seed, rank=ctx.rank, world_size=ctx.world_size)
        model = start_model(self.base, cfg)
        forgetting = forgetting_evaluator(cfg, self.config.data, ctx.device)
        heldout, device = self.heldout, ctx.device

        def evaluate(model_to_eval: nn.Module, step: int) -> dict[str, float]:
            batches = heldout_batches(heldout, cfg.seq_len, cfg.eval_batch_size, pad_id, sft.eval_max_conversations)
            loss = heldout_sft_loss(model_to_eval, batches, device)
            return {**forgetting(model_to_eval, step), "eval/sft/loss": loss}

        return RunParts(model=model, balancer=model.balancer, loader=loader,
                        flops_per_token=self.config.model.flops_per_token(cfg.seq_len), evaluate=evaluate,
                        sample=chat_sampler(cfg, self.encoder), objective=AssistantOnly())

    def describe(self) -> dict[str, Any]:
        return {**describe_run(self.config, self.base, ROLE), "conversations": self.counts()}


@torch.no_grad()
def heldout_sft_loss(model: nn.Module, batches, device: torch.device) -> float:
    """Mean loss in nats per assistant token over held-out SFT batches (eval mode, then back)."""
    was_training = model.training
    model.eval()
    nats, tokens = 0.0, 0
    try:
        for batch in batches:
            batch = batch.to(device)
            logits_BTV = model(batch.tokens_BT, doc_ids_BT=batch.doc_ids_BT)
            targets_N = batch.targets_BT.flatten()
            nats += F.cross_entropy(logits_BTV.float().flatten(0, 1), targets_N, reduction="sum").item()
            tokens += batch.loss_tokens
    finally:
        model.train(was_training)
    return nats / tokens


# --- the lab step ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SFTStepConfig:
    """SFT of a base as a step: its own schedule; the base named (or a dependency), the conversations a
    dependency."""

    train: TrainConfig = field(default_factory=default_sft_train)
    """The SFT run's batch, budget, optimiser and schedule (``seq_len`` is the conversation row length)."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    """Packing, long conversations, held-out eval; ``base``/``conversations`` come from the fields below."""
    base: str = ""
    """The base as ``glasslab sft`` names it: a run id under the lab or a folder, ``@STEP``; or an export."""
    base_sha256: str = ""
    """sha256 of the base checkpoint's (or export's) manifest, so a retrained base makes a new folder."""
    base_from: str = ""
    """Or: the dependency whose output folder is the base run (its newest intact checkpoint)."""
    conversations_from: str = ""
    """Dependency whose output folder is the conversations folder."""
    record_extra: dict[str, Any] = field(default_factory=dict)
    """More ``run.json`` fields."""
    command: str = field(default="", metadata=UNVERSIONED)
    """The command that planned the step (``glasslab sft …``), recorded in ``run.json`` for the run page's
    Reproduce box; not part of what the step computes."""
    device: str = field(default="cpu", metadata=UNVERSIONED)
    """Where to train (``cpu``, ``cuda``)."""
    threads: int = field(default=0, metadata=UNVERSIONED)
    """torch CPU threads (0 = torch's default)."""


def sft_recipe(cfg: SFTStepConfig, inputs: dict[str, Path], lab_root: Path | None = None) -> SFTRecipe:
    """The step's recipe: the base's model and tokenizer, this step's schedule and conversations."""
    source = step_base(cfg.base, cfg.base_sha256, cfg.base_from, inputs, lab_root)
    conversations = str(inputs[cfg.conversations_from]) if cfg.conversations_from else cfg.sft.conversations
    sft = configs.from_dict(SFTConfig, {**configs.to_dict(cfg.sft), "base": source.ref,
                                        "conversations": conversations})
    return SFTRecipe(SFTRunConfig(model=source.model_config, data=base_data(source), train=cfg.train, sft=sft),
                     source)


def sft_step(ctx: Any) -> dict[str, Any]:
    """Fine-tune the base into ``ctx.output_dir`` (resuming a failed attempt); return the final metrics."""
    cfg: SFTStepConfig = ctx.config
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    recipe = sft_recipe(cfg, ctx.inputs, getattr(ctx, "lab_root", None))
    recipe.say_counts()
    record_extra = {**cfg.record_extra, **({"command": cfg.command} if cfg.command else {})}
    if not has_started(ctx.output_dir):  # the base model's numbers and replies, beside the run's own
        record_extra["base"] = baseline(recipe, cfg.device)
    return train_in_folder(recipe, ctx.output_dir, device=cfg.device, record_extra=record_extra)
