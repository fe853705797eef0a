"""A task as an lm-eval-harness task (YAML over a local JSONL), and lm-eval's per-item answers for it.

The YAML reads the same items offline (``dataset_path: json``) and asks them the way glasslab does:
``doc_to_text`` is the template, ``doc_to_choice``/``doc_to_target`` the choices and answer,
``target_delimiter`` and ``fewshot_delimiter`` as the task has them, few-shot examples from the
same file with lm-eval's ``first_n`` sampler. With the model exported by
:func:`glasslab.model.export_hf`, lm-eval and glasslab then score the same token ids (see the
scorer's docstring for the split of prompt and continuation, and BOS), so every item's ``acc`` and
``acc_norm`` agree; tests and ``bench/eval_bench.py`` check it.

``lm-eval`` is an optional extra (``pip install 'glasslab[eval]'``); nothing else imports it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml

from glasslab.errors import UserError
from glasslab.evals.formats import write_items
from glasslab.evals.task import TEMPLATE_FIELD, Task
from glasslab.layout import write_text_atomic


def write_lm_eval_task(task: Task, folder: str | Path) -> Path:
    """Write ``<folder>/<task>.jsonl`` (the items) and ``<folder>/<task>.yaml``; returns the YAML's path."""
    folder = Path(folder)
    jsonl = write_items(folder / f"{task.name}.jsonl", list(task.items))
    # A bare field name makes lm-eval take the text as is (a Jinja template of digits would be parsed).
    text = "context" if task.template == TEMPLATE_FIELD else task.template.replace(TEMPLATE_FIELD, "{{context}}")
    spec: dict[str, Any] = {
        "task": task.name,
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(jsonl.resolve())}},
        "test_split": "test",
        "fewshot_split": "test",
        "fewshot_config": {"sampler": "first_n"},
        "num_fewshot": task.num_fewshot,
        "output_type": "multiple_choice",
        "doc_to_text": text,
        "doc_to_choice": "choices",
        "doc_to_target": "answer",
        "target_delimiter": task.target_delimiter,
        "fewshot_delimiter": task.fewshot_delimiter,
        "metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True},
                        {"metric": "acc_norm", "aggregation": "mean", "higher_is_better": True}],
    }
    return write_text_atomic(folder / f"{task.name}.yaml", yaml.safe_dump(spec, allow_unicode=True, sort_keys=False))


def lm_eval_items(model_dir: str | Path, task: Task, work_dir: str | Path, *, batch_size: int = 32,
                  device: str = "cpu") -> list[dict[str, Any]]:
    """lm-eval's answer for every item of ``task`` on the ``transformers`` model in ``model_dir``.

    Returns, in item order, ``{"acc", "acc_norm", "loglikelihoods"}`` (nats per choice). Runs offline:
    the items are read from ``work_dir`` and the datasets cache lives there too. lm-eval indexes only that
    task, not its ~13,000 built-in task files (which took most of a small comparison's time).
    """
    try:
        import lm_eval
        from lm_eval.tasks import TaskManager
    except ImportError:
        raise UserError("comparing with lm-eval needs it installed: pip install 'glasslab[eval]'") from None
    work_dir = Path(work_dir)
    write_lm_eval_task(task, work_dir / "tasks")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ["HF_DATASETS_CACHE"] = str(work_dir / "datasets-cache")
    results = lm_eval.simple_evaluate(
        model="hf", model_args={"pretrained": str(model_dir), "dtype": "float32", "device": device},
        tasks=[task.name], task_manager=TaskManager(include_path=str(work_dir / "tasks"), include_defaults=False),
        num_fewshot=task.num_fewshot, batch_size=batch_size, log_samples=True, random_seed=0,
        numpy_random_seed=0, torch_random_seed=0, fewshot_random_seed=0, bootstrap_iters=0,
    )
    samples = sorted(results["samples"][task.name], key=lambda s: s["doc_id"])
    return [{"acc": s["acc"], "acc_norm": s["acc_norm"],
             "loglikelihoods": [float(r[0]) for r in s["filtered_resps"]]} for s in samples]
