"""The training progress bar of ``glasslab train``: a trainer hook, drawn on rank 0 only.

The trainer renders nothing itself; ``glasslab train`` names this hook in its step's config
(``TrainStepConfig.hooks``), the step builds it, and ``train()`` enters it just before the first
step — so a config error is reported before anything is drawn, and the bar is gone however the run ends.
"""

from __future__ import annotations

import os
from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from glasslab.train.hooks import TrainerHook

HOOK = "glasslab.cli.progress:TrainingProgress"
"""How a step config names this hook (it is built in the step's process)."""


class TrainingProgress(TrainerHook):
    """Steps done of the total, the last training loss and the time left."""

    def __init__(self) -> None:
        self.bar: Progress | None = None
        self.task: Any = None

    def __enter__(self) -> TrainingProgress:
        if int(os.environ.get("RANK", "0")) == 0:
            columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                       TextColumn("loss {task.fields[loss]}"), TimeRemainingColumn())
            self.bar = Progress(*columns)
            self.bar.start()
            self.task = self.bar.add_task("training", total=None, loss="-")
        return self

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def post_step(self, trainer: Any, metrics: dict[str, float]) -> None:
        if self.bar is None:
            return
        fields = {"loss": f"{metrics['train/loss']:.4f}"} if "train/loss" in metrics else {}
        self.bar.update(self.task, description=trainer.run_dir.name, completed=trainer.step,
                        total=trainer.cfg.total_steps, **fields)
