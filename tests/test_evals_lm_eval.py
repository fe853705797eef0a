"""Agreement with lm-eval-harness: an exported model (the export step's folder) and a task written as an
lm-eval YAML over the same JSONL give the same answer on every item (acc and acc_norm), non-ASCII items
and few-shot included."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from glasslab.config import from_dict
from glasslab.data.tokenizer import load_tokenizer
from glasslab.evals.harness import write_lm_eval_task
from glasslab.evals.load import TaskScorer, load_task
from glasslab.evals.task import Item, Task, TaskConfig
from glasslab.lab import Step, run_one_step
from glasslab.layout import EXPORT_MANIFEST
from glasslab.model.load import find_model, load_model
from glasslab.train.export_step import ExportConfig, export_step
from glasslab.train.run import train
from glasslab.train.run_config import RunConfig
from train_data import build_tiny_dataset, tiny_run_config

EXTRA = (
    Item("Überprüfung der Zeichenkette:", (" naïve café", " 日本語のテキスト", " plain"), 1),
    Item("for i in range(10):\n        ", ("print(i)", "pass", "break"), 2),
    Item("", (" import os", " x"), 0),
    Item("Ένα κείμενο —", (" «εισαγωγικά»", " emoji 🙂", " ascii"), 0),
)


def test_the_yaml_reads_the_same_jsonl(tmp_path):
    task = Task("mix", EXTRA, template="Q: {context}\nA:", target_delimiter=" ", num_fewshot=1)
    spec = yaml.safe_load(write_lm_eval_task(task, tmp_path).read_text())
    assert spec["doc_to_text"] == "Q: {{context}}\nA:" and spec["target_delimiter"] == " "
    assert spec["dataset_path"] == "json" and spec["fewshot_config"] == {"sampler": "first_n"}
    lines = Path(spec["dataset_kwargs"]["data_files"]["test"]).read_text(encoding="utf-8").splitlines()
    assert len(lines) == 4 and "日本語のテキスト" in lines[0]  # UTF-8, not escaped


@pytest.mark.slow
def test_lm_eval_agrees_with_our_scorer_on_every_item(tmp_path):
    pytest.importorskip("lm_eval", reason="lm-eval is not installed (pip install 'glasslab[eval]')")
    from glasslab.evals.harness import lm_eval_items

    dataset = build_tiny_dataset(tmp_path)
    torch.set_num_threads(1)
    # The demo's architecture (sigmoid-routed MoE, exported as GLM-4-MoE), trained a little so choices differ.
    cfg = tiny_run_config(dataset, moe=True, max_steps=40, checkpoint_interval=40, sample_max_new_tokens=0)
    cfg["model"]["moe"]["router"] = "sigmoid"
    train(from_dict(RunConfig, cfg), tmp_path / "run")
    model = load_model(find_model(str(tmp_path / "run")))
    # What `glasslab export` makes: the export step's folder, with its manifest and model card.
    export = run_one_step(Step("export", export_step, ExportConfig(run=str(tmp_path / "run"), step=40)),
                          tmp_path / "lab").folder
    assert (export / EXPORT_MANIFEST).is_file()
    tokenizer = load_tokenizer(dataset)

    builtin = load_task(TaskConfig(builtin="next_word", domain="code", max_items=80), dataset)
    tasks = [Task("agree_zero_shot", builtin.items + EXTRA, target_delimiter=""),
             Task("agree_fewshot", EXTRA + builtin.items[:12], template="Q: {context}\nA:", num_fewshot=2)]
    for task in tasks:
        _, (ours,) = TaskScorer([task], tokenizer, prefix_id=0)(model)
        theirs = lm_eval_items(export, task, tmp_path / task.name, batch_size=16)
        assert len(theirs) == len(task.items)
        for item, lls, other in zip(task.items, ours.loglikelihoods, theirs, strict=True):
            assert other["loglikelihoods"] == pytest.approx(lls, abs=1e-3)
            assert other["acc"] == float(np.argmax(lls) == item.answer)
            norm = np.asarray(lls) / np.array([len(c) for c in item.choices])
            assert other["acc_norm"] == float(np.argmax(norm) == item.answer)
        assert np.mean([o["acc"] for o in theirs]) == ours.acc
        assert np.mean([o["acc_norm"] for o in theirs]) == ours.acc_norm
