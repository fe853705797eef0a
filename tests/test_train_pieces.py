"""Schedules, optimiser groups, Muon, the spike guard and throughput accounting, each on its own."""

from __future__ import annotations

import math

import pytest
import torch

from glasslab.config import ConfigError, load
from glasslab.model import Transformer
from glasslab.train.config import GuardConfig, OptimizerConfig, ScheduleConfig, TrainConfig
from glasslab.train.guard import SpikeGuard
from glasslab.train.muon import orthogonalize
from glasslab.train.optim import build_optimizer, split_params
from glasslab.train.schedule import lr_multiplier
from glasslab.train.throughput import ThroughputMeter, peak_flops, table_peak_flops
from train_fakes import tiny_model_config


def test_wsd_schedule_warms_up_holds_then_decays():
    cfg = ScheduleConfig(kind="wsd", warmup_fraction=0.1, decay_fraction=0.2, min_lr_ratio=0.1)
    m = [lr_multiplier(cfg, s, 100) for s in range(100)]
    assert m[0] == pytest.approx(1 / 11) and m[9] == pytest.approx(10 / 11)
    assert all(v == 1.0 for v in m[10:80])
    assert m[99] == pytest.approx(0.1) and all(a > b for a, b in zip(m[80:], m[81:], strict=False))


def test_cosine_and_linear_end_at_the_floor():
    for kind in ("cosine", "linear"):
        cfg = ScheduleConfig(kind=kind, warmup_fraction=0.0, min_lr_ratio=0.2)
        assert lr_multiplier(cfg, 99, 100) == pytest.approx(0.2)
        first = 1 - 0.8 / 100 if kind == "linear" else 0.2 + 0.8 * 0.5 * (1 + math.cos(math.pi / 100))
        assert lr_multiplier(cfg, 0, 100) == pytest.approx(first)


def test_a_longer_wsd_run_only_extends_the_stable_phase():
    cfg = ScheduleConfig(kind="wsd", warmup_fraction=0.0, decay_fraction=0.2)
    assert [lr_multiplier(cfg, s, 100) for s in range(70)] == [lr_multiplier(cfg, s, 200) for s in range(70)]


def test_train_config_errors_name_the_field():
    with pytest.raises(ConfigError, match="train.global_batch_tokens=100"):
        TrainConfig(seq_len=64, global_batch_tokens=100)
    with pytest.raises(ConfigError, match="train.micro_batch_size=3"):
        TrainConfig(seq_len=8, global_batch_tokens=64, micro_batch_size=3).micro_batches(1)
    with pytest.raises(ConfigError, match="optimizer.nam: unknown key"):
        load(TrainConfig, None, ["optimizer.nam=muon"])
    cfg = load(TrainConfig, None, ["optimizer.name=muon", "schedule.kind=cosine", "max_steps=0", "max_tokens=6400"])
    assert cfg.total_steps == 3 and cfg.micro_batches(2) == (16, 1)


def test_no_decay_on_norms_biases_embeddings_and_muon_only_for_hidden_matrices():
    model = Transformer(tiny_model_config(moe=True))
    groups = model.param_groups()
    parts = split_params(groups, use_muon=True)
    names = {id(p): n for named in groups.values() for n, p in named}
    no_decay = {names[id(p)] for p in parts["adamw_no_decay"]}
    assert "embed.weight" in no_decay and all("norm" in n or n == "embed.weight" for n in no_decay)
    muon = {names[id(p)] for p in parts["muon"]}
    assert muon and all(".attn." in n or ".ffn." in n for n in muon) and not any("router" in n for n in muon)
    assert {names[id(p)] for p in parts["adamw_decay"]} >= {"lm_head.weight"}
    total = sum(len(v) for v in parts.values())
    assert total == len(list(model.parameters()))
    opt = build_optimizer(OptimizerConfig(name="muon", lr=1e-3, muon_lr=0.02), groups)
    opt.set_lr_multiplier(0.5)
    assert sorted(g["lr"] for g in opt.param_groups) == pytest.approx([5e-4, 5e-4, 0.01])


def test_newton_schulz_makes_singular_values_near_one():
    g = torch.randn(3, 16, 48)  # a stack of wide matrices, as stacked experts are
    sv = torch.linalg.svdvals(orthogonalize(g, 5))
    assert sv.min() > 0.5 and sv.max() < 1.3
    assert torch.linalg.svdvals(orthogonalize(g.mT, 5)).max() < 1.3  # tall ones too


def test_muon_trains_a_regression():
    torch.manual_seed(0)
    w_true = torch.randn(8, 8)
    layer = torch.nn.Linear(8, 8, bias=False)
    opt = build_optimizer(OptimizerConfig(name="muon", muon_lr=0.1, weight_decay=0.0),
                          {"mlp": [("w", layer.weight)]})
    x = torch.randn(256, 8)
    first = None
    for _ in range(100):
        loss = ((layer(x) - x @ w_true.T) ** 2).mean()
        first = first if first is not None else loss.item()
        loss.backward()
        opt.step()
        opt.zero_grad()
    assert loss.item() < 0.1 * first


def test_guard_skips_spikes_and_nonfinite_and_asks_for_rollback_on_repeats():
    guard = SpikeGuard(GuardConfig(window=20, min_history=5, sigma=4.0, max_consecutive=2))
    for i in range(10):
        assert guard.judge(3.0 - 0.01 * i + 0.005 * (-1) ** i, 1.0 + 0.02 * (-1) ** i).apply
    v = guard.judge(6.0, 1.0)
    assert not v.apply and v.kind == "spike_skipped" and "loss" in v.reason and not v.rollback
    v = guard.judge(float("nan"), 1.0)
    assert not v.apply and v.kind == "nonfinite" and v.rollback
    assert guard.judge(2.9, 1.0).apply and guard.consecutive_rejected == 0
    assert not guard.judge(2.9, 50.0).apply  # grad norm spike alone is enough
    restored = SpikeGuard(guard.cfg)
    restored.load_state_dict(guard.state_dict())
    assert restored.judge(6.0, 1.0) == guard.judge(6.0, 1.0)


def test_guard_follows_a_steadily_rising_grad_norm_but_not_a_jump():
    """A long-ladder d40 rolled back to step 0 twice on the climb of its grad norm out of the loss
    plateau (0.31 flat for 20 steps, then +5% a step): a trend, not a spike."""
    guard = SpikeGuard(GuardConfig(window=50, min_history=10, sigma=8.0, grad_norm_sigma=10.0))
    for i in range(20):
        assert guard.judge(6.2 - 0.001 * i, 0.31 + 0.005 * (-1) ** i).apply
    for i in range(1, 21):
        assert guard.judge(6.2 - 0.02 * i, 0.31 * 1.05 ** i).apply, i
    assert not guard.judge(5.8, 0.31 * 1.05 ** 20 * 3).apply


def test_guard_off_still_refuses_nonfinite():
    guard = SpikeGuard(GuardConfig(enabled=False, min_history=2))
    for _ in range(5):
        guard.judge(1.0, 1.0)
    assert guard.judge(100.0, 1.0).apply and not guard.judge(float("inf"), 1.0).apply


def test_peak_flops_from_flag_table_or_measurement():
    assert peak_flops(5e12, torch.device("cpu"), False) == (5e12, "flag")
    assert table_peak_flops("NVIDIA H100 80GB HBM3") == 989e12
    assert table_peak_flops("NVIDIA H100 PCIe") == 756e12 and table_peak_flops("Some NPU") is None
    state = torch.get_rng_state()
    flops, source = peak_flops(0.0, torch.device("cpu"), False)
    assert source == "measured" and 1e8 < flops < 1e14
    assert torch.equal(state, torch.get_rng_state())  # measuring does not move the training RNG
    meter = ThroughputMeter(flops_per_token=1e6, peak_flops_per_device=1e12, world_size=2)
    m = meter.step(1000)
    assert m["throughput/mfu"] == pytest.approx(m["throughput/tokens_per_second"] * 1e6 / 2e12)


def test_muon_cannot_be_sharded():
    with pytest.raises(ConfigError, match="train.optimizer.name='muon'"):
        load(TrainConfig, None, ["optimizer.name=muon", "parallelism=fsdp"])
