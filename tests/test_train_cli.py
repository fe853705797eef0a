"""End to end through ``python -m glasslab train``: SIGKILL + resume is exact, SIGTERM checkpoints,
forks link to their parent, a changed config cannot resume, a bad mixture fails before compute."""

from __future__ import annotations

import random
import signal
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from cli_runner import run_cli, start_cli
from glasslab.cli import main as cli_main
from glasslab.track import RunReader, read_record
from glasslab.train import checkpoint as ckpt
from train_data import build_tiny_dataset, tiny_run_config


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return build_tiny_dataset(tmp_path_factory.mktemp("data"))


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data))
    return path


def _wait_for_checkpoint(run_dir: Path, proc: subprocess.Popen, at_least: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if any(step >= at_least for step, _ in ckpt.list_checkpoints(run_dir)):
            return
        if proc.poll() is not None:
            pytest.fail(f"trainer exited early ({proc.returncode}): {proc.stderr.read()[-2000:]}")
        time.sleep(0.01)
    pytest.fail("no checkpoint appeared in time")


def _final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    step, path = ckpt.list_checkpoints(run_dir)[-1]
    return ckpt.load_checkpoint(path)["model"]


def _assert_same_rng_states(run_a: Path, run_b: Path) -> None:
    """Every generator's state in the two runs' final checkpoints is the same (python, numpy, torch,
    and each CUDA device's where there is one): nothing drew an extra number after a resume."""
    (_, path_a), (_, path_b) = ckpt.list_checkpoints(run_a)[-1], ckpt.list_checkpoints(run_b)[-1]
    a, b = (ckpt.load_checkpoint(p)["trainer"]["rng"] for p in (path_a, path_b))
    assert a.keys() == b.keys() and {"python", "numpy", "torch"} <= a.keys()
    assert a["python"] == b["python"]
    assert all(np.array_equal(x, y) for x, y in zip(a["numpy"], b["numpy"], strict=True))
    assert torch.equal(a["torch"], b["torch"])
    assert all(torch.equal(x, y) for x, y in zip(a.get("cuda", []), b.get("cuda", []), strict=True))


def test_sigkill_then_resume_is_bit_identical_even_past_a_corrupt_checkpoint(tmp_path, dataset):
    config = _write(tmp_path / "run.yaml", tiny_run_config(dataset, moe=True, max_steps=120, checkpoint_interval=4))
    ref = run_cli("train", str(config), "--run-dir", str(tmp_path / "ref"))
    assert ref.returncode == 0, ref.stderr[-3000:]

    run_dir = tmp_path / "killed"
    proc = start_cli("train", str(config), "--run-dir", str(run_dir))
    _wait_for_checkpoint(run_dir, proc, at_least=random.choice([8, 12, 16, 24, 32]))
    time.sleep(random.uniform(0.0, 0.3))  # land anywhere: mid-step, mid-log, mid-checkpoint
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert not (run_dir / "result.json").exists()
    latest_step, latest = ckpt.list_checkpoints(run_dir)[-1]
    blob = (latest / "model.pt").read_bytes()
    (latest / "model.pt").write_bytes(blob[: len(blob) // 2])  # and the newest checkpoint is truncated

    resumed = run_cli("train", str(config), "--run-dir", str(run_dir), "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    # The terminal tells the story: the damaged checkpoint, and where the run picked up.
    assert f"checkpoint step {latest_step} is damaged (model.pt has" in resumed.stderr
    assert "; resuming from step " in resumed.stderr
    with RunReader(tmp_path / "ref") as a, RunReader(run_dir) as b:
        ref_steps, ref_loss = a.scalars("train/loss")
        steps, loss = b.scalars("train/loss")
        events = b.events()
        assert b.vectors("moe/layer_1/router_bias") == a.vectors("moe/layer_1/router_bias")
        assert b.scalars("eval/macro/loss") == a.scalars("eval/macro/loss")
        assert b.scalars("mixture/epochs/code") == a.scalars("mixture/epochs/code")  # loader state resumed
        epochs = a.scalars("mixture/epochs/prose")[1]
        assert [(x["step"], x["text"]) for x in b.samples()] == [(x["step"], x["text"]) for x in a.samples()]
        assert b.samples()[-1]["step"] == 120 and "eval/code/bpb" in b.scalar_keys()
    assert steps == ref_steps and steps[-1] == 120  # (a step the guard skipped is skipped in both)
    assert loss == ref_loss  # bit for bit
    assert epochs == sorted(epochs) and 0 < epochs[0] < epochs[-1]
    fallback = [e for e in events if e["kind"] == "checkpoint_fallback"]
    assert fallback and fallback[0]["step"] == latest_step and "truncated" in fallback[0]["body"]
    assert any(e["kind"] == "resume" for e in events)
    ref_weights, weights = _final_weights(tmp_path / "ref"), _final_weights(run_dir)
    assert ref_weights.keys() == weights.keys()
    assert all(torch.equal(ref_weights[k], weights[k]) for k in ref_weights)
    _assert_same_rng_states(tmp_path / "ref", run_dir)


def test_sigterm_checkpoints_and_exits_cleanly_then_a_fork_continues_it(tmp_path, dataset):
    config = _write(tmp_path / "run.yaml", tiny_run_config(dataset, max_steps=400, checkpoint_interval=4))
    parent = tmp_path / "lab" / "parent"
    proc = start_cli("train", str(config), "--run-dir", str(parent))
    _wait_for_checkpoint(parent, proc, at_least=4)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=120) == 0, proc.stderr.read()[-3000:]
    with RunReader(parent) as reader:
        preempted = [e for e in reader.events() if e["kind"] == "preempted"]
        last_step = reader.scalars("train/loss")[0][-1]
        assert reader.meta("status") == "preempted"
    assert len(preempted) == 1 and preempted[0]["step"] == last_step
    assert ckpt.checkpoint_path(parent, last_step).is_dir()

    # A fork from the preempted step, addressed by run id: new mixture, larger batch, shorter schedule.
    step = last_step
    rc = cli_main(["train", "--fork", f"parent@{step}", "--lab", str(tmp_path / "lab"),
                   "data.mixture.weights.code=0.9", "train.global_batch_tokens=512", f"train.max_steps={step + 6}"])
    assert rc == 0
    (child,) = (tmp_path / "lab").glob(f"parent-fork{step}-*")
    record = read_record(child)
    assert record["parent"]["run"] == "parent" and record["parent"]["step"] == step
    with RunReader(child) as reader, RunReader(parent) as parent_reader:
        fork_events = [e for e in reader.events() if e["kind"] == "fork"]
        steps, losses = reader.scalars("train/loss")
        _, tokens = reader.scalars("train/tokens")
        _, parent_losses = parent_reader.scalars("train/loss")
    for changed in ("data.mixture.weights.code", "train.max_steps", "train.global_batch_tokens"):
        assert changed in fork_events[0]["body"]
    assert steps == list(range(step + 1, step + 7))  # the curve continues where the parent stopped
    assert tokens == [step * 256 + 512 * i for i in range(1, 7)]
    assert abs(losses[0] - parent_losses[-1]) < 0.5 * parent_losses[0]


def test_resume_with_a_changed_config_names_the_fields(tmp_path, dataset, capsys):
    config = _write(tmp_path / "run.yaml", tiny_run_config(dataset, max_steps=2, checkpoint_interval=1))
    run_dir = tmp_path / "run"
    assert cli_main(["train", str(config), "--run-dir", str(run_dir)]) == 0
    capsys.readouterr()
    rc = cli_main(["train", str(config), "model.d_model=64", "train.global_batch_tokens=512",
                   "train.eval_interval=5", "--run-dir", str(run_dir), "--resume"])
    err = capsys.readouterr().err
    assert rc == 2 and "model.d_model" in err and "train.global_batch_tokens" in err
    assert "eval_interval" not in err  # unversioned fields may change
    assert cli_main(["train", str(config), "--run-dir", str(run_dir)]) == 2  # exists: needs --resume
    assert "pass --resume" in capsys.readouterr().err


def test_a_start_that_died_before_its_record_does_not_block_the_next(tmp_path, dataset, monkeypatch, capsys):
    """``track.init`` opens the run store before it writes ``run.json``: a start that fails in between
    (here the record cannot be built) leaves a store and nothing trained. The next start of the same folder
    (a lab step's retry) removes it and trains, where it used to be refused as "already holds a run"."""
    from glasslab import track

    config = _write(tmp_path / "run.yaml", tiny_run_config(dataset, max_steps=2, checkpoint_interval=1))
    run_dir = tmp_path / "run"
    real = track.build_record

    def broken(*args, **kwargs):
        raise OSError("git is not answering")

    monkeypatch.setattr(track, "build_record", broken)
    with pytest.raises(OSError):
        cli_main(["train", str(config), "--run-dir", str(run_dir)])
    assert (run_dir / "metrics.db").exists() and read_record(run_dir) is None
    monkeypatch.setattr(track, "build_record", real)
    assert cli_main(["train", str(config), "--run-dir", str(run_dir)]) == 0, capsys.readouterr().err
    with RunReader(run_dir) as reader:
        assert [a["reason"] for a in reader.attempts()] == ["start"] and reader.scalars("train/loss")[0] == [1, 2]


def test_a_model_vocabulary_smaller_than_the_tokenizer_fails_before_any_compute(tmp_path, dataset, capsys):
    config = _write(tmp_path / "run.yaml", tiny_run_config(dataset, max_steps=2))
    assert cli_main(["train", str(config), "model.vocab_size=100", "--run-dir", str(tmp_path / "run")]) == 2
    assert "model.vocab_size=100: expected at least the 512 tokens" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_an_empty_mixture_fails_before_any_compute(tmp_path, dataset, capsys):
    data = tiny_run_config(dataset, max_steps=2)
    data["data"]["mixture"] = {"weights": {}}
    config = _write(tmp_path / "run.yaml", data)
    assert cli_main(["train", str(config), "--run-dir", str(tmp_path / "run")]) == 2
    assert "mixture" in capsys.readouterr().err
    assert not (tmp_path / "run").exists()


def test_the_same_data_at_another_path_resumes_and_other_data_does_not(tmp_path, dataset, capsys):
    """A run resumed where its dataset lies elsewhere (another node's working copy of an object-store lab):
    the same manifest is the same data; a changed shard is not."""
    import shutil

    config = _write(tmp_path / "run.yaml", tiny_run_config(dataset, max_steps=2, checkpoint_interval=1))
    run_dir = tmp_path / "run"
    assert cli_main(["train", str(config), "--run-dir", str(run_dir)]) == 0
    moved = shutil.copytree(dataset, tmp_path / "elsewhere" / dataset.name)
    assert cli_main(["train", str(config), f"data.path={moved}", "train.max_steps=2", "--run-dir", str(run_dir),
                     "--resume"]) == 0
    (moved / "manifest.json").write_text((moved / "manifest.json").read_text() + "\n")  # another manifest hash
    capsys.readouterr()
    assert cli_main(["train", str(config), f"data.path={moved}", "--run-dir", str(run_dir), "--resume"]) == 2
    assert "data.path" in capsys.readouterr().err


def test_lab_step_trains_then_resumes_on_a_retry(tmp_path, dataset):
    from types import SimpleNamespace

    from glasslab.config import from_dict
    from glasslab.train.run_config import RunConfig
    from glasslab.train.steps import train_step

    run_cfg = from_dict(RunConfig, tiny_run_config(dataset, max_steps=3))
    ctx = SimpleNamespace(output_dir=tmp_path / "train-0123", config=run_cfg)
    first = train_step(ctx)
    again = train_step(ctx)  # a retried attempt finds the run and resumes from its last checkpoint
    assert first["status"] == again["status"] == "finished" and again["step"] == 3
    assert first["eval/macro/loss"] == pytest.approx(again["eval/macro/loss"])
    with RunReader(ctx.output_dir) as reader:
        assert [a["reason"] for a in reader.attempts()] == ["start", "resume"]


def test_train_is_a_step_with_a_record_events_and_a_cached_rerun(tmp_path, dataset, capsys):
    from glasslab.lab import Step, make_plan, read_step_record
    from glasslab.track import read_lab_events
    from glasslab.train.steps import train_step

    config = _write(tmp_path / "tiny run.yaml", tiny_run_config(dataset, max_steps=3, checkpoint_interval=2))
    lab = tmp_path / "lab"
    assert cli_main(["train", str(config), "--lab", str(lab)]) == 0
    (folder,) = lab.glob("tiny_run-*")
    record = read_step_record(folder)
    assert record["status"] == "succeeded" and record["name"] == "tiny_run" and record["attempts"] == 1
    assert folder.name == f"tiny_run-{record['hash'][:8]}" and record["function"].endswith("steps:train_step")
    assert record["result"]["step"] == 3 and record["config"]["fork"] is None
    events = [(e["kind"], e["subject"]) for e in read_lab_events(lab)]
    assert events == [("step_started", folder.name), ("step_succeeded", folder.name)]
    out = capsys.readouterr().out
    assert f"{folder}: finished at step 3, eval/macro/loss" in out

    # The same command again finds it; so does a resume of the folder without its config (from step.json).
    assert cli_main(["train", str(config), "--lab", str(lab)]) == 0
    assert cli_main(["train", "--run-dir", str(folder), "--resume"]) == 0
    out = capsys.readouterr().out
    assert out.count("finished before (cached) at step 3") == 2 and read_step_record(folder)["attempts"] == 1
    # A pinned folder (--run-dir) is the step's folder: its record holds the same hash, its parent is the lab.
    pinned = tmp_path / "elsewhere" / "mine"
    assert cli_main(["train", str(config), "--run-dir", str(pinned)]) == 0
    assert read_step_record(pinned)["hash"] == record["hash"] and read_step_record(pinned)["folder"] == "mine"
    assert [e["subject"] for e in read_lab_events(pinned.parent)] == ["mine", "mine"]
    plan = make_plan([Step("tiny_run", train_step, _step_config(config))], lab)
    assert plan.steps[0].folder == folder and plan.steps[0].action == "cached"


def _step_config(config: Path):
    from glasslab import config as configs
    from glasslab.cli.progress import CALLBACK
    from glasslab.data.reference import DatasetRef
    from glasslab.train.run_config import RunConfig
    from glasslab.train.steps import TrainStepConfig

    run = configs.load(RunConfig, config)  # the step names its dataset by manifest hash, not by path
    return TrainStepConfig(configs.replace(run, ["data.path="]), hooks=(CALLBACK,),
                           data=DatasetRef.of_folder(run.data.path))


def test_a_mixture_naming_an_unknown_domain_fails_before_any_folder_or_progress_bar(tmp_path, dataset, capsys):
    data = tiny_run_config(dataset, max_steps=2)
    data["data"]["mixture"] = {"weights": {"code": 0.5, "poetry": 0.5}}
    config = _write(tmp_path / "run.yaml", data)
    assert cli_main(["train", str(config), "--lab", str(tmp_path / "lab")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""  # no progress bar drawn, not even an empty one
    assert captured.err.count("\n") == 1 and "poetry" in captured.err and captured.err.startswith("glasslab train:")
    assert not (tmp_path / "lab").exists()


CRASHING_EXPERIMENT = """
import os, signal

from glasslab.config import from_dict
from glasslab.lab import Step
from glasslab.train.run_config import RunConfig
from glasslab.train.callbacks import Callback
from glasslab.train.steps import TrainStepConfig, run_training


class KillAfterCheckpoint(Callback):
    def on_checkpoint(self, trainer, path):
        if trainer.step >= 4:
            os.kill(os.getpid(), signal.SIGKILL)  # a crash (or a preempted machine) right after step 4's checkpoint


def crash_once(ctx):
    return run_training(ctx, callbacks=[KillAfterCheckpoint()] if ctx.attempt == 1 else [])


def steps():
    return [Step("crashy", crash_once, TrainStepConfig(from_dict(RunConfig, CONFIG)))]
"""


def test_retries_resume_a_crashed_training_step_from_its_checkpoint(tmp_path, dataset):
    from glasslab.lab import read_step_record
    from glasslab.track import read_lab_events

    config = tiny_run_config(dataset, max_steps=6, checkpoint_interval=2)
    experiment = tmp_path / "crashy.py"
    experiment.write_text(CRASHING_EXPERIMENT.replace("CONFIG", repr(config)))
    lab = tmp_path / "lab"
    done = run_cli("run", str(experiment), "--lab", str(lab), "--retries", "1")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (folder,) = lab.glob("crashy-*")
    record = read_step_record(folder)
    assert record["status"] == "succeeded" and record["attempts"] == 2 and record["retry"]["count"] == 1
    assert "killed by SIGKILL" in record["history"][0]["error"]
    retried = [e for e in read_lab_events(lab) if e["kind"] == "step_retried"]
    assert len(retried) == 1 and retried[0]["subject"] == folder.name and retried[0]["severity"] == "warning"
    assert "resuming from step 4" in (folder / "step.log").read_text()
    with RunReader(folder) as reader:
        assert [a["reason"] for a in reader.attempts()] == ["start", "resume"]
        assert reader.scalars("train/loss")[0][-1] == 6
