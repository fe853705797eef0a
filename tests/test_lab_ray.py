"""The Ray backend on a local Ray (one session for the whole module, to bound Ray's startup cost)."""

from __future__ import annotations

import json

import pytest

from glasslab.lab import Executor, Resources, Step, StepContext, read_step_record
from glasslab.lab.modules import user_pythonpath
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


def test_a_data_build_on_ray_gives_the_same_dataset_and_a_data_step_runs_its_tasks_there(tmp_path):
    """Directly (the Ray this process joined) and as a step of ``glasslab run --backend ray``: the same
    manifest hash and report as a build on local processes; the step asks Ray for no CPU of its own, so
    its tasks get every CPU of the 2-CPU cluster (they would wait behind it otherwise)."""
    import dataclasses

    from data_helpers import small_build_config
    from glasslab.data.build import build_dataset, data_step
    from glasslab.data.shards import manifest_hash

    cfg = dataclasses.replace(small_build_config(tmp_path), progress=False, num_workers=0)  # 0: the cluster's CPUs
    local = build_dataset(dataclasses.replace(cfg, num_workers=1), tmp_path / "local")
    on_ray = build_dataset(dataclasses.replace(cfg, backend="ray"), tmp_path / "ray")
    assert manifest_hash(on_ray) == manifest_hash(local)
    assert (on_ray / "report.json").read_bytes() == (local / "report.json").read_bytes()
    record = json.loads((on_ray / "build.json").read_text())
    assert record["backend"] == "ray" and record["workers"] == 2
    report = Executor(tmp_path / "lab", backend="ray", echo=False).run([data_step(cfg)])
    assert report.ok, report.outcomes
    folder = report.plan.steps[0].folder
    assert read_step_record(folder)["resources"]["cpus"] == 0  # the step holds no CPU its tasks need
    record = json.loads((folder / "build.json").read_text())
    assert record["backend"] == "ray" and record["workers"] == 2
    assert manifest_hash(folder) == manifest_hash(local)
