"""The trainer as a lab step: ``Step("train", "glasslab.train.steps:train_step", config=...)``.

The step's folder is the run folder, so the run id is the folder name. The config is a
:class:`TrainStepConfig` (or a bare RunConfig); with ``data_from`` set, ``data.path`` is taken from
that dependency's output folder (a data build step). A retried attempt — after a crash, a preemption
or a failed worker — resumes from the folder's checkpoints, so a step only counts as done once
training finished.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from glasslab.config import UNVERSIONED
from glasslab.track import read_record
from glasslab.train.run import train
from glasslab.train.run_config import RunConfig


@dataclass(frozen=True)
class TrainStepConfig:
    """One training run as a step."""

    run: RunConfig
    """The run; its ``data.path`` is filled from ``data_from`` when that is set."""
    record_extra: dict[str, Any] = field(default_factory=dict)
    """Fields the run's ``run.json`` records beyond the config (role, ladder, rung, seed, …)."""
    data_from: str = ""
    """Name of the dependency whose output folder is the dataset (empty: ``run.data.path`` as given)."""
    device: str = field(default="cpu", metadata=UNVERSIONED)
    """Where to train (``cpu``, ``cuda``): it changes where, not what, is computed."""
    threads: int = field(default=0, metadata=UNVERSIONED)
    """torch CPU threads for this step (0 = torch's default)."""


def train_step(ctx: Any) -> dict[str, Any]:
    """Train ``ctx.config`` into ``ctx.output_dir``; return the final metrics."""
    cfg = ctx.config if isinstance(ctx.config, TrainStepConfig) else TrainStepConfig(run=ctx.config)
    return run_training(ctx, cfg.record_extra)


def run_training(ctx: Any, record_extra: dict[str, Any]) -> dict[str, Any]:
    """Train the step's run with ``record_extra`` in its run.json (resuming after a failed attempt)."""
    cfg = ctx.config if isinstance(ctx.config, TrainStepConfig) else TrainStepConfig(run=ctx.config)
    if cfg.threads:
        import torch

        torch.set_num_threads(cfg.threads)
    run_cfg = cfg.run
    if cfg.data_from:
        data = dataclasses.replace(run_cfg.data, path=str(ctx.inputs[cfg.data_from]))
        run_cfg = dataclasses.replace(run_cfg, data=data)
    resume = read_record(ctx.output_dir) is not None
    result = train(run_cfg, ctx.output_dir, resume=resume, record_extra=record_extra, device=cfg.device)
    if result["status"] != "finished":
        # Preempted (SIGTERM): the checkpoint is written; the step must not count as done.
        raise RuntimeError(f"training stopped early ({result['status']}); rerun the step to resume it")
    return result
