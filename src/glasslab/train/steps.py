"""The trainer as a lab step: ``Step("train", "glasslab.train.steps:train_step", config=run_cfg)``.

The step's folder is the run folder. A retried attempt (after a crash, a preemption or a failed
worker) resumes from the folder's checkpoints, so a step only counts as done once training finished.
"""

from __future__ import annotations

from typing import Any

from glasslab.track import read_record
from glasslab.train.run import train


def train_step(ctx: Any) -> dict[str, Any]:
    """Train ``ctx.config`` (a RunConfig) into ``ctx.output_dir``; return the final metrics."""
    resume = read_record(ctx.output_dir) is not None
    result = train(ctx.config, ctx.output_dir, resume=resume)
    if result["status"] != "finished":
        raise RuntimeError(f"training stopped early ({result['status']}); rerun the step to resume it")
    return result
