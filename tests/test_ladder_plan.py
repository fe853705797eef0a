"""Ladder plans: one recipe, width varied, hyper-parameters from rules; budgets and isoFLOP modes."""

from __future__ import annotations

import dataclasses
import math

import pytest

from cli_runner import run_cli
from glasslab import track
from glasslab.config import ConfigError, load
from glasslab.ladder.approach3 import identifiable
from glasslab.ladder.plan import (
    DEEPSEEK_LLM_RULE,
    LadderSpec,
    ScalingRule,
    batch_and_learning_rate,
    budget_label,
    plan_ladder,
    rung_record_extra,
)
from glasslab.ladder.runs import read_rungs


def test_width_ladder_keeps_the_recipe_across_rungs_and_hero():
    spec = LadderSpec()
    plan = plan_ladder(spec)
    assert plan.mode == "widths" and "only L(C)" in plan.note
    runs = [*plan.rungs, plan.hero]
    assert [r.model.d_model for r in runs] == [64, 96, 128, 192, 384]
    assert [len(r.seeds) for r in plan.rungs] == [3, 3, 2, 2] and plan.hero.seeds == (0,)
    for run in runs:
        m = run.model
        assert m.n_heads * spec.head_dim == m.d_model
        assert m.n_layers == max(2, round(m.d_model / spec.width_per_layer))
        assert m.moe is not None and m.moe.num_experts == spec.base_model.moe.num_experts
        assert run.size_name == m.size_name() and run.params_active == m.param_counts()["active"]
        # Tokens follow the rule up to one batch of rounding; compute is tokens × FLOPs per token.
        assert run.tokens_per_param == pytest.approx(spec.tokens_per_param, rel=0.02)
        assert run.tokens == run.steps * run.batch_size * run.seq_len
        assert run.flops == pytest.approx(run.tokens * m.flops_per_token(spec.seq_len))
        assert run.steps >= spec.min_steps
    flops = [r.flops for r in runs]
    assert flops == sorted(flops)
    lrs = [r.learning_rate for r in runs]
    assert lrs == sorted(lrs, reverse=True)  # bigger runs, smaller learning rate
    assert not identifiable([r.params_active for r in runs], [r.tokens for r in runs])


def test_batch_and_learning_rate_rule():
    # Uncapped: DeepSeek LLM's compute-optimal fits.
    batch, lr = batch_and_learning_rate(1e21, 1e12, seq_len=4096, min_steps=1000)
    assert batch == math.floor(0.292 * 1e21**0.3271 / 4096)
    assert lr == pytest.approx(0.3118 * 1e21**-0.125)
    # Capped: the batch shrinks to give min_steps steps and the learning rate follows by sqrt.
    batch, lr = batch_and_learning_rate(1e14, 1e6, seq_len=100, min_steps=1000)
    assert batch == 10
    assert lr == pytest.approx(0.3118 * 1e14**-0.125 * math.sqrt(1e3 / (0.292 * 1e14**0.3271)))


def test_budget_mode_spends_each_budget():
    plan = plan_ladder(LadderSpec(budgets=(1e14, 1e15, 1e16)))
    assert plan.mode == "budgets"
    for rung, budget in zip(plan.rungs, (1e14, 1e15, 1e16), strict=True):
        assert rung.flops == pytest.approx(budget, rel=0.01)
        assert 10 < rung.tokens_per_param < 40  # near the rule: the closest whole-head width


def test_isoflop_mode_plans_several_sizes_per_budget():
    plan = plan_ladder(LadderSpec(budgets=(1e14, 1e15), isoflop_sizes=5))
    assert plan.mode == "isoflop" and "approach 3" in plan.note
    for budget in (1e14, 1e15):
        sizes = [r for r in plan.rungs if r.name.startswith(budget_label(budget) + "-")]
        assert len(sizes) >= 3
        assert len({r.model.d_model for r in sizes}) == len(sizes)
        for rung in sizes:
            assert rung.flops == pytest.approx(budget, rel=0.02)
    assert identifiable([r.params_active for r in plan.rungs], [r.tokens for r in plan.rungs])


def test_bad_spec_is_one_line():
    expected = r"ladder.widths=\(64, 65\): expected multiples of ladder.head_dim=32"
    with pytest.raises(ConfigError, match=expected):
        LadderSpec(widths=(64, 65))
    with pytest.raises(ConfigError, match="isoflop_sizes"):
        load(LadderSpec, None, ["isoflop_sizes=3"])


def test_record_extra_survives_the_run_store(tmp_path):
    """What the planner writes into run.json is what the fit reads back (no redacted fields)."""
    plan = plan_ladder(LadderSpec())
    rung = plan.rungs[0]
    for seed in rung.seeds:
        run = track.init(tmp_path / f"r{seed}", {"model": dataclasses.asdict(rung.model)},
                         record_extra=rung_record_extra(rung, seed, "tiny"))
        run.log({"eval/macro/loss": 3.0 + 0.01 * seed}, step=rung.steps)
        run.finish()
    (read,) = read_rungs(sorted(tmp_path.iterdir()))
    assert read.name == rung.name and read.tokens == rung.tokens and read.total_flops == rung.flops
    assert read.flops == pytest.approx(rung.law_flops) and read.flops < rung.flops  # the law leaves the LM head out
    assert read.losses == pytest.approx((3.0, 3.01, 3.02))


def test_cli_plan_prints_the_table(tmp_path, capsys):
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: demo\nwidths: [64, 128]\nhero_width: 256\n")
    done = run_cli("ladder", "plan", str(spec), "tokens_per_param=10")
    assert done.returncode == 0, done.stderr
    assert "ladder demo (widths" in done.stdout
    assert "d64" in done.stdout and "d128" in done.stdout and "hero-d256" in done.stdout
    # The same CLI in-process (a subprocess per case costs seconds of imports on a busy machine).
    from glasslab.cli import main

    assert main(["ladder", "plan", "--budgets", "1e14", "1e15", "--isoflop", "3"]) == 0
    assert "isoflop" in capsys.readouterr().out
    assert main(["ladder", "plan", "widths=[65]"]) == 2
    assert "ladder.widths=(65,)" in capsys.readouterr().err


def test_run_config_for_carries_the_rung_into_a_run_config():
    from glasslab.data.config import MixtureConfig
    from glasslab.ladder.steps import run_config_for
    from glasslab.train.config import TrainConfig

    rung = plan_ladder(LadderSpec()).rungs[1]
    run_cfg = run_config_for(rung, 2, MixtureConfig(weights={"code": 1.0}), TrainConfig())
    assert run_cfg.model == rung.model
    train = run_cfg.train
    assert train.global_batch_tokens == rung.batch_size * rung.seq_len
    assert train.max_steps == rung.steps and train.seed == 2
    assert train.optimizer.lr == rung.learning_rate
    assert rung.steps // train.eval_interval >= 20  # an eval at least every 5% of training


def test_the_scaling_rule_is_named_hashed_data_a_spec_may_swap():
    assert LadderSpec().scaling_rule == DEEPSEEK_LLM_RULE and DEEPSEEK_LLM_RULE.name == "deepseek-llm"
    halved = ScalingRule(name="half-lr", lr_coefficient=DEEPSEEK_LLM_RULE.lr_coefficient / 2)
    assert halved.hash() != DEEPSEEK_LLM_RULE.hash() and len(halved.hash()) == 8
    default = plan_ladder(LadderSpec())
    swapped = plan_ladder(load(LadderSpec, None, ["scaling_rule.name=half-lr",
                                                  f"scaling_rule.lr_coefficient={halved.lr_coefficient!r}"]))
    assert swapped.spec.scaling_rule == halved
    for a, b in zip((*default.rungs, default.hero), (*swapped.rungs, swapped.hero), strict=True):
        assert b.learning_rate == pytest.approx(a.learning_rate / 2) and b.batch_size == a.batch_size
    with pytest.raises(ConfigError, match=r"^scaling_rule\.lr_coefficient=0"):
        load(LadderSpec, None, ["scaling_rule.lr_coefficient=0"])


def test_grid_plan_states_its_cost_and_the_extrapolation_it_buys():
    from glasslab.experiments import selfcal_ladder_128
    from glasslab.ladder.plan import grid_cost

    plan = plan_ladder(selfcal_ladder_128.spec())
    line = grid_cost(plan)
    # docs/ladder.md's protocol (b): the hero is 144× its top grid point (d24 ×4) outside the LM head
    assert "extrapolation ×144" in line
    trunks = sum(t.flops * len(t.seeds) for t in plan.trunks)
    assert f"{trunks:.3g} trunks" in line and trunks < float(line.split()[2]) < trunks * 3
