"""The steps ``glasslab rl`` runs: prompts -> rl -> export, planned like ``glasslab sft``/``dpo``'s
(:mod:`glasslab.posttrain.plans`): the base named as the lab knows it, every file's sha256 in the config."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path

from glasslab.errors import UserError
from glasslab.lab import Step, output_of
from glasslab.posttrain.base import find_base
from glasslab.posttrain.plans import BUILTIN, _sources, _tuning_steps
from glasslab.posttrain.records import file_hashes
from glasslab.posttrain.rewards import BUILTIN_PREFIX
from glasslab.posttrain.rl_prompts import PromptsConfig, builtin_sha256, prompts_step
from glasslab.posttrain.rl_step import RLStepConfig


def rl_steps(base: str, prompts: Sequence[str], lab: str | Path, *, heldout: Sequence[str] = (),
             cfg: RLStepConfig | None = None) -> list[Step]:
    """prompts -> rl -> export for ``glasslab rl``; ``builtin`` among ``prompts`` names the built-in task's
    prompts (``cfg.rl.reward`` must then be ``builtin:TASK``)."""
    cfg = cfg or RLStepConfig()
    source = find_base(base, lab)
    builtin, files, held = _sources(prompts, heldout)
    reward = cfg.rl.reward
    is_builtin_reward = reward.startswith(BUILTIN_PREFIX)
    if builtin and not is_builtin_reward:
        raise UserError(f"prompts '{BUILTIN}' come with a built-in reward (--reward builtin:TASK), not {reward}")
    task = reward[len(BUILTIN_PREFIX):] if builtin else ""
    data = Step("prompts", prompts_step,
                PromptsConfig(builtin=task, builtin_sha256=builtin_sha256(task) if task else "", files=files,
                              heldout_files=held, file_hashes=file_hashes(files + held), seed=cfg.train.seed))
    if not is_builtin_reward:
        reward = str(Path(reward).resolve())
        cfg = dataclasses.replace(cfg, rl=dataclasses.replace(cfg.rl, reward=reward,
                                                              reward_sha256=file_hashes([reward])[reward]))
    return _tuning_steps("rl", dataclasses.replace(cfg, prompts_from=output_of(data)), data, source, lab)
