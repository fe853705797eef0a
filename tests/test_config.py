"""Config machinery: round trips, stable hashes, overrides and one-line errors."""

from __future__ import annotations

import dataclasses
import json
import os
import pickle
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pytest

from cli_runner import subprocess_env
from glasslab import config as configs
from glasslab.config import (
    UNVERSIONED,
    ConfigError,
    apply_overrides,
    config_hash,
    diff,
    dumps,
    from_dict,
    load,
    redact,
    replace,
    require,
    to_dict,
)
from glasslab.data.reference import DatasetRef
from glasslab.lab.inputs import StepOutput


@dataclass(frozen=True)
class Inner:
    num_experts: int = 8
    """Experts per MoE layer."""
    top_k: int = 2
    """Experts chosen per token."""
    router: Literal["softmax", "sigmoid"] = "sigmoid"

    def __post_init__(self) -> None:
        require(self.num_experts >= 1, "model.moe.num_experts", self.num_experts, "an integer >= 1")
        require(self.top_k <= self.num_experts, "model.moe.top_k", self.top_k,
                f"at most model.moe.num_experts ({self.num_experts})")


@dataclass(frozen=True)
class Model:
    d_model: int = 64
    moe: Inner | None = None
    dims: tuple[int, ...] = (1, 2)


@dataclass(frozen=True)
class Train:
    lr: float = 1e-3
    weights: dict[str, float] = field(default_factory=dict)
    num_workers: int = field(default=2, metadata=UNVERSIONED)
    api_token: str = "abc"


@dataclass(frozen=True)
class Root:
    model: Model = Model()
    train: Train = Train()


def test_round_trip_and_yaml_json(tmp_path):
    cfg = from_dict(Root, {"model": {"d_model": 96, "moe": {"num_experts": 4}}, "train": {"weights": {"a": 1}}})
    assert cfg.model.moe == Inner(num_experts=4)
    assert isinstance(cfg.train.weights["a"], float)
    assert from_dict(Root, to_dict(cfg)) == cfg
    (tmp_path / "c.json").write_text(json.dumps(to_dict(cfg)))
    (tmp_path / "c.yaml").write_text(dumps(Root(train=Train(api_token=""))).replace("''", "x"))
    assert load(Root, tmp_path / "c.json") == cfg
    assert load(Root, tmp_path / "c.yaml").model == Model()


def test_hash_is_stable_across_processes_and_ignores_unversioned():
    cfg = from_dict(Root, {"model": {"moe": {"top_k": 1}}})
    code = (
        "from test_config import Root, from_dict, config_hash;"
        "print(config_hash(from_dict(Root, {'model': {'moe': {'top_k': 1}}})))"
    )
    tests = str(Path(__file__).resolve().parent)  # test modules import as plain modules, as under pytest
    env = subprocess_env(PYTHONHASHSEED="123", PYTHONPATH=subprocess_env()["PYTHONPATH"] + os.pathsep + tests)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert out.stdout.strip() == config_hash(cfg)
    assert config_hash(replace(cfg, ["train.num_workers=7"])) == config_hash(cfg)
    assert config_hash(replace(cfg, ["train.lr=3e-4"])) != config_hash(cfg)
    assert len(config_hash(cfg)) == 16 and int(config_hash(cfg), 16) >= 0


def test_overrides_parse_types_and_create_sections():
    data = apply_overrides({}, ["train.lr=3e-4", "model.moe.num_experts=16", "model.dims=[3, 4]"])
    cfg = from_dict(Root, data)
    assert cfg.train.lr == pytest.approx(3e-4)
    assert cfg.model.moe.num_experts == 16
    assert cfg.model.dims == (3, 4)
    assert diff(Root(), cfg) == ["model.dims", "model.moe", "train.lr"]
    dense = to_dict(Root())
    assert dense["model"]["moe"] is None
    assert from_dict(Root, apply_overrides(dense, ["model.moe.top_k=1"])).model.moe == Inner(top_k=1)


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (["train.lrr=1"], "train.lrr: unknown key; did you mean 'lr'?"),
        (["model.d_model=big"], "model.d_model='big': expected an integer"),
        (["model.moe.router=softmx"], "expected one of 'softmax', 'sigmoid'; did you mean 'softmax'?"),
        (["model.moe.top_k=9"], "model.moe.top_k=9: expected at most model.moe.num_experts (8)"),
        (["model.moe.num_experts=0"], "model.moe.num_experts=0: expected an integer >= 1"),
        (["train.lr"], "expected KEY=VALUE"),
        (["model.d_model.x=1"], "model.d_model is not a section"),
    ],
)
def test_bad_overrides_fail_with_one_line(overrides, message):
    with pytest.raises(ConfigError) as info:
        from_dict(Root, apply_overrides({"model": {"d_model": 8}}, overrides))
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_bad_files(tmp_path):
    (tmp_path / "bad.yaml").write_text("model: [1, 2\n")
    with pytest.raises(ConfigError, match="bad.yaml: not valid YAML"):
        load(Root, tmp_path / "bad.yaml")
    with pytest.raises(ConfigError, match="config file not found"):
        load(Root, tmp_path / "missing.yaml")
    (tmp_path / "list.yaml").write_text("- 1\n")
    with pytest.raises(ConfigError, match="expected a mapping at the top level"):
        load(Root, tmp_path / "list.yaml")


def test_nested_check_errors_name_the_full_path_from_the_root():
    from glasslab.data.config import BuildConfig
    from glasslab.train.run_config import RunConfig

    cases = [
        (RunConfig, ["data.mixture.weights.code=-1"], "data.mixture.weights.code=-1.0: expected a weight >= 0"),
        (RunConfig, ["data.mixture.phases=[{start_step: 3, weights: {code: -2}}]"],
         "data.mixture.phases[0].weights.code=-2.0"),
        (RunConfig, ["train.guard.window=0"], "train.guard.window=0: expected"),
        (BuildConfig, ["sources=[{path: x, max_bytes: -1}]"], "sources[0].max_bytes=-1: expected"),
    ]
    for cls, overrides, message in cases:
        with pytest.raises(ConfigError) as info:
            from_dict(cls, apply_overrides({}, overrides))
        assert str(info.value).startswith(message)


@dataclass(frozen=True)
class Pair:
    betas: tuple[float, int] = (0.9, 2)


def test_fixed_length_tuples_and_pickled_mappings():
    assert from_dict(Pair, {"betas": [0.5, 3]}).betas == (0.5, 3)
    with pytest.raises(ConfigError, match=r"betas\[1\]=0.5: expected an integer"):
        from_dict(Pair, {"betas": [0.5, 0.5]})
    cfg = from_dict(Root, {"train": {"weights": {"a": 1.0}}})
    assert pickle.loads(pickle.dumps(cfg)) == cfg


def test_configs_are_frozen_and_hashable():
    cfg = from_dict(Root, {"train": {"weights": {"a": 1.0}}})
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.train.lr = 2.0  # type: ignore[misc]
    with pytest.raises(TypeError):
        cfg.train.weights["b"] = 1.0
    assert hash(cfg) == hash(from_dict(Root, {"train": {"weights": {"a": 1.0}}}))


def test_redaction():
    data = {"train": {"api_token": "s3cret", "wandb_key": "k", "lr": 1, "max_tokens": 5, "hfToken": "t",
                      "flops_per_token": 6.0},
            "password": "p", "keys": {"x": 1}, "tokenizer": "bpe"}
    red = redact(data)
    assert red["train"]["api_token"] == red["train"]["wandb_key"] == red["password"] == "***redacted***"
    assert red["train"]["hfToken"] == "***redacted***"
    assert red["train"]["lr"] == 1 and red["train"]["max_tokens"] == 5 and red["tokenizer"] == "bpe"
    assert red["train"]["flops_per_token"] == 6.0
    assert red["keys"] == {"x": 1}
    assert "s3cret" not in dumps(Root(train=Train(api_token="s3cret")))



@dataclass(frozen=True)
class ThreeDataFields:
    """A training step's config as it was: the dataset in three fields."""

    seed: int = 0
    data_from: str = ""
    data_path: str = field(default="", metadata=configs.UNVERSIONED)
    data_manifest: str = ""


@dataclass(frozen=True)
class OneDatasetRef:
    seed: int = 0
    data: DatasetRef = field(default=DatasetRef(), metadata=configs.INLINE)


def test_an_inline_field_is_written_hashed_and_read_as_its_fields_beside_the_parents():
    """``TrainStepConfig.data`` (a DatasetRef) records and hashes as the three fields it replaced."""
    pairs = [(ThreeDataFields(1, data_path="/a/data", data_manifest="f" * 64),
              OneDatasetRef(1, DatasetRef(data_manifest="f" * 64, data_path="/a/data"))),
             (ThreeDataFields(2, data_from="data"), OneDatasetRef(2, DatasetRef(data_from=StepOutput("data")))),
             (ThreeDataFields(), OneDatasetRef())]
    for old, new in pairs:
        assert configs.to_dict(new) == configs.to_dict(old)
        assert configs.config_hash(new) == configs.config_hash(old)
        assert configs.from_dict(OneDatasetRef, configs.to_dict(old)) == new
    here, moved = (OneDatasetRef(data=DatasetRef(data_manifest="f" * 64, data_path=p)) for p in ("/a", "/b"))
    assert configs.config_hash(moved) == configs.config_hash(here)  # where it lies is not hashed
    with pytest.raises(configs.ConfigError, match="data_manifests: unknown key; did you mean 'data_manifest'"):
        configs.from_dict(OneDatasetRef, {"data_manifests": ""})


@dataclass(frozen=True)
class MapConfigAsItWas:
    """A data map step's config as it was: the dataset in three fields of its own names."""

    dataset: str = field(default="", metadata=configs.UNVERSIONED)
    manifest_hash: str = ""
    k: int = 40
    fine_k: int = 0
    embedder: str = "tfidf"
    embedder_path: str = field(default="", metadata=configs.UNVERSIONED)
    embedder_hash: str = field(default="", metadata=configs.VERSIONED_WHEN_SET)
    dims: int = 256
    sample: int = 20_000
    min_share: float = 0.01
    seed: int = 0
    data_from: str = field(default="", metadata=configs.VERSIONED_WHEN_SET)
    num_workers: int = field(default=0, metadata=configs.UNVERSIONED)
    backend: str = field(default="", metadata=configs.UNVERSIONED)
    progress: bool = field(default=True, metadata=configs.UNVERSIONED)


def test_a_map_holds_a_dataset_reference_written_and_hashed_under_the_keys_its_fields_had():
    """``MapConfig.data`` (renamed keys, ``data_from`` hashed only when set): no map's folder moves."""
    from glasslab.data.map import MapConfig

    pairs = [(MapConfigAsItWas("/a/data", "f" * 64, k=5), MapConfig(DatasetRef(data_manifest="f" * 64,
                                                                               data_path="/a/data"), k=5)),
             (MapConfigAsItWas(data_from="data", num_workers=2), MapConfig(DatasetRef(data_from=StepOutput("data")),
                                                                           num_workers=2))]
    for old, new in pairs:
        assert configs.to_dict(new) == configs.to_dict(old)
        assert configs.to_dict(new, versioned_only=True) == configs.to_dict(old, versioned_only=True)
        assert configs.config_hash(new) == configs.config_hash(old)
        assert configs.from_dict(MapConfig, configs.to_dict(old)) == new
    assert "data_from" not in configs.to_dict(pairs[0][1], versioned_only=True)  # a map of a folder, as before
    with pytest.raises(configs.ConfigError, match="datasets: unknown key; did you mean 'dataset'"):
        configs.from_dict(MapConfig, {"datasets": "/a"})

