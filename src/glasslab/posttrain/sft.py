"""Supervised fine-tuning: a base model trained on conversations, the loss on the assistant's tokens only.

SFT is a recipe of the one tuning step (:mod:`glasslab.posttrain.tuning`, which adds the base's weights,
the forgetting evals and chat samples): here are its config, a loader of conversations packed into rows
(:mod:`glasslab.posttrain.packing`), the trainer's assistant-only objective and the held-out SFT loss
``eval/sft/loss``. Everything else — resume, rollback, spike guard, checkpoints, run store — is the trainer's.

Conversations longer than a row are cut at a turn boundary or left out (:mod:`glasslab.posttrain.fitting`);
the counts of the training and held-out conversations are said on the console and recorded in ``run.json``
(``conversations``), beside the role ``sft``, the ``parent`` (the base) and, measured before step 0, the
base model's metrics and replies (``base``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import torch
import torch.nn.functional as F
from torch import nn

from glasslab.config import UNVERSIONED, require
from glasslab.errors import UserError
from glasslab.lab import NO_OUTPUT, StepOutput
from glasslab.model import ModelConfig
from glasslab.model.load import ModelSource
from glasslab.posttrain.base import BaseData
from glasslab.posttrain.conversations import read_conversation_split
from glasslab.posttrain.fitting import FitCounts, fit_conversations
from glasslab.posttrain.packing import ConversationLoader, heldout_batches
from glasslab.posttrain.tuning import MethodParts, TuningRecipe, TuningStepConfig, tuning_train
from glasslab.train.config import TrainConfig
from glasslab.train.distributed import DistContext
from glasslab.train.objectives import AssistantOnly

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
    return tuning_train(max_steps=200, lr=1e-3, warmup_fraction=0.05)


class SFTRecipe(TuningRecipe):
    """The parts of an SFT run: conversations packed into rows, the assistant-only objective, the held-out
    SFT loss. The conversations are read, encoded and fitted to rows once, here."""

    role = ROLE

    def __init__(self, config: SFTRunConfig, base: ModelSource) -> None:
        super().__init__(config, base)
        sft, row_len = config.sft, config.train.seq_len + 1
        if not sft.conversations:
            raise UserError("sft.conversations: empty; expected a conversations folder")
        train = self.encoder.encode_many([r["messages"] for r in read_conversation_split(sft.conversations, "train")])
        heldout = self.encoder.encode_many([r["messages"] for r in read_conversation_split(sft.conversations,
                                                                                          "heldout")])
        self.train, self.train_counts = fit_conversations(train, self.encoder, row_len, sft.drop_long)
        self.heldout, self.heldout_counts = fit_conversations(heldout, self.encoder, row_len, sft.drop_long)
        _require_some(self.train_counts, "training conversations", row_len)
        _require_some(self.heldout_counts, "held-out conversations", row_len)

    def count_lines(self) -> list[str]:
        return [self.train_counts.line("training conversations"), self.heldout_counts.line("held-out")]

    def record(self) -> dict[str, Any]:
        """``conversations``: what became of every conversation, ``{"train": {...}, "heldout": {...}}``."""
        return {"conversations": {"train": self.train_counts.as_dict(), "heldout": self.heldout_counts.as_dict()}}

    def method_parts(self, ctx: DistContext) -> MethodParts:
        cfg, sft, heldout, pad_id = self.config.train, self.config.sft, self.heldout, self.pad_id
        loader = ConversationLoader(self.train, cfg.seq_len, cfg.global_batch_size, pad_id, sft.packing,
                                    seed=cfg.seed, rank=ctx.rank, world_size=ctx.world_size)

        def heldout_loss(model: nn.Module) -> dict[str, float]:
            batches = heldout_batches(heldout, cfg.seq_len, cfg.eval_batch_size, pad_id, sft.eval_max_conversations)
            return {"eval/sft/loss": heldout_sft_loss(model, batches, ctx.device)}

        return MethodParts(loader=loader, objective=AssistantOnly(), heldout=heldout_loss)


def _require_some(counts: FitCounts, what: str, row_len: int) -> None:
    """One line saying what became of ``what`` when none of them is left to train or measure on."""
    if not counts.kept:
        raise UserError(f"no {what.split()[0]} conversation fits a row of train.seq_len + 1 = {row_len} tokens "
                        f"({counts.line(what)}); raise train.seq_len (--seq-len)")


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


@dataclass(frozen=True)
class SFTStepConfig(TuningStepConfig):
    """SFT of a base as a tuning step (:func:`~glasslab.posttrain.tuning.tune_step`): the conversations a
    dependency."""

    train: TrainConfig = field(default_factory=default_sft_train)
    """The SFT run's batch, budget, optimiser and schedule (``seq_len`` is the conversation row length)."""
    sft: SFTConfig = field(default_factory=SFTConfig)
    """Packing, long conversations, held-out eval; ``base``/``conversations`` come from the step's fields."""
    conversations_from: StepOutput = NO_OUTPUT
    """Dependency whose output folder is the conversations folder."""

    def recipe(self, base: ModelSource) -> SFTRecipe:
        sft = self.method_config(self.sft, base, self.conversations_from, "conversations")
        return SFTRecipe(SFTRunConfig(**self.run_sections(base), sft=sft), base)
