"""torchrun on CPU (gloo): 2 processes give the 1-process loss curve, with identical router biases; an
FSDP2 job killed with SIGKILL (every process of it) resumes to the bit-identical end of an uninterrupted one."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml

from cli_runner import run_cli, subprocess_env
from glasslab.lab import read_step_record
from glasslab.track import RunReader, read_lab_events
from glasslab.train import checkpoint as ckpt
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


def _torchrun_command(run_dir: Path, config: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
            "-m", "glasslab", "train", str(config), *args, "--run-dir", str(run_dir)]


def _torchrun(run_dir: Path, config: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(_torchrun_command(run_dir, config, *args), env=subprocess_env(), capture_output=True,
                          text=True, timeout=300)


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


def _process_tree(pid: int) -> list[int]:
    """``pid`` and every process below it (torchrun's workers run in their own process groups)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            ppid = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(stat.parent.name))
    tree = [pid]
    for parent in tree:
        tree.extend(children.get(parent, []))
    return tree


def whole_checkpoint(path: Path, scratch: Path) -> dict:
    """Every part of a checkpoint, a sharded run's model and optimiser folders read whole (through
    torch's converter to one file at ``scratch``)."""
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    parts = ckpt.load_checkpoint(path)
    for name in (ckpt.SHARDED_MODEL, ckpt.SHARDED_OPTIMIZER):
        if (path / name).is_dir():
            dcp_to_torch_save(path / name, scratch)
            parts[name] = torch.load(scratch, weights_only=False)
    return parts


def _same(a, b) -> bool:
    """Nested checkpoint states equal bit for bit (tensors, arrays, RNG tuples)."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    if hasattr(a, "shape"):  # numpy arrays (NumPy's RNG state)
        return bool((a == b).all())
    return a == b


@pytest.mark.slow
@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="finds torchrun's workers through /proc")
def test_fsdp_job_killed_with_sigkill_resumes_bit_identical(tmp_path, dataset):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(tiny_run_config(
        dataset, moe=True, max_steps=8, checkpoint_interval=2, micro_batch_size=4, sample_interval=4)))
    fsdp = "train.parallelism=fsdp"
    ref = _torchrun(tmp_path / "ref", config, fsdp)
    assert ref.returncode == 0, ref.stderr[-4000:]

    run_dir = tmp_path / "killed"
    job = subprocess.Popen(_torchrun_command(run_dir, config, fsdp), env=subprocess_env(),
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 240
    while not any(step >= 2 for step, _ in ckpt.list_checkpoints(run_dir)):
        assert job.poll() is None and time.monotonic() < deadline, "the job ended before its step-2 checkpoint"
        time.sleep(0.01)
    time.sleep(random.uniform(0.0, 1.0))  # anywhere in steps 3-4: mid-step, mid-log, mid-checkpoint
    tree = _process_tree(job.pid)
    for pid in tree:  # the whole job at once, as a lost machine would
        os.kill(pid, signal.SIGKILL)
    job.wait()
    assert len(tree) >= 3  # the launcher and both ranks
    assert not (run_dir / "result.json").exists()

    resumed = _torchrun(run_dir, config, fsdp, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-4000:]
    with RunReader(tmp_path / "ref") as a, RunReader(run_dir) as b:
        assert b.scalars("train/loss") == a.scalars("train/loss")  # bit for bit
        assert b.scalars("train/loss")[0] == list(range(1, 9))
        assert b.vectors("moe/layer_1/router_bias") == a.vectors("moe/layer_1/router_bias")
        assert b.scalars("eval/macro/loss") == a.scalars("eval/macro/loss")
        assert [(x["step"], x["text"]) for x in b.samples()] == [(x["step"], x["text"]) for x in a.samples()]
        assert any(e["kind"] == "resume" for e in b.events())
    final_ref = whole_checkpoint(ckpt.list_checkpoints(tmp_path / "ref")[-1][1], tmp_path / "ref.pt")
    final = whole_checkpoint(ckpt.list_checkpoints(run_dir)[-1][1], tmp_path / "resumed.pt")
    assert final["trainer"]["step"] == 8
    for part in ("model", "optimizer"):
        assert _same(final_ref[part], final[part]), part
    for part in ("loader", "balancer", "guard"):
        assert _same(final_ref["trainer"][part], final["trainer"][part]), part
    # Every generator, torch's included: nothing (such as a kernel probe) draws a number after a resume.
    assert {"python", "numpy", "torch"} <= final_ref["trainer"]["rng"].keys()
    for name in final_ref["trainer"]["rng"]:
        assert _same(final_ref["trainer"]["rng"][name], final["trainer"]["rng"][name]), name

