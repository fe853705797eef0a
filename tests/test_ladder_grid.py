"""Floor mode ``grid``: the plan (trunks, branches, reach), the fit on known laws, and a real tiny grid
ladder whose branches are forks of their trunks and whose hero's curve is registered before it trains."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from glasslab.data.build import build_step
from glasslab.data.config import MixtureConfig
from glasslab.errors import UserError
from glasslab.experiments import selfcal_ladder
from glasslab.lab import Executor, Step, registry
from glasslab.lab.pool import InlinePool
from glasslab.ladder.grid_ends import difference_check, end_points, fit_endpoint_law
from glasslab.ladder.grid_fit import leave_largest_width_out
from glasslab.ladder.grid_law import (
    bootstrap_grid_law,
    estimate_grid_noise,
    fit_grid_law,
    grid_data,
    predict_target,
)
from glasslab.ladder.grid_sim import TRUE_LAW, synthetic_grid, synthetic_hero
from glasslab.ladder.plan import LadderSpec, ScalingRule, plan_ladder
from glasslab.ladder.predict import CURVE_FRACTIONS
from glasslab.ladder.steps import ladder_steps
from glasslab.ladder.varpro import ColumnGroup, grid_fit
from glasslab.model import ModelConfig, MoEConfig
from glasslab.track import RunReader
from glasslab.train.config import ScheduleConfig, TrainConfig
from train_data import VOCAB, tiny_build_config

HERO = synthetic_hero()


def test_grid_plan_branches_fork_on_checkpointed_steps_within_the_heros_reach():
    plan = plan_ladder(selfcal_ladder.spec())
    assert plan.mode == "grid" and {t.name for t in plan.trunks} == {"d16-trunk", "d24-trunk", "d32-trunk", "d40-trunk"}
    top = max(r.law_flops for r in plan.rungs)
    assert plan.hero.law_flops / top >= 100
    for trunk in plan.trunks:
        branches = [r for r in plan.rungs if r.trunk == trunk.name]
        smallest = min(b.fork_step for b in branches)
        assert all(b.fork_step % smallest == 0 for b in branches)  # on the trunk's checkpoint cadence
        assert trunk.steps == max(b.fork_step for b in branches)
        for b in branches:
            assert b.steps - b.fork_step == round(0.2 * b.steps)  # the recipe's 20% cooldown
            assert (b.batch_size, b.learning_rate) == (trunk.batch_size, trunk.learning_rate)
    # Small widths reach 8x their rule's tokens, the largest only what the hero's reach leaves.
    names = {r.name for r in plan.rungs}
    assert names >= {"d16-x8", "d24-x4", "d40-x1"} and "d32-x2" not in names
    # The context changes the compute and so what fits under the reach: protocol (b)'s plan.
    b = plan_ladder(selfcal_ladder.spec(128, "selfcal128"))
    assert b.hero.law_flops / max(r.law_flops for r in b.rungs) >= 100 and "d40-x1" not in {r.name for r in b.rungs}


def test_grid_spec_and_recipe_are_checked_in_one_line():
    with pytest.raises(Exception, match="whole multiple of the smallest"):
        dataclasses.replace(selfcal_ladder.spec(), token_multiples=(0.25, 0.6))
    plan = plan_ladder(selfcal_ladder.spec())
    data = Step("data", build_step, tiny_build_config())
    constant = TrainConfig(schedule=ScheduleConfig(kind="cosine"))
    with pytest.raises(UserError, match="wsd with decay_fraction"):
        ladder_steps(plan, data, MixtureConfig(weights={"code": 1.0}), constant, L_inf=None)
    wsd = TrainConfig(schedule=ScheduleConfig(kind="wsd", decay_fraction=0.2))
    with pytest.raises(UserError, match="estimates its floor"):
        ladder_steps(plan, data, MixtureConfig(weights={"code": 1.0}), wsd, L_inf=1.1)


def test_variable_projection_finds_the_nonnegative_least_squares_optimum_of_each_replicate():
    rng = np.random.default_rng(3)
    x = np.geomspace(1, 100, 40)
    truth = 2.0 + 3.0 * x**-0.5
    y_Bn = truth * (1 + 0.01 * rng.standard_normal((4, 40)))
    alphas = (0.25, 0.5, 0.75)
    fit = grid_fit([ColumnGroup(tuple((a,) for a in alphas), np.stack([x**-a for a in alphas]))], y_Bn, np.ones(40))
    assert list(fit.index[:, 0]) == [1, 1, 1, 1]
    for row in range(4):  # the closed form equals a direct least-squares solve at the chosen exponent
        design = np.stack([np.ones(40), x**-0.5], axis=1)
        direct, *_ = np.linalg.lstsq(design, y_Bn[row], rcond=None)
        assert np.allclose(fit.coef[row], direct, rtol=1e-6)
    # A floor that the data put below zero is held at zero (the constant's subset), not made negative.
    floorless = 3.0 * x**-0.5 - 0.2
    fit = grid_fit([ColumnGroup(((0.5,),), x[None, :] ** -0.5)], floorless[None, :], np.ones(40))
    assert fit.coef[0, 0] == 0.0 and fit.coef[0, 1] > 0


def test_grid_law_recovers_a_known_law_and_its_floor():
    data = grid_data(synthetic_grid(np.random.default_rng(0), family_sigma=0.0, eval_sigma=0.0))
    law = fit_grid_law(data)
    assert law.E == pytest.approx(TRUE_LAW.E, abs=0.03)
    assert law.alpha == pytest.approx(TRUE_LAW.alpha, abs=0.03) and law.beta == pytest.approx(TRUE_LAW.beta, abs=0.03)
    truth, predicted = predict_target(TRUE_LAW, HERO), predict_target(law, HERO)
    assert np.max(np.abs(predicted / truth - 1)) < 0.005  # the hero's whole curve, 10x past the widths
    # The end-point law (Chinchilla's form on the branches' final losses, what the floor is reported from)
    # finds the floor of runs that end annealed — the curve law's E less its full annealing gain C (γ = 0) —
    # and the differences between a width's branches give the same β.
    curves = synthetic_grid(np.random.default_rng(0), family_sigma=0.0, eval_sigma=0.0)
    ends = fit_endpoint_law(end_points(curves))
    assert ends.E == pytest.approx(TRUE_LAW.E - TRUE_LAW.C, abs=0.03)
    assert difference_check(end_points(curves), ends)["beta"] == pytest.approx(TRUE_LAW.beta, abs=0.05)


def test_the_back_test_predicts_the_largest_widths_branches_from_the_others():
    curves = synthetic_grid(np.random.default_rng(4))
    backtest = leave_largest_width_out(curves, level=0.9, num_bootstrap=100, seed=0)
    assert [s["held_out"] for s in backtest["steps"]] == ["d40-x0.25", "d40-x0.5", "d40-x1"]
    assert backtest["last"]["held_out"] == "d40-x1" and backtest["last"]["extrapolation"] > 1
    # Within 1.5% (the end-point law cannot see that the shortest branches' cooldowns end undigested, so its
    # narrow intervals need not hold them).
    assert all(abs(s["rel_error_pct"]) < 1.5 and s["lo"] <= s["point"] <= s["hi"] for s in backtest["steps"])


def test_grid_bootstrap_interval_holds_the_truth_and_widens_with_the_noise():
    widths = []
    for sigma in (0.002, 0.008):
        data = grid_data(synthetic_grid(np.random.default_rng(1), family_sigma=sigma))
        law = fit_grid_law(data, refine=False)
        noise = estimate_grid_noise(data, law)
        assert noise.sigma == pytest.approx(sigma, rel=0.6)
        replicates = bootstrap_grid_law(data, law, noise, [HERO], num_bootstrap=200, rng=np.random.default_rng(2))
        lo, hi = np.percentile(replicates.targets[0][:, -1], [5, 95])
        assert lo <= predict_target(TRUE_LAW, HERO)[-1] <= hi
        E_lo, E_hi = np.percentile(replicates.params[:, 0], [5, 95])
        assert E_lo <= TRUE_LAW.E <= E_hi
        widths.append(hi - lo)
    assert widths[1] > 2 * widths[0]


def tiny_grid(name: str = "g") -> list[Step]:
    """Three widths, multiples 1 and 2, one seed (trunks of 32 steps) and a hero, on the tiny dataset."""
    base = ModelConfig(vocab_size=VOCAB, n_heads=2, n_kv_heads=2,
                       moe=MoEConfig(num_experts=4, top_k=2, num_shared_experts=0))
    rule = ScalingRule(name="twenty-steps", batch_coefficient=100.0)
    spec = LadderSpec(name=name, base_model=base, widths=(16, 24, 32), hero_width=48, head_dim=8, width_per_layer=16,
                      seq_len=16, tokens_per_param=0.25, min_steps=20, seeds_per_rung=(1,), scaling_rule=rule,
                      lr_multiplier=10.0, token_multiples=(1.0, 2.0))
    corpus = Step("corpus", build_step, tiny_build_config())
    train = TrainConfig(eval_max_tokens=64, eval_batch_size=4, sample_prompts=(), peak_flops=1e11,
                        schedule=ScheduleConfig(kind="wsd", warmup_fraction=0.2, decay_fraction=0.2, min_lr_ratio=0.0))
    # One thread a run: on a busy machine torch's spinning threads cost more than tiny runs gain from them.
    return [corpus, *ladder_steps(plan_ladder(spec), corpus, MixtureConfig(weights={"code": 0.5, "prose": 0.5}), train,
                                  L_inf=None, threads=1, hero_threads=1, num_bootstrap=100)]


@pytest.mark.slow
def test_a_tiny_grid_ladder_forks_its_branches_and_registers_the_heros_curve_before_it_trains(tmp_path):
    lab = tmp_path / "lab"
    steps = tiny_grid()
    # Three widths within 4x of each other: the registration gate refuses the fit, so the hero runs forced.
    report = Executor(lab, backend=InlinePool(), echo=False, force_registration=True).run(steps)
    assert report.ok, report.outcomes
    folders = {n.name: n.folder for n in report.plan.steps}

    # A branch is its trunk's run continued: at the 1x multiple, bit for bit the WSD run trained from step 0.
    branch = json.loads((folders["g-d16-x1-s0"] / "run.json").read_text())
    assert branch["parent"]["run"] == folders["g-d16-trunk-s0"].name and branch["parent"]["step"] == 16
    by_step = dict(zip(*RunReader(folders["g-d16-x1-s0"]).scalars("eval/macro/loss"), strict=True))
    straight = next(s for s in steps if s.name == "g-d16-x1-s0")
    alone = Step("g-d16-x1-alone", straight.fn, dataclasses.replace(straight.config, fork=None),
                 deps=(steps[0],))
    solo = Executor(lab, backend=InlinePool(), echo=False).run([steps[0], alone])
    solo_folder = next(n.folder for n in solo.plan.steps if n.name == "g-d16-x1-alone")
    solo_by_step = dict(zip(*RunReader(solo_folder).scalars("eval/macro/loss"), strict=True))
    assert by_step[20] == solo_by_step[20]

    fit = json.loads(next(folders["g-fit"].glob("fit.json")).read_text())
    assert fit["L_inf"]["mode"] == "grid" and fit["L_inf"]["text"].startswith("estimated from the rungs: E = ")
    assert fit["L_inf"]["lo"] <= fit["L_inf"]["value"] <= fit["L_inf"]["hi"]
    assert [c["fraction"] for c in fit["curve"]] == list(CURVE_FRACTIONS)
    assert all(c["lo"] <= c["point"] <= c["hi"] for c in fit["curve"])
    assert {r["name"] for r in fit["rungs"]} == {f"d{w}-x{m}" for w in (16, 24, 32) for m in (1, 2)}
    assert fit["backtest"]["method"].startswith("leave-largest-width-out")  # two single-seed widths: no noise dof
    assert fit["law"]["form"].startswith("L(N,D)") and fit["curve_law"]["form"].startswith("L(N,S1,S2)")
    assert fit["prediction"]["point"] == fit["curve"][-1]["point"] and fit["grid"]["difference_check"]["pairs"] == 3

    # Registered before the hero trained (its run.json, written before step 0, names the entry), the whole
    # curve with it.
    (entry,) = registry.history(lab, "g/hero/eval/macro/loss")
    hero = json.loads((folders["g-hero"] / "run.json").read_text())
    assert hero["prediction"]["registry"] == {"name": "g/hero/eval/macro/loss", "seq": 1}
    assert hero["prediction"]["curve"] == fit["curve"] == entry["details"]["curve"]
    assert entry["details"]["L_inf"]["mode"] == "grid"
    assert (entry["kind"], entry["forced"]) == ("refusal", True) and not fit["gate"]["registered"]
    assert "span of N" in " ".join(fit["gate"]["reasons"]) and hero["prediction"]["forced"] is True
