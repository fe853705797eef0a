"""``glasslab train --example``: complete, commented, and loads back; the vocabulary follows the tokenizer;
a data build config's source paths resolve relative to the config file."""

from __future__ import annotations

import dataclasses
import json
import random
import typing
from pathlib import Path

import pytest
import yaml

from glasslab import config as configs
from glasslab.cli import main as cli_main
from glasslab.config_docs import field_docs
from glasslab.data.config import load_build_config
from glasslab.errors import UserError
from glasslab.track import read_record
from glasslab.train.build import resolve_data
from glasslab.train.example import EXAMPLES, example_config
from glasslab.train.run import train
from glasslab.train.run_config import RunConfig
from train_data import VOCAB, build_tiny_dataset, tiny_run_config


def config_classes(cls: type, seen: dict | None = None) -> dict[type, None]:
    """Every config dataclass reachable from ``cls`` through its fields' annotations."""
    seen = {} if seen is None else seen
    seen[cls] = None
    for annotation in typing.get_type_hints(cls).values():
        for candidate in (annotation, *typing.get_args(annotation)):
            if dataclasses.is_dataclass(candidate) and candidate not in seen:
                config_classes(candidate, seen)
    return seen


@pytest.mark.parametrize("kind", EXAMPLES)
def test_the_example_names_every_field_with_its_docstring_and_loads_back(kind, capsys):
    assert cli_main(["train", "--example", kind]) == 0
    text = capsys.readouterr().out
    assert configs.from_dict(RunConfig, yaml.safe_load(text)) == example_config(kind)
    lines = [line.strip() for line in text.splitlines()]
    for cls in config_classes(RunConfig):
        docs = field_docs(cls)
        for field in dataclasses.fields(cls):
            assert docs.get(field.name), f"{cls.__name__}.{field.name} has no docstring"
            assert any(line.startswith((f"{field.name}:", f"#   {field.name}:")) for line in lines), \
                f"{cls.__name__}.{field.name} missing from the {kind} example"
            assert docs[field.name].split()[0] in text
    assert example_config(kind).data.build == "demo" and example_config(kind).model.vocab_size == 0


def test_example_takes_no_other_arguments(capsys):
    assert cli_main(["train", "--example", "moe", "train.max_steps=3"]) == 2
    assert "--example" in capsys.readouterr().err


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return build_tiny_dataset(tmp_path_factory.mktemp("data"))


def test_vocab_size_follows_the_tokenizer_unless_set(dataset, tmp_path):
    run = tiny_run_config(dataset, max_steps=2, sample_prompts=[])
    run["model"]["vocab_size"] = 0
    cfg = configs.from_dict(RunConfig, run)
    assert resolve_data(cfg)[0].model.vocab_size == VOCAB
    assert train(cfg, tmp_path / "run")["status"] == "finished"
    record = read_record(tmp_path / "run")
    assert record["config"]["model"]["vocab_size"] == VOCAB  # the size used, not 0
    assert record["param_counts"]["embedding"] == 2 * VOCAB * run["model"]["d_model"]
    larger = configs.replace(cfg, [f"model.vocab_size={VOCAB + 64}"])
    assert resolve_data(larger)[0].model.vocab_size == VOCAB + 64  # set by hand: kept (e.g. padded for GPUs)
    with pytest.raises(UserError, match=f"model.vocab_size={VOCAB - 1}: expected at least the {VOCAB} tokens"):
        resolve_data(configs.replace(cfg, [f"model.vocab_size={VOCAB - 1}"]))


def test_data_build_and_path_are_exclusive_and_an_unbuilt_build_says_so():
    with pytest.raises(configs.ConfigError, match="either data.build or data.path"):
        configs.from_dict(RunConfig, {"data": {"build": "demo", "path": "lab/data"}})
    with pytest.raises(UserError, match="data.build='demo': not built yet"):
        resolve_data(configs.from_dict(RunConfig, {"data": {"build": "demo"}}))


def _prose(seed: int, words: int = 60) -> str:
    rng = random.Random(seed)
    vocabulary = "river stone garden window letter morning silver quiet market bridge winter paper".split()
    return " ".join(rng.choice(vocabulary) + rng.choice(("", "s", "ed", "ing")) for _ in range(words)) + "."


def test_build_config_source_paths_resolve_relative_to_the_config_file(tmp_path, monkeypatch, capsys):
    project = tmp_path / "project"
    (project / "texts" / "deep").mkdir(parents=True)
    (project / "docs.jsonl").write_text("".join(json.dumps({"text": _prose(i)}) + "\n" for i in range(30)))
    for i in range(4):
        (project / "texts" / "deep" / f"{i}.txt").write_text(_prose(100 + i))
    (project / "texts" / "notes.md").write_text(_prose(200))  # not matched by the pattern
    sources = [{"domain": "web", "kind": "jsonl", "path": "docs.jsonl"},
               {"domain": "books", "kind": "text", "path": "texts", "pattern": "**/*.txt"}]
    (project / "data.yaml").write_text(yaml.safe_dump({"sources": sources, "tokenizer": {"vocab_size": 300},
                                                        "dedup": {"near": False}, "num_workers": 1}))
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    cfg = load_build_config("../project/data.yaml")
    assert [s.path for s in cfg.sources] == [str(project / "docs.jsonl"), str(project / "texts")]
    assert load_build_config(project / "data.yaml") == cfg  # the same build whatever the current folder
    builtin = load_build_config(None, ["sources=[{domain: code, kind: builtin, path: stdlib_code}]"])
    assert builtin.sources[0].path == "stdlib_code"  # corpus and dataset names are not paths

    assert cli_main(["data", "build", "../project/data.yaml", "--out", "ds", "--quiet"]) == 0, capsys.readouterr().err
    record = json.loads((elsewhere / "ds" / "build.json").read_text())
    funnel = {row["stage"]: row["documents"] for row in record["funnel"]}
    assert funnel["raw"] == 30 + 4  # every JSONL line and every .txt under texts/, read from the config's folder
