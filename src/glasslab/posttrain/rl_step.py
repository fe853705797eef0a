"""The RL run as a recipe on the trainer's contract, and as a lab step (``glasslab rl``'s ``rl`` step).

``run.json`` records the role ``rl``, the ``parent`` (the base, also the KL reference), the reward, the
prompt counts and, measured before step 0, the base's held-out pass rates and replies (``base``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from glasslab import config as configs
from glasslab.config import UNVERSIONED
from glasslab.errors import UserError
from glasslab.model.generate import generate_batch
from glasslab.model.load import ModelSource, load_model
from glasslab.posttrain.base import (
    base_data,
    baseline,
    chat_encoder,
    describe_run,
    find_base,
    forgetting_evaluator,
    start_model,
    step_base,
)
from glasslab.posttrain.grpo import GRPO
from glasslab.posttrain.rewards import open_reward
from glasslab.posttrain.rl import ROLE, RLConfig, RLRunConfig, Rollouts, default_rl_train, pass_rates
from glasslab.posttrain.rl_prompts import read_prompt_split
from glasslab.posttrain.samples import chat_turns
from glasslab.train.config import TrainConfig
from glasslab.train.distributed import DistContext
from glasslab.train.loop import RunParts
from glasslab.train.steps import has_started, train_in_folder

SAMPLE_PROMPTS = 3
"""Held-out prompts whose greedy replies are the run's samples."""


class RLRecipe:
    """The parts of an RL run (:class:`~glasslab.train.recipe.Recipe`); prompts read once."""

    def __init__(self, config: RLRunConfig, base: ModelSource | None = None) -> None:
        self.config = config
        rl, cfg = config.rl, config.train
        self.base = base or find_base(rl.base)
        self.encoder = chat_encoder(config.data.path, config.data.path)
        self.train_records = read_prompt_split(rl.prompts, "train")
        heldout = read_prompt_split(rl.prompts, "heldout")
        self.heldout = heldout[: rl.eval_max_prompts] if rl.eval_max_prompts else heldout
        rows = cfg.global_batch_size
        if rows % rl.group_size:
            raise UserError(f"train.global_batch_tokens // train.seq_len = {rows} rollouts per step is not a multiple "
                            f"of rl.group_size = {rl.group_size}")
        self.prompts_per_step = rows // rl.group_size
        self.task = open_reward(rl.reward)  # one per run: a reward file's worker is started once, when first asked

    def build(self, ctx: DistContext) -> RunParts:
        if ctx.world_size != 1:
            raise UserError(f"glasslab rl runs on one process (asked for {ctx.world_size})")
        cfg, rl = self.config.train, self.config.rl
        model = start_model(self.base, cfg)
        reference = load_model(self.base, ctx.device)
        task = self.task
        loader = Rollouts(model, self.train_records, self.encoder, task, rl, self.prompts_per_step, cfg.seq_len,
                          cfg.seed, ctx.device)
        forgetting = forgetting_evaluator(cfg, self.config.data, ctx.device)
        heldout, encoder = self.heldout, self.encoder

        def evaluate(model_to_eval: nn.Module, step: int) -> dict[str, float]:
            held = pass_rates(model_to_eval, heldout, encoder, task, rl, cfg.seed)
            return {**forgetting(model_to_eval, step), **held}

        def sample(model_to_sample: nn.Module, step: int) -> list[tuple[str, str]]:
            return replies(model_to_sample, heldout[:SAMPLE_PROMPTS], encoder, task, rl)

        # FLOPs per token: the policy's forward and backward plus the reference's forward (a third more); the
        # rollouts' generation is not counted, so MFU stays comparable with SFT's and DPO's.
        return RunParts(model=model, balancer=model.balancer, loader=loader,
                        flops_per_token=self.config.model.flops_per_token(cfg.seq_len) * 4 / 3,
                        evaluate=evaluate, sample=sample,
                        objective=GRPO(reference, rl.kl_coef, rl.clip_eps, rl.normalise))

    def describe(self) -> dict[str, Any]:
        rl = self.config.rl
        return {**describe_run(self.config, self.base, ROLE), "reward": self.task.name, "group_size": rl.group_size,
                "prompts": {"train": {"prompts": len(self.train_records)}, "heldout": {"prompts": len(self.heldout)}}}


def replies(model: nn.Module, records: list[dict], encoder, task, rl: RLConfig) -> list[tuple[str, str]]:
    """Greedy replies to ``records`` as chat turns, each reply followed by its reward."""
    prompts = [encoder.prompt_ids([{"role": "user", "content": r["prompt"]}]) for r in records]
    texts = [encoder.decode_reply(c) for c in generate_batch(model, prompts, rl.max_new_tokens, temperature=0.0,
                                                             eos_id=encoder.im_end_id)]
    values = task.score(records, texts).values
    return [(chat_turns("user", r["prompt"]), chat_turns("assistant", f"{t}\n[reward {v}]"))
            for r, t, v in zip(records, texts, values, strict=True)]


@dataclass(frozen=True)
class RLStepConfig:
    """RL of a base as a step: its own schedule; the base named, the prompts a dependency."""

    train: TrainConfig = field(default_factory=default_rl_train)
    """Rollouts per step, budget, optimiser and schedule."""
    rl: RLConfig = field(default_factory=RLConfig)
    """Group size, lengths, KL, clip, normalisation, the reward; ``base``/``prompts`` come from below."""
    base: str = ""
    """The base as ``glasslab rl`` names it: a run id under the lab or a folder, ``@STEP``; or an export."""
    base_sha256: str = ""
    """sha256 of the base checkpoint's (or export's) manifest."""
    base_from: str = ""
    """Or: the dependency whose output folder is the base run."""
    prompts_from: str = ""
    """Dependency whose output folder is the prompts folder."""
    record_extra: dict[str, Any] = field(default_factory=dict)
    command: str = field(default="", metadata=UNVERSIONED)
    """The command that planned the step, for the run page's Reproduce box."""
    device: str = field(default="cpu", metadata=UNVERSIONED)
    threads: int = field(default=0, metadata=UNVERSIONED)


def rl_recipe(cfg: RLStepConfig, inputs: dict[str, Path], lab_root: Path | None = None) -> RLRecipe:
    source = step_base(cfg.base, cfg.base_sha256, cfg.base_from, inputs, lab_root)
    prompts = str(inputs[cfg.prompts_from]) if cfg.prompts_from else cfg.rl.prompts
    rl = configs.from_dict(RLConfig, {**configs.to_dict(cfg.rl), "base": source.ref, "prompts": prompts})
    return RLRecipe(RLRunConfig(model=source.model_config, data=base_data(source), train=cfg.train, rl=rl), source)


def rl_step(ctx: Any) -> dict[str, Any]:
    """RL-tune the base into ``ctx.output_dir`` (resuming a failed attempt); return the final metrics."""
    cfg: RLStepConfig = ctx.config
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    recipe = rl_recipe(cfg, ctx.inputs, getattr(ctx, "lab_root", None))
    record_extra = {**cfg.record_extra, **({"command": cfg.command} if cfg.command else {})}
    if not has_started(ctx.output_dir):
        record_extra["base"] = baseline(recipe, cfg.device)
    return train_in_folder(recipe, ctx.output_dir, device=cfg.device, record_extra=record_extra)
