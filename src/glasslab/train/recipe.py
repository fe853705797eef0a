"""What the trainer trains: a recipe builds a run's parts and says what ``run.json`` records about them.

The trainer never decides which parts to build. Pretraining's recipe (:class:`~glasslab.train.build.Pretraining`)
is made from a ``RunConfig``; a post-training step (SFT, DPO) makes its own recipe — its loader, objective,
evals and samples — and hands it to :func:`~glasslab.train.run.train`, as OLMo-core hands callbacks in. So
``train/`` knows nothing of post-training, and post-training knows the trainer only through this contract
and :class:`~glasslab.train.loop.RunParts`.
"""

from __future__ import annotations

from typing import Any, Protocol

from glasslab.train.distributed import DistContext
from glasslab.train.loop import RunParts


class Recipe(Protocol):
    """A run to train: its config, how to build its parts on a rank, and its record."""

    config: Any
    """The run's resolved config: a frozen dataclass with a ``train`` section (TrainConfig) and a ``model``
    section (ModelConfig). ``run.json`` and every checkpoint record it; a resume must match it (its
    unversioned fields aside)."""

    def build(self, ctx: DistContext) -> RunParts:
        """The model, loader, objective, evals and samples, for this rank of ``ctx``; bad input fails here
        with a UserError before any compute."""
        ...

    def describe(self) -> dict[str, Any]:
        """``run.json`` fields beyond the config (size name, FLOPs per token, dataset, role, parent …)."""
        ...
