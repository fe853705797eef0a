"""train.compile: forced either way, or chosen by the measured rule from the planned compute; a compiled
trainer trains the same numbers as an eager one, as one graph compiled once, activation checkpointing or not."""

from __future__ import annotations

import dataclasses
import functools
import json

import pytest
import torch
import yaml

from glasslab.cli import main as cli_main
from glasslab.layout import RUN_RECORD
from glasslab.track import RunReader
from glasslab.train import compile_rule
from glasslab.train.build import checkpoint_activations
from glasslab.train.compile_rule import MIN_FLOPS, choose_compile
from glasslab.train.config import OptimizerConfig, ScheduleConfig, TrainConfig
from train_data import build_tiny_dataset, tiny_run_config
from train_fakes import make_trainer


def test_forced_settings_win_over_the_rule():
    assert choose_compile(True, 1.0, "cpu").compile is True
    assert choose_compile(False, 1e30, "cuda") == compile_rule.CompileChoice(False, "train.compile=false")


def test_auto_compiles_only_from_the_measured_threshold(monkeypatch):
    monkeypatch.setattr(compile_rule, "_cpp_compiler_found", lambda: True)
    below = choose_compile(None, 0.5 * MIN_FLOPS["cpu"], "cpu")
    above = choose_compile(None, 2 * MIN_FLOPS["cpu"], "cpu")
    assert not below.compile and "cost more than it saves" in below.reason
    assert above.compile and above.reason.startswith("auto: planned 1e+13 FLOPs >= 5e+12")
    assert not choose_compile(None, 2 * MIN_FLOPS["cpu"], "mps").compile  # no measured rule: eager
    monkeypatch.setattr(compile_rule, "_cpp_compiler_found", lambda: False)
    assert "no C++ compiler" in choose_compile(None, 2 * MIN_FLOPS["cpu"], "cpu").reason


def _losses(tmp_path, compile: bool | None) -> tuple[list[float], object]:
    cfg = TrainConfig(seq_len=16, global_batch_tokens=16 * 8, max_steps=4, checkpoint_interval=10, compile=compile,
                      optimizer=OptimizerConfig(lr=1e-2), schedule=ScheduleConfig(kind="constant", warmup_fraction=0.0))
    trainer = make_trainer(tmp_path, cfg, moe=True)
    assert trainer.fit() == "finished"
    trainer.run.finish()
    with RunReader(tmp_path) as reader:
        return reader.scalars("train/loss")[1], trainer


def test_a_compiled_trainer_matches_eager(tmp_path, monkeypatch):
    eager, trainer = _losses(tmp_path / "eager", None)  # a tiny run: the rule keeps it eager
    assert not trainer.compile_choice.compile and trainer.net is trainer.model
    # aot_eager traces forward and backward as inductor would, without building C++ kernels.
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    compiled, trainer = _losses(tmp_path / "compiled", True)
    assert trainer.compile_choice.compile and trainer.net is not trainer.model
    assert compiled == pytest.approx(eager, rel=1e-5)


@pytest.mark.parametrize(("moe", "recompute"), [(True, False), (True, True), (False, True)],
                         ids=["moe", "moe_activation_checkpointing", "dense_activation_checkpointing"])
def test_a_compiled_trainer_compiles_one_graph_once(tmp_path, monkeypatch, moe, recompute):
    """Dynamo's counters after step 1 and after three more: one graph, no graph break, nothing compiled
    again. Under activation checkpointing the MoE's side effects (its aux loss, its routing counts) would
    otherwise send the whole model back to eager, and they are still counted once per forward."""
    from torch._dynamo.utils import counters

    torch._dynamo.reset()
    counters.clear()
    monkeypatch.setattr(torch, "compile", functools.partial(torch.compile, backend="aot_eager"))
    cfg = TrainConfig(seq_len=16, global_batch_tokens=16 * 8, micro_batch_size=4, max_steps=4, checkpoint_interval=10,
                      compile=True, schedule=ScheduleConfig(kind="constant", warmup_fraction=0.0))
    trainers = [make_trainer(tmp_path / name, dataclasses.replace(cfg, compile=name == "compiled"), moe=moe, log=False)
                for name in ("eager", "compiled")]
    if recompute:
        for trainer in trainers:
            checkpoint_activations(trainer.model.blocks)
    losses = {name: [] for name in ("eager", "compiled")}
    for step in range(4):
        for name, trainer in zip(losses, trainers, strict=True):
            if moe and step == 3:  # the routing of a whole step's micro-batches, each counted once
                trainer.forward_backward(trainer.parts.loader.next_batch(), cfg.global_batch_tokens)
                assert int(trainer.model.blocks[0].ffn.pending.tokens) == cfg.global_batch_tokens, name
                continue
            losses[name].append(trainer.train_step()["train/loss"])
        if step == 0:
            after_step_1 = dict(counters["stats"])
            assert after_step_1["unique_graphs"] == 1 and not counters["graph_break"], dict(counters["graph_break"])
    assert dict(counters["stats"]) == after_step_1  # no recompile
    assert losses["compiled"] == pytest.approx(losses["eager"], rel=1e-5)


def test_run_json_records_the_choice_and_its_reason(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text(yaml.safe_dump(tiny_run_config(build_tiny_dataset(tmp_path), max_steps=2, sample_prompts=[])))
    assert cli_main(["train", str(config), "--run-dir", str(tmp_path / "auto")]) == 0
    assert cli_main(["train", str(config), "train.compile=false", "--run-dir", str(tmp_path / "forced")]) == 0
    auto, forced = (json.loads((tmp_path / name / RUN_RECORD).read_text())["compile"] for name in ("auto", "forced"))
    assert auto["compile"] is False and auto["reason"].startswith("auto: planned ")
    assert forced == {"compile": False, "reason": "train.compile=false"}
