"""Protocol (c) is frozen: it differs from (a) in mixture, architecture and context, plans without training."""

from glasslab.experiments import selfcal_ladder, selfcal_ladder_128, selfcal_ladder_dense
from glasslab.ladder.plan import grid_cost, plan_ladder


def test_protocol_c_differs_from_a_and_b_in_two_of_mixture_architecture_context():
    a, b, c = selfcal_ladder.spec(), selfcal_ladder_128.spec(), selfcal_ladder_dense.spec()
    assert c.base_model.moe is None and a.base_model.moe is not None and b.base_model.moe is not None
    assert c.seq_len == 128 != a.seq_len
    assert selfcal_ladder_dense.MIXTURE.weights == {"code": 0.5, "prose": 0.5}
    assert c.seeds_per_rung == (2,) and c.token_multiples == selfcal_ladder.WIDE_MULTIPLES


def test_protocol_c_plans_its_grid_and_hero_on_the_default_grid():
    plan = plan_ladder(selfcal_ladder_dense.spec())
    assert plan.mode == "grid" and len(plan.rungs) == 12 and plan.hero.model.moe is None
    assert len(selfcal_ladder_dense.steps()) == 35  # data, 8 trunks, 24 branches, fit, hero
    # Every width keeps its three multiples (none under ×0.5), and the grid spans ≥ 10× in N (the gate's rule).
    for trunk in plan.trunks:
        multiples = sorted(r.name.split("-x")[1] for r in plan.rungs if r.trunk == trunk.name)
        assert multiples == ["0.5", "1", "2"], trunk.name
    line = grid_cost(plan)
    assert "span of N: ×17.8 non-embedding, ×7.3 active; hero ×5.7 the top width's N" in line
    assert "CPU-hours" in line


def test_the_default_grid_spans_far_more_n_than_b_and_keeps_every_width():
    wide, narrow = plan_ladder(selfcal_ladder.wide_spec()), plan_ladder(selfcal_ladder_128.spec())
    span = lambda plan: (max(t.model.param_counts()["active_non_embedding"] for t in plan.trunks)  # noqa: E731
                         / min(t.model.param_counts()["active_non_embedding"] for t in plan.trunks))
    assert span(wide) > 2 * span(narrow) and span(wide) >= 10
    assert len(wide.rungs) == 3 * len(wide.trunks) == 3 * len(selfcal_ladder.WIDE_WIDTHS)
