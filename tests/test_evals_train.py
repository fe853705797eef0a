"""Tasks in the training loop (exact across a resume, training untouched) and ``glasslab eval`` on a
trained tiny model, its checkpoint and its Hugging Face export: above chance, and the same answers."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from cli_runner import run_cli
from glasslab.config import from_dict
from glasslab.data.tokenizer import load_tokenizer
from glasslab.evals.load import TaskScorer, load_tasks
from glasslab.evals.task import TaskConfig
from glasslab.lab import Step, run_one_step
from glasslab.layout import EXPORT_MANIFEST, RESULT_FILE
from glasslab.model.load import find_model, load_model
from glasslab.observatory.lab_scan import Lab
from glasslab.observatory.run_page import run_page
from glasslab.track import RunReader, read_record
from glasslab.train.callbacks import Callback
from glasslab.train.export_step import ExportConfig, export_step
from glasslab.train.run import train
from glasslab.train.run_config import RunConfig
from train_data import build_tiny_dataset, tiny_run_config

TASKS = [{"builtin": "next_word", "domain": "code", "max_items": 150},
         {"builtin": "continuation", "domain": "prose", "max_items": 150, "metric": "acc_norm"}]
TASK_KEYS = ("eval/task/next_word_code/acc", "eval/task/next_word_code/acc_norm", "eval/task/next_word_code/bpb",
             "eval/task/continuation_prose/acc_norm", "eval/task/continuation_prose/bpb", "eval/task/macro/acc")


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    return build_tiny_dataset(tmp_path_factory.mktemp("evals-train"))


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


class Crash(Exception):
    pass


@pytest.mark.slow
def test_tasks_are_scored_at_evals_and_a_resumed_run_logs_the_same_numbers(tmp_path, dataset):
    common = dict(moe=True, max_steps=24, checkpoint_interval=8, eval_interval=4, sample_max_new_tokens=0)
    cfg = from_dict(RunConfig, tiny_run_config(dataset, **common, eval_tasks=TASKS, task_eval_every=2))
    train(cfg, tmp_path / "ref")

    class CrashAt19(Callback):
        def after_step(self, trainer, metrics):
            if trainer.step == 19:
                raise Crash

    with pytest.raises(Crash):
        train(cfg, tmp_path / "resumed", callbacks=[CrashAt19()])
    train(cfg, tmp_path / "resumed", resume=True)  # from the checkpoint at step 16
    train(from_dict(RunConfig, tiny_run_config(dataset, **common)), tmp_path / "plain")

    with RunReader(tmp_path / "ref") as ref, RunReader(tmp_path / "resumed") as resumed, \
            RunReader(tmp_path / "plain") as plain:
        for key in TASK_KEYS:
            steps, values = ref.scalars(key)
            assert steps == [8, 16, 24], key  # every 2nd eval (every 4 steps) and the last
            assert resumed.scalars(key) == (steps, values), key  # bit for bit
        # Scoring tasks changes nothing the run computes.
        assert ref.scalars("train/loss") == plain.scalars("train/loss")
        assert ref.scalars("eval/macro/loss") == plain.scalars("eval/macro/loss")
        macro = ref.scalars("eval/task/macro/acc")[1]
        accs = [ref.scalars("eval/task/next_word_code/acc")[1], ref.scalars("eval/task/continuation_prose/acc_norm")[1]]
    assert macro == pytest.approx([(a + b) / 2 for a, b in zip(*accs, strict=True)])
    tasks = read_record(tmp_path / "ref")["tasks"]
    assert set(tasks) == {"next_word_code", "continuation_prose"}
    assert tasks["next_word_code"]["chance"] == 0.25 and tasks["next_word_code"]["items"] == 150
    assert len(tasks["continuation_prose"]["sha256"]) == 64 and tasks["continuation_prose"]["metric"] == "acc_norm"
    assert "eval/task/macro/acc" not in read_record(tmp_path / "plain").get("tasks", {})


@pytest.fixture(scope="module")
def trained(tmp_path_factory, dataset):
    """A tiny dense model trained for 300 steps (about 80K tokens)."""
    run_dir = tmp_path_factory.mktemp("trained") / "run"
    cfg = tiny_run_config(dataset, max_steps=300, checkpoint_interval=300, sample_max_new_tokens=0,
                          optimizer={"lr": 1e-2})
    train(from_dict(RunConfig, cfg), run_dir)
    return run_dir


@pytest.mark.slow
def test_eval_command_scores_a_run_and_its_export_the_same_and_above_chance(tmp_path, dataset, trained):
    lab = tmp_path / "lab"
    shutil.copytree(trained, lab / "run")  # the run in the lab, so its page can list the results
    tasks = ["next_word:code", "continuation:prose"]
    done = run_cli("eval", "run", "--tasks", *tasks, "--lab", str(lab))
    assert done.returncode == 0, done.stderr[-3000:]
    (result_path,) = lab.glob(f"eval-run-*/{RESULT_FILE}")
    result = json.loads(result_path.read_text())
    assert result["model"]["kind"] == "run" and result["model"]["step"] == 300
    for name in ("next_word_code", "continuation_prose"):
        assert result["tasks"][name]["items"] >= 400 and result["tasks"][name]["chance"] == 0.25
    # A tiny model trained on 80K tokens already tells the next word of code from frequency-matched ones.
    assert result["tasks"]["next_word_code"]["acc"] > 0.25 + 0.05, result["tasks"]
    assert "macro acc" in done.stdout and "next_word_code" in done.stdout

    # The export step's folder (what `glasslab export` makes): its manifest names the run's dataset.
    export = run_one_step(Step("export", export_step, ExportConfig(run="run", step=300)), lab).folder
    assert export.name.startswith("export-") and (export / EXPORT_MANIFEST).is_file()
    done = run_cli("eval", str(export), "--tasks", *tasks, "--lab", str(lab))
    assert done.returncode == 0, done.stderr[-3000:]
    (hf_path,) = lab.glob(f"eval-export-*/{RESULT_FILE}")
    hf = json.loads(hf_path.read_text())
    assert hf["model"]["kind"] == "export" and (hf["model"]["run"], hf["model"]["step"]) == ("run", 300)
    assert hf["model"]["architecture"] in ("Qwen3ForCausalLM", "LlamaForCausalLM")
    assert hf["dataset"] == str(Path(dataset).resolve())
    for name, task in result["tasks"].items():
        assert hf["tasks"][name]["sha256"] == task["sha256"]
        assert (hf["tasks"][name]["acc"], hf["tasks"][name]["acc_norm"]) == (task["acc"], task["acc_norm"])
        assert hf["tasks"][name]["bpb"] == pytest.approx(task["bpb"], rel=1e-4)

    missing = run_cli("eval", str(tmp_path / "nothing"), "--tasks", "next_word:code", "--lab", str(lab))
    assert missing.returncode == 2 and "no folder at" in missing.stderr and "Traceback" not in missing.stderr
    bad = run_cli("eval", str(trained), "--tasks", "next_word:web", "--lab", str(lab))
    assert bad.returncode == 2 and "task.domain='web': expected one of" in bad.stderr
    folders = sorted(p.name.split("-")[0] for p in lab.iterdir() if p.is_dir())
    assert folders == ["eval", "eval", "events", "export", "run"]  # the steps, and the lab's event log
    # The run's page lists both results: of its checkpoint and of its export.
    listed = run_page(Lab(lab), "run")["links"]["evaluations"]
    assert [(e["kind"], e["step"]) for e in listed] == [("export", 300), ("run", 300)]
    assert listed[1]["tasks"]["next_word_code"]["acc"] == result["tasks"]["next_word_code"]["acc"]


def test_scorer_on_the_model_in_memory_matches_its_checkpoint(dataset, trained):
    source = find_model(str(trained))
    model, config, step = load_model(source), source.config, source.step
    tasks = load_tasks([TaskConfig(builtin="next_word", domain="code")], dataset)
    tokenizer = load_tokenizer(dataset)
    metrics, (result,) = TaskScorer(tasks, tokenizer, prefix_id=0)(model)
    assert step == 300 and config["train"]["max_steps"] == 300
    assert metrics["eval/task/next_word_code/acc"] == result.acc > 0.3
