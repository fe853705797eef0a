"""``RunConfig``: the root of a training run's config, {``model``, ``data``, ``train``}.

It lives in ``train/`` because ``config.py`` may import no other part, and the trainer is the first
part that knows both the model and the data. Overrides address it as ``model.d_model=64``,
``data.mixture.weights.web=0.7``, ``train.optimizer.lr=3e-3``. Post-training runs have configs of their own
(``glasslab.posttrain``), with the same ``model`` and ``train`` sections.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from glasslab.data.config import DataConfig
from glasslab.model import ModelConfig
from glasslab.train.config import TrainConfig


@dataclass(frozen=True)
class RunConfig:
    """A pretraining run: which model, on which data mixture, trained how."""

    model: ModelConfig = field(default_factory=ModelConfig)
    """Architecture and size (see glasslab.model)."""
    data: DataConfig = field(default_factory=DataConfig)
    """Dataset (a data build to run, or a built folder) and mixture (see glasslab.data)."""
    train: TrainConfig = field(default_factory=TrainConfig)
    """Batch, budget, optimiser, schedule, guard and intervals."""
