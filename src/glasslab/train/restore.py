"""A finished (or running) run's model at one of its checkpoints, outside the trainer: for evals and export."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from glasslab import config as configs
from glasslab.errors import UserError
from glasslab.model import ModelConfig, Transformer
from glasslab.train import checkpoint as ckpt


def load_run_model(run_dir: str | Path, step: int | None = None) -> tuple[Transformer, dict[str, Any], int]:
    """(model in eval mode on CPU, the run's full config as plain data, the checkpoint's step).

    ``step=None`` takes the newest intact checkpoint; a given step must have an intact checkpoint.
    """
    run_dir = Path(run_dir)
    available = [s for s, _ in ckpt.list_checkpoints(run_dir)]
    if step is None:
        found = ckpt.latest_valid(run_dir)
        if found is None:
            raise UserError(f"{run_dir}: no intact checkpoint to evaluate (expected checkpoints/step-*/)")
        step, path = found
    else:
        path = ckpt.checkpoint_path(run_dir, step)
        if step not in available:
            raise UserError(f"{run_dir}@{step}: no checkpoint at step {step} "
                            f"(available: {', '.join(map(str, available)) or 'none'})")
        problem = ckpt.problem_with(path)
        if problem is not None:
            raise UserError(f"{run_dir}@{step}: checkpoint {path} is damaged: {problem}")
    config = ckpt.checkpoint_config(path)
    model = Transformer(configs.from_dict(ModelConfig, config["model"], "model"))
    # The model's weights only: the optimiser's state and the RNGs are the trainer's business.
    ckpt.load_model_weights(model, path)
    return model.eval(), config, step
