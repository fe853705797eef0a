"""train.compile: forced either way, or chosen by the measured rule from the planned compute; a compiled
trainer trains the same numbers as an eager one."""

from __future__ import annotations

import functools

import pytest
import torch

from glasslab.track import RunReader
from glasslab.train import compile_rule
from glasslab.train.compile_rule import MIN_FLOPS, choose_compile
from glasslab.train.config import OptimizerConfig, ScheduleConfig, TrainConfig
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
