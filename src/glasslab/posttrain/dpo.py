"""Preference tuning (DPO) of a base — in the demo, of the SFT model — on preference pairs.

DPO is a recipe of the one tuning step (:mod:`glasslab.posttrain.tuning`, which adds the base's weights to
train, the forgetting evals and chat samples): here are its config, a second, frozen copy of the base as
the reference, a loader of pairs (:mod:`glasslab.posttrain.pairs`), the preference objective
(:mod:`glasslab.posttrain.preference`) and the held-out preference metrics (``eval/dpo/...``).
``run.json`` records the role ``dpo``, the ``parent`` (the base, which is also the reference), β, the
counts of the pairs (``pairs``: training and held out, with those left out as longer than a row) and,
measured before step 0, the base's metrics and replies (``base``): the preference accuracy before tuning,
and the replies before.

A global batch of ``train.global_batch_size`` sequences is that many pairs (two rows each, of at most
``train.seq_len`` tokens); ``flops_per_token`` counts both rows' forward and backward and the reference's
forward, so MFU stays comparable.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from torch import nn

from glasslab.config import UNVERSIONED, require
from glasslab.errors import UserError
from glasslab.lab import NO_OUTPUT, StepOutput
from glasslab.model import ModelConfig
from glasslab.model.load import ModelSource, load_model
from glasslab.posttrain.base import BaseData
from glasslab.posttrain.pairs import read_pair_split
from glasslab.posttrain.preference import PairLoader, Preference, encode_pairs, heldout_logps, preference_metrics
from glasslab.posttrain.tuning import MethodParts, TuningRecipe, TuningStepConfig, tuning_train
from glasslab.train.config import TrainConfig
from glasslab.train.distributed import DistContext

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
    return tuning_train(max_steps=100, lr=3e-4, warmup_fraction=0.1)


class DPORecipe(TuningRecipe):
    """The parts of a DPO run: pairs as batches, the preference objective holding the frozen reference, the
    held-out preference metrics. The pairs are read and encoded once, here."""

    role = ROLE

    def __init__(self, config: DPORunConfig, base: ModelSource) -> None:
        super().__init__(config, base)
        dpo, row_len = config.dpo, config.train.seq_len + 1
        self.train, self.train_counts = encode_pairs(self.encoder, read_pair_split(dpo.pairs, "train"), row_len)
        heldout, self.heldout_counts = encode_pairs(self.encoder, read_pair_split(dpo.pairs, "heldout"), row_len)
        self.heldout = heldout[: dpo.eval_max_pairs] if dpo.eval_max_pairs else heldout
        for counts, what in ((self.train_counts, "training"), (self.heldout_counts, "held-out")):
            if not counts["kept"]:
                raise UserError(f"no {what} preference pair fits a row of train.seq_len + 1 = {row_len} tokens "
                                f"({_count_line(counts, what)}); raise train.seq_len (--seq-len)")

    def count_lines(self) -> list[str]:
        return [_count_line(self.train_counts, "training"), _count_line(self.heldout_counts, "held-out")]

    def record(self) -> dict[str, Any]:
        """``pairs`` (``{"train": counts, "heldout": counts}``) and ``beta``."""
        return {"pairs": {"train": self.train_counts, "heldout": self.heldout_counts}, "beta": self.config.dpo.beta}

    def method_parts(self, ctx: DistContext) -> MethodParts:
        cfg, beta, heldout, pad_id = self.config.train, self.config.dpo.beta, self.heldout, self.pad_id
        loader = PairLoader(self.train, cfg.global_batch_size, pad_id, seed=cfg.seed, rank=ctx.rank,
                            world_size=ctx.world_size)
        reference = load_model(self.base, ctx.device)
        reference_N2 = heldout_logps(reference, heldout, cfg.eval_batch_size, pad_id, ctx.device)

        def heldout_preference(model: nn.Module) -> dict[str, float]:
            policy_N2 = heldout_logps(model, heldout, cfg.eval_batch_size, pad_id, ctx.device)
            return preference_metrics(policy_N2, reference_N2, beta)

        return MethodParts(loader=loader, objective=Preference(reference, beta), heldout=heldout_preference,
                           flops_factor=FLOPS_FACTOR)


def _count_line(counts: dict[str, int], what: str) -> str:
    """``120 training pairs: 114 kept, 6 left out (longer than a row)``."""
    return (f"{counts['pairs']:,} {what} pairs: {counts['kept']:,} kept, {counts['left_out_long']:,} left out "
            "(longer than a row)")


@dataclass(frozen=True)
class DPOStepConfig(TuningStepConfig):
    """DPO of a base as a tuning step (:func:`~glasslab.posttrain.tuning.tune_step`): the pairs a dependency."""

    train: TrainConfig = field(default_factory=default_dpo_train)
    """The DPO run's pairs per step, budget, optimiser and schedule."""
    dpo: DPOConfig = field(default_factory=DPOConfig)
    """β and held-out eval; ``base``/``pairs`` come from the step's fields."""
    pairs_from: StepOutput = NO_OUTPUT
    """Dependency whose output folder is the pairs folder."""

    def recipe(self, base: ModelSource) -> DPORecipe:
        dpo = self.method_config(self.dpo, base, self.pairs_from, "pairs")
        return DPORecipe(DPORunConfig(**self.run_sections(base), dpo=dpo), base)
