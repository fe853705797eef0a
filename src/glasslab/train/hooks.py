"""The trainer's hook contract: three fixed points of the loop where other parts are told what happened.

    class MyHook(TrainerHook):
        def post_eval(self, trainer, metrics):           # metrics: {"eval/macro/loss": 3.1, ...}
            ...

    train(run_cfg, run_dir, hooks=[MyHook()])

A hook is told; it does not steer. The loop calls, in this order, on **every rank** and in the loop's
own thread (so a hook never polls the run store from a side thread):

- ``post_step(trainer, metrics)`` after each optimiser step and its interval work (evals, samples,
  checkpoints), whether the step was applied, skipped by the spike guard or ended in a rollback;
  ``metrics`` are the step's logged scalars (``train/loss``, ``optim/learning_rate``, …; a skipped
  step has no ``train/loss``).
- ``post_eval(trainer, metrics)`` after each held-out evaluation (at ``eval_interval`` and at the
  end), with its ``eval/<domain>/loss|bpb`` and ``eval/macro/loss|bpb`` (nats per token, bits per byte).
- ``post_checkpoint(trainer, path)`` after a checkpoint is complete on disk (``path`` is its folder).

What a hook may read: ``trainer.step`` (optimiser steps done), ``trainer.tokens``, ``trainer.cfg``
(``total_steps`` …), ``trainer.run_dir``, ``trainer.ctx`` (rank, device) and ``trainer.run``, the
run store's writer, which is None on ranks other than 0: a hook that records something calls
``trainer.run.annotate(...)``/``log(...)`` only where it is not None, and one that draws checks
``trainer.ctx.is_main``. Hooks must be cheap (they run inside the timed loop) and must not change
training state; a hook that needs every rank (a collective) must do the same on every rank.

A hook that holds something open (a progress bar) may also be a context manager: :func:`train`
enters it once the run is built, just before the first step, and exits it when training ends,
however it ends, so nothing is drawn before a config error.

Sinks (W&B, TensorBoard, JSONL) are not hooks: they receive everything logged through the tracker's
fan-out in ``glasslab.track``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


class TrainerHook:
    """Base class with every method a no-op; override the points you need. ``trainer`` is the
    :class:`glasslab.train.loop.Trainer` (typed loosely: the loop imports this module, not the reverse)."""

    def post_step(self, trainer: Any, metrics: dict[str, float]) -> None:
        """After an optimiser step (see the module docstring)."""

    def post_eval(self, trainer: Any, metrics: dict[str, float]) -> None:
        """After a held-out evaluation, with its ``eval/...`` metrics."""

    def post_checkpoint(self, trainer: Any, path: Path) -> None:
        """After the checkpoint in ``path`` is complete."""
