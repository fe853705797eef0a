"""What every post-training run shares: the base it starts from, what it measures besides its own loss,
and what ``run.json`` says about it.

- The base is a run's checkpoint (``RUN[@STEP]``) or an export, found with :mod:`glasslab.model.load`;
  its weights start the run (a fresh optimiser and schedule), its model config is the run's, its
  tokenizer (with the chat tokens) encodes the run's data.
- ``data.path`` of a post-training run is where that tokenizer is: the base's dataset when it is at hand,
  else the export the base came as. No mixture is asked for: post-training reads its own data folder.
- Forgetting is measured on the base's dataset when it is at hand: the held-out loss of each of its
  domains (``eval/<domain>/loss``, ``eval/macro/loss``) beside the run's own metrics, and the tasks of
  ``train.eval_tasks``.
- Before step 0 the base model is evaluated as the run's last evaluation will be, and its replies to the
  sample prompts are taken (``run.json`` ``base``): every final metric has its before.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from glasslab.data.chat import ChatEncoder
from glasslab.data.handle import DatasetHandle, dataset_trained_on, find_dataset
from glasslab.data.tokenizer import EOT, load_tokenizer
from glasslab.errors import UserError
from glasslab.evals.load import TaskScorer, load_tasks
from glasslab.lab import StepOutput
from glasslab.model import Transformer
from glasslab.model.load import ModelSource, find_model, load_model
from glasslab.train.build import checkpoint_activations, domain_evaluator
from glasslab.train.config import TrainConfig
from glasslab.train.distributed import DistContext
from glasslab.train.evals import TaskEvals
from glasslab.train.recipe import Recipe
from glasslab.train.rng import seed_everything

Evaluate = Any
"""``evaluate(model, step) -> {metric: value}``, as :class:`~glasslab.train.loop.RunParts` takes it."""


@dataclass(frozen=True)
class BaseData:
    """The ``data`` section of a post-training run: where its tokenizer is (no mixture: post-training reads
    its own conversations or pairs)."""

    path: str = ""
    """The base's dataset folder (its held-out domains then measure forgetting) or, for a base that came as
    an export with no dataset at hand, that export's folder (its tokenizer only)."""


def find_base(ref: str, lab: str | Path | None = None, sha256: str = "") -> ModelSource:
    """The base ``ref`` names (a run, ``RUN@STEP``, or an export), checked: a tokenizer with the chat tokens,
    and when ``sha256`` is given, the very checkpoint or export the step was planned on."""
    source = find_model(ref, lab)
    if sha256 and source.sha256 != sha256:
        raise UserError(f"{source.name}: changed since this step was planned (its manifest's sha256 differs); "
                        "run the command again")
    chat_encoder(source.tokenizer, source.folder)  # a tokenizer without the chat tokens fails here
    return source


def step_base(base: str, base_sha256: str, base_from: StepOutput, lab_root: Path | None) -> ModelSource:
    """The base a post-training step names: the folder of the step ``base_from`` refers to (a run: its newest
    checkpoint), or ``base`` under the lab, checked against the sha256 it was planned on."""
    if base_from:
        return find_base(base_from.path)
    return find_base(base, lab_root, base_sha256)


def base_data(source: ModelSource) -> BaseData:
    """The ``data`` section a run tuned from ``source`` records."""
    dataset = dataset_trained_on(source)
    return BaseData(path=str((dataset or source.tokenizer).resolve()))


def chat_encoder(tokenizer_folder: str | Path, owner: str | Path) -> ChatEncoder:
    """The chat encoder of the tokenizer in ``tokenizer_folder``; one line naming ``owner`` without chat tokens."""
    try:
        return ChatEncoder(load_tokenizer(tokenizer_folder))
    except ValueError as exc:  # a tokenizer without the chat tokens
        raise UserError(f"{owner}: {exc}") from None


def dataset_of(data: BaseData) -> DatasetHandle | None:
    """The dataset of a post-training run's ``data`` section, or None when it names an export."""
    return find_dataset(data.path)


def start_model(source: ModelSource, cfg: TrainConfig) -> Transformer:
    """The base's weights (router biases too) in a model to train; seeded as the trainer seeds."""
    seed_everything(cfg.seed)
    model = Transformer(source.model_config)
    model.load_state_dict(load_model(source).state_dict())
    model.train()
    if cfg.activation_checkpointing:
        checkpoint_activations(model.blocks)
    return model


def forgetting_evaluator(cfg: TrainConfig, data: BaseData, device: torch.device) -> Evaluate:
    """``evaluate(model, step)``: the base dataset's held-out domain losses and ``cfg.eval_tasks`` (when
    there is a dataset; tasks from files without one); an empty dict when there is nothing to measure."""
    dataset = dataset_of(data)
    tokenizer = load_tokenizer(data.path)
    if dataset is not None:
        return domain_evaluator(cfg, dataset, device, tokenizer, sorted(dataset.domains))
    tasks = TaskEvals(cfg, TaskScorer(load_tasks(cfg.eval_tasks, None), tokenizer, tokenizer.token_to_id(EOT)),
                      device)
    return lambda model, step: tasks(model, step)


def describe_run(config: Any, source: ModelSource, role: str) -> dict[str, Any]:
    """``run.json`` fields of a post-training run: size, FLOPs per token, the role, the base (``parent``),
    the dataset it measures forgetting on, and its tasks."""
    cfg = config.train
    dataset = dataset_of(config.data)
    record: dict[str, Any] = {
        "role": role,
        "size_name": config.model.size_name(),
        "param_counts": config.model.param_counts(),
        "flops_per_token": config.model.flops_per_token(cfg.seq_len),
        "parent": parent_of(source),
    }
    if dataset is not None:
        digest = dataset.manifest_hash
        record["dataset"] = {"folder": dataset.path.resolve().name, "path": str(dataset.path.resolve()),
                             "manifest_hash": digest}
        record["data_manifest_hash"] = digest
    if cfg.eval_tasks:
        record["tasks"] = {t.name: t.describe() for t in load_tasks(cfg.eval_tasks, dataset)}
    return record


def parent_of(source: ModelSource) -> dict[str, Any]:
    """The base as ``run.json`` ``parent``: the run (its folder name, where it is, the step); for an export
    also the export's folder name."""
    if source.kind == "run":
        return {"run": source.folder.name, "run_dir": str(source.folder), "step": source.step}
    return {"run": source.run, "run_dir": str(source.folder.resolve().parent / source.run) if source.run else "",
            "step": source.step, "export": source.folder.name, "export_dir": str(source.folder)}


def baseline(recipe: Recipe, device: str = "cpu") -> dict[str, Any]:
    """The base model's metrics and its replies to the sample prompts, taken before step 0 with the run's own
    evaluation and sampler (``run.json`` ``base``)."""
    torch_device = torch.device(device)
    parts = recipe.build(DistContext(device=torch_device))
    model: nn.Module = parts.model.to(torch_device)
    metrics = parts.evaluate(model, recipe.config.train.total_steps) if parts.evaluate else {}
    samples = parts.sample(model, 0) if parts.sample is not None else []
    return {"metrics": metrics, "samples": [{"prompt": p, "text": t} for p, t in samples]}
