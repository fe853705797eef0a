"""``train.sinks`` from the command line: a real run's scalars, events and samples reach TensorBoard and
W&B (offline), read back with TensorBoard's own reader and the W&B offline-run parser, equal to the store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from glasslab import config as configs
from glasslab.cli import main as cli_main
from glasslab.track import RunReader, read_record
from glasslab.train.run_config import RunConfig
from test_track import read_wandb_offline
from train_data import build_tiny_dataset, tiny_run_config


def tensorboard_values(run_dir: Path) -> tuple[dict[tuple[int, str], float], dict[str, list[tuple[int, str]]]]:
    """Scalars by (step, tag) and texts by tag, through tensorboard's EventAccumulator."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.util import tensor_util

    accumulator = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"scalars": 0, "tensors": 0})
    accumulator.Reload()
    tags = accumulator.Tags()
    scalars = {(e.step, tag): e.value for tag in tags["scalars"] for e in accumulator.Scalars(tag)}
    texts = {tag.removesuffix("/text_summary"): [(e.step, tensor_util.make_ndarray(e.tensor_proto).item().decode())
                                                  for e in accumulator.Tensors(tag)]
             for tag in tags["tensors"] if tag.endswith("/text_summary")}
    return scalars, texts


def wandb_table_rows(run_dir: Path, name: str) -> list[list]:
    """Every row of an incremental W&B table, from the table files its history records point to."""
    (offline,) = (run_dir / "wandb").glob("offline-run-*")
    history = read_wandb_offline(run_dir)
    paths = [v for (_, k), v in sorted(history.items()) if k == f"{name}/path"]  # in step order
    return [row for path in paths for row in json.loads((offline / "files" / path).read_text())["data"]]


@pytest.mark.slow
def test_train_sinks_from_the_command_line_reach_tensorboard_and_wandb(tmp_path, capsys, monkeypatch):
    pytest.importorskip("tensorboard")
    pytest.importorskip("wandb")
    monkeypatch.delenv("WANDB_MODE", raising=False)  # offline is the default
    dataset = build_tiny_dataset(tmp_path)
    run = tiny_run_config(dataset, moe=True, max_steps=12, sample_interval=6)
    run["data"]["mixture"]["phases"] = [{"start_step": 6, "weights": {"code": 0.2, "prose": 0.8}}]  # an event
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(run))
    run_dir = tmp_path / "run"
    code = cli_main(["train", str(tmp_path / "run.yaml"), "train.sinks=[jsonl,tensorboard,wandb]",
                     "--run-dir", str(run_dir)])
    assert code == 0, capsys.readouterr().err

    with RunReader(run_dir) as reader:
        stored = {(s, k): v for k in reader.scalar_keys() for s, v in zip(*reader.scalars(k), strict=True)}
        events = [(e["step"], e["kind"], e["title"]) for e in reader.events() if e["attempt"] is not None]
        samples = [(s["step"], s["prompt"], s["text"]) for s in reader.samples()]
        failures = [e for e in reader.events() if e["kind"] == "sink_failed"]
    assert not failures, failures
    assert len({k for _, k in stored}) > 20 and ("mixture_phase" in {kind for _, kind, _ in events})
    assert len(samples) == 2  # steps 6 and 12, one prompt

    scalars, texts = tensorboard_values(run_dir)
    assert scalars == pytest.approx(stored, rel=1e-6)  # float32 in the event file
    assert [(s, f"**{p}**{t}") for s, p, t in samples] == texts["samples"]
    for step, kind, title in events:
        assert any(s == (step or 0) and title in text for s, text in texts[f"events/{kind}"])

    logged = read_wandb_offline(run_dir)
    assert {key: v for key, v in logged.items() if key in stored} == pytest.approx(stored)
    assert len([key for key in logged if key in stored]) == len(stored)
    assert [tuple(row) for row in wandb_table_rows(run_dir, "samples")] == samples
    assert [(row[0], row[1], row[3]) for row in wandb_table_rows(run_dir, "events")] == events

    jsonl = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert {(r["step"], k): v for r in jsonl if r["type"] == "scalars" for k, v in r["metrics"].items()} == \
        pytest.approx(stored)
    assert read_record(run_dir)["config"]["train"]["sinks"] == ["jsonl", "tensorboard", "wandb"]


def test_sinks_are_unversioned_and_checked(tmp_path):
    base = configs.from_dict(RunConfig, {"data": {"path": "x"}})
    with_sinks = configs.replace(base, ["train.sinks=[tensorboard,wandb]"])
    assert with_sinks.train.sinks == ("tensorboard", "wandb")
    assert configs.config_hash(with_sinks) == configs.config_hash(base)  # same run, same folder
    with pytest.raises(configs.ConfigError, match="did you mean 'tensorboard'"):
        configs.replace(base, ["train.sinks=[tensorbord]"])
    with pytest.raises(configs.ConfigError, match="each sink at most once"):
        configs.replace(base, ["train.sinks=[jsonl,jsonl]"])


def test_a_missing_sink_package_fails_before_the_run_folder_is_touched(tmp_path, capsys, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    (tmp_path / "run.yaml").write_text(yaml.safe_dump(tiny_run_config(build_tiny_dataset(tmp_path))))
    capsys.readouterr()  # the dataset build's lines
    code = cli_main(["train", str(tmp_path / "run.yaml"), "train.sinks=[wandb]", "--run-dir", str(tmp_path / "run")])
    err = capsys.readouterr().err
    assert code == 2 and "pip install 'glasslab[wandb]'" in err and err.count("\n") == 1
    assert not (tmp_path / "run").exists()
