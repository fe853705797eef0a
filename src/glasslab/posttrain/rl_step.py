"""RL as a method of the one tuning step (:func:`~glasslab.posttrain.tuning.tune_step`): its step config and
recipe.

``run.json`` records the role ``rl``, the ``parent`` (the base, also the KL reference), the reward, the
group size, the prompt counts and, measured before step 0, the base's held-out pass rates and replies
(``base``). The run's samples are greedy replies to held-out prompts, each followed by its reward.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from torch import nn

from glasslab.errors import UserError
from glasslab.lab import NO_OUTPUT, StepOutput
from glasslab.model.generate import generate_batch
from glasslab.model.load import ModelSource, load_model
from glasslab.posttrain.grpo import GRPO
from glasslab.posttrain.rewards import RewardTask, open_reward
from glasslab.posttrain.rl import ROLE, RLConfig, RLRunConfig, Rollouts, default_rl_train, pass_rates
from glasslab.posttrain.rl_prompts import read_prompt_split
from glasslab.posttrain.samples import chat_turns
from glasslab.posttrain.tuning import MethodParts, TuningRecipe, TuningStepConfig
from glasslab.train.config import TrainConfig
from glasslab.train.distributed import DistContext
from glasslab.train.loop import RunParts

SAMPLE_PROMPTS = 3
"""Held-out prompts whose greedy replies are the run's samples."""


class RLRecipe(TuningRecipe):
    """The parts of an RL run; prompts read and the reward opened once (a reward file's worker starts when
    first asked)."""

    role = ROLE

    def __init__(self, config: RLRunConfig, base: ModelSource) -> None:
        super().__init__(config, base)
        rl, rows = config.rl, config.train.global_batch_size
        self.train_records = read_prompt_split(rl.prompts, "train")
        heldout = read_prompt_split(rl.prompts, "heldout")
        self.heldout = heldout[: rl.eval_max_prompts] if rl.eval_max_prompts else heldout
        if rows % rl.group_size:
            raise UserError(f"train.global_batch_tokens // train.seq_len = {rows} rollouts per step is not a multiple "
                            f"of rl.group_size = {rl.group_size}")
        self.prompts_per_step = rows // rl.group_size
        self.task = open_reward(rl.reward)

    def method_parts(self, ctx: DistContext) -> MethodParts:
        if ctx.world_size != 1:
            raise UserError(f"glasslab rl runs on one process (asked for {ctx.world_size})")
        cfg, rl = self.config.train, self.config.rl
        # The policy is the model the shared build makes; build() hands it to the loader.
        loader = Rollouts(None, self.train_records, self.encoder, self.task, rl, self.prompts_per_step, cfg.seq_len,
                          cfg.seed, ctx.device)
        objective = GRPO(load_model(self.base, ctx.device), rl.kl_coef, rl.clip_eps, rl.normalise)
        # FLOPs per token: the policy's forward and backward plus the reference's forward (a third more); the
        # rollouts' generation is not counted, so MFU stays comparable with SFT's and DPO's.
        return MethodParts(loader=loader, objective=objective, flops_factor=4 / 3,
                           heldout=lambda model: pass_rates(model, self.heldout, self.encoder, self.task, rl, cfg.seed))

    def build(self, ctx: DistContext) -> RunParts:
        parts = super().build(ctx)
        parts.loader.policy = parts.model

        def sample(model: nn.Module, step: int) -> list[tuple[str, str]]:
            return replies(model, self.heldout[:SAMPLE_PROMPTS], self.encoder, self.task, self.config.rl)

        return dataclasses.replace(parts, sample=sample)

    def count_lines(self) -> list[str]:
        return [f"{len(self.train_records):,} training prompts, {len(self.heldout):,} held out (evaluated); reward "
                f"{self.task.name}"]

    def record(self) -> dict[str, Any]:
        return {"reward": self.task.name, "group_size": self.config.rl.group_size,
                "prompts": {"train": {"prompts": len(self.train_records)}, "heldout": {"prompts": len(self.heldout)}}}


def replies(model: nn.Module, records: list[dict], encoder, task: RewardTask, rl: RLConfig) -> list[tuple[str, str]]:
    """Greedy replies to ``records`` as chat turns, each reply followed by its reward."""
    prompts = [encoder.prompt_ids([{"role": "user", "content": r["prompt"]}]) for r in records]
    texts = [encoder.decode_reply(c) for c in generate_batch(model, prompts, rl.max_new_tokens, temperature=0.0,
                                                             eos_id=encoder.im_end_id)]
    values = task.score(records, texts).values
    return [(chat_turns("user", r["prompt"]), chat_turns("assistant", f"{t}\n[reward {v}]"))
            for r, t, v in zip(records, texts, values, strict=True)]


@dataclass(frozen=True)
class RLStepConfig(TuningStepConfig):
    """RL of a base as a tuning step: the prompts a dependency."""

    train: TrainConfig = field(default_factory=default_rl_train)
    """Rollouts per step, budget, optimiser and schedule."""
    rl: RLConfig = field(default_factory=RLConfig)
    """Group size, lengths, KL, clip, normalisation, the reward; ``base``/``prompts`` come from the step."""
    prompts_from: StepOutput = NO_OUTPUT
    """Dependency whose output folder is the prompts folder."""

    def recipe(self, base: ModelSource) -> RLRecipe:
        rl = self.method_config(self.rl, base, self.prompts_from, "prompts")
        return RLRecipe(RLRunConfig(**self.run_sections(base), rl=rl), base)
