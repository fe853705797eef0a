"""``glasslab run tests/store_chain.py``: the demo's data → ladder → fit → hero chain cut to seconds, for the
object-store lab's two-node test (``tests/test_store_lab.py``): the demo's recipe on 40 KB per domain, three
rungs at a quarter of the demo's tokens and a hero that checkpoints every 8 steps, no downstream tasks."""

from __future__ import annotations

import dataclasses

from glasslab.experiments.demo import L_INF, L_INF_SWEEP, MIXTURE, QUICK, data_step, ladder_spec, train_recipe
from glasslab.lab import Step
from glasslab.ladder.plan import plan_ladder
from glasslab.ladder.steps import ladder_steps

LADDER = "store"
SIZE = dataclasses.replace(QUICK, max_source_bytes=40_000, tokens_per_param=0.25, min_steps=16, eval_max_tokens=256,
                           checkpoint_interval=8)


def steps() -> list[Step]:
    """The data build, three single-seed rungs (widths 16–32), their fit and a width-48 hero."""
    spec = dataclasses.replace(ladder_spec(SIZE), name=LADDER, widths=(16, 24, 32), hero_width=48)
    train = dataclasses.replace(train_recipe(SIZE), eval_tasks=())
    data = data_step(SIZE)
    return [data, *ladder_steps(plan_ladder(spec), data, MIXTURE, train, L_inf=L_INF, sweep=L_INF_SWEEP,
                                threads=1, hero_threads=1, num_bootstrap=50)]
