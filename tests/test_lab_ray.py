"""The Ray backend on a local Ray (one session for the whole module, to bound Ray's startup cost)."""

from __future__ import annotations

import json

import pytest

from glasslab.lab import Executor, Resources, Step, StepContext, read_step_record
from glasslab.lab.local_backend import user_pythonpath
from test_lab_distributed import DDP_CONFIG, read_losses, train_tiny_dp
from test_lab_executor import diamond

ray = pytest.importorskip("ray")


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
             runtime_env={"env_vars": {"PYTHONPATH": user_pythonpath()}})
    yield
    ray.shutdown()


def test_ray_backend_gives_the_same_folders_and_hashes_as_local(tmp_path):
    local = Executor(tmp_path / "local" / "lab", jobs=2, echo=False).run(diamond())
    on_ray = Executor(tmp_path / "ray" / "lab", backend="ray", jobs=2, echo=False).run(diamond())
    assert local.ok and on_ray.ok
    assert sorted(local.outcomes) == sorted(on_ray.outcomes)
    for node in on_ray.plan.steps:
        record = read_step_record(node.folder)
        assert record["status"] == "succeeded" and record["hash"] == node.hash
        assert json.loads((node.folder / "value.json").read_text()) == json.loads(
            (tmp_path / "local" / "lab" / node.key / "value.json").read_text())
    assert Executor(tmp_path / "ray" / "lab", backend="ray", echo=False).run(diamond()).executed == []


@pytest.mark.slow
def test_two_worker_step_through_ray_matches_one_worker(tmp_path):
    reference = tmp_path / "reference"
    reference.mkdir()
    train_tiny_dp(StepContext("dp", reference, DDP_CONFIG, {}, tmp_path))  # 1 worker, in this process
    step = Step("dp", train_tiny_dp, config=DDP_CONFIG, resources=Resources(cpus=1, workers=2))
    report = Executor(tmp_path / "lab", backend="ray", echo=False).run([step])
    assert report.ok, report.outcomes
    single, double = read_losses(reference), read_losses(report.plan.steps[0].folder)
    assert (single["world_size"], double["world_size"]) == (1, 2)
    for a, b in zip(single["losses"], double["losses"], strict=True):
        assert abs(a - b) <= 1e-5 * max(1.0, abs(a)), (single, double)
