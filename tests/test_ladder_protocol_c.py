"""Protocol (c) is frozen: it differs from (a) in mixture, architecture and context, plans without training."""

from glasslab.experiments import selfcal_ladder, selfcal_ladder_128, selfcal_ladder_dense
from glasslab.ladder.plan import plan_ladder


def test_protocol_c_differs_from_a_and_b_in_two_of_mixture_architecture_context():
    a, b, c = selfcal_ladder.spec(), selfcal_ladder_128.spec(), selfcal_ladder_dense.spec()
    assert c.base_model.moe is None and a.base_model.moe is not None and b.base_model.moe is not None
    assert c.seq_len == 128 != a.seq_len
    assert selfcal_ladder_dense.MIXTURE.weights == {"code": 0.5, "prose": 0.5}
    assert c.seeds_per_rung == (2,)


def test_protocol_c_plans_its_grid_and_hero():
    plan = plan_ladder(selfcal_ladder_dense.spec())
    assert plan.mode == "grid" and len(plan.rungs) == 16 and plan.hero.model.moe is None
    assert len(selfcal_ladder_dense.steps()) == 43
