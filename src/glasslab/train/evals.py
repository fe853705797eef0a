"""Held-out evaluation: per-domain loss (nats/token) and bits per byte, their macro means, and tasks.

Bits per byte makes domains with different tokenisation comparable: a domain's loss in nats per
token divided by ln 2 gives bits per token, and dividing by the domain's bytes per token gives bits
per byte. ``eval/macro/loss`` (the plain mean over domains) is what the scaling ladder predicts.

Downstream tasks (``train.eval_tasks``, scored by :mod:`glasslab.evals`) join the same evaluation
every ``train.task_eval_every``-th time and at the end of the run. Whether they are due depends only
on the step, so a resumed run scores them at the same steps with the same numbers.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from glasslab.evals.load import TaskScorer
from glasslab.train.callbacks import EARLY, AtIntervals
from glasslab.train.config import TrainConfig


@torch.no_grad()
def heldout_loss(model: nn.Module, batches: Iterable[tuple[torch.Tensor, torch.Tensor]], device: torch.device) -> float:
    """Mean next-token loss in nats/token over ``batches`` of (tokens, scored), each ``(B, seq_len + 1)``:
    only targets that ``scored`` flags count (held-out tokens inside text training holds too do not)."""
    nats, tokens = 0.0, 0
    for batch, scored in batches:
        batch = batch.to(device, non_blocking=True)
        logits_BTV = model(batch[:, :-1])
        targets_BT = batch[:, 1:]
        scored_BT = scored[:, 1:].to(device, non_blocking=True)
        losses_BT = F.cross_entropy(logits_BTV.float().flatten(0, 1), targets_BT.flatten(), reduction="none")
        nats += losses_BT[scored_BT.flatten()].sum().item()
        tokens += int(scored_BT.sum().item())
    if tokens == 0:
        raise ValueError("no held-out tokens to evaluate")
    return nats / tokens


def evaluate(
    model: nn.Module,
    batches_by_domain: Mapping[str, Callable[[], Iterable[torch.Tensor]]],
    bytes_per_token: Mapping[str, float],
    device: torch.device,
) -> dict[str, float]:
    """``eval/<domain>/loss``, ``eval/<domain>/bpb`` for every domain, plus ``eval/macro/{loss,bpb}``.

    ``batches_by_domain`` maps a domain to a function returning a fresh iterator of held-out batches.
    The model is put in eval mode for the duration (routing statistics are not gathered) and back;
    the caller chooses precision (the trainer runs this under its autocast).
    """
    was_training = model.training
    model.eval()
    metrics: dict[str, float] = {}
    try:
        for domain, batches in batches_by_domain.items():
            loss = heldout_loss(model, batches(), device)
            metrics[f"eval/{domain}/loss"] = loss
            metrics[f"eval/{domain}/bpb"] = loss / math.log(2) / bytes_per_token[domain]
    finally:
        model.train(was_training)
    domains = list(batches_by_domain)
    metrics["eval/macro/loss"] = sum(metrics[f"eval/{d}/loss"] for d in domains) / len(domains)
    metrics["eval/macro/bpb"] = sum(metrics[f"eval/{d}/bpb"] for d in domains) / len(domains)
    return metrics


def tasks_due(step: int, cfg: TrainConfig) -> bool:
    """Whether the evaluation at ``step`` scores the tasks: every ``task_eval_every``-th eval, and the last."""
    return every_nth_eval(step, cfg, cfg.task_eval_every)


def every_nth_eval(step: int, cfg: TrainConfig, every: int) -> bool:
    """Whether the evaluation at ``step`` is an ``every``-th one (counting from step 0) or the run's last: a
    resumed run measures at the same steps."""
    return step >= cfg.total_steps or (cfg.eval_interval > 0 and step % (cfg.eval_interval * every) == 0)


class TaskEvals:
    """Scores the run's tasks on a model (``eval/task/...`` metrics) when :func:`tasks_due` says so."""

    def __init__(self, cfg: TrainConfig, scorer: TaskScorer, device: torch.device) -> None:
        self.cfg, self.scorer, self.device = cfg, scorer, device

    def __call__(self, model: nn.Module, step: int) -> dict[str, float]:
        if not self.scorer.tasks or not tasks_due(step, self.cfg):
            return {}
        return self.scorer(model, self.device)[0]


class Evaluator(AtIntervals):
    """The trainer's held-out evaluation as a callback: ``evaluate(model, step) -> eval/... metrics`` every
    ``eval_interval`` steps and at the end, under the trainer's autocast, logged and told to ``on_eval``."""

    priority = EARLY

    def __init__(self, evaluate: Callable[[nn.Module, int], dict[str, float]], eval_interval: int) -> None:
        super().__init__(eval_interval)
        self.evaluate = evaluate

    def work(self, trainer: Any) -> None:
        with trainer.autocast():
            metrics = self.evaluate(trainer.model, trainer.step)
        trainer.record_eval(metrics)
