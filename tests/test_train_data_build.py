"""``glasslab train`` names its dataset by what it is: ``data.build`` runs the build as a dependency step
(a file relative to the run config), and a ``data.path`` run's identity is the dataset's manifest hash."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml

from glasslab.cli import main as cli_main
from glasslab.layout import STEP_RECORD
from glasslab.track import read_record
from train_data import VOCAB, WORD_SHAPE_FILTERS, build_tiny_dataset, tiny_run_config

BUILD = {"sources": [{"domain": "code", "kind": "builtin", "path": "stdlib_code", "max_bytes": 150_000,
                      "skip_filters": WORD_SHAPE_FILTERS},
                     {"domain": "prose", "kind": "builtin", "path": "stdlib_prose", "max_bytes": 150_000}],
         "tokenizer": {"vocab_size": VOCAB, "sample_bytes": 200_000}, "num_workers": 1, "samples_per_domain": 0}


def _train(capsys, *args: str) -> str:
    code = cli_main(["train", *args])
    out, err = capsys.readouterr()
    assert code == 0, err[-3000:]
    return out


def _small(run: dict) -> dict:
    run["model"]["vocab_size"] = 0  # follows the tokenizer
    run["train"].update(max_steps=3, sample_prompts=[], checkpoint_interval=3)
    return run


@pytest.mark.slow
def test_data_build_is_a_dependency_step_found_relative_to_the_run_config(tmp_path, capsys, monkeypatch):
    project = tmp_path / "project"
    project.mkdir()
    (project / "data.yaml").write_text(yaml.safe_dump(BUILD))
    run = _small(tiny_run_config(Path("unused")))
    run["data"] = {"build": "data.yaml", "mixture": run["data"]["mixture"]}
    (project / "run.yaml").write_text(yaml.safe_dump(run))
    monkeypatch.chdir(tmp_path)
    first = _train(capsys, "project/run.yaml", "--lab", "lab")
    (run_dir,) = (tmp_path / "lab").glob("run-*")
    (data_dir,) = (tmp_path / "lab").glob("data-*")
    step = json.loads((run_dir / STEP_RECORD).read_text())
    assert step["dependencies"] == {"data": data_dir.name} and step["config"]["data_from"] == "data"
    assert step["config"]["run"]["data"]["build"] == "" and step["config"]["run"]["data"]["path"] == ""
    record = read_record(run_dir)
    assert record["dataset"]["folder"] == data_dir.name and record["config"]["model"]["vocab_size"] == VOCAB
    assert "finished at step 3" in first
    again = _train(capsys, "project/run.yaml", "--lab", "lab")
    assert "finished before (cached)" in again
    assert json.loads((data_dir / STEP_RECORD).read_text())["attempts"] == 1  # built once


@pytest.mark.slow
def test_a_data_path_run_is_named_by_the_datasets_content_not_its_path(tmp_path, capsys):
    dataset = build_tiny_dataset(tmp_path)
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(_small(tiny_run_config(dataset))))
    lab = tmp_path / "lab"
    _train(capsys, str(tmp_path / "run.yaml"), "--lab", str(lab))
    (run_dir,) = lab.glob("run-*")
    moved = tmp_path / "moved" / "data"
    shutil.move(dataset, moved)
    again = _train(capsys, str(tmp_path / "run.yaml"), f"data.path={moved}", "--lab", str(lab))
    assert f"{run_dir.name}: finished before (cached)" in again  # the same data, elsewhere
    step = json.loads((run_dir / STEP_RECORD).read_text())["config"]
    assert step["run"]["data"]["path"] == "" and len(step["data_manifest"]) == 64
