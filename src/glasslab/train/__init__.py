"""The trainer: turns a RunConfig into a trained, fully observed run folder.

    from glasslab.train import RunConfig, TrainConfig, train
    result = train(run_cfg, Path("lab/my-run"), device="cpu")   # -> final metrics, eval/macro/loss included

Pieces, one idea per module: ``config`` (TrainConfig), ``run_config`` (RunConfig), ``optim`` and
``muon`` (optimisers), ``schedule``, ``checkpoint``, ``rng``, ``guard`` (spike guard), ``norms``,
``evals``, ``samples``, ``throughput`` (tokens/s, MFU, memory), ``distributed`` (torchrun),
``loop`` (the Trainer), ``hooks`` (its hook contract), ``recipe`` (what a run trains: its parts, built by
the recipe, never chosen here), ``build`` (pretraining's recipe: model/data wiring), ``fork``,
``run`` (``train()``: resume, fork, signals) and ``steps`` (the trainer as a lab step). Post-training
(``glasslab.posttrain``) hands its own recipes in; nothing here imports it.
``RunConfig`` and ``train`` import the model and data parts, so they load on first use.
"""

from __future__ import annotations

import importlib
from typing import Any

from glasslab.train.config import GuardConfig, OptimizerConfig, ScheduleConfig, TrainConfig

# Loaded on first use (the same idiom as glasslab.data): they import the model and data parts.
_HOMES = {"RunConfig": "run_config", "train": "run"}
__all__ = ["GuardConfig", "OptimizerConfig", "RunConfig", "ScheduleConfig", "TrainConfig", "train"]


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module 'glasslab.train' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"glasslab.train.{_HOMES[name]}"), name)
    globals()[name] = value
    return value
