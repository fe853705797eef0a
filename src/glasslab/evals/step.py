"""``glasslab eval`` as a lab step: score tasks on a run's checkpoint or on a Hugging Face model folder.

The model is one of:

- a run folder (``run.json`` + ``checkpoints/``): our model at a checkpoint, scored in memory with
  the KV-cached scorer; built-in tasks are made from the run's dataset (``data.path``);
- an export of ours (``glasslab export``: ``<lab>/export-<hash8>/`` with its manifest
  ``layout.EXPORT_MANIFEST``): loaded with ``transformers`` as anyone would load it; the manifest
  names the run, step and dataset, so built-in tasks come from the run's dataset unless ``data`` says;
- any other folder ``transformers`` loads (``config.json`` + weights + ``tokenizer.json``): a causal
  LM on disk as a baseline; built-in tasks then need ``data`` (a dataset folder).

The step writes ``result.json`` into its own folder: the model (path, kind, run id and step), each
task's ``acc``, ``acc_norm``, ``bpb``, chance level, item count and hash, the ``eval/task/...``
metrics and the macro accuracy, and the time taken. A run's checkpoint is read with
:mod:`glasslab.model.load`, as post-training and chat read theirs; nothing here knows the trainer.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from tokenizers import Tokenizer

from glasslab.data.handle import dataset_trained_on
from glasslab.data.tokenizer import EOT, load_tokenizer
from glasslab.errors import UserError
from glasslab.evals.load import MACRO_ACC, TaskScorer, load_tasks
from glasslab.evals.task import TaskConfig
from glasslab.lab.runtime import StepRuntime
from glasslab.layout import (
    CHECKPOINTS_DIR,
    EXPORT_MANIFEST,
    RESULT_FILE,
    RUN_RECORD,
    read_json,
    write_json_atomic,
)
from glasslab.model import load as model_load


@dataclass(frozen=True)
class EvalStepConfig(StepRuntime):
    """What to score and on which model."""

    model: str
    """A run folder, an export folder, or a folder ``transformers.AutoModelForCausalLM`` loads."""
    tasks: tuple[TaskConfig, ...]
    """The tasks (built-in, or JSONL files)."""
    step: int = -1
    """The run's checkpoint step (-1: its newest intact one). Ignored for model folders."""
    data: str = ""
    """Dataset folder the built-in tasks are made from (empty: the run's ``data.path``)."""


def model_kind(path: str | Path) -> str:
    """``run`` for a run folder, ``export`` for an export of ours, ``hf`` for another model folder; a
    one-line error for anything else."""
    path = Path(path)
    if (path / RUN_RECORD).is_file() or (path / CHECKPOINTS_DIR).is_dir():
        return "run"
    if (path / EXPORT_MANIFEST).is_file():
        return "export"
    from transformers.utils import CONFIG_NAME

    if (path / CONFIG_NAME).is_file():
        return "hf"
    raise UserError(f"{path}: neither a run folder ({RUN_RECORD}, {CHECKPOINTS_DIR}/) nor a model folder "
                    f"({CONFIG_NAME}); expected one of them")


def load_model(cfg: EvalStepConfig) -> tuple[torch.nn.Module, Tokenizer, int, str, dict[str, Any]]:
    """(model in eval mode, tokenizer, prefix token id, dataset for built-ins, what the result says of the model)."""
    path = Path(cfg.model)
    kind = model_kind(path)
    if kind == "run":
        source = model_load.find_model(f"{path}@{cfg.step}" if cfg.step >= 0 else str(path))
        model = model_load.load_model(source)
        dataset = cfg.data or str(dataset_trained_on(source) or "")
        tokenizer = load_tokenizer(source.tokenizer)
        about = {"path": str(path), "kind": kind, "run": path.name, "step": source.step,
                 "size_name": model.cfg.size_name()}
        return model, tokenizer, tokenizer.token_to_id(EOT), dataset, about
    import transformers

    if not (path / "tokenizer.json").is_file():
        raise UserError(f"{path}: no tokenizer.json (expected a fast tokenizer beside the weights)")
    model = transformers.AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32, local_files_only=True)
    tokenizer = Tokenizer.from_file(str(path / "tokenizer.json"))
    about = {"path": str(path), "kind": kind, "architecture": type(model).__name__,
             "parameters": sum(p.numel() for p in model.parameters())}
    if kind == "export":
        manifest = read_json(path / EXPORT_MANIFEST) or {}
        about.update(run=manifest.get("run"), step=manifest.get("step"), export=path.name)
    return model.eval(), tokenizer, _prefix_id(path, tokenizer), cfg.data, about


def _prefix_id(path: Path, tokenizer: Tokenizer) -> int:
    """The token lm-eval puts before an empty prompt: the model's BOS, else its EOS."""
    config_path = path / "tokenizer_config.json"
    special = json.loads(config_path.read_text()) if config_path.is_file() else {}
    for key in ("bos_token", "eos_token"):
        token = special.get(key)
        token = token.get("content") if isinstance(token, dict) else token
        if token and tokenizer.token_to_id(token) is not None:
            return tokenizer.token_to_id(token)
    return 0


def run_eval(cfg: EvalStepConfig, out_dir: str | Path) -> dict[str, Any]:
    """Score ``cfg.tasks`` on ``cfg.model`` and write ``out_dir/result.json``; returns what it wrote."""
    if not cfg.tasks:
        raise UserError("no tasks to score; expected at least one (e.g. --tasks next_word:code)")
    model, tokenizer, prefix_id, dataset, about = load_model(cfg)
    tasks = load_tasks(cfg.tasks, dataset or None)
    device = torch.device(cfg.device)
    model.to(device)
    started = time.perf_counter()
    metrics, results = TaskScorer(tasks, tokenizer, prefix_id)(model, device)
    seconds = time.perf_counter() - started
    result = {
        "kind": "task_eval",
        "model": about,
        "dataset": dataset,
        "device": str(device),
        "tasks": {r.name: {"acc": r.acc, "acc_norm": r.acc_norm, "bpb": r.bpb, **task.describe()}
                  for r, task in zip(results, tasks, strict=True)},
        "metrics": metrics,
        "macro_acc": metrics[MACRO_ACC],
        "seconds": seconds,
        "items_per_second": sum(r.items for r in results) / seconds,
    }
    write_json_atomic(Path(out_dir) / RESULT_FILE, result)
    return result


def eval_step(ctx: Any) -> dict[str, Any]:
    """Lab step function: :func:`run_eval` of ``ctx.config`` into ``ctx.output_dir``."""
    ctx.config.use_threads()
    return run_eval(ctx.config, ctx.output_dir)
