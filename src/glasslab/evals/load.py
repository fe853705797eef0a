"""From task configs to tasks, and from a model to every task's metrics plus their macro accuracy."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from tokenizers import Tokenizer

from glasslab.data.handle import DatasetHandle, as_dataset
from glasslab.data.tokenizer import IM_END, IM_START
from glasslab.errors import UserError
from glasslab.evals.builtin import make_builtin, resolve_domain
from glasslab.evals.formats import DEFAULT_TEMPLATES, read_items
from glasslab.evals.scorer import BATCH_TOKENS, TaskResult, encode_task, loglikelihoods, summarize
from glasslab.evals.task import Task, TaskConfig

MACRO_ACC = "eval/task/macro/acc"


def check_task(cfg: TaskConfig, dataset_dir: str | Path | DatasetHandle | None = None) -> None:
    """Fail with one line now if ``cfg`` cannot be loaded (cheap: a built-in is not made, only named)."""
    if cfg.builtin:
        if not dataset_dir:
            raise UserError(f"task.builtin={cfg.builtin!r}: built-in tasks are made from a dataset; "
                            "expected a dataset folder (a run's data.path, or --data)")
        resolve_domain(dataset_dir, cfg.builtin, cfg.domain)
    else:
        read_items(cfg.path, cfg.layout)


def load_task(cfg: TaskConfig, dataset_dir: str | Path | DatasetHandle | None = None) -> Task:
    """The task ``cfg`` names: a built-in made from ``dataset_dir`` or the items of ``cfg.path``."""
    if cfg.builtin:
        check_task(cfg, dataset_dir)
        made = make_builtin(dataset_dir, cfg.builtin, cfg.domain)
        items, template, delimiter = made.items, "{context}", ""
        name, source, dropped = cfg.name or f"{made.name}_{made.domain}", made.source, made.contaminated
    else:
        read, layout = read_items(cfg.path, cfg.layout)
        items, template, delimiter = tuple(read), DEFAULT_TEMPLATES[layout], " "
        name, source, dropped = cfg.name or Path(cfg.path).stem, str(cfg.path), 0
    if cfg.max_items:
        items = items[: cfg.max_items]
    if not items:
        raise UserError(f"task {name}: no items left (source: {source})")
    if cfg.num_fewshot >= len(items):
        raise UserError(f"task.num_fewshot={cfg.num_fewshot}: expected fewer than the task's {len(items)} items")
    template = cfg.template if cfg.template is not None else template
    delimiter = cfg.target_delimiter if cfg.target_delimiter is not None else delimiter
    fewshot_delimiter = cfg.fewshot_delimiter
    if cfg.chat:
        # The reply starts right after the assistant header, so the header takes the delimiter's place.
        template = f"{IM_START}user\n{template}{IM_END}\n{IM_START}assistant\n"
        delimiter, fewshot_delimiter = "", f"{IM_END}\n"
        name = cfg.name or f"{name}_chat"
    return Task(name=name, items=tuple(items), template=template, target_delimiter=delimiter,
                fewshot_delimiter=fewshot_delimiter, num_fewshot=cfg.num_fewshot, metric=cfg.metric,
                source=source, dropped=dropped)


def load_tasks(cfgs: Sequence[TaskConfig], dataset_dir: str | Path | DatasetHandle | None = None) -> list[Task]:
    """Every configured task (the dataset's manifest read once for all its built-ins); names must be distinct
    (each names its metrics)."""
    if dataset_dir and any(cfg.builtin for cfg in cfgs):
        dataset_dir = as_dataset(dataset_dir)
    tasks = [load_task(cfg, dataset_dir) for cfg in cfgs]
    names = [t.name for t in tasks]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise UserError(f"task name {twice[0]!r} is configured twice; expected distinct names (task.name)")
    return tasks


class TaskScorer:
    """Scores a fixed list of tasks on any model; the tasks are tokenized once, here.

    Calling it returns ``eval/task/<task>/{acc,acc_norm,bpb}`` for every task and
    ``eval/task/macro/acc`` (the mean of the tasks' headline accuracies), with the per-task results.
    """

    def __init__(self, tasks: Sequence[Task], tokenizer: Tokenizer, prefix_id: int,
                 batch_tokens: int = BATCH_TOKENS) -> None:
        self.tasks = list(tasks)
        self.encoded = [encode_task(task, tokenizer, prefix_id) for task in self.tasks]
        self.batch_tokens = batch_tokens

    def __call__(self, model: torch.nn.Module,
                 device: torch.device | str = "cpu") -> tuple[dict[str, float], list[TaskResult]]:
        results = []
        for task, encoded in zip(self.tasks, self.encoded, strict=True):
            loglik = loglikelihoods(model, encoded, device=torch.device(device), batch_tokens=self.batch_tokens)
            results.append(summarize(task, encoded, loglik))
        metrics: dict[str, float] = {}
        for result in results:
            metrics.update(result.metrics())
        if results:
            metrics[MACRO_ACC] = sum(r.headline for r in results) / len(results)
        return metrics, results
