"""Forks: a new run that starts from another run's checkpoint with a changed config.

A fork is part of the new run's identity (two forks of one config from different parents or steps
are different runs), so it is a field of the training step's config, :class:`ForkPoint`, parsed once
from ``RUN@STEP`` by the command line. The new run's ``run.json`` records its lineage (``parent``:
run id, folder and step) so the observatory can link it to its parent, and step numbers continue
from the parent's, so the curves join up.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from glasslab import config as configs
from glasslab.errors import UserError
from glasslab.lab.inputs import RunOutput
from glasslab.layout import checkpoint_problem
from glasslab.train import checkpoint as ckpt


@dataclass(frozen=True)
class ForkPoint(RunOutput):
    """Where a forked run starts: the checkpoint at ``step`` of the parent run (``run``: its run id, the folder
    name that carries its hash; ``run_dir``: where its folder is, which the executor resolves for a parent
    that is a dependency: ``ForkPoint(**run_output_of(trunk_step), step=200)``)."""

    step: int = 0
    """The parent's checkpoint step; the fork's first step is ``step + 1``."""

    @classmethod
    def at(cls, run_dir: str | Path, step: int) -> ForkPoint:
        return cls(run=Path(run_dir).name, step=step, run_dir=str(run_dir))

    @property
    def checkpoint(self) -> Path:
        return ckpt.checkpoint_path(self.run_folder, self.step)

    def lineage(self) -> dict[str, Any]:
        """What the fork's ``run.json`` records as ``parent``."""
        return {"run": self.run, "run_dir": self.run_dir, "step": self.step}

    def __str__(self) -> str:
        return f"{self.run}@{self.step}"


def fork_checkpoint(fork: ForkPoint, config_data: dict[str, Any]) -> Path:
    """The parent's checkpoint folder, checked: it exists, is intact, and has the fork's model."""
    path = fork.checkpoint
    available = [s for s, _ in ckpt.list_checkpoints(Path(fork.run_dir))]
    if not path.is_dir():
        raise UserError(f"--fork {fork}: no checkpoint at step {fork.step} in {fork.run_dir} "
                        f"(available: {', '.join(map(str, available)) or 'none'})")
    problem = checkpoint_problem(path)
    if problem is not None:
        raise UserError(f"--fork {fork}: checkpoint {path} is damaged: {problem}")
    model_changes = [k for k in configs.diff(ckpt.checkpoint_config(path), config_data) if k.startswith("model.")]
    if model_changes:
        raise UserError(f"--fork {fork}: a fork keeps the parent's model, but {', '.join(model_changes)} differ")
    return path
