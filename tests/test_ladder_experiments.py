"""The built-in long and isoFLOP ladders as planned: reach, shapes, and the data step they share."""

from __future__ import annotations

from glasslab.experiments import isoflop_ladder, long_ladder
from glasslab.lab import make_plan
from glasslab.ladder.plan import plan_ladder


def test_long_ladder_reaches_100x_with_rungs_over_10x_where_non_embedding_compute_dominates():
    plan = plan_ladder(long_ladder.spec())
    flops = [r.law_flops for r in plan.rungs]
    assert flops == sorted(flops) and flops[-1] / flops[0] >= 10
    assert plan.hero.law_flops / flops[-1] >= 100 and plan.hero.flops / plan.rungs[-1].flops >= 30
    for rung in (*plan.rungs, plan.hero):
        m = rung.model
        head_share = m.head_flops_per_token() / m.flops_per_token(rung.seq_len)
        assert head_share < 0.5, (rung.name, head_share)  # non-embedding compute dominates every run
        assert rung.steps >= 1000 and abs(rung.tokens_per_param / 20 - 1) < 0.05
        assert m.n_layers == max(2, round(m.d_model / 12))
    assert all(len(r.seeds) >= 4 for r in plan.rungs)


def test_isoflop_ladder_has_four_sizes_per_budget_and_shares_the_long_ladders_data(tmp_path):
    plan = plan_ladder(isoflop_ladder.spec())
    assert plan.mode == "isoflop"
    budgets = {}
    for rung in plan.rungs:
        budgets.setdefault(rung.name.split("-")[0], []).append(rung)
    assert len(budgets) >= 3 and all(len(sizes) >= 4 for sizes in budgets.values())
    # Each budget has sizes on both sides of the 20-tokens-per-parameter rule.
    for sizes in budgets.values():
        ratios = [r.tokens_per_param for r in sizes]
        assert min(ratios) < 20 < max(ratios)
    assert plan.hero.flops == plan_ladder(long_ladder.spec()).hero.flops
    long_data = {s.name: s for s in make_plan(long_ladder.steps(), tmp_path).steps}["data"]
    iso_data = {s.name: s for s in make_plan(isoflop_ladder.steps(), tmp_path).steps}["data"]
    assert long_data.folder == iso_data.folder


def test_the_smoke_ladders_reach_as_far_on_the_same_data_step(tmp_path):
    full, smoke = plan_ladder(long_ladder.spec()), plan_ladder(long_ladder.smoke_spec())
    reach = [p.hero.law_flops / max(r.law_flops for r in p.rungs) for p in (full, smoke)]
    assert abs(reach[1] / reach[0] - 1) < 0.05 and smoke.hero.flops < full.hero.flops / 20
    folders = [{s.name: s for s in make_plan(steps, tmp_path).steps}["data"].folder
               for steps in (long_ladder.steps(), long_ladder.smoke_steps(), isoflop_ladder.smoke_steps())]
    assert len(set(folders)) == 1
    iso = [s for s in isoflop_ladder.smoke_steps() if s.name.startswith("isoflop-smoke-C")]
    assert len({s.name.split("-")[2] for s in iso}) == 3 and len(iso) >= 8
