"""Inputs the executor resolves: a config's reference to another step's output adds the edge, is hashed as
the step's name (as a ``*_from`` string was, so no hash moves) and reaches the function as a folder."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest

from glasslab import config as configs
from glasslab.errors import UserError
from glasslab.lab import (
    NO_OUTPUT,
    Executor,
    RunOutput,
    Step,
    StepOutput,
    make_plan,
    output_of,
    planned_folder_name,
    run_one_step,
    run_output_of,
)


@dataclass(frozen=True)
class ReadConfig:
    source: StepOutput = NO_OUTPUT
    sources: tuple[StepOutput, ...] = ()


@dataclass(frozen=True)
class OldReadConfig:
    """The same config as it was written before references: the producing step's name as a string."""

    source: str = ""
    sources: tuple[str, ...] = ()


def write_name(ctx) -> None:
    (ctx.output_dir / "value.txt").write_text(ctx.name, encoding="utf-8")


def read_sources(ctx) -> str:
    cfg = ctx.config
    return "+".join(Path(ref.path, "value.txt").read_text(encoding="utf-8") for ref in (cfg.source, *cfg.sources))


def test_a_reference_adds_the_edge_hashes_as_the_name_and_reaches_the_function_as_a_folder(tmp_path):
    a, b = Step("a", write_name), Step("b", write_name)
    reader = Step("reader", read_sources, ReadConfig(output_of(a), (output_of(b),)))
    assert [d.name for d in reader.deps] == ["a", "b"]  # no deps listed: the references are the edges
    old = Step("reader", read_sources, OldReadConfig("a", ("b",)), deps=(a, b))
    assert make_plan([reader], tmp_path).steps[-1].hash == make_plan([old], tmp_path).steps[-1].hash
    assert configs.to_dict(reader.config) == {"source": "a", "sources": ["b"]}

    done = run_one_step(reader, tmp_path)
    assert done.value == "a+b"
    report = Executor(tmp_path, backend="local", echo=False).run([reader], force=["reader"])
    assert report.ok  # the resolved config crossed into a step process (pickled with its folders, not the Steps)


def test_a_reference_read_back_names_a_dependency_and_an_unknown_one_is_refused(tmp_path):
    read_back = configs.from_dict(ReadConfig, {"source": "a", "sources": []})
    assert read_back.source == StepOutput("a") and not configs.from_dict(ReadConfig, {}).source
    a = Step("a", write_name)
    assert run_one_step(Step("reader", read_sources, read_back, deps=(a,)), tmp_path).value == "a"
    with pytest.raises(UserError, match="unknown dependency 'nowhere'"):
        make_plan([Step("lost", read_sources, ReadConfig(StepOutput("nowhere")))], tmp_path)
    with pytest.raises(UserError, match="source=3: expected the name of a step"):
        configs.from_dict(ReadConfig, {"source": 3})


@dataclass(frozen=True)
class FromRunConfig(RunOutput):
    """A config that starts from a run (as ``ForkPoint`` and ``ExportConfig`` do)."""

    step: int = 0


@dataclass(frozen=True)
class OldFromRunConfig:
    """The same as it was written before: the run's folder name as a string, its folder found by hand."""

    run: str = ""
    step: int = 0
    run_dir: str = field(default="", metadata=configs.UNVERSIONED)


def read_run(ctx) -> str:
    return Path(ctx.config.run_folder, "value.txt").read_text(encoding="utf-8")


def test_a_run_reference_adds_the_edge_hashes_as_the_folder_name_and_resolves_a_folder(tmp_path):
    a = Step("a", write_name)
    reader = Step("reader", read_run, FromRunConfig(**run_output_of(a), step=3))
    assert [d.name for d in reader.deps] == ["a"]  # the reference is the edge
    old = Step("reader", read_run, OldFromRunConfig(planned_folder_name(a), 3), deps=(a,))
    assert make_plan([reader], tmp_path).steps[-1].hash == make_plan([old], tmp_path).steps[-1].hash
    assert configs.to_dict(reader.config) == {"run": planned_folder_name(a), "run_dir": "", "step": 3}
    assert run_one_step(reader, tmp_path).value == "a"  # the dependency's folder, by its folder name
    report = Executor(tmp_path, backend="local", echo=False).run([reader], force=["reader"])
    assert report.ok
    # A run given by id (not a step of the plan) is that folder under the lab; one read back keeps its folder.
    by_id = run_one_step(Step("by_id", read_run, FromRunConfig(run=planned_folder_name(a))), tmp_path)
    assert by_id.value == "a"
    read_back = configs.from_dict(FromRunConfig, {"run": "x", "run_dir": "/y", "step": 1})
    assert read_back == FromRunConfig("x", "/y", step=1)
