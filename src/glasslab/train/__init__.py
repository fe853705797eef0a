"""The trainer: turns a RunConfig into a trained, fully observed run folder.

    from glasslab.train import RunConfig, TrainConfig, train
    result = train(run_cfg, Path("lab/my-run"), device="cpu")   # -> final metrics, eval/macro/loss included

Pieces, one idea per module: ``config`` (TrainConfig), ``run_config`` (RunConfig), ``optim`` and
``muon`` (optimisers), ``schedule``, ``checkpoint``, ``rng``, ``guard`` (spike guard), ``norms``,
``evals``, ``samples``, ``throughput`` (tokens/s, MFU, memory), ``distributed`` (torchrun),
``loop`` (the Trainer), ``build`` (model/data wiring) and ``run`` (``train()``: resume, fork, signals).
``RunConfig`` and ``train`` import the model and data parts, so they load on first use.
"""

from __future__ import annotations

from typing import Any

from glasslab.train.config import GuardConfig, OptimizerConfig, ScheduleConfig, TrainConfig

__all__ = ["GuardConfig", "OptimizerConfig", "RunConfig", "ScheduleConfig", "TrainConfig", "train"]


def __getattr__(name: str) -> Any:
    if name == "RunConfig":
        from glasslab.train.run_config import RunConfig

        return RunConfig
    if name == "train":
        from glasslab.train.run import train

        return train
    raise AttributeError(f"module 'glasslab.train' has no attribute {name!r}")
