"""RL with verifiable rewards (GRPO, :mod:`glasslab.posttrain.grpo`): the run's config, its rollout loader
and its held-out pass rates. The recipe that assembles them is :mod:`glasslab.posttrain.rl_step`'s.

The *rollout loader*'s ``next_batch`` samples ``G`` answers to each of the step's prompts with the policy
itself (batched, KV-cached: :func:`~glasslab.model.generate.generate_batch`), scores them
(:mod:`glasslab.posttrain.rewards`) and lays them out with their advantages.

The loader's state — where it is in the prompts (epoch, row) and the sampler's RNG state — is part of
every checkpoint, so a run killed at any point resumes to the same rollouts, bit for bit on CPU.

A step's batch is ``train.global_batch_tokens // train.seq_len`` rollouts: that many / ``rl.group_size``
prompts, each answered ``group_size`` times; a prompt plus its answer must fit ``train.seq_len`` tokens.
"""

from __future__ import annotations

import base64
import sys
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
from torch import nn

from glasslab.config import UNVERSIONED, require
from glasslab.data.chat import ChatEncoder
from glasslab.data.tokenizer import PAD
from glasslab.errors import UserError
from glasslab.model import ModelConfig
from glasslab.model.generate import generate_batch
from glasslab.posttrain.base import BaseData
from glasslab.posttrain.grpo import NORMALISATIONS, collate_rollouts, group_advantages
from glasslab.posttrain.rewards import RewardTask, Scores
from glasslab.posttrain.stream import EpochStream
from glasslab.train.config import OptimizerConfig, ScheduleConfig, TrainConfig

ROLE = "rl"
PASS = 1.0
"""A completion passes when its reward reaches this (full marks on the built-in tasks)."""


@dataclass(frozen=True)
class RLConfig:
    """What an RL run starts from, answers and is rewarded by."""

    base: str = ""
    """The base and KL reference: ``RUN_DIR@STEP`` or an export's folder (a step fills it in)."""
    prompts: str = ""
    """A prompts folder (:mod:`glasslab.posttrain.rl_prompts`)."""
    reward: str = "builtin:arithmetic"
    """``builtin:arithmetic``, ``builtin:code`` or a reward file's path."""
    reward_sha256: str = ""
    """sha256 of the reward file (empty for a built-in task), so an edited reward makes a new folder."""
    group_size: int = 8
    """G: answers sampled per prompt; advantages are relative within them."""
    max_new_tokens: int = 12
    """Tokens an answer may take (the rollout stops at the end of the assistant's turn)."""
    temperature: float = 1.0
    """Sampling temperature of the rollouts (and of held-out pass@k)."""
    kl_coef: float = 0.02
    """β of the KL to the base (0: no KL term; ``rl/kl`` is still measured)."""
    clip_eps: float = 0.2
    """ε of the clipped ratio."""
    normalise: str = "token"
    """``token`` or ``sequence``: what the loss averages over (docs/rl.md says why token is the default)."""
    eval_max_prompts: int = field(default=100, metadata=UNVERSIONED)
    """Held-out prompts in the ``eval/rl/...`` metrics (0 = all)."""

    def __post_init__(self) -> None:
        require(self.group_size >= 2, "rl.group_size", self.group_size, ">= 2 (advantages compare within a group)")
        require(self.max_new_tokens >= 1, "rl.max_new_tokens", self.max_new_tokens, ">= 1")
        require(self.temperature > 0, "rl.temperature", self.temperature, "a positive number")
        require(self.kl_coef >= 0, "rl.kl_coef", self.kl_coef, ">= 0")
        require(0 < self.clip_eps < 1, "rl.clip_eps", self.clip_eps, "between 0 and 1")
        require(self.normalise in NORMALISATIONS, "rl.normalise", self.normalise, " or ".join(NORMALISATIONS))


@dataclass(frozen=True)
class RLRunConfig:
    """An RL run as ``run.json`` and its checkpoints record it."""

    model: ModelConfig
    data: BaseData
    train: TrainConfig
    rl: RLConfig


def default_rl_train() -> TrainConfig:
    """A short RL schedule: 64 rollouts (8 prompts × 8) per step, constant LR after a brief warmup."""
    return TrainConfig(seq_len=64, global_batch_tokens=64 * 64, max_steps=40,
                       optimizer=OptimizerConfig(lr=1e-4, weight_decay=0.0),
                       schedule=ScheduleConfig(kind="linear", warmup_fraction=0.05, min_lr_ratio=1.0),
                       eval_interval=20, sample_prompts=("",), sample_max_new_tokens=12, checkpoint_interval=20)


class Rollouts(EpochStream):
    """The trainer's loader for RL: each ``next_batch`` answers the next prompts ``group_size`` times with the
    policy and scores the answers. The items of its stream (:mod:`glasslab.posttrain.stream`) are the
    prompts, each epoch in an order drawn from (seed, epoch); its state adds the sampler's RNG state."""

    name = "rl"

    def __init__(self, policy: nn.Module | None, records: list[dict], encoder: ChatEncoder, task: RewardTask,
                 rl: RLConfig, prompts_per_step: int, seq_len: int, seed: int,
                 device: torch.device | str = "cpu") -> None:
        super().__init__(prompts_per_step, seed, rank=0, world_size=1)
        self.policy, self.records, self.encoder, self.task, self.rl = policy, records, encoder, task, rl
        self.prompt_ids = [encoder.prompt_ids([{"role": "user", "content": r["prompt"]}]) for r in records]
        longest = max(len(p) for p in self.prompt_ids) + rl.max_new_tokens
        if longest > seq_len + 1:
            raise UserError(f"a prompt plus rl.max_new_tokens takes {longest} tokens; raise train.seq_len "
                            f"(--seq-len) to at least {longest - 1}")
        self.pad_id = encoder.tokenizer.token_to_id(PAD)
        self.generator = torch.Generator(device=device).manual_seed(seed)
        self.failures_said = 0

    def items_of_epoch(self, epoch: int) -> list[int]:
        return np.random.default_rng([self.seed, epoch]).permutation(len(self.records)).tolist()

    def next_batch(self):
        chosen = [i for i in self.draw() for _ in range(self.rl.group_size)]
        prompts = [self.prompt_ids[i] for i in chosen]
        completions = generate_batch(self.policy, prompts, self.rl.max_new_tokens, self.rl.temperature,
                                     generator=self.generator, eos_id=self.encoder.im_end_id)
        scores = self.task.score([self.records[i] for i in chosen], [self.encoder.decode_reply(c) for c in completions])
        self._say(scores)
        advantages, no_spread = group_advantages(scores.values, self.rl.group_size)
        batch = collate_rollouts(prompts, completions, advantages, self.pad_id, self.rl.normalise)
        batch.stats = rollout_stats(scores, no_spread, completions, self.global_batch)
        return batch

    def _say(self, scores: Scores) -> None:
        """Name the reward's failures on the console (the first few of a run; all are counted in the metrics)."""
        for failure in scores.failures[: max(0, 5 - self.failures_said)]:
            print(f"[rl] reward failed, sample left out of its group: {failure}", file=sys.stderr, flush=True)
        self.failures_said += len(scores.failures)

    def identity(self) -> dict[str, Any]:
        return {**super().identity(), "prompts": len(self.records), "group_size": self.rl.group_size}

    def state_dict(self) -> dict:
        # A skipped step (a rollback's window) advances the prompts only: the sampler's RNG stays where it is.
        rng = base64.b64encode(self.generator.get_state().numpy().tobytes()).decode("ascii")
        return {**super().state_dict(), "sampler_rng": rng}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        rng = np.frombuffer(base64.b64decode(state["sampler_rng"]), dtype=np.uint8).copy()
        self.generator.set_state(torch.from_numpy(rng))


def rollout_stats(scores: Scores, no_spread: int, completions: list[list[int]], groups: int) -> dict[str, float]:
    """``rl/...`` of one step's rollouts: reward mean and spread (over the kept samples), the share of groups
    with no spread, failures, mean completion length (tokens)."""
    kept = torch.tensor([v for v in scores.values if v is not None], dtype=torch.float64)
    return {"rl/reward_mean": float(kept.mean()) if len(kept) else float("nan"),
            "rl/reward_std": float(kept.std(unbiased=False)) if len(kept) else float("nan"),
            "rl/groups_no_spread": no_spread / groups, "rl/reward_failures": float(len(scores.failures)),
            "rl/answer_failures": float(scores.answer_failures),
            "rl/completion_tokens": float(np.mean([len(c) for c in completions]))}


def pass_rates(model: nn.Module, records: list[dict], encoder: ChatEncoder, task: RewardTask, rl: RLConfig,
               seed: int) -> dict[str, float]:
    """Held-out ``eval/rl/pass_at_1`` (greedy), ``eval/rl/pass_at_G`` (any of G samples at the rollouts'
    temperature, from a generator seeded ``seed``) and ``eval/rl/reward_mean`` (greedy)."""
    prompts = [encoder.prompt_ids([{"role": "user", "content": r["prompt"]}]) for r in records]
    greedy = generate_batch(model, prompts, rl.max_new_tokens, temperature=0.0, eos_id=encoder.im_end_id)
    greedy_values = task.score(records, [encoder.decode_reply(c) for c in greedy]).values
    generator = torch.Generator(device=model.embed.weight.device).manual_seed(seed)
    k = rl.group_size
    sampled = generate_batch(model, [p for p in prompts for _ in range(k)], rl.max_new_tokens, rl.temperature,
                             generator=generator, eos_id=encoder.im_end_id)
    sampled_values = task.score([r for r in records for _ in range(k)],
                                [encoder.decode_reply(c) for c in sampled]).values
    passed_NK = np.array([(v or 0.0) >= PASS for v in sampled_values]).reshape(len(records), k)
    return {"eval/rl/pass_at_1": float(np.mean([(v or 0.0) >= PASS for v in greedy_values])),
            f"eval/rl/pass_at_{k}": float(passed_NK.any(axis=1).mean()),
            "eval/rl/reward_mean": float(np.mean([v or 0.0 for v in greedy_values]))}
