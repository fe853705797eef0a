"""The trainer as a lab step: ``Step("train", "glasslab.train.steps:train_step", config=...)``.

The step's folder is the run folder, so the run id is the folder name. The config is a
:class:`TrainStepConfig` (or a bare RunConfig); its ``data`` names the dataset by reference (a data build
step's output, which the executor resolves, or a folder's manifest hash: ``data.reference``), and the
recipe opens it; a bare RunConfig names its folder in ``data.path``. A retried attempt — after a crash, a preemption
or a failed worker — resumes from the folder's checkpoints, so a step only counts as done once
training finished. ``glasslab train`` is this step, run as a one-step experiment.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from glasslab.config import INLINE, UNVERSIONED
from glasslab.data.reference import NO_DATASET, DatasetRef
from glasslab.errors import UserError
from glasslab.lab.inputs import NO_OUTPUT, StepOutput
from glasslab.lab.runtime import StepRuntime
from glasslab.lab.step import FunctionRef
from glasslab.track import read_record
from glasslab.train.build import Pretraining
from glasslab.train.callbacks import Callback, StopAfter
from glasslab.train.fork import ForkPoint
from glasslab.train.recipe import Recipe
from glasslab.train.run import train
from glasslab.train.run_config import RunConfig


@dataclass(frozen=True)
class TrainStepConfig(StepRuntime):
    """One training run as a step."""

    run: RunConfig
    """The run; with ``data`` set its ``data.path`` (and ``data.build``) stay empty: the reference names it."""
    record_extra: dict[str, Any] = field(default_factory=dict)
    """Fields the run's ``run.json`` records beyond the config (role, ladder, rung, seed, …)."""
    data: DatasetRef = field(default=NO_DATASET, metadata=INLINE)
    """The dataset: a data build step's output or a folder's manifest hash (empty: ``run.data.path``).
    Recorded and hashed as the ``data_from``, ``data_manifest`` and ``data_path`` fields it holds."""
    fork: ForkPoint | None = None
    """Start from another run's checkpoint (``--fork RUN@STEP``); None: from scratch. A fork made with
    ``run_output_of(step)`` starts from that dependency's run (a ladder's cooldown branch off its trunk, planned
    before the trunk exists): the executor resolves its folder."""
    hooks: tuple[str, ...] = field(default=(), metadata=UNVERSIONED)
    """Trainer callbacks (``train/callbacks.py``) as importable ``"module:name"`` factories, each called with
    no arguments in the step's process (``glasslab train`` names its progress bar here). The field keeps
    its older name so the ``step.json`` of runs made before callbacks still loads."""
    stop_after: int = field(default=0, metadata=UNVERSIONED)
    """Stop after this many steps as a preemption does (checkpoint written, the step not done, a rerun
    resumes); 0: at the end. The schedule stays the whole run's (``glasslab reproduce --until``)."""
    eval_map: StepOutput = field(default=NO_OUTPUT, metadata=UNVERSIONED)
    """A data map step of the same DAG (``output_of(map_step)``) whose clusters the held-out loss is measured per:
    the executor runs it first and resolves its folder, which the run then names in ``train.eval_map``. Not
    hashed, like every eval setting (the map is a dependency: its hash is in the step's)."""

    def run_config(self) -> RunConfig:
        """The run as it trains: with :attr:`eval_map` resolved, ``train.eval_map`` names that map's folder by its
        name (found beside the dataset, both in the lab; how a run records a map, and a replay finds it)."""
        if not self.eval_map:
            return self.run
        train = dataclasses.replace(self.run.train, eval_map=self.eval_map.folder.name)
        return dataclasses.replace(self.run, train=train)


class TrainingPreempted(RuntimeError):
    """The run stopped at a SIGTERM with a checkpoint written: the step is not done (a rerun resumes)."""

    def __init__(self, result: dict[str, Any]) -> None:
        super().__init__(f"training stopped early ({result['status']} at step {result['step']}); "
                         "rerun the step to resume it")
        self.result = result


def train_step(ctx: Any) -> dict[str, Any]:
    """Train ``ctx.config`` into ``ctx.output_dir``; return the final metrics."""
    return run_training(ctx)


def run_training(ctx: Any, record_extra: dict[str, Any] | None = None,
                 callbacks: Sequence[Callback] = ()) -> dict[str, Any]:
    """Train the step's run, resuming when its folder already holds one (an earlier, failed attempt).

    ``record_extra`` replaces the config's ``record_extra`` (the hero adds its prediction); ``callbacks``
    are added to the config's named ones. Raises :class:`TrainingPreempted` when a SIGTERM stopped it.
    """
    cfg = ctx.config if isinstance(ctx.config, TrainStepConfig) else TrainStepConfig(run=ctx.config)
    cfg.use_threads()
    recipe = Pretraining(cfg.run_config(), cfg.data)  # the run's one look at its sinks, dataset and vocabulary
    record_extra = cfg.recorded(cfg.record_extra if record_extra is None else record_extra)
    every_callback = [_make_callback(ref) for ref in cfg.hooks] + list(callbacks)
    if cfg.stop_after:
        every_callback.append(StopAfter(cfg.stop_after))
    return train_in_folder(recipe, ctx.output_dir, device=cfg.device, record_extra=record_extra,
                           callbacks=every_callback, fork=cfg.fork)


def train_in_folder(run: RunConfig | Recipe, folder: str | Path, *, device: str = "cpu",
                    record_extra: dict[str, Any] | None = None, callbacks: Sequence[Callback] = (),
                    fork: ForkPoint | None = None) -> dict[str, Any]:
    """Train ``run`` (a RunConfig, or a post-training step's recipe) into a step's ``folder``, resuming when
    the folder already holds a started run (an earlier, failed attempt; ``fork`` then no longer applies).
    Returns the final metrics; raises :class:`TrainingPreempted` when a SIGTERM stopped it."""
    resume = has_started(folder)
    result = train(run, folder, resume=resume, fork=None if resume else fork, record_extra=record_extra,
                   device=device, callbacks=callbacks)
    if result["status"] != "finished":
        raise TrainingPreempted(result)
    return result


def has_started(folder: str | Path) -> bool:
    """Whether ``folder`` holds a run that started (its ``run.json`` is written before step 0): a rerun
    resumes it, and what was recorded before step 0 stays as it was."""
    return read_record(folder) is not None


def _make_callback(ref: str) -> Callback:
    module, sep, qualname = ref.partition(":")
    if not (sep and module and qualname):
        raise UserError(f"callback {ref!r}: expected 'module:name'")
    return FunctionRef(module, qualname).load()()
