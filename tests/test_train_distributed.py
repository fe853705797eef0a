"""torchrun on CPU (gloo): 2 processes give the 1-process loss curve, with identical router biases."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cli_runner import run_cli, subprocess_env
from glasslab.lab import read_step_record
from glasslab.track import RunReader, read_lab_events
from train_data import build_tiny_dataset, tiny_run_config

STEPS = 6


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return build_tiny_dataset(tmp_path_factory.mktemp("data"))


@pytest.fixture(scope="module")
def single_process_curve(dataset, tmp_path_factory) -> list[float]:
    root = tmp_path_factory.mktemp("single")
    config = root / "run.yaml"
    config.write_text(yaml.safe_dump(_config(dataset)))
    done = run_cli("train", str(config), "--run-dir", str(root / "run"))
    assert done.returncode == 0, done.stderr[-3000:]
    with RunReader(root / "run") as reader:
        return reader.scalars("train/loss")[1]


def _config(dataset: Path) -> dict:
    # Two micro-batches on one process = one per rank on two: the same global batch either way.
    return tiny_run_config(dataset, moe=True, max_steps=STEPS, checkpoint_interval=STEPS, micro_batch_size=4,
                           sample_prompts=[])


def _torchrun(run_dir: Path, config: Path, *overrides: str) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
               "-m", "glasslab", "train", str(config), *overrides, "--run-dir", str(run_dir)]
    return subprocess.run(command, env=subprocess_env(), capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("parallelism", ["ddp", "fsdp"])
def test_two_cpu_ranks_match_one_process(tmp_path, dataset, single_process_curve, parallelism):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(_config(dataset)))
    done = _torchrun(tmp_path / "run", config, f"train.parallelism={parallelism}")
    assert done.returncode == 0, done.stderr[-4000:]
    with RunReader(tmp_path / "run") as reader:
        steps, losses = reader.scalars("train/loss")
        _, biases = reader.vectors("moe/layer_1/router_bias")
    assert steps == list(range(1, STEPS + 1))
    assert losses == pytest.approx(single_process_curve, rel=1e-5)
    assert any(abs(b) > 0 for b in biases[-1])  # the balancer did move them
    result = json.loads((tmp_path / "run" / "result.json").read_text())
    fingerprints = result["replica_state_sha256"]
    assert len(fingerprints) == 2 and fingerprints[0] == fingerprints[1]  # weights and router biases agree
    record = json.loads((tmp_path / "run" / "run.json").read_text())
    assert record["world_size"] == 2
    # Rank 0 alone keeps the step's record and events; the other rank only trained.
    step_record = read_step_record(tmp_path / "run")
    assert step_record["status"] == "succeeded" and step_record["attempts"] == 1
    assert [e["kind"] for e in read_lab_events(tmp_path)] == ["step_started", "step_succeeded"]
