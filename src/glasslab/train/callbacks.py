"""The trainer's callback contract: fixed points of the loop, a priority, a request to stop, and state.

    class TokensBetweenEvals(Callback):                   # a metric of your own, kept across a resume
        def __init__(self):
            self.tokens_at_last_eval = 0
        def on_eval(self, trainer, metrics):
            trainer.log_metrics({"custom/tokens_between_evals": float(trainer.tokens - self.tokens_at_last_eval)})
            self.tokens_at_last_eval = trainer.tokens
        def state_dict(self):
            return {"tokens_at_last_eval": self.tokens_at_last_eval}
        def load_state_dict(self, state):
            self.tokens_at_last_eval = state["tokens_at_last_eval"]

    train(run_cfg, run_dir, callbacks=[TokensBetweenEvals()])

Everything the trainer does at intervals is a callback: the throughput meter (``throughput.py``),
evaluation (``evals.py``), samples (``samples.py``) and checkpoint writing (``checkpoint.py``), built
from the run's config by the trainer; the band watcher (``ladder/preregister.py``), the progress bar
(``cli/progress.py``) and :class:`StopAfter` are added by whoever starts the run. The loop calls, on
**every rank** and in its own thread, each callback in priority order (highest first; equal
priorities in the order given):

- ``on_start(trainer)`` once, after a resume or fork has been loaded, before the first step;
- ``before_step(trainer)`` before each optimiser step;
- ``after_step(trainer, metrics)`` after each step is logged, whether it was applied, skipped by the
  spike guard (no ``train/loss``) or ended in a rollback (``metrics`` empty);
- ``on_eval(trainer, metrics)`` after each held-out evaluation is logged (``eval/...`` metrics);
- ``on_checkpoint(trainer, path)`` once a checkpoint is complete on disk (``path`` is its folder);
- ``on_end(trainer, status)`` once, as training ends: ``finished``, ``preempted`` (a stop was asked
  for) or ``failed`` (an exception is on its way out: release what you hold, do no work).

Any of them may return True to ask the trainer to stop as a SIGTERM does: the request joins the next
step's one reduction (so every rank stops at the same step), that step finishes, a checkpoint is
written and training returns ``preempted``. A callback never changes the trainer's fields; it reads
``trainer.step``, ``tokens``, ``cfg``, ``run_dir``, ``ctx`` (rank, device), ``model`` and ``run``
(the run store's writer, None on ranks other than 0) and records through ``trainer.log_metrics`` and
``trainer.run``. Its ``state_dict()`` (plain data and tensors, ``{}`` for none) is saved with every
checkpoint under its ``name`` (rank 0's) and given back to ``load_state_dict`` on every rank on resume,
fork and rollback; a checkpoint without it (written before the callback existed) leaves the callback as
constructed. Callbacks run between every two steps, so keep them cheap; one that needs every rank (a
collective) must do the same on every rank.

Sinks (W&B, TensorBoard, JSONL) are not callbacks: they receive everything logged through the
tracker's fan-out in ``glasslab.track``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

FIRST, EARLY, LATE, LAST = 300, 200, -100, -1000
"""Priorities of the built-in callbacks around a user's (0): the meter stops its clock first; evals and
samples (in that order) come next, so a user's ``after_step`` sees a step's eval already told; the
progress bar is drawn late; the checkpoint is written last, once every callback has taken the step in,
so the states it saves are those of the step it is at."""


class Callback:
    """Base class with every point a no-op and no state; override what you need. ``trainer`` is the
    :class:`glasslab.train.loop.Trainer` (typed loosely: the loop imports this module, not the reverse)."""

    priority: int = 0
    """Higher runs first at every point."""

    @property
    def name(self) -> str:
        """The key of this callback's state in a checkpoint (the class name unless overridden)."""
        return type(self).__name__

    def on_start(self, trainer: Any) -> bool | None:
        """Before the first step of this process's training."""

    def before_step(self, trainer: Any) -> bool | None:
        """Before step ``trainer.step + 1``."""

    def after_step(self, trainer: Any, metrics: dict[str, float]) -> bool | None:
        """After step ``trainer.step``, with the scalars it logged."""

    def on_eval(self, trainer: Any, metrics: dict[str, float]) -> bool | None:
        """After a held-out evaluation, with its ``eval/...`` metrics."""

    def on_checkpoint(self, trainer: Any, path: Path) -> bool | None:
        """After the checkpoint in ``path`` is complete."""

    def on_end(self, trainer: Any, status: str) -> bool | None:
        """As training ends with ``status`` (``finished``, ``preempted`` or ``failed``)."""

    def state_dict(self) -> dict[str, Any]:
        """What a resume needs to continue this callback exactly; ``{}``: nothing."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""


class Callbacks:
    """A trainer's callbacks in the order they are called, and whether any asked to stop."""

    def __init__(self, callbacks: Sequence[Callback]) -> None:
        self.ordered = sorted(callbacks, key=lambda callback: -callback.priority)  # stable: ties keep their order
        names = [callback.name for callback in self.ordered]
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"callbacks named {', '.join(repeated)} more than once: their states would collide "
                             "in a checkpoint (give each its own `name`)")
        self.stop_requested = False

    def call(self, point: str, trainer: Any, *args: Any) -> None:
        """Call ``point`` (``on_start``, ``after_step``, …) on every callback; remember any request to stop."""
        for callback in self.ordered:
            if getattr(callback, point)(trainer, *args):
                self.stop_requested = True

    def state_dict(self) -> dict[str, dict[str, Any]]:
        """Each stateful callback's state by name (callbacks without state are left out)."""
        states = {callback.name: callback.state_dict() for callback in self.ordered}
        return {name: state for name, state in states.items() if state}

    def load_state_dict(self, states: dict[str, dict[str, Any]]) -> None:
        """Give each callback its saved state; one the checkpoint has nothing for keeps its own."""
        for callback in self.ordered:
            if callback.name in states:
                callback.load_state_dict(states[callback.name])


class AtIntervals(Callback):
    """Work done after every ``interval``-th step before the last (0: never), and once more at the end of a
    finished run (a stopped run does it when it resumes and finishes)."""

    def __init__(self, interval: int) -> None:
        self.interval = interval

    def after_step(self, trainer: Any, metrics: dict[str, float]) -> None:
        step = trainer.step
        if self.interval and step % self.interval == 0 and step < trainer.cfg.total_steps:
            self.work(trainer)

    def on_end(self, trainer: Any, status: str) -> None:
        if status == "finished":
            self.work(trainer)

    def work(self, trainer: Any) -> None:
        raise NotImplementedError


class StopAfter(Callback):
    """Asks the trainer to stop after ``steps`` optimiser steps the way a SIGTERM does (checkpoint written,
    the run ``preempted``, a rerun resumes): the request made before step ``steps`` joins that step's reduction."""

    def __init__(self, steps: int) -> None:
        self.steps = steps

    def before_step(self, trainer: Any) -> bool:
        return trainer.step + 1 >= self.steps
