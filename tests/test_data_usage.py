"""Every run records its dataset and planned mixture; ``dataset_usage`` gives the data page, per run that
used a dataset, the mixture weights and the epochs each domain was actually read."""

from __future__ import annotations

import json
import shutil

import pytest

from glasslab import config as configs
from glasslab.data.shards import manifest_hash
from glasslab.data.usage import dataset_usage
from glasslab.layout import RESULT_FILE, RUN_RECORD
from glasslab.track import read_record
from glasslab.train.run import train
from glasslab.train.run_config import RunConfig
from train_data import build_tiny_dataset, tiny_run_config


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    root = tmp_path_factory.mktemp("usage")
    dataset = build_tiny_dataset(root)
    plain = tiny_run_config(dataset, max_steps=6, sample_prompts=[])
    phased = tiny_run_config(dataset, max_steps=6, sample_prompts=[])
    phased["data"]["mixture"] = {"weights": {"code": 3, "prose": 1},
                                 "phases": [{"start_step": 3, "weights": {"prose": 1}}]}
    for name, run in (("plain", plain), ("phased", phased)):
        assert train(configs.from_dict(RunConfig, run), root / name)["status"] == "finished"
    return root


def test_run_json_names_the_dataset_folder_and_the_planned_mixture(lab):
    record = read_record(lab / "phased")
    assert record["dataset"] == {"folder": "data", "path": str((lab / "data").resolve()),
                                 "manifest_hash": manifest_hash(lab / "data")}
    phases = record["mixture"]["phases"]
    assert [p["start_step"] for p in phases] == [0, 3]
    assert phases[0]["weights"] == pytest.approx({"code": 0.75, "prose": 0.25})
    assert phases[1]["weights"] == {"code": 0.0, "prose": 1.0}
    assert record["mixture"]["token_budget"] == 6 * 256


def test_dataset_usage_gives_each_runs_weights_and_realised_epochs(lab):
    usage = {entry["run"]: entry for entry in dataset_usage(lab / "data")}
    assert sorted(usage) == ["phased", "plain"]  # the dataset folder itself is not a run
    for name, entry in usage.items():
        result = json.loads((lab / name / RESULT_FILE).read_text())
        assert entry["status"] == "finished" and entry["realised"]["step"] == 6
        assert entry["realised"]["epochs"] == {d: result[f"mixture/epochs/{d}"] for d in ("code", "prose")}
        assert entry["planned"] == read_record(lab / name)["mixture"]
    planned, realised = usage["phased"]["planned"]["total"]["epochs"], usage["phased"]["realised"]["epochs"]
    assert realised["prose"] > realised["code"] and planned["prose"] > planned["code"]  # phase 2 is all prose
    assert realised == pytest.approx(planned, rel=0.35)  # sampled per sequence, so close to the plan, not equal


def test_a_running_run_and_an_older_run_json_are_read_too(lab, tmp_path):
    running = tmp_path / "running"
    shutil.copytree(lab / "phased", running)
    (running / RESULT_FILE).unlink()  # as if still training: realised epochs come from its store
    older = tmp_path / "older"
    shutil.copytree(lab / "plain", older)
    record = json.loads((older / RUN_RECORD).read_text())
    del record["dataset"], record["mixture"]  # run.json before it named its dataset folder
    (older / RUN_RECORD).write_text(json.dumps(record))
    usage = {entry["run"]: entry for entry in dataset_usage(lab / "data", [running, older, lab / "data"])}
    assert sorted(usage) == ["older", "running"]
    assert usage["running"]["status"] == "finished"  # the store says how it ended
    assert usage["running"]["realised"] == dataset_usage(lab / "data", [lab / "phased"])[0]["realised"]
    assert usage["older"]["planned"] == read_record(lab / "plain")["mixture"]
