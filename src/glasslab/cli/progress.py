"""The training progress bar of ``glasslab train``: a trainer callback, drawn on rank 0 only.

The trainer renders nothing itself; ``glasslab train`` names this callback in its step's config
(``TrainStepConfig.hooks``), the step builds it, and the trainer starts it just before the first step
(``on_start``) — so a config error is reported before anything is drawn — and stops it as training
ends (``on_end``), however it ends.
"""

from __future__ import annotations

from typing import Any

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

from glasslab.train.callbacks import LATE, Callback

CALLBACK = "glasslab.cli.progress:TrainingProgress"
"""How a step config names this callback (it is built in the step's process)."""


class TrainingProgress(Callback):
    """Steps done of the total, the last training loss and the time left."""

    priority = LATE  # drawn once the step's evals and checkpoints are done

    def __init__(self) -> None:
        self.bar: Progress | None = None
        self.task: Any = None

    def on_start(self, trainer: Any) -> None:
        if trainer.ctx.is_main:
            columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                       TextColumn("loss {task.fields[loss]}"), TimeRemainingColumn())
            self.bar = Progress(*columns)
            self.bar.start()
            self.task = self.bar.add_task(trainer.run_dir.name, completed=trainer.step,
                                          total=trainer.cfg.total_steps, loss="-")

    def after_step(self, trainer: Any, metrics: dict[str, float]) -> None:
        if self.bar is None:
            return
        fields = {"loss": f"{metrics['train/loss']:.4f}"} if "train/loss" in metrics else {}
        self.bar.update(self.task, completed=trainer.step, **fields)

    def on_end(self, trainer: Any, status: str) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None
