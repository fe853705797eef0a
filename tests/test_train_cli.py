"""End to end through ``python -m glasslab train``: SIGKILL + resume is exact, SIGTERM checkpoints,
forks link to their parent, a changed config cannot resume, a bad mixture fails before compute."""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml

from conftest import run_cli, subprocess_env
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


def _popen(*args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "glasslab", *args], env=subprocess_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


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
    proc = _popen("train", str(config), "--run-dir", str(run_dir))
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
    proc = _popen("train", str(config), "--run-dir", str(parent))
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


def test_lab_step_trains_then_resumes_on_a_retry(tmp_path, dataset):
    from types import SimpleNamespace

    from glasslab.config import from_dict
    from glasslab.train import RunConfig
    from glasslab.train.steps import train_step

    run_cfg = from_dict(RunConfig, tiny_run_config(dataset, max_steps=3))
    ctx = SimpleNamespace(output_dir=tmp_path / "train-0123", config=run_cfg)
    first = train_step(ctx)
    again = train_step(ctx)  # a retried attempt finds the run and resumes from its last checkpoint
    assert first["status"] == again["status"] == "finished" and again["step"] == 3
    assert first["eval/macro/loss"] == pytest.approx(again["eval/macro/loss"])
    with RunReader(ctx.output_dir) as reader:
        assert [a["reason"] for a in reader.attempts()] == ["start", "resume"]
